"""The mutations batcher that salts each entry's key as it is appended."""

from __future__ import annotations

import math
import time
from typing import final

from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.exceptions import MutationsExceptionGroup

from .._contracts import BatcherLike
from .._engine.runtime_asyncio import wait_all
from .._guard.record import family_of
from .._scheme.layout import Layout
from .._scheme.salt import to_key
from .._write import BatcherCore, PhysicalEntry, logical_group
from .guard import TableGuard

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

    __slots__ = ("_guard",)

    def __init__(
        self,
        inner: BatcherLike,
        layout: Layout,
        guard: TableGuard | None = None,
        *,
        internals: bool = True,
    ) -> None:
        super().__init__(inner, layout, internals=internals)
        self._inner: BatcherLike = inner
        self._guard = guard

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
        physical = PhysicalEntry()
        physical.row_key = self._salt(mutation_entry.row_key)
        mutations = mutation_entry.mutations
        physical.mutations = mutations if type(mutations) is tuple else tuple(mutations)
        physical.logical = mutation_entry
        guard = self._guard
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
                if guard.layout is not self._layout:  # it adopted a longer layout
                    self._layout = guard.layout
                    self._salt = guard.layout.salter()
                    physical.row_key = self._salt(mutation_entry.row_key)
            if guard.horizon_applies:
                guard.check_horizon(to_key(mutation_entry.row_key))
        physical.seq = self._seq
        self._seq += 1
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
