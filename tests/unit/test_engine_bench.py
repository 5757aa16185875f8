"""The floors of examples/tools/engine_bench.py read what saltedtable's scans read.

The benchmark compares saltedtable's 16-bucket scan with a minimal fan-in
(``Scans.floor``) and a minimal ordered merge (``Scans.ordered_floor``) of the 16 raw
sub-scans; a floor that lost, repeated or misordered rows would make that comparison
meaningless. On the fake table, whose streams interleave row by row.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, SetCell

from saltedtable import SaltedTableAsync, SaltScheme
from tests.fakes import FakeTable
from tests.scripts import load_script

ENGINE_BENCH = Path(__file__).resolve().parents[2] / "examples" / "tools" / "engine_bench.py"
ROWS = 3_000


@pytest.fixture(scope="module")
def engine_bench() -> ModuleType:
    """examples/tools/engine_bench.py imported as a module (examples/ is not a package)."""
    return load_script("saltedtable_engine_bench", ENGINE_BENCH)


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
