"""A request's rows: the client's read operation, with fewer layers a row.

``TableAsync.read_rows_stream`` reads a ReadRows stream through the generated
client, which wraps every response in a proto-plus message, then two
generators, one over the responses' chunks and one that merges chunks into
rows, under the client's retry generator. Profiled on the emulator (cProfile,
the raw client's 16 sub-scans of 40,000 rows), the two generators take 14% of
the main thread's time and the proto-plus wrapping 7%, paid for every row.

:func:`client_read_rows_stream` gives a table's ``read_rows_stream`` with the
same signature and behaviour whose attempts differ in two ways:

* the RPC (:func:`_rpc`) goes through the client's channel, its interceptors,
  the error mapping and the headers the generated client sends (its
  ``x-goog-api-client``, the routing header of :func:`routing`), but parses
  each response into the protobuf message itself, not a proto-plus wrapper;
* :func:`merge_chunks` does both generators' work in one, each chunk checked as
  the client checks it, in the same order, with the same errors.

Everything else is the client's own: its read operation (the request, retries
and back-off, the resumed request after a retried attempt, the row limit), its
timeouts and retryable errors, its operation metrics. ``tests/unit/_async/test_chunks.py``
runs this module's merge and the installed client's over random chunk streams,
valid and not, and both reads against a gRPC server that records what each
sends, so that a change in the client is seen.

The read operation is a private class of the client, so the merged read is
used only with the client releases it was checked against (:data:`TESTED_CLIENTS`).
Where it is not used (another release, a table that is not the client's, a
``read_rows_stream`` replaced, the salted table's ``client_internals`` switch
off: :func:`merged_reads_unavailable` says which) :func:`client_read_rows_stream`
returns the table's own ``read_rows_stream``.
"""

from __future__ import annotations

import base64
import re
import sys
import time
import types
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from typing import Any

from google.api_core.gapic_v1 import method_async, routing_header
from google.cloud.bigtable import __version__ as _CLIENT_VERSION
from google.cloud.bigtable.data._helpers import TABLE_DEFAULT
from google.cloud.bigtable.data.exceptions import InvalidChunk
from google.cloud.bigtable.data.row import Cell, Row
from google.cloud.bigtable_v2.types import FeatureFlags, ReadRowsRequest, ReadRowsResponse
from google.cloud.bigtable_v2.types import RowRange as RowRangePB
from google.cloud.bigtable_v2.types import RowSet as RowSetPB
from grpc import StatusCode

from .._contracts import ReadRowsStream
from .._exceptions import QueryPlanError

#: The client releases whose read operation, chunk checks, RPC and headers this module
#: was checked against (``tests/unit/_async/test_chunks.py``, which also fails on a release not
#: listed here, so that someone runs the checks and adds it). Any other release: the
#: table's own ``read_rows_stream``.
TESTED_CLIENTS = ("2.50.",)

try:
    from google.cloud.bigtable.data._async._read_rows import (
        _ReadRowsOperationAsync as _Operation,
    )
    from google.cloud.bigtable.data._async.client import _DataApiTargetAsync as _Target
    from google.cloud.bigtable.data._helpers import _get_retryable_errors, _get_timeouts
    from google.cloud.bigtable.data._metrics import OperationType
    from google.cloud.bigtable.data.exceptions import _RowSetComplete

    #: The code of the client's own ``read_rows_stream``: a table whose method is any
    #: other function, or no plain function (patched on the table, its class or the
    #: client's base class, for instrumentation or a test double), is read through it.
    _OWN = getattr(_Target.read_rows_stream, "__code__", None)
    # (Patched before this import: then the class holds the patch. Leave reads to it.)
    _CLIENT = _CLIENT_VERSION.startswith(TESTED_CLIENTS) and (
        _OWN is not None and _OWN.co_filename == sys.modules[_Target.__module__].__file__
    )
except ImportError:  # pragma: no cover - a client release without them: the table's own reads
    _CLIENT = False

__all__ = [
    "REVERSE_SCANS_HEADER",
    "client_read_rows_stream",
    "merge_chunks",
    "merged_reads_unavailable",
    "reverse_scans_unavailable",
    "revise_reversed_rowset",
]

#: The metadata a reversed ReadRows request carries: the server (and the emulator)
#: refuses ``reversed`` unless the client says it merges decreasing keys
#: (``bigtable-features``: a serialized ``FeatureFlags`` with ``reverse_scans``, base64).
REVERSE_SCANS_HEADER: tuple[str, str] = (
    "bigtable-features",
    base64.urlsafe_b64encode(FeatureFlags.serialize(FeatureFlags(reverse_scans=True))).decode(),
)

#: The client's own error for a reset chunk that carries data (``InvalidChunk``'s message).
_RESET_WITH_DATA = "reset row with data"
_DEFAULT = TABLE_DEFAULT.READ_ROWS
_READ_ROWS = "/google.bigtable.v2.Bigtable/ReadRows"
#: The protobuf message class itself: a response is parsed into it and read as it
#: is, without the proto-plus wrapper the generated client builds around each one.
_RESPONSE = ReadRowsResponse.pb()
# The request's routing parameters, as the generated client derives them.
_TABLE_NAME = re.compile(r"projects/[^/]+/instances/[^/]+/tables/[^/]+")
_VIEW_TABLE = re.compile(r"(projects/[^/]+/instances/[^/]+/tables/[^/]+)(?:/.*)?")
_VIEW_INSTANCE = re.compile(r"(projects/[^/]+/instances/[^/]+)(?:/.*)?")


def _invalid(message: str) -> InvalidChunk:
    return InvalidChunk(message)  # type: ignore[no-untyped-call]


def _reset_has_data(c: Any) -> bool:
    return bool(
        c.row_key
        or c.HasField("family_name")
        or c.HasField("qualifier")
        or c.timestamp_micros
        or c.labels
        or c.value
    )


async def merge_chunks(
    op: Any, stream: Awaitable[Any] | None, reverse: bool = False
) -> AsyncIterator[Row]:
    """One attempt's rows: ``stream`` (a ReadRows call, protobuf responses) merged into rows.

    What the client's ``chunk_stream`` and ``merge_rows`` do together, in one
    generator: per chunk, the stream's checks (keys increase, the row limit),
    then the merge's (families, qualifiers, split cells, resets), then the
    stream's bookkeeping after the row is handed over (``op``'s last key and
    rows left, which a retried attempt resumes from). ``op`` is the client's
    read operation (its ``_operation_metric``, ``_last_yielded_row_key`` and
    ``_remaining_count``). ``None``: the attempt had nothing left to ask.
    ``reverse``: a reversed request's stream, whose keys must strictly decrease
    (the same checks otherwise, with "decreasing" in their errors).
    """
    metric = op._operation_metric
    try:
        if stream is None:
            metric.end_with_success()
            return
        # The row being merged (None between rows), its cells, and the family and
        # qualifier later chunks of the row may leave out.
        row_key: Any = None
        cells: list[Cell] = []
        family: Any = None
        qualifier: Any = None
        # A cell split over chunks: its parts so far (None: not inside one).
        parts: list[bytes] | None = None
        ts = 0
        labels: Any = None
        async for resp in await stream:
            scanned = resp.last_scanned_row_key
            if scanned:
                last = op._last_yielded_row_key
                if last is not None and (
                    (last and scanned >= last) if reverse else scanned <= last
                ):
                    raise _invalid("last scanned out of order")
                op._last_yielded_row_key = scanned
            # The stream's key of the row its chunks belong to (per response, as the client's).
            current: bytes | None = None
            for c in resp.chunks:
                # (Each field read once: a protobuf field read builds a new object.)
                k = c.row_key
                reset = c.reset_row
                committed = c.commit_row
                if current is None:
                    current = k
                    last = op._last_yielded_row_key
                    # (An empty key is out of order either way, as it is forwards.)
                    if last and ((current >= last or not current) if reverse else current <= last):
                        raise _invalid(
                            "row keys should be strictly decreasing (a reversed scan)"
                            if reverse
                            else "row keys should be strictly increasing"
                        )
                commit = False
                if parts is not None:
                    # The next part of a split cell.
                    t = c.timestamp_micros
                    cl = c.labels
                    if c.HasField("family_name") and c.family_name.value != family:
                        raise _invalid("family changed mid cell")
                    if c.HasField("qualifier") and c.qualifier.value != qualifier:
                        raise _invalid("qualifier changed mid cell")
                    if t and t != ts:
                        raise _invalid("timestamp changed mid cell")
                    if cl and cl != labels:
                        raise _invalid("labels changed mid cell")
                    if k and k != row_key:
                        raise _invalid("row key changed mid cell")
                    if reset:
                        if _reset_has_data(c):
                            raise _invalid(_RESET_WITH_DATA)
                        row_key = None
                        parts = None
                    else:
                        parts.append(c.value)
                        if c.value_size <= 0:
                            cells.append(
                                Cell(b"".join(parts), row_key, family, qualifier, ts, list(labels))
                            )
                            parts = None
                            commit = committed
                else:
                    if row_key is None:
                        # A row's first chunk.
                        row_key = k
                        if not row_key:
                            raise _invalid("first row chunk is missing key")
                        cells = []
                        family = qualifier = None
                    if reset:
                        if _reset_has_data(c):
                            raise _invalid(_RESET_WITH_DATA)
                        row_key = None
                    else:
                        f = c.family_name.value
                        q = c.qualifier.value if c.HasField("qualifier") else None
                        if k and k != row_key:
                            raise _invalid("unexpected new row key")
                        if f:
                            family = f
                            if q is None:
                                raise _invalid("new family without qualifier")
                            qualifier = q
                        elif family is None:
                            raise _invalid("missing family")
                        elif q is not None:
                            qualifier = q
                        elif qualifier is None:
                            raise _invalid("missing qualifier")
                        ts = c.timestamp_micros
                        cl = c.labels
                        labels = cl if cl else []
                        if c.value_size > 0:
                            parts = [c.value]
                        else:
                            cells.append(
                                Cell(c.value, row_key, family, qualifier, ts, list(labels))
                            )
                            commit = committed
                if commit:
                    blocked = time.monotonic_ns()
                    yield Row(row_key, cells)
                    attempt = metric.active_attempt
                    if attempt is not None:
                        attempt.application_blocking_time_ns += time.monotonic_ns() - blocked
                    row_key = None
                # The stream's bookkeeping after the chunk (the row is out).
                if reset:
                    current = None
                elif committed:
                    op._last_yielded_row_key = current
                    left = op._remaining_count
                    if left is not None:
                        op._remaining_count = left - 1
                        if left <= 0:
                            raise _invalid("emit count exceeds row limit")
                    current = None
        if row_key is not None:
            raise _invalid("premature end of stream")
        metric.end_with_success()
    except GeneratorExit:
        metric.end_with_status(StatusCode.CANCELLED)
        raise


def revise_reversed_rowset(row_set: Any, last_seen_row_key: bytes) -> Any:
    """What a reversed read still has to ask after ``last_seen_row_key`` (``None``: nothing).

    The client's ``_revise_request_rowset`` keeps what lies *above* the last key
    (a forward read's rest); a reversed read has read everything at or above it,
    so its rest is what lies *below*: keys under it, ranges cut to end before it
    (an empty row set would read the whole table, so nothing left is ``None``).
    """
    last = last_seen_row_key
    if row_set is None or (not row_set.row_ranges and not row_set.row_keys):
        return RowSetPB(row_ranges=[RowRangePB(end_key_open=last)])
    keys = [k for k in row_set.row_keys if k < last]
    ranges = []
    for row_range in row_set.row_ranges:
        start = row_range.start_key_closed or row_range.start_key_open
        if start and start >= last:
            continue  # every key it holds is at or above the last one read
        revised = RowRangePB(row_range)
        end = row_range.end_key_closed or row_range.end_key_open
        if not end or end >= last:
            revised.end_key_open = last  # (replaces a closed end: one of the two)
        ranges.append(revised)
    if not keys and not ranges:
        return None
    return RowSetPB(row_keys=keys, row_ranges=ranges)


if _CLIENT:

    class _MergedReadRows(_Operation):
        """The client's read operation, its attempts' rows from :func:`merge_chunks`."""

        __slots__ = ()

        #: Whether the request is reversed (:class:`_ReversedReadRows`): keys decrease.
        reverse = False

        def _revise(self, row_set: Any, last: bytes) -> Any:
            """The row set left after ``last`` (``None``: nothing is left)."""
            try:
                return self._revise_request_rowset(row_set=row_set, last_seen_row_key=last)
            except _RowSetComplete:
                return None

        def _read_rows_attempt(self) -> AsyncIterator[Row]:
            """One attempt, as the client's: a retried one asks for what is left after
            the last row handed over (or scanned), with the rows left of a limit; its
            RPC is :func:`_call`'s.
            """
            self._operation_metric.start_attempt()
            request = self.request
            last = self._last_yielded_row_key
            reverse = self.reverse
            if last is not None:
                rows = self._revise(request.rows, last)
                if rows is None:
                    return merge_chunks(self, None)  # nothing is left to ask
                request.rows = rows
            left = self._remaining_count
            if left is not None:
                request.rows_limit = left
                if left == 0:
                    return merge_chunks(self, None)
            # (self.target.client here, as the client's attempt: a sync read that was
            # stopped raises on it, see cancel_threads.SyncRequest.)
            call = _call(self.target.client, request, next(self.attempt_timeout_gen), reverse)
            return merge_chunks(self, call, reverse)

    class _ReversedReadRows(_MergedReadRows):
        """A reversed read: the request says so, carries :data:`REVERSE_SCANS_HEADER`,
        its keys must decrease, and a retried attempt asks for what lies below the
        last key (:func:`revise_reversed_rowset`).
        """

        __slots__ = ()

        reverse = True

        def _revise(self, row_set: Any, last: bytes) -> Any:
            return revise_reversed_rowset(row_set, last)


#: Per client transport: its stubs when the RPC was made (the client replaces
#: them when it refreshes its channel), and the RPC.
_RPCS: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _rpc(client: Any) -> Any:
    """The client's ReadRows RPC as its generated client makes it (the channel and its
    interceptors, the error mapping, the client's headers), but for the responses: protobuf
    messages, not proto-plus ones. Made again after the client refreshes its channel.
    """
    transport = client.transport
    stubs = transport._stubs
    made = _RPCS.get(transport)
    if made is not None and made[0] is stubs:
        return made[1]
    stub = transport._logged_channel.unary_stream(
        _READ_ROWS,
        request_serializer=ReadRowsRequest.serialize,
        response_deserializer=_RESPONSE.FromString,
    )
    rpc = method_async.wrap_method(stub, client_info=client.client_info)  # type: ignore[no-untyped-call]
    _RPCS[transport] = (stubs, rpc)
    return rpc


def routing(request: Any) -> tuple[tuple[str, str]]:
    """The ``x-goog-request-params`` header of a ReadRows request, as the generated client's."""
    params = {}
    if _TABLE_NAME.fullmatch(request.table_name):
        params["table_name"] = request.table_name
    params["app_profile_id"] = request.app_profile_id  # (always, even empty)
    if match := _VIEW_TABLE.fullmatch(request.authorized_view_name):
        params["table_name"] = match.group(1)
    if match := _VIEW_INSTANCE.fullmatch(request.materialized_view_name):
        params["name"] = match.group(1)
    return (routing_header.to_grpc_metadata(params),)  # type: ignore[no-untyped-call]


def _call(client: Any, request: Any, timeout: float, reverse: bool = False) -> Any:
    """Start one ReadRows RPC through the data ``client`` (see :func:`_rpc`).

    ``reverse``: the request is reversed; it carries :data:`REVERSE_SCANS_HEADER`.
    """
    gapic = client._gapic_client
    # (The async generated client keeps a sync one, which checks the universe domain.)
    validate = getattr(getattr(gapic, "_client", gapic), "_validate_universe_domain", None)
    if validate is not None:
        validate()
    metadata: tuple[tuple[str, str], ...] = routing(request)
    if reverse:
        metadata += (REVERSE_SCANS_HEADER,)
    return _rpc(client)(request, timeout=timeout, metadata=metadata)


def merged_reads_unavailable(table: Any, *, internals: bool = True) -> str | None:
    """Why ``table``'s requests cannot be read by :func:`merge_chunks` (None: they can).

    The one place that decides whether saltedtable may use the client's private
    read operation for a table: not where ``internals`` is False (the salted
    table's ``client_internals`` switch), the installed client is not one of
    :data:`TESTED_CLIENTS`, or ``table.read_rows_stream`` is not the client's
    own method bound to a client's table (replaced on the table, its class or
    the client's base class, or a wrapper's own). A proxy whose
    ``read_rows_stream`` is the client table's own (one that forwards the
    attribute, as a ``__getattr__`` proxy does) keeps the merged read: its
    requests go to the table the method is bound to, as they would through
    the method. The reason is a phrase for an error message.
    """
    if not internals:
        return (
            "the client's internals are switched off "
            "(client_internals=False, or SALTEDTABLE_CLIENT_INTERNALS=off)"
        )
    if not _CLIENT:
        return (
            f"google-cloud-bigtable {_CLIENT_VERSION} is not a release "
            "saltedtable was checked against"
        )
    own = getattr(table, "read_rows_stream", None)
    if (
        type(own) is not types.MethodType
        or type(own.__func__) is not types.FunctionType
        or own.__func__.__code__ is not _OWN
        or not isinstance(own.__self__, _Target)
    ):
        if isinstance(table, _Target):
            return "the table's read_rows_stream is not the client's own (it was replaced)"
        return f"the table is a {type(table).__qualname__}, whose read_rows_stream is its own"
    return None


def reverse_scans_unavailable(table: Any, *, internals: bool = True) -> str | None:
    """Why ``table`` cannot be read backwards (None: it can).

    A reversed read needs saltedtable's own read path (the client's 2.50 reads
    send no ``bigtable-features`` header and refuse decreasing keys), so
    whatever sends reads through the table's own ``read_rows_stream`` (see
    :func:`merged_reads_unavailable`) rules it out.
    """
    return merged_reads_unavailable(table, internals=internals)


def client_read_rows_stream(
    table: Any, *, internals: bool = True, reverse: bool = False
) -> ReadRowsStream:
    """``table.read_rows_stream``, its attempts merged by :func:`merge_chunks` where it can be.

    The table's own method wherever :func:`merged_reads_unavailable` gives a
    reason (``internals`` False among them). (A test double of the generated
    client's ``read_rows``, below the table's method, is not seen: replace
    ``read_rows_stream`` instead.)

    ``reverse``: every request it sends reads backwards (see :class:`_ReversedReadRows`).

    Raises:
        QueryPlanError: ``reverse`` where the table's own method would read
            (:func:`reverse_scans_unavailable` says why), before anything is sent.
    """
    reason = merged_reads_unavailable(table, internals=internals)
    if reason is not None:
        if reverse:
            raise QueryPlanError(f"a reversed scan needs saltedtable's own read path: {reason}")
        return table.read_rows_stream  # type: ignore[no-any-return]
    # (The client's table the method is bound to: ``table`` itself, or the one a
    # proxy forwards to.)
    table = table.read_rows_stream.__self__
    read_class = _ReversedReadRows if reverse else _MergedReadRows
    # (The client's own read_rows_stream, but for the operation's class.)

    async def read_rows_stream(
        query: Any,
        *,
        operation_timeout: Any = _DEFAULT,
        attempt_timeout: Any = _DEFAULT,
        retryable_errors: Any = _DEFAULT,
    ) -> AsyncIterable[Row]:
        operation, attempt = _get_timeouts(operation_timeout, attempt_timeout, table)
        retryable = _get_retryable_errors(retryable_errors, table)
        op = read_class(
            query,
            table,
            operation_timeout=operation,
            attempt_timeout=attempt,
            metric=table._create_operation(OperationType.READ_ROWS, is_streaming=True),
            retryable_exceptions=retryable,
        )
        if reverse:
            op.request.reversed = True
        return op.start_operation()

    return read_rows_stream
