"""Writes: logical mutation entries to physical ones, failures back to logical keys.

Every key of a bulk write is placed before anything is sent, so a bad key
fails the call with nothing written. Failures the client reports name the
caller's own (logical) entries. :class:`SaltedMutationsBatcher` wraps the
client's async batcher, which keeps flushing by count, bytes and timer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
)

from ._exceptions import RowKeyError
from ._guard import TableGuard, family_of
from ._layout import Layout
from ._salt import to_key
from ._stats import CallStats

__all__ = ["SaltedMutationsBatcher", "logical_group", "physical_entries"]


def physical_entries(
    layout: Layout, entries: Sequence[RowMutationEntry], stats: CallStats | None = None
) -> list[RowMutationEntry]:
    """The entries with physical keys, every key placed before any is sent.

    Raises:
        RowKeyError, CutoffError: A key cannot be placed; nothing is returned.
    """
    locate = layout.locate
    physical = []
    for entry in entries:
        bucket, key = locate(entry.row_key)
        physical.append(RowMutationEntry(key, list(entry.mutations)))
        if stats is not None:
            b = stats.bucket(bucket)
            b.rows += 1
            b.bytes += len(key) + sum(m.size() for m in entry.mutations)
    return physical


def first_family(entries: Sequence[RowMutationEntry]) -> str | None:
    """The first column family any entry's mutations name."""
    for entry in entries:
        family = family_of(entry.mutations)
        if family is not None:
            return family
    return None


def logical_group(
    group: MutationsExceptionGroup,
    layout: Layout,
    originals: Sequence[RowMutationEntry] | None = None,
) -> MutationsExceptionGroup:
    """The same failures, naming the caller's logical entries instead of physical ones."""
    failures: list[FailedMutationEntryError] = []
    for exc in group.exceptions:
        if not isinstance(exc, FailedMutationEntryError):
            failures.append(exc)  # anything else passes through unchanged
            continue
        if originals is not None and exc.index is not None and exc.index < len(originals):
            entry = originals[exc.index]
        else:
            try:
                key = layout.to_logical(to_key(exc.entry.row_key))
            except RowKeyError:
                key = to_key(exc.entry.row_key)
            entry = RowMutationEntry(key, list(exc.entry.mutations))
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        failures.append(FailedMutationEntryError(exc.index, entry, cause))
    return MutationsExceptionGroup(
        failures, group.total_entries_attempted, message=str(group.message)
    )


@final
class SaltedMutationsBatcher:
    """A ``MutationsBatcherAsync`` that salts each entry's key as it is appended.

    It wraps the client's batcher, so flushing by count, bytes and timer, flow
    control, ``closed`` and the context manager behave as the client's do.
    Failures raised by ``append()`` or ``close()`` (or on leaving ``async
    with``) name the logical keys of the failed entries.
    """

    __slots__ = ("_guard", "_inner", "_layout")

    def __init__(self, inner: Any, layout: Layout, guard: TableGuard | None = None) -> None:
        self._inner = inner
        self._layout = layout
        self._guard = guard

    @property
    def closed(self) -> bool:
        """True once the batcher was closed."""
        return bool(self._inner.closed)

    async def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue a logical entry; it is flushed with others under its physical key.

        Raises:
            RuntimeError: The batcher is closed.
            ValueError: ``mutation_entry`` is a mutation, not an entry.
            RowKeyError: The key cannot be placed.
        """
        if not isinstance(mutation_entry, RowMutationEntry) or self.closed:
            await self._inner.append(mutation_entry)  # refused as the client refuses it
            return
        physical = RowMutationEntry(
            self._layout.locate(mutation_entry.row_key)[1], list(mutation_entry.mutations)
        )
        if self._guard is not None:
            await self._guard.before_write(family_of(mutation_entry.mutations))
        try:
            await self._inner.append(physical)
        except MutationsExceptionGroup as group:
            raise logical_group(group, self._layout) from None

    async def close(self) -> None:
        """Flush what is queued and close; raise failures with logical keys."""
        try:
            await self._inner.close()
        except MutationsExceptionGroup as group:
            raise logical_group(group, self._layout) from None

    async def __aenter__(self) -> SaltedMutationsBatcher:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
