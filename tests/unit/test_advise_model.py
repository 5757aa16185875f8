"""The hotspot advisor's simulation, recommendation and findings (pure, no I/O)."""

from __future__ import annotations

import math
import random
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import SaltScheme, SaltSchemeError, fields
from saltedtable.advise import (
    DEFAULT_TARGET,
    Access,
    Advice,
    advise,
    format_key,
    plan_sample,
)

HOT_TENANT = b"tenant007"
START_MS = 1_700_000_000_000


def skewed_workload(lines: int = 20_000, tenants: int = 50, factor: int = 40) -> list[Access]:
    """One hour of writes keyed tenant#epoch-ms; tenant007 writes ``factor`` x the others."""
    rnd = random.Random(7)
    weights = [factor if t == 7 else 1 for t in range(tenants)]
    out = []
    for ms in sorted(rnd.randrange(3_600_000) for _ in range(lines)):
        tenant = rnd.choices(range(tenants), weights)[0]
        key = f"tenant{tenant:03d}#{START_MS + ms}".encode()
        out.append(Access(key, 1.0, (START_MS + ms) / 1000))
    return out


@cache
def skewed_advice() -> Advice:
    """The advice on the default skewed workload (computed once: several tests read it)."""
    return advise(skewed_workload())


def codes(advice: Advice) -> set[str]:
    """The codes of the advice's findings."""
    return {f.code for f in advice.findings}


# -- the skewed workload ---------------------------------------------------------------


def test_unsalted_hot_range_is_the_busy_tenant() -> None:
    """Unsalted, the hottest tablet lies inside tenant007's range and is far above the mean."""
    unsalted = skewed_advice().simulation(1)
    assert unsalted.hottest.first_key.startswith(HOT_TENANT + b"#")
    assert unsalted.hottest.last_key.startswith(HOT_TENANT + b"#")
    assert unsalted.max_mean > 5
    assert unsalted.hottest.ratio > 5


def test_recommends_smallest_n_under_the_target() -> None:
    """The recommended N brings max/mean under 1.5, and every smaller candidate does not."""
    advice = skewed_advice()
    assert advice.target == DEFAULT_TARGET == 1.5
    assert advice.recommended is not None
    assert advice.recommended > 1
    assert advice.simulation(advice.recommended).max_mean <= 1.5
    for sim in advice.simulations:
        if sim.buckets < advice.recommended:
            assert sim.max_mean > 1.5


def test_salting_lowers_the_ratio_as_n_grows() -> None:
    """More buckets spread the tenant's write tail: max/mean falls from N=1 to N=16."""
    ratios = [skewed_advice().simulation(n).max_mean for n in (1, 2, 4, 8, 16)]
    assert ratios == sorted(ratios, reverse=True)


def test_rule_of_thumb_is_the_unsalted_ratio_rounded_up() -> None:
    """The starting point is ceil(hottest / mean) of the unsalted layout, as in the article."""
    advice = skewed_advice()
    assert advice.rule_of_thumb == math.ceil(advice.simulation(1).max_mean)


def test_tenant_time_keys_get_the_within_prefix_note_not_the_monotonic_warning() -> None:
    """tenant#timestamp keys rise within each tenant, not as a whole key."""
    found = codes(skewed_advice())
    assert "monotonic-within-prefix" in found
    assert "monotonic-keys" not in found
    assert "hot-key" not in found


def test_read_cost_columns() -> None:
    """N sub-scans; a naive limit read fetches N x limit rows, a paged one N x ceil(limit/N)."""
    advice = advise(skewed_workload(2_000), candidates=(1, 8, 64), scan_limit=100)
    costs = [
        (s.buckets, s.sub_scans, s.naive_limit_rows, s.paged_limit_rows) for s in advice.simulations
    ]
    assert costs == [(1, 1, 100, 100), (8, 8, 800, 104), (64, 64, 6400, 128)]


def test_java_hash_scans_2n_minus_1_prefixes() -> None:
    """hash='java' has 2N-1 prefixes; the cost counts every sub-scan."""
    advice = advise(
        skewed_workload(2_000), candidates=(4,), scheme_for=lambda n: SaltScheme(n, hash="java")
    )
    assert advice.simulation(4).sub_scans == 7


def test_key_part_by_tenant_cannot_spread_one_tenant() -> None:
    """Hashing only the tenant keeps each tenant's tail in one bucket: the hot spot stays."""
    advice = advise(
        skewed_workload(10_000),
        candidates=(16,),
        scheme_for=lambda n: SaltScheme(n, key_part=fields(1, b"#")),
    )
    assert advice.simulation(16).max_mean > 3
    assert advice.recommended is None
    assert "target-unreachable" in codes(advice)


# -- findings -------------------------------------------------------------------------


def test_timestamp_leading_keys_warn_monotonic() -> None:
    """Keys that start with the write time are flagged, and salting with more N helps."""
    rnd = random.Random(3)
    accesses = []
    for i in range(10_000):
        ms = START_MS + i * 100 + rnd.randrange(200)  # concurrent writers: slightly out of order
        accesses.append(Access(f"{ms}#user{rnd.randrange(1000)}".encode(), 1.0, ms / 1000))
    accesses.sort(key=lambda a: a.time or 0.0)
    advice = advise(accesses)
    warning = next(f for f in advice.findings if f.code == "monotonic-keys")
    assert warning.severity == "warning"
    assert "rises with time" in warning.message
    assert advice.simulation(32).max_mean < advice.simulation(1).max_mean / 3


def test_sequence_numbers_in_arrival_order_warn_monotonic() -> None:
    """Without a time column, a rising leading number in line order is flagged too."""
    accesses = [Access(b"%d-order" % i) for i in range(1, 5_001)]
    advice = advise(accesses, ordered=True)
    assert advice.time_axis == "order"
    warning = next(f for f in advice.findings if f.code == "monotonic-keys")
    assert "rises with time (1-order ... 5000-order)" in warning.message


def test_rising_numbers_in_part_of_the_traffic_warn_monotonic() -> None:
    """Half the lines led by a rising sequence, half random users: still flagged."""
    rnd = random.Random(4)
    accesses = [
        Access(b"%d-event" % i if rnd.random() < 0.5 else b"user%04d" % rnd.randrange(9999))
        for i in range(8_000)
    ]
    advice = advise(accesses, ordered=True)
    warning = next(f for f in advice.findings if f.code == "monotonic-keys")
    assert "leading number (of 5" in warning.message


def test_single_hot_key_warns_that_no_salt_can_split_it() -> None:
    """One key with more than target/T of the load: hot-key warning and no recommendation."""
    rnd = random.Random(5)
    accesses = [Access(b"user%05d" % rnd.randrange(10_000)) for _ in range(20_000)]
    accesses += [Access(b"celebrity")] * 2_000
    rnd.shuffle(accesses)
    advice = advise(accesses)
    warning = next(f for f in advice.findings if f.code == "hot-key")
    assert "celebrity" in warning.message
    assert "salting" in warning.message
    assert advice.top_keys[0][0] == b"celebrity"
    assert advice.floor > advice.target
    assert advice.recommended is None
    assert all(s.max_mean >= advice.floor - 1e-9 for s in advice.simulations)


def test_hot_key_with_counts() -> None:
    """A count column weighs the keys: a key below target/T of the load is no warning."""
    accesses = [Access(b"k%04d" % i, 1.0) for i in range(1_000)]
    quiet = advise([*accesses, Access(b"k0500x", 20.0)], tablets=32)
    loud = advise([*accesses, Access(b"k0500x", 200.0)], tablets=32)
    assert "hot-key" not in codes(quiet)
    assert "hot-key" in codes(loud)


def test_uniform_load_needs_no_salt() -> None:
    """Random keys spread evenly already: N=1 is recommended and nothing is flagged."""
    rnd = random.Random(9)
    accesses = [Access(b"user%06d" % rnd.randrange(1_000_000)) for _ in range(5_000)]
    advice = advise(accesses)
    assert advice.recommended == 1
    assert advice.findings == ()


def test_sorted_key_dump_is_one_window() -> None:
    """A sorted key list without times is a dump: one window, a note, no monotonic warning."""
    accesses = [Access(b"key%05d" % i) for i in range(5_000)]
    advice = advise(accesses)
    assert advice.time_axis == "none"
    assert advice.windows == 1
    assert codes(advice) == {"no-time"}
    assert advice.simulation(1).max_mean == pytest.approx(1.0, abs=0.01)  # 5000 keys / 32


def test_few_keys_and_small_sample_warnings() -> None:
    """Fewer keys than tablets shrinks T; few lines per cell warns that chance dominates."""
    few = advise([Access(b"a"), Access(b"c"), Access(b"b")], tablets=32)
    assert few.tablets == 3
    assert "few-keys" in codes(few)
    rnd = random.Random(1)
    small = advise(
        [Access(b"u%d" % rnd.randrange(100), 1.0, float(i)) for i in range(300)], windows=10
    )
    assert "small-sample" in codes(small)


def test_explicit_windows_are_equal_time_spans() -> None:
    """windows=W cuts [first time, last time] into W equal spans."""
    accesses = [Access(b"k%d" % i, 1.0, float(i)) for i in range(101)]
    advice = advise(accesses, windows=4, tablets=4)
    assert advice.window_edges == (0.0, 25.0, 50.0, 75.0, 100.0)
    assert [round(sum(w)) for w in advice.simulation(1).loads] == [25, 25, 25, 26]


# -- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accesses", "kwargs", "match"),
    [
        ([], {}, "empty"),
        ([Access(b"a")], {"tablets": 0}, "tablets"),
        ([Access(b"a")], {"target": 1.0}, "target"),
        ([Access(b"a")], {"windows": 0}, "windows"),
        ([Access(b"a")], {"scan_limit": 0}, "scan_limit"),
        ([Access(b"a")], {"candidates": (0,)}, "candidates"),
        ([Access(b"")], {}, "empty"),
        ([Access(b"a", -1.0)], {}, "counts"),
        ([Access(b"a", 0.0)], {}, "no load"),
        ([Access(b"a", 1.0, 1.0), Access(b"b")], {}, "every access"),
    ],
)
def test_bad_arguments_raise_value_error(
    accesses: list[Access], kwargs: dict[str, object], match: str
) -> None:
    """Bad samples and settings raise ValueError naming the problem."""
    with pytest.raises(ValueError, match=match):
        advise(accesses, **kwargs)  # type: ignore[arg-type]


def test_scheme_errors_pass_through() -> None:
    """A candidate the scheme rejects (phoenix above 256) raises SaltSchemeError."""
    with pytest.raises(SaltSchemeError):
        advise(
            [Access(b"a")], candidates=(512,), scheme_for=lambda n: SaltScheme(n, hash="phoenix")
        )


# -- properties ------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(min_size=1, max_size=6), st.integers(1, 5), st.integers(0, 50)),
        min_size=1,
        max_size=80,
    ),
    st.integers(1, 8),
)
def test_loads_are_conserved_and_ratio_is_bounded(
    rows: list[tuple[bytes, int, int]], tablets: int
) -> None:
    """Every layout keeps the whole load, and 1 <= max/mean <= T."""
    accesses = [Access(k, float(c), float(t)) for k, c, t in rows]
    advice = advise(accesses, tablets=tablets, candidates=(1, 3, 8))
    total = sum(c for _, c, _ in rows)
    for sim in advice.simulations:
        assert sum(map(sum, sim.loads)) == pytest.approx(total)
        assert 1.0 - 1e-9 <= sim.max_mean <= advice.tablets + 1e-9
        assert len(sim.tablet_first_keys) == advice.tablets


# -- plan_sample, format_key -----------------------------------------------------------


def test_plan_sample_splits_in_proportion_to_size() -> None:
    """Rows follow the bytes per tablet, the ranges tile the table, and they add up."""
    plan = plan_sample([(b"b", 10), (b"c", 20), (b"", 40)], 8)
    assert plan == [(None, b"b", 2), (b"b", b"c", 2), (b"c", None, 4)]


def test_plan_sample_merges_tiny_ranges_and_handles_no_samples() -> None:
    """Ranges too small for one row merge into the next; no samples means one range."""
    assert plan_sample([(b"b", 10), (b"c", 11), (b"", 40)], 8) == [
        (None, b"b", 2),
        (b"b", None, 6),
    ]
    assert plan_sample([], 5) == [(None, None, 5)]
    many = plan_sample([(b"a%03d" % i, i) for i in range(1, 100)] + [(b"", 100)], 3)
    assert sum(rows for _, _, rows in many) == 3
    assert many[0][0] is None
    assert many[-1][1] is None


def test_format_key_escapes_non_printable_bytes() -> None:
    """Printable ASCII is shown as is; other bytes and backslashes are escaped."""
    assert format_key(b"user\x00\xff\\#1") == "user\\x00\\xff\\\\#1"
