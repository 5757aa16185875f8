# Generated from saltedtable/_async/table_like.py by .ci/unasync.py: do not edit.
# Edit the async source, then run `make generate`.
"""What the salted table, its read call and its guard call on a Bigtable table (pure types).

The data client's decorated methods reach type checkers as ``Any``.
:class:`SyncTableLike` names the part of ``google.cloud.bigtable.data.Table``
that saltedtable calls, with the client's keywords, so that every module above
types its table with it; the client's own table satisfies it as type checkers see
it. It is also the seam for an in-memory fake in tests (``tests/fakes.py``).
The batcher protocols and the timeout aliases it uses live in
``saltedtable._contracts``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.mutations import Mutation
from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import RowFilter

from .._contracts import AttemptTimeout, Retryable, SyncBatcherLike, TableDefaults, Timeout

__all__ = ["SyncTableLike"]


class SyncTableLike(TableDefaults, Protocol):
    """The part of ``google.cloud.bigtable.data.Table`` that saltedtable calls.

    The client's decorated methods reach type checkers as ``Any``; this
    protocol names what is used, with the client's keywords, and gives tests a
    seam for an in-memory fake.
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
