"""A scan over two layout epochs against the raw client on the emulator (issue 39).

Run: ``.venv/bin/python examples/tools/epochs_bench.py [--rows 20000] [--rounds 7]``.
It starts its own emulator unless ``BIGTABLE_EMULATOR_HOST`` is set, and prints one
JSON report.

The table holds ``--rows`` rows, half with key times in an N=16 epoch and half in
an N=64 epoch that follows it (they share the prefixes ``00-`` .. ``15-``). Each
round runs, in a shuffled order (seeded):

* ``salted`` / ``salted_unordered``: ``SaltedTableAsync.read_rows`` of the whole
  table on the epoch layout, ordered and ``ordered=False``;
* ``raw_union``: the raw client, one unordered sub-scan per distinct physical
  prefix (64), all at once: the floor of any salted read of this table;
* ``raw_each``: the raw client, each epoch's own buckets scanned as if it were
  alone (16 + 64 sub-scans; the shared prefixes are read twice);
* ``salted_each`` / ``salted_each_unordered``: saltedtable scanning each epoch's
  rows in a table of its own (two more tables: N=16 with the first half, N=64
  with the second), one after the other: "each epoch's own buckets' requests",
  which the epoch scan must not exceed.

With ``--section window`` it measures the dual-layout window instead (keys
without a time): a table in a 16 -> 64 window whose first half of the rows was
written before the window (old layout) and the second half in it (new layout).
Each round runs ``window`` (the window table's ordered scan), ``raw_union``
(the raw client, one sub-scan per distinct physical prefix of both layouts: 64)
and ``raw_each`` (16 + 64 sub-scans); reported: requests, paired time ratios
raw / window, and the window's point read: the requests a ``read_row`` sends
(one, carrying the key's old and new physical keys).

Reported (epochs): requests of each in every round (saltedtable's from its statistics),
the paired time ratios other / salted per round (median, min, max: above 1 the
epoch scan is faster), a point read's requests per ``read_row`` (one), and
``issue``: the proof's terms, per ordering: requests of the epoch scan over the
sum of each epoch's alone (worst round: at most 1 meets the bound) and time
raw / salted (median of the paired rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
    TableAsync,
)

from saltedtable import (
    CallStats,
    Epoch,
    Epochs,
    Layout,
    ReadBudget,
    SaltedTableAsync,
    SaltScheme,
    Window,
    epoch_field,
)
from saltedtable.testing import (
    EMULATOR_HOST_ENV,
    INSTANCE,
    PROJECT,
    create_table,
    delete_table,
    emulator_env,
    start_emulator,
)

T0 = 1_704_067_200_000  # ms: the N=64 epoch's start; N=16 before it
LAYOUT = Layout.of_epochs(
    Epochs(
        (Epoch(None, SaltScheme(16)), Epoch(T0 * 1000, SaltScheme(64))),
        epoch_field("ms", index=1, digits=13),
        min_lead=60.0,
    )
)


def key(i: int, rows: int) -> bytes:
    """Row ``i``: the first half before T0, the second after it."""
    return b"dev%04d#%013d" % (i % 1000, T0 + (i - rows // 2) * 1000)


async def load(raw: TableAsync, rows: int, layout: Layout, part: range | None = None) -> None:
    salted = SaltedTableAsync(raw, layout, guard=False)
    batch = []
    for i in range(rows) if part is None else part:
        batch.append(RowMutationEntry(key(i, rows), SetCell("cf", b"v", b"x" * 100, 1000)))
        if len(batch) == 1000:
            await salted.bulk_mutate_rows(batch)
            batch = []
    if batch:
        await salted.bulk_mutate_rows(batch)


async def raw_scan(raw: TableAsync, prefixes: list[bytes]) -> tuple[int, int]:
    """(rows, requests) of one unordered sub-scan per prefix, all at once."""

    async def one(prefix: bytes) -> int:
        end = prefix[:-1] + bytes((prefix[-1] + 1,))
        return len(await raw.read_rows(ReadRowsQuery(row_ranges=RowRange(prefix, end))))

    counts = await asyncio.gather(*(one(p) for p in prefixes))
    return sum(counts), len(prefixes)


async def run(rows: int, rounds: int, address: str, budget: ReadBudget) -> dict[str, Any]:
    ids = [f"epochs-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for table_id in ids:
        create_table(address, table_id, ("cf",))
    try:
        async with BigtableDataClientAsync(project=PROJECT) as client:
            raw = client.get_table(INSTANCE, ids[0])
            await load(raw, rows, LAYOUT)
            salted = SaltedTableAsync(raw, LAYOUT, guard=False, budget=budget)
            alone = []
            for table_id, epoch, part in zip(
                ids[1:], LAYOUT.schemes, (range(rows // 2), range(rows // 2, rows)), strict=True
            ):
                own = client.get_table(INSTANCE, table_id)
                await load(own, rows, Layout(epoch), part)
                alone.append(SaltedTableAsync(own, epoch, guard=False, budget=budget))
            union = sorted({p for s in LAYOUT.schemes for p in s.prefixes})
            each = [p for s in LAYOUT.schemes for p in s.prefixes]
            requests: dict[str, list[int]] = {}

            async def salted_scan(name: str, ordered: bool) -> int:
                stats = CallStats()
                got = len(await salted.read_rows(ReadRowsQuery(), ordered=ordered, stats=stats))
                requests.setdefault(name, []).append(stats.requests)
                return got

            async def union_scan() -> int:
                got, sent = await raw_scan(raw, union)
                requests.setdefault("raw_union", []).append(sent)
                return got

            async def each_scan() -> int:
                got, sent = await raw_scan(raw, each)
                requests.setdefault("raw_each", []).append(sent)
                return got

            async def salted_each_scan(name: str, ordered: bool) -> int:
                got = sent = 0
                for table in alone:
                    stats = CallStats()
                    got += len(await table.read_rows(ReadRowsQuery(), ordered=ordered, stats=stats))
                    sent += stats.requests
                requests.setdefault(name, []).append(sent)
                return got

            runs: dict[str, Callable[[], Awaitable[int]]] = {
                "salted": functools.partial(salted_scan, "salted", True),
                "salted_unordered": functools.partial(salted_scan, "salted_unordered", False),
                "raw_union": union_scan,
                "raw_each": each_scan,
                "salted_each": functools.partial(salted_each_scan, "salted_each", True),
                "salted_each_unordered": functools.partial(
                    salted_each_scan, "salted_each_unordered", False
                ),
            }
            times: dict[str, list[float]] = {name: [] for name in runs}
            order = list(runs)
            shuffle = random.Random(39)
            for _ in range(rounds):
                shuffle.shuffle(order)
                for name in order:
                    started = time.perf_counter()
                    got = await runs[name]()
                    times[name].append(time.perf_counter() - started)
                    # (raw_each reads the shared prefixes twice: more rows than the table.)
                    assert got >= rows, (name, got)
            calls = 0
            real = raw.read_row

            async def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return await real(*args, **kwargs)

            raw.read_row = counted  # type: ignore[method-assign]
            for i in (0, rows - 1):
                assert await salted.read_row(key(i, rows)) is not None
            raw.read_row = real  # type: ignore[method-assign]

            def ratios(name: str, salted: str = "salted") -> dict[str, float]:
                paired = [r / s for r, s in zip(times[name], times[salted], strict=True)]
                return {
                    "median": round(statistics.median(paired), 3),
                    "min": round(min(paired), 3),
                    "max": round(max(paired), 3),
                }

            return {
                "rows": rows,
                "rounds": rounds,
                "budget": repr(budget),
                "layout": str(LAYOUT.epochs),
                "requests": requests,
                "seconds_median": {n: round(statistics.median(t), 4) for n, t in times.items()},
                "raw_union_over_salted": ratios("raw_union"),
                "raw_each_over_salted": ratios("raw_each"),
                "salted_each_over_salted": ratios("salted_each"),
                "point_read_requests": calls / 2,
                "issue": {
                    ordering: {
                        "requests_epoch_over_sum_each": round(
                            max(
                                e / a
                                for e, a in zip(
                                    requests[f"salted{suffix}"],
                                    requests[f"salted_each{suffix}"],
                                    strict=True,
                                )
                            ),
                            3,
                        ),
                        "time_raw_union_over_salted": ratios("raw_union", f"salted{suffix}")[
                            "median"
                        ],
                        "time_raw_each_over_salted": ratios("raw_each", f"salted{suffix}")[
                            "median"
                        ],
                    }
                    for ordering, suffix in (("ordered", ""), ("unordered", "_unordered"))
                }
                | {"point_read_requests": calls / 2},
            }
    finally:
        for table_id in ids:
            delete_table(address, table_id, missing_ok=True)


OLD, NEW = SaltScheme(16), SaltScheme(64)


def entity(i: int) -> bytes:
    """Row ``i`` of the window section: an entity key, no time in it."""
    return b"user%07d" % i


async def run_window(rows: int, rounds: int, address: str, budget: ReadBudget) -> dict[str, Any]:
    table_id = f"window-{uuid.uuid4().hex[:8]}"
    create_table(address, table_id, ("cf", "saltedtable-window"))
    try:
        async with BigtableDataClientAsync(project=PROJECT) as client:
            raw = client.get_table(INSTANCE, table_id)
            before = SaltedTableAsync(raw, OLD, guard=False)
            window = SaltedTableAsync(raw, NEW, guard=False, budget=budget, window=Window(OLD, NEW))
            for writer, part in ((before, range(rows // 2)), (window, range(rows // 2, rows))):
                for start in range(part.start, part.stop, 1000):
                    await writer.bulk_mutate_rows(
                        [
                            RowMutationEntry(entity(i), SetCell("cf", b"v", b"x" * 100, 1000))
                            for i in range(start, min(start + 1000, part.stop))
                        ]
                    )
            union = sorted({p for s in (OLD, NEW) for p in s.prefixes})
            each = [p for s in (OLD, NEW) for p in s.prefixes]
            requests: dict[str, list[int]] = {}

            async def window_scan() -> int:
                stats = CallStats()
                got = len(await window.read_rows(ReadRowsQuery(), stats=stats))
                requests.setdefault("window", []).append(stats.requests)
                return got

            async def raw_scan_of(name: str, prefixes: list[bytes]) -> int:
                got, sent = await raw_scan(raw, prefixes)
                requests.setdefault(name, []).append(sent)
                return got

            runs: dict[str, Callable[[], Awaitable[int]]] = {
                "window": window_scan,
                "raw_union": functools.partial(raw_scan_of, "raw_union", union),
                "raw_each": functools.partial(raw_scan_of, "raw_each", each),
            }
            times: dict[str, list[float]] = {name: [] for name in runs}
            order = list(runs)
            shuffle = random.Random(39)
            for _ in range(rounds):
                shuffle.shuffle(order)
                for name in order:
                    started = time.perf_counter()
                    got = await runs[name]()
                    times[name].append(time.perf_counter() - started)
                    assert got >= rows, (name, got)
            calls = 0
            real_rows, real_stream = raw.read_rows, raw.read_rows_stream

            async def rows_call(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return await real_rows(*args, **kwargs)

            async def stream_call(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return await real_stream(*args, **kwargs)

            raw.read_rows = rows_call  # type: ignore[method-assign]
            raw.read_rows_stream = stream_call  # type: ignore[method-assign]
            points = [entity(0), entity(rows - 1)]  # an old row, a new row
            for k in points:
                assert await window.read_row(k) is not None
            raw.read_rows, raw.read_rows_stream = real_rows, real_stream  # type: ignore[method-assign]

            def ratio(name: str) -> dict[str, float]:
                paired = [r / s for r, s in zip(times[name], times["window"], strict=True)]
                return {
                    "median": round(statistics.median(paired), 3),
                    "min": round(min(paired), 3),
                    "max": round(max(paired), 3),
                }

            return {
                "rows": rows,
                "rounds": rounds,
                "window": str(Window(OLD, NEW)),
                "requests": requests,
                "seconds_median": {n: round(statistics.median(t), 4) for n, t in times.items()},
                "raw_union_over_window": ratio("raw_union"),
                "raw_each_over_window": ratio("raw_each"),
                "point_read_requests": calls / len(points),
            }
    finally:
        delete_table(address, table_id, missing_ok=True)


@contextlib.contextmanager
def emulator() -> Iterator[str]:
    if os.environ.get(EMULATOR_HOST_ENV):
        yield os.environ[EMULATOR_HOST_ENV]
        return
    with start_emulator() as emu:
        os.environ.update(emulator_env(emu))
        yield emu.address


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--budget-mb", type=int, default=8, help="the reads' ReadBudget bytes (default 8 MiB)"
    )
    parser.add_argument(
        "--section", choices=("epochs", "window"), default="epochs", help="what to measure"
    )
    args = parser.parse_args()
    budget = ReadBudget(rows=1 << 30, bytes=args.budget_mb << 20)
    if args.budget_mb == 8:
        budget = ReadBudget()
    with emulator() as address:
        measure = run_window if args.section == "window" else run
        report = asyncio.run(measure(args.rows, args.rounds, address, budget))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
