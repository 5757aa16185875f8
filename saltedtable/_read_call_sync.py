"""One logical read on a sync table: its sources, the thread merge, its statistics."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from typing import final

from google.cloud.bigtable.data.row import Row

from ._cancel import stop_sync_requests
from ._merge import ThreadMerge
from ._plan import ReadPlan
from ._reader import SyncBucketSource, SyncOneRequestSource, _one_budget, _Read
from ._slots import Slots
from ._stats import CallStats, StatsHook
from ._strategy import OneRequestOdds, ReadBudget
from ._timeouts import GuardTime, Timeouts

__all__ = ["SyncReadCall"]


@final
class SyncReadCall(_Read[bool]):
    """One logical read on a sync table: its sources, the thread merge, its statistics.

    Args: as for :class:`ReadCall`, with the table's :class:`~._slots.Slots`
    in place of its limiter.
    """

    __slots__ = ("_first", "_merge")

    def __init__(
        self,
        read_rows_stream: Callable[..., Iterable[Row]],
        plan: ReadPlan,
        *,
        operation: str,
        timeouts: Timeouts,
        slots: Slots,
        ordered: bool,
        budget: ReadBudget,
        stats: CallStats | None,
        hook: StatsHook | None,
        guard: Callable[[GuardTime], bool] | None = None,
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
        self._first: tuple[SyncOneRequestSource, ThreadMerge[Row]] | None = None
        if self._one is not None:
            first = SyncOneRequestSource(
                read_rows_stream,
                self._one,
                plan.subqueries,
                deadline=self._deadline,
                timeouts=timeouts,
                slots=slots,
                stats=[self._bucket_stats(sub) for sub in plan.subqueries],
                cap=budget.bytes,
            )
            one_merge = ThreadMerge(
                [first],
                threads=1,
                ordered=False,
                budget=_one_budget(self._one),
                stop_requests=lambda: stop_sync_requests([first.request]),
            )
            self._first = (first, one_merge)
        sources = [
            SyncBucketSource(
                read_rows_stream,
                sub,
                deadline=self._deadline,
                timeouts=timeouts,
                slots=slots,
                bstats=self._bucket_stats(sub),
                stray=self._stray_for(sub),
            )
            for sub in plan.subqueries
        ]
        requests = [source.request for source in sources]
        self._merge = ThreadMerge(
            sources,
            threads=slots.total,
            ordered=ordered,
            limit=plan.limit,
            budget=budget,
            stop_requests=lambda: stop_sync_requests(requests),
        )

    def _try_one(self) -> list[Row] | None:
        """Run the one request over every bucket: the read's rows, or None to go on."""
        if self._first is None:
            return None
        source, merge = self._first
        rows: list[Row] = []
        try:
            with merge:
                for batch in merge:
                    rows += batch
        except BaseException as exc:
            self._one_failed(exc, source)
            return None
        return self._one_done(rows, source)

    def collect(self) -> list[Row]:
        """Every row of the read, in a list."""
        rows: list[Row] | None = None
        error: BaseException | None = None
        merge = self._merge
        try:
            if self._guard is not None:
                self._guard(self._limit)
            rows = self._try_one()
            if rows is None:
                rows = []
                with merge:
                    for batch in merge:
                        rows += batch
        except BaseException as exc:
            error = exc
            raise
        finally:
            merge.close()
            small = self._one_outcome is not None and self._one_outcome.fitted
            emitted = len(rows or ()) if small else merge.emitted
            self._finish(merge, emitted, error)
        return rows

    def stream(self) -> Iterator[Row]:
        """Flatten the batches; closing this iterator stops every sub-scan."""
        error: BaseException | None = None
        merge = self._merge
        rows: Iterator[Row] = iter(())
        emitted = 0  # rows handed over from the one request
        try:
            if self._guard is not None:
                self._guard(self._limit)
            small = self._try_one()
            if small is not None:
                emitted = len(small)
                rows = iter(small)
                yield from rows
                return
            for batch in merge:
                rows = iter(batch)
                yield from rows
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                if self._first is not None:
                    self._first[1].close()
                merge.close()
            except BaseException as exc:
                if error is None:
                    error = exc
                raise
            finally:
                # Left early: what the caller had not taken of the last batch was not read.
                emitted += merge.emitted - operator.length_hint(rows)
                self._finish(merge, emitted, error)
