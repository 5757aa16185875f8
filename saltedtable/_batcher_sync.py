# Generated from saltedtable/_batcher.py by .ci/unasync.py: do not edit.
# Edit the async source, then run `make generate`.
"""The mutations batcher that salts each entry's key as it is appended."""

from __future__ import annotations

from typing import final

from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.exceptions import MutationsExceptionGroup

from ._contracts import SyncBatcherLike
from ._layout import Layout
from ._record import family_of
from ._table_guard_sync import SyncTableGuard
from ._write import _BatcherCore, logical_group

__all__ = ["SaltedMutationsBatcherSync"]


@final
class SaltedMutationsBatcherSync(_BatcherCore):
    """A ``MutationsBatcher`` that salts each entry's key as it is appended.

    It wraps the client's batcher, so flushing by count, bytes and timer, flow
    control, ``closed`` and the context manager behave as the client's do.
    As with the client's, the entries that failed are raised by ``close()``
    (or on leaving ``with``), each the caller's own entry object. An
    entry the layout guard could not clear because Bigtable failed (a missing
    table, say) is never sent, and is reported there the same way.
    """

    __slots__ = ("_guard",)

    def __init__(
        self, inner: SyncBatcherLike, layout: Layout, guard: SyncTableGuard | None = None
    ) -> None:
        super().__init__(inner, layout)
        self._inner: SyncBatcherLike = inner
        self._guard = guard

    def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue a logical entry; it is flushed with others under its physical key.

        Raises:
            RuntimeError: The batcher is closed.
            ValueError: ``mutation_entry`` is a mutation, not an entry.
            RowKeyError: The key cannot be placed.
        """
        if self._passes_through(mutation_entry):
            self._inner.append(mutation_entry)
            return
        physical = self._placed(mutation_entry)
        if self._guard is not None:
            try:
                self._guard.before_write(family_of(mutation_entry.mutations))
            except GoogleAPICallError as exc:
                self._hold(mutation_entry, exc)
                return
        try:
            self._inner.append(physical)
        except MutationsExceptionGroup as group:
            raise logical_group(group, self._layout) from None

    def close(self) -> None:
        """Flush what is queued and close; raise the failures, naming the caller's entries."""
        failures, appended = self._take_failures()
        group: MutationsExceptionGroup | None = None
        try:
            self._inner.close()
        except MutationsExceptionGroup as failed:
            group = failed
        error = self._combined(failures, appended, group)
        if error is not None:
            raise error from None

    def __enter__(self) -> SaltedMutationsBatcherSync:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
