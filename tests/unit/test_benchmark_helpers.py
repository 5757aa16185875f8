"""The helpers of examples/tools/benchmark.py: row counting, statistics, the data set (untimed)."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowRange
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import CallStats, ReadBudget, SaltedTableAsync, SaltScheme, prefix_end
from tests.fakes import ABANDONED, FakeTable, query_keys
from tests.scripts import load_script

BENCHMARK = Path(__file__).resolve().parents[2] / "examples" / "tools" / "benchmark.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """examples/tools/benchmark.py imported as a module (examples/ is not a package)."""
    return load_script("saltedtable_benchmark", BENCHMARK)


async def _salted_fake(bench: ModuleType, rows: int) -> tuple[FakeTable, object, SaltedTableAsync]:
    fake = FakeTable()
    scheme = SaltScheme(16)
    await SaltedTableAsync(fake, scheme).bulk_mutate_rows([bench.entry_of(i) for i in range(rows)])
    counter = bench.CountingTable(fake)
    salted = SaltedTableAsync(counter, scheme)
    await salted.sample_row_keys()  # the table object's first operation reads the layout record
    counter.reset()
    return fake, counter, salted


async def test_counting_table_counts_what_the_table_streamed(bench: ModuleType) -> None:
    """CountingTable's row and request counts equal what the underlying table really sent."""
    fake, counter, salted = await _salted_fake(bench, 2000)
    fake.stats = type(fake.stats)()  # forget the load
    rows = await salted.read_rows(ReadRowsQuery(limit=100))
    assert [r.row_key for r in rows] == [bench.logical_key(i) for i in range(100)]
    assert counter.rows == fake.stats.rows_sent > 0
    assert counter.streams == len(fake.stats.queries) >= 16


async def test_counting_table_closes_the_stream_it_wraps(bench: ModuleType) -> None:
    """Leaving a counted stream early closes the underlying stream (no gRPC stream left open)."""
    fake, counter, _ = await _salted_fake(bench, 50)
    stream = await counter.read_rows_stream(ReadRowsQuery())
    async for _ in stream:
        break
    await stream.aclose()
    assert fake.stats.open_now == 0
    assert fake.stats.count(ABANDONED) == 1
    assert counter.rows == 1


async def test_counting_table_records_when_each_stream_ended(bench: ModuleType) -> None:
    """Each request's end time is set when its stream closes, in the list of its own read."""
    _, proxy, _ = await _salted_fake(bench, 50)
    counter: Any = proxy
    first = await counter.read_rows_stream(ReadRowsQuery())
    async for _ in first:
        break
    assert counter.ended == [math.inf]  # still open
    before = counter.ended
    counter.reset()  # the next read starts while the first stream still drains
    second = await counter.read_rows_stream(ReadRowsQuery(limit=3))
    assert len([row async for row in second]) == 3
    await first.aclose()
    assert counter.issued[0] <= counter.ended[0] < math.inf
    assert len(counter.ended) == 1  # the old stream wrote into its own read's list
    assert before[0] < math.inf


async def test_limit_scans_count_only_the_rows_of_the_scan(bench: ModuleType) -> None:
    """After the warm-up, limit=1 over 16 buckets counts the 16 rows its one round sent."""
    rows = 2000
    scheme = SaltScheme(16)
    plain, physical = FakeTable(), FakeTable()
    entries = [bench.entry_of(i) for i in range(rows)]
    await plain.bulk_mutate_rows(entries)
    await SaltedTableAsync(physical, scheme).bulk_mutate_rows(entries)
    counter = bench.CountingTable(physical)
    tables = bench.Tables(
        plain,
        physical,
        SaltedTableAsync(physical, scheme),
        counter,
        SaltedTableAsync(counter, scheme),  # a fresh table object: its layout is not read yet
        scheme,
    )
    cfg = bench._config(bench._parser().parse_args(["--quick", "--rows", str(rows)]))
    runner = bench.Bench(cfg, tables)
    await runner.warm_up()
    await runner.limits(0)
    assert runner.rows_sent["1/ordered"] == [16]
    assert runner.requests["1/ordered"] == [16]
    assert runner.rows_sent["10/ordered"] == [16 * 3]  # first_round(10, 16) asks 3 of each
    assert runner.errors == []


def test_percentile_interpolates(bench: ModuleType) -> None:
    """percentile() interpolates between ranks and is None for no values."""
    values = [1.0, 2.0, 3.0, 4.0]
    assert bench.percentile(values, 0.0) == 1.0
    assert bench.percentile(values, 0.5) == 2.5
    assert bench.percentile(values, 1.0) == 4.0
    assert bench.percentile([], 0.5) is None


def test_paired_ratio_is_the_median_of_per_repetition_ratios(bench: ModuleType) -> None:
    """paired() compares within each repetition, so a drift shared by both sides cancels."""
    a, b = bench.Series(), bench.Series()
    for seconds_a, seconds_b in ((1.0, 2.0), (2.0, 4.0), (4.0, 8.0)):  # both slow down 2x per rep
        a.add(100, seconds_a)
        b.add(100, seconds_b)
    assert bench.paired(a, b)["ratio"] == pytest.approx(2.0)


def test_chunk_paired_ignores_stalls_that_a_sum_would_count(bench: ModuleType) -> None:
    """A few stalled chunks move the ratio of sums, not the median of the chunk-pair ratios."""
    # salted runs at 0.97x; three of 16 raw chunks and one salted chunk hit a 30 ms stall.
    raw = [0.030] * 16
    salted = [0.030 / 0.97] * 16
    for i in (2, 7, 11):
        raw[i] += 0.030
    salted[5] += 0.030
    pairs = [r / s for r, s in zip(raw, salted, strict=True)]
    summed = sum(raw) / sum(salted)
    result = bench.chunk_paired(pairs)
    assert result["ratio"] == pytest.approx(0.97)
    assert abs(summed - 0.97) > 0.05  # what the sum-based figure made of it
    assert result["chunk_pairs"] == 16
    assert len(result["chunk_ratio_quartiles"]) == 3
    assert bench.chunk_paired([])["ratio"] is None


async def test_pair_ops_ratio_is_salted_rate_over_raw_rate(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A salted side taking twice as long per chunk gives ratios of 0.5 (not 2)."""
    runner = bench.Bench.__new__(bench.Bench)
    runner.series, runner.chunk_ratios = {}, {}

    async def timed(op: object, keys: list[bytes], concurrency: int) -> tuple[float, list[float]]:
        seconds = 0.2 if op == "salted-op" else 0.1
        return seconds, [seconds / len(keys)] * len(keys)

    monkeypatch.setattr(bench, "run_ops", timed)
    keys = [b"k%d" % i for i in range(20)]
    await runner.pair_ops(0, "s", {"raw": "raw-op", "salted": "salted-op"}, keys, 1)
    assert runner.chunk_ratios["s"] == [pytest.approx(0.5)] * 4
    assert bench.chunk_paired(runner.chunk_ratios["s"])["ratio"] == pytest.approx(0.5)


async def test_pair_ops_records_one_ratio_per_chunk(bench: ModuleType) -> None:
    """pair_ops keeps the raw/salted time ratio of every chunk, both sides in the same chunk."""
    runner = bench.Bench.__new__(bench.Bench)
    runner.series, runner.chunk_ratios = {}, {}
    calls: list[str] = []

    async def raw(key: bytes) -> None:
        calls.append("raw")

    async def salted(key: bytes) -> None:
        calls.append("salted")

    keys = [b"k%d" % i for i in range(12)]
    await runner.pair_ops(0, "point/x/sequential", {"raw": raw, "salted": salted}, keys, 1)
    size = max(bench.MIN_CHUNK_OPS, bench.CHUNK_WAVES)
    sizes = [len(keys[i : i + size]) for i in range(0, len(keys), size)]
    assert len(runner.chunk_ratios["point/x/sequential"]) == len(sizes) == 3
    assert all(r > 0 for r in runner.chunk_ratios["point/x/sequential"])
    # each chunk runs one side then the other, and the side going first alternates
    expected: list[str] = []
    for c, n in enumerate(sizes):
        for side in bench.rotated(["raw", "salted"], c):
            expected += [side] * n
    assert calls == expected
    assert runner.s("point/x/sequential/raw").ops == len(keys)


def test_median_ci95_ranks_and_coverage(bench: ModuleType) -> None:
    """The interval uses exact binomial ranks and covers the true median 95-97% of the time."""
    # n=12: P(X <= 2) = 79/4096 = 1.9% <= 2.5% < P(X <= 3): the 3rd smallest and 3rd largest
    assert bench.median_ci95([float(v) for v in range(12, 0, -1)]) == [3.0, 10.0]
    assert bench.median_ci95([float(v) for v in range(1, 7)]) == [1.0, 6.0]  # n=6: min..max
    assert bench.median_ci95([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # 2 x 1/32 > 5%
    rng = random.Random(11)
    trials = 2000
    covered = 0
    for _ in range(trials):
        ci = bench.median_ci95([rng.expovariate(1.0) for _ in range(30)])  # skewed, like stalls
        assert ci is not None
        covered += ci[0] <= math.log(2) <= ci[1]
    assert 0.93 <= covered / trials <= 0.98  # exact coverage at n=30: 95.7%


def test_rotation_puts_every_variant_first_equally_often(bench: ModuleType) -> None:
    """Over len(variants) repetitions each variant runs first once (A/B, then B/A)."""
    names = ["a", "b", "c", "d"]
    firsts = [bench.rotated(names, rep)[0] for rep in range(len(names))]
    assert sorted(firsts) == names
    assert bench.rotated(["raw", "salted"], 1) == ["salted", "raw"]


def test_keys_sort_in_row_order_and_prefixes_hold_one_user(bench: ModuleType) -> None:
    """Row i's key sorts before row i+1's, so a key range selects rows 0..n-1 (memory scans)."""
    keys = [bench.logical_key(i) for i in range(0, 1_000_000, 997)]
    assert keys == sorted(keys)
    prefix = bench.user_prefix(42)
    inside = [i for i in range(4200, 4400) if prefix <= bench.logical_key(i) < prefix_end(prefix)]
    assert inside == list(range(4200, 4300))
    assert len(bench.value_of(7)) == bench.VALUE_BYTES


def test_memory_median_run_is_the_middle_peak(bench: ModuleType) -> None:
    """The memory figure of a size is the run with the median peak, not the first or the lowest."""
    runs = [{"peak_rss_mb": p, "id": i} for i, p in enumerate([101.9, 96.3, 99.0])]
    assert bench._median_run(runs)["id"] == 2
    assert bench._median_run(runs[:2])["id"] == 1  # even count: the lower middle
    assert bench._median_run(runs[:1])["id"] == 0


def test_memory_runs_must_be_positive(bench: ModuleType) -> None:
    args = bench._parser().parse_args(["--memory-runs", "0"])
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        bench._config(args)
    assert bench._config(bench._parser().parse_args([])).memory_runs == 3
    assert bench._config(bench._parser().parse_args(["--quick"])).memory_runs == 3


# -- issue 16 additions -----------------------------------------------------------


def test_request_waves_count_the_answers_each_request_waited_for(bench: ModuleType) -> None:
    """A request is one wave past the requests that had ended when it was made."""
    waves = bench.request_waves
    inf = math.inf
    assert waves([], []) == 0
    assert waves([0.0, 0.001, 0.002], [0.05, 0.05, 0.06]) == 1  # a fan-out: one round
    # Made late (a slow client), but before any answer came: still the first round.
    assert waves([0.0, 0.01, 0.07], [0.08, 0.09, 0.12]) == 1
    assert waves([0.0, 0.051], [0.05, 0.1]) == 2  # the second came after the first's answer
    # Two rounds of two, then a request after the second round's end.
    assert waves([0.0, 0.0, 0.06, 0.06, 0.2], [0.05, 0.05, 0.1, 0.15, 0.25]) == 3
    assert waves([0.3, 0.0, 0.1, 0.2], [0.35, 0.05, 0.15, 0.25]) == 4  # given in any order
    assert waves([0.0, 0.5], [inf, 0.6]) == 1  # a stream that never ended answered nothing
    with pytest.raises(ValueError, match="end times"):
        waves([0.0], [])
    with pytest.raises(ValueError, match="ended before"):
        waves([1.0], [0.5])


def _longest_chain(issued: list[float], ended: list[float]) -> int:
    """The longest chain of requests each made after the previous one ended (by brute force)."""
    order = sorted(range(len(issued)), key=lambda i: (issued[i], ended[i]))
    best = [1] * len(issued)
    for a, i in enumerate(order):
        for k in order[:a]:
            if ended[k] <= issued[i]:
                best[i] = max(best[i], best[k] + 1)
    return max(best, default=0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 10, allow_nan=False), st.floats(0.001, 5, allow_nan=False)),
        max_size=40,
    )
)
def test_request_waves_is_the_longest_chain_of_answers(
    bench: ModuleType, requests: list[tuple[float, float]]
) -> None:
    """The waves are the longest chain of requests made after the previous one ended."""
    issued = [start for start, _ in requests]
    ended = [start + took for start, took in requests]
    waves = bench.request_waves(issued, ended)
    assert waves == _longest_chain(issued, ended)
    assert (waves == 0) == (not requests)
    assert waves <= len(requests)
    if requests and max(issued) < min(ended):  # all made before any answer: one round
        assert waves == 1


async def _skewed(
    bench: ModuleType, delay: float, first_in_bucket_0: int
) -> tuple[Any, SaltedTableAsync, list[bytes]]:
    """A 4-bucket table whose first ``first_in_bucket_0`` keys all lie in bucket 0."""
    scheme = SaltScheme(4)
    keys = [b"k%06d" % i for i in range(5000)]
    head = [k for k in keys if scheme.bucket_of(k) == 0][:first_in_bucket_0]
    rest = [k for k in keys if k > head[-1]][:200]
    chosen = head + rest
    fake = FakeTable()
    await SaltedTableAsync(fake, scheme).bulk_mutate_rows(
        [bench.RowMutationEntry(k, bench.SetCell("cf", b"v", b"x", 1)) for k in chosen]
    )
    counter = bench.CountingTable(fake, delay)
    salted = SaltedTableAsync(counter, scheme)
    await salted.sample_row_keys()  # the layout check, before any timing
    return counter, salted, chosen


@pytest.mark.parametrize(("skewed", "rounds"), [(1, 1), (60, 2)])
async def test_delay_proxy_shows_the_rounds_a_limit_read_takes(
    bench: ModuleType, skewed: int, rounds: int
) -> None:
    """Through the delay proxy, waves and latency / delay match the engine's rounds."""
    delay = 0.05
    counter, salted, _ = await _skewed(bench, delay, skewed)
    sample, got = await bench.timed_through(
        counter, lambda stats: _read_len(salted, ReadRowsQuery(limit=60), stats)
    )
    assert got == 60
    assert sample.engine_rounds == rounds
    assert sample.waves == rounds
    assert sample.latency >= rounds * delay
    assert sample.requests == counter.streams >= 4
    assert sample.rows_fetched == counter.rows >= 60


async def _read_len(table: SaltedTableAsync, query: ReadRowsQuery, stats: CallStats) -> int:
    return len(await table.read_rows(query, stats=stats))


def test_spread_and_latency_paired(bench: ModuleType) -> None:
    """spread() gives median, p99 and max; latency_paired() inverts chunk rate ratios."""
    assert bench.spread([1, 1, 2, 1, 5]) == {"median": 1, "p99": 4.88, "max": 5}
    assert bench.spread([]) == {"median": None, "p99": None, "max": None}
    result = bench.latency_paired([0.5] * 20 + [0.25])
    assert result["latency_ratio"] == pytest.approx(2.0)  # salted at half the raw rate
    assert result["latency_ratio_ci95"] == [2.0, 2.0]


def test_summarize_rounds_counts_second_rounds(bench: ModuleType) -> None:
    """Rounds summaries: medians of waves, share of scans needing a second round."""
    samples = [bench.RoundSample(0.06, 1, 16, 40, 1)] * 3 + [bench.RoundSample(0.11, 2, 18, 48, 2)]
    out = bench.summarize_rounds(samples, 0.05)
    assert out["queries"] == 4
    assert out["waves"]["median"] == 1
    assert out["waves"]["max"] == 2
    assert out["two_or_more_rounds"] == 0.25
    assert out["latency_over_delay"]["median"] == pytest.approx(1.2)
    assert out["rows_fetched"]["max"] == 48


def test_summarize_scans_reports_first_row_fraction(bench: ModuleType) -> None:
    """A sweep variant's summary: median rate, first row as a share of the scan time."""
    runs = [
        bench.ScanRun(1000, 2.0, 0.1, 16, 1.0, None, 900),
        bench.ScanRun(1000, 1.0, 0.2, 16, 0.5, None, 800),
        bench.ScanRun(1000, 4.0, 0.2, 16, 2.0, None, 950),
    ]
    out = bench.summarize_scans(runs)
    assert out["rows_per_s"] == 500.0
    assert out["first_row_fraction"] == pytest.approx(0.05)
    assert out["client_cpu_us_per_row"] == pytest.approx(1000.0)
    assert out["emulator_cpu_us_per_row"] is None
    assert out["peak_buffered_rows"] == 950


async def test_count_timed_reports_the_first_row(bench: ModuleType) -> None:
    """count_timed counts every row and times the first one; an empty stream has none."""

    async def rows(n: int) -> Any:
        for i in range(n):
            await asyncio.sleep(0.01 if i == 0 else 0)
            yield i

    start = time.perf_counter()
    n, first = await bench.count_timed(rows(5), start)
    assert n == 5
    assert first is not None
    assert 0.01 <= first < time.perf_counter() - start
    assert await bench.count_timed(rows(0), start) == (0, None)


def test_emulator_cpu_seconds_reads_a_process_cpu(bench: ModuleType) -> None:
    """The CPU of a process by pid (here this one) grows with work; unknown pids give None."""
    before = bench.emulator_cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    after = bench.emulator_cpu_seconds(os.getpid())
    assert before is not None
    assert after is not None
    assert after > before
    assert bench.emulator_cpu_seconds(None) is None
    assert bench.emulator_cpu_seconds(2**22 + 12345) is None  # above Linux's pid_max


_BOUNDS = st.sampled_from([b"", b"a", b"b", b"b\x00", b"ba", b"c", b"d"])


@st.composite
def _queries(draw: st.DrawFn) -> ReadRowsQuery:
    ranges = []
    for _ in range(draw(st.integers(0, 3))):
        start, end = draw(_BOUNDS), draw(_BOUNDS)
        if start and end and start > end:
            start, end = end, start
        ranges.append(
            RowRange(
                start_key=start or None,
                end_key=end or None,
                start_is_inclusive=draw(st.booleans()),
                end_is_inclusive=draw(st.booleans()),
            )
        )
    keys: list[str | bytes] = draw(
        st.lists(st.sampled_from([b"a", b"b", b"ba", b"zz"]), max_size=3)
    )
    return ReadRowsQuery(row_keys=keys, row_ranges=ranges, limit=draw(st.integers(0, 4)) or None)


@settings(max_examples=300, deadline=None)
@given(query=_queries())
def test_memory_table_reads_what_a_query_selects(bench: ModuleType, query: ReadRowsQuery) -> None:
    """MemoryTable answers keys, ranges (either bound open or closed) and limits exactly."""
    stored = [b"a", b"a\x00", b"b", b"b\x00", b"ba", b"bb", b"c", b"d"]

    async def main() -> list[bytes]:
        table = bench.MemoryTable(rows_per_yield=2)
        await table.bulk_mutate_rows(
            [bench.RowMutationEntry(k, bench.SetCell("cf", b"v", k, 1)) for k in stored]
        )
        return [r.row_key for r in await _collect(await table.read_rows_stream(query))]

    want = query_keys(query, stored)[: query.limit or None]
    assert asyncio.run(main()) == want


async def _collect(stream: Any) -> list[Any]:
    return [row async for row in stream]


async def test_salted_reads_over_memory_table_match_raw_reads(bench: ModuleType) -> None:
    """The CPU section's in-memory reads return the same rows salted and raw."""
    plain, physical = bench.MemoryTable(), bench.MemoryTable()
    salted = SaltedTableAsync(physical, SaltScheme(16), guard=False)
    entries = [bench.entry_of(i) for i in range(1000)]
    await plain.bulk_mutate_rows(entries)
    await salted.bulk_mutate_rows(entries)
    p = bench.user_prefix(3)
    query = ReadRowsQuery(row_ranges=RowRange(start_key=p, end_key=prefix_end(p)))
    raw = [r.row_key for r in await _collect(await plain.read_rows_stream(query))]
    assert [r.row_key for r in await salted.read_rows(query)] == raw
    assert len(raw) == bench.ROWS_PER_USER
    assert physical.requests == 1  # one request over every bucket held the prefix
    per_bucket = SaltedTableAsync(
        physical, SaltScheme(16), guard=False, budget=ReadBudget(one_request_rows=0)
    )
    assert [r.row_key for r in await per_bucket.read_rows(query)] == raw
    # A new table object's first read probes each bucket with one row, then reads the rest.
    assert physical.requests == 1 + 2 * 16
    assert [r.row_key for r in await per_bucket.read_rows(query)] == raw
    assert physical.requests == 1 + 2 * 16 + 16  # then: one request a bucket


async def test_range_subqueries_read_the_rows_the_salted_table_reads(bench: ModuleType) -> None:
    """The raw side of the sweep reads exactly the salted scan's physical sub-queries."""
    fake = FakeTable()
    salted = SaltedTableAsync(fake, SaltScheme(8))
    await salted.bulk_mutate_rows([bench.entry_of(i) for i in range(600)])
    query = ReadRowsQuery(row_ranges=RowRange(end_key=bench.logical_key(250)))
    subs = bench.range_subqueries(salted, query)
    assert len(subs) == 8
    raw_keys: list[bytes] = []
    for q in subs:
        raw_keys += [r.row_key.split(b"-", 1)[1] for r in await fake.read_rows(q)]
    raw_keys.sort()
    assert raw_keys == [r.row_key for r in await salted.read_rows(query)]
    assert len(raw_keys) == 250


def _cfg(bench: ModuleType, *argv: str) -> Any:
    return bench._config(bench._parser().parse_args(list(argv)))


def test_sections_and_lists_parse(bench: ModuleType) -> None:
    """--only / --skip pick sections; bucket lists are sorted sets; bad values are refused."""
    assert _cfg(bench).sections == frozenset(bench.SECTIONS)
    assert _cfg(bench, "--only", "sweep,rounds").sections == {"sweep", "rounds"}
    assert _cfg(bench, "--skip", "memory,sweep").sections == {"core", "cpu", "rounds"}
    assert _cfg(bench, "--sweep-rows", "0").sections == set(bench.SECTIONS) - {"sweep"}
    assert _cfg(bench, "--sweep-buckets", "64,1,16,16").sweep_buckets == (1, 16, 64)
    assert _cfg(bench).sweep_buckets == (1, 16, 64, 256, 4096)
    assert _cfg(bench, "--quick").rounds_limits == (1, 10, 100)
    assert _cfg(bench).sweep_small_rows == _cfg(bench).sweep_rows // 10
    for bad in ("0,4", "a", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            bench._int_list(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown section"):
        bench._section_list("core,nope")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds-rows", "100"], "rounds-limits"),
        (["--delay-ms", "0"], "delay-ms"),
        (["--sweep-rows", "100", "--sweep-small-rows", "200"], "sweep-small-rows"),
        (["--sweep-runs", "0"], "sizes must be >= 1"),
    ],
)
def test_bad_sizes_are_refused(bench: ModuleType, argv: list[str], message: str) -> None:
    """Sizes that cannot work fail before anything runs, naming the flag."""
    with pytest.raises(ValueError, match=message):
        _cfg(bench, *argv)


def test_tables_needed_names_every_table_a_run_uses(bench: ModuleType) -> None:
    """What an instance must hold: every section's tables, and only the chosen sections'."""
    target = bench._target(bench._parser().parse_args(["--table-prefix", "x"]))
    everything = bench.tables_needed(_cfg(bench), target)
    assert {"x-plain", "x-salted", "x-confined", "x-memory"} <= set(everything)
    assert {"x-rounds-plain-sequential", "x-rounds-plain-random"} <= set(everything)
    assert {f"x-sweep{n}" for n in (1, 16, 64, 256, 4096)} <= set(everything)
    assert {f"x-rounds{n}-random" for n in (4, 16, 64)} <= set(everything)
    assert {f"x-rounds{n}-confined" for n in (4, 16, 64)} <= set(everything)
    assert len(everything) == len(set(everything))
    only = bench.tables_needed(_cfg(bench, "--only", "sweep", "--sweep-buckets", "4"), target)
    assert only == ["x-sweep4"]


def _rounds_result(waves: list[int], rows: list[int]) -> dict[str, Any]:
    samples = [
        {"latency": 0.06 * w, "waves": w, "rows_fetched": r}
        for w, r in zip(waves, rows, strict=True)
    ]
    return {
        "waves": {"median": sorted(waves)[len(waves) // 2], "p99": max(waves)},
        "rows_fetched": {"max": max(r["rows_fetched"] for r in samples)},
        "rows_bound": 52,
    }


def test_evaluate_rounds_and_skipped_sections(bench: ModuleType) -> None:
    """Rounds targets: median 1, p99 2, rows within 2L + 2N; skipped sections add none."""
    skipped = {"skipped": True}
    results: dict[str, Any] = {key: skipped for key in ("point", "salt", "sweep", "memory", "cpu")}
    results["rounds"] = {
        "by_buckets": {
            "16": {
                "limits": {
                    "10": _rounds_result([1, 1, 2], [48, 48, 50]),
                    "100": _rounds_result([1, 2, 3], [190, 200, 260]),
                },
                "limits_random": {"10": _rounds_result([2, 2, 1], [48, 48, 48])},
            }
        }
    }
    verdicts = {t["name"]: t["passed"] for t in bench.evaluate(results, _cfg(bench))}
    assert verdicts == {
        "rounds N=16 limit=10 median": True,
        "rounds N=16 limit=10 p99": True,
        "rounds N=16 limit=10 rows fetched": True,
        "rounds N=16 limit=100 median": False,
        "rounds N=16 limit=100 p99": False,
        "rounds N=16 limit=100 rows fetched": False,
        "rounds random keys N=16 limit=10 median": False,
        "rounds random keys N=16 limit=10 p99": True,
        "rounds random keys N=16 limit=10 rows fetched": True,
    }


def test_random_keys_are_distinct_and_unordered(bench: ModuleType) -> None:
    """The random key set: distinct keys whose sorted order is unrelated to the row number."""
    keys = [bench.random_key(i) for i in range(5000)]
    assert len(set(keys)) == len(keys)
    assert keys != sorted(keys)
    assert bench.KEYS["sequential"](7) == bench.logical_key(7)
    entry = bench.entry_of(3, bench.random_key)
    assert entry.row_key == bench.random_key(3)
