"""Writes: logical mutation entries to physical ones, failures back to logical keys.

Every key of a bulk write is placed before anything is sent, so a bad key
fails the call with nothing written. Failures the client reports name the
caller's own (logical) entries. The batchers (:mod:`._batcher`) wrap the
client's batchers, which keep flushing by count, bytes and timer.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.api_core.exceptions import DeadlineExceeded
from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
    RetryExceptionGroup,
)

from ._contracts import BatcherLike, SyncBatcherLike
from ._exceptions import RowKeyError
from ._layout import Layout
from ._record import family_of
from ._salt import to_key
from ._stats import CallStats

__all__ = [
    "every_entry_failed",
    "logical_group",
    "physical_entries",
]


class _PhysicalEntry(RowMutationEntry):
    """An entry under its physical key that remembers the caller's own entry.

    The client reports a failed entry by handing back the object it was
    given; this lets failures name the caller's object, not a copy.
    """

    def __init__(self, row_key: bytes, logical: RowMutationEntry) -> None:
        super().__init__(row_key, list(logical.mutations))
        self.logical = logical


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
        elif isinstance(exc.entry, _PhysicalEntry):
            entry = exc.entry.logical
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


def every_entry_failed(
    entries: Sequence[RowMutationEntry], cause: Exception
) -> MutationsExceptionGroup:
    """The client's report of a bulk write whose every entry failed with ``cause``.

    A request that ran out of time after retries (the guard's) is reported as
    the client reports such entries: with the group of its attempts' errors.
    """
    if isinstance(cause, DeadlineExceeded) and isinstance(cause.__cause__, RetryExceptionGroup):
        cause = cause.__cause__
    return MutationsExceptionGroup(
        [FailedMutationEntryError(i, entry, cause) for i, entry in enumerate(entries)],
        len(entries),
    )


class _BatcherCore:
    """What the async and the sync batcher share: placing entries, holding back failures."""

    __slots__ = ("_appended", "_held", "_inner", "_layout")

    def __init__(self, inner: BatcherLike | SyncBatcherLike, layout: Layout) -> None:
        self._inner = inner
        self._layout = layout
        #: Entries held back because the guard failed, reported on close.
        self._held: list[FailedMutationEntryError] = []
        #: Entries appended since failures were last raised.
        self._appended = 0

    @property
    def closed(self) -> bool:
        """True once the batcher was closed."""
        return bool(self._inner.closed)

    def _passes_through(self, entry: object) -> bool:
        # Not an entry, or a closed batcher: refused as the client refuses it.
        return not isinstance(entry, RowMutationEntry) or self.closed

    def _placed(self, entry: RowMutationEntry) -> _PhysicalEntry:
        physical = _PhysicalEntry(self._layout.locate(entry.row_key)[1], entry)
        self._appended += 1
        return physical

    def _hold(self, entry: RowMutationEntry, cause: Exception) -> None:
        # The client's append never fails for Bigtable: its flush does.
        self._held.append(FailedMutationEntryError(None, entry, cause))

    def _take_failures(self) -> tuple[list[FailedMutationEntryError], int]:
        failures, self._held = self._held, []
        appended, self._appended = self._appended, 0
        return failures, appended

    def _combined(
        self,
        failures: list[FailedMutationEntryError],
        appended: int,
        group: MutationsExceptionGroup | None,
    ) -> MutationsExceptionGroup | None:
        """Every failure to raise on close, naming the caller's entries (None: none)."""
        if group is not None:
            if not failures:
                return logical_group(group, self._layout)
            failures = [*failures, *logical_group(group, self._layout).exceptions]
        return MutationsExceptionGroup(failures, appended) if failures else None
