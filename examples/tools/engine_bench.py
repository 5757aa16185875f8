"""The read engine against the raw client on the emulator: calls per row, throughput,
first row, a delay per request, and wide-row memory (issue 23).

Run: ``.venv/bin/python examples/tools/engine_bench.py`` (or ``make bench ARGS="--only engine"``,
which runs this file's sections). It starts its own emulator unless
``BIGTABLE_EMULATOR_HOST`` is set, and prints one JSON report (also written
under ``bench-results/``).

Sections (``--sections``, default all):

* ``profile``: cProfile of one 16-bucket scan of ``--rows`` rows: the raw client's
  16 concurrent sub-scans (one per bucket, unordered) against saltedtable ordered and
  ``ordered=False``, and the two floors: :meth:`Scans.floor` (a minimal stream of
  logical rows over the 16 sub-scans) and :meth:`Scans.ordered_floor` (a minimal
  ordered merge of them). Python function calls per row:
  deterministic, unlike timings on a shared machine; and the requests each salted scan
  made (outside the profile).
* ``throughput``: the same scans timed, in a shuffled order each round (seeded),
  ``--rounds`` times, plus one raw scan of the whole table and the two floors; paired
  ratios against the raw sub-scans, and of each salted scan against its floor (median
  and range), the time to the first row as a fraction of each salted scan, and the
  requests each salted scan made.
  ``--runs`` repeats the section and pools the paired ratios of every round of every
  run: their median, the 2.5-97.5 percentile interval, and a 95% confidence interval
  of the median (order statistics, distribution-free).
* ``delay``: every request first sleeps 1 ms or 5 ms (a proxy in front of the table):
  the full scans, a 100-row prefix and a ``limit=10`` read, salted against raw in the
  same run.
* ``firstrow``: for each ``--n`` (number of buckets), a table of ``--firstrow-rows-per-bucket``
  rows per bucket (at least 25): the time to the first row as a fraction of the whole
  scan, saltedtable ordered and ``ordered=False`` against the raw client's single scan
  of the same physical table (``--rounds`` rounds, alternating); and the raw client's
  cost of a request in rows, which sets the ordered first row's floor
  (``client_request_cost``, see :func:`request_cost`).
* ``wide``: a fresh process streams a table of 64 KiB rows (and one of 1 MiB rows),
  raw single scan against saltedtable ordered and unordered with the default budget;
  peak RSS (VmHWM) of each, and saltedtable's ``peak_buffered_bytes``.
* ``memory`` (issue 38; not in the default sections): for N = 16, 64 and 256
  (``--memory-n``), a table of ``--memory-rows`` rows of 100 B, and tables of
  ``--memory-wide-mb`` MB of 64 KiB rows (N = 16, 64) and 1 MiB rows (N = 16): each
  full scan in a fresh process (``--memory-runs`` times), the raw client's single scan,
  its N sub-scans at once (N = 16) and saltedtable ordered and unordered with the
  default budget and a bare channel; peak RSS (VmHWM), the salted peak over the raw
  single scan's in the same run, and ``peak_buffered_bytes``.
* ``fallback`` (issue 38; not in the default sections): the ordered 16-bucket scan
  through the client's own ``read_rows_stream`` (the fallback path) against the raw
  sub-scans, in a shuffled order each round: through a wrapper table that defines
  its own ``read_rows_stream`` and adds no per-row work (:class:`NoOpWrapper`), with
  ``client_internals=False``, through a ``__getattr__`` proxy (which keeps the fast
  path), and on the client's table (the fast path); and two references that bound
  the fallback: the wrapper's scan with ``ordered=False``, and the raw sub-scans split
  into the two requests a bucket an ordered scan sends (``raw_16_split``: what that
  shape costs the raw client, no merge). Paired ratios and main-thread CPU over the
  raw sub-scans' pooled over ``--runs``, and the calls per row of each under cProfile.
* ``writes`` (issue 41; not in the default sections): the async and the sync client
  against saltedtable without and with the layout guard, in the same process, and the
  client writing the salted keys itself (``floor``: what the keys' shape costs):
  ``bulk_mutate_rows`` of ``--write-bulk-rows`` entries, ``mutations_batcher()`` with
  ``--write-appends`` appends, and ``--write-point-ops`` sequential ``mutate_row`` and
  ``check_and_mutate_row`` calls; every operation of every variant once a round, in a
  shuffled order, ``--write-rounds`` rounds (>= 20 for the published ratios). Ratios:
  raw seconds over salted seconds in the same round (above 0.95: within 5% of the
  client), median and 95% interval of the median; the share of each variant's time in
  garbage collection and its full collections, the ratios without that time, and the
  same ratios over the process's CPU time (``_cpu``: steadier on a shared machine). Then
  the batcher's and the bulk writes' rounds again with ``--write-live`` entries held
  alive in the process. ``--write-ops`` picks the operations; ``--write-point-calls N``
  also times N point writes of each variant interleaved call by call
  (``point_interleaved``: a single call's latency, paired block by block). ``calls``:
  Python calls per appended row, per bulk entry and per point write (cProfile), and
  above the raw client's. Example: ``engine_bench.py --sections writes --write-rounds 20
  --write-point-calls 3000``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import cProfile
import gc
import json
import math
import operator
import os
import pstats
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    Row,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.row_filters import PassAllFilter
from grpc import aio

from saltedtable import CallStats, SaltedTable, SaltedTableAsync, SaltScheme, prefix_end
from saltedtable.testing import (
    EMULATOR_HOST_ENV,
    INSTANCE,
    PROJECT,
    create_table,
    delete_table,
    emulator_env,
    start_emulator,
)

FAMILY = "cf"
BUCKETS = 16
ROWS_PER_PREFIX = 100
#: Rows the fan-in floor (:meth:`Scans.floor`) hands to its consumer at a time.
FLOOR_BATCH = 64
ROW_KEY = operator.attrgetter("row_key")


def key_of(i: int) -> bytes:
    """Row ``i``'s logical key: 100 rows per ``user`` prefix, in row order."""
    return b"user%05d#%05d" % (i // ROWS_PER_PREFIX, i % ROWS_PER_PREFIX)


async def load(
    client: BigtableDataClientAsync, table_id: str, rows: int, size: int, buckets: int = BUCKETS
) -> None:
    """``rows`` rows of one ``size``-byte cell, written through a salted table."""
    table = SaltedTableAsync.from_client(
        client, INSTANCE, table_id, SaltScheme(buckets), guard=False
    )
    batch = max(1, min(2000, (8 << 20) // size))
    for start in range(0, rows, batch):
        entries = [
            RowMutationEntry(key_of(i), SetCell(FAMILY, b"q", b"%010d" % i * (size // 10), 1000))
            for i in range(start, min(rows, start + batch))
        ]
        await table.bulk_mutate_rows(entries)


READ_ROWS_METHOD = "/google.bigtable.v2.Bigtable/ReadRows"


class DelayReads(aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Waits ``delay`` seconds before every ReadRows request leaves the client.

    On the client's channel, below every table object: the raw client's requests
    and saltedtable's (which make their own RPC on that channel) wait alike.
    """

    def __init__(self) -> None:
        self.delay = 0.0

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        method = client_call_details.method
        if isinstance(method, bytes):
            method = method.decode()
        if self.delay and method == READ_ROWS_METHOD:
            await asyncio.sleep(self.delay)
        return await continuation(client_call_details, request)


@contextlib.contextmanager
def delayed_reads(client: BigtableDataClientAsync) -> Iterator[DelayReads]:
    """A :class:`DelayReads` on ``client``'s channel while the block runs.

    (The channel's own interceptor list, which every stub made on it consults at
    each call: grpc.aio offers no public way to add one to a channel that exists.)
    """
    interceptor = DelayReads()
    interceptors = client.transport.grpc_channel._channel._unary_stream_interceptors
    interceptors.append(interceptor)
    try:
        yield interceptor
    finally:
        interceptors.remove(interceptor)


async def count(stream: AsyncIterable[Any]) -> int:
    n = 0
    async for _ in stream:
        n += 1
    return n


class Scans:
    """The scans compared, over one physical table (optionally through a delay)."""

    def __init__(self, raw: Any, salted: SaltedTableAsync) -> None:
        self.raw = raw
        self.salted = salted
        plan = salted.plan(ReadRowsQuery())
        self.subs = [
            ReadRowsQuery(row_ranges=[r.to_row_range() for r in sub.ranges])
            for sub in plan.subqueries
        ]
        self.cuts = [len(sub.prefix) for sub in plan.subqueries]
        self.first: float | None = None
        #: Requests the last salted scan made (CallStats.requests), while `stats` is set.
        self.requests = 0
        self.stats = False

    async def raw16(self, query: ReadRowsQuery | None = None) -> int:
        subs = self.subs if query is None else self.sub_queries(query)

        async def one(q: ReadRowsQuery) -> int:
            return await count(await self.raw.read_rows_stream(q))

        return sum(await asyncio.gather(*(one(q) for q in subs)))

    async def raw16_split(self, first: int) -> int:
        """:meth:`raw16`, each sub-scan in two requests: its first ``first`` rows, then the rest.

        An ordered salted scan's requests to a bucket take this shape (a first
        page, then a stream from after its last key), so this is what that shape
        alone costs the raw client: a second request's start and round trip per
        bucket, no merge. (Sub-scans of one range each, as :attr:`subs` are.)
        """

        async def one(q: ReadRowsQuery) -> int:
            (whole,) = q.row_ranges
            n = 0
            last = None
            page = ReadRowsQuery(row_ranges=[whole], limit=first)
            async for row in await self.raw.read_rows_stream(page):
                last = row.row_key
                n += 1
            if n < first:
                return n
            rest = RowRange(
                start_key=last,
                end_key=whole.end_key,
                start_is_inclusive=False,
                end_is_inclusive=whole.end_is_inclusive,
            )
            return n + await count(await self.raw.read_rows_stream(ReadRowsQuery(row_ranges=rest)))

        return sum(await asyncio.gather(*(one(q) for q in self.subs)))

    async def floor(self) -> int:
        """A minimal fan-in of the 16 sub-scans into one stream of logical rows.

        Each sub-scan's task relabels its rows to logical keys (the row's and
        each cell's), measures their bytes and appends them to one shared
        batch; the consumer, one async generator, takes the whole batch once
        it holds :data:`FLOOR_BATCH` rows (or a sub-scan ends) and yields its
        rows one by one. No order, budget, slots, statistics or cancellation:
        the least saltedtable's stream does a row (relabel, measure for the
        budget, hand to one consumer), done as simply as we could (one
        implementation, not a proven lower bound).
        """
        loop = asyncio.get_running_loop()
        batch: list[Row] = []
        held = measured = 0
        left = len(self.subs)
        waiter: asyncio.Future[None] | None = None

        def wake() -> None:
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

        async def one(query: ReadRowsQuery, cut: int) -> None:
            nonlocal held, measured, left
            try:
                async for row in await self.raw.read_rows_stream(query):
                    key = row.row_key[cut:]
                    row.row_key = key
                    size = len(key)
                    for cell in row.cells:
                        cell.row_key = key
                        size += len(cell.value)
                    measured += size
                    batch.append(row)
                    held += 1
                    if held >= FLOOR_BATCH:
                        wake()
            finally:
                left -= 1
                wake()

        async def rows() -> AsyncIterator[Row]:
            nonlocal batch, held, waiter
            while True:
                if batch:
                    taken, batch, held = batch, [], 0
                    for row in taken:
                        yield row
                elif not left:
                    return
                else:
                    waiter = loop.create_future()
                    await waiter
                    waiter = None

        tasks = [
            asyncio.create_task(one(q, cut)) for q, cut in zip(self.subs, self.cuts, strict=True)
        ]
        try:
            return await count(rows())
        finally:
            await asyncio.gather(*tasks)

    async def ordered_floor(self) -> int:
        """A minimal ordered merge of the 16 sub-scans (one implementation, not a proven bound).

        :meth:`floor`'s rows, each sub-scan's in a list of its own. The consumer
        hands over every row at or below the lowest last key of the sub-scans
        still running (a bisection in each list, then one sort), then waits
        for the sub-scan with that key (or one that holds nothing) to bring
        ``FLOOR_BATCH // 16`` more rows. No pause, budget, slots, statistics
        or cancellation.
        """
        loop = asyncio.get_running_loop()
        count_subs = len(self.subs)
        held: list[list[Row]] = [[] for _ in self.subs]
        running = [True] * count_subs
        part = max(1, FLOOR_BATCH // count_subs)
        measured = 0
        waited, target = -1, 0
        waiter: asyncio.Future[None] | None = None

        def wake() -> None:
            nonlocal waited
            waited = -1
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

        async def one(i: int, query: ReadRowsQuery, cut: int) -> None:
            nonlocal measured
            mine = held[i]
            try:
                async for row in await self.raw.read_rows_stream(query):
                    key = row.row_key[cut:]
                    row.row_key = key
                    size = len(key)
                    for cell in row.cells:
                        cell.row_key = key
                        size += len(cell.value)
                    measured += size
                    mine.append(row)
                    if i == waited and len(mine) >= target:
                        wake()
            finally:
                running[i] = False
                if i == waited:
                    wake()

        async def rows() -> AsyncIterator[Row]:
            nonlocal waited, target, waiter
            while True:
                mark: bytes | None = None
                low, empty = -1, False
                for i, mine in enumerate(held):
                    if running[i]:
                        if not mine:
                            low, empty = i, True
                            break
                        last = mine[-1].row_key
                        if mark is None or last < mark:
                            low, mark = i, last
                if not empty:
                    batch: list[Row] = []
                    for mine in held:
                        if not mine:
                            continue
                        if mark is None or mine[-1].row_key <= mark:
                            batch += mine
                            mine.clear()
                        else:
                            end = bisect.bisect_right(mine, mark, key=ROW_KEY)
                            batch += mine[:end]
                            del mine[:end]
                    if batch:
                        batch.sort(key=ROW_KEY)
                        for row in batch:
                            yield row
                        continue
                    if low < 0:
                        return
                waited, target = low, len(held[low]) + part
                waiter = loop.create_future()
                await waiter
                waiter = None

        tasks = [
            asyncio.create_task(one(i, q, cut))
            for i, (q, cut) in enumerate(zip(self.subs, self.cuts, strict=True))
        ]
        try:
            return await count(rows())
        finally:
            await asyncio.gather(*tasks)

    def sub_queries(self, query: ReadRowsQuery) -> list[ReadRowsQuery]:
        return [
            ReadRowsQuery(
                row_keys=list(sub.keys) or None,
                row_ranges=[r.to_row_range() for r in sub.ranges] or None,
                limit=query.limit,
            )
            for sub in self.salted.plan(query).subqueries
        ]

    async def raw1(self) -> int:
        start = time.perf_counter()
        n = 0
        self.first = None
        async for _ in await self.raw.read_rows_stream(ReadRowsQuery()):
            if not n:
                self.first = time.perf_counter() - start
            n += 1
        return n

    async def salted_scan(self, ordered: bool, query: ReadRowsQuery | None = None) -> int:
        start = time.perf_counter()
        n = 0
        self.first = None
        stats = CallStats() if self.stats else None
        stream = await self.salted.read_rows_stream(
            query or ReadRowsQuery(), ordered=ordered, stats=stats
        )
        async for _ in stream:
            if not n:
                self.first = time.perf_counter() - start
            n += 1
        self.requests = 0 if stats is None else stats.requests
        return n

    async def count_requests(self, ordered: bool) -> int:
        """Requests one salted scan makes (a scan with CallStats, outside the timings)."""
        self.stats = True
        try:
            await self.salted_scan(ordered)
        finally:
            self.stats = False
        return self.requests

    async def salted_ordered(self, query: ReadRowsQuery) -> int:
        return await self.salted_scan(True, query)

    async def ordered(self) -> int:
        return await self.salted_scan(True)

    async def unordered(self) -> int:
        return await self.salted_scan(False)


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
    }


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median: the order statistics
    x_(j) and x_(n-j+1) (1-based) for the largest j with P(j <= Binomial(n, 1/2) <= n - j)
    >= ``level`` (the whole range when n is too small for any)."""
    ordered = sorted(values)
    n = len(ordered)
    pmf = [math.comb(n, i) / 2**n for i in range(n + 1)]
    j = 1
    while j + 1 <= n - j - 1 and sum(pmf[j + 1 : n - j]) >= level:
        j += 1
    return ordered[j - 1], ordered[n - j]


def pooled(values: list[float]) -> dict[str, Any]:
    """Median, 2.5-97.5 percentile interval and 95% CI of the median of paired ratios."""
    ordered = sorted(values)
    lo, hi = median_ci(ordered)
    cuts = statistics.quantiles(ordered, n=40, method="inclusive") if len(ordered) > 1 else []
    return {
        "n": len(ordered),
        "median": round(statistics.median(ordered), 3),
        "median_95ci": [round(lo, 3), round(hi, 3)],
        "p2.5_p97.5": [round(cuts[0], 3), round(cuts[-1], 3)] if cuts else None,
    }


#: Functions listed in the profile section's ``time_shares``, by their own time.
TIME_SHARES = 40


async def profile(scans: Scans, rows: int) -> dict[str, Any]:
    """Python function calls per row of each scan under cProfile (after a warm-up scan)."""
    out: dict[str, Any] = {}
    variants: dict[str, Callable[[], Awaitable[int]]] = {
        "raw_16_subscans": scans.raw16,
        "fan_in_floor": scans.floor,
        "ordered_floor": scans.ordered_floor,
        "salted_ordered": scans.ordered,
        "salted_unordered": scans.unordered,
    }
    per_function: dict[str, dict[str, float]] = {}
    for name, scan in variants.items():
        await scan()  # warm-up: channels, caches
        prof = cProfile.Profile()
        prof.enable()
        got = await scan()
        prof.disable()
        assert got == rows, (name, got)
        st: Any = pstats.Stats(prof)
        per_function[name] = {
            f"{Path(f).name}:{line}({fn})": calls / rows
            for (f, line, fn), (_, calls, *_) in st.stats.items()
        }
        # Where the profiled time went: each function's own time (tottime), as a share.
        top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:TIME_SHARES]
        out[name] = {
            "calls_per_row": round(st.total_calls / rows, 2),
            "cpu_seconds": round(st.total_tt, 3),
            "time_shares": {
                f"{Path(f).name}:{line}({fn})": round(tt / st.total_tt, 3)
                for (f, line, fn), (_, _, tt, *_) in top
            },
        }
    raw = per_function["raw_16_subscans"]
    out["requests_per_scan"] = {
        "salted_ordered": await scans.count_requests(True),
        "salted_unordered": await scans.count_requests(False),
    }
    floors = {"salted_ordered": "ordered_floor", "salted_unordered": "fan_in_floor"}
    for name in ("fan_in_floor", "ordered_floor", "salted_ordered", "salted_unordered"):
        out[name]["above_raw"] = round(
            out[name]["calls_per_row"] - out["raw_16_subscans"]["calls_per_row"], 2
        )
        if name in floors:
            out[name]["above_floor"] = round(
                out[name]["calls_per_row"] - out[floors[name]]["calls_per_row"], 2
            )
        mine = per_function[name]
        diff = {f: mine.get(f, 0.0) - raw.get(f, 0.0) for f in set(mine) | set(raw)}
        out[name]["extra_calls_per_row"] = {
            f: round(d, 2) for f, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:25]
        }
    return out


async def throughput(scans: Scans, rows: int, rounds: int, seed: int = 0) -> dict[str, Any]:
    """Rows per second of each scan, in a shuffled order each round; paired ratios.

    The order is drawn anew each round (seeded: ``seed``), so no scan always
    follows the same one (a lone raw scan leaves the cores idle, a salted one
    leaves garbage), and each timed scan starts after a full collection.
    """
    shuffle = random.Random(seed).shuffle
    names = [
        "raw_16_subscans",
        "salted_ordered",
        "salted_unordered",
        "raw_1_scan",
        "fan_in_floor",
        "ordered_floor",
    ]
    fns = [
        scans.raw16,
        scans.ordered,
        scans.unordered,
        scans.raw1,
        scans.floor,
        scans.ordered_floor,
    ]
    took: dict[str, list[float]] = {n: [] for n in names}
    # The main thread's CPU seconds of each scan (the event loop's thread: the
    # client's and saltedtable's Python work; gRPC's own threads are not in it).
    cpu: dict[str, list[float]] = {n: [] for n in names}
    first: dict[str, list[float]] = {n: [] for n in ("salted_ordered", "salted_unordered")}
    for _ in range(rounds):
        order = list(range(len(names)))
        shuffle(order)
        for i in order:
            gc.collect()
            start = time.perf_counter()
            on_cpu = time.thread_time()
            got = await fns[i]()
            cpu[names[i]].append(time.thread_time() - on_cpu)
            seconds = time.perf_counter() - start
            assert got == rows
            took[names[i]].append(seconds)
            if names[i] in first and scans.first is not None:
                first[names[i]].append(scans.first / seconds)
    requests = {
        "salted_ordered": await scans.count_requests(True),
        "salted_unordered": await scans.count_requests(False),
    }
    raw = took["raw_16_subscans"]
    floors = {"salted_ordered": "ordered_floor", "salted_unordered": "fan_in_floor"}
    return {
        "paired": {
            n: [round(a / b, 4) for a, b in zip(raw, took[n], strict=True)]
            for n in ("salted_ordered", "salted_unordered", "fan_in_floor", "ordered_floor")
        }
        | {
            f"{n}_vs_{f}": [round(a / b, 4) for a, b in zip(took[f], took[n], strict=True)]
            for n, f in floors.items()
        }
        | {
            # (CPU over raw: above 1 is more CPU, unlike the speed ratios.)
            f"{n}_main_cpu_over_raw": [
                round(c / a, 4) for a, c in zip(cpu["raw_16_subscans"], cpu[n], strict=True)
            ]
            for n in ("salted_ordered", "salted_unordered", "fan_in_floor", "ordered_floor")
        }
        | {
            "ordered_vs_raw_1_scan": [
                round(a / b, 4)
                for a, b in zip(took["raw_1_scan"], took["salted_ordered"], strict=True)
            ]
        },
        "requests_per_scan": requests,
        "rows_per_s": {n: spread([rows / t for t in took[n]]) for n in names},
        "ratio_vs_raw_16": {
            n: spread([a / b for a, b in zip(raw, took[n], strict=True)])
            for n in ("salted_ordered", "salted_unordered", "fan_in_floor", "ordered_floor")
        },
        "ordered_vs_raw_1_scan": spread(
            [a / b for a, b in zip(took["raw_1_scan"], took["salted_ordered"], strict=True)]
        ),
        "first_row_fraction": {n: spread(v) for n, v in first.items() if v},
        # Main-thread CPU of each scan over the raw sub-scans' in the same round
        # (above 1: more CPU; the wall-time ratios above are raw over scan).
        "main_cpu_vs_raw_16": {
            n: spread([c / a for a, c in zip(cpu["raw_16_subscans"], cpu[n], strict=True)])
            for n in ("salted_ordered", "salted_unordered", "fan_in_floor", "ordered_floor")
        },
        "main_cpu_seconds": {n: spread(v) for n, v in cpu.items()},
    }


class Forwarding:
    """A proxy of a table that forwards every attribute (``read_rows_stream`` included)."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)


class NoOpWrapper(Forwarding):
    """A wrapper table with its own ``read_rows_stream`` that adds no per-row work."""

    async def read_rows_stream(self, query: Any, **kwargs: Any) -> Any:
        return await self._table.read_rows_stream(query, **kwargs)


#: The fallback section's salted scans: how each salted table is made over the raw one.
FALLBACK_TABLES: dict[str, Callable[[Any], SaltedTableAsync]] = {
    "fast_path": lambda raw: SaltedTableAsync(raw, SaltScheme(BUCKETS), guard=False),
    "noop_wrapper": lambda raw: SaltedTableAsync(
        NoOpWrapper(raw), SaltScheme(BUCKETS), guard=False
    ),
    "switch_off": lambda raw: SaltedTableAsync(
        raw, SaltScheme(BUCKETS), guard=False, client_internals=False
    ),
    "forwarding_proxy": lambda raw: SaltedTableAsync(
        Forwarding(raw), SaltScheme(BUCKETS), guard=False
    ),
}


async def fallback(raw: Any, rows: int, rounds: int, seed: int = 0) -> dict[str, Any]:
    """The ordered scan through the client's own read_rows_stream against the raw sub-scans.

    Besides the salted scans of :data:`FALLBACK_TABLES` (ordered), two references
    that bound the fallback: the no-op wrapper's scan with ``ordered=False`` (what
    the order costs on that path) and :meth:`Scans.raw16_split` (what an ordered
    scan's two requests a bucket cost the raw client, with no merge). Each scan's
    main-thread CPU too, over the raw sub-scans' in the same round: on shared
    cores the wall-time ratios move with the load, the CPU ratios much less.
    """
    from saltedtable._engine.budget import first_window

    scans = {name: Scans(raw, make(raw)) for name, make in FALLBACK_TABLES.items()}
    base = scans["fast_path"]
    first = first_window(BUCKETS)  # an ordered scan's first request to each bucket
    fns: dict[str, Callable[[], Awaitable[int]]] = {"raw_16_subscans": base.raw16}
    fns |= {name: scan.ordered for name, scan in scans.items()}
    fns |= {
        "noop_wrapper_unordered": scans["noop_wrapper"].unordered,
        "raw_16_split": lambda: base.raw16_split(first),
    }
    took: dict[str, list[float]] = {n: [] for n in fns}
    cpu: dict[str, list[float]] = {n: [] for n in fns}
    names = list(fns)
    shuffle = random.Random(seed).shuffle
    for fn in fns.values():
        await fn()  # warm-up: channels, caches
    for _ in range(rounds):
        shuffle(names)
        for name in names:
            gc.collect()
            on_cpu = time.thread_time()
            start = time.perf_counter()
            got = await fns[name]()
            took[name].append(time.perf_counter() - start)
            cpu[name].append(time.thread_time() - on_cpu)
            assert got == rows, (name, got)
    raw16, raw_cpu = took["raw_16_subscans"], cpu["raw_16_subscans"]
    calls: dict[str, float] = {}
    for name, fn in fns.items():
        prof = cProfile.Profile()
        prof.enable()
        await fn()
        prof.disable()
        calls[name] = round(pstats.Stats(prof).total_calls / rows, 2)  # type: ignore[attr-defined]
    compared = [n for n in fns if n != "raw_16_subscans"]
    return {
        "paired": {
            n: [round(a / b, 4) for a, b in zip(raw16, took[n], strict=True)] for n in compared
        },
        # (CPU over raw: above 1 is more CPU, unlike the speed ratios.)
        "paired_main_cpu_over_raw": {
            n: [round(c / a, 4) for a, c in zip(raw_cpu, cpu[n], strict=True)] for n in compared
        },
        "ratio_vs_raw_16": {
            n: spread([a / b for a, b in zip(raw16, took[n], strict=True)]) for n in compared
        },
        "rows_per_s": {n: spread([rows / t for t in v]) for n, v in took.items()},
        "main_cpu_us_per_row": {n: spread([t / rows * 1e6 for t in v]) for n, v in cpu.items()},
        "calls_per_row": calls,
    }


async def delays(
    client: BigtableDataClientAsync, table_id: str, rows: int, rounds: int
) -> dict[str, Any]:
    """Full and small scans with 0, 1 and 5 ms before every request, salted and raw."""
    out: dict[str, Any] = {}
    with delayed_reads(client) as delay:
        for ms in (0.0, 1.0, 5.0):
            delay.delay = ms / 1000
            out[f"{ms:g}ms"] = await _delayed(client, table_id, rows, rounds, ms)
    return out


async def _delayed(
    client: BigtableDataClientAsync, table_id: str, rows: int, rounds: int, ms: float
) -> dict[str, Any]:
    """One delay's figures (see :func:`delays`)."""
    raw = client.get_table(INSTANCE, table_id)
    salted = SaltedTableAsync(raw, SaltScheme(BUCKETS), guard=False)
    scans = Scans(raw, salted)
    prefix = key_of(ROWS_PER_PREFIX * 7)[:9]
    small = ReadRowsQuery(row_ranges=RowRange(start_key=prefix, end_key=prefix_end(prefix)))
    limit = ReadRowsQuery(limit=10)
    full = await throughput(scans, rows, rounds)
    small_took: dict[str, list[float]] = {
        "prefix_salted": [],
        "prefix_raw_16": [],
        "limit10_salted": [],
        "limit10_raw_16": [],
    }
    for _ in range(rounds * 4):
        for name, fn, query in (
            ("prefix_salted", scans.salted_ordered, small),
            ("prefix_raw_16", scans.raw16, small),
            ("limit10_salted", scans.salted_ordered, limit),
            ("limit10_raw_16", scans.raw16, limit),
        ):
            start = time.perf_counter()
            await fn(query)
            small_took[name].append(time.perf_counter() - start)
    return {
        "full_ratio_vs_raw_16": full["ratio_vs_raw_16"],
        "full_rows_per_s": full["rows_per_s"],
        "small_ms": {n: spread([t * 1000 for t in v]) for n, v in small_took.items()},
        "small_over_delay": (
            {n: round(statistics.median(v) / (ms / 1000), 2) for n, v in small_took.items()}
            if ms
            else None
        ),
    }


async def request_cost(raw: Any, per_bucket: int, times: int = 20) -> dict[str, float]:
    """The raw client's cost of a request, in rows, and the first-row floor it sets.

    Python calls (cProfile: deterministic) of a 1-row and a ``per_bucket``-row
    read give the client's cost per row and per request. An ordered merge hands
    over its first row only once every bucket has answered, so a read of N
    buckets of ``per_bucket`` rows spends at least one request a bucket before
    it. On a client-bound machine, a scan that reads each bucket in one request
    (the fewest) so hands over its first row no earlier than
    ``request / (request + per_bucket x row)`` of its time; a scan that makes
    more requests a bucket lowers that fraction only by taking longer.
    """
    calls: dict[int, float] = {}
    for n in (1, per_bucket):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(times):
            got = await raw.read_rows(ReadRowsQuery(limit=n))
            assert len(got) == n, (n, len(got))
        prof.disable()
        st: Any = pstats.Stats(prof)
        calls[n] = st.total_calls / times
    row = (calls[per_bucket] - calls[1]) / max(1, per_bucket - 1)
    request = calls[1] - row
    return {
        "calls_per_row": round(row, 1),
        "calls_per_request": round(request, 1),
        "request_in_rows": round(request / row, 1),
        "first_row_floor_one_request_a_bucket": round(request / (request + per_bucket * row), 3),
    }


async def firstrow(
    address: str,
    client: BigtableDataClientAsync,
    ns: list[int],
    per_bucket: int,
    rounds: int,
) -> dict[str, Any]:
    """Time to the first row as a fraction of the whole scan, for N buckets."""
    out: dict[str, Any] = {}
    for n in ns:
        rows = n * per_bucket
        table_id = f"first-{uuid.uuid4().hex[:8]}"
        create_table(address, table_id, (FAMILY,))
        try:
            await load(client, table_id, rows, 100, buckets=n)
            raw = client.get_table(INSTANCE, table_id)
            scans = Scans(raw, SaltedTableAsync(raw, SaltScheme(n), guard=False))
            fns = {
                "raw_1_scan": scans.raw1,
                "salted_ordered": scans.ordered,
                "salted_unordered": scans.unordered,
            }
            took: dict[str, list[float]] = {k: [] for k in fns}
            first: dict[str, list[float]] = {k: [] for k in fns}
            firsts: dict[str, list[float]] = {k: [] for k in fns}
            names = list(fns)
            for r in range(rounds):
                for name in names[r % 3 :] + names[: r % 3]:
                    start = time.perf_counter()
                    got = await fns[name]()
                    seconds = time.perf_counter() - start
                    assert got == rows, (name, got, rows)
                    took[name].append(seconds)
                    if scans.first is not None:
                        first[name].append(scans.first / seconds)
                        firsts[name].append(scans.first * 1000)
            out[str(n)] = {
                "rows": rows,
                "first_row_fraction": {k: spread(v) for k, v in first.items()},
                "first_row_ms": {k: spread(v) for k, v in firsts.items()},
                "scan_seconds": {k: spread(v) for k, v in took.items()},
                "ordered_requests": await scans.count_requests(True),
                "client_request_cost": await request_cost(raw, per_bucket),
            }
            print(json.dumps({n: out[str(n)]["first_row_fraction"]}), file=sys.stderr)
        except Exception as exc:  # (e.g. a scan past its operation_timeout): say so, go on
            out[str(n)] = {"rows": rows, "error": f"{type(exc).__name__}: {exc}"[:500]}
            print(json.dumps({n: out[str(n)]}), file=sys.stderr)
        finally:
            delete_table(address, table_id, missing_ok=True)
    return out


async def _timed(stream: AsyncIterable[Any]) -> tuple[int, float, float]:
    """(rows, seconds to the first row, seconds in all) of a stream started just before."""
    start = time.perf_counter()
    first = 0.0
    n = 0
    async for _ in stream:
        if not n:
            first = time.perf_counter() - start
        n += 1
    return n, first, time.perf_counter() - start


async def reverse(
    client: BigtableDataClientAsync, address: str, rows: int, rounds: int
) -> dict[str, Any]:
    """A reverse scan against a forward scan of the same table: throughput and first row.

    ``raw_*``: one request over the whole (physical) table; the client cannot read
    backwards, so ``raw_reverse`` is saltedtable's reversed read operation on the raw
    table (the client's read operation, its header and descending chunk merge).
    ``salted_*``: the ordered 16-bucket scan. Rounds rotate the order of the four.
    """
    from saltedtable._async.chunks import client_read_rows_stream

    table_id = f"reverse-{uuid.uuid4().hex[:8]}"
    create_table(address, table_id, (FAMILY,))
    try:
        await load(client, table_id, rows, 100)
        raw = client.get_table(INSTANCE, table_id)
        salted = SaltedTableAsync(raw, SaltScheme(BUCKETS), guard=False)
        backwards = client_read_rows_stream(raw, reverse=True)

        async def raw_forward() -> AsyncIterable[Any]:
            return await raw.read_rows_stream(ReadRowsQuery())

        async def raw_reverse() -> AsyncIterable[Any]:
            return await backwards(ReadRowsQuery())

        async def salted_forward() -> AsyncIterable[Any]:
            return await salted.read_rows_stream(ReadRowsQuery())

        async def salted_reverse() -> AsyncIterable[Any]:
            return await salted.read_rows_stream({"reversed": True})

        fns = {
            "raw_forward": raw_forward,
            "raw_reverse": raw_reverse,
            "salted_forward": salted_forward,
            "salted_reverse": salted_reverse,
        }
        names = list(fns)
        took: dict[str, list[float]] = {k: [] for k in fns}
        first_ms: dict[str, list[float]] = {k: [] for k in fns}
        for r in range(rounds):
            for name in names[r % 4 :] + names[: r % 4]:
                got, first, seconds = await _timed(await fns[name]())
                assert got == rows, (name, got)
                took[name].append(seconds)
                first_ms[name].append(first * 1000)
        rate = {k: spread([rows / s for s in v]) for k, v in took.items()}
        return {
            "rows": rows,
            "buckets": BUCKETS,
            "rows_per_second": rate,
            "first_row_ms": {k: spread(v) for k, v in first_ms.items()},
            "reverse_over_forward": {
                "raw": rate["raw_reverse"]["median"] / rate["raw_forward"]["median"],
                "salted": rate["salted_reverse"]["median"] / rate["salted_forward"]["median"],
            },
        }
    finally:
        delete_table(address, table_id, missing_ok=True)


CHILD = """
import asyncio, json, sys
from pathlib import Path
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery
from saltedtable import CallStats, SaltedTableAsync, SaltScheme

def peak_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

async def main(project, instance, table_id, how):
    async with BigtableDataClientAsync(project=project) as client:
        raw = client.get_table(instance, table_id)
        await raw.read_rows(ReadRowsQuery(limit=1))
        base = peak_mb()
        stats = CallStats()
        n = 0
        if how == "raw":
            async for _ in await raw.read_rows_stream(ReadRowsQuery()):
                n += 1
        else:
            table = SaltedTableAsync.from_client(
                client, instance, table_id, SaltScheme(16), guard=False
            )
            async for _ in await table.read_rows_stream(
                ReadRowsQuery(), ordered=how == "ordered", stats=stats
            ):
                n += 1
    print(json.dumps({"rows": n, "baseline_mb": round(base, 1), "peak_mb": round(peak_mb(), 1),
                      "peak_buffered_bytes": getattr(stats, "peak_buffered_bytes", None),
                      "peak_buffered_rows": stats.peak_buffered_rows,
                      "requests": stats.requests}))

asyncio.run(main(*sys.argv[1:5]))
"""


def child(table_id: str, how: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, PROJECT, INSTANCE, table_id, how],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def wide(
    address: str, client: BigtableDataClientAsync, megabytes: int, runs: int
) -> dict[str, Any]:
    """Peak RSS of fresh processes streaming tables of 64 KiB and 1 MiB rows."""
    out: dict[str, Any] = {}
    for size in (64 << 10, 1 << 20):
        rows = megabytes * (1 << 20) // size
        table_id = f"wide-{uuid.uuid4().hex[:8]}"
        create_table(address, table_id, (FAMILY,))
        try:
            start = time.perf_counter()
            await load(client, table_id, rows, size)
            loaded = time.perf_counter() - start
            reports: dict[str, list[dict[str, Any]]] = {"raw": [], "ordered": [], "unordered": []}
            for r in range(runs):
                hows = ["raw", "ordered", "unordered"]
                for how in hows[r % 3 :] + hows[: r % 3]:
                    reports[how].append(child(table_id, how))
            peak = {h: statistics.median(x["peak_mb"] for x in v) for h, v in reports.items()}
            out[f"{size >> 10}KiB"] = {
                "rows": rows,
                "table_mb": megabytes,
                "load_seconds": round(loaded, 1),
                "peak_rss_mb": peak,
                "salted_minus_raw_mb": {
                    h: round(peak[h] - peak["raw"], 1) for h in ("ordered", "unordered")
                },
                "runs": reports,
            }
        finally:
            delete_table(address, table_id, missing_ok=True)
    return out


# -- memory (issue 38) -------------------------------------------------------------

MEMORY_CHILD = """
import asyncio, json, sys, time
from pathlib import Path
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery
from saltedtable import CallStats, SaltedTableAsync, SaltScheme

def peak_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

async def count(stream):
    n = 0
    async for _ in stream:
        n += 1
    return n

async def main(project, instance, table_id, how, buckets):
    async with BigtableDataClientAsync(project=project) as client:
        raw = client.get_table(instance, table_id)
        await raw.read_rows(ReadRowsQuery(limit=1))
        base = peak_mb()
        stats = CallStats()
        table = SaltedTableAsync.from_client(
            client, instance, table_id, SaltScheme(int(buckets)), guard=False
        )
        start = time.perf_counter()
        if how == "raw":
            n = await count(await raw.read_rows_stream(ReadRowsQuery()))
        elif how == "raw_subscans":
            subs = [
                ReadRowsQuery(row_ranges=[r.to_row_range() for r in sub.ranges])
                for sub in table.plan(ReadRowsQuery()).subqueries
            ]
            async def one(q):
                return await count(await raw.read_rows_stream(q))
            n = sum(await asyncio.gather(*(one(q) for q in subs)))
        else:
            n = await count(await table.read_rows_stream(
                ReadRowsQuery(), ordered=how == "ordered", stats=stats
            ))
        seconds = time.perf_counter() - start
    print(json.dumps({"rows": n, "baseline_mb": round(base, 1), "peak_mb": round(peak_mb(), 1),
                      "seconds": round(seconds, 2),
                      "peak_buffered_bytes": stats.peak_buffered_bytes,
                      "peak_buffered_rows": stats.peak_buffered_rows,
                      "requests": stats.requests}))

asyncio.run(main(*sys.argv[1:6]))
"""


def memory_child(table_id: str, how: str, buckets: int) -> dict[str, Any]:
    """One scan in a fresh process: its peak RSS (VmHWM) and what saltedtable says it held."""
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, PROJECT, INSTANCE, table_id, how, str(buckets)],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


#: The memory section's tables: (buckets, row bytes, table bytes or None: ``--memory-rows`` rows).
MEMORY_TABLES = ((16, 100, None), (64, 100, None), (256, 100, None))
MEMORY_WIDE = ((16, 64 << 10), (64, 64 << 10), (16, 1 << 20))


async def memory(
    address: str,
    client: BigtableDataClientAsync,
    rows: int,
    wide_mb: int,
    runs: int,
    ns: list[int],
) -> dict[str, Any]:
    """Peak RSS of full scans in fresh processes, raw and salted, per N and row size.

    One table per (N, row size), loaded once; each scan runs ``runs`` times in a
    fresh process, the scans in a rotating order. The raw single scan of the same
    table in the same run is the reference (``over_raw_mb``: salted peak minus raw
    peak, medians); the raw N sub-scans run for N = 16 only.
    """
    out: dict[str, Any] = {}
    cases = [(n, size, rows) for n, size, _ in MEMORY_TABLES if n in ns]
    if wide_mb:
        cases += [(n, size, wide_mb * (1 << 20) // size) for n, size in MEMORY_WIDE]
    for buckets, size, count_ in cases:
        table_id = f"mem-{uuid.uuid4().hex[:8]}"
        create_table(address, table_id, (FAMILY,))
        try:
            start = time.perf_counter()
            await load(client, table_id, count_, size, buckets)
            loaded = time.perf_counter() - start
            hows = ["raw", "ordered", "unordered"]
            if buckets == BUCKETS and size == 100:
                hows.insert(1, "raw_subscans")
            reports: dict[str, list[dict[str, Any]]] = {h: [] for h in hows}
            for r in range(runs):
                for how in hows[r % len(hows) :] + hows[: r % len(hows)]:
                    reports[how].append(memory_child(table_id, how, buckets))
            peak = {h: statistics.median(x["peak_mb"] for x in v) for h, v in reports.items()}
            name = f"N={buckets} {size}B" if size < 1024 else f"N={buckets} {size >> 10}KiB"
            out[name] = {
                "rows": count_,
                "load_seconds": round(loaded, 1),
                "peak_rss_mb": peak,
                "over_raw_mb": {h: round(peak[h] - peak["raw"], 1) for h in hows if h != "raw"},
                "seconds": {
                    h: statistics.median(x["seconds"] for x in v) for h, v in reports.items()
                },
                "peak_buffered_mb": {
                    h: round(max(x["peak_buffered_bytes"] or 0 for x in reports[h]) / (1 << 20), 1)
                    for h in ("ordered", "unordered")
                },
                "requests": {h: reports[h][0]["requests"] for h in ("ordered", "unordered")},
            }
            print(name, json.dumps(out[name]), file=sys.stderr, flush=True)
        finally:
            delete_table(address, table_id, missing_ok=True)
    return out


# -- writes (issue 41) ----------------------------------------------------------------

#: The write section's variants of one flavour: the raw client's table; ``floor``,
#: the raw client writing the keys saltedtable writes (salted before the timing:
#: what the key's shape costs the client and the server, not saltedtable's work);
#: and the salted table without and with the layout guard (settled by a first write).
WRITE_VARIANTS = ("raw", "floor", "salted", "salted_guard")
#: The variants compared with the raw client (and with the floor).
SALTED_VARIANTS = ("salted", "salted_guard")
#: The write section's operations (``--write-ops`` picks some).
WRITE_OPS = ("batcher", "bulk", "mutate_row", "check_and_mutate_row")
WRITE_VALUE = b"x" * 100
WRITE_SCHEME = SaltScheme(BUCKETS)


def write_entries(tag: bytes, n: int) -> list[RowMutationEntry]:
    """``n`` entries of one 100-byte cell; a fixed timestamp, so that rounds overwrite them."""
    return [
        RowMutationEntry(b"%s#%07d" % (tag, i), SetCell(FAMILY, b"q", WRITE_VALUE, 1000))
        for i in range(n)
    ]


class GcWatch:
    """Garbage collections while a block runs: how many of each generation, and their time."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    @contextlib.contextmanager
    def watching(self) -> Iterator[GcWatch]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


class WriteTargets:
    """The tables of one flavour: raw (its own table), salted and salted_guard (another)."""

    def __init__(self, flavour: str, tables: dict[str, Any], loop: asyncio.AbstractEventLoop):
        self.flavour = flavour
        self.tables = tables
        self.loop = loop

    def run(self, make: Callable[[], Any]) -> Any:
        """Run one operation: ``make()`` is its coroutine (async) or does it (sync)."""
        if self.flavour == "async":
            return self.loop.run_until_complete(make())
        return make()

    @staticmethod
    def _keys_for(variant: str, entries: list[RowMutationEntry]) -> list[RowMutationEntry]:
        if variant != "floor":
            return entries
        salt = WRITE_SCHEME.salt_key
        return [RowMutationEntry(salt(e.row_key), list(e.mutations)) for e in entries]

    def bulk(self, variant: str, entries: list[RowMutationEntry]) -> Callable[[], Any]:
        table = self.tables[variant]
        entries = self._keys_for(variant, entries)
        if self.flavour == "async":

            async def go_async() -> None:
                await table.bulk_mutate_rows(entries)

            return go_async
        return lambda: table.bulk_mutate_rows(entries)

    def batcher(self, variant: str, entries: list[RowMutationEntry]) -> Callable[[], Any]:
        table = self.tables[variant]
        entries = self._keys_for(variant, entries)
        if self.flavour == "async":

            async def go_async() -> None:
                async with table.mutations_batcher() as batcher:
                    for entry in entries:
                        await batcher.append(entry)

            return go_async

        def go() -> None:
            with table.mutations_batcher() as batcher:
                for entry in entries:
                    batcher.append(entry)

        return go

    def point(self, variant: str, op: str, keys: list[bytes]) -> Callable[[], Any]:
        table = self.tables[variant]
        if variant == "floor":
            keys = [WRITE_SCHEME.salt_key(key) for key in keys]
        cell = SetCell(FAMILY, b"q", WRITE_VALUE, 1000)
        predicate = PassAllFilter(True)
        if self.flavour == "async":

            async def go_async() -> None:
                for key in keys:
                    if op == "mutate_row":
                        await table.mutate_row(key, cell)
                    else:
                        await table.check_and_mutate_row(key, predicate, true_case_mutations=cell)

            return go_async

        def go() -> None:
            for key in keys:
                if op == "mutate_row":
                    table.mutate_row(key, cell)
                else:
                    table.check_and_mutate_row(key, predicate, true_case_mutations=cell)

        return go

    def one_point(self, variant: str, op: str) -> Callable[[bytes], Any]:
        """One point write of ``key``, timed: returns its seconds (async: run on the loop)."""
        table = self.tables[variant]
        salt = WRITE_SCHEME.salt_key if variant == "floor" else None
        cell = SetCell(FAMILY, b"q", WRITE_VALUE, 1000)
        predicate = PassAllFilter(True)
        if self.flavour == "async":

            async def go_async(key: bytes) -> float:
                key = salt(key) if salt else key
                start = time.perf_counter()
                if op == "mutate_row":
                    await table.mutate_row(key, cell)
                else:
                    await table.check_and_mutate_row(key, predicate, true_case_mutations=cell)
                return time.perf_counter() - start

            return lambda key: self.loop.run_until_complete(go_async(key))

        def go(key: bytes) -> float:
            key = salt(key) if salt else key
            start = time.perf_counter()
            if op == "mutate_row":
                table.mutate_row(key, cell)
            else:
                table.check_and_mutate_row(key, predicate, true_case_mutations=cell)
            return time.perf_counter() - start

        return go


def point_interleaved(
    flavours: dict[str, WriteTargets], ops: Sequence[str], calls: int, block: int, seed: int
) -> dict[str, Any]:
    """Point writes interleaved call by call: each call of every variant in a shuffled order.

    A point write is a single call of a few milliseconds, so a round of 200 of
    them per variant still sees the machine's load change between variants;
    here the variants alternate at every call. Per block of ``block`` calls:
    the raw client's median latency over each variant's (above 0.95: within
    5%), pooled over the blocks (median, 95% interval of the median); and the
    median latencies over every call.
    """
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for flavour, targets in flavours.items():
        for op in ("mutate_row", "check_and_mutate_row"):
            if op not in ops:
                continue
            timed = {v: targets.one_point(v, op) for v in WRITE_VARIANTS}
            seconds: dict[str, list[float]] = {v: [] for v in WRITE_VARIANTS}
            order = list(WRITE_VARIANTS)
            for i in range(calls):
                rng.shuffle(order)
                for variant in order:
                    seconds[variant].append(timed[variant](KEYS[i % len(KEYS)]))
            starts = range(0, calls - block + 1, block)
            entry: dict[str, Any] = {}
            for variant in ("floor", *SALTED_VARIANTS):
                entry[variant] = pooled(
                    [
                        statistics.median(seconds["raw"][b : b + block])
                        / statistics.median(seconds[variant][b : b + block])
                        for b in starts
                    ]
                )
            entry["median_ms"] = {
                v: round(statistics.median(s) * 1000, 4) for v, s in seconds.items()
            }
            out[f"{flavour}/{op}"] = entry
    return out


def write_calls(
    targets: WriteTargets, appends: int, rows: int, ops: Sequence[str] = WRITE_OPS
) -> dict[str, Any]:
    """Python calls (cProfile) per appended row, per bulk entry and per point write."""

    def make(variant: str, op: str, count: int) -> Callable[[], Any]:
        if op == "batcher_per_append":
            return targets.batcher(variant, write_entries(b"c", count))
        if op == "bulk_per_entry":
            return targets.bulk(variant, write_entries(b"c", count))
        return targets.point(variant, op.removesuffix("_per_call"), KEYS[:count])

    counts = {
        "batcher_per_append": appends,
        "bulk_per_entry": rows,
        "mutate_row_per_call": 50,
        "check_and_mutate_row_per_call": 50,
    }
    counts = {op: n for op, n in counts.items() if op.split("_per_")[0] in ops}
    out: dict[str, Any] = {}
    for variant in WRITE_VARIANTS:
        found: dict[str, float] = {}
        for op, count in counts.items():
            targets.run(make(variant, op, count))  # warm-up
            go = make(variant, op, count)
            prof = cProfile.Profile()
            prof.enable()
            targets.run(go)
            prof.disable()
            st: Any = pstats.Stats(prof)
            found[op] = round(st.total_calls / count, 2)
        out[variant] = found
    for variant in SALTED_VARIANTS:
        out[f"{variant}_above_raw"] = {
            op: round(out[variant][op] - out["raw"][op], 2) for op in out["raw"]
        }
    return out


KEYS = [b"point#%05d" % i for i in range(100_000)]


def write_rounds(
    flavours: dict[str, WriteTargets],
    rounds: int,
    bulk_sizes: list[int],
    appends: int,
    point_ops: int,
    seed: int,
    point: bool = True,
    ops: Sequence[str] = WRITE_OPS,
) -> dict[str, list[dict[str, Any]]]:
    """Every (flavour, operation, variant) once a round, in a shuffled order (seeded).

    Each operation starts after a full collection, with its entries made
    beforehand (outside the timing); returns, per ``flavour/operation``, one
    dict per round: each variant's seconds and its garbage collections.
    """
    jobs: list[tuple[str, str, str]] = []
    for flavour in flavours:
        names: list[str] = []
        if "batcher" in ops:
            names.append(f"batcher_{appends}")
        if "bulk" in ops:
            names += [f"bulk_{n}" for n in bulk_sizes]
        if point:
            names += [op for op in ("mutate_row", "check_and_mutate_row") if op in ops]
        for op in names:
            jobs += [(flavour, op, variant) for variant in WRITE_VARIANTS]
    shuffle = random.Random(seed).shuffle
    out: dict[str, list[dict[str, Any]]] = {}
    for number in range(rounds):
        shuffle(jobs)
        took: dict[str, dict[str, Any]] = {}
        for flavour, op, variant in jobs:
            targets = flavours[flavour]
            if op.startswith("batcher_"):
                go = targets.batcher(variant, write_entries(b"b%d" % number, appends))
            elif op.startswith("bulk_"):
                go = targets.bulk(variant, write_entries(b"w%d" % number, int(op[5:])))
            else:
                go = targets.point(variant, op, KEYS[number * point_ops : (number + 1) * point_ops])
            gc.collect()
            with GcWatch().watching() as watch:
                cpu = time.process_time()
                start = time.perf_counter()
                targets.run(go)
                seconds = time.perf_counter() - start
                cpu = time.process_time() - cpu
            took.setdefault(f"{flavour}/{op}", {})[variant] = {
                "seconds": seconds,
                "cpu_seconds": cpu,
                "gc_seconds": watch.seconds,
                "gc_collections": watch.collections,
            }
            del go
        for name, variants in took.items():
            out.setdefault(name, []).append(variants)
    return out


def write_summary(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per operation: each salted variant's speed over the raw client's, paired by round.

    Each variant: raw seconds over salted seconds in the same round (1 is the
    client's speed; for the point writes, its latency over ours), pooled with
    :func:`pooled` (median, 95% interval of the median); ``floor`` the same for
    the raw client writing salted keys, and ``<variant>_vs_floor`` the floor's
    seconds over the variant's (saltedtable's own work); ``<variant>_without_gc``
    the same with each run's collection time taken out (where a full collection
    lands decides much of a run's time: docs/development.md, "Write path
    internals"); ``<variant>_cpu`` the same over the process's CPU time; the
    share of each variant's time spent in garbage collection, and its full (gen
    2) collections.
    """
    out: dict[str, Any] = {}
    for name, per_round in rounds.items():
        raw = [r["raw"]["seconds"] for r in per_round]
        entry: dict[str, Any] = {}
        entry["floor"] = pooled(
            [a / r["floor"]["seconds"] for a, r in zip(raw, per_round, strict=True)]
        )
        for variant in SALTED_VARIANTS:
            ratios = [a / r[variant]["seconds"] for a, r in zip(raw, per_round, strict=True)]
            entry[variant] = pooled(ratios)
            entry[f"{variant}_vs_floor"] = pooled(
                [r["floor"]["seconds"] / r[variant]["seconds"] for r in per_round]
            )
            # The process's CPU time (its threads included, the emulator's not):
            # steadier than the wall clock on a machine shared with other work.
            entry[f"{variant}_cpu"] = pooled(
                [r["raw"]["cpu_seconds"] / r[variant]["cpu_seconds"] for r in per_round]
            )
            entry[f"{variant}_without_gc"] = pooled(
                [
                    (r["raw"]["seconds"] - r["raw"]["gc_seconds"])
                    / (r[variant]["seconds"] - r[variant]["gc_seconds"])
                    for r in per_round
                ]
            )
        entry["raw_seconds"] = spread(raw)
        entry["gc_share"] = {
            v: spread([r[v]["gc_seconds"] / r[v]["seconds"] for r in per_round])
            for v in WRITE_VARIANTS
        }
        entry["gen2_collections"] = {
            v: spread([float(r[v]["gc_collections"][2]) for r in per_round]) for v in WRITE_VARIANTS
        }
        out[name] = entry
    return out


def writes(args: argparse.Namespace, address: str) -> dict[str, Any]:
    """The write section: both flavours, raw against salted with and without the guard."""
    loop = asyncio.new_event_loop()
    ids = {"raw": f"wraw-{uuid.uuid4().hex[:8]}", "salted": f"wsalt-{uuid.uuid4().hex[:8]}"}
    for table_id in ids.values():
        create_table(address, table_id, (FAMILY,))
    try:
        async_client, async_tables = loop.run_until_complete(_async_tables(ids))
        sync_client = BigtableDataClient(project=PROJECT)
        try:
            flavours = {
                "async": WriteTargets("async", async_tables, loop),
                "sync": WriteTargets("sync", _write_tables(sync_client, ids, async_=False), loop),
            }
            flavours = {f: t for f, t in flavours.items() if f in args.write_flavours}
            for targets in flavours.values():  # the guard stores the record: settled
                targets.run(targets.point("salted_guard", "mutate_row", KEYS[:1]))
            report: dict[str, Any] = {
                "rounds": args.write_rounds,
                "bulk_sizes": args.write_bulk_rows,
                "appends": args.write_appends,
                "point_ops": args.write_point_ops,
                "live_entries": args.write_live,
            }
            report["calls"] = {
                f: write_calls(t, args.write_appends, max(args.write_bulk_rows), args.write_ops)
                for f, t in flavours.items()
            }
            print(json.dumps({"writes_calls": report["calls"]}, indent=1), file=sys.stderr)
            plain = write_rounds(
                flavours,
                args.write_rounds,
                args.write_bulk_rows,
                args.write_appends,
                args.write_point_ops,
                seed=41,
                ops=args.write_ops,
            )
            if args.write_point_calls:
                report["point_interleaved"] = point_interleaved(
                    flavours, args.write_ops, args.write_point_calls, block=100, seed=43
                )
                print(
                    json.dumps({"writes_points": report["point_interleaved"]}, indent=1),
                    file=sys.stderr,
                )
            report["ratios"] = write_summary(plain)
            print(json.dumps({"writes": report["ratios"]}, indent=1), file=sys.stderr)
            if args.write_live:
                # The batcher and the bulk writes again, in a process that holds
                # this many live entries (every full collection walks them, and
                # they raise the bar for one: see write_summary).
                held = write_entries(b"live", args.write_live)
                live = write_rounds(
                    flavours,
                    args.write_rounds,
                    args.write_bulk_rows,
                    args.write_appends,
                    args.write_point_ops,
                    seed=42,
                    point=False,
                    ops=args.write_ops,
                )
                report["ratios_with_live_entries"] = write_summary(live)
                report["tracked_objects_with_live_entries"] = len(gc.get_objects())
                del held
                print(
                    json.dumps({"writes_live": report["ratios_with_live_entries"]}, indent=1),
                    file=sys.stderr,
                )
                report["raw_rounds_with_live_entries"] = live
            report["raw_rounds"] = plain
        finally:
            sync_client.close()
            loop.run_until_complete(async_client.close())
    finally:
        loop.close()
        for table_id in ids.values():
            delete_table(address, table_id, missing_ok=True)
    return report


async def _async_tables(ids: dict[str, str]) -> tuple[BigtableDataClientAsync, dict[str, Any]]:
    """The async client and its tables (made in the event loop, as the client requires)."""
    client: BigtableDataClientAsync = BigtableDataClientAsync(project=PROJECT)
    return client, _write_tables(client, ids, async_=True)


def _write_tables(client: Any, ids: dict[str, str], *, async_: bool) -> dict[str, Any]:
    kind: Any = SaltedTableAsync if async_ else SaltedTable
    salted = client.get_table(INSTANCE, ids["salted"])
    return {
        "raw": client.get_table(INSTANCE, ids["raw"]),
        "floor": client.get_table(INSTANCE, ids["raw"]),
        "salted": kind(salted, SaltScheme(BUCKETS), guard=False),
        "salted_guard": kind(client.get_table(INSTANCE, ids["salted"]), SaltScheme(BUCKETS)),
    }


@contextlib.contextmanager
def emulator() -> Iterator[str]:
    if os.environ.get(EMULATOR_HOST_ENV):
        yield os.environ[EMULATOR_HOST_ENV]
        return
    with start_emulator() as emu:
        os.environ.update(emulator_env(emu))
        yield emu.address


async def run(args: argparse.Namespace, address: str) -> dict[str, Any]:
    report: dict[str, Any] = {
        "rows": args.rows,
        "buckets": BUCKETS,
        "python": sys.version.split()[0],
    }
    async with BigtableDataClientAsync(project=PROJECT) as client:
        if {"profile", "throughput", "delay", "fallback"} & set(args.sections):
            table_id = f"engine-{uuid.uuid4().hex[:8]}"
            create_table(address, table_id, (FAMILY,))
            try:
                await load(client, table_id, args.rows, 100)
                raw = client.get_table(INSTANCE, table_id)
                salted = SaltedTableAsync(raw, SaltScheme(BUCKETS), guard=False)
                scans = Scans(raw, salted)
                if "profile" in args.sections:
                    report["profile"] = await profile(scans, args.rows)
                    print(json.dumps(report["profile"], indent=1), file=sys.stderr)
                if "throughput" in args.sections:
                    runs = [
                        await throughput(scans, args.rows, args.rounds, seed=number)
                        for number in range(args.runs)
                    ]
                    report["throughput"] = runs[0] if args.runs == 1 else {"runs": runs}
                    report["throughput"]["pooled_ratios"] = {
                        name: pooled([x for run in runs for x in run["paired"][name]])
                        for name in runs[0]["paired"]
                    }
                    print(json.dumps(report["throughput"], indent=1), file=sys.stderr)
                if "fallback" in args.sections:
                    fallback_runs = [
                        await fallback(raw, args.rows, args.rounds, seed=number)
                        for number in range(args.runs)
                    ]
                    report["fallback"] = {
                        "runs": fallback_runs,
                        "pooled_ratios": {
                            name: pooled([x for run in fallback_runs for x in run["paired"][name]])
                            for name in fallback_runs[0]["paired"]
                        },
                        "pooled_main_cpu_over_raw": {
                            name: pooled(
                                [
                                    x
                                    for run in fallback_runs
                                    for x in run["paired_main_cpu_over_raw"][name]
                                ]
                            )
                            for name in fallback_runs[0]["paired"]
                        },
                    }
                    print(json.dumps(report["fallback"], indent=1), file=sys.stderr)
                if "delay" in args.sections:
                    report["delay"] = await delays(
                        client, table_id, args.rows, max(1, args.rounds // 2)
                    )
                    print(json.dumps(report["delay"], indent=1), file=sys.stderr)
            finally:
                delete_table(address, table_id, missing_ok=True)
        if "firstrow" in args.sections:
            report["firstrow"] = await firstrow(
                address, client, args.n, max(25, args.firstrow_rows_per_bucket), args.rounds
            )
            print(json.dumps(report["firstrow"], indent=1), file=sys.stderr)
        if "reverse" in args.sections:
            report["reverse"] = await reverse(client, address, args.rows, args.rounds)
            print(json.dumps(report["reverse"], indent=1), file=sys.stderr)
        if "wide" in args.sections:
            report["wide"] = await wide(address, client, args.wide_mb, args.wide_runs)
        if "memory" in args.sections:
            report["memory"] = await memory(
                address,
                client,
                args.memory_rows,
                args.memory_wide_mb,
                args.memory_runs,
                args.memory_n,
            )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--runs", type=int, default=1, help="throughput: repeat the section, pool the ratios"
    )
    parser.add_argument(
        "--n", type=int, nargs="+", default=[16, 256, 1024, 4096], help="firstrow: buckets"
    )
    parser.add_argument("--firstrow-rows-per-bucket", type=int, default=25)
    parser.add_argument("--wide-mb", type=int, default=512, help="size of each wide-row table")
    parser.add_argument("--wide-runs", type=int, default=1, help="fresh processes per scan")
    parser.add_argument(
        "--memory-rows", type=int, default=800_000, help="memory: 100-byte rows per table"
    )
    parser.add_argument(
        "--memory-wide-mb", type=int, default=256, help="memory: wide-row tables (0: none)"
    )
    parser.add_argument("--memory-runs", type=int, default=1, help="memory: processes per scan")
    parser.add_argument(
        "--memory-n", type=int, nargs="+", default=[16, 64, 256], help="memory: buckets"
    )
    parser.add_argument(
        "--write-rounds",
        type=int,
        default=3,
        help="writes: paired rounds (at least 20 for the published ratios)",
    )
    parser.add_argument(
        "--write-bulk-rows", type=int, nargs="+", default=[10_000, 20_000], help="writes"
    )
    parser.add_argument("--write-appends", type=int, default=5_000, help="writes: batcher")
    parser.add_argument(
        "--write-point-ops", type=int, default=200, help="writes: mutate_row calls a round"
    )
    parser.add_argument(
        "--write-point-calls",
        type=int,
        default=0,
        help="writes: point writes interleaved call by call, per variant (0: none)",
    )
    parser.add_argument(
        "--write-live",
        type=int,
        default=100_000,
        help="writes: live entries held for the batcher's second set of rounds (0: none)",
    )
    parser.add_argument(
        "--write-ops",
        nargs="+",
        default=list(WRITE_OPS),
        choices=WRITE_OPS,
        help="writes: the operations measured",
    )
    parser.add_argument(
        "--write-flavours", nargs="+", default=["async", "sync"], choices=["async", "sync"]
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        default=["profile", "throughput", "delay", "wide"],
        choices=[
            "profile",
            "throughput",
            "delay",
            "firstrow",
            "wide",
            "memory",
            "writes",
            "reverse",
            "fallback",
        ],
    )
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    args = parser.parse_args()
    with emulator() as address:
        report = asyncio.run(run(args, address))
        if "writes" in args.sections:
            report["writes"] = writes(args, address)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
