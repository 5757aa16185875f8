"""Benchmark saltedtable against the raw google-cloud-bigtable async client (issue 6).

Loads the same logical rows (keys ``user{u:05d}#{ts}``, 100-byte values) into a
plain table through the raw client and into a salted table through
:class:`saltedtable.SaltedTableAsync`, then measures both in the same process,
**alternating** the variants in every repetition (the emulator and a long-lived
client slow down over time, so running all of A and then all of B would
measure the drift, not the wrapper)::

    python examples/tools/benchmark.py [--rows N] [--buckets 16] [--repeats R] [--json PATH]
                                       [--quick]

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
import bisect
import dataclasses
import datetime as dt
import hashlib
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
from google.cloud.bigtable.data.row import Cell, Row
from google.cloud.bigtable.data.row_filters import ColumnQualifierRegexFilter

from saltedtable import (
    CallStats,
    ReadBudget,
    SaltedTableAsync,
    SaltScheme,
    SubQuery,
    fields,
    prefix_end,
    testing,
)
from saltedtable._engine.budget import DEFAULT_MAX_CONCURRENT_SUBSCANS, DEFAULT_ROW_BYTES, allowance

# The sweep's paged control reads exactly as the engine does (internal helpers).
from saltedtable._read.plan import PageCursor

# -- targets of issue 6 ----------------------------------------------------------

POINT_TARGET: Final = 0.95  # salted ops/s >= 0.95 x raw, for read / write / check-and-mutate
SCAN_VS_SINGLE_TARGET: Final = 1.0  # ordered merge >= raw single unsalted scan
#: Rows each raw sub-scan of the "holding" variant keeps before dropping them.
HELD_ROWS: Final = 64
SCAN_VS_SUBSCANS_TARGET: Final = 0.9  # ordered merge >= 0.9 x raw sub-scans, unordered
MEMORY_TOLERANCE_MB: Final = 5.0  # "within a few MB"
SALT_TARGET: Final = 1_000_000  # keys/s, crc32 on 32-byte keys

# -- targets of issue 16 (any N, any scan size) ------------------------------------

#: Rows fetched for limit=L over N buckets <= LIMIT_ROWS_L * L + LIMIT_ROWS_N * N.
LIMIT_ROWS_L: Final = 2
LIMIT_ROWS_N: Final = 2
ROUNDS_MEDIAN_TARGET: Final = 1  # sequential request rounds of a limit scan, median
ROUNDS_P99_TARGET: Final = 2  # ... and 99th percentile
FIRST_ROW_TARGET: Final = 0.10  # an ordered scan's first row within 10% of its time
SWEEP_MEMORY_TOLERANCE_MB: Final = 10.0  # peak RSS, large vs small scan at one N
SMALL_SCAN_LATENCY_TARGET: Final = 2.0  # salted / raw latency of small scans at N=16

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


def random_key(i: int) -> bytes:
    """Return row ``i``'s key in the random-key data set: 16 hex digits of a hash of ``i``.

    Sorted, these keys come in no relation to ``i``, and which salt bucket a
    key falls in is independent of its neighbours' (the sequential keys'
    common prefix and counter suffix spread over crc32 buckets more evenly
    than chance).
    """
    return hashlib.blake2b(i.to_bytes(8, "big"), digest_size=8).hexdigest().encode()


#: The key sets a table can be loaded with.
KEYS: Final[dict[str, Callable[[int], bytes]]] = {
    "sequential": logical_key,
    "random": random_key,
}


def entry_of(i: int, key: Callable[[int], bytes] = logical_key) -> RowMutationEntry:
    """Return the logical mutation entry that loads row ``i`` (under ``key(i)``)."""
    return RowMutationEntry(
        key(i), SetCell(FAMILY, QUALIFIER, value_of(i), timestamp_micros=CELL_TS)
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
    # -- issue 16 --
    sweep_buckets: tuple[int, ...]  # the N sweep: one table per N
    sweep_rows: int  # rows per sweep table: the large scan streams them all
    sweep_small_rows: int  # the small scan (a key range), also the one timed A/B
    sweep_rounds: int  # A/B alternations of the timed scans per N
    sweep_runs: int  # fresh processes per scan size and N (the median counts)
    sweep_max_requests: int  # skip a large sweep scan estimated above this (0: never)
    sweep_budget_rows: int  # ReadBudget.rows of the sweep's reads (0: the default budget)
    rounds_buckets: tuple[int, ...]
    rounds_limits: tuple[int, ...]
    rounds_rows: int  # rows per rounds table
    rounds_queries: int  # limit and prefix scans per configuration, each from a random start
    delay_ms: float  # injected before every read request of the rounds section
    cpu_ops: int  # calls per variant in the client CPU section
    sections: frozenset[str] = frozenset()
    keep_tables: bool = False


#: What ``--only`` and ``--skip`` choose from, in the order they run.
SECTIONS: Final = ("core", "cpu", "rounds", "sweep", "memory")
#: Sections run only when ``--only`` names them: ``engine`` runs examples/tools/engine_bench.py
#: (issue 23: calls per row, throughput, first row, a delay per request, wide-row RSS).
OPTIONAL_SECTIONS: Final = ("engine",)

# (full default, --quick) for every size a flag can override.
DEFAULTS: Final[dict[str, tuple[int, int]]] = {
    "rows": (20_000, 3_000),
    # 4: each section's variants take turns going first (the point ops: A-B, then B-A).
    "repeats": (4, 3),
    # Full scans are the noisiest figure: alternate them this many times per repetition.
    "scan_rounds": (3, 1),
    "point_ops": (400, 100),
    "bulk_rows": (5_000, 1_000),
    # Enough chunk pairs (5 scans each) for an interval of the latency ratio.
    "prefix_ops": (50, 10),
    "limit_ops": (20, 5),
    "memory_rows": (1_000_000, 100_000),
    # A single fresh process's peak RSS varies by a few MB: take the median of this many.
    "memory_runs": (3, 3),
    "salt_keys": (500_000, 200_000),
    "sweep_rows": (200_000, 4_000),
    "sweep_rounds": (3, 2),
    "sweep_runs": (3, 2),
    # At N=4096 a scan sends about one request per 2.4 rows (each bucket's share
    # of the budget is 4 rows); 50,000 requests take about a minute here.
    "sweep_max_requests": (50_000, 50_000),
    "rounds_rows": (20_000, 3_000),
    # p99 of 100 queries is their second largest value (interpolated).
    "rounds_queries": (100, 10),
    "cpu_ops": (300, 60),
}
#: (full default, --quick) of the lists a flag can override.
LIST_DEFAULTS: Final[dict[str, tuple[tuple[int, ...], tuple[int, ...]]]] = {
    "sweep_buckets": ((1, 16, 64, 256, 4096), (1, 16)),
    "rounds_buckets": ((4, 16, 64), (4, 16)),
    "rounds_limits": ((1, 10, 100, 1000), (1, 10, 100)),
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
    prefix: str = "bench"

    def table(self, name: str) -> str:
        """The id of the table called ``name`` in this run (``PREFIX-name``)."""
        return f"{self.prefix}-{name}"


# -- a proxy that counts the rows the server sends ---------------------------------


class CountingTable:
    """A ``saltedtable.TableLikeAsync`` that delegates to a table and counts what its streams yield.

    Every row yielded by ``read_rows_stream`` went over the wire, so ``rows`` is
    the number of rows the server sent for the reads made through this proxy,
    and ``streams`` the number of read requests.

    With ``delay`` (seconds) every read request first sleeps that long, like a
    network round trip: a read's latency divided by ``delay`` is then about the
    number of requests it sent one after another. On a slow machine the
    client's own work adds to the latency (making 64 requests can take longer
    than the delay), so the proxy also records when each request was made and
    when it ended, for :func:`request_waves`, which counts the rounds from the
    order of those times alone.
    """

    def __init__(self, table: Any, delay: float = 0.0) -> None:
        self._table = table
        self.delay = delay
        # Where saltedtable finds the client's metrics (to count retries).
        self.client = getattr(table, "client", None)
        self.default_read_rows_operation_timeout: float = table.default_read_rows_operation_timeout
        self.default_read_rows_attempt_timeout: float | None = (
            table.default_read_rows_attempt_timeout
        )
        # The other defaults as the table has them (a test's fake may have only the above).
        operation, attempt = table.default_read_rows_operation_timeout, 20.0
        self.default_operation_timeout: float = getattr(
            table, "default_operation_timeout", operation
        )
        self.default_attempt_timeout: float | None = getattr(
            table, "default_attempt_timeout", attempt
        )
        self.default_mutate_rows_operation_timeout: float = getattr(
            table, "default_mutate_rows_operation_timeout", operation
        )
        self.default_mutate_rows_attempt_timeout: float | None = getattr(
            table, "default_mutate_rows_attempt_timeout", attempt
        )
        self.rows = 0
        self.streams = 0
        #: ``time.perf_counter()`` when each read request was made (before its delay).
        self.issued: list[float] = []
        #: When each read request's stream ended (closed, exhausted or failed), by
        #: request; ``math.inf`` while it runs.
        self.ended: list[float] = []

    def reset(self) -> None:
        """Start counting from zero."""
        self.rows = 0
        self.streams = 0
        self.issued = []
        self.ended = []

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterable[Row]:
        """Stream the rows of a query, counting each row."""
        # The lists of this read: a request still draining after a reset()
        # records its end in the list it started in, not in the next read's.
        ended, index = self.ended, len(self.ended)
        self.issued.append(time.perf_counter())
        ended.append(math.inf)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            stream = await self._table.read_rows_stream(query, **kwargs)
        except BaseException:
            ended[index] = time.perf_counter()
            raise
        self.streams += 1
        return self._count(stream, ended, index)

    async def _count(
        self, stream: AsyncIterable[Row], ended: list[float], index: int
    ) -> AsyncIterator[Row]:
        try:
            # aclosing: closing this generator (a satisfied limit) closes the gRPC stream too.
            async with aclosing(stream):  # type: ignore[type-var]
                async for row in stream:
                    self.rows += 1
                    yield row
        finally:
            ended[index] = time.perf_counter()

    async def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        """Read one row."""
        if self.delay:
            await asyncio.sleep(self.delay)
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


# -- an in-memory table: saltedtable's own CPU, without gRPC ---------------------------


class MemoryTable:
    """An in-memory ``saltedtable.TableLikeAsync`` for the reads the CPU section makes.

    What a read costs over it is the caller's own work (saltedtable's, or the
    bare loop of a raw read) plus building the rows, with no gRPC and no
    server. Streams hand control to the event loop before their first row and
    after every ``rows_per_yield`` rows, as a network stream would between
    messages. Reads understand row keys, row ranges and limits; writes take
    ``SetCell`` mutations only.
    """

    default_operation_timeout: float = 60.0
    default_attempt_timeout: float | None = 20.0
    default_read_rows_operation_timeout: float = 600.0
    default_read_rows_attempt_timeout: float | None = 20.0
    default_mutate_rows_operation_timeout: float = 600.0
    default_mutate_rows_attempt_timeout: float | None = 60.0

    def __init__(self, rows_per_yield: int = 8) -> None:
        self._keys: list[bytes] = []
        self._values: dict[bytes, bytes] = {}
        self.rows_per_yield = rows_per_yield
        self.requests = 0

    def _span(self, r: RowRange) -> range:
        keys = self._keys
        if r.start_key is None:
            lo = 0
        elif r.start_is_inclusive:
            lo = bisect.bisect_left(keys, r.start_key)
        else:
            lo = bisect.bisect_right(keys, r.start_key)
        if r.end_key is None:
            hi = len(keys)
        elif r.end_is_inclusive:
            hi = bisect.bisect_right(keys, r.end_key)
        else:
            hi = bisect.bisect_left(keys, r.end_key)
        return range(lo, max(lo, hi))

    async def read_rows_stream(self, query: ReadRowsQuery, **kwargs: Any) -> AsyncIterator[Row]:
        """Stream the rows of ``query``."""
        if query.filter is not None:
            raise NotImplementedError("MemoryTable reads take no filter")
        self.requests += 1
        if query.row_keys or query.row_ranges:
            chosen = {i for r in query.row_ranges for i in self._span(r)}
            chosen.update(
                bisect.bisect_left(self._keys, k) for k in query.row_keys if k in self._values
            )
            picked = [self._keys[i] for i in sorted(chosen)]
        else:
            picked = list(self._keys)
        if query.limit:
            picked = picked[: query.limit]
        return self._stream(picked)

    async def _stream(self, keys: list[bytes]) -> AsyncIterator[Row]:
        await asyncio.sleep(0)
        every = self.rows_per_yield
        for n, key in enumerate(keys, 1):
            yield Row(key, [Cell(self._values[key], key, FAMILY, QUALIFIER, CELL_TS)])
            if n % every == 0:
                await asyncio.sleep(0)

    async def read_row(self, row_key: bytes, **kwargs: Any) -> Row | None:
        """Read one row."""
        value = self._values.get(row_key)
        return (
            None
            if value is None
            else Row(row_key, [Cell(value, row_key, FAMILY, QUALIFIER, CELL_TS)])
        )

    async def row_exists(self, row_key: bytes, **kwargs: Any) -> bool:
        """Tell whether a row exists."""
        return row_key in self._values

    async def sample_row_keys(self, **kwargs: Any) -> list[tuple[bytes, int]]:
        """No split points."""
        return []

    def mutations_batcher(self, **kwargs: Any) -> Any:
        """Not offered."""
        raise NotImplementedError("MemoryTable has no mutations batcher")

    async def mutate_row(self, row_key: bytes, mutations: Any, **kwargs: Any) -> None:
        """Apply ``SetCell`` mutations to one row."""
        for mutation in mutations if isinstance(mutations, list) else [mutations]:
            if not isinstance(mutation, SetCell):
                raise NotImplementedError(f"MemoryTable takes SetCell only, got {mutation!r}")
            if row_key not in self._values:
                bisect.insort(self._keys, row_key)
            self._values[row_key] = mutation.new_value

    async def bulk_mutate_rows(
        self, mutation_entries: list[RowMutationEntry], **kwargs: Any
    ) -> None:
        """Apply many mutation entries."""
        for entry in mutation_entries:
            await self.mutate_row(entry.row_key, list(entry.mutations))

    async def check_and_mutate_row(self, row_key: bytes, predicate: Any, **kwargs: Any) -> bool:
        """Not offered."""
        raise NotImplementedError("MemoryTable has no check_and_mutate_row")

    async def read_modify_write_row(self, row_key: bytes, rules: Any, **kwargs: Any) -> Row:
        """Not offered."""
        raise NotImplementedError("MemoryTable has no read_modify_write_row")

    async def close(self) -> None:
        """Nothing to release."""


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


def _add_pair(pairs: list[float], took: dict[str, float], side: str = "salted") -> None:
    """Append one chunk pair's ``side``/raw rate ratio (both sides ran the same ops)."""
    raw, other = took.get("raw"), took.get(side)
    if raw is not None and other:
        pairs.append(raw / other)  # same work: the rate ratio is the inverse time ratio


def latency_paired(rate_ratios: Sequence[float]) -> dict[str, Any]:
    """Salted/raw latency from chunk pairs' rate ratios: the median and its 95% interval.

    Both sides of a chunk ran the same operations one after another, so a
    chunk's latency ratio is the inverse of its rate ratio.
    """
    latencies = [1 / r for r in rate_ratios if r > 0]
    return {"latency_ratio": median(latencies), "latency_ratio_ci95": median_ci95(latencies)}


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
    #: The same rows salted on their first field (``user00042``), so that a
    #: prefix scan of one user reads one bucket.
    confined: SaltedTableAsync | None = None


#: Hash only the user part of a key: ``user00042#...`` lives in one bucket.
CONFINED_PART: Final = fields(1, b"#")


async def load_rows(
    write: Callable[[list[RowMutationEntry]], Awaitable[None]],
    rows: int,
    batch: int,
    concurrency: int,
    key: Callable[[int], bytes] = logical_key,
) -> float:
    """Write rows ``0..rows-1`` in batches, ``concurrency`` batches at once; return seconds."""
    gate = asyncio.Semaphore(concurrency)

    async def one(start: int) -> None:
        async with gate:
            # Built inside the gate so at most `concurrency` batches are in memory.
            await write([entry_of(i, key) for i in range(start, min(start + batch, rows))])

    started = time.perf_counter()
    await asyncio.gather(*(one(start) for start in range(0, rows, batch)))
    return time.perf_counter() - started


class TableSet:
    """Creates (emulator only), loads, reuses and drops the tables of one run.

    On an emulator every table the run uses is created by it and deleted at the
    end, unless ``keep``: then the tables stay, and a table the same run
    configuration loaded before (same id, scheme and rows, recorded in the
    table ``PREFIX-loaded``) is reused instead of loaded again. On an instance
    nothing is created or deleted.
    """

    def __init__(self, target: Target, keep: bool) -> None:
        self.target = target
        self.keep = keep
        self.made: list[str] = []

    @property
    def emulated(self) -> bool:
        """Whether the run may create and delete tables (an emulator)."""
        return self.target.address is not None and self.target.mode != "instance"

    def create(self, table_id: str) -> None:
        """Create ``table_id`` with the family ``cf`` (an existing one is kept if ``keep``)."""
        if not self.emulated or table_id in self.made:
            return
        assert self.target.address is not None
        testing.create_table(
            self.target.address,
            table_id,
            [FAMILY],
            project=self.target.project,
            instance=self.target.instance,
            exist_ok=self.keep,
        )
        self.made.append(table_id)

    def drop(self, table_id: str) -> None:
        """Delete a table this run created, unless tables are kept."""
        if self.keep or table_id not in self.made:
            return
        assert self.target.address is not None
        testing.delete_table(
            self.target.address,
            table_id,
            project=self.target.project,
            instance=self.target.instance,
            missing_ok=True,
        )
        self.made.remove(table_id)

    def drop_all(self) -> None:
        """Delete every table this run created, unless tables are kept."""
        for table_id in list(self.made):
            self.drop(table_id)

    async def load(
        self,
        client: BigtableDataClientAsync,
        table_id: str,
        scheme: SaltScheme | None,
        rows: int,
        cfg: Config,
        keys: str = "sequential",
    ) -> dict[str, Any]:
        """Write rows ``0..rows-1`` into ``table_id``: salted by ``scheme``, or plain if None.

        ``keys`` names the key set (:data:`KEYS`). Returns what the load took;
        a kept table that already holds these rows is not written again
        (``"reused": true``).
        """
        record = f"{scheme!r} rows={rows} keys={keys}".encode()
        marks = None
        if self.keep and self.emulated:
            self.create(self.target.table("loaded"))
            marks = client.get_table(self.target.instance, self.target.table("loaded"))
            row = await marks.read_row(table_id.encode())
            if row is not None and row.cells[0].value == record:
                self.create(table_id)
                return {"rows": rows, "reused": True}
            if table_id not in self.made:  # another configuration's rows: start empty
                assert self.target.address is not None
                testing.delete_table(
                    self.target.address,
                    table_id,
                    project=self.target.project,
                    instance=self.target.instance,
                    missing_ok=True,
                )
        self.create(table_id)
        table = client.get_table(self.target.instance, table_id)
        write = table.bulk_mutate_rows
        if scheme is not None:
            write = SaltedTableAsync(table, scheme).bulk_mutate_rows
        seconds = await load_rows(write, rows, cfg.load_batch, cfg.load_concurrency, KEYS[keys])
        if marks is not None:
            await marks.mutate_row(table_id.encode(), SetCell(FAMILY, b"loaded", record))
        return {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds)}


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

        Records each side's summed time and latencies in its series and, for
        a "raw" side, every other side's rate ratio over raw in every chunk in
        :attr:`chunk_ratios`: ``series`` for "salted", ``series/side`` for the
        others.

        Other processes' load comes and goes within a second; one long A run
        followed by one long B run would catch different loads, so the ops are
        split into chunks of at least ``CHUNK_WAVES`` waves of ``concurrency``
        ops and the sides alternate chunk by chunk.
        """
        size = max(MIN_CHUNK_OPS, CHUNK_WAVES * concurrency)
        chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
        seconds = dict.fromkeys(ops, 0.0)
        latencies: dict[str, list[float]] = {side: [] for side in ops}
        pairs = {
            side: self.chunk_ratios.setdefault(
                series if side == "salted" else f"{series}/{side}", []
            )
            for side in ops
            if side != "raw"
        }
        for c, chunk in enumerate(chunks):
            took_by_side: dict[str, float] = {}
            for side in rotated(list(ops), rep + c):
                took, lat = await run_ops(ops[side], chunk, concurrency)
                took_by_side[side] = took
                seconds[side] += took
                latencies[side] += lat
            for side, ratios in pairs.items():
                _add_pair(ratios, took_by_side, side)
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
        counts: dict[str, list[int]] = {"raw": [], "salted": [], "confined": []}
        confined = t.confined
        assert confined is not None

        async def raw_op(p: bytes) -> None:
            query = ReadRowsQuery(row_ranges=RowRange(start_key=p, end_key=prefix_end(p)))
            counts["raw"].append(await count_rows(await t.plain.read_rows_stream(query)))

        async def salted_op(p: bytes) -> None:
            counts["salted"].append(await count_rows(t.salted.read_prefix(p)))

        async def confined_op(p: bytes) -> None:
            counts["confined"].append(await count_rows(confined.read_prefix(p)))

        ops: dict[str, Callable[[bytes], Awaitable[object]]] = {
            "raw": raw_op,
            "salted": salted_op,
            "confined": confined_op,
        }
        await self.pair_ops(rep, "prefix", ops, prefixes, 1)
        want = sum(expected[u] for u in picked)
        for side in ops:
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
        # The counted table's first operation reads the layout record through the
        # proxy: done here, so that row is not counted as sent for the first limit scan.
        await t.counted.read_rows(ReadRowsQuery(limit=1))
        t.counter.reset()
        await count_rows(t.salted.read_prefix(user_prefix(0)))
        if t.confined is not None:
            await count_rows(t.confined.read_prefix(user_prefix(0)))

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
        prefix: dict[str, Any] = {
            "rows_per_prefix": ROWS_PER_USER,
            **{
                side: {
                    **self.s(f"prefix/{side}").summary(),
                    "rows_per_s": median(self.s(f"prefix_rows/{side}").rates),
                }
                for side in ("raw", "salted", "confined")
            },
            **paired(self.s("prefix/salted"), self.s("prefix/raw")),
            # Per chunk pair: the same prefixes on both sides, one after the other.
            **latency_paired(self.chunk_ratios["prefix"]),
            "chunk_pairs": len(self.chunk_ratios["prefix"]),
            "confined_ratio": paired(self.s("prefix/confined"), self.s("prefix/raw"))["ratio"],
            "confined_latency": latency_paired(self.chunk_ratios["prefix/confined"]),
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
                **latency_paired(self.chunk_ratios[f"limit/{limit}"]),
                "chunk_pairs": len(self.chunk_ratios[f"limit/{limit}"]),
                "rows_sent": {
                    kind: max(self.rows_sent[f"{limit}/{kind}"])
                    for kind in ("ordered", "unordered")
                },
                "requests": {
                    kind: max(self.requests[f"{limit}/{kind}"]) for kind in ("ordered", "unordered")
                },
                "raw_rows_sent": limit,
                "bound": LIMIT_ROWS_L * limit + LIMIT_ROWS_N * cfg.buckets,
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


async def count_timed(stream: AsyncIterable[Row], start: float) -> tuple[int, float | None]:
    """Consume a row stream; return its rows and when the first came (seconds after ``start``)."""
    n = 0
    first: float | None = None
    async with aclosing(stream):  # type: ignore[type-var]
        async for _ in stream:
            first = time.perf_counter() - start
            n = 1
            break
        async for _ in stream:
            n += 1
    return n, first


async def _memory_child(args: argparse.Namespace) -> dict[str, Any]:
    """Stream a salted scan of ``--memory-child`` rows; report the process's peak RSS."""
    rows = args.memory_child
    scheme = SaltScheme(args.buckets)
    async with BigtableDataClientAsync(project=args.project) as client:
        table = SaltedTableAsync.from_client(
            client, args.instance, args.memory_table, scheme, budget=budget_of(args.budget_rows)
        )
        await table.read_rows(ReadRowsQuery(limit=1))  # open the channel: part of the baseline
        baseline = peak_rss_mb()
        # Rows 0..rows-1 of the memory table: a range, so both scans page the same way.
        end = None if args.memory_whole else logical_key(rows)
        query = ReadRowsQuery(row_ranges=RowRange(end_key=end)) if end else ReadRowsQuery()
        stats = CallStats()
        cpu = time.process_time()
        start = time.perf_counter()
        n, first = await count_timed(await table.read_rows_stream(query, stats=stats), start)
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
        await table.close()
    peak = peak_rss_mb()
    return {
        "rows": n,
        "expected_rows": rows,
        "buckets": args.buckets,
        "seconds": round(seconds, 3),
        "rows_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "first_row_seconds": None if first is None else round(first, 4),
        "first_row_fraction": None if first is None or not seconds else round(first / seconds, 4),
        "requests": stats.requests,
        "peak_buffered_rows": stats.peak_buffered_rows,
        "row_bytes": round(stats.row_bytes, 1),
        "client_cpu_seconds": round(cpu, 3),
        "baseline_rss_mb": round(baseline, 2),
        "peak_rss_mb": round(peak, 2),
        "growth_mb": round(peak - baseline, 2),
        # For comparison only: inflated by the parent's size on Linux (see peak_rss_mb).
        "ru_maxrss_mb": round(_maxrss_mb(), 2),
    }


def run_memory_child(
    target: Target,
    cfg: Config,
    rows: int,
    whole: bool,
    *,
    buckets: int | None = None,
    table_id: str | None = None,
    budget_rows: int = 0,
) -> dict[str, Any]:
    """Run this file as a fresh process that streams ``rows`` rows; return its report.

    The table is ``table_id`` salted into ``buckets`` (default: the memory
    section's table and ``--buckets``).
    """
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--memory-child",
        str(rows),
        "--buckets",
        str(buckets or cfg.buckets),
        "--project",
        target.project,
        "--instance",
        target.instance,
        "--memory-table",
        table_id or target.memory,
    ]
    if whole:
        command.append("--memory-whole")
    if budget_rows:
        command += ["--budget-rows", str(budget_rows)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError(f"memory child for {rows} rows failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def _load_table(
    target: Target, cfg: Config, made: TableSet, table_id: str, scheme: SaltScheme, rows: int
) -> dict[str, Any]:
    async with BigtableDataClientAsync(project=target.project) as client:
        return await made.load(client, table_id, scheme, rows, cfg)


def _loaded(what: str, load: dict[str, Any]) -> None:
    if load.get("reused"):
        _progress(f"{what}: reusing the {load['rows']:,} rows a kept table holds")
    else:
        _progress(f"{what}: loaded {load['rows']:,} rows in {load['seconds']:.1f} s")


def bench_memory(target: Target, cfg: Config, made: TableSet) -> dict[str, Any]:
    """Peak RSS of a large vs a small salted streaming scan, each in fresh processes.

    The two sizes alternate, ``cfg.memory_runs`` processes each; the reported
    run of each size is its median by peak RSS, and every run's peak is kept.
    """
    large, small = cfg.memory_rows, cfg.memory_small_rows
    _progress(f"memory: loading {large:,} rows into {target.memory} ...")
    load = asyncio.run(
        _load_table(target, cfg, made, target.memory, SaltScheme(cfg.buckets), large)
    )
    _loaded("memory", load)
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
    made.drop(target.memory)
    return {
        "load": load,
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


def bench_engine(cfg: Config) -> dict[str, Any]:
    """The read engine's section (issue 23): examples/tools/engine_bench.py in a process of its own.

    It uses the emulator this run uses (``BIGTABLE_EMULATOR_HOST``) and
    ``--quick`` picks small sizes; its report is added as ``engine``.
    """
    out = Path("bench-results", f"engine-{uuid.uuid4().hex[:8]}.json")
    command = [sys.executable, str(Path(__file__).with_name("engine_bench.py")), "--out", str(out)]
    if cfg.quick:
        command += ["--rows", "4000", "--rounds", "2", "--wide-mb", "32"]
    _progress("engine: " + " ".join(command[1:]))
    done = subprocess.run(command, check=False, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError(f"engine section failed ({done.returncode})")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _median_run(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The report with the median peak RSS (the lower middle one of an even count)."""
    ranked = sorted(reports, key=lambda r: float(r["peak_rss_mb"]))
    return ranked[(len(ranked) - 1) // 2]


# -- the N sweep: throughput, first row and memory at every N (issue 16) -------------------


def budget_of(rows: int) -> ReadBudget | None:
    """``ReadBudget(rows=rows)`` (default bytes), or None for the default budget (0)."""
    return ReadBudget(rows=rows) if rows else None


def emulator_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds the process ``pid`` has used so far, or None if unknown."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): utime, stime are 14 and 15.
    after = stat.rsplit(")", 1)[1].split()
    return (int(after[11]) + int(after[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ScanRun:
    """One timed scan: what it returned, how long it took, what it cost."""

    rows: int
    seconds: float
    first_row: float | None  # seconds to the first row
    requests: int
    client_cpu: float  # this process's CPU seconds (every thread: gRPC's too)
    emulator_cpu: float | None  # the emulator's CPU seconds, when its pid is known
    peak_buffered_rows: int | None = None

    @property
    def rate(self) -> float:
        """Rows per second."""
        return self.rows / self.seconds if self.seconds > 0 else math.inf


ScanFn = Callable[[float], Awaitable[tuple[int, float | None, int, int | None]]]


async def timed_scan(scan: ScanFn, emulator_pid: int | None) -> ScanRun:
    """Run ``scan(start)`` -> (rows, first row, requests, peak) and measure it."""
    emulator = emulator_cpu_seconds(emulator_pid)
    cpu = time.process_time()
    start = time.perf_counter()
    rows, first, requests, peak = await scan(start)
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    after = emulator_cpu_seconds(emulator_pid)
    used = None if emulator is None or after is None else after - emulator
    return ScanRun(rows, seconds, first, requests, cpu, used, peak)


def summarize_scans(runs: Sequence[ScanRun]) -> dict[str, Any]:
    """Medians of a variant's timed scans (rates per round kept)."""
    rows = max(1, runs[0].rows)
    fractions = [r.first_row / r.seconds for r in runs if r.first_row is not None and r.seconds]
    emulator = [r.emulator_cpu for r in runs if r.emulator_cpu is not None]
    peaks = [r.peak_buffered_rows for r in runs if r.peak_buffered_rows is not None]
    return {
        "rows_per_s": median([r.rate for r in runs]),
        "rows_per_s_per_round": [round(r.rate, 1) for r in runs],
        "seconds": median([r.seconds for r in runs]),
        "first_row_seconds": median([r.first_row for r in runs if r.first_row is not None]),
        "first_row_fraction": median(fractions),
        "requests": median([r.requests for r in runs]),
        "client_cpu_us_per_row": median([r.client_cpu / rows * 1e6 for r in runs]),
        "emulator_cpu_us_per_row": median([e / rows * 1e6 for e in emulator]),
        "peak_buffered_rows": max(peaks) if peaks else None,
    }


def range_subqueries(table: SaltedTableAsync, query: ReadRowsQuery) -> list[ReadRowsQuery]:
    """The physical sub-queries the salted table would send for ``query``, for the raw client."""
    return [
        ReadRowsQuery(
            row_keys=list(sub.keys) or None,
            row_ranges=[r.to_row_range() for r in sub.ranges] or None,
        )
        for sub in table.plan(query).subqueries
    ]


async def sweep_ab(
    target: Target, cfg: Config, buckets: int, table_id: str, emulator_pid: int | None
) -> tuple[dict[str, Any], list[str]]:
    """Alternate the ordered salted scan of the small range with the raw client's sub-scans."""
    scheme = SaltScheme(buckets)
    rows = cfg.sweep_small_rows
    query = ReadRowsQuery(row_ranges=RowRange(end_key=logical_key(rows)))
    errors: list[str] = []
    async with BigtableDataClientAsync(project=target.project) as client:
        physical = client.get_table(target.instance, table_id)
        salted_budget = budget_of(cfg.sweep_budget_rows) or ReadBudget()
        salted = SaltedTableAsync(physical, scheme, budget=salted_budget)
        subqueries = range_subqueries(salted, query)

        async def salted_ordered(start: float) -> tuple[int, float | None, int, int | None]:
            stats = CallStats()
            n, first = await count_timed(await salted.read_rows_stream(query, stats=stats), start)
            return n, first, stats.requests, stats.peak_buffered_rows

        async def raw_subscans(start: float) -> tuple[int, float | None, int, int | None]:
            firsts: list[float] = []

            async def one(sub: ReadRowsQuery) -> int:
                n, first = await count_timed(await physical.read_rows_stream(sub), start)
                if first is not None:
                    firsts.append(first)
                return n

            total = sum(await asyncio.gather(*(one(sub) for sub in subqueries)))
            return total, min(firsts, default=None), len(subqueries), None

        # A control: the raw client reading the same sub-queries in pages of the size
        # saltedtable asks (its share of the budget), one page at a time per bucket and
        # at most max_concurrent_subscans at once, unordered. What it loses against
        # raw_subscans is the cost of paging itself (on the emulator, each page re-reads
        # the rest of its range), not saltedtable's.
        plan_subs = salted.plan(query).subqueries
        page = allowance(salted_budget, len(plan_subs), DEFAULT_ROW_BYTES)
        slots = asyncio.Semaphore(DEFAULT_MAX_CONCURRENT_SUBSCANS)

        async def raw_subscans_paged(start: float) -> tuple[int, float | None, int, int | None]:
            firsts: list[float] = []
            pages = 0

            async def one(sub: SubQuery) -> int:
                nonlocal pages
                cursor, total = PageCursor(sub), 0
                while (q := cursor.next_query(page)) is not None:
                    got, last = 0, None
                    async with slots:
                        pages += 1
                        async with aclosing(await physical.read_rows_stream(q)) as stream:
                            async for row in stream:
                                if not got and not total:
                                    firsts.append(time.perf_counter() - start)
                                got += 1
                                last = row.row_key
                    cursor.advance(got, page, last)
                    total += got
                return total

            total = sum(await asyncio.gather(*(one(sub) for sub in plan_subs)))
            return total, min(firsts, default=None), pages, None

        variants: dict[str, ScanFn] = {
            "salted_ordered": salted_ordered,
            "raw_subscans": raw_subscans,
            "raw_subscans_paged": raw_subscans_paged,
        }
        await salted.read_rows(ReadRowsQuery(limit=1))  # the channel and the layout check
        runs: dict[str, list[ScanRun]] = {name: [] for name in variants}
        for r in range(cfg.sweep_rounds):
            for name in rotated(list(variants), r):
                run = await timed_scan(variants[name], emulator_pid)
                runs[name].append(run)
                if run.rows != rows:
                    errors.append(f"sweep N={buckets} {name}: {run.rows} rows, expected {rows}")
        await physical.close()
    ratios = [
        s.rate / r.rate
        for s, r in zip(runs["salted_ordered"], runs["raw_subscans"], strict=True)
        if r.rate > 0
    ]
    paged = [
        s.rate / r.rate
        for s, r in zip(runs["salted_ordered"], runs["raw_subscans_paged"], strict=True)
        if r.rate > 0
    ]
    return {
        "rows": rows,
        **{name: summarize_scans(scans) for name, scans in runs.items()},
        "ratio": median(ratios),
        "ratio_ci95": median_ci95(ratios),
        "ratio_per_round": [round(x, 3) for x in ratios],
        # salted ordered / the raw client paging the same way (the cost of the merge alone)
        "ratio_vs_paged": median(paged),
        "ratio_vs_paged_per_round": [round(x, 3) for x in paged],
    }, errors


def sweep_memory(
    target: Target, cfg: Config, buckets: int, table_id: str, estimate: dict[str, Any]
) -> dict[str, Any]:
    """Peak RSS of streaming the whole table vs the small range at one N, in fresh processes.

    The large scan is skipped, with the reason, when it is estimated to send
    more than ``cfg.sweep_max_requests`` requests.
    """
    large, small = cfg.sweep_rows, cfg.sweep_small_rows
    requests = float(estimate.get("requests") or 0)
    skip = bool(cfg.sweep_max_requests and requests > cfg.sweep_max_requests)
    sizes = [(small, False)] if skip else [(large, True), (small, False)]
    reports: dict[int, list[dict[str, Any]]] = {rows: [] for rows, _ in sizes}
    for run in range(cfg.sweep_runs):
        for rows, whole in sizes if run % 2 == 0 else sizes[::-1]:
            report = run_memory_child(
                target,
                cfg,
                rows,
                whole,
                buckets=buckets,
                table_id=table_id,
                budget_rows=cfg.sweep_budget_rows,
            )
            reports[rows].append(report)
            _progress(
                f"sweep N={buckets}: {rows:,} rows streamed in {report['seconds']:.1f} s "
                f"({report['requests']:,} requests), first row at "
                f"{report['first_row_seconds']} s, peak {report['peak_rss_mb']} MB"
            )
    out: dict[str, Any] = {"small": _median_run(reports[small])}
    out["peaks_mb"] = {"small": [r["peak_rss_mb"] for r in reports[small]]}
    if skip:
        out["large"] = {
            "skipped": (
                f"estimated {requests:,.0f} requests (> --sweep-max-requests "
                f"{cfg.sweep_max_requests:,}), about {estimate['seconds']:,.0f} s a scan"
            ),
            "estimated_requests": round(requests),
            "estimated_seconds": round(float(estimate["seconds"]), 1),
        }
        out["difference_mb"] = None
    else:
        out["large"] = _median_run(reports[large])
        out["peaks_mb"]["large"] = [r["peak_rss_mb"] for r in reports[large]]
        out["difference_mb"] = round(out["large"]["peak_rss_mb"] - out["small"]["peak_rss_mb"], 2)
    return out


def bench_sweep(
    target: Target, cfg: Config, made: TableSet, emulator_pid: int | None
) -> tuple[dict[str, Any], list[str]]:
    """For every N of the sweep: load a table, time A/B scans, measure memory in fresh processes."""
    by_n: dict[str, Any] = {}
    errors: list[str] = []
    for n in cfg.sweep_buckets:
        table_id = target.table(f"sweep{n}")
        _progress(f"sweep N={n}: loading {cfg.sweep_rows:,} rows into {table_id} ...")
        load = asyncio.run(_load_table(target, cfg, made, table_id, SaltScheme(n), cfg.sweep_rows))
        _loaded(f"sweep N={n}", load)
        ab, wrong = asyncio.run(sweep_ab(target, cfg, n, table_id, emulator_pid))
        errors += wrong
        salted = ab["salted_ordered"]
        _progress(
            f"sweep N={n}: {cfg.sweep_small_rows:,} rows, ordered "
            f"{salted['rows_per_s']:,.0f} rows/s in {salted['requests']:,.0f} requests, raw "
            f"sub-scans {ab['raw_subscans']['rows_per_s']:,.0f} rows/s, raw sub-scans paged "
            f"like saltedtable {ab['raw_subscans_paged']['rows_per_s']:,.0f} rows/s "
            f"(salted/paged {ab['ratio_vs_paged']:.2f}); first row at "
            f"{salted['first_row_seconds']:.3f} s"
        )
        # Requests and time grow with the rows scanned (about): the large scan's estimate.
        scale = cfg.sweep_rows / cfg.sweep_small_rows
        estimate = {"requests": salted["requests"] * scale, "seconds": salted["seconds"] * scale}
        memory = sweep_memory(target, cfg, n, table_id, estimate)
        made.drop(table_id)
        by_n[str(n)] = {"buckets": n, "load": load, "scan": ab, "memory": memory}
    result = {
        "rows": cfg.sweep_rows,
        "small_rows": cfg.sweep_small_rows,
        "budget": dataclasses.asdict(budget_of(cfg.sweep_budget_rows) or ReadBudget()),
        "emulator_cpu_measured": emulator_pid is not None,
        "by_buckets": by_n,
    }
    return result, errors


# -- rounds: limit and prefix scans with a delay before every request (issue 16) -----------


def request_waves(issued: Sequence[float], ended: Sequence[float]) -> int:
    """How many requests ran one after another: the longest chain of answers waited for.

    ``issued[i]`` is when request ``i`` was made and ``ended[i]`` when its
    stream ended (``math.inf``: never). A request can only have waited for
    the answers of requests that had ended when it was made, so its wave is
    one more than the highest wave among those (1 if none had ended). Only
    the order of the times matters: requests of one round that the client
    was slow to make (many buckets on a busy machine) stay in that round, as
    long as none of them waited for an answer.

    Raises:
        ValueError: The lists differ in length, or a request ended before it was made.
    """
    if len(issued) != len(ended):
        raise ValueError(f"{len(issued)} issue times but {len(ended)} end times")
    if any(e < i for i, e in zip(issued, ended, strict=True)):
        raise ValueError("a request ended before it was made")
    by_issue = sorted(range(len(issued)), key=issued.__getitem__)
    by_end = sorted(range(len(ended)), key=ended.__getitem__)
    waves = [0] * len(issued)
    highest_ended = 0  # the highest wave among the requests ended so far
    j = 0
    for i in by_issue:
        # Every request that ended by now was made no later than this one, so
        # its wave is known (a tie of a zero-length request counts as 0: safe).
        while j < len(by_end) and ended[by_end[j]] <= issued[i]:
            highest_ended = max(highest_ended, waves[by_end[j]])
            j += 1
        waves[i] = highest_ended + 1
    return max(waves, default=0)


def spread(values: Sequence[float], digits: int = 2) -> dict[str, float | None]:
    """Median, 99th percentile and maximum."""
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for name, q in (("median", 0.5), ("p99", 0.99), ("max", 1.0)):
        value = percentile(ordered, q)
        out[name] = None if value is None else round(value, digits)
    return out


@dataclass(slots=True)
class RoundSample:
    """One scan through the delay proxy."""

    latency: float
    waves: int
    requests: int
    rows_fetched: int
    engine_rounds: int  # CallStats.rounds (0 for reads without a limit and for raw reads)


def summarize_rounds(samples: Sequence[RoundSample], delay: float) -> dict[str, Any]:
    """What the samples of one configuration say: rounds three ways, requests, rows."""
    return {
        "queries": len(samples),
        "latency_ms": spread([s.latency * 1000 for s in samples], 1),
        "latency_over_delay": spread([s.latency / delay for s in samples]),
        "waves": spread([s.waves for s in samples]),
        "engine_rounds": spread([s.engine_rounds for s in samples]),
        "two_or_more_rounds": sum(1 for s in samples if s.waves >= 2) / max(1, len(samples)),
        "requests": spread([s.requests for s in samples], 1),
        "rows_fetched": spread([s.rows_fetched for s in samples], 1),
    }


async def timed_through(
    proxy: CountingTable, read: Callable[[CallStats], Awaitable[int]]
) -> tuple[RoundSample, int]:
    """Run one read through ``proxy``; return its sample and the rows it returned."""
    proxy.reset()
    stats = CallStats()
    start = time.perf_counter()
    got = await read(stats)
    latency = time.perf_counter() - start
    sample = RoundSample(
        latency,
        request_waves(proxy.issued, proxy.ended),
        proxy.streams,
        proxy.rows,
        stats.rounds,
    )
    return sample, got


async def bench_rounds(
    target: Target, cfg: Config, made: TableSet
) -> tuple[dict[str, Any], list[str]]:
    """Limit and prefix scans with a fixed delay before every read request, at several N.

    Each configuration runs ``cfg.rounds_queries`` salted scans from random
    start keys (the rows a limit needs fall differently into the buckets each
    time); the raw client runs every fourth of them too, interleaved. Limit
    scans run over two key sets (:data:`KEYS`): the benchmark's sequential
    keys and random ones, whose spread over the buckets is the binomial one
    the first round is sized for.
    """
    delay = cfg.delay_ms / 1000
    rows = cfg.rounds_rows
    rng = random.Random(cfg.seed + 16)
    errors: list[str] = []
    by_n: dict[str, Any] = {}
    users = rows // ROWS_PER_USER
    sorted_keys = {kind: sorted(map(key, range(rows))) for kind, key in KEYS.items()}
    async with BigtableDataClientAsync(project=target.project) as client:
        _progress(f"rounds: loading {rows:,} rows per table, delay {cfg.delay_ms:g} ms")
        raws: dict[str, CountingTable] = {}
        for kind in KEYS:
            plain_id = target.table(f"rounds-plain-{kind}")
            await made.load(client, plain_id, None, rows, cfg, kind)
            raws[kind] = CountingTable(client.get_table(target.instance, plain_id), delay)
        for n in cfg.rounds_buckets:
            fan_scheme = SaltScheme(n)
            confined_scheme = SaltScheme(n, key_part=CONFINED_PART)
            tables: dict[str, tuple[CountingTable, SaltedTableAsync]] = {}
            for name, scheme, kind in (
                ("sequential", fan_scheme, "sequential"),
                ("random", fan_scheme, "random"),
                ("confined", confined_scheme, "sequential"),
            ):
                table_id = target.table(f"rounds{n}-{name}")
                await made.load(client, table_id, scheme, rows, cfg, kind)
                proxy = CountingTable(client.get_table(target.instance, table_id), delay)
                tables[name] = (proxy, SaltedTableAsync(proxy, scheme))
                await tables[name][1].read_rows(ReadRowsQuery(limit=1))  # layout check, untimed
            result: dict[str, Any] = {"buckets": n}
            for kind in KEYS:
                result["limits" if kind == "sequential" else f"limits_{kind}"] = {
                    str(limit): await _rounds_limit(
                        cfg,
                        rng,
                        n,
                        limit,
                        kind,
                        sorted_keys[kind],
                        tables[kind],
                        raws[kind],
                        errors,
                    )
                    for limit in cfg.rounds_limits
                }
            seq_proxy = tables["sequential"][0]
            per_bucket = SaltedTableAsync(
                seq_proxy, fan_scheme, budget=ReadBudget(one_request_rows=0)
            )
            result["prefix"] = await _rounds_prefix(
                cfg,
                rng,
                users,
                n,
                raws["sequential"],
                tables["sequential"],
                (seq_proxy, per_bucket),
                tables["confined"],
                errors,
            )
            result["prefix_limit"] = {
                str(limit): await _rounds_prefix_limit(
                    cfg, rng, users, n, limit, tables["sequential"], errors
                )
                for limit in (1, 10, 100)
            }
            by_n[str(n)] = result
            for name in tables:
                made.drop(target.table(f"rounds{n}-{name}"))
        for kind in KEYS:
            made.drop(target.table(f"rounds-plain-{kind}"))
    out = {
        "delay_ms": cfg.delay_ms,
        "rows": rows,
        "queries": cfg.rounds_queries,
        "by_buckets": by_n,
    }
    return out, errors


async def _rounds_limit(
    cfg: Config,
    rng: random.Random,
    n: int,
    limit: int,
    kind: str,
    keys: list[bytes],
    salted: tuple[CountingTable, SaltedTableAsync],
    raw: CountingTable,
    errors: list[str],
) -> dict[str, Any]:
    """``cfg.rounds_queries`` scans with ``limit`` from random start keys of sorted ``keys``."""
    delay = raw.delay
    proxy, table = salted
    what = f"rounds N={n} limit {limit} ({kind} keys)"
    salted_samples: list[RoundSample] = []
    raw_samples: list[RoundSample] = []
    for i in range(cfg.rounds_queries):
        first = rng.randrange(len(keys) - limit)
        query = ReadRowsQuery(row_ranges=RowRange(start_key=keys[first]), limit=limit)
        want = keys[first : first + limit]

        async def salted_read(
            stats: CallStats, q: ReadRowsQuery = query, want: list[bytes] = want
        ) -> int:
            got = await table.read_rows(q, stats=stats)
            if [r.row_key for r in got] != want:
                errors.append(f"{what}: wrong rows")
            return len(got)

        async def raw_read(stats: CallStats, q: ReadRowsQuery = query) -> int:
            return await count_rows(await raw.read_rows_stream(q))

        sides = ["salted", "raw"] if i % 4 == 0 else ["salted"]
        for side in rotated(sides, i // 4):
            if side == "salted":
                salted_samples.append((await timed_through(proxy, salted_read))[0])
            else:
                raw_samples.append((await timed_through(raw, raw_read))[0])
    bound = LIMIT_ROWS_L * limit + LIMIT_ROWS_N * n
    summary = summarize_rounds(salted_samples, delay)
    _progress(
        f"{what}: waves median {summary['waves']['median']:g} p99 {summary['waves']['p99']:g}, "
        f"{summary['two_or_more_rounds']:.0%} in 2+, latency/delay median "
        f"{summary['latency_over_delay']['median']:g}, rows fetched max "
        f"{summary['rows_fetched']['max']:g} (bound {bound})"
    )
    return {
        **summary,
        "rows_bound": bound,
        "over_bound": sum(1 for s in salted_samples if s.rows_fetched > bound),
        "raw": summarize_rounds(raw_samples, delay),
    }


async def _rounds_prefix_limit(
    cfg: Config,
    rng: random.Random,
    users: int,
    n: int,
    limit: int,
    salted: tuple[CountingTable, SaltedTableAsync],
    errors: list[str],
) -> dict[str, Any]:
    """``read_prefix(p, limit=L)`` through the delay proxy: a bounded read with a limit,
    which tries one request over every bucket first (asking 2L + 2N rows of a 100-row
    prefix), with the table's back-off after the tries that come back full. Each limit
    gets a fresh table object, so its back-off starts from nothing."""
    proxy = salted[0]
    table = SaltedTableAsync(proxy, salted[1].scheme)
    await table.read_rows(ReadRowsQuery(limit=1))  # layout check, untimed (tries nothing)
    samples: list[RoundSample] = []
    tried = 0
    seen: list[CallStats] = []
    for _ in range(cfg.rounds_queries):
        prefix = user_prefix(rng.randrange(users))

        async def read(stats: CallStats, p: bytes = prefix) -> int:
            seen.append(stats)
            return await count_rows(table.read_prefix(p, limit=limit, stats=stats))

        sample, got = await timed_through(proxy, read)
        samples.append(sample)
        one = seen[-1].one_request
        tried += one is not None and one.tried
        if got != min(limit, ROWS_PER_USER):
            errors.append(f"rounds N={n} prefix limit={limit}: {got} rows")
    out = summarize_rounds(samples, proxy.delay)
    out["rows_bound"] = 2 * limit + 2 * n
    out["one_request_tried"] = tried
    _progress(
        f"rounds N={n} prefix scan limit {limit}: waves median {out['waves']['median']:g} "
        f"p99 {out['waves']['p99']:g}, rows fetched max {out['rows_fetched']['max']:g} "
        f"(bound {out['rows_bound']}), one request tried in {tried} of {len(samples)}"
    )
    return out


async def _rounds_prefix(
    cfg: Config,
    rng: random.Random,
    users: int,
    n: int,
    raw: CountingTable,
    default: tuple[CountingTable, SaltedTableAsync],
    fan: tuple[CountingTable, SaltedTableAsync],
    confined: tuple[CountingTable, SaltedTableAsync],
    errors: list[str],
) -> dict[str, Any]:
    """100-row prefix scans through the delay proxy: the default (one request over every
    bucket), bucket by bucket (``one_request_rows=0``), confined to a bucket, raw."""
    samples: dict[str, list[RoundSample]] = {
        "one_request": [],
        "fan_out": [],
        "confined": [],
        "raw": [],
    }
    delay = raw.delay
    # A service reuses its table objects: measure them once their reads have measured the
    # rows (a table object's first read probes each bucket with one row first).
    for table in (default[1], fan[1], confined[1]):
        await count_rows(table.read_prefix(user_prefix(0)))
    for i in range(cfg.rounds_queries):
        prefix = user_prefix(rng.randrange(users))

        def salted(
            table: SaltedTableAsync, p: bytes = prefix
        ) -> Callable[[CallStats], Awaitable[int]]:
            async def read(stats: CallStats) -> int:
                return await count_rows(table.read_prefix(p, stats=stats))

            return read

        async def raw_read(stats: CallStats, p: bytes = prefix) -> int:
            query = ReadRowsQuery(row_ranges=RowRange(start_key=p, end_key=prefix_end(p)))
            return await count_rows(await raw.read_rows_stream(query))

        reads = {
            "one_request": (default[0], salted(default[1])),
            "fan_out": (fan[0], salted(fan[1])),
            "confined": (confined[0], salted(confined[1])),
            "raw": (raw, raw_read),
        }
        for side in rotated(list(reads), i):
            proxy, call = reads[side]
            sample, got = await timed_through(proxy, call)
            samples[side].append(sample)
            if got != ROWS_PER_USER:
                errors.append(f"rounds N={n} prefix scan ({side}): {got} rows")
    out = {side: summarize_rounds(s, delay) for side, s in samples.items()}
    _progress(
        f"rounds N={n} prefix scan: one request "
        f"{out['one_request']['latency_ms']['median']:g} ms, "
        f"per bucket {out['fan_out']['latency_ms']['median']:g} ms, "
        f"confined {out['confined']['latency_ms']['median']:g} ms, "
        f"raw {out['raw']['latency_ms']['median']:g} ms"
    )
    return out


# -- client CPU per request (issue 16) ----------------------------------------------------

#: A prefix that no loaded row has (user ids stay below MAX_ROWS / ROWS_PER_USER).
MISSING_PREFIX: Final = b"user99999#"
#: Calls of one variant in a row before the next variant's turn.
CPU_CHUNK: Final = 10


async def bench_cpu(
    target: Target, cfg: Config, made: TableSet
) -> tuple[dict[str, Any], list[str]]:
    """What small reads cost this process in CPU, raw and salted, per call and per request.

    Every variant runs ``cfg.cpu_ops`` sequential calls, in chunks of
    :data:`CPU_CHUNK` that take turns (rotated each time). CPU is
    ``time.process_time()``: every thread of this process, gRPC's included.
    """
    n = cfg.buckets
    rows = cfg.rows
    users = rows // ROWS_PER_USER
    scheme = SaltScheme(n)
    confined_scheme = SaltScheme(n, key_part=CONFINED_PART)
    errors: list[str] = []
    rng = random.Random(cfg.seed + 4)
    async with BigtableDataClientAsync(project=target.project) as client:
        ids = {
            "plain": (target.table("cpu-plain"), None),
            "salted": (target.table("cpu-salted"), scheme),
            "confined": (target.table("cpu-confined"), confined_scheme),
        }
        _progress(f"cpu: loading {rows:,} rows into 3 tables, then {cfg.cpu_ops} calls a variant")
        for table_id, table_scheme in ids.values():
            await made.load(client, table_id, table_scheme, rows, cfg)
        plain = client.get_table(target.instance, ids["plain"][0])
        physical = client.get_table(target.instance, ids["salted"][0])
        salted = SaltedTableAsync(physical, scheme)
        # The same table read bucket by bucket (never one request over every bucket).
        salted_each = SaltedTableAsync(physical, scheme, budget=ReadBudget(one_request_rows=0))
        confined = SaltedTableAsync(
            client.get_table(target.instance, ids["confined"][0]), confined_scheme
        )

        def prefix_query(p: bytes) -> ReadRowsQuery:
            return ReadRowsQuery(row_ranges=RowRange(start_key=p, end_key=prefix_end(p)))

        async def raw_one(p: bytes) -> int:
            return await count_rows(await plain.read_rows_stream(prefix_query(p)))

        bucket_prefixes = scheme.prefixes

        def bucket_ranges(p: bytes) -> list[RowRange]:
            end = prefix_end(p)
            return [RowRange(start_key=b + p, end_key=b + end) for b in bucket_prefixes]

        async def raw_each(p: bytes) -> int:
            async def one(r: RowRange) -> int:
                return await count_rows(
                    await physical.read_rows_stream(ReadRowsQuery(row_ranges=r))
                )

            return sum(await asyncio.gather(*(one(r) for r in bucket_ranges(p))))

        async def raw_multi(p: bytes) -> int:
            query = ReadRowsQuery(row_ranges=bucket_ranges(p))
            return await count_rows(await physical.read_rows_stream(query))

        async def fan_out(p: bytes) -> int:
            return await count_rows(salted_each.read_prefix(p))

        async def one_request(p: bytes) -> int:
            return await count_rows(salted.read_prefix(p))

        async def one_bucket(p: bytes) -> int:
            return await count_rows(confined.read_prefix(p))

        async def raw_limit(p: bytes) -> int:
            return len(
                await plain.read_rows(ReadRowsQuery(row_ranges=RowRange(start_key=p), limit=10))
            )

        async def salted_limit(p: bytes) -> int:
            return len(
                await salted.read_rows(ReadRowsQuery(row_ranges=RowRange(start_key=p), limit=10))
            )

        # (what it does, requests per call, rows per call or None: any prefix, the call)
        variants: dict[str, tuple[str, int, int, Callable[[bytes], Awaitable[int]], bool]] = {
            "raw_1_request_empty": ("raw, 1 request, 0 rows", 1, 0, raw_one, False),
            f"raw_{n}_requests_empty": (f"raw, {n} requests, 0 rows", n, 0, raw_each, False),
            "salted_fan_out_empty": (
                f"salted prefix scan, per bucket: {n} requests, 0 rows",
                n,
                0,
                fan_out,
                False,
            ),
            "raw_1_request": ("raw prefix scan, 1 request, 100 rows", 1, 100, raw_one, True),
            "raw_multi_range": (f"raw, 1 request of {n} ranges, 100 rows", 1, 100, raw_multi, True),
            f"raw_{n}_requests": (f"raw, {n} requests, 100 rows", n, 100, raw_each, True),
            "salted_fan_out": (
                f"salted prefix scan, per bucket: {n} requests, 100 rows",
                n,
                100,
                fan_out,
                True,
            ),
            "salted_prefix": (
                f"salted prefix scan (default: 1 request of {n} ranges), 100 rows",
                1,
                100,
                one_request,
                True,
            ),
            "salted_confined": (
                "salted prefix scan on one bucket, 100 rows",
                1,
                100,
                one_bucket,
                True,
            ),
            "raw_limit_10": ("raw limit=10 scan, 1 request", 1, 10, raw_limit, True),
            "salted_limit_10": (f"salted limit=10 scan, {n}+ requests", n, 10, salted_limit, True),
        }
        for _, _, _, call, _ in variants.values():  # warm every path, untimed
            await call(user_prefix(0))
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        wall: dict[str, list[float]] = {name: [] for name in variants}
        chunks = max(1, cfg.cpu_ops // CPU_CHUNK)
        for c in range(chunks):
            for name in rotated(list(variants), c):
                _, _, want, call, loaded = variants[name]
                prefixes = [
                    user_prefix(rng.randrange(users)) if loaded else MISSING_PREFIX
                    for _ in range(CPU_CHUNK)
                ]
                got = []
                start_cpu, start = time.process_time(), time.perf_counter()
                for p in prefixes:
                    got.append(await call(p))
                wall[name].append((time.perf_counter() - start) / CPU_CHUNK)
                cpu[name].append((time.process_time() - start_cpu) / CPU_CHUNK)
                if any(g != want for g in got):
                    errors.append(f"cpu {name}: {got[:3]}... rows, expected {want}")
        await plain.close()
        await physical.close()
    out: dict[str, Any] = {"buckets": n, "calls": chunks * CPU_CHUNK, "variants": {}}
    for name, (what, requests, want, _, _) in variants.items():
        out["variants"][name] = {
            "what": what,
            "requests": requests,
            "rows": want,
            "cpu_ms_per_call": round(statistics.median(cpu[name]) * 1000, 3),
            "latency_ms": round(statistics.median(wall[name]) * 1000, 3),
        }
    v = out["variants"]

    def per_extra_request(many: str, one: str) -> float:
        extra = float(v[many]["cpu_ms_per_call"]) - float(v[one]["cpu_ms_per_call"])
        return round(extra / (n - 1), 3)

    if n > 1:
        out["cpu_ms_per_request"] = {
            # N requests against 1 for the same (no) rows: what one request adds.
            "raw_empty": per_extra_request(f"raw_{n}_requests_empty", "raw_1_request_empty"),
            # N requests against 1 request of N ranges, the same 100 rows.
            "raw_vs_multi_range": per_extra_request(f"raw_{n}_requests", "raw_multi_range"),
        }
        out["salted_over_raw_ms"] = {
            # saltedtable's own work for the same requests and rows (engine, merge).
            "empty": round(
                v["salted_fan_out_empty"]["cpu_ms_per_call"]
                - v[f"raw_{n}_requests_empty"]["cpu_ms_per_call"],
                3,
            ),
            "prefix": round(
                v["salted_fan_out"]["cpu_ms_per_call"] - v[f"raw_{n}_requests"]["cpu_ms_per_call"],
                3,
            ),
        }
    for table_id, _ in ids.values():
        made.drop(table_id)
    out["in_memory"] = await cpu_in_memory(cfg, errors)
    return out, errors


async def cpu_in_memory(cfg: Config, errors: list[str]) -> dict[str, Any]:
    """The same small reads over :class:`MemoryTable`: saltedtable's own CPU, no gRPC.

    Microseconds of CPU per call (median of chunks), raw reads of the
    in-memory table against saltedtable over it.
    """
    n, rows = cfg.buckets, cfg.rows
    users = rows // ROWS_PER_USER
    scheme = SaltScheme(n)
    confined_scheme = SaltScheme(n, key_part=CONFINED_PART)
    plain, physical, physical_confined = MemoryTable(), MemoryTable(), MemoryTable()
    salted = SaltedTableAsync(physical, scheme, guard=False)
    salted_each = SaltedTableAsync(
        physical, scheme, guard=False, budget=ReadBudget(one_request_rows=0)
    )
    confined = SaltedTableAsync(physical_confined, confined_scheme, guard=False)
    entries = [entry_of(i) for i in range(rows)]
    await plain.bulk_mutate_rows(entries)
    await salted.bulk_mutate_rows(entries)
    await confined.bulk_mutate_rows(entries)
    del entries

    def prefix_query(p: bytes) -> ReadRowsQuery:
        return ReadRowsQuery(row_ranges=RowRange(start_key=p, end_key=prefix_end(p)))

    async def raw_one(p: bytes) -> int:
        return await count_rows(await plain.read_rows_stream(prefix_query(p)))

    async def raw_each(p: bytes) -> int:
        end = prefix_end(p)

        async def one(b: bytes) -> int:
            query = ReadRowsQuery(row_ranges=RowRange(start_key=b + p, end_key=b + end))
            return await count_rows(await physical.read_rows_stream(query))

        return sum(await asyncio.gather(*(one(b) for b in scheme.prefixes)))

    async def raw_limit(p: bytes) -> int:
        query = ReadRowsQuery(row_ranges=RowRange(start_key=p), limit=10)
        return await count_rows(await plain.read_rows_stream(query))

    async def salted_limit(p: bytes) -> int:
        query = ReadRowsQuery(row_ranges=RowRange(start_key=p), limit=10)
        return len(await salted.read_rows(query))

    async def fan_out(p: bytes) -> int:
        return await count_rows(salted_each.read_prefix(p))

    async def one_request(p: bytes) -> int:
        return await count_rows(salted.read_prefix(p))

    async def one_bucket(p: bytes) -> int:
        return await count_rows(confined.read_prefix(p))

    variants: dict[str, tuple[int, Callable[[bytes], Awaitable[int]]]] = {
        "raw_1_request": (ROWS_PER_USER, raw_one),
        "salted_confined": (ROWS_PER_USER, one_bucket),
        f"raw_{n}_requests": (ROWS_PER_USER, raw_each),
        "salted_fan_out": (ROWS_PER_USER, fan_out),
        "salted_prefix": (ROWS_PER_USER, one_request),
        "raw_limit_10": (10, raw_limit),
        "salted_limit_10": (10, salted_limit),
    }
    rng = random.Random(cfg.seed + 5)
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    chunks = max(1, 3 * cfg.cpu_ops // CPU_CHUNK)
    for c in range(chunks):
        for name in rotated(list(variants), c):
            want, call = variants[name]
            prefixes = [user_prefix(rng.randrange(users)) for _ in range(CPU_CHUNK)]
            start = time.process_time()
            got = [await call(p) for p in prefixes]
            cpu[name].append((time.process_time() - start) / CPU_CHUNK)
            if any(g != want for g in got):
                errors.append(f"cpu in memory {name}: {got[:3]}... rows, expected {want}")
    return {
        "calls": chunks * CPU_CHUNK,
        "cpu_us_per_call": {
            name: round(statistics.median(times) * 1e6, 1) for name, times in cpu.items()
        },
    }


# -- the main run ------------------------------------------------------------------------


async def bench_tables(target: Target, cfg: Config, made: TableSet) -> dict[str, Any]:
    """Load the tables, then run every alternating section; return the results."""
    scheme = SaltScheme(cfg.buckets)
    confined_scheme = SaltScheme(cfg.buckets, key_part=CONFINED_PART)
    confined_id = target.table("confined")
    async with BigtableDataClientAsync(project=target.project) as client:
        _progress(
            f"loading {cfg.rows:,} rows into {target.plain} (raw), {target.salted} (salted) "
            f"and {confined_id} (salted on the user part)"
        )
        load: dict[str, Any] = {}
        # Informational (no target): each side loads once, the raw table first.
        for side, table_id, side_scheme in (
            ("raw", target.plain, None),
            ("salted", target.salted, scheme),
            ("confined", confined_id, confined_scheme),
        ):
            load[side] = await made.load(client, table_id, side_scheme, cfg.rows, cfg)
        load["ratio"] = ratio(load["salted"].get("rows_per_s"), load["raw"].get("rows_per_s"))
        if "seconds" in load["raw"] and "seconds" in load["salted"]:
            _progress(
                f"  loaded: raw {load['raw']['seconds']:.1f} s, "
                f"salted {load['salted']['seconds']:.1f} s"
            )
        plain = client.get_table(target.instance, target.plain)
        physical = client.get_table(target.instance, target.salted)
        salted = SaltedTableAsync(physical, scheme)
        counter = CountingTable(physical)
        tables = Tables(
            plain,
            physical,
            salted,
            counter,
            SaltedTableAsync(counter, scheme),
            scheme,
            SaltedTableAsync(client.get_table(target.instance, confined_id), confined_scheme),
        )
        bench = Bench(cfg, tables)
        await bench.run()
        await plain.close()
        await physical.close()
    results = bench.results()
    results["load"] = load
    results["errors"] = bench.errors
    return results


#: The rounds section's limit scans by key set: (report key, label in target names).
ROUNDS_KEY_SETS: Final = (("limits", ""), ("limits_random", " random keys"))


def evaluate(results: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    """The targets of issues 6 and 16, each with what was measured and PASS/FAIL."""
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

    if not results["point"].get("skipped"):
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
        add(
            "prefix scan latency salted/raw",
            results["prefix_scan"]["latency_ratio"],
            SMALL_SCAN_LATENCY_TARGET,
            "<=",
        )
        for limit, r in results["limit_scan"].items():
            if limit == "10":
                add(
                    "limit 10 latency salted/raw",
                    r["latency_ratio"],
                    SMALL_SCAN_LATENCY_TARGET,
                    "<=",
                )
            for kind in ("ordered", "unordered"):
                add(
                    f"limit {limit} rows sent ({kind})",
                    r["rows_sent"][kind],
                    r["bound"],
                    "<=",
                    " rows",
                )
    rounds = results["rounds"]
    if not rounds.get("skipped"):
        for n, by_n in rounds["by_buckets"].items():
            for key, keys in ROUNDS_KEY_SETS:
                for limit, r in by_n.get(key, {}).items():
                    name = f"rounds{keys} N={n} limit={limit}"
                    add(f"{name} median", r["waves"]["median"], ROUNDS_MEDIAN_TARGET, "<=", "")
                    add(f"{name} p99", r["waves"]["p99"], ROUNDS_P99_TARGET, "<=", "")
                    add(f"{name} rows fetched", r["rows_fetched"]["max"], r["rows_bound"], "<=", "")
    sweep = results["sweep"]
    if not sweep.get("skipped"):
        for n, r in sweep["by_buckets"].items():
            small = r["scan"]["salted_ordered"]["first_row_fraction"]
            add(
                f"sweep N={n} first row, small scan",
                None if small is None else round(small * 100, 1),
                FIRST_ROW_TARGET * 100,
                "<=",
                "%",
            )
            large = r["memory"]["large"]
            fraction = None if large.get("skipped") else large["first_row_fraction"]
            add(
                f"sweep N={n} first row, large scan",
                None if fraction is None else round(fraction * 100, 1),
                FIRST_ROW_TARGET * 100,
                "<=",
                "%",
            )
            add(
                f"sweep N={n} memory large - small",
                r["memory"]["difference_mb"],
                SWEEP_MEMORY_TOLERANCE_MB,
                "<=",
                " MB",
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
    if not results["salt"].get("skipped"):
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
    """The human-readable tables printed at the end of a run."""
    cfg, meta = report["meta"]["config"], report["meta"]
    by_name = {t["name"]: t for t in report["targets"]}
    head = f"{'measurement':<46}{'raw':>14}{'salted':>16}{'salted/raw':>12}  {'target':<15}result"
    rule = "-" * len(head)
    lines = [
        f"saltedtable benchmark: sections {', '.join(cfg['sections'])}; {meta['where']}",
        f"load average {meta['loadavg_start'][0]:.2f} at start, "
        f"{meta['loadavg_end'][0]:.2f} at end, {meta['cpus']} CPUs; the run took "
        f"{meta['seconds']:.0f} s",
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

    if not report["point"].get("skipped"):
        lines += [
            "",
            f"core: {cfg['rows']:,} rows, {cfg['buckets']} buckets, {cfg['repeats']} repetitions "
            "(variants alternate); salted/raw: median of the paired ratios (point ops, bulk "
            "writes, prefix and limit scans: of every chunk pair; full scans: of every A/B "
            "round), so it can differ from the ratio of the medians shown",
            head,
            rule,
        ]
        _render_core(report, row, lines)
    m = report["memory"]
    if not m.get("skipped"):
        large, small = m["large"], m["small"]
        row(
            f"memory peak RSS (MB), {large['expected_rows']:,} vs {small['expected_rows']:,} rows",
            f"{small['peak_rss_mb']:.1f} small",
            f"{large['peak_rss_mb']:.1f} large",
            f"{m['difference_mb']:+.1f} MB",
            f"memory peak {cfg['memory_rows']:,} - {cfg['memory_small_rows']:,} rows",
        )
    if not report["salt"].get("skipped"):
        s = report["salt"]
        row(
            "salt_key crc32, 32-byte keys (keys/s)",
            f"bare {_num(s['bare_crc32_keys_per_s'])}",
            _num(s["keys_per_s"]),
            "",
            "salt_key crc32 32-byte keys/s",
        )
    if not report["cpu"].get("skipped"):
        lines += ["", *_render_cpu(report["cpu"])]
    if not report["rounds"].get("skipped"):
        lines += ["", *_render_rounds(report["rounds"], by_name)]
    if not report["sweep"].get("skipped"):
        lines += ["", *_render_sweep(report["sweep"], by_name)]
    lines.append(rule)
    failed = [t["name"] for t in report["targets"] if t["passed"] is False]
    passed = sum(1 for t in report["targets"] if t["passed"])
    lines.append(f"{passed} of {len(report['targets'])} targets pass")
    lines += [f"  FAIL: {name}" for name in failed]
    if report["errors"]:
        lines.append("WRONG ANSWERS (the numbers above are not valid):")
        lines += [f"  {e}" for e in report["errors"]]
    return "\n".join(lines)


def _ci(interval: list[float] | None) -> str:
    return "" if interval is None else f" ({interval[0]:.2f}-{interval[1]:.2f})"


def _render_core(report: dict[str, Any], row: Callable[..., None], lines: list[str]) -> None:
    cfg = report["meta"]["config"]
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
    if p.get("latency_ratio") is not None:
        row(
            f"    latency salted/raw{_ci(p['latency_ratio_ci95'])}",
            "",
            "",
            p["latency_ratio"],
            "prefix scan latency salted/raw",
        )
    if "confined" in p:
        row(
            "  confined to one bucket: p50 / p99 (ms)",
            _ms(p["raw"]),
            _ms(p["confined"]),
            p["confined_latency"]["latency_ratio"],
        )
    for limit, r in report["limit_scan"].items():
        row(
            f"scan limit={limit} (scans/s)",
            _num(r["raw"]["ops_per_s"]),
            _num(r["salted"]["ops_per_s"]),
            r["ratio"],
        )
        if limit == "10" and r.get("latency_ratio") is not None:
            row(
                f"    latency salted/raw{_ci(r['latency_ratio_ci95'])}",
                _ms(r["raw"]),
                _ms(r["salted"]),
                r["latency_ratio"],
                "limit 10 latency salted/raw",
            )
        for kind in ("ordered", "unordered"):
            row(
                f"    rows sent, {kind} (naive {r['naive']:,})",
                _num(r["raw_rows_sent"]),
                f"{r['rows_sent'][kind]:,} in {r['requests'][kind]} req",
                "",
                f"limit {limit} rows sent ({kind})",
            )


def _render_cpu(cpu: dict[str, Any]) -> list[str]:
    lines = [
        f"client CPU per call (this process, gRPC threads included), {cpu['buckets']} buckets, "
        f"{cpu['calls']} calls a variant, medians of chunks",
        f"  {'variant':<48}{'CPU ms':>9}{'latency ms':>12}",
    ]
    for v in cpu["variants"].values():
        lines.append(f"  {v['what']:<48}{v['cpu_ms_per_call']:>9.2f}{v['latency_ms']:>12.2f}")
    if "in_memory" in cpu:
        mem = cpu["in_memory"]["cpu_us_per_call"]
        lines.append(
            "  over an in-memory table (no gRPC), CPU us per call: "
            + ", ".join(f"{name} {us:,.0f}" for name, us in mem.items())
        )
    if "cpu_ms_per_request" in cpu:
        per = cpu["cpu_ms_per_request"]
        over = cpu["salted_over_raw_ms"]
        lines += [
            f"  one more request, raw: {per['raw_empty']:.3f} ms (no rows), "
            f"{per['raw_vs_multi_range']:.3f} ms (vs one request of {cpu['buckets']} ranges)",
            f"  saltedtable's own CPU over the raw requests: {over['empty']:.2f} ms (no rows), "
            f"{over['prefix']:.2f} ms (100 rows)",
        ]
    return lines


def _render_rounds(rounds: dict[str, Any], by_name: dict[str, Any]) -> list[str]:
    lines = [
        f"rounds: limit scans from random start keys, {rounds['delay_ms']:g} ms before every "
        f"read request, {rounds['queries']} queries each; rounds = request waves (median / "
        "p99), latency/delay next to them; rows fetched max vs 2L + 2N",
        f"  {'N':>4}{'limit':>7}{'rounds':>10}{'lat/delay':>12}{'engine':>9}{'requests':>10}"
        f"{'rows max':>10}{'bound':>7}{'raw lat/d':>11}  result",
    ]
    for key, keys in ROUNDS_KEY_SETS:
        lines.append(f"  {keys.strip() or 'sequential keys'}:")
        for n, by_n in rounds["by_buckets"].items():
            for limit, r in by_n.get(key, {}).items():
                name = f"rounds{keys} N={n} limit={limit}"
                verdicts = [
                    by_name.get(f"{name} {what}") for what in ("median", "p99", "rows fetched")
                ]
                result = "PASS" if all(v and v["passed"] for v in verdicts) else "FAIL"
                w, lat, eng = r["waves"], r["latency_over_delay"], r["engine_rounds"]
                lines.append(
                    f"  {n:>4}{limit:>7}{w['median']:>5g} /{w['p99']:>3g}"
                    f"{lat['median']:>6.2f} /{lat['p99']:>5.2f}"
                    f"{eng['median']:>4g} /{eng['p99']:>3g}"
                    f"{r['requests']['median']:>10g}{r['rows_fetched']['max']:>10g}"
                    f"{r['rows_bound']:>7}{r['raw']['latency_over_delay']['median']:>11.2f}"
                    f"  {r['two_or_more_rounds']:>4.0%} in 2+  {result}"
                )
    lines.append(
        "  read_prefix(p, limit=L) of 100-row prefixes (waves median / p99, rows fetched max "
        "vs 2L + 2N, scans that tried the one request)"
    )
    for n, by_n in rounds["by_buckets"].items():
        for limit, r in by_n.get("prefix_limit", {}).items():
            lines.append(
                f"  N={n:<6}L={limit:<6}{r['waves']['median']:g} / {r['waves']['p99']:g}"
                f"{r['rows_fetched']['max']:>9g} vs {r['rows_bound']:<6}"
                f"{r['one_request_tried']} of {r['queries']} tried"
            )
    lines.append(
        "  100-row prefix scans (median latency ms / waves): one request (default), "
        "per bucket, confined, raw"
    )
    for n, by_n in rounds["by_buckets"].items():
        p = by_n["prefix"]
        cells = "".join(
            f"{p[side]['latency_ms']['median']:>9.1f} / {p[side]['waves']['median']:g}"
            for side in ("one_request", "fan_out", "confined", "raw")
            if side in p
        )
        lines.append(f"  N={n:<6}{cells}")
    return lines


def _render_sweep(sweep: dict[str, Any], by_name: dict[str, Any]) -> list[str]:
    lines = [
        f"N sweep: ordered scans of {sweep['small_rows']:,} rows (A/B with the raw client's N "
        f"sub-scans, unordered) and of the whole {sweep['rows']:,}-row table (fresh processes)",
        f"  {'N':>5}{'rows/s':>9}{'raw/s':>9}{'ratio':>7}{'requests':>10}{'1st row':>9}"
        f"{'%':>6}{'large s':>9}{'requests':>10}{'1st row':>9}{'%':>6}"
        f"{'RSS small':>10}{'large':>8}{'diff':>7}",
    ]
    for n, r in sweep["by_buckets"].items():
        s, raw = r["scan"]["salted_ordered"], r["scan"]["raw_subscans"]
        m = r["memory"]
        large = m["large"]
        if large.get("skipped"):
            big = f"{'skipped: ' + large['skipped']}"
        else:
            big = (
                f"{large['seconds']:>9.1f}{large['requests']:>10,}"
                f"{large['first_row_seconds']:>9.2f}{large['first_row_fraction'] * 100:>6.1f}"
                f"{m['small']['peak_rss_mb']:>10.1f}{large['peak_rss_mb']:>8.1f}"
                f"{m['difference_mb']:>+7.1f}"
            )
        lines.append(
            f"  {n:>5}{_num(s['rows_per_s']):>9}{_num(raw['rows_per_s']):>9}"
            f"{_num(r['scan']['ratio'], 2):>7}{_num(s['requests']):>10}"
            f"{s['first_row_seconds']:>9.2f}{s['first_row_fraction'] * 100:>6.1f}{big}"
        )
    cpu = [
        f"N={n} {_num(r['scan']['salted_ordered']['client_cpu_us_per_row'], 1)} / "
        f"{_num(r['scan']['raw_subscans']['client_cpu_us_per_row'], 1)}"
        + (
            f" (emulator {_num(r['scan']['salted_ordered']['emulator_cpu_us_per_row'], 1)} / "
            f"{_num(r['scan']['raw_subscans']['emulator_cpu_us_per_row'], 1)})"
            if sweep["emulator_cpu_measured"]
            else ""
        )
        for n, r in sweep["by_buckets"].items()
    ]
    lines.append("  CPU us per row of the small scan, salted / raw: " + "; ".join(cpu))
    paged = [
        f"N={n} {_num(r['scan']['raw_subscans_paged']['rows_per_s'])} rows/s in "
        f"{_num(r['scan']['raw_subscans_paged']['requests'])} requests "
        f"(salted / paged {_num(r['scan']['ratio_vs_paged'], 2)})"
        for n, r in sweep["by_buckets"].items()
        if "raw_subscans_paged" in r["scan"]
    ]
    lines.append(
        "  raw sub-scans paged like saltedtable (the cost of paging alone): " + "; ".join(paged)
    )
    return lines


# -- command line ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="examples/tools/benchmark.py",
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

    def listed(flag: str, key: str, help_: str) -> None:
        full_, quick_ = (",".join(map(str, v)) for v in LIST_DEFAULTS[key])
        parser.add_argument(
            flag,
            type=_int_list,
            default=None,
            help=f"{help_}, comma-separated (default {full_}; --quick {quick_})",
        )

    listed("--sweep-buckets", "sweep_buckets", "the N sweep's bucket counts")
    sized("--sweep-rows", "sweep_rows", "rows per N sweep table (the large scan), 0 skips")
    parser.add_argument(
        "--sweep-small-rows",
        type=int,
        default=None,
        help="rows of the small sweep scan, a key range (default a tenth of --sweep-rows; "
        "--quick a half)",
    )
    sized("--sweep-rounds", "sweep_rounds", "A/B rounds of the timed sweep scans per N")
    sized("--sweep-runs", "sweep_runs", "fresh processes per sweep scan size and N")
    sized(
        "--sweep-max-requests",
        "sweep_max_requests",
        "skip a large sweep scan estimated to send more requests than this, 0: never skip",
    )
    parser.add_argument(
        "--sweep-budget-rows",
        type=int,
        default=0,
        help="ReadBudget(rows=...) of the sweep's salted reads (default: the default budget)",
    )
    listed("--rounds-buckets", "rounds_buckets", "bucket counts of the rounds section")
    listed("--rounds-limits", "rounds_limits", "limits of the rounds section")
    sized("--rounds-rows", "rounds_rows", "rows per rounds table")
    sized("--rounds-queries", "rounds_queries", "scans per limit, N and variant (rounds)")
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=50.0,
        help="delay injected before every read request in the rounds section (50)",
    )
    sized("--cpu-ops", "cpu_ops", "calls per variant in the client CPU section")
    parser.add_argument(
        "--only",
        type=_section_list,
        default=None,
        help=f"run only these sections, comma-separated: {', '.join(SECTIONS)}",
    )
    parser.add_argument(
        "--skip", type=_section_list, default=None, help="run every section but these"
    )
    parser.add_argument(
        "--keep-tables",
        action="store_true",
        help="emulator: keep the tables at the end; a later run with the same "
        "--table-prefix on the same emulator reuses what they hold instead of loading again",
    )
    parser.add_argument(
        "--emulator-pid",
        type=int,
        default=None,
        help="the emulator's process id, to measure its CPU (known when the benchmark starts it)",
    )
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
    parser.add_argument("--budget-rows", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def _int_list(text: str) -> tuple[int, ...]:
    """``"1,16,64"`` -> ``(1, 16, 64)``: positive, distinct, sorted."""
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def _section_list(text: str) -> frozenset[str]:
    """``"core,sweep"`` -> the named sections, each one of :data:`SECTIONS`."""
    names = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(names - set(SECTIONS) - set(OPTIONAL_SECTIONS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(SECTIONS + OPTIONAL_SECTIONS)}"
        )
    return names


def _config(args: argparse.Namespace) -> Config:
    pick = 1 if args.quick else 0
    sizes: dict[str, Any] = {
        key: (getattr(args, key) if getattr(args, key) is not None else both[pick])
        for key, both in DEFAULTS.items()
    }
    lists: dict[str, Any] = {
        key: (getattr(args, key) if getattr(args, key) is not None else both[pick])
        for key, both in LIST_DEFAULTS.items()
    }
    small = args.memory_small_rows
    if small is None:
        small = sizes["memory_rows"] // (2 if args.quick else 10)
    sweep_small = args.sweep_small_rows
    if sweep_small is None:
        sweep_small = sizes["sweep_rows"] // (2 if args.quick else 10)
    sections = set(args.only if args.only is not None else SECTIONS)
    sections -= args.skip or set()
    if not sizes["memory_rows"]:
        sections.discard("memory")
    if not sizes["sweep_rows"]:
        sections.discard("sweep")
    cfg = Config(
        memory_small_rows=max(1, small),
        sweep_small_rows=max(1, sweep_small),
        buckets=args.buckets,
        concurrency=args.concurrency,
        bulk_batch=args.bulk_batch,
        load_batch=args.load_batch,
        load_concurrency=args.load_concurrency,
        seed=args.seed,
        quick=args.quick,
        delay_ms=args.delay_ms,
        sweep_budget_rows=args.sweep_budget_rows,
        sections=frozenset(sections),
        keep_tables=args.keep_tables,
        **sizes,
        **lists,
    )
    if not 1 <= cfg.rows <= MAX_ROWS or cfg.memory_rows > MAX_ROWS or cfg.memory_rows < 0:
        raise ValueError(f"--rows and --memory-rows must be in 1..{MAX_ROWS:,}")
    if cfg.memory_rows and cfg.memory_small_rows > cfg.memory_rows:
        raise ValueError("--memory-small-rows must not exceed --memory-rows")
    if not 0 <= cfg.sweep_rows <= MAX_ROWS or not 1 <= cfg.rounds_rows <= MAX_ROWS:
        raise ValueError(f"--sweep-rows and --rounds-rows must be in 1..{MAX_ROWS:,}")
    if cfg.sweep_rows and cfg.sweep_small_rows > cfg.sweep_rows:
        raise ValueError("--sweep-small-rows must not exceed --sweep-rows")
    if max(cfg.rounds_limits) > cfg.rounds_rows // 2:
        raise ValueError("--rounds-limits must be at most half of --rounds-rows")
    if not cfg.delay_ms > 0:
        raise ValueError("--delay-ms must be > 0")
    if cfg.sweep_budget_rows < 0:
        raise ValueError("--sweep-budget-rows must be >= 0 (0: the default budget)")
    counts = (
        cfg.repeats,
        cfg.scan_rounds,
        cfg.point_ops,
        cfg.prefix_ops,
        cfg.limit_ops,
        cfg.memory_runs,
        cfg.sweep_rounds,
        cfg.sweep_runs,
        cfg.rounds_queries,
        cfg.cpu_ops,
    )
    if min(*counts, cfg.bulk_rows, cfg.sweep_max_requests + 1) < 1:
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
        prefix=prefix,
    )


def tables_needed(cfg: Config, target: Target) -> list[str]:
    """The tables a run of ``cfg`` writes and reads (what an instance must have)."""
    ids: list[str] = []
    if "core" in cfg.sections:
        ids += [target.plain, target.salted, target.table("confined")]
    if "cpu" in cfg.sections:
        ids += [target.table(f"cpu-{name}") for name in ("plain", "salted", "confined")]
    if "rounds" in cfg.sections:
        ids += [target.table(f"rounds-plain-{kind}") for kind in KEYS]
        for n in cfg.rounds_buckets:
            ids += [target.table(f"rounds{n}-{name}") for name in (*KEYS, "confined")]
    if "sweep" in cfg.sections:
        ids += [target.table(f"sweep{n}") for n in cfg.sweep_buckets]
    if "memory" in cfg.sections:
        ids.append(target.memory)
    return ids


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


#: The report's sections, in order; the core sections come from one run of :class:`Bench`.
REPORT_ORDER: Final = (
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
    "cpu",
    "rounds",
    "sweep",
    "memory",
)
CORE_KEYS: Final = ("salt", "load", "point", "bulk_write", "full_scan", "prefix_scan", "limit_scan")


def _run(
    args: argparse.Namespace,
    cfg: Config,
    target: Target,
    made: TableSet,
    emulator_pid: int | None = None,
) -> dict[str, Any]:
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

    results: dict[str, Any] = {"errors": []}
    if "core" in cfg.sections:
        _progress(f"salt: {cfg.salt_keys:,} keys x {max(3, cfg.repeats)}")
        salt = bench_salt(cfg)
        lap("salt")
        results.update(asyncio.run(bench_tables(target, cfg, made)))
        lap("tables")
        results["salt"] = salt
    else:
        results.update({key: {"skipped": True} for key in CORE_KEYS})

    def cpu() -> tuple[dict[str, Any], list[str]]:
        return asyncio.run(bench_cpu(target, cfg, made))

    def rounds() -> tuple[dict[str, Any], list[str]]:
        return asyncio.run(bench_rounds(target, cfg, made))

    def sweep() -> tuple[dict[str, Any], list[str]]:
        return bench_sweep(target, cfg, made, emulator_pid)

    for name, section in (("cpu", cpu), ("rounds", rounds), ("sweep", sweep)):
        if name in cfg.sections:
            results[name], errors = section()
            results["errors"] += errors
            lap(name)
        else:
            results[name] = {"skipped": True}
    if "memory" in cfg.sections:
        results["memory"] = bench_memory(target, cfg, made)
        lap("memory")
    else:
        results["memory"] = {"skipped": True}
    if "engine" in cfg.sections:
        results["engine"] = bench_engine(cfg)
        lap("engine")
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
        "table_prefix": target.prefix,
        "emulator_pid_known": emulator_pid is not None,
        "command": " ".join(["examples/tools/benchmark.py", *sys.argv[1:]]),
        "config": {
            **{k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
            "sections": [name for name in SECTIONS if name in cfg.sections],
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
    report = {key: results[key] for key in REPORT_ORDER}
    if "engine" in results:
        report["engine"] = results["engine"]
    return report


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
    made = TableSet(target, cfg.keep_tables)
    emulator_pid = args.emulator_pid
    try:
        if target.mode == "emulator-started":
            _progress("starting the Bigtable emulator ...")
            emulator = testing.start_emulator()
            os.environ.update(testing.emulator_env(emulator))
            target = dataclasses.replace(target, address=emulator.address)
            made = TableSet(target, cfg.keep_tables)
            emulator_pid = emulator.pid
        report = _run(args, cfg, target, made, emulator_pid)
    except api_exceptions.NotFound as error:
        listed = "\n".join(
            f"  cbt createtable {table_id} families={FAMILY}"
            for table_id in tables_needed(cfg, target)
        )
        print(
            f"error: {error}\nOn a real instance create the tables first:\n{listed}",
            file=sys.stderr,
        )
        return 2
    finally:
        made.drop_all()
        if made.keep and made.made:
            _progress(f"kept tables {', '.join(made.made)} (prefix {target.prefix})")
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
