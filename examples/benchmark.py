"""Benchmark saltedtable against the raw google-cloud-bigtable async client (issue 6).

Loads the same logical rows (keys ``user{u:05d}#{ts}``, 100-byte values) into a
plain table through the raw client and into a salted table through
:class:`saltedtable.SaltedTableAsync`, then measures both in the same process,
**alternating** the variants in every repetition (the emulator and a long-lived
client slow down over time, so running all of A and then all of B would
measure the drift, not the wrapper)::

    python examples/benchmark.py [--rows N] [--buckets 16] [--repeats R] [--json PATH] [--quick]

Sections: salt computation (keys/s), point reads / writes / check-and-mutate
(ops/s, p50/p99; sequential and concurrent), bulk writes (rows/s), a full scan
(ordered merge vs the raw client's single unsalted scan and vs the raw client
doing the same sub-scans itself, unordered), a prefix scan, scans with small
limits (with the rows the server really sent, counted by a proxy table) and the
peak RSS of streaming a large vs a small salted scan, each in a fresh process.
It prints a table of ratios (salted / raw) against the targets of issue 6 and
writes everything as JSON (default ``bench-results/benchmark-<time>.json``).

Where it runs:

* nothing set: starts the official emulator (``saltedtable.testing``), creates
  its tables through the admin API, deletes them and stops the emulator at the end;
* ``BIGTABLE_EMULATOR_HOST`` set: uses that emulator, same table handling;
* ``--project P --instance I --table-prefix X`` without ``BIGTABLE_EMULATOR_HOST``:
  a real Cloud Bigtable instance. Nothing is created or deleted there: the
  tables ``X-plain``, ``X-salted`` (and ``X-memory`` unless ``--memory-rows 0``)
  must exist with the column family ``cf``; the benchmark writes its rows into them.

A memory measurement runs this file again as a child (``--memory-child``) so
each peak RSS is that of a fresh process.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
import uuid
import warnings
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

from google.api_core import exceptions as api_exceptions
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import ColumnQualifierRegexFilter

from saltedtable import SaltedTableAsync, SaltScheme, prefix_end, testing

# -- targets of issue 6 ----------------------------------------------------------

POINT_TARGET: Final = 0.95  # salted ops/s >= 0.95 x raw, for read / write / check-and-mutate
SCAN_VS_SINGLE_TARGET: Final = 1.0  # ordered merge >= raw single unsalted scan
#: Rows each raw sub-scan of the "holding" variant keeps before dropping them.
HELD_ROWS: Final = 64
SCAN_VS_SUBSCANS_TARGET: Final = 0.9  # ordered merge >= 0.9 x raw sub-scans, unordered
LIMIT_SLACK: Final = 1.5  # rows sent for limit=L over N buckets <= 1.5 L + N
MEMORY_TOLERANCE_MB: Final = 5.0  # "within a few MB"
SALT_TARGET: Final = 1_000_000  # keys/s, crc32 on 32-byte keys

# -- the data set ------------------------------------------------------------------

FAMILY: Final = "cf"
QUALIFIER: Final = b"v"
VALUE_BYTES: Final = 100
ROWS_PER_USER: Final = 100  # so a prefix scan "user00042#" returns 100 rows
MAX_ROWS: Final = 100_000 * ROWS_PER_USER  # user ids keep 5 digits, so key order = row order
# A fixed cell timestamp (micros, millisecond granularity): benchmark writes
# overwrite the loaded cell instead of adding versions, so scans read the same
# data in every repetition.
CELL_TS: Final = 1_700_000_000_000_000
LIMITS: Final = (1, 10, 100, 1000)
# Point ops, prefix and limit scans alternate raw/salted in chunks of this many ops
# (at least CHUNK_WAVES waves of the concurrent workers), so both see the same load.
MIN_CHUNK_OPS: Final = 5
CHUNK_WAVES: Final = 4
# Concurrent point ops run this many times --point-ops: 400 ops at 32 concurrent
# took about 0.1 s a side, so short that the ratio swung 0.83-1.33x from run to run.
# A chunk pair's ratio still spreads over about 0.88-1.10x (interquartile), so the
# median needs a few hundred pairs: 20 x 400 ops make 63 chunks of 128 per repetition.
CONCURRENT_OPS_FACTOR: Final = 20
SALT_KEY_BYTES: Final = 32


def logical_key(i: int) -> bytes:
    """Return the logical key of row ``i``; keys sort in row order."""
    return b"user%05d#%d" % (i // ROWS_PER_USER, 1_700_000_000 + i % ROWS_PER_USER)


def user_prefix(user: int) -> bytes:
    """Return the key prefix shared by the rows of one user."""
    return b"user%05d#" % user


def value_of(i: int) -> bytes:
    """Return the 100-byte value of row ``i``."""
    return (b"%010d" % i) * (VALUE_BYTES // 10)


def entry_of(i: int) -> RowMutationEntry:
    """Return the logical mutation entry that loads row ``i``."""
    return RowMutationEntry(
        logical_key(i), SetCell(FAMILY, QUALIFIER, value_of(i), timestamp_micros=CELL_TS)
    )


# -- configuration -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """Sizes of every section; ``--quick`` and the flags pick them."""

    rows: int
    buckets: int
    repeats: int
    scan_rounds: int  # full-scan alternations per repetition
    point_ops: int
    concurrency: int
    bulk_rows: int
    bulk_batch: int
    prefix_ops: int
    limit_ops: int
    memory_rows: int  # 0 skips the memory section
    memory_small_rows: int  # the scan the large one is compared with
    memory_runs: int  # fresh processes per memory scan size (the median counts)
    salt_keys: int
    load_batch: int
    load_concurrency: int
    seed: int
    quick: bool


# (full default, --quick) for every size a flag can override.
DEFAULTS: Final[dict[str, tuple[int, int]]] = {
    "rows": (20_000, 3_000),
    # 4: each section's variants take turns going first (the point ops: A-B, then B-A).
    "repeats": (4, 3),
    # Full scans are the noisiest figure: alternate them this many times per repetition.
    "scan_rounds": (3, 1),
    "point_ops": (400, 100),
    "bulk_rows": (5_000, 1_000),
    "prefix_ops": (20, 10),
    "limit_ops": (10, 5),
    "memory_rows": (1_000_000, 100_000),
    # A single fresh process's peak RSS varies by a few MB: take the median of this many.
    "memory_runs": (3, 3),
    "salt_keys": (500_000, 200_000),
}


@dataclass(frozen=True, slots=True)
class Target:
    """Where the benchmark runs and which tables it uses."""

    mode: str  # "emulator-started", "emulator", "instance"
    project: str
    instance: str
    plain: str
    salted: str
    memory: str
    address: str | None


# -- a proxy that counts the rows the server sends ---------------------------------


class CountingTable:
    """A ``saltedtable.TableLike`` that delegates to a table and counts what its streams yield.

    Every row yielded by ``read_rows_stream`` went over the wire, so ``rows`` is
    the number of rows the server sent for the reads made through this proxy,
    and ``streams`` the number of read requests.
    """

    def __init__(self, table: Any) -> None:
        self._table = table
        self.default_read_rows_operation_timeout: float = table.default_read_rows_operation_timeout
        self.default_read_rows_attempt_timeout: float | None = (
            table.default_read_rows_attempt_timeout
        )
        self.rows = 0
        self.streams = 0

    def reset(self) -> None:
        """Start counting from zero."""
        self.rows = 0
        self.streams = 0

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterable[Row]:
        """Stream the rows of a query, counting each row."""
        stream = await self._table.read_rows_stream(query, **kwargs)
        self.streams += 1
        return self._count(stream)

    async def _count(self, stream: AsyncIterable[Row]) -> AsyncIterator[Row]:
        # aclosing: closing this generator (a satisfied limit) closes the gRPC stream too.
        async with aclosing(stream):  # type: ignore[type-var]
            async for row in stream:
                self.rows += 1
                yield row

    async def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        """Read one row."""
        row: Row | None = await self._table.read_row(row_key, **kwargs)
        if row is not None:
            self.rows += 1
        return row

    async def row_exists(self, row_key: bytes, **kwargs: Any) -> bool:
        """Tell whether a row exists."""
        return bool(await self._table.row_exists(row_key, **kwargs))

    async def sample_row_keys(self, **kwargs: Any) -> list[tuple[bytes, int]]:
        """Sample split points of the table."""
        return list(await self._table.sample_row_keys(**kwargs))

    def mutations_batcher(self, **kwargs: Any) -> Any:
        """Make a mutations batcher."""
        return self._table.mutations_batcher(**kwargs)

    async def mutate_row(self, row_key: bytes, mutations: Any, **kwargs: Any) -> None:
        """Apply mutations to one row."""
        await self._table.mutate_row(row_key, mutations, **kwargs)

    async def bulk_mutate_rows(
        self, mutation_entries: list[RowMutationEntry], **kwargs: Any
    ) -> None:
        """Apply many mutation entries."""
        await self._table.bulk_mutate_rows(mutation_entries, **kwargs)

    async def check_and_mutate_row(self, row_key: bytes, predicate: Any, **kwargs: Any) -> bool:
        """Mutate a row depending on a filter."""
        return bool(await self._table.check_and_mutate_row(row_key, predicate, **kwargs))

    async def read_modify_write_row(self, row_key: bytes, rules: Any, **kwargs: Any) -> Row:
        """Read, modify and write a row atomically."""
        row: Row = await self._table.read_modify_write_row(row_key, rules, **kwargs)
        return row

    async def close(self) -> None:
        """Close the underlying table."""
        await self._table.close()


# -- statistics ----------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Return the ``q`` quantile (0..1) of sorted values, interpolating linearly; None if empty."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float | None:
    """Return the median, or None for no values."""
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    """Return ``a / b``, or None when either is missing or ``b`` is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


@dataclass(slots=True)
class Series:
    """One variant's measurements over the repetitions."""

    rates: list[float] = field(default_factory=list)  # ops/s (or rows/s) per repetition
    latencies: list[float] = field(default_factory=list)  # seconds, every op of every repetition
    ops: int = 0

    def add(self, ops: int, seconds: float, latencies: Sequence[float] = ()) -> None:
        """Record one repetition: ``ops`` operations (or rows) in ``seconds``."""
        self.ops += ops
        self.rates.append(ops / seconds if seconds > 0 else math.inf)
        self.latencies.extend(latencies)

    def summary(self, unit: str = "ops_per_s") -> dict[str, Any]:
        """Median rate, per-repetition rates and (when measured) latency percentiles."""
        out: dict[str, Any] = {
            unit: median(self.rates),
            f"{unit}_per_repeat": [round(r, 1) for r in self.rates],
        }
        if self.latencies:
            ordered = sorted(self.latencies)
            out["ops"] = self.ops
            for name, q in (("p50_ms", 0.5), ("p99_ms", 0.99)):
                value = percentile(ordered, q)
                out[name] = None if value is None else round(value * 1000, 3)
            out["mean_ms"] = round(statistics.fmean(ordered) * 1000, 3)
        return out


def median_ci95(values: Sequence[float]) -> list[float] | None:
    """A distribution-free 95% confidence interval of the median, or None below 6 values.

    The interval runs from the j-th smallest to the j-th largest value, with j
    the largest rank such that at most 2.5% of the Binomial(n, 1/2) mass lies
    below it: how many of n samples fall under the true median. It assumes
    nothing about the spread (on a shared 2-core machine anything but normal),
    but it does assume independent samples; consecutive chunks share the
    machine's load, so the true uncertainty is somewhat wider.
    """
    n = len(values)
    below = 0  # P(X <= j - 1) for X ~ Binomial(n, 1/2), accumulated in integers
    j = 0
    while (below + math.comb(n, j)) * 40 <= 2**n:  # P(X <= j) <= 2.5%
        below += math.comb(n, j)
        j += 1
    if j < 1:
        return None
    ordered = sorted(values)
    return [round(ordered[j - 1], 3), round(ordered[n - j], 3)]


def paired(a: Series, b: Series) -> dict[str, Any]:
    """Compare ``a`` with ``b``: the median of the per-repetition ratios ``a / b``.

    A ratio taken within one repetition compares runs made seconds apart, so it
    cancels the slow drift of the emulator that a ratio of medians would keep.
    Scans pair each round this way; point operations and bulk writes report
    it too (as ``repeat_sums``, each repetition's summed time) next to their
    chunk-pair median.
    """
    ratios = [x / y for x, y in zip(a.rates, b.rates, strict=True) if y > 0]
    return {
        "ratio": median(ratios),
        "ratio_ci95": median_ci95(ratios),
        "ratio_per_repeat": [round(r, 3) for r in ratios],
    }


def chunk_paired(ratios: Sequence[float]) -> dict[str, Any]:
    """Compare two sides from their chunk pairs: the median of the per-chunk ratios.

    Point operations alternate in chunks of a few dozen milliseconds, and a
    single stall of 20-40 ms (the emulator's or the client's garbage collector,
    another process) doubles the chunk it lands in. Summed over a repetition,
    a few such stalls decide the ratio (one repetition's concurrent ratio moved
    0.85x-1.13x); they land on either side alike, so the median of the
    chunk-pair ratios measures the operations and not the stalls. It also
    drops a stall that one side causes, so the report keeps the summed
    figure (``repeat_sums``) next to it.
    """
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else list(ratios)
    return {
        "ratio": median(ratios),
        "ratio_ci95": median_ci95(ratios),
        "chunk_pairs": len(ratios),
        "chunk_ratio_quartiles": [round(q, 3) for q in quartiles],
    }


def _add_pair(pairs: list[float], took: dict[str, float]) -> None:
    """Append one chunk pair's salted/raw rate ratio (both sides ran the same ops)."""
    raw, salted = took.get("raw"), took.get("salted")
    if raw is not None and salted:
        pairs.append(raw / salted)  # same work: the rate ratio is the inverse time ratio


def rotated(names: Sequence[str], rep: int) -> list[str]:
    """The order of the variants in repetition ``rep``: each goes first equally often."""
    k = rep % len(names)
    return [*names[k:], *names[:k]]


# -- measuring -------------------------------------------------------------------------


async def run_ops(
    op: Callable[[bytes], Awaitable[object]], keys: Sequence[bytes], concurrency: int
) -> tuple[float, list[float]]:
    """Run ``op`` once per key with ``concurrency`` workers; return (seconds, latencies)."""
    latencies = [0.0] * len(keys)
    work = iter(range(len(keys)))  # shared by the workers: each index is taken once

    async def worker() -> None:
        clock = time.perf_counter
        for i in work:
            start = clock()
            await op(keys[i])
            latencies[i] = clock() - start

    start = time.perf_counter()
    if concurrency <= 1:
        await worker()
    else:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start, latencies


async def count_rows(stream: AsyncIterable[Row]) -> int:
    """Consume a row stream and return how many rows it yielded."""
    n = 0
    async with aclosing(stream):  # type: ignore[type-var]
        async for _ in stream:
            n += 1
    return n


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(slots=True)
class Tables:
    """The tables one benchmark run reads and writes."""

    plain: Any  # raw TableAsync holding logical keys
    physical: Any  # raw TableAsync holding the salted (physical) keys
    salted: SaltedTableAsync  # over ``physical``
    counter: CountingTable  # over ``physical``
    counted: SaltedTableAsync  # over ``counter``
    scheme: SaltScheme


async def load_rows(
    write: Callable[[list[RowMutationEntry]], Awaitable[None]],
    rows: int,
    batch: int,
    concurrency: int,
) -> float:
    """Write rows ``0..rows-1`` in batches, ``concurrency`` batches at once; return seconds."""
    gate = asyncio.Semaphore(concurrency)

    async def one(start: int) -> None:
        async with gate:
            # Built inside the gate so at most `concurrency` batches are in memory.
            await write([entry_of(i) for i in range(start, min(start + batch, rows))])

    started = time.perf_counter()
    await asyncio.gather(*(one(start) for start in range(0, rows, batch)))
    return time.perf_counter() - started


class Bench:
    """The alternating A/B measurements of one run; results accumulate in ``Series``."""

    def __init__(self, cfg: Config, tables: Tables) -> None:
        self.cfg = cfg
        self.t = tables
        self.rng = random.Random(cfg.seed)
        self.series: dict[str, Series] = {}
        self.rows_sent: dict[str, list[int]] = {}
        self.requests: dict[str, list[int]] = {}
        #: salted/raw rate ratio of every chunk pair that pair_ops ran, by series.
        self.chunk_ratios: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.mutation = SetCell(FAMILY, QUALIFIER, b"w" * VALUE_BYTES, timestamp_micros=CELL_TS)
        self.predicate = ColumnQualifierRegexFilter(QUALIFIER)
        self.subscan_queries = [
            ReadRowsQuery(row_ranges=RowRange(start_key=p, end_key=prefix_end(p) or None))
            for p in tables.scheme.prefixes
        ]

    def s(self, name: str) -> Series:
        """The series called ``name`` (created on first use)."""
        return self.series.setdefault(name, Series())

    def check(self, what: str, got: int, expected: int) -> None:
        """Record a wrong row count: a benchmark of wrong answers measures nothing."""
        if got != expected:
            self.errors.append(f"{what}: {got} rows, expected {expected}")

    async def alternate(self, rep: int, variants: dict[str, Callable[[], Awaitable[None]]]) -> None:
        """Run every variant once, in an order rotated by repetition."""
        for name in rotated(list(variants), rep):
            await variants[name]()

    # -- sections --------------------------------------------------------------

    async def point(self, rep: int) -> None:
        """read_row, mutate_row and check_and_mutate_row, sequential and concurrent."""
        cfg, t = self.cfg, self.t
        mutation, predicate = self.mutation, self.predicate
        ops: dict[str, tuple[Callable[[bytes], Awaitable[object]], ...]] = {
            "read_row": (t.plain.read_row, t.salted.read_row),
            "mutate_row": (
                lambda k: t.plain.mutate_row(k, mutation),
                lambda k: t.salted.mutate_row(k, mutation),
            ),
            "check_and_mutate_row": (
                lambda k: t.plain.check_and_mutate_row(k, predicate, true_case_mutations=mutation),
                lambda k: t.salted.check_and_mutate_row(k, predicate, true_case_mutations=mutation),
            ),
        }
        for name, (raw_op, salted_op) in ops.items():
            for conc in (1, cfg.concurrency):
                mode = "sequential" if conc == 1 else f"concurrent_{conc}"
                n = cfg.point_ops if conc == 1 else cfg.point_ops * CONCURRENT_OPS_FACTOR
                keys = [logical_key(self.rng.randrange(cfg.rows)) for _ in range(n)]
                await self.pair_ops(
                    rep, f"point/{name}/{mode}", {"raw": raw_op, "salted": salted_op}, keys, conc
                )

    async def pair_ops(
        self,
        rep: int,
        series: str,
        ops: dict[str, Callable[[bytes], Awaitable[object]]],
        keys: Sequence[bytes],
        concurrency: int,
    ) -> None:
        """Run every op over ``keys`` in interleaved chunks (A, B, B, A, ...).

        Records each side's summed time and latencies in its series and, when
        the sides are "raw" and "salted", the salted/raw rate ratio of every
        chunk pair in :attr:`chunk_ratios` (reported for the point operations).

        Other processes' load comes and goes within a second; one long A run
        followed by one long B run would catch different loads, so the ops are
        split into chunks of at least ``CHUNK_WAVES`` waves of ``concurrency``
        ops and the sides alternate chunk by chunk.
        """
        size = max(MIN_CHUNK_OPS, CHUNK_WAVES * concurrency)
        chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
        seconds = dict.fromkeys(ops, 0.0)
        latencies: dict[str, list[float]] = {side: [] for side in ops}
        pairs = self.chunk_ratios.setdefault(series, [])
        for c, chunk in enumerate(chunks):
            took_by_side: dict[str, float] = {}
            for side in rotated(list(ops), rep + c):
                took, lat = await run_ops(ops[side], chunk, concurrency)
                took_by_side[side] = took
                seconds[side] += took
                latencies[side] += lat
            _add_pair(pairs, took_by_side)
        for side in ops:
            self.s(f"{series}/{side}").add(len(keys), seconds[side], latencies[side])

    async def bulk(self, rep: int) -> None:
        """bulk_mutate_rows in batches of ``bulk_batch`` (overwriting existing rows)."""
        cfg, t = self.cfg, self.t
        n = min(cfg.bulk_rows, cfg.rows)
        picked = self.rng.sample(range(cfg.rows), n)
        entries = [RowMutationEntry(logical_key(i), self.mutation) for i in picked]
        batches = [entries[i : i + cfg.bulk_batch] for i in range(0, n, cfg.bulk_batch)]

        tables = {"raw": t.plain, "salted": t.salted}
        seconds = dict.fromkeys(tables, 0.0)
        pairs = self.chunk_ratios.setdefault("bulk", [])
        for b, batch in enumerate(batches):  # the sides alternate batch by batch
            took: dict[str, float] = {}
            for side in rotated(list(tables), rep + b):
                start = time.perf_counter()
                await tables[side].bulk_mutate_rows(batch)
                took[side] = time.perf_counter() - start
                seconds[side] += took[side]
            _add_pair(pairs, took)
        for side in tables:
            self.s(f"bulk/{side}").add(n, seconds[side])

    async def full_scan(self, rep: int) -> None:
        """The whole table: raw single scan, raw sub-scans unordered, salted ordered/unordered.

        Each repetition alternates the variants ``scan_rounds`` times (in an
        order rotated each time): the full-scan ratios are the noisiest
        figures on a shared 2-core machine, so they get more samples.
        """
        t, rows = self.t, self.cfg.rows

        async def raw_single() -> int:
            return await count_rows(await t.plain.read_rows_stream(ReadRowsQuery()))

        async def raw_subscans() -> int:
            async def one(query: ReadRowsQuery) -> int:
                return await count_rows(await t.physical.read_rows_stream(query))

            return sum(await asyncio.gather(*(one(q) for q in self.subscan_queries)))

        async def raw_subscans_holding() -> int:
            # The raw sub-scans again, each keeping its rows in a list of
            # HELD_ROWS before dropping them: what buffering alone costs,
            # since an ordered merge must keep rows until every bucket caught up.
            async def one(query: ReadRowsQuery) -> int:
                held: list[Row] = []
                n = 0
                async with aclosing(await t.physical.read_rows_stream(query)) as stream:
                    async for row in stream:
                        held.append(row)
                        if len(held) == HELD_ROWS:
                            n += len(held)
                            held = []
                return n + len(held)

            return sum(await asyncio.gather(*(one(q) for q in self.subscan_queries)))

        async def salted_ordered() -> int:
            return await count_rows(await t.salted.read_rows_stream(ReadRowsQuery()))

        async def salted_unordered() -> int:
            return await count_rows(await t.salted.read_rows_stream(ReadRowsQuery(), ordered=False))

        def measure(name: str, scan: Callable[[], Awaitable[int]]) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                start = time.perf_counter()
                n = await scan()
                self.s(f"scan/{name}").add(n, time.perf_counter() - start)
                self.check(f"full scan {name}", n, rows)

            return run

        rounds = self.cfg.scan_rounds
        for r in range(rounds):
            await self.alternate(
                rep * rounds + r,
                {
                    "raw_single": measure("raw_single", raw_single),
                    "raw_subscans_unordered": measure("raw_subscans_unordered", raw_subscans),
                    "raw_subscans_holding": measure("raw_subscans_holding", raw_subscans_holding),
                    "salted_ordered": measure("salted_ordered", salted_ordered),
                    "salted_unordered": measure("salted_unordered", salted_unordered),
                },
            )

    async def prefix(self, rep: int) -> None:
        """Prefix scans of one user's rows (``user00042#``), sequential."""
        cfg, t = self.cfg, self.t
        users = max(1, cfg.rows // ROWS_PER_USER)
        expected = {u: min(ROWS_PER_USER, cfg.rows - u * ROWS_PER_USER) for u in range(users)}
        picked = [self.rng.randrange(users) for _ in range(cfg.prefix_ops)]
        prefixes = [user_prefix(u) for u in picked]
        counts: dict[str, list[int]] = {"raw": [], "salted": []}

        async def raw_op(p: bytes) -> None:
            query = ReadRowsQuery(row_ranges=RowRange(start_key=p, end_key=prefix_end(p)))
            counts["raw"].append(await count_rows(await t.plain.read_rows_stream(query)))

        async def salted_op(p: bytes) -> None:
            counts["salted"].append(await count_rows(t.salted.read_prefix(p)))

        await self.pair_ops(rep, "prefix", {"raw": raw_op, "salted": salted_op}, prefixes, 1)
        want = sum(expected[u] for u in picked)
        for side in ("raw", "salted"):
            self.check(f"prefix scans ({side})", sum(counts[side]), want)
            # Rows/s from the same seconds the scans/s came from.
            scans = self.s(f"prefix/{side}")
            self.s(f"prefix_rows/{side}").rates.append(scans.rates[-1] * want / len(prefixes))

    async def limits(self, rep: int) -> None:
        """Whole-table scans with ``limit=L``: latency, then the rows the server sent."""
        cfg, t = self.cfg, self.t
        for limit in LIMITS:
            if limit > cfg.rows:
                continue
            query = ReadRowsQuery(limit=limit)
            keys = [b""] * cfg.limit_ops  # run_ops wants one "key" per op

            async def raw_op(_: bytes, q: ReadRowsQuery = query) -> None:
                await t.plain.read_rows(q)

            async def salted_op(_: bytes, q: ReadRowsQuery = query) -> None:
                await t.salted.read_rows(q)

            await self.pair_ops(
                rep, f"limit/{limit}", {"raw": raw_op, "salted": salted_op}, keys, 1
            )
            # Counted outside the timing: the proxy adds a generator per row.
            for ordered in (True, False):
                kind = "ordered" if ordered else "unordered"
                t.counter.reset()
                got = await t.counted.read_rows(query, ordered=ordered)
                self.check(f"limit {limit} scan ({kind})", len(got), limit)
                self.rows_sent.setdefault(f"{limit}/{kind}", []).append(t.counter.rows)
                self.requests.setdefault(f"{limit}/{kind}", []).append(t.counter.streams)

    async def warm_up(self) -> None:
        """Open the channel and touch every code path once, untimed."""
        t = self.t
        for i in range(min(20, self.cfg.rows)):
            await t.plain.read_row(logical_key(i))
            await t.salted.read_row(logical_key(i))
        await t.plain.read_rows(ReadRowsQuery(limit=10))
        await t.salted.read_rows(ReadRowsQuery(limit=10))
        await count_rows(t.salted.read_prefix(user_prefix(0)))

    async def run(self) -> None:
        """Every section, every repetition; sections interleave so each spans the whole run."""
        await self.warm_up()
        sections = (
            ("point", self.point),
            ("bulk", self.bulk),
            ("full scan", self.full_scan),
            ("prefix", self.prefix),
            ("limits", self.limits),
        )
        for rep in range(self.cfg.repeats):
            started = time.perf_counter()
            for _, section in sections:
                await section(rep)
            _progress(
                f"  repetition {rep + 1}/{self.cfg.repeats}: {time.perf_counter() - started:.1f} s"
            )

    # -- results ---------------------------------------------------------------

    def results(self) -> dict[str, Any]:
        """The measurements as JSON-ready dicts, one per section."""
        cfg = self.cfg
        point: dict[str, Any] = {}
        for name in ("read_row", "mutate_row", "check_and_mutate_row"):
            point[name] = {}
            for mode in ("sequential", f"concurrent_{cfg.concurrency}"):
                raw, salted = (
                    self.s(f"point/{name}/{mode}/raw"),
                    self.s(f"point/{name}/{mode}/salted"),
                )
                point[name][mode] = {
                    "raw": raw.summary(),
                    "salted": salted.summary(),
                    **chunk_paired(self.chunk_ratios[f"point/{name}/{mode}"]),
                    "repeat_sums": paired(salted, raw),
                }
        bulk_raw, bulk_salted = self.s("bulk/raw"), self.s("bulk/salted")
        bulk = {
            "rows_per_repeat": min(cfg.bulk_rows, cfg.rows),
            "batch": cfg.bulk_batch,
            "raw": bulk_raw.summary("rows_per_s"),
            "salted": bulk_salted.summary("rows_per_s"),
            **chunk_paired(self.chunk_ratios["bulk"]),
            "repeat_sums": paired(bulk_salted, bulk_raw),
        }
        names = (
            "raw_single",
            "raw_subscans_unordered",
            "raw_subscans_holding",
            "salted_ordered",
            "salted_unordered",
        )
        scans = {n: self.s(f"scan/{n}") for n in names}
        compared = {
            f"{a}/{b}": paired(scans[a], scans[b])
            for a, b in (
                ("salted_ordered", "raw_single"),
                ("salted_ordered", "raw_subscans_unordered"),
                ("salted_unordered", "raw_subscans_unordered"),
                ("salted_unordered", "raw_single"),
                ("raw_subscans_unordered", "raw_single"),
                ("raw_subscans_holding", "raw_subscans_unordered"),
            )
        }
        full_scan = {
            "rows": cfg.rows,
            "subscans": cfg.buckets,
            "variants": {n: scans[n].summary("rows_per_s") for n in names},
            "ratios": {name: c["ratio"] for name, c in compared.items()},
            "ratios_ci95": {name: c["ratio_ci95"] for name, c in compared.items()},
        }
        prefix = {
            "rows_per_prefix": ROWS_PER_USER,
            "raw": {
                **self.s("prefix/raw").summary(),
                "rows_per_s": median(self.s("prefix_rows/raw").rates),
            },
            "salted": {
                **self.s("prefix/salted").summary(),
                "rows_per_s": median(self.s("prefix_rows/salted").rates),
            },
            **paired(self.s("prefix/salted"), self.s("prefix/raw")),
        }
        limits: dict[str, Any] = {}
        for limit in LIMITS:
            if limit > cfg.rows:
                continue
            raw, salted = self.s(f"limit/{limit}/raw"), self.s(f"limit/{limit}/salted")
            limits[str(limit)] = {
                "raw": raw.summary(),
                "salted": salted.summary(),
                **paired(salted, raw),
                "rows_sent": {
                    kind: max(self.rows_sent[f"{limit}/{kind}"])
                    for kind in ("ordered", "unordered")
                },
                "requests": {
                    kind: max(self.requests[f"{limit}/{kind}"]) for kind in ("ordered", "unordered")
                },
                "raw_rows_sent": limit,
                "bound": LIMIT_SLACK * limit + cfg.buckets,
                "naive": cfg.buckets * limit,
            }
        return {
            "point": point,
            "bulk_write": bulk,
            "full_scan": full_scan,
            "prefix_scan": prefix,
            "limit_scan": limits,
        }


# -- salt computation -------------------------------------------------------------------


def bench_salt(cfg: Config) -> dict[str, Any]:
    """Keys/s of ``SaltScheme.salt_key`` (crc32, 32-byte keys), best and median of the repeats."""
    scheme = SaltScheme(cfg.buckets)
    keys = [(b"user%028d" % i)[:SALT_KEY_BYTES] for i in range(cfg.salt_keys)]
    assert all(len(k) == SALT_KEY_BYTES for k in keys)
    salt = scheme.salt_key
    rates: list[float] = []
    crc_rates: list[float] = []
    n = scheme.buckets
    for _ in range(max(3, cfg.repeats)):
        start = time.perf_counter()
        for k in keys:
            salt(k)
        rates.append(len(keys) / (time.perf_counter() - start))
        # The floor under any scheme: the hash and the remainder alone.
        start = time.perf_counter()
        for k in keys:
            zlib.crc32(k) % n
        crc_rates.append(len(keys) / (time.perf_counter() - start))
    return {
        "hash": scheme.hash,
        "buckets": scheme.buckets,
        "key_bytes": SALT_KEY_BYTES,
        "keys": len(keys),
        "keys_per_s": max(rates),
        "keys_per_s_median": median(rates),
        "keys_per_s_per_repeat": [round(r) for r in rates],
        "bare_crc32_keys_per_s": max(crc_rates),
    }


# -- memory: a child process per scan ----------------------------------------------------


def _maxrss_mb() -> float:
    """``getrusage(RUSAGE_SELF).ru_maxrss`` in MB (KiB on Linux, bytes on macOS)."""
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return raw / (1024 * 1024) if sys.platform == "darwin" else raw / 1024


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB.

    On Linux ``ru_maxrss`` survives ``execve``: a child reports at least the
    size its parent had when it forked (the benchmark's parent holds the loaded
    rows' entries, a few hundred MB), so two children of one parent report the
    same number whatever they do. ``VmHWM`` in ``/proc/self/status`` is the peak
    of the current address space, which ``exec`` replaces; use it where it exists.
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return _maxrss_mb()
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return _maxrss_mb()


async def _memory_child(args: argparse.Namespace) -> dict[str, Any]:
    """Stream a salted scan of ``--memory-child`` rows; report the process's peak RSS."""
    rows = args.memory_child
    scheme = SaltScheme(args.buckets)
    async with BigtableDataClientAsync(project=args.project) as client:
        table = SaltedTableAsync.from_client(client, args.instance, args.memory_table, scheme)
        await table.read_rows(ReadRowsQuery(limit=1))  # open the channel: part of the baseline
        baseline = peak_rss_mb()
        # Rows 0..rows-1 of the memory table: a range, so both scans page the same way.
        end = None if args.memory_whole else logical_key(rows)
        query = ReadRowsQuery(row_ranges=RowRange(end_key=end)) if end else ReadRowsQuery()
        start = time.perf_counter()
        n = await count_rows(await table.read_rows_stream(query))
        seconds = time.perf_counter() - start
        await table.close()
    peak = peak_rss_mb()
    return {
        "rows": n,
        "expected_rows": rows,
        "seconds": round(seconds, 3),
        "rows_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "baseline_rss_mb": round(baseline, 2),
        "peak_rss_mb": round(peak, 2),
        "growth_mb": round(peak - baseline, 2),
        # For comparison only: inflated by the parent's size on Linux (see peak_rss_mb).
        "ru_maxrss_mb": round(_maxrss_mb(), 2),
    }


def run_memory_child(target: Target, cfg: Config, rows: int, whole: bool) -> dict[str, Any]:
    """Run this file as a fresh process that streams ``rows`` rows; return its report."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--memory-child",
        str(rows),
        "--buckets",
        str(cfg.buckets),
        "--project",
        target.project,
        "--instance",
        target.instance,
        "--memory-table",
        target.memory,
    ]
    if whole:
        command.append("--memory-whole")
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError(f"memory child for {rows} rows failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def _load_memory_table(target: Target, cfg: Config) -> float:
    scheme = SaltScheme(cfg.buckets)
    async with BigtableDataClientAsync(project=target.project) as client:
        table = SaltedTableAsync.from_client(client, target.instance, target.memory, scheme)
        seconds = await load_rows(
            table.bulk_mutate_rows, cfg.memory_rows, cfg.load_batch, cfg.load_concurrency
        )
        await table.close()
    return seconds


def bench_memory(target: Target, cfg: Config) -> dict[str, Any]:
    """Peak RSS of a large vs a small salted streaming scan, each in fresh processes.

    The two sizes alternate, ``cfg.memory_runs`` processes each; the reported
    run of each size is its median by peak RSS, and every run's peak is kept.
    """
    large, small = cfg.memory_rows, cfg.memory_small_rows
    _progress(f"memory: loading {large:,} rows into {target.memory} ...")
    seconds = asyncio.run(_load_memory_table(target, cfg))
    _progress(f"memory: loaded in {seconds:.1f} s ({large / seconds:,.0f} rows/s); scanning")
    bigs: list[dict[str, Any]] = []
    littles: list[dict[str, Any]] = []
    for run in range(cfg.memory_runs):
        # Alternate which size goes first, like every other A/B here.
        order = [(large, True, bigs), (small, False, littles)]
        for rows, whole, reports in order if run % 2 == 0 else order[::-1]:
            report = run_memory_child(target, cfg, rows, whole=whole)
            reports.append(report)
            _progress(
                f"memory: {rows:,} rows streamed in {report['seconds']:.1f} s, "
                f"peak {report['peak_rss_mb']} MB"
            )
    big, little = _median_run(bigs), _median_run(littles)
    return {
        "load": {"rows": large, "seconds": round(seconds, 2), "rows_per_s": round(large / seconds)},
        "large": big,
        "small": little,
        "peaks_mb": {
            "large": [r["peak_rss_mb"] for r in bigs],
            "small": [r["peak_rss_mb"] for r in littles],
        },
        "difference_mb": round(big["peak_rss_mb"] - little["peak_rss_mb"], 2),
        "growth_difference_mb": round(big["growth_mb"] - little["growth_mb"], 2),
        "tolerance_mb": MEMORY_TOLERANCE_MB,
    }


def _median_run(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The report with the median peak RSS (the lower middle one of an even count)."""
    ranked = sorted(reports, key=lambda r: float(r["peak_rss_mb"]))
    return ranked[(len(ranked) - 1) // 2]


# -- the main run ------------------------------------------------------------------------


async def bench_tables(target: Target, cfg: Config) -> dict[str, Any]:
    """Load both tables, then run every alternating section; return the results."""
    scheme = SaltScheme(cfg.buckets)
    async with BigtableDataClientAsync(project=target.project) as client:
        plain = client.get_table(target.instance, target.plain)
        physical = client.get_table(target.instance, target.salted)
        salted = SaltedTableAsync(physical, scheme)
        counter = CountingTable(physical)
        tables = Tables(plain, physical, salted, counter, SaltedTableAsync(counter, scheme), scheme)
        _progress(
            f"loading {cfg.rows:,} rows into {target.plain} (raw) and {target.salted} (salted)"
        )
        load: dict[str, Any] = {}
        # Informational (no target): each side loads once, the raw table first.
        for side, write in (("raw", plain.bulk_mutate_rows), ("salted", salted.bulk_mutate_rows)):
            seconds = await load_rows(write, cfg.rows, cfg.load_batch, cfg.load_concurrency)
            load[side] = {
                "rows": cfg.rows,
                "seconds": round(seconds, 3),
                "rows_per_s": round(cfg.rows / seconds),
            }
        load["ratio"] = ratio(load["salted"]["rows_per_s"], load["raw"]["rows_per_s"])
        _progress(
            f"  loaded: raw {load['raw']['seconds']:.1f} s, "
            f"salted {load['salted']['seconds']:.1f} s"
        )
        bench = Bench(cfg, tables)
        await bench.run()
        await plain.close()
        await physical.close()
    results = bench.results()
    results["load"] = load
    results["errors"] = bench.errors
    return results


def evaluate(results: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    """The targets of issue 6, each with what was measured and PASS/FAIL."""
    targets: list[dict[str, Any]] = []

    def add(name: str, measured: float | None, goal: float, kind: str, unit: str = "x") -> None:
        passed = (
            None if measured is None else (measured >= goal if kind == ">=" else measured <= goal)
        )
        targets.append(
            {
                "name": name,
                "measured": measured,
                "target": f"{kind} {int(goal) if goal == int(goal) else goal:,}{unit}",
                "passed": passed,
            }
        )

    for op in ("read_row", "mutate_row", "check_and_mutate_row"):
        for mode, r in results["point"][op].items():
            add(f"{op} {mode} ops/s salted/raw", r["ratio"], POINT_TARGET, ">=")
    ratios = results["full_scan"]["ratios"]
    add(
        "full scan ordered / raw single scan",
        ratios["salted_ordered/raw_single"],
        SCAN_VS_SINGLE_TARGET,
        ">=",
    )
    add(
        f"full scan ordered / raw {cfg.buckets} sub-scans unordered",
        ratios["salted_ordered/raw_subscans_unordered"],
        SCAN_VS_SUBSCANS_TARGET,
        ">=",
    )
    for limit, r in results["limit_scan"].items():
        for kind in ("ordered", "unordered"):
            add(
                f"limit {limit} rows sent ({kind})", r["rows_sent"][kind], r["bound"], "<=", " rows"
            )
    memory = results["memory"]
    if not memory.get("skipped"):
        add(
            f"memory peak {cfg.memory_rows:,} - {cfg.memory_small_rows:,} rows",
            memory["difference_mb"],
            MEMORY_TOLERANCE_MB,
            "<=",
            " MB",
        )
    add("salt_key crc32 32-byte keys/s", results["salt"]["keys_per_s"], SALT_TARGET, ">=", "")
    return targets


# -- printing ----------------------------------------------------------------------------


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ms(summary: dict[str, Any]) -> str:
    return f"{_num(summary.get('p50_ms'), 2)} / {_num(summary.get('p99_ms'), 2)}"


def _verdict(passed: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "-"}[passed]


def render(report: dict[str, Any]) -> str:
    """The human-readable table printed at the end of a run."""
    cfg, meta = report["meta"]["config"], report["meta"]
    by_name = {t["name"]: t for t in report["targets"]}
    head = f"{'measurement':<46}{'raw':>14}{'salted':>16}{'salted/raw':>12}  {'target':<15}result"
    rule = "-" * len(head)
    lines = [
        f"saltedtable benchmark: {cfg['rows']:,} rows, {cfg['buckets']} buckets, "
        f"{cfg['repeats']} repetitions (variants alternate), {meta['where']}",
        f"load average {meta['loadavg_start'][0]:.2f} at start, "
        f"{meta['loadavg_end'][0]:.2f} at end, {meta['cpus']} CPUs; the run took "
        f"{meta['seconds']:.0f} s",
        "salted/raw: median of the paired ratios (point ops and bulk writes: of every chunk pair;"
        " scans: of every A/B round), so it can differ from the ratio of the medians shown",
        "",
        head,
        rule,
    ]

    def row(
        name: str, raw: str, salted: str, compare: float | str | None, target: str = ""
    ) -> None:
        """One line; ``target`` names an entry of report["targets"], else the line is info."""
        if isinstance(compare, float):
            compare = f"{compare:.2f}x"
        goal, result = "", "info" if target == "" else "-"
        if target in by_name:
            goal, result = by_name[target]["target"], _verdict(by_name[target]["passed"])
        if target == "-":
            result = ""
        lines.append(f"{name:<46}{raw:>14}{salted:>16}{compare or '-':>12}  {goal:<15}{result}")

    for op in ("read_row", "mutate_row", "check_and_mutate_row"):
        for mode, r in report["point"][op].items():
            raw, salted = r["raw"], r["salted"]
            row(
                f"{op} {mode} (ops/s)",
                _num(raw["ops_per_s"]),
                _num(salted["ops_per_s"]),
                r["ratio"],
                f"{op} {mode} ops/s salted/raw",
            )
            row("    p50 / p99 latency (ms)", _ms(raw), _ms(salted), "", "-")
    b = report["bulk_write"]
    row(
        f"bulk_mutate_rows, {b['batch']:,} per call (rows/s)",
        _num(b["raw"]["rows_per_s"]),
        _num(b["salted"]["rows_per_s"]),
        b["ratio"],
    )
    f = report["full_scan"]
    v, r = f["variants"], f["ratios"]
    n = cfg["buckets"]
    single, subs = (
        _num(v["raw_single"]["rows_per_s"]),
        _num(v["raw_subscans_unordered"]["rows_per_s"]),
    )
    ordered, unordered = (
        _num(v["salted_ordered"]["rows_per_s"]),
        _num(v["salted_unordered"]["rows_per_s"]),
    )
    row(
        "full scan (rows/s): ordered vs raw single scan",
        single,
        ordered,
        r["salted_ordered/raw_single"],
        "full scan ordered / raw single scan",
    )
    row(
        f"  ordered vs raw {n} sub-scans, unordered",
        subs,
        ordered,
        r["salted_ordered/raw_subscans_unordered"],
        f"full scan ordered / raw {n} sub-scans unordered",
    )
    if (ci := f.get("ratios_ci95", {}).get("salted_ordered/raw_subscans_unordered")) is not None:
        row("    95% confidence interval of that ratio", "", "", f"{ci[0]:.2f}-{ci[1]:.2f}", "-")
    row(
        f"  unordered vs raw {n} sub-scans, unordered",
        subs,
        unordered,
        r["salted_unordered/raw_subscans_unordered"],
    )
    row("  raw sub-scans vs raw single scan", single, subs, r["raw_subscans_unordered/raw_single"])
    row(
        f"  raw sub-scans holding {HELD_ROWS} rows vs raw sub-scans",
        subs,
        _num(v["raw_subscans_holding"]["rows_per_s"]),
        r["raw_subscans_holding/raw_subscans_unordered"],
    )
    if (r["raw_subscans_unordered/raw_single"] or 0) > 2:
        lines += [
            "  note: one raw stream is much slower than 16 here. The emulator sends one row per",
            "  message and on idle CPUs each message waits for a wake-up; with any other CPU load",
            "  one stream runs several times faster. The sub-scan comparison is the fair one.",
        ]
    p = report["prefix_scan"]
    row(
        f"prefix scan of {p['rows_per_prefix']} rows (scans/s)",
        _num(p["raw"]["ops_per_s"]),
        _num(p["salted"]["ops_per_s"]),
        p["ratio"],
    )
    row("    p50 / p99 latency (ms)", _ms(p["raw"]), _ms(p["salted"]), "", "-")
    for limit, r in report["limit_scan"].items():
        row(
            f"scan limit={limit} (scans/s)",
            _num(r["raw"]["ops_per_s"]),
            _num(r["salted"]["ops_per_s"]),
            r["ratio"],
        )
        for kind in ("ordered", "unordered"):
            row(
                f"    rows sent, {kind} (naive {r['naive']:,})",
                _num(r["raw_rows_sent"]),
                f"{r['rows_sent'][kind]:,} in {r['requests'][kind]} req",
                "",
                f"limit {limit} rows sent ({kind})",
            )
    m = report["memory"]
    if m.get("skipped"):
        lines.append("memory: skipped (--memory-rows 0)")
    else:
        large, small = m["large"], m["small"]
        row(
            f"memory peak RSS (MB), {large['expected_rows']:,} vs {small['expected_rows']:,} rows",
            f"{small['peak_rss_mb']:.1f} small",
            f"{large['peak_rss_mb']:.1f} large",
            f"{m['difference_mb']:+.1f} MB",
            f"memory peak {cfg['memory_rows']:,} - {cfg['memory_small_rows']:,} rows",
        )
    s = report["salt"]
    row(
        "salt_key crc32, 32-byte keys (keys/s)",
        f"bare {_num(s['bare_crc32_keys_per_s'])}",
        _num(s["keys_per_s"]),
        "",
        "salt_key crc32 32-byte keys/s",
    )
    lines.append(rule)
    failed = [t["name"] for t in report["targets"] if t["passed"] is False]
    passed = sum(1 for t in report["targets"] if t["passed"])
    lines.append(f"{passed} of {len(report['targets'])} targets pass")
    lines += [f"  FAIL: {name}" for name in failed]
    if report["errors"]:
        lines.append("WRONG ANSWERS (the numbers above are not valid):")
        lines += [f"  {e}" for e in report["errors"]]
    return "\n".join(lines)


# -- command line ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="examples/benchmark.py",
        description=(
            "Benchmark saltedtable against the raw google-cloud-bigtable async client. "
            "Starts the official emulator unless BIGTABLE_EMULATOR_HOST is set; with "
            "--project/--instance/--table-prefix and no BIGTABLE_EMULATOR_HOST it runs "
            "against existing tables of a real instance."
        ),
    )
    full = {k: v[0] for k, v in DEFAULTS.items()}
    quick = {k: v[1] for k, v in DEFAULTS.items()}

    def sized(flag: str, key: str, help_: str) -> None:
        parser.add_argument(
            flag,
            type=int,
            default=None,
            help=f"{help_} (default {full[key]:,}; --quick {quick[key]:,})",
        )

    parser.add_argument("--quick", action="store_true", help="smaller sizes: under a minute")
    sized("--rows", "rows", "rows in each table")
    parser.add_argument("--buckets", type=int, default=16, help="salt buckets (default 16)")
    sized("--repeats", "repeats", "repetitions of every measurement")
    sized("--scan-rounds", "scan_rounds", "full-scan alternations per repetition")
    sized(
        "--point-ops",
        "point_ops",
        f"operations per point measurement and repetition (x{CONCURRENT_OPS_FACTOR} concurrent)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=32, help="workers of the concurrent point ops (32)"
    )
    sized("--bulk-rows", "bulk_rows", "rows per bulk-write measurement")
    parser.add_argument("--bulk-batch", type=int, default=1000, help="entries per bulk call (1000)")
    sized("--prefix-ops", "prefix_ops", "prefix scans per repetition")
    sized("--limit-ops", "limit_ops", "scans per limit and repetition")
    sized("--memory-rows", "memory_rows", "rows of the large memory scan, 0 skips")
    parser.add_argument(
        "--memory-small-rows",
        type=int,
        default=None,
        help="rows of the small memory scan (default a tenth of --memory-rows; --quick a half, "
        "so both scans are past the first, smaller pages)",
    )
    sized("--memory-runs", "memory_runs", "fresh processes per memory scan size, median counts")
    sized("--salt-keys", "salt_keys", "keys per salt measurement")
    parser.add_argument("--load-batch", type=int, default=10_000, help="entries per load call")
    parser.add_argument("--load-concurrency", type=int, default=4, help="load calls in flight")
    parser.add_argument("--seed", type=int, default=6, help="random seed of the key samples")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON results")
    parser.add_argument(
        "--project", default=None, help=f"project (emulator default {testing.PROJECT})"
    )
    parser.add_argument(
        "--instance", default=None, help=f"instance (emulator default {testing.INSTANCE})"
    )
    parser.add_argument(
        "--table-prefix",
        default=None,
        help="tables PREFIX-plain, PREFIX-salted, PREFIX-memory (emulator: a fresh random prefix)",
    )
    # The memory measurement's child process.
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--memory-table", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--memory-whole", action="store_true", help=argparse.SUPPRESS)
    return parser


def _config(args: argparse.Namespace) -> Config:
    pick = 1 if args.quick else 0
    sizes = {
        key: (getattr(args, key) if getattr(args, key) is not None else both[pick])
        for key, both in DEFAULTS.items()
    }
    small = args.memory_small_rows
    if small is None:
        small = sizes["memory_rows"] // (2 if args.quick else 10)
    cfg = Config(
        memory_small_rows=max(1, small),
        buckets=args.buckets,
        concurrency=args.concurrency,
        bulk_batch=args.bulk_batch,
        load_batch=args.load_batch,
        load_concurrency=args.load_concurrency,
        seed=args.seed,
        quick=args.quick,
        **sizes,
    )
    if not 1 <= cfg.rows <= MAX_ROWS or cfg.memory_rows > MAX_ROWS or cfg.memory_rows < 0:
        raise ValueError(f"--rows and --memory-rows must be in 1..{MAX_ROWS:,}")
    if cfg.memory_rows and cfg.memory_small_rows > cfg.memory_rows:
        raise ValueError("--memory-small-rows must not exceed --memory-rows")
    counts = (
        cfg.repeats,
        cfg.scan_rounds,
        cfg.point_ops,
        cfg.prefix_ops,
        cfg.limit_ops,
        cfg.memory_runs,
    )
    if min(*counts, cfg.bulk_rows) < 1:
        raise ValueError("sizes must be >= 1")
    return cfg


def _target(args: argparse.Namespace) -> Target:
    host = os.environ.get(testing.EMULATOR_HOST_ENV)
    prefix = args.table_prefix or f"bench-{uuid.uuid4().hex[:8]}"
    if host or args.project is None:
        mode = "emulator" if host else "emulator-started"
        project, instance = args.project or testing.PROJECT, args.instance or testing.INSTANCE
    else:
        if not (args.instance and args.table_prefix):
            raise ValueError(
                "on a real instance (--project without BIGTABLE_EMULATOR_HOST) give "
                "--instance and --table-prefix naming existing tables PREFIX-plain, "
                "PREFIX-salted and PREFIX-memory (family cf)"
            )
        mode, project, instance = "instance", args.project, args.instance
    return Target(
        mode=mode,
        project=project,
        instance=instance,
        plain=f"{prefix}-plain",
        salted=f"{prefix}-salted",
        memory=f"{prefix}-memory",
        address=host,
    )


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _run(args: argparse.Namespace, cfg: Config, target: Target) -> dict[str, Any]:
    started = time.perf_counter()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    loadavg_start = os.getloadavg()
    if loadavg_start[0] > 0.5 * (os.cpu_count() or 1):
        _progress(
            f"note: load average {loadavg_start[0]:.2f} on {os.cpu_count()} CPUs: other "
            "processes compete for the CPU, so the numbers will be noisy"
        )
    phases: dict[str, float] = {}
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[name] = round(now - mark, 1)
        mark = now

    _progress(f"salt: {cfg.salt_keys:,} keys x {max(3, cfg.repeats)}")
    salt = bench_salt(cfg)
    lap("salt")
    results = asyncio.run(bench_tables(target, cfg))
    lap("tables")
    results["salt"] = salt
    if cfg.memory_rows:
        results["memory"] = bench_memory(target, cfg)
    else:
        results["memory"] = {"skipped": True}
    lap("memory")
    where = (
        f"instance {target.project}/{target.instance}"
        if target.mode == "instance"
        else f"emulator {target.address}"
    )
    results["meta"] = {
        "started_at": started_at,
        "seconds": round(time.perf_counter() - started, 1),
        "phase_seconds": phases,
        "where": where,
        "mode": target.mode,
        "project": target.project,
        "instance": target.instance,
        "tables": {"plain": target.plain, "salted": target.salted, "memory": target.memory},
        "command": " ".join(["examples/benchmark.py", *sys.argv[1:]]),
        "config": {
            **{k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        },
        "versions": {
            "saltedtable": version("saltedtable"),
            "google-cloud-bigtable": version("google-cloud-bigtable"),
            "grpcio": version("grpcio"),
            "python": platform.python_version(),
        },
        "git_commit": _git("rev-parse", "--short", "HEAD") or None,
        # The package is measured as it is on disk: say whether it differs from the commit.
        "saltedtable_modified": bool(_git("status", "--porcelain", "--", "../saltedtable")),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in loadavg_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }
    results["targets"] = evaluate(results, cfg)
    order = (
        "meta",
        "targets",
        "errors",
        "salt",
        "load",
        "point",
        "bulk_write",
        "full_scan",
        "prefix_scan",
        "limit_scan",
        "memory",
    )
    return {key: results[key] for key in order}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 0 when it ran (targets may still FAIL), 1 on wrong answers."""
    parser = _parser()
    args = parser.parse_args(argv)
    # The client warns on every connection that it talks to an emulator: that is the point here.
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
    if args.memory_child is not None:
        print(json.dumps(asyncio.run(_memory_child(args))))
        return 0
    try:
        cfg = _config(args)
        target = _target(args)
    except ValueError as error:
        parser.error(str(error))  # exits with 2, like any usage error
    emulator: testing.Emulator | None = None
    created: list[str] = []
    try:
        if target.mode == "emulator-started":
            _progress("starting the Bigtable emulator ...")
            emulator = testing.start_emulator()
            os.environ.update(testing.emulator_env(emulator))
            target = dataclasses.replace(target, address=emulator.address)
        if target.mode != "instance":
            assert target.address is not None
            wanted = [target.plain, target.salted] + ([target.memory] if cfg.memory_rows else [])
            for table_id in wanted:
                testing.create_table(
                    target.address,
                    table_id,
                    [FAMILY],
                    project=target.project,
                    instance=target.instance,
                )
                created.append(table_id)
        report = _run(args, cfg, target)
    except api_exceptions.NotFound as error:
        print(
            f"error: {error}\nOn a real instance create the tables first, for example:\n"
            f"  cbt createtable {target.plain} families={FAMILY}\n"
            f"  cbt createtable {target.salted} families={FAMILY}\n"
            f"  cbt createtable {target.memory} families={FAMILY}",
            file=sys.stderr,
        )
        return 2
    finally:
        if target.address is not None:
            for table_id in created:
                testing.delete_table(
                    target.address,
                    table_id,
                    project=target.project,
                    instance=target.instance,
                    missing_ok=True,
                )
        if emulator is not None:
            emulator.stop()
    print(render(report))
    path = args.json or Path(
        "bench-results", f"benchmark-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results written to {path}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
