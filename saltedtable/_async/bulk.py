"""A bulk write through the client's own operation, its requests built under physical keys.

``TableAsync.bulk_mutate_rows`` hands its entries to the client's mutate-rows
operation, which keeps each entry beside its request protobuf until the call
ends (and names it in a failure). Handing it entries under physical keys means
one more object a row alive for the whole call: at 20,000 entries, enough
survivors to cross CPython's threshold for a full garbage collection where the
client's own call does not (docs/development.md, "Write path internals").

:func:`placed_bulk_write` runs the client's own operation (its request, retries
and back-off, timeouts, retryable errors and metrics) with the caller's own
entries, each beside a request entry built as the client builds it but under
the physical key. So the call keeps the objects the client's call keeps, and
the client's failures name the caller's entries already.

The operation is a private class of the client, so it is used only with the
releases it was checked against (:data:`~saltedtable._async.chunks.TESTED_CLIENTS`),
on a client's table whose ``bulk_mutate_rows`` is the client's own, and with
the table's ``client_internals`` switch on; :func:`placed_bulk_unavailable`
says why not, and the table then calls its own ``bulk_mutate_rows`` with
physical entries.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from typing import Any

from google.cloud.bigtable import __version__ as _CLIENT_VERSION
from google.cloud.bigtable.data import RowMutationEntry

from .._contracts import AttemptTimeout, Retryable, Timeout
from .chunks import TESTED_CLIENTS

try:
    from google.cloud.bigtable.data._async._mutate_rows import (
        _MutateRowsOperationAsync as _Operation,
    )
    from google.cloud.bigtable.data._async.client import _DataApiTargetAsync as _Target
    from google.cloud.bigtable.data._helpers import _get_retryable_errors, _get_timeouts
    from google.cloud.bigtable.data._metrics import OperationType
    from google.cloud.bigtable.data.mutations import (
        _MUTATE_ROWS_REQUEST_MUTATION_LIMIT,
        _EntryWithProto,
    )
    from google.cloud.bigtable_v2.types.bigtable import MutateRowsRequest

    #: The code of the client's own ``bulk_mutate_rows``: a table whose method is any
    #: other (patched on the table or its class, a materialized view's refusal, a
    #: wrapper's own) writes through it.
    _OWN = getattr(_Target.bulk_mutate_rows, "__code__", None)
    _CLIENT = _CLIENT_VERSION.startswith(TESTED_CLIENTS) and (
        _OWN is not None and _OWN.co_filename == sys.modules[_Target.__module__].__file__
    )
except ImportError:  # pragma: no cover - a client release without them: the table's own
    _CLIENT = False

__all__ = ["placed_bulk_unavailable", "placed_bulk_write"]


def placed_bulk_unavailable(table: Any, *, internals: bool = True) -> str | None:
    """Why ``table``'s bulk writes go through its own ``bulk_mutate_rows`` (None: they need not).

    ``internals``: the salted table's ``client_internals`` switch.
    """
    if not internals:
        return "the client's internals are switched off"
    if not _CLIENT:
        return (
            f"google-cloud-bigtable {_CLIENT_VERSION} is not a release "
            "saltedtable was checked against"
        )
    own = getattr(table, "bulk_mutate_rows", None)
    if (
        type(own) is not types.MethodType
        or type(own.__func__) is not types.FunctionType
        or own.__func__.__code__ is not _OWN
        or not isinstance(own.__self__, _Target)
    ):
        return "the table's bulk_mutate_rows is not the client's own"
    return None


async def placed_bulk_write(
    table: Any,
    entries: Sequence[RowMutationEntry],
    keys: Sequence[bytes],
    *,
    operation_timeout: Timeout,
    attempt_timeout: AttemptTimeout,
    retryable_errors: Retryable,
) -> None:
    """``table.bulk_mutate_rows(entries)`` with each entry written under ``keys[i]``.

    ``table`` is one :func:`placed_bulk_unavailable` passes. What the client's
    method does, step by step, but for the request entries: each is built as
    ``RowMutationEntry._to_pb`` builds it, with the physical key.

    Raises:
        MutationsExceptionGroup: As the client's: each failure names the
            caller's entry and its index in ``entries``.
        ValueError: More mutations than one request takes (the client's error).
    """
    table = table.bulk_mutate_rows.__self__  # (a proxy's: the table it forwards to)
    operation, attempt = _get_timeouts(operation_timeout, attempt_timeout, table)
    retryable = _get_retryable_errors(retryable_errors, table)
    op: Any = _Operation(
        table.client._gapic_client,
        table,
        [],
        operation,
        attempt,
        metric=table._create_operation(OperationType.BULK_MUTATE_ROWS),
        retryable_exceptions=retryable,
    )
    total = sum(len(entry.mutations) for entry in entries)
    if total > _MUTATE_ROWS_REQUEST_MUTATION_LIMIT:
        raise ValueError(
            "mutate_rows requests can contain at most "
            f"{_MUTATE_ROWS_REQUEST_MUTATION_LIMIT} mutations across "
            f"all entries. Found {total}."
        )
    op.mutations = [
        _EntryWithProto(
            entry,
            MutateRowsRequest.Entry(
                row_key=key, mutations=[mutation._to_pb() for mutation in entry.mutations]
            ),
        )
        for entry, key in zip(entries, keys, strict=True)
    ]
    op.remaining_indices = list(range(len(op.mutations)))
    await op.start()
