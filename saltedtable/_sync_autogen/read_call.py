# Generated from saltedtable/_async/read_call.py by .ci/unasync.py: do not edit.
# Edit the async source, then run `make generate`.
"""One logical read: its sources, the merge, its statistics.

:class:`SyncReadCall` ties a plan, its bucket sources (:mod:`.._read.sources_threads`),
the budget and the call's statistics (the per-read state of :mod:`.._read.call`)
together and hands the caller a list or a stream (see :mod:`.._read.sources_threads`
for how a read that ends early stops its requests). This module is the source of
both flavours: ``_sync_autogen/read_call.py`` is generated from it by
``.ci/unasync.py``, and uses the hand-written sync sources and merge driver (the
merge of each flavour comes from :mod:`.._engine.runtime_threads`).
"""

from __future__ import annotations

import operator
from collections.abc import Generator, Iterator
from functools import partial
from typing import final

from google.cloud.bigtable.data.row import Row

from .._contracts import SyncReadRowsStream
from .._engine.merge_threads import ThreadMerge
from .._engine.runtime_threads import ROW_KEY, OneRun, capacity, new_merge, one_merge
from .._engine.slots_threads import Slots
from .._read.call import Read, ReadContextBase, one_budget
from .._read.plan import ReadPlan
from .._read.settings import ReadSettings
from .._read.sources_threads import SyncBucketSource, SyncOneRequestSource, stop_sync_sources
from .._read.timeouts import Timeouts
from .chunks import client_read_rows_stream
from .table_like import SyncTableLike

__all__ = ["SyncReadCall"]


@final
class ReadContext(ReadContextBase[SyncTableLike, Slots, bool]):
    """What every read of one table shares (built once per table object)."""

    __slots__ = ()


@final
class SyncReadCall(Read[ReadContext, bool]):
    """One logical read: its sources, the merge it runs when iterated, and its statistics.

    Built with :class:`~.._read.call.Read`'s arguments (``ctx``, ``plan``,
    ``settings``, ``timeouts``, ``operation=``, ``stats=``).
    """

    __slots__ = ("_first", "_merge", "_setup")

    def _prepare(
        self, ctx: ReadContext, plan: ReadPlan, settings: ReadSettings, timeouts: Timeouts
    ) -> None:
        # (A reversed read that cannot be sent raises here, before anything is sent.)
        read_rows_stream = client_read_rows_stream(
            ctx.table, internals=ctx.client_internals, reverse=plan.reverse
        )
        limiter, budget = ctx.limiter, settings.budget
        self._first: tuple[SyncOneRequestSource, OneRun[Row]] | None = None
        if self._one is not None:
            first = SyncOneRequestSource(
                read_rows_stream,
                self._one.request,
                plan.subqueries,
                deadline=self._deadline,
                timeouts=timeouts,
                limiter=limiter,
                stats=[self._bucket_stats(sub) for sub in plan.subqueries],
                cap=budget.bytes,
                internals=ctx.client_internals,
            )
            one = one_merge(
                first,
                budget=one_budget(self._one.request),
                stop_requests=partial(stop_sync_sources, [first]),
            )
            self._first = (first, one)
        self._setup: tuple[ReadContext, ReadPlan, ReadSettings, Timeouts, SyncReadRowsStream] = (
            ctx,
            plan,
            settings,
            timeouts,
            read_rows_stream,
        )
        #: The buckets' own requests, made when the read needs them (a small
        #: read answered by its one request never does).
        self._merge: ThreadMerge[Row] | None = None
        if self._one is None:
            self._buckets()

    def _buckets(self) -> ThreadMerge[Row]:
        """The merge of the buckets' own requests (made on first use)."""
        if self._merge is not None:
            return self._merge
        ctx, plan, settings, timeouts, read_rows_stream = self._setup
        limiter = ctx.limiter
        sources = [
            SyncBucketSource(
                read_rows_stream,
                sub,
                deadline=self._deadline,
                timeouts=timeouts,
                limiter=limiter,
                bstats=self._bucket_stats(sub),
                stray=self._stray_for(sub),
                reverse=plan.reverse,
                internals=ctx.client_internals,
            )
            for sub in plan.subqueries
        ]
        merge = new_merge(
            sources,
            slots=capacity(limiter),
            ordered=settings.ordered,
            limit=plan.limit,
            budget=settings.budget,
            stop_requests=partial(stop_sync_sources, sources),
            key=ROW_KEY,
            descending=plan.reverse,
            largest=self._size_hint(),
            measured=None if self._first is None else self._first[0].largest,
        )
        self._merge = merge
        return merge

    def _try_one(self) -> list[Row] | None:
        """Run the one request over every bucket: the read's rows, or None to go on."""
        if self._first is None or self._one is None:
            return None
        source, merge = self._first
        rows: list[Row] = []
        try:
            with merge:
                for batch in merge:
                    rows += batch
        except BaseException as exc:
            self._one.failed(exc, source)
            return None
        answered = self._one.done(rows, source)
        if answered is not None:  # (else its measure goes on in the buckets' merge)
            self._learn(source.largest)
        return answered

    def collect(self) -> list[Row]:
        """Every row of the read, in a list."""
        rows: list[Row] | None = None
        error: BaseException | None = None
        try:
            if self._guard is not None:
                self._guard(self._limit)
            rows = self._try_one()
            if rows is None:
                rows = []
                with self._buckets() as merge:
                    for batch in merge:
                        rows += batch
        except BaseException as exc:
            error = exc
            raise
        finally:
            made = self._merge
            small = self._one is not None and self._one.fitted
            emitted = len(rows or ()) if small else 0 if made is None else made.emitted
            self._finish(made, emitted, error)
        return rows

    def abandon(self) -> bool:
        """The caller dropped the stream between rows: stop the read now if nothing runs.

        Returns:
            Whether it stopped: closing the stream then awaits nothing. False: a
            request runs, which closing the stream ends (see ``ThreadMerge.abandon``).
        """
        if self._first is not None and not self._first[1].abandon():
            return False
        return self._merge is None or self._merge.abandon()

    def stream(self) -> Generator[Row, None, None]:
        """Flatten the batches; closing this generator cancels every sub-scan."""
        error: BaseException | None = None
        rows: Iterator[Row] = iter(())
        emitted = 0  # rows handed over from the one request
        try:
            if self._guard is not None:
                self._guard(self._limit)
            small = self._try_one()
            if small is not None:
                emitted = len(small)
                rows = iter(small)
                for row in rows:
                    yield row
                return
            for batch in self._buckets():
                rows = iter(batch)
                for row in rows:
                    yield row
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                if self._first is not None:
                    self._first[1].close()
                if self._merge is not None:
                    self._merge.close()
            except BaseException as exc:
                # Cancelled while it cleans up (in async code, cancellation reaches
                # through shields): still reported, once.
                if error is None:
                    error = exc
                raise
            finally:
                # Left early: what the caller had not taken of the last batch was not read.
                merge = self._merge
                if merge is not None:
                    emitted += merge.emitted
                self._finish(merge, emitted - operator.length_hint(rows), error)
