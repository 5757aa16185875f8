"""The mutations batcher that salts each entry's key as it is appended."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from typing import final

from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.exceptions import MutationsExceptionGroup

from .._contracts import BatcherLike
from .._engine.runtime_asyncio import wait_all
from .._guard.record import family_of
from .._hotkeys import HotKeys, wall_micros
from .._scheme.layout import Layout
from .._scheme.salt import to_key
from .._write import BatcherCore, PhysicalEntry, logical_group
from .guard import TableGuard
from .window_table import WindowTableAsync

__all__ = ["SaltedMutationsBatcherAsync"]


@final
class SaltedMutationsBatcherAsync(BatcherCore):
    """A ``MutationsBatcherAsync`` that salts each entry's key as it is appended.

    It wraps the client's batcher, so flushing by count, bytes and timer, flow
    control, ``closed`` and the context manager behave as the client's do.
    As with the client's, the entries that failed are raised by ``close()``
    (or on leaving ``async with``), each the caller's own entry object: every
    one of them, where the client's raises ten of the first and ten of the
    last. :meth:`flush` (which the client's batcher does not have) writes what
    was appended so far and raises its failures then. An entry the layout
    guard could not clear because Bigtable failed (a missing table, say) is
    never sent, and is reported the same way.
    """

    __slots__ = (
        "_aggregates",
        "_flush_interval",
        "_guard",
        "_hot",
        "_hot_seen",
        "_spread",
        "_window",
    )

    def __init__(
        self,
        inner: BatcherLike,
        layout: Layout,
        guard: TableGuard | None = None,
        *,
        internals: bool = True,
        hot: HotKeys | None = None,
        spread: Iterator[int] | None = None,
        window: WindowTableAsync | None = None,
        aggregates: Mapping[str, str] | None = None,
        flush_interval: float | None = None,
    ) -> None:
        super().__init__(inner, layout, internals=internals)
        self._inner: BatcherLike = inner
        self._guard = guard
        self._hot = hot
        # The guard's hot lists when ``_hot`` was last built: it may adopt others
        # (a split made since), which this batcher then follows (see ``_follow_hot``).
        self._hot_seen = None if guard is None else guard.current_hot
        self._aggregates = aggregates
        self._spread = spread
        # In a dual-layout window an entry becomes the new row's entry, then (for a
        # delete) the old row's; both name the caller's entry when they fail.
        self._window = window
        # The client batcher's periodic flush (None: none): an entry routed to a
        # moving part's old place is sent at once only when that flush might come
        # after the split's start.
        self._flush_interval = flush_interval

    async def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue a logical entry; it is flushed with others under its physical key.

        Raises:
            RuntimeError: The batcher is closed.
            ValueError: ``mutation_entry`` is a mutation, not an entry.
            RowKeyError: The key cannot be placed.
        """
        # Per row: the fewest calls (docs/development.md, "Write path internals");
        # type() is no call.
        if not self._open or (
            type(mutation_entry) is not RowMutationEntry
            and not isinstance(mutation_entry, RowMutationEntry)
        ):
            await self._inner.append(mutation_entry)  # refused as the client refuses it
            return
        guard = self._guard
        if guard is not None and guard.current_hot is not self._hot_seen:
            self._follow_hot(guard)
        if self._hot is not None and self._hot.is_hot(to_key(mutation_entry.row_key)):
            await self._append_hot(mutation_entry)
            return
        if self._window is not None and await self._append_window(mutation_entry):
            return
        physical = PhysicalEntry()
        physical.row_key = self._salt(mutation_entry.row_key)
        mutations = mutation_entry.mutations
        physical.mutations = mutations if type(mutations) is tuple else tuple(mutations)
        physical.logical = mutation_entry
        if guard is not None:
            # A settled guard costs one clock read (none when it never reads
            # the record again); any other state asks the guard.
            until = guard.clear_until
            if until < math.inf and until <= time.monotonic():
                try:
                    await guard.before_write(family_of(mutations))
                except GoogleAPICallError as exc:
                    self._hold(mutation_entry, exc)
                    return
            if guard.window_io is not None:
                # The window started (on this append or any other call of the table).
                self._window = guard.window_io
                await self._append_window(mutation_entry)
                return
            if guard.current_layout is not self._layout:
                # The guard adopted a longer layout (on this append, or on any other
                # call of the table): place keys by it from now on.
                self._layout = guard.current_layout
                self._salt = self._layout.salter()
                physical.row_key = self._salt(mutation_entry.row_key)
            if self._layout.epochs is not None and guard.horizon_applies:
                # (an attribute test first: a plain table's append pays no call)
                guard.check_horizon(to_key(mutation_entry.row_key))
            if guard.current_hot is not self._hot_seen:
                # The guard adopted hot lists on this append: route the entry by them.
                self._follow_hot(guard)
                if self._hot is not None and self._hot.is_hot(to_key(mutation_entry.row_key)):
                    await self._append_hot(mutation_entry)
                    return
            if guard.hot_lead is not None:
                guard.check_hot_horizon()
        physical.seq = self._seq
        self._seq += 1
        try:
            await self._inner.append(physical)
        except MutationsExceptionGroup as group:
            raise logical_group(group, self._layout) from None

    def _follow_hot(self, guard: TableGuard) -> None:
        """Use the hot lists the guard adopted (a split made since this batcher opened).

        What the client's batcher holds was routed by the lists before: it is
        sent now, before the split's start (and a move's finish) can pass.
        """
        self._hot_seen = guard.current_hot
        self._hot = HotKeys.for_table(self._layout, guard.current_hot, self._aggregates)
        self._send_now()

    async def _append_hot(self, mutation_entry: RowMutationEntry) -> None:
        # A split row's entry becomes one entry per sub-row it touches; each
        # remembers the caller's entry, which a failure names.
        spread = 0 if self._spread is None else next(self._spread)
        guard = self._guard
        if guard is not None:
            try:
                await guard.before_write(family_of(mutation_entry.mutations))
            except GoogleAPICallError as exc:
                self._hold(mutation_entry, exc)
                return
            if guard.current_hot is not self._hot_seen:
                self._follow_hot(guard)  # (adopted on this append)
            guard.check_hot_horizon()
        hot = self._hot
        assert hot is not None  # (adopted lists only ever add keys)
        now = wall_micros()
        routed = hot.route(mutation_entry.row_key, mutation_entry.mutations, spread, now)
        seq, self._seq = self._seq, self._seq + 1  # one seq: one failure reported
        for key, share in routed:
            physical = PhysicalEntry()
            physical.row_key = key
            physical.mutations = tuple(share)
            physical.logical = mutation_entry
            await self._queue(physical, seq)
        layout = hot.layout
        if layout.pending(now) and layout.move_keys(mutation_entry.row_key)[1]:
            # Routed to the old place of a part that moves from the split's start: sent
            # before the start, not at a flush after the move was finished (which would
            # hide it). The periodic flush sends it in time unless it may come after the
            # start: then it is sent now (one request an entry, for the last interval).
            interval = self._flush_interval
            assert layout.start_micros is not None  # (pending)
            if interval is None or now + interval * 1_000_000 >= layout.start_micros:
                self._send_now()

    async def _append_window(self, entry: RowMutationEntry) -> bool:
        """Queue a logical entry in the window: its new row's entry, then its old row's.

        Both may travel in one flush; a failure of either names the caller's
        entry, and retrying that entry is safe (the tombstone keeps reads right
        whichever half was written).

        Returns:
            False when the window closed meanwhile (nothing queued: the entry
            goes the plain way, by the layout the guard adopted).
        """
        guard = self._guard
        window = self._window
        if guard is not None:
            try:
                await guard.before_write(family_of(entry.mutations))
            except GoogleAPICallError as exc:
                self._hold(entry, exc)
                return True
            # The table's window now: the guard may have read a close meanwhile.
            window = self._window = guard.window_io
            if window is None:
                return False
            guard.check_window_horizon()
        assert window is not None
        new, later = window.entries([entry])
        seq, self._seq = self._seq, self._seq + 1  # one seq: one failure reported
        for placed in [new[0], *(e for _, e in later)]:
            physical = PhysicalEntry()
            physical.row_key = placed.row_key
            physical.mutations = tuple(placed.mutations)
            physical.logical = entry
            await self._queue(physical, seq)
        return True

    async def _queue(self, physical: PhysicalEntry, seq: int) -> None:
        """Queue one physical entry of a hot or windowed logical entry.

        Every physical entry of one logical entry shares its ``seq``, so a
        failure of several of them is reported once, naming the caller's entry.
        """
        physical.seq = seq
        try:
            await self._inner.append(physical)
        except MutationsExceptionGroup as group:
            raise logical_group(group, self._layout) from None

    async def flush(self) -> None:
        """Write every entry appended so far; raise those that failed.

        Returns once each entry appended before the call was written or failed
        (after the client's retries); entries appended meanwhile are not
        waited for. The batcher stays open. The client's batcher has no such
        method: its failures are raised only by ``close()``.

        Raises:
            MutationsExceptionGroup: Entries appended before the call failed:
                each ``FailedMutationEntryError.entry`` is the caller's own
                entry object (``index`` is None). ``close()`` does not raise
                them again.
            RuntimeError: The batcher is closed.
            NotImplementedError: The client's batcher lacks the private flush
                jobs it uses (a google-cloud-bigtable other than 2.50's), or
                the table's ``client_internals`` switch is off. Then
                ``close()`` writes what was appended and raises what failed,
                as the client's batcher does (it keeps the first and the last
                ten failures).
        """
        before = self._seq
        await wait_all(self._flush_jobs())
        error = self._take(before)
        if error is not None:
            raise error

    async def close(self) -> None:
        """Flush what is queued and close; raise the failures, naming the caller's entries."""
        self._open = False
        group: MutationsExceptionGroup | None = None
        try:
            await self._inner.close()
        except MutationsExceptionGroup as failed:
            group = failed
        error = self._combined(self._take(), group)
        if error is not None:
            raise error from None

    async def __aenter__(self) -> SaltedMutationsBatcherAsync:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
