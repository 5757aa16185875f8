"""What saltedtable calls on Bigtable's batchers, and the types of its timeouts (pure types).

The data client's decorated methods reach type checkers as ``Any``. The
protocols here name the part of the client's batchers (:class:`BatcherLike`,
:class:`SyncBatcherLike`) that the writers call, and the defaults a table
resolves ``TABLE_DEFAULT`` with (:class:`TableDefaults`). The table protocols
build on them: ``TableLikeAsync`` in ``saltedtable._async.table_like`` and its
generated sync twin ``SyncTableLike`` (written once, so the two cannot drift).

The timeout aliases mirror the client's keyword arguments: a number of
seconds, or ``TABLE_DEFAULT`` for the table's own default.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypedDict

from google.cloud.bigtable.data import TABLE_DEFAULT, RowMutationEntry
from google.cloud.bigtable.data.row import Row

__all__ = [
    "AttemptTimeout",
    "BatcherLike",
    "GuardTimeouts",
    "OperationTimeout",
    "ReadRowsStream",
    "RequestTimeouts",
    "Retryable",
    "SyncBatcherLike",
    "SyncReadRowsStream",
    "TableDefaults",
    "Timeout",
]

#: ``operation_timeout=``: seconds, or the table's default.
Timeout = float | TABLE_DEFAULT
#: ``attempt_timeout=``: seconds, None (the operation's), or the table's default.
AttemptTimeout = float | None | TABLE_DEFAULT
#: ``retryable_errors=``: exception types the client retries, or the table's default.
Retryable = Sequence[type[Exception]] | TABLE_DEFAULT

#: How a reader starts one request: the bound ``read_rows_stream`` of an async table.
ReadRowsStream = Callable[..., Awaitable[AsyncIterable[Row]]]
#: How a sync reader starts one request: the bound ``read_rows_stream`` of a sync table.
SyncReadRowsStream = Callable[..., Iterable[Row]]


class RequestTimeouts(TypedDict):
    """The timeout keywords of one request a reader sends (what is left of its budget)."""

    operation_timeout: float
    attempt_timeout: float
    retryable_errors: Retryable


class GuardTimeouts(TypedDict, total=False):
    """The timeout keywords of a guard request (none: the table's defaults)."""

    operation_timeout: float
    attempt_timeout: float


class OperationTimeout(TypedDict, total=False):
    """The timeout keyword of a request that takes no attempt timeout."""

    operation_timeout: float


class BatcherLike(Protocol):
    """The part of the client's ``MutationsBatcherAsync`` that the salted batcher calls."""

    @property
    def closed(self) -> bool:
        """True once the batcher was closed."""
        ...

    async def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue one entry."""
        ...

    async def close(self) -> None:
        """Flush what is queued and stop."""
        ...

    async def __aenter__(self) -> Any:
        """Start flushing (the client's batcher returns itself)."""
        ...


class SyncBatcherLike(Protocol):
    """The part of the client's sync ``MutationsBatcher`` that the salted batcher calls."""

    @property
    def closed(self) -> bool:
        """True once the batcher was closed."""
        ...

    def append(self, mutation_entry: RowMutationEntry) -> None:
        """Queue one entry."""
        ...

    def close(self) -> None:
        """Flush what is queued and stop."""
        ...

    def __enter__(self) -> Any:
        """Start flushing (the client's batcher returns itself)."""
        ...


class TableDefaults(Protocol):
    """The default timeouts a Bigtable table resolves ``TABLE_DEFAULT`` with."""

    default_operation_timeout: float
    default_attempt_timeout: float | None
    default_read_rows_operation_timeout: float
    default_read_rows_attempt_timeout: float | None
    default_mutate_rows_operation_timeout: float
    default_mutate_rows_attempt_timeout: float | None
