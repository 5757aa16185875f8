"""One logical read on an async table: its sources, the merge, its statistics.

:class:`ReadCall` ties a plan, its bucket sources (:mod:`._reader`), the
budget and the call's statistics together and hands the caller a list or a
stream (see :mod:`._reader` for how a read that ends early stops its requests).
"""

from __future__ import annotations

import operator
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any, final

from google.cloud.bigtable.data.row import Row

from ._cancel import stop_reads
from ._merge import Merge
from ._plan import ReadPlan
from ._reader import BucketSource, OneRequestSource, _one_budget, _Read
from ._slots import AsyncSlots
from ._stats import CallStats, StatsHook
from ._strategy import OneRequestOdds, ReadBudget
from ._timeouts import GuardTime, Timeouts

__all__ = ["ReadCall"]


@final
class ReadCall(_Read[Awaitable[bool]]):
    """One logical read: its sources, the merge it runs when iterated, and its statistics.

    Args:
        read_rows_stream: The physical table's ``read_rows_stream``.
        plan: What to read.
        operation: The call's name in statistics (``"read_rows"``, ...).
        timeouts: The resolved time budget.
        limiter: The table's concurrency slots, shared by its reads.
        ordered: Merge in logical key order, or hand rows over as they arrive.
        budget: What the read may hold at once.
        stats: Filled in as the read runs (created when a hook needs one).
        hook: Receives the statistics when the read ends.
        guard: Awaited before the first request (the table's layout guard),
            with the read's deadline and attempt timeout.
        stray: Why a legacy-side key must be left out, or None to keep it
            (cutoff layouts); counted, and reported once per read.
        salted_stray: The same for bucket rows (cutoff layouts: a row whose
            key time puts it on the legacy side, such as a backfilled copy).
        odds: The table's :class:`~._strategy.OneRequestOdds` for reads like
            this one (None: never try one request over every bucket first).
    """

    __slots__ = ("_first", "_merge", "_sources")

    def __init__(
        self,
        read_rows_stream: Callable[..., Any],
        plan: ReadPlan,
        *,
        operation: str,
        timeouts: Timeouts,
        limiter: AsyncSlots,
        ordered: bool,
        budget: ReadBudget,
        stats: CallStats | None,
        hook: StatsHook | None,
        guard: Callable[[GuardTime], Awaitable[bool]] | None = None,
        stray: Callable[[bytes], str | None] | None = None,
        salted_stray: Callable[[bytes], str | None] | None = None,
        odds: OneRequestOdds | None = None,
    ) -> None:
        super().__init__(
            plan,
            operation=operation,
            timeouts=timeouts,
            ordered=ordered,
            budget=budget,
            stats=stats,
            hook=hook,
            guard=guard,
            stray=stray,
            salted_stray=salted_stray,
            odds=odds,
        )
        self._first: tuple[OneRequestSource, Merge[Row]] | None = None
        if self._one is not None:
            first = OneRequestSource(
                read_rows_stream,
                self._one,
                plan.subqueries,
                deadline=self._deadline,
                timeouts=timeouts,
                limiter=limiter,
                stats=[self._bucket_stats(sub) for sub in plan.subqueries],
                cap=budget.bytes,
            )
            merge = Merge(
                [first], ordered=False, budget=_one_budget(self._one), stop_requests=first.stop
            )
            self._first = (first, merge)
        sources = [
            BucketSource(
                read_rows_stream,
                sub,
                deadline=self._deadline,
                timeouts=timeouts,
                limiter=limiter,
                bstats=self._bucket_stats(sub),
                stray=self._stray_for(sub),
            )
            for sub in plan.subqueries
        ]
        self._sources = sources
        self._merge = Merge(
            sources,
            ordered=ordered,
            limit=plan.limit,
            budget=budget,
            stop_requests=self.stop_requests,
            slots=int(limiter.total_tokens),
        )

    async def stop_requests(self) -> None:
        """End the requests running now without cancelling their readers; start no new ones.

        Each reader stops at its next row and ends its stream between rows,
        where no receive is in flight (nothing leaks); a reader that no row
        reaches within :data:`~._cancel.STOP_GRACE` has its RPC cancelled under
        it and leaves too. Only then does the merge cancel the producers. Returns
        once every reader has left, or about a second later at most.
        """
        streams = []
        for source in self._sources:
            source.stopped = True
            if source.stream is not None:
                streams.append(source.stream)
        if streams:
            await stop_reads(streams)

    async def _try_one(self) -> list[Row] | None:
        """Run the one request over every bucket: the read's rows, or None to go on."""
        if self._first is None:
            return None
        source, merge = self._first
        rows: list[Row] = []
        try:
            async with merge:
                async for batch in merge:
                    rows += batch
        except BaseException as exc:
            self._one_failed(exc, source)
            return None
        return self._one_done(rows, source)

    async def collect(self) -> list[Row]:
        """Every row of the read, in a list."""
        rows: list[Row] | None = None
        error: BaseException | None = None
        merge = self._merge
        try:
            if self._guard is not None:
                await self._guard(self._limit)
            rows = await self._try_one()
            if rows is None:
                rows = []
                async with merge:
                    async for batch in merge:
                        rows += batch
        except BaseException as exc:
            error = exc
            raise
        finally:
            small = self._one_outcome is not None and self._one_outcome.fitted
            emitted = len(rows or ()) if small else merge.emitted
            self._finish(merge, emitted, error)
        return rows

    async def stream(self) -> AsyncGenerator[Row, None]:
        """Flatten the batches; closing this generator cancels every sub-scan."""
        error: BaseException | None = None
        merge = self._merge
        rows: Iterator[Row] = iter(())
        emitted = 0  # rows handed over from the one request
        try:
            if self._guard is not None:
                await self._guard(self._limit)
            small = await self._try_one()
            if small is not None:
                emitted = len(small)
                rows = iter(small)
                for row in rows:
                    yield row
                return
            async for batch in merge:
                rows = iter(batch)
                for row in rows:
                    yield row
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                if self._first is not None:
                    await self._first[1].aclose()
                await merge.aclose()
            except BaseException as exc:
                # Cancelled while it cleans up (asyncio's cancellation reaches
                # through shields): still reported, once.
                if error is None:
                    error = exc
                raise
            finally:
                # Left early: what the caller had not taken of the last batch was not read.
                emitted += merge.emitted
                self._finish(merge, emitted - operator.length_hint(rows), error)
