"""The hotspot advisor's simulation, recommendation and findings (pure, no I/O)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from saltedtable import SaltScheme, SaltSchemeError, fields
from saltedtable._scheme.hot import propose_split
from saltedtable.advise import (
    DEFAULT_TARGET,
    Access,
    Advice,
    advise,
    format_key,
)
from saltedtable.advise.input import read_file
from tests.scripts import load_script

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


def test_recommends_the_smallest_n_that_meets_the_target() -> None:
    """The recommended N meets 1.5 (interval at or below it, or within the noise floor);
    every smaller candidate does not."""
    advice = skewed_advice()
    assert advice.target == DEFAULT_TARGET == 1.5
    assert advice.recommended is not None
    assert advice.recommended > 1
    best = advice.simulation(advice.recommended)
    assert best.meets_target
    assert best.high <= 1.5 or best.max_mean <= advice.noise_floor_high
    for sim in advice.simulations:
        if sim.buckets < advice.recommended:
            assert not sim.meets_target
            assert sim.high > 1.5


def test_salting_lowers_the_ratio_as_n_grows() -> None:
    """More buckets spread the tenant's write tail: max/mean falls from N=1 to N=16."""
    ratios = [skewed_advice().simulation(n).max_mean for n in (1, 2, 4, 8, 16)]
    assert ratios == sorted(ratios, reverse=True)


def test_rule_of_thumb_is_the_corrected_unsalted_ratio_rounded_up() -> None:
    """The rule of thumb is ceil of the unsalted corrected max/mean to one decimal, as shown."""
    advice = skewed_advice()
    unsalted = advice.simulation(1)
    assert advice.rule_of_thumb_ratio == round(unsalted.corrected, 1)
    assert advice.rule_of_thumb == math.ceil(advice.rule_of_thumb_ratio)
    assert advice.rule_of_thumb > 5


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
    assert advice.hot_key_floor > advice.target
    assert advice.recommended is None
    # Every layout sits at the key's tablet level: the key plus a fair share of the rest.
    assert all(s.low <= advice.hot_key_floor <= s.high for s in advice.simulations)


def test_the_hot_key_warning_proposes_a_split_with_its_k_and_command() -> None:
    """The warning names the K that brings the key's tablet to the target, and the command."""
    rnd = random.Random(5)
    accesses = [Access(b"user%05d" % rnd.randrange(10_000)) for _ in range(20_000)]
    accesses += [Access(b"celebrity")] * 2_000
    rnd.shuffle(accesses)
    advice = advise(accesses)
    warning = next(f for f in advice.findings if f.code == "hot-key")
    n = max(s.buckets for s in advice.simulations)
    share = advice.top_keys[0][1]
    proposal = propose_split(
        "row",
        b"celebrity",
        share,
        buckets=n,
        tablets=advice.tablets,
        distinct=advice.distinct_keys,
        target=advice.target,
    )
    assert proposal is not None
    assert f"K={proposal.k} sub-rows" in warning.message
    assert f"saltedtable split TABLE --row celebrity -k {proposal.k}" in warning.message
    assert "95% interval" in warning.message


def test_hot_key_counts_the_rest_of_its_tablet() -> None:
    """A key with 3% of the load: its tablet holds it and a fair share of the rest, about
    1 + 31 x 0.03 = 1.93 times the mean for every N, so hot-key warns, and target-unreachable
    blames it rather than asking for larger candidates."""
    rnd = random.Random(1)
    accesses = [
        Access(b"config/global" if rnd.random() < 0.03 else b"doc/%06d" % rnd.randrange(10**6))
        for _ in range(10_000)
    ]
    advice = advise(accesses, candidates=(1, 8, 64, 256), resamples=100)
    share = advice.top_keys[0][1]
    assert advice.top_keys[0][0] == b"config/global"
    assert advice.hot_key_floor == pytest.approx(1 + 31 * share, abs=0.01)
    assert advice.recommended is None
    for sim in advice.simulations:
        assert sim.low <= advice.hot_key_floor <= sim.high + 0.05
    warning = next(f for f in advice.findings if f.code == "hot-key")
    assert "config/global" in warning.message
    unreachable = next(f for f in advice.findings if f.code == "target-unreachable")
    assert "see hot-key" in unreachable.message
    assert "--candidates" not in unreachable.message


def test_key_part_that_keeps_the_busy_tenant_in_one_bucket_is_named() -> None:
    """With key part fields(1), a tenant's rows share one bucket: target-unreachable says the
    hottest tablet's load hashes to one bucket (not "try larger --candidates"), and the
    within-prefix note does not claim that salting splits the tenant's end."""
    advice = advise(
        skewed_workload(10_000),
        candidates=(1, 4, 16, 64),
        resamples=100,
        scheme_for=lambda n: SaltScheme(n, key_part=fields(1, b"#")),
    )
    assert advice.recommended is None
    unreachable = next(f for f in advice.findings if f.code == "target-unreachable")
    assert "--candidates" not in unreachable.message
    assert "one bucket" in unreachable.message
    assert "tenant007" in unreachable.message
    note = next(f for f in advice.findings if f.code == "monotonic-within-prefix")
    assert "splits each end" not in note.message
    assert "tenant007's rows hash to one bucket" in note.message
    plain = next(f for f in skewed_advice().findings if f.code == "monotonic-within-prefix")
    assert "salting splits each end into N" in plain.message


def test_recommendation_far_above_the_rule_of_thumb_is_explained() -> None:
    """The article's per-key counts on 32 tablets: rule of thumb 5 but N = 32, because range B
    spans about 7 tablets; a note says so and points at --tablets. On one tablet per range the
    two agree and there is no note."""
    wide = advise(article_counts(200), **FAST | {"candidates": (1, 2, 4, 8, 16, 32)})
    assert (wide.rule_of_thumb, wide.recommended) == (5, 32)
    note = next(f for f in wide.findings if f.code == "wide-hot-range")
    assert note.severity == "note"
    assert "spans about 7 of the 32 tablets (from A#" in note.message
    assert "--tablets" in note.message
    narrow = advise(article_counts(200), tablets=5, **FAST)
    assert narrow.recommended == 4
    assert "wide-hot-range" not in codes(narrow)


def test_a_wide_hot_range_still_asks_for_larger_candidates() -> None:
    """Whole keys hashed, hot range wider than the largest candidate: salting would split it
    with more buckets, and target-unreachable says so."""
    advice = advise(article_counts(200), candidates=(1, 2, 4), **{"resamples": 100})
    assert advice.recommended is None
    unreachable = next(f for f in advice.findings if f.code == "target-unreachable")
    assert "try larger --candidates" in unreachable.message


def test_hot_key_with_counts() -> None:
    """A count column weighs the keys: a key whose tablet stays within the target (1% of the
    load: 1 + 31 x 0.01 = 1.3) is no warning; one with 2% (1.6) or 17% is."""
    accesses = [Access(b"k%04d" % i, 1.0) for i in range(1_000)]
    quiet = advise([*accesses, Access(b"k0500x", 10.0)], tablets=32)
    assert "hot-key" in codes(advise([*accesses, Access(b"k0500x", 20.0)], tablets=32))
    loud = advise([*accesses, Access(b"k0500x", 200.0)], tablets=32)
    assert "hot-key" not in codes(quiet)
    assert "hot-key" in codes(loud)


def test_uniform_load_needs_no_salt() -> None:
    """Random keys spread evenly already: N=1 is recommended; 5,000 accesses over a million keys
    see almost every key once, so a warning says this sample cannot show load at all."""
    rnd = random.Random(9)
    accesses = [Access(b"user%06d" % rnd.randrange(1_000_000)) for _ in range(5_000)]
    advice = advise(accesses)
    assert advice.recommended == 1
    assert codes(advice) == {"no-load-info"}
    denser = advise([Access(b"user%03d" % rnd.randrange(1_000)) for _ in range(20_000)])
    assert denser.recommended == 1
    assert denser.findings == ()


def test_rule_of_thumb_is_1_when_the_unsalted_layout_meets_the_target() -> None:
    """Uniform over 1,000 keys (31 or 32 a tablet), 50,000 accesses: N = 1 and rule of thumb 1,
    never "N ~ 2" next to a recommended N = 1."""
    rnd = random.Random(1)
    advice = advise([Access(b"acct%08d" % rnd.randrange(1_000)) for _ in range(50_000)], **FAST)
    assert advice.recommended == 1
    assert advice.simulation(1).meets_target
    assert advice.rule_of_thumb == 1
    assert advice.rule_of_thumb_ratio == round(advice.simulation(1).corrected, 1)


def test_few_keys_count_their_rounding_into_tablets() -> None:
    """40 equally busy keys on 32 tablets (tablets of 1 or 2 keys) measure about 1.6 by
    rounding alone: that is in the noise floor, N = 1 is recommended as uniform, and few-keys
    says why instead of target-unreachable blaming the candidates or small-sample the size."""
    rnd = random.Random(1)
    advice = advise([Access(b"acct%04d" % rnd.randrange(40)) for _ in range(20_000)], **FAST)
    assert advice.tablets == 32
    assert advice.simulation(1).max_mean > 1.5
    assert advice.simulation(1).verdict == "uniform"
    assert advice.recommended == 1
    assert advice.rule_of_thumb == 1
    # More lines won't help, and a key with its fair share (1/40) is no hot key.
    assert not {"target-unreachable", "small-sample", "hot-key"} & codes(advice)
    warning = next(f for f in advice.findings if f.code == "few-keys")
    assert "1 or 2 keys" in warning.message
    assert "1.60" in warning.message


def test_sorted_key_dump_is_one_window() -> None:
    """A sorted key list without times is a dump: one window, a note, no monotonic warning,
    and a warning that it shows storage, not load."""
    accesses = [Access(b"key%05d" % i) for i in range(5_000)]
    advice = advise(accesses)
    assert advice.time_axis == "none"
    assert advice.windows == 1
    assert codes(advice) == {"no-time", "no-load-info"}
    assert advice.simulation(1).max_mean == pytest.approx(1.0, abs=0.01)  # 5000 keys / 32


def test_key_dump_of_a_tenant_time_table_says_it_shows_no_load() -> None:
    """A sorted dump of tenant#timestamp keys (each key once, no time) cannot show where writes
    land: N = 1 comes with a no-load-info warning saying why."""
    dump = sorted((Access(a.key) for a in skewed_workload(5_000)), key=lambda a: a.key)
    advice = advise(dump, **FAST)
    assert advice.recommended == 1
    warning = next(f for f in advice.findings if f.code == "no-load-info")
    assert warning.severity == "warning"
    assert "by construction" in warning.message
    assert "storage, not" in warning.message


def test_each_key_once_in_one_auto_window_warns(demo: ModuleType) -> None:
    """A busy tenant writing 5x as often, 2,000 lines: too few for more than one window, so
    every key appears once in it and max/mean is 1 by construction; no-load-info and
    one-window say so (one-window suggests --windows), and 4 windows show the tenant's end."""
    rows = timed(demo.tenant_lines(2_000, factor=5))
    advice = advise(rows, **FAST)
    assert (advice.windows, advice.window_choice) == (1, "auto")
    assert {"no-load-info", "one-window", "monotonic-within-prefix"} <= codes(advice)
    warning = next(f for f in advice.findings if f.code == "one-window")
    assert "--windows 4" in warning.message
    finer = advise(rows, windows=4, **FAST)
    assert finer.simulation(1).corrected > 2.5
    assert finer.rule_of_thumb >= 3
    assert "no-load-info" not in codes(finer)


def test_access_sample_that_misses_cold_keys_warns_and_storage_lines_fix_it(
    demo: ModuleType,
) -> None:
    """2,000 accesses of the article's workload, one window, see few cold keys: tablets cut from
    the keys seen make it look even (unseen-keys warns). Listing every key as a count-0 line
    gives the table's storage back: rule of thumb 5, N = 4 on one tablet per range."""
    log = [Access(a.key) for a in timed(demo.article_lines(2_000))]
    advice = advise(log, tablets=5, **FAST)
    assert advice.windows == 1
    assert advice.rule_of_thumb < 3
    warning = next(f for f in advice.findings if f.code == "unseen-keys")
    assert "key,0" in warning.message
    storage = [
        Access(b"%s#user%04d" % (group, user), 0.0)
        for group in (b"A", b"B", b"C", b"D", b"E")
        for user in range(demo.ARTICLE_KEYS_PER_RANGE)
    ]
    full = advise(storage + log, tablets=5, **FAST)
    assert full.distinct_keys == 5_000
    assert "unseen-keys" not in codes(full)
    assert full.rule_of_thumb == 5
    assert full.recommended == 4


@pytest.mark.parametrize("with_times", [False, True])
def test_storage_lines_change_storage_only(demo: ModuleType, with_times: bool) -> None:
    """Count-0 lines (every key listed for storage, before the accesses, without a time) add
    keys to the tablets but no load: they stretch no time axis and raise no monotonic finding;
    the accesses alone decide the windows."""
    rows = list(demo.article_lines(4_000))
    log = [Access(k.encode(), 1.0, t if with_times else None) for k, _, t in rows]
    storage = [
        Access(b"%s#user%04d" % (group, user), 0.0)
        for group in (b"A", b"B", b"C", b"D", b"E")
        for user in range(demo.ARTICLE_KEYS_PER_RANGE)
    ]
    advice = advise(storage + log, tablets=5, **FAST)
    alone = advise(log, tablets=5, windows=advice.windows, **FAST)
    assert advice.time_axis == ("time" if with_times else "order")
    assert advice.window_edges == alone.window_edges
    assert advice.distinct_keys == 5_000
    assert not codes(advice) & {"monotonic-within-prefix", "monotonic-keys", "one-window"}
    assert advice.rule_of_thumb == 5


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


def test_tablet_key_ranges_match_the_tablets_loads() -> None:
    """40 keys on 32 tablets: tablet 0 holds k00 and k01, so a load on k01 is tablet 0's, and
    the hottest cell and the tablets' first keys say so."""
    accesses = [Access(b"k%02d" % i) for i in range(40)] + [Access(b"k01", 100.0)]
    unsalted = advise(accesses, candidates=(1,), resamples=20).simulation(1)
    assert unsalted.hottest.tablet == 0
    assert (unsalted.hottest.first_key, unsalted.hottest.last_key) == (b"k00", b"k01")
    assert unsalted.tablet_first_keys[:3] == (b"k00", b"k02", b"k03")


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
        ([Access(b"a", 1.0, 1.0), Access(b"b", 0.0), Access(b"c")], {}, "every access"),
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


# -- format_key -----------------------------------------------------------------------


def test_format_key_escapes_non_printable_bytes() -> None:
    """Printable ASCII is shown as is; other bytes and backslashes are escaped."""
    assert format_key(b"user\x00\xff\\#1") == "user\\x00\\xff\\\\#1"


# -- the reference workloads of examples/advise_demo.py ---------------------------------

DEMO = Path(__file__).resolve().parents[3] / "examples" / "advise_demo.py"
FAST: dict[str, Any] = {"candidates": (1, 2, 4, 8, 16), "resamples": 100}


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    """examples/advise_demo.py imported as a module (examples/ is not a package)."""
    return load_script("saltedtable_advise_demo", DEMO)


def timed(rows: Iterable[tuple[str, int, float]]) -> list[Access]:
    """Demo rows (key, count, time) as accesses."""
    return [Access(key.encode(), float(count), moment) for key, count, moment in rows]


def weighted(demo: ModuleType, rows: Iterable[tuple[str, int, float]]) -> list[Access]:
    """Demo rows summed per key: one weighted access per key, no time."""
    return [Access(key.encode(), float(count)) for key, count in demo.per_key(rows)]


def test_article_workload_weighted_gets_rule_5_and_at_most_8(demo: ModuleType) -> None:
    """The article's ranges at 5k/200k/5k/5k/5k a minute, one tablet each, as per-key counts:
    the unsalted ratio is 4.5, the rule of thumb 5, and the recommendation at most 8."""
    advice = advise(weighted(demo, demo.article_lines(220_000)), tablets=5, **FAST)
    assert advice.count_unit == 1.0  # per-key counts are accesses
    assert advice.simulation(1).corrected == pytest.approx(200_000 / 44_000, abs=0.05)
    assert advice.rule_of_thumb == 5
    assert advice.recommended is not None
    assert advice.recommended <= 8
    assert "small-sample" not in codes(advice)


def test_article_workload_sampled_access_by_access_gets_at_most_8(demo: ModuleType) -> None:
    """The same workload as 20,000 sampled accesses with times: one window, at most 8."""
    advice = advise(timed(demo.article_lines(20_000)), tablets=5, **FAST)
    assert advice.window_choice == "auto"
    assert advice.windows == 1  # the skew does not move: one window has the least noise
    assert advice.recommended is not None
    assert advice.recommended <= 8


def test_uniform_workload_gets_1_and_rule_of_thumb_1(demo: ModuleType) -> None:
    """Random keys evenly over an hour: N = 1, rule of thumb 1, every layout like uniform."""
    advice = advise(timed(demo.uniform_lines(5_000)), **FAST)
    assert advice.recommended == 1
    assert advice.rule_of_thumb == 1
    assert advice.rule_of_thumb_ratio == 1.0
    assert all(sim.verdict == "uniform" for sim in advice.simulations)
    assert advice.noise_floor > 1.1  # the raw max/mean is all noise ...
    assert all(sim.corrected < 1.05 for sim in advice.simulations)  # ... and corrected away


@pytest.mark.parametrize("as_weights", [False, True])
def test_one_hot_key_still_says_no_n_helps(demo: ModuleType, as_weights: bool) -> None:
    """A key with a tenth of the load: no recommendation, hot-key and target-unreachable,
    sampled access by access or as per-key counts."""
    rows = demo.hot_key_lines(10_000)
    accesses = weighted(demo, rows) if as_weights else timed(rows)
    advice = advise(accesses, **FAST)
    assert advice.recommended is None
    assert {"hot-key", "target-unreachable"} <= codes(advice)
    assert all(sim.verdict == "above" for sim in advice.simulations)


@pytest.mark.parametrize("lines", [20_000, 30_000])
def test_busy_tenant_gets_2_or_4(demo: ModuleType, lines: int) -> None:
    """A tenant writing 5x as often: rule of thumb 3, and N = 2 (borderline) or 4, never more."""
    advice = advise(timed(demo.tenant_lines(lines, factor=5)), **FAST)
    assert advice.rule_of_thumb == 3
    assert advice.recommended in (2, 4)
    assert advice.simulation(4).meets_target


def test_a_straddling_candidate_is_reported_as_inconclusive(demo: ModuleType) -> None:
    """When the candidate below the recommendation straddles the target, a note says the
    sample cannot separate the two and how many lines would."""
    advice = advise(timed(demo.tenant_lines(30_000, factor=5)), **FAST)
    assert advice.recommended == 4
    assert advice.simulation(2).verdict == "unclear"
    note = next(f for f in advice.findings if f.code == "inconclusive")
    assert note.severity == "note"
    assert "too small to separate N=2 from N=4" in note.message
    assert "lines would tell" in note.message


def test_moving_hot_spot_gets_finer_windows_than_a_standing_one(demo: ModuleType) -> None:
    """A tenant's moving write tail needs several windows; the article's standing skew one."""
    moving = advise(timed(demo.tenant_lines(20_000)), **FAST)
    standing = advise(timed(demo.article_lines(20_000)), tablets=5, **FAST)
    assert moving.windows >= 8
    assert standing.windows == 1
    assert moving.simulation(1).max_mean > 8  # the tail is resolved, not averaged away


def test_given_windows_are_kept(demo: ModuleType) -> None:
    """windows=W is used as given, and reported as such."""
    advice = advise(timed(demo.uniform_lines(2_000)), windows=3, **FAST)
    assert advice.windows == 3
    assert advice.window_choice == "given"


# -- weighted samples and noise --------------------------------------------------------


def test_small_sample_warns_for_weighted_samples_too() -> None:
    """key,count lines: the count unit decides the accesses, so 40 keys x 100 (a 1-in-100
    sample) is as small as 40 single accesses, and both get small-sample."""
    rnd = random.Random(2)
    keys = [b"k%03d" % rnd.randrange(1000) for _ in range(40)]
    single = advise([Access(k) for k in keys], tablets=8, **FAST)
    weighted_sample = advise([Access(k, 100.0) for k in keys], tablets=8, **FAST)
    assert weighted_sample.count_unit == 100.0
    assert weighted_sample.events == single.events == 40
    for advice in (single, weighted_sample):
        warning = next(f for f in advice.findings if f.code == "small-sample")
        assert "lines" in warning.message
    assert "units of 100" in next(
        f.message for f in weighted_sample.findings if f.code == "small-sample"
    )


def test_large_counts_are_many_accesses() -> None:
    """A per-key export with counts in the thousands is precise: each count is that many
    accesses (unit 1), so there is no small-sample warning."""
    rnd = random.Random(3)
    accesses = [Access(b"user%04d" % i, float(rnd.randrange(900, 1100))) for i in range(2_000)]
    advice = advise(accesses, **FAST)
    assert advice.count_unit == 1.0
    assert advice.events == sum(a.count for a in accesses)
    assert "small-sample" not in codes(advice)
    assert advice.recommended == 1


def article_counts(keys_per_range: int, *, cold: int = 0) -> list[Access]:
    """The article's minute as exact per-key counts (5k/200k/5k/5k/5k over equal ranges), in
    key order, plus ``cold`` keys with one access each."""
    out = []
    for group, rate in zip("ABCDE", (5_000, 200_000, 5_000, 5_000, 5_000), strict=True):
        out += [
            Access(b"%s#%06d" % (group.encode(), i), rate / keys_per_range)
            for i in range(keys_per_range)
        ]
    out += [Access(b"Z#cold%03d" % i, 1.0) for i in range(cold)]
    return sorted(out, key=lambda a: a.key)


def test_exact_per_key_counts_are_not_divided_down() -> None:
    """Counts of 500 and 20,000 (10 keys a range) are 220,000 accesses, not 440 in units of
    500: no small-sample, and one tablet per range recommends 4 (rule of thumb 5)."""
    advice = advise(article_counts(10), tablets=5, **FAST)
    assert advice.count_unit == 1.0
    assert advice.events == 220_000
    assert advice.count_unit_choice == "auto"
    assert not {"small-sample", "target-unreachable"} & codes(advice)
    assert advice.rule_of_thumb == 5
    assert advice.recommended == 4


def test_cold_keys_with_count_1_add_only_their_own_accesses() -> None:
    """60 keys with one access each add 60 accesses to a 220,000-access export, not five
    times the total, and are too few to suggest unseen keys."""
    plain = advise(article_counts(1_000), tablets=5, **FAST)
    with_cold = advise(article_counts(1_000, cold=60), tablets=5, **FAST)
    assert with_cold.events - plain.events == 60
    assert "unseen-keys" not in codes(with_cold)  # 60 stray count-1 keys in 5,060
    assert plain.recommended == with_cold.recommended == 4


@pytest.mark.parametrize("order", ["busiest first", "shuffled"])
def test_per_key_totals_in_any_order_are_one_window(order: str) -> None:
    """One line per key with counts that differ and no time are per-key totals, whatever
    their order: one window and the same advice as the same totals sorted by key."""
    by_key = article_counts(200)
    if order == "busiest first":
        lines = sorted(by_key, key=lambda a: -a.count)
    else:
        lines = random.Random(1).sample(by_key, len(by_key))
    for tablets in (5, 32):
        expected = advise(by_key, tablets=tablets, **FAST)
        advice = advise(lines, tablets=tablets, **FAST)
        assert (advice.time_axis, advice.windows) == ("none", 1)
        assert advice.simulations == expected.simulations
        assert advice.recommended == expected.recommended
    assert advise(lines, tablets=5, **FAST).recommended == 4
    note = next(f for f in advice.findings if f.code == "no-time")
    assert "per-key totals" in note.message


def test_uniform_per_key_export_out_of_key_order_needs_no_salt() -> None:
    """A uniform per-key export (counts drawn around 50, keys not in order) gets N = 1."""
    rnd = random.Random(1)
    lines = [
        Access(b"obj/%07d" % (i * 7919 % 1_000_003), float(max(1, round(rnd.expovariate(1 / 50)))))
        for i in range(2_000)
    ]
    advice = advise(lines, **FAST)
    assert advice.windows == 1
    assert advice.recommended == 1
    assert "target-unreachable" not in codes(advice)


def test_line_order_used_as_time_is_noted(demo: ModuleType) -> None:
    """Without times, a log not sorted by key is cut into windows of lines: a note says so and
    how to read it as one window; with ordered=True (the caller's word) there is no note."""
    rows = [Access(a.key) for a in timed(demo.tenant_lines(20_000))]
    advice = advise(rows, **FAST)
    assert (advice.time_axis, advice.window_choice) == ("order", "auto")
    assert advice.windows > 1
    note = next(f for f in advice.findings if f.code == "order-as-time")
    assert note.severity == "note"
    assert f"{advice.windows} windows" in note.message
    assert "--windows 1" in note.message
    assert "order-as-time" not in codes(advise(rows, ordered=True, **FAST))


def test_given_count_unit_overrides_the_default() -> None:
    """count_unit=U reads each count as count / U accesses, whatever the counts are."""
    advice = advise(article_counts(10), tablets=5, count_unit=500.0, **FAST)
    assert advice.count_unit == 500.0
    assert advice.count_unit_choice == "given"
    assert advice.events == 440
    with pytest.raises(ValueError, match="count_unit"):
        advise(article_counts(10), count_unit=0.0)


def test_same_seed_same_advice_other_seed_close() -> None:
    """The resampling is seeded: the same seed repeats the advice exactly, another moves the
    intervals only a little."""
    accesses = skewed_workload(4_000)
    first = advise(accesses, seed=1, **FAST)
    again = advise(accesses, seed=1, **FAST)
    other = advise(accesses, seed=2, **FAST)
    assert first == again
    for a, b in zip(first.simulations, other.simulations, strict=True):
        assert a.max_mean == b.max_mean
        assert abs(a.corrected - b.corrected) < 0.1 * a.corrected
        assert abs(a.high - b.high) < 0.1 * a.high


def test_false_positive_rate_on_tiny_uniform_samples() -> None:
    """Uniform samples too small to judge (the floor is above the target) get N > 1 at most
    at the noise floor's 5% level: at most 5 of 40 seeded samples."""
    wrong = 0
    for seed in range(40):
        rnd = random.Random(seed)
        accesses = [Access(b"u%05d" % rnd.randrange(100_000), 1.0, rnd.random()) for _ in range(60)]
        advice = advise(accesses, tablets=8, candidates=(1, 2), resamples=40, seed=seed)
        assert advice.noise_floor_high > advice.target  # the regime under test
        wrong += advice.recommended != 1
    assert wrong <= 5


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(300, 4_000), st.sampled_from([4, 8, 16, 32]))
def test_uniform_samples_large_enough_to_judge_never_get_more_than_1(
    seed: int, lines: int, tablets: int
) -> None:
    """A uniform workload of any size whose noise floor is below the target gets N = 1."""
    rnd = random.Random(seed)
    accesses = [
        Access(b"u%06d" % rnd.randrange(1_000_000), 1.0, rnd.random()) for _ in range(lines)
    ]
    advice = advise(accesses, tablets=tablets, candidates=(1, 2, 4), resamples=40, seed=seed)
    assume(advice.noise_floor_high <= advice.target)
    assert advice.recommended == 1
    assert advice.rule_of_thumb == 1


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.integers(1, 9), st.integers(0, 99)),
        min_size=20,
        max_size=300,
    ),
    st.sampled_from([0.001, 0.37, 3.0, 1000.0]),
)
def test_scaling_counts_and_unit_together_changes_nothing(
    rows: list[tuple[int, int, int]], factor: float
) -> None:
    """Multiplying every count and the count unit by a constant keeps the windows, the noise
    figures, every verdict and the recommendation."""
    plain = [Access(b"k%02d" % k, float(c), float(t)) for k, c, t in rows]
    scaled = [Access(a.key, a.count * factor, a.time) for a in plain]
    a = advise(plain, tablets=8, candidates=(1, 2, 4), resamples=40, count_unit=1.0)
    b = advise(scaled, tablets=8, candidates=(1, 2, 4), resamples=40, count_unit=factor)
    assert a.recommended == b.recommended
    assert a.rule_of_thumb == b.rule_of_thumb
    assert a.windows == b.windows
    assert a.events == pytest.approx(b.events)
    assert a.noise_floor == pytest.approx(b.noise_floor)
    for x, y in zip(a.simulations, b.simulations, strict=True):
        assert x.verdict == y.verdict
        assert x.corrected == pytest.approx(y.corrected)
        assert (x.low, x.high) == pytest.approx((y.low, y.high))


def test_demo_files_are_what_the_command_reads(demo: ModuleType, tmp_path: Path) -> None:
    """advise_demo.py writes key,count,time lines (or key,count per key, with or without
    key,0 storage lines) that read back whole."""
    path = tmp_path / "demo.csv"
    with path.open("w") as out:
        demo.write_log(out, 500)
    accesses, fmt = read_file(str(path))
    assert fmt == "csv"
    assert len(accesses) == 500
    assert all(a.time is not None and a.key.startswith(b"tenant") for a in accesses)
    with path.open("w") as out:
        demo.write_rows(out, demo.article_lines(2_000), weighted=True)
    per_key, _ = read_file(str(path))
    assert sum(a.count for a in per_key) == 2_000
    assert all(a.time is None for a in per_key)
    with path.open("w") as out:
        demo.write_rows(out, demo.article_lines(2_000), storage=demo.article_keys())
    with_storage, _ = read_file(str(path))
    assert len(with_storage) == 7_000
    assert {a.key for a in with_storage if a.count == 0} == {
        k.encode() for k in demo.article_keys()
    }
    assert all(a.time is None for a in with_storage[:5_000])
    assert all(a.time is not None for a in with_storage[5_000:])


# -- keys that rise with time: never "no salting" -----------------------------------------


def timestamp_first(lines: int, seed: int = 1, jitter: int = 100) -> list[Access]:
    """Keys ``epoch-ms#user`` written in time order (a dump of timestamp-first keys)."""
    rnd = random.Random(seed)
    out, ms = [], START_MS
    for _ in range(lines):
        ms += rnd.randint(1, jitter)
        out.append(Access(f"{ms}#{rnd.randrange(1000)}".encode(), 1.0, ms / 1000))
    return out


def test_timestamp_first_keys_in_one_window_are_not_told_no_salting() -> None:
    """800 timestamp-first keys: one window measures every layout uniform, but the keys are
    flagged monotonic, so N = 1 is not recommended: the ends of 32 buckets on 32 tablets are."""
    advice = advise(timestamp_first(800))
    assert advice.windows == 1
    assert "monotonic-keys" in codes(advice)
    assert advice.simulation(1).verdict == "uniform"  # what the measure alone says
    assert advice.recommended == 32
    levels = [sim.write_end_level for sim in advice.simulations]
    # T = 32 tablets: N ends take T/N of the mean, 1 from N = T on.
    assert levels == pytest.approx([32, 16, 8, 4, 2, 1, 1])


def test_the_write_end_level_is_only_set_for_keys_that_rise() -> None:
    """Keys that do not rise (tenant#time, random users) leave write_end_level None."""
    assert all(s.write_end_level is None for s in skewed_advice().simulations)


def test_rising_keys_that_no_candidate_spreads_say_why() -> None:
    """With candidates too small for the ends, nothing is recommended and the reason is the ends."""
    advice = advise(timestamp_first(800), candidates=(1, 2, 4))
    assert advice.recommended is None
    unreachable = next(f for f in advice.findings if f.code == "target-unreachable")
    assert "rise with time" in unreachable.message
    assert "N=4" in unreachable.message


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 10_000),
    st.integers(80, 1_500),
    st.sampled_from([1, 2, 5, 32]),
    st.sampled_from([1.2, 1.5, 3.0, 40.0]),
    st.sampled_from([None, 1, 4]),
    st.floats(0.0, 0.6),
)
def test_keys_flagged_monotonic_are_never_recommended_no_salting(
    seed: int, lines: int, tablets: int, target: float, windows: int | None, noise: float
) -> None:
    """Whatever the sample size, tablets, target and windows: when the advice flags the keys as
    monotonic, it recommends no N = 1, and the N it recommends keeps its ends at the target."""
    rnd = random.Random(seed)
    accesses = timestamp_first(lines, seed)
    # Some traffic keyed by user, not by time: the rising part may be flagged or not.
    accesses += [
        Access(b"user%04d" % rnd.randrange(9999), 1.0, a.time)
        for a in accesses
        if rnd.random() < noise
    ]
    advice = advise(
        accesses,
        tablets=tablets,
        target=target,
        windows=windows,
        candidates=(1, 2, 8, 64),
        resamples=20,
        seed=seed,
    )
    if "monotonic-keys" not in codes(advice):
        assert all(s.write_end_level is None for s in advice.simulations)
        return
    assert advice.recommended != 1
    if advice.recommended is not None:
        level = advice.simulation(advice.recommended).write_end_level
        assert level is not None
        assert level <= target + 1e-9
