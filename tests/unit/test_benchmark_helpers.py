"""The helpers of examples/benchmark.py: row counting, statistics, the data set (no timings)."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.cloud.bigtable.data import ReadRowsQuery

from saltedtable import SaltedTableAsync, SaltScheme, prefix_end
from tests.fakes import ABANDONED, FakeTable

BENCHMARK = Path(__file__).resolve().parents[2] / "examples" / "benchmark.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """examples/benchmark.py imported as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("saltedtable_benchmark", BENCHMARK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


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
