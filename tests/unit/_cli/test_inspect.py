"""What `saltedtable inspect` works out from sample_row_keys (pure), and GC rule specs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from saltedtable import SCHEME_ROW_KEY, SaltScheme
from saltedtable._cli.inspect import (
    SUMMARY_ABOVE,
    Inspection,
    bucket_sizes,
    largest_buckets,
    size_histogram,
    skew,
    split_alignment,
)
from saltedtable._create import split_points
from saltedtable._guard.families import family_info, parse_family, parse_gc_rule

SCHEME = SaltScheme(4)


def cloud_samples(sizes: list[int]) -> list[tuple[bytes, int]]:
    """What Cloud Bigtable answers for a table split at every prefix: tablet ends and bytes."""
    out, total = [], 0
    prefixes = sorted(SCHEME.prefixes)
    out.append((prefixes[0], 0))  # the empty tablet before the first bucket
    for prefix, size in zip([*prefixes[1:], b""], sizes, strict=True):
        total += size
        out.append((prefix, total))
    return out


def test_a_table_created_split_at_every_prefix_is_aligned_and_even() -> None:
    samples = cloud_samples([100, 100, 100, 100])
    assert split_points(SCHEME) == sorted(SCHEME.prefixes)
    aligned, missing = split_alignment(SCHEME, samples)
    assert (aligned, missing) == (sorted(SCHEME.prefixes), [])
    sizes = bucket_sizes(SCHEME, samples)
    assert sizes == {0: 100, 1: 100, 2: 100, 3: 100}
    assert skew(sizes) == 1.0


def test_a_hot_bucket_shows_as_skew() -> None:
    sizes = bucket_sizes(SCHEME, cloud_samples([100, 700, 100, 100]))
    assert sizes[1] == 700
    assert skew(sizes) == pytest.approx(700 / 250)


def test_an_unsplit_table_shares_its_bytes_and_misses_every_boundary() -> None:
    samples = [(b"", 400)]  # one tablet
    sizes = bucket_sizes(SCHEME, samples)
    assert sizes == {0: 100, 1: 100, 2: 100, 3: 100}
    assert split_alignment(SCHEME, samples) == ([], sorted(SCHEME.prefixes))


def test_bytes_outside_the_buckets_and_the_record_row_are_left_out() -> None:
    samples = [(b"0-", 50), (b"3-zz", 150), (SCHEME_ROW_KEY, 250), (b"", 260)]
    sizes = bucket_sizes(SCHEME, samples)
    assert sum(sizes.values()) == pytest.approx(100 + 100)
    assert skew({0: 0.0}) is None


def test_a_cutoff_layout_is_also_split_where_the_legacy_key_space_resumes() -> None:
    import datetime as dt

    from saltedtable import CutoffPolicy, epoch_field

    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
    points = split_points(SCHEME, cutoff, extra=[b"legacy-m"])
    assert points == sorted([*SCHEME.prefixes, b"3.", b"legacy-m"])


def test_the_report_text_and_json_name_problems() -> None:
    report = Inspection(table="events", problems=["no layout record"])
    assert "PROBLEM: no layout record" in report.text()
    assert report.as_json()["problems"] == ["no layout record"]
    assert "no problems found" in Inspection(table="t").text()


def test_families_are_shown_by_name_in_text_and_json() -> None:
    names = ["ts", "saltedtable", "cf", "counts"]
    report = Inspection(
        table="events",
        families=[{"name": n, "gc_rule": "none", "aggregate": None} for n in names],
    )
    assert [f["name"] for f in report.as_json()["families"]] == sorted(names)
    shown = [line.split(":")[0].strip() for line in report.text().splitlines() if ": gc " in line]
    assert shown == sorted(names)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("cf:max_age=0d", "max_age"),
        ("cf:max_age=soon", "max_age needs a number and s, m, h or d"),
        ("cf:max_versions=0", "max_versions"),
        ("cf:max_age=1d|", "an empty part"),
        ("cf:ttl=1d", "expected max_age"),
        ("cf:agg=avg", "aggregate 'avg'"),
        ("-cf", "not a valid Bigtable family id"),
    ],
)
def test_bad_family_specs_are_refused_naming_the_part(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_family(spec)


@pytest.mark.parametrize(
    "spec",
    [
        "cf:max_age=99999999999999d",  # beyond datetime.timedelta (an OverflowError before)
        "cf:max_age=315576000001s",  # one second beyond the longest Duration
        "cf:max_age=3652501d",
        "cf:max_age=0s",
        "cf:max_age=-1d",
        "cf:max_age=\u0663d",  # an Arabic-Indic digit: a number, but not ASCII
        "cf:max_versions=1|max_age=99999999999999999999h",  # inside a union
    ],
)
def test_a_max_age_out_of_range_names_the_option_and_the_range(spec: str) -> None:
    """max_age is 1s to 315,576,000,000s (about 10,000 years, a Duration's limit)."""
    with pytest.raises(ValueError, match=r"max_age .*from 1s to 315576000000s") as caught:
        parse_family(spec)
    assert "family 'cf'" in str(caught.value)


@pytest.mark.parametrize(
    "spec",
    [
        "cf:max_versions=2147483648",  # beyond int32 ("Value out of range" before)
        "cf:max_versions=99999999999999999999",
        "cf:max_versions=0",
        "cf:max_versions=-3",
        "cf:max_versions=\u00b2",  # a superscript two: isdigit() but not int()
        "cf:max_versions=",
    ],
)
def test_max_versions_out_of_range_names_the_option_and_the_range(spec: str) -> None:
    """max_versions is a whole number from 1 to 2,147,483,647 (an int32)."""
    with pytest.raises(ValueError, match=r"max_versions .*from 1 to 2147483647") as caught:
        parse_family(spec)
    assert "family 'cf'" in str(caught.value)


def test_the_largest_gc_values_are_accepted() -> None:
    """The ends of both ranges are valid rules."""
    longest = family_info(*parse_family("cf:max_age=315576000000s"))
    assert longest.gc_rule == "max_age=3652500d"
    assert family_info(*parse_family("cf:max_age=3652500d")).gc_rule == "max_age=3652500d"
    most = family_info(*parse_family("cf:max_versions=2147483647"))
    assert most.gc_rule == "max_versions=2147483647"


def test_family_specs() -> None:
    assert parse_gc_rule("none") is None
    assert family_info(*parse_family("ts:max_age=90m")).gc_rule == "max_age=90m"
    both = family_info(*parse_family("x:max_age=1d&max_versions=1"))
    assert (both.gc_rule, both.may_drop_latest) == ("(max_age=1d and max_versions=1)", False)
    assert family_info(*parse_family("n:agg=max")).aggregate == "int64 max"


# -- many buckets: a summary -----------------------------------------------------------------


def bucket_report(buckets: int) -> Inspection:
    """A report of ``buckets`` buckets of 1,000 + 10 x id bytes (bucket ``buckets - 1`` largest)."""
    sizes = {b: 1_000.0 + 10 * b for b in range(buckets)}
    return Inspection(table="t", scheme="s", buckets=sizes, skew=skew(sizes), samples=5)


def test_a_few_buckets_are_listed_one_a_line_as_before() -> None:
    """Up to SUMMARY_ABOVE buckets, every bucket has its line, and no summary is shown."""
    text = bucket_report(SUMMARY_ABOVE).text()
    lines = [line for line in text.splitlines() if line.startswith("  bucket ")]
    assert lines[0] == "  bucket 0: ~1,000 bytes"
    assert len(lines) == SUMMARY_ABOVE
    assert "largest" not in text
    assert "--all-buckets" not in text


def test_many_buckets_are_summarised_and_all_buckets_lists_them() -> None:
    """4,096 buckets: ten largest, the smallest, a histogram of 8 spans summing to 4,096, and
    a pointer to --all-buckets, in some 30 lines; all_buckets=True lists every bucket."""
    report = bucket_report(4096)
    text = report.text()
    assert len(text.splitlines()) < 40
    assert "  largest 10:\n    bucket 4095: ~41,950 bytes\n    bucket 4094: ~41,940 bytes" in text
    assert "  smallest: bucket 0: ~1,000 bytes" in text
    spans = [line for line in text.splitlines() if line.startswith("    ~")]
    assert len(spans) == 8
    assert spans[0].startswith("    ~1,000 to ~6,119 bytes:")
    assert sum(int(line.split(":")[1].split()[0].replace(",", "")) for line in spans) == 4096
    assert "  every bucket: --all-buckets (or --json)" in text
    every = report.text(all_buckets=True)
    assert sum(line.startswith("  bucket ") for line in every.splitlines()) == 4096
    assert len(report.as_json()["bucket_bytes"]) == 4096


def test_equal_buckets_make_one_span() -> None:
    """When every bucket has the same size the histogram is one line."""
    sizes = dict.fromkeys(range(100), 500.0)
    assert size_histogram(sizes, 8) == [(500.0, 500.0, 100)]
    assert size_histogram({}, 8) == []
    text = Inspection(table="t", buckets=sizes, skew=1.0).text()
    assert "    ~500 to ~500 bytes:    100 buckets " + "#" * 30 in text


@given(st.dictionaries(st.integers(0, 5000), st.floats(0, 1e12), min_size=1), st.integers(1, 20))
def test_the_histogram_counts_every_bucket_once_in_ordered_spans(
    sizes: dict[int, float], bins: int
) -> None:
    """The spans cover smallest to largest in order, and count every bucket exactly once."""
    spans = size_histogram(sizes, bins)
    assert sum(n for _, _, n in spans) == len(sizes)
    assert spans[0][0] == min(sizes.values())
    assert spans[-1][1] == pytest.approx(max(sizes.values()))
    for (_, high, _), (low, _, _) in itertools.pairwise(spans):
        assert high == pytest.approx(low)
    top = largest_buckets(sizes, 3)
    assert [size for _, size in top] == sorted(sizes.values(), reverse=True)[:3]


def test_prefix_sizes_tell_bucket_5_of_n8_from_bucket_5_of_n64() -> None:
    """``5-`` and ``05-`` are measured apart; a prefix two epochs share is named as shared."""
    from saltedtable._cli.inspect import epoch_sizes, prefix_sizes

    n8, n64, n16 = SaltScheme(8), SaltScheme(64), SaltScheme(16)
    # 10 bytes before "5-" (spread over every prefix there), then 50 bytes inside "5-" only.
    samples = [(b"5-", 10), (b"5.", 60)]
    sizes = prefix_sizes([*n8.prefixes, *n64.prefixes], samples)
    assert sizes[b"5-"] == 50.0
    assert sizes[b"05-"] < 1.0
    report = epoch_sizes([("-inf", n8), ("2026-12-01T00:00:00+00:00", n64)], samples)
    assert report[0]["buckets"][5] == 50.0
    assert report[1]["buckets"][5] == sizes[b"05-"]
    assert report[1]["shared"] == []
    shared = epoch_sizes([("-inf", n16), ("2026-12-01T00:00:00+00:00", n64)], samples)
    assert shared[1]["shared"] == list(range(16))


def test_a_window_is_shown_in_text_and_json() -> None:
    """The record's window: its bucket counts, start, state and lead."""
    window = {
        "old_buckets": 8,
        "new_buckets": 64,
        "start": "2026-12-01T00:00:00+00:00",
        "state": "open",
        "min_lead_s": 120.0,
    }
    report = Inspection(table="users", window=window)
    assert (
        "window: 8 -> 64 buckets from 2026-12-01T00:00:00+00:00, open (lead 120 s)" in report.text()
    )
    assert report.as_json()["window"] == window
    assert "window" not in Inspection(table="users").as_json()
