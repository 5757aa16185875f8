"""One read's state, shared by the async read call and the sync one generated from it.

:class:`ReadContextBase` is what every read of one table shares; :class:`Read`
what one logical read keeps (deadline, stray rows, statistics, guard), and
:class:`OneRequestStep` a small read's first step, the one request over every
bucket. :func:`finish_read` ends a read: it warns about stray rows
(:class:`StrayRows`) and reports its statistics. The read calls
(:mod:`.._async.read_call` and its generated twin) build on these, with the
sources of their flavour (:mod:`.sources_asyncio`, :mod:`.sources_threads`).
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, final

from google.api_core.exceptions import DeadlineExceeded
from google.cloud.bigtable.data.row import Row

from .._engine.budget import DEFAULT_ROW_BYTES, ReadBudget
from .._engine.merge import MergeCore
from .._scheme.layout import Layout
from .plan import OneRequest, ReadPlan, SubQuery, one_request
from .settings import OneRequestOdds, ReadSettings, RowSizes
from .sources import OneRequestSourceBase
from .stats import (
    BucketStats,
    CallStats,
    OneRequestOutcome,
    OneRequestResult,
    StatsHook,
    report,
)
from .timeouts import GuardTime, Timeouts

__all__ = [
    "OneRequestStep",
    "Read",
    "ReadContextBase",
    "StrayRows",
    "finish_read",
    "one_budget",
]

_log = logging.getLogger("saltedtable.reader")

#: What the table's guard check returns: an awaitable (async) or a bool (sync).
GuardResult = TypeVar("GuardResult")
#: The table type of a read context (async or sync), and its slots.
T = TypeVar("T")
L = TypeVar("L")


@dataclass(frozen=True, slots=True)
class ReadContextBase(Generic[T, L, GuardResult]):
    """What every read of one table shares, built once per table object (either flavour).

    The async and sync read calls name it ``ReadContextAsync`` and ``ReadContext``.

    Attributes:
        table: The physical table; its ``read_rows_stream`` is looked up at
            each read, so a table wrapped after the salted one was made is used.
        layout: Where keys live, and which rows reads hide (``Layout.hiding``).
        limiter: The table's concurrency slots, shared by its reads.
        budget: What one read may hold at once (the table's).
        guard: Called before a read's first request (the table's layout
            guard), with the read's deadline and attempt timeout; None: none.
        odds: Whether bounded reads try one request over every bucket first:
            (reads without a limit, reads with one).
        hook: Receives the statistics of every read when it ends.
        sizes: What the table's recent reads measured of its rows, by
            filter: a read's first wave is sized from it (see
            :class:`~.settings.RowSizes`).
        client_internals: False: every request is read through the table's
            own ``read_rows_stream`` (the table's ``client_internals`` switch).
    """

    table: T
    layout: Layout
    limiter: L
    budget: ReadBudget
    guard: Callable[[GuardTime], GuardResult] | None
    odds: tuple[OneRequestOdds, OneRequestOdds]
    hook: StatsHook | None = None
    sizes: RowSizes = field(default_factory=RowSizes)
    client_internals: bool = True


@final
class OneRequestStep:
    """A small read's first step, in one object: the one request over every bucket.

    It decides whether the read tries it (the settings' row limit, then the
    table's odds), what came of it (:attr:`outcome`, for the statistics) and
    whether its rows answer the read; the read call runs its source and merge
    (:class:`OneRequestSource` or :class:`SyncOneRequestSource`) between.
    """

    __slots__ = ("_limit", "_odds", "_ordered", "outcome", "request")

    def __init__(
        self, request: OneRequest, odds: OneRequestOdds | None, *, ordered: bool, limit: int | None
    ) -> None:
        self.request = request
        self._odds = odds
        self._ordered = ordered
        self._limit = limit
        #: How it went (None: not run yet).
        self.outcome: OneRequestOutcome | None = None

    @classmethod
    def choose(
        cls,
        plan: ReadPlan,
        settings: ReadSettings,
        odds: OneRequestOdds | None,
        stats: CallStats | None,
        *,
        internals: bool = True,
    ) -> OneRequestStep | None:
        """The step a read takes first, or None where it goes bucket by bucket at once.

        ``internals``: the table's ``client_internals`` switch (False: the
        request is built with the client's public constructors only).
        """
        rows = settings.one_request_rows  # 0 where the read does not try it
        one = one_request(plan, rows, internals=internals) if rows else None
        if one is None or odds is None:
            return None
        ordered, limit = settings.ordered, plan.limit
        if not ordered and rows == limit:
            # Any `limit` rows answer an unordered read: this one request does
            # unless it fails or stops at the budget's bytes (rows too wide), so
            # it neither waits for nor moves the odds.
            return cls(one, None, ordered=ordered, limit=limit)
        if not odds.try_now():
            if stats is not None:
                stats.one_request = OneRequestOutcome("skipped", rows)
            return None
        return cls(one, odds, ordered=ordered, limit=limit)

    @property
    def fitted(self) -> bool:
        """Whether its rows answered the read."""
        return self.outcome is not None and self.outcome.fitted

    def _outcome_of(
        self,
        source: OneRequestSourceBase[Any, Any],
        *,
        fitted: bool,
        error: str = "",
        went_on: bool = False,
    ) -> OneRequestOutcome:
        result: OneRequestResult = "full"
        if fitted:
            result = "answered"
        elif error:
            result = "failed"
        elif source.capped:
            result = "over_budget"
        return OneRequestOutcome(
            result, self.request.rows, source.received, source.got, error, went_on
        )

    def failed(self, exc: BaseException, source: OneRequestSourceBase[Any, Any]) -> None:
        """It failed: go on bucket by bucket, unless time is up or the caller left (raises)."""
        ends = not isinstance(exc, Exception) or isinstance(exc, DeadlineExceeded)
        self.outcome = self._outcome_of(
            source,
            fitted=False,
            error="cancelled" if isinstance(exc, asyncio.CancelledError) else type(exc).__name__,
            went_on=not ends,
        )
        if ends:
            raise source.annotate(exc) if isinstance(exc, Exception) else exc
        # Whatever went wrong (a transient error past its retries, a request
        # the service would not take), the buckets' own requests answer the
        # read as if it had not been tried, and report an error by bucket.
        _log.debug("the one request over every bucket failed; reading bucket by bucket: %r", exc)
        if self._odds is not None:
            self._odds.record(False)

    def done(self, rows: list[Row], source: OneRequestSourceBase[Any, Any]) -> list[Row] | None:
        """The rows of the read if it answered it, else None (go on bucket by bucket)."""
        received, limit = source.received, self._limit
        # Fewer rows than asked: every row of the read. An unordered read
        # with a limit takes any `limit` rows.
        fitted = (received < self.request.rows and not source.capped) or (
            not self._ordered and limit is not None and received >= limit
        )
        if self._odds is not None:
            self._odds.record(fitted)
        self.outcome = self._outcome_of(source, fitted=fitted, went_on=not fitted)
        if not fitted:
            return None
        if self._ordered:  # bucket after bucket: one logical key lives in one bucket
            rows.sort(key=operator.attrgetter("row_key"))
        if limit is not None:
            del rows[limit:]
        return rows


#: The read context of a read call's flavour.
C = TypeVar("C", bound="ReadContextBase[Any, Any, Any]")


class Read(Generic[C, GuardResult]):
    """What a logical read keeps, async or sync: deadline, stray counters, statistics, guard.

    The read calls (:class:`~.._async.read_call.ReadCall` and its generated
    twin) build their sources in :meth:`_prepare`.

    Args:
        ctx: What the table's reads share: the physical table, its layout
            (which rows reads hide), slots, guard, one-request odds and
            statistics hook.
        plan: What to read.
        settings: How to read it (ordered, budget, the one request or not),
            decided once per read (:meth:`ReadPlan.settings`).
        timeouts: The resolved time budget.
        operation: The call's name in statistics (``"read_rows"``, ...).
        stats: Filled in as the read runs (created when a hook needs one).
    """

    __slots__ = (
        "_deadline",
        "_filter",
        "_guard",
        "_hook",
        "_in_buckets",
        "_layout",
        "_limit",
        "_one",
        "_sizes",
        "_stats",
        "_stray",
    )

    def __init__(
        self,
        ctx: C,
        plan: ReadPlan,
        settings: ReadSettings,
        timeouts: Timeouts,
        *,
        operation: str,
        stats: CallStats | None,
    ) -> None:
        hook = ctx.hook
        if stats is None and hook is not None:
            stats = CallStats()
        self._deadline = time.monotonic() + timeouts.operation
        self._limit: GuardTime = (self._deadline, timeouts.attempt)
        # Cutoff layouts hide rows of the other side, checked one by one (their
        # settings never try the one request: see ReadPlan.settings).
        layout = ctx.layout
        stray, salted_stray = layout.hiding(None), layout.hiding(0)
        self._stray = None if stray is None else StrayRows(stray)
        # Bucket rows on the legacy side are a migration's copies: left out, not reported.
        self._in_buckets = None if salted_stray is None else StrayRows(salted_stray)
        # With epochs each prefix has its own rule (the epochs sharing it, and the bucket).
        self._layout = None if layout.epochs is None else layout
        if stats is not None:
            stats.operation = operation
            stats.settings = settings
            stats.one_request = None
        self._stats = stats
        self._hook = hook
        self._guard: Callable[[GuardTime], GuardResult] | None = ctx.guard
        self._sizes = ctx.sizes
        #: Reads with the same filter share measures (see RowSizes), keyed by its repr.
        self._filter = plan.row_filter
        #: The one request to try first (small reads), and how it went (see finish_read).
        self._one = OneRequestStep.choose(
            plan, settings, ctx.odds[plan.limit is not None], stats, internals=ctx.client_internals
        )
        self._prepare(ctx, plan, settings, timeouts)

    def _prepare(self, ctx: C, plan: ReadPlan, settings: ReadSettings, timeouts: Timeouts) -> None:
        """Build what the read runs (its flavour's sources): the constructor's last step."""
        raise NotImplementedError

    def _bucket_stats(self, sub: SubQuery) -> BucketStats | None:
        return None if self._stats is None else self._stats.bucket(sub.bucket)

    def _stray_for(self, sub: SubQuery) -> StrayRows | None:
        if sub.bucket is None:
            return self._stray
        if self._layout is None:
            return self._in_buckets
        rule = self._layout.hiding_under(sub.bucket, sub.prefix)
        return None if rule is None else StrayRows(rule)

    def _learn(self, largest: int | None) -> None:
        """Remember the largest row a request of this read measured, for the table's next reads."""
        if largest:
            self._sizes.learn(repr(self._filter), largest)

    def _size_hint(self) -> int | None:
        """The largest row recent reads with this read's filter measured (None: none)."""
        return self._sizes.hint(repr(self._filter))

    def _finish(
        self, merge: MergeCore[Row] | None, emitted: int, error: BaseException | None
    ) -> None:
        if merge is not None:
            self._learn(merge.measured_largest)
        outcome = None if self._one is None else self._one.outcome
        finish_read(merge, self._stats, self._hook, self._stray, emitted, error, outcome)


def one_budget(one: OneRequest) -> ReadBudget:
    """The budget of the merge that runs a small read's one request: all it may return."""
    return ReadBudget(rows=one.rows, bytes=1 << 62, one_request_rows=0)


def finish_read(
    merge: MergeCore[Row] | None,
    stats: CallStats | None,
    hook: StatsHook | None,
    stray: StrayRows | None,
    emitted: int,
    error: BaseException | None,
    one: OneRequestOutcome | None = None,
) -> None:
    """End a read: warn once about stray rows, fill in and report its statistics.

    ``one``: how the one request over every bucket went, if the read tried it.
    ``merge``: the buckets' own requests (None: the read made none).
    """
    if stray is not None and stray.count:
        key, why = stray.first
        _log.warning(
            "left out %d legacy row(s) that contradict the layout, e.g. %r: %s "
            "(check_layout() lists them)",
            stray.count,
            key,
            why,
        )
    if stats is None:
        return
    stats.stray_rows = 0 if stray is None else stray.count
    stats.rows = emitted
    if merge is None:
        stats.requests = stats.rounds = stats.peak_buffered_rows = stats.peak_buffered_bytes = 0
    else:
        stats.requests = merge.requests
        stats.rounds = merge.rounds
        stats.peak_buffered_rows = merge.peak_outstanding
        stats.peak_buffered_bytes = merge.peak_bytes
    if one is not None:
        stats.one_request = one
        stats.requests += 1
        stats.peak_buffered_rows = max(stats.peak_buffered_rows, one.asked)
        stats.peak_buffered_bytes = max(stats.peak_buffered_bytes, one.bytes)
        if stats.settings is not None and stats.settings.limit is not None:
            stats.rounds += 1  # the one request was the read's first round
    stats.row_bytes = float(DEFAULT_ROW_BYTES) if merge is None else merge.row_bytes
    if isinstance(error, GeneratorExit | asyncio.CancelledError):
        # The caller left (break, aclose, cancellation): not a failure.
        stats.ended_early = True
        error = None
    report(stats, error, hook)


@final
class StrayRows:
    """Tells the legacy side which rows to leave out, counting them for one report per read."""

    __slots__ = ("count", "first", "reason")

    def __init__(self, reason: Callable[[bytes], str | None]) -> None:
        self.reason = reason
        self.count = 0
        self.first: tuple[bytes, str] = (b"", "")

    def __call__(self, key: bytes) -> bool:
        why = self.reason(key)
        if why is None:
            return False
        if not self.count:
            self.first = (key, why)
        self.count += 1
        return True
