"""What saltedtable calls on a Bigtable table, and the types of its timeouts (pure types).

The data client's decorated methods reach type checkers as ``Any``. The
protocols here name the part of ``google.cloud.bigtable.data.TableAsync``
(:class:`TableLikeAsync`) and of its sync ``Table`` (:class:`SyncTableLike`) that
the salted tables, the readers, the layout guard and the writers call, so
that every module above types its table with them. They are also the seam
for an in-memory fake in tests (``tests/fakes.py``).

The timeout aliases mirror the client's keyword arguments: a number of
seconds, or ``TABLE_DEFAULT`` for the table's own default.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypedDict

from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data._helpers import TABLE_DEFAULT
from google.cloud.bigtable.data.mutations import Mutation
from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import RowFilter

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
    "SyncTableLike",
    "TableDefaults",
    "TableLikeAsync",
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


class TableLikeAsync(TableDefaults, Protocol):
    """The part of ``google.cloud.bigtable.data.TableAsync`` that saltedtable calls.

    The client's decorated methods reach type checkers as ``Any``; this
    protocol names what is used, with the client's keywords, and gives tests a
    seam for an in-memory fake.
    """

    async def read_rows_stream(
        self,
        query: ReadRowsQuery,
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> AsyncIterable[Row]:
        """Stream the rows of a query."""
        ...

    async def read_row(
        self,
        row_key: str | bytes,
        *,
        row_filter: RowFilter | None = ...,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> Row | None:
        """Read one row."""
        ...

    async def row_exists(
        self,
        row_key: str | bytes,
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> bool:
        """Tell whether a row exists."""
        ...

    async def sample_row_keys(
        self,
        *,
        row_range: RowRange | None = ...,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> list[tuple[bytes, int]]:
        """Sample split points of the table."""
        ...

    def mutations_batcher(
        self,
        *,
        flush_interval: float | None = ...,
        flush_limit_mutation_count: int | None = ...,
        flush_limit_bytes: int = ...,
        flow_control_max_mutation_count: int = ...,
        flow_control_max_bytes: int = ...,
        batch_operation_timeout: Timeout = ...,
        batch_attempt_timeout: AttemptTimeout = ...,
        batch_retryable_errors: Retryable = ...,
    ) -> BatcherLike:
        """Make a mutations batcher (the client's ``MutationsBatcherAsync``)."""
        ...

    async def mutate_row(
        self,
        row_key: str | bytes,
        mutations: list[Mutation] | Mutation,
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> None:
        """Apply mutations to one row."""
        ...

    async def bulk_mutate_rows(
        self,
        mutation_entries: list[RowMutationEntry],
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> None:
        """Apply many mutation entries."""
        ...

    async def check_and_mutate_row(
        self,
        row_key: str | bytes,
        predicate: RowFilter | None,
        *,
        true_case_mutations: Mutation | list[Mutation] | None = ...,
        false_case_mutations: Mutation | list[Mutation] | None = ...,
        operation_timeout: Timeout = ...,
    ) -> bool:
        """Mutate a row depending on a filter."""
        ...

    async def read_modify_write_row(
        self,
        row_key: str | bytes,
        rules: ReadModifyWriteRule | list[ReadModifyWriteRule],
        *,
        operation_timeout: Timeout = ...,
    ) -> Row:
        """Read, modify and write a row atomically."""
        ...

    async def close(self) -> None:
        """Release the table's resources."""
        ...


class SyncTableLike(TableDefaults, Protocol):
    """The part of ``google.cloud.bigtable.data.Table`` (sync) that saltedtable calls.

    The client's own ``Table`` satisfies it as type checkers see it: the
    keywords are the client's.
    """

    def read_rows_stream(
        self,
        query: ReadRowsQuery,
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> Iterable[Row]:
        """Stream the rows of a query."""
        ...

    def read_row(
        self,
        row_key: str | bytes,
        *,
        row_filter: RowFilter | None = ...,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> Row | None:
        """Read one row."""
        ...

    def row_exists(
        self,
        row_key: str | bytes,
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> bool:
        """Tell whether a row exists."""
        ...

    def sample_row_keys(
        self,
        *,
        row_range: RowRange | None = ...,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> list[tuple[bytes, int]]:
        """Sample split points of the table."""
        ...

    def mutations_batcher(
        self,
        *,
        flush_interval: float | None = ...,
        flush_limit_mutation_count: int | None = ...,
        flush_limit_bytes: int = ...,
        flow_control_max_mutation_count: int = ...,
        flow_control_max_bytes: int = ...,
        batch_operation_timeout: Timeout = ...,
        batch_attempt_timeout: AttemptTimeout = ...,
        batch_retryable_errors: Retryable = ...,
    ) -> SyncBatcherLike:
        """Make a mutations batcher (the client's ``MutationsBatcher``)."""
        ...

    def mutate_row(
        self,
        row_key: str | bytes,
        mutations: list[Mutation] | Mutation,
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> None:
        """Apply mutations to one row."""
        ...

    def bulk_mutate_rows(
        self,
        mutation_entries: list[RowMutationEntry],
        *,
        operation_timeout: Timeout = ...,
        attempt_timeout: AttemptTimeout = ...,
        retryable_errors: Retryable = ...,
    ) -> None:
        """Apply many mutation entries."""
        ...

    def check_and_mutate_row(
        self,
        row_key: str | bytes,
        predicate: RowFilter | None,
        *,
        true_case_mutations: Mutation | list[Mutation] | None = ...,
        false_case_mutations: Mutation | list[Mutation] | None = ...,
        operation_timeout: Timeout = ...,
    ) -> bool:
        """Mutate a row depending on a filter."""
        ...

    def read_modify_write_row(
        self,
        row_key: str | bytes,
        rules: ReadModifyWriteRule | list[ReadModifyWriteRule],
        *,
        operation_timeout: Timeout = ...,
    ) -> Row:
        """Read, modify and write a row atomically."""
        ...

    def close(self) -> None:
        """Release the table's resources."""
        ...
