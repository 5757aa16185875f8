"""What the async and the sync salted tables share as facades: ``TableAsync``'s attributes.

Code that logs or inspects a table (``table.table_name``, the default
timeouts, ...) keeps working on a salted table: each attribute reads and
writes the wrapped table's own.
"""

from __future__ import annotations

from typing import Any

from google.cloud.bigtable.data.row import Row

__all__ = ["TableAttributes", "relabel"]


def relabel(row: Row, key: bytes) -> Row:
    """Give a row and every cell in it the logical key (cells carry the key too)."""
    row.row_key = key
    for cell in row.cells:
        cell.row_key = key
    return row


def _passthrough(name: str, doc: str) -> Any:
    """A property that reads and writes the wrapped table's attribute of the same name."""

    def get(self: Any) -> Any:
        return getattr(self._table, name)

    def set_(self: Any, value: Any) -> None:
        setattr(self._table, name, value)

    return property(get, set_, doc=doc)


class TableAttributes:
    """The public attributes of ``TableAsync``/``Table``, passed through to the wrapped table."""

    client = _passthrough("client", "The data client of the wrapped table.")
    instance_id = _passthrough("instance_id", "The instance id.")
    table_id = _passthrough("table_id", "The table id.")
    instance_name = _passthrough("instance_name", "The instance's full resource name.")
    table_name = _passthrough("table_name", "The table's full resource name.")
    app_profile_id = _passthrough("app_profile_id", "The app profile requests use, or None.")
    default_operation_timeout = _passthrough(
        "default_operation_timeout", "Default operation timeout of point operations (s)."
    )
    default_attempt_timeout = _passthrough(
        "default_attempt_timeout", "Default attempt timeout of point operations (s)."
    )
    default_read_rows_operation_timeout = _passthrough(
        "default_read_rows_operation_timeout", "Default operation timeout of reads (s)."
    )
    default_read_rows_attempt_timeout = _passthrough(
        "default_read_rows_attempt_timeout", "Default attempt timeout of read requests (s)."
    )
    default_mutate_rows_operation_timeout = _passthrough(
        "default_mutate_rows_operation_timeout", "Default operation timeout of bulk writes (s)."
    )
    default_mutate_rows_attempt_timeout = _passthrough(
        "default_mutate_rows_attempt_timeout", "Default attempt timeout of bulk writes (s)."
    )
    default_read_rows_retryable_errors = _passthrough(
        "default_read_rows_retryable_errors", "Errors reads retry by default."
    )
    default_mutate_rows_retryable_errors = _passthrough(
        "default_mutate_rows_retryable_errors", "Errors bulk writes retry by default."
    )
    default_retryable_errors = _passthrough(
        "default_retryable_errors", "Errors point operations retry by default."
    )
