"""The floors of examples/tools/engine_bench.py read what saltedtable's scans read.

The benchmark compares saltedtable's 16-bucket scan with a minimal fan-in
(``Scans.floor``) and a minimal ordered merge (``Scans.ordered_floor``) of the 16 raw
sub-scans; a floor that lost, repeated or misordered rows would make that comparison
meaningless. On the fake table, whose streams interleave row by row.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import AsyncIterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, SetCell

from saltedtable import SaltedTable, SaltedTableAsync, SaltScheme
from tests.fakes import FakeTable, SyncFakeTable
from tests.scripts import load_script

ENGINE_BENCH = Path(__file__).resolve().parents[2] / "examples" / "tools" / "engine_bench.py"
ROWS = 3_000


@pytest.fixture(scope="module")
def engine_bench() -> ModuleType:
    """examples/tools/engine_bench.py imported as a module (examples/ is not a package)."""
    return load_script("saltedtable_engine_bench", ENGINE_BENCH)


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """The heap that existed before the test moved out of the collector's sight meanwhile.

    The write rounds start every operation with a full ``gc.collect()`` (benchmark
    hygiene). Late in the whole suite that collection walks everything the earlier tests
    left alive, about half a second a time, 40 s for this test's 74 collections; frozen,
    it walks only what this test made, which is all the benchmark's collections are for.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _scans(engine_bench: ModuleType) -> tuple[Any, list[bytes]]:
    fake = FakeTable()
    salted = SaltedTableAsync(fake, SaltScheme(engine_bench.BUCKETS), guard=False)
    keys = [engine_bench.key_of(i) for i in range(ROWS)]
    await salted.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", k * 3)) for k in keys])
    return engine_bench.Scans(fake, salted), keys


def _recording(seen: list[tuple[bytes, list[bytes]]]) -> Any:
    async def count(stream: AsyncIterable[Any]) -> int:
        n = 0
        async for row in stream:
            seen.append((row.row_key, [cell.row_key for cell in row.cells]))
            n += 1
        return n

    return count


async def test_the_fan_in_floor_hands_over_every_row_once_with_its_logical_key(
    engine_bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row once, relabelled (the row's and its cells' keys), in any order."""
    scans, keys = await _scans(engine_bench)
    seen: list[tuple[bytes, list[bytes]]] = []
    monkeypatch.setattr(engine_bench, "count", _recording(seen))
    assert await scans.floor() == ROWS
    assert sorted(key for key, _ in seen) == keys
    assert all(cells == [key] for key, cells in seen)
    # The buckets' streams interleave: the batches mix buckets, far more often
    # than the 15 changes of one bucket read after another.
    bucket_of = scans.salted.scheme.bucket_of
    buckets = [bucket_of(key) for key, _ in seen]
    assert sum(a != b for a, b in itertools.pairwise(buckets)) > 100


async def test_the_ordered_floor_hands_over_every_row_in_key_order(
    engine_bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row once, relabelled, in logical key order: what saltedtable's ordered scan returns."""
    scans, keys = await _scans(engine_bench)
    seen: list[tuple[bytes, list[bytes]]] = []
    monkeypatch.setattr(engine_bench, "count", _recording(seen))
    assert await scans.ordered_floor() == ROWS
    assert [key for key, _ in seen] == keys
    assert all(cells == [key] for key, cells in seen)
    salted = [row.row_key for row in await scans.salted.read_rows(ReadRowsQuery())]
    assert salted == keys


async def test_the_split_raw_scan_reads_every_row_once_in_two_requests_a_bucket(
    engine_bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback section's ``raw_16_split``: each bucket's first page, then the rest after it.

    Every physical row once (no row of a page's end read twice, none skipped), in
    two requests a bucket: the first limited to the page, the second starting
    after the page's last key; a bucket the page covers whole sends one.
    """
    scans, keys = await _scans(engine_bench)
    seen: list[tuple[bytes, list[bytes]]] = []
    monkeypatch.setattr(engine_bench, "count", _recording(seen))
    fake = scans.raw
    fake.stats.queries.clear()
    first = 64
    assert await scans.raw16_split(first) == ROWS
    queries = fake.stats.queries
    assert len(queries) == 2 * engine_bench.BUCKETS
    pages = [q for q in queries if q.limit == first]
    rests = [q for q in queries if not q.limit]
    assert len(pages) == len(rests) == engine_bench.BUCKETS
    assert all(not r.start_is_inclusive for q in rests for r in q.row_ranges)
    # `count` saw the rows after each page; the pages' rows are counted in the scan.
    physical = sorted(scans.salted.scheme.salt_key(k) for k in keys)
    assert len(seen) == ROWS - first * engine_bench.BUCKETS
    assert sorted({key for key, _ in seen}) == sorted(
        set(physical) - {k for q in pages for k in _first_keys(physical, q, first)}
    )
    fake.stats.queries.clear()
    assert await scans.raw16_split(ROWS) == ROWS  # every page is whole: one request a bucket
    assert len(fake.stats.queries) == engine_bench.BUCKETS


def _first_keys(physical: list[bytes], query: ReadRowsQuery, first: int) -> list[bytes]:
    """The first ``first`` of ``physical`` in ``query``'s one range."""
    (whole,) = query.row_ranges
    return [k for k in physical if whole.start_key <= k < whole.end_key][:first]


# -- the write section -----------------------------------------------------------------


def test_the_write_rounds_pair_every_variant_and_write_every_entry(
    engine_bench: ModuleType, frozen_heap: None
) -> None:
    """Every (flavour, operation, variant) once a round, on fakes; the entries land salted."""
    scheme = SaltScheme(engine_bench.BUCKETS)
    loop = asyncio.new_event_loop()
    try:
        fakes = {f: (FakeTable(), FakeTable()) for f in ("async", "sync")}
        raw, salted = fakes["async"]
        sync_raw, sync_salted = (SyncFakeTable(t) for t in fakes["sync"])
        flavours = {
            "async": engine_bench.WriteTargets(
                "async",
                {
                    "raw": raw,
                    "floor": raw,
                    "salted": SaltedTableAsync(salted, scheme, guard=False),
                    "salted_guard": SaltedTableAsync(salted, scheme),
                },
                loop,
            ),
            "sync": engine_bench.WriteTargets(
                "sync",
                {
                    "raw": sync_raw,
                    "floor": sync_raw,
                    "salted": SaltedTable(sync_salted, scheme, guard=False),
                    "salted_guard": SaltedTable(sync_salted, scheme),
                },
                loop,
            ),
        }
        rounds = engine_bench.write_rounds(flavours, 2, [30], 20, 3, seed=0)
        only_bulk = engine_bench.write_rounds(flavours, 1, [10], 20, 3, seed=0, ops=["bulk"])
        points = engine_bench.point_interleaved(
            flavours, engine_bench.WRITE_OPS, 20, block=10, seed=0
        )
    finally:
        loop.close()
    assert set(only_bulk) == {"async/bulk_10", "sync/bulk_10"}
    assert set(points) == {
        f"{f}/{op}" for f in ("async", "sync") for op in ("mutate_row", "check_and_mutate_row")
    }
    for entry in points.values():
        assert entry["salted"]["n"] == 2  # two blocks of ten calls
        assert set(entry["median_ms"]) == set(engine_bench.WRITE_VARIANTS)
    ops = ("batcher_20", "bulk_30", "mutate_row", "check_and_mutate_row")
    assert set(rounds) == {f"{f}/{op}" for f in ("async", "sync") for op in ops}
    for per_round in rounds.values():
        assert len(per_round) == 2
        assert all(set(r) == set(engine_bench.WRITE_VARIANTS) for r in per_round)
    for raw_fake, salted_fake in fakes.values():
        assert b"b1#0000019" in raw_fake.data_keys()  # the batcher's, round 1
        assert b"w0#0000029" in raw_fake.data_keys()  # the bulk write's, round 0
        assert scheme.salt_key(b"b1#0000019") in salted_fake.data_keys()
        assert scheme.salt_key(b"point#00005") in salted_fake.data_keys()  # round 1's 3rd
        assert scheme.salt_key(b"w1#0000029") in raw_fake.data_keys()  # the floor's keys
    summary = engine_bench.write_summary(rounds)
    assert summary["sync/bulk_30"]["salted_guard"]["n"] == 2


def test_the_write_summary_is_raw_over_salted_seconds_paired_by_round(
    engine_bench: ModuleType,
) -> None:
    def run(seconds: float) -> dict[str, Any]:
        return {
            "seconds": seconds,
            "cpu_seconds": seconds / 2,
            "gc_seconds": seconds / 10,
            "gc_collections": [3, 1, 0],
        }

    per_round = [
        {"raw": run(1.0), "floor": run(1.0), "salted": run(2.0), "salted_guard": run(1.0)},
        {"raw": run(3.0), "floor": run(2.0), "salted": run(3.0), "salted_guard": run(4.0)},
    ]
    summary = engine_bench.write_summary({"async/x": per_round})["async/x"]
    assert summary["salted"]["median"] == 0.75  # (0.5 + 1.0) / 2
    assert summary["salted_without_gc"]["median"] == 0.75  # each run 10% in collections
    assert summary["salted_cpu"]["median"] == 0.75  # each run half CPU
    assert summary["salted_guard"]["median"] == 0.875  # (1.0 + 0.75) / 2
    assert summary["floor"]["median"] == 1.25  # (1.0 + 1.5) / 2
    assert summary["salted_vs_floor"]["median"] == round((0.5 + 2 / 3) / 2, 3)
    assert summary["gc_share"]["raw"]["median"] == 0.1
    assert summary["gen2_collections"]["salted"]["median"] == 0.0
