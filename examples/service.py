"""saltedtable example service: point reads and streamed prefix scans over HTTP.

A small Starlette app served by uvicorn. One ``BigtableDataClientAsync`` and one
``SaltedTableAsync`` live as long as the app (Starlette lifespan). Routes::

    GET /rows/{key}                          one row as JSON, or 404
    PUT /rows/{key}   {"family", "qualifier", "value"}   write one cell (204)
    GET /scan?prefix=P[&limit=N][&ordered=true|false]    rows as NDJSON, one per line

Keys are UTF-8 text in the URL (percent-encode ``#`` as ``%23``). In the JSON,
every bytes field (``key``, ``qualifier``, ``value``) is text when it is valid
UTF-8; otherwise it is named ``<field>_b64`` and holds base64. PUT takes the
same two spellings. A scan that fails after rows were sent ends with an
``{"error": ...}`` line and an aborted (unterminated) chunked response, so a
client can never take a partial scan for a complete one. A client that hangs up
mid-scan cancels every sub-scan at once.

Run it against the local emulator (started and stopped around the service)::

    saltedtable emulator --table quickstart:cf -- python examples/service.py

or against Cloud Bigtable with the settings of ``examples/quickstart.py``::

    export SALTEDTABLE_PROJECT=my-project SALTEDTABLE_INSTANCE=my-instance
    export SALTEDTABLE_TABLE=quickstart SALTEDTABLE_BUCKETS=8  # the scheme of the data
    python examples/service.py            # http://127.0.0.1:8080, PORT= to change

It listens on 127.0.0.1 only: an example, with no authentication.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, cast, final

from google.api_core.exceptions import GoogleAPICallError
from google.cloud.bigtable.data import BigtableDataClientAsync, SetCell
from google.cloud.bigtable.data.row import Row
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from saltedtable import (
    QueryPlanError,
    RowKeyError,
    SaltedTableAsync,
    SaltScheme,
    TableLike,
)

__all__ = ["NDJSONRows", "ScanAborted", "Settings", "create_app", "main", "row_to_json"]

HOST: Final = "127.0.0.1"  # loopback only: this example has no authentication
_INT64_MAX: Final = 2**63 - 1
_POSITIVE_INT: Final = re.compile(r"[1-9][0-9]*")

TableWrapper = Callable[[TableLike], TableLike]


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """Where the table is and how its keys are salted."""

    project: str = "test-project"
    instance: str = "test-instance"
    table: str = "quickstart"
    buckets: int = 8
    hash: str = "crc32"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Read ``SALTEDTABLE_PROJECT``/``INSTANCE``/``TABLE``/``BUCKETS``/``HASH``.

        Raises:
            ValueError: ``SALTEDTABLE_BUCKETS`` is not an integer.
        """
        default = cls()
        buckets = environ.get("SALTEDTABLE_BUCKETS", str(default.buckets))
        try:
            bucket_count = int(buckets)
        except ValueError:
            raise ValueError(f"SALTEDTABLE_BUCKETS must be an integer, got {buckets!r}") from None
        return cls(
            project=environ.get("SALTEDTABLE_PROJECT", default.project),
            instance=environ.get("SALTEDTABLE_INSTANCE", default.instance),
            table=environ.get("SALTEDTABLE_TABLE", default.table),
            buckets=bucket_count,
            hash=environ.get("SALTEDTABLE_HASH", default.hash),
        )

    def scheme(self) -> SaltScheme:
        """The salt scheme; the data must have been written with the same one."""
        return SaltScheme(self.buckets, hash=self.hash)


# -- JSON -----------------------------------------------------------------------


def _put_bytes(out: dict[str, Any], name: str, data: bytes) -> None:
    try:
        out[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[f"{name}_b64"] = base64.b64encode(data).decode("ascii")


def row_to_json(row: Row) -> dict[str, Any]:
    """A row as JSON: ``{"key", "cells": [{"family", "qualifier", "value", "timestamp_micros"}]}``.

    Bytes fields are text when they are valid UTF-8, else ``<field>_b64`` in base64.
    """
    out: dict[str, Any] = {}
    _put_bytes(out, "key", row.row_key)
    cells = []
    for cell in row.cells:
        entry: dict[str, Any] = {"family": cell.family}
        _put_bytes(entry, "qualifier", cell.qualifier)
        _put_bytes(entry, "value", cell.value)
        entry["timestamp_micros"] = cell.timestamp_micros
        if cell.labels:
            entry["labels"] = list(cell.labels)
        cells.append(entry)
    out["cells"] = cells
    return out


def _line(row: Row) -> bytes:
    # The same encoding as JSONResponse, one object per line.
    return json.dumps(row_to_json(row), ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


class _BadRequest(Exception):
    """The request cannot be served as sent (answered with 400)."""


def _take_bytes(body: Mapping[str, Any], name: str) -> bytes:
    """``name`` (UTF-8 text) or ``name_b64`` (base64): exactly one, as bytes."""
    text, b64 = body.get(name), body.get(f"{name}_b64")
    if (text is None) == (b64 is None):
        raise _BadRequest(f"give exactly one of {name!r} (text) or '{name}_b64' (base64)")
    if text is not None:
        if not isinstance(text, str):
            raise _BadRequest(f"{name!r} must be a string")
        return text.encode("utf-8")
    if not isinstance(b64, str):
        raise _BadRequest(f"'{name}_b64' must be a string")
    try:
        return base64.b64decode(b64, validate=True)
    except binascii.Error:
        raise _BadRequest(f"'{name}_b64' is not valid base64") from None


# -- the streamed scan ------------------------------------------------------------


class ScanAborted(Exception):
    """A scan failed after its response started; the response is aborted (``__cause__``: why)."""


@final
class NDJSONRows(StreamingResponse):
    """Rows as NDJSON; whatever ends the response, the scan is closed before it returns.

    Starlette cancels a streaming response when the client disconnects, but it
    never closes ``body_iterator``: cancelled while awaiting ``send``, the
    generator would stay suspended until the garbage collector finalises it,
    and with it every sub-scan of the merge. Closing the scan here, around the
    whole ASGI call, runs ``aclose()`` in this task at once, including when
    the response is cancelled before it sent anything.
    """

    media_type = "application/x-ndjson"

    def __init__(self, rows: AsyncIterator[Row], first: Row | None) -> None:
        # read_prefix returns an async generator (annotated as an AsyncIterator).
        self._rows = cast(AsyncGenerator[Row, None], rows)
        self._body = self._lines(first)
        super().__init__(self._body)

    async def _lines(self, first: Row | None) -> AsyncGenerator[bytes, None]:
        if first is None:
            return
        yield _line(first)
        try:
            async for row in self._rows:
                yield _line(row)
        except Exception as exc:
            # The 200 is already sent. Say what happened, then abort the
            # response: no terminating chunk, so no client can take the rows it
            # got for the whole answer. (A new type: the handlers that turn
            # these errors into a status cannot apply any more.)
            yield json.dumps({"error": str(exc), "type": type(exc).__name__}).encode() + b"\n"
            raise ScanAborted(f"scan failed after the response started: {exc}") from exc

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with aclosing(self._rows), aclosing(self._body):
            await super().__call__(scope, receive, send)


def _positive_int(text: str, name: str) -> int:
    if not _POSITIVE_INT.fullmatch(text) or int(text) > _INT64_MAX:
        raise _BadRequest(f"{name} must be a positive integer, got {text!r}")
    return int(text)


async def scan(request: Request) -> Response:
    """``GET /scan?prefix=P&limit=N&ordered=true|false``: the rows under ``P`` as NDJSON."""
    table: SaltedTableAsync = request.state.table
    params = request.query_params
    if "prefix" not in params:
        raise _BadRequest("the query parameter 'prefix' is required ('prefix=' scans everything)")
    prefix = params["prefix"].encode("utf-8")
    limit = None if "limit" not in params else _positive_int(params["limit"], "limit")
    ordered_text = params.get("ordered", "true").lower()
    if ordered_text not in ("true", "false"):
        raise _BadRequest(f"ordered must be true or false, got {params['ordered']!r}")
    # Planning happens in read_prefix: a key or range the scheme cannot take
    # raises here, before any status is sent (answered with 400 below).
    rows = table.read_prefix(prefix, limit=limit, ordered=ordered_text == "true")
    # Wait for the first row before answering: a scan that cannot start (a
    # missing table, a failing bucket) gets an error status instead of a 200
    # that ends early, and the stream handed to the response has started, so
    # closing it always closes its sub-scans. An exception here has already
    # closed the stream (it left the generator).
    first = await anext(rows, None)
    return NDJSONRows(rows, first)


# -- point reads and writes --------------------------------------------------------


async def get_row(request: Request) -> Response:
    """``GET /rows/{key}``: the row as JSON, or 404."""
    table: SaltedTableAsync = request.state.table
    key: str = request.path_params["key"]
    row = await table.read_row(key.encode("utf-8"))
    if row is None:
        return _error(404, "row not found", key=key)
    return JSONResponse(row_to_json(row))


async def put_row(request: Request) -> Response:
    """``PUT /rows/{key}`` with ``{"family", "qualifier", "value"}``: write one cell (204)."""
    table: SaltedTableAsync = request.state.table
    key: str = request.path_params["key"]
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise _BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise _BadRequest("the body must be a JSON object")
    family = body.get("family")
    if not isinstance(family, str) or not family:
        raise _BadRequest("'family' must be a non-empty string")
    cell = SetCell(family, _take_bytes(body, "qualifier"), _take_bytes(body, "value"))
    await table.mutate_row(key.encode("utf-8"), cell)
    return Response(status_code=204)


# -- errors ------------------------------------------------------------------------


async def _bad_request(request: Request, exc: Exception) -> Response:
    return _error(400, str(exc))


async def _upstream_error(request: Request, exc: Exception) -> Response:
    # Bigtable failed (after the client's retries), or one bucket of a scan did.
    return _error(502, str(exc), type=type(exc).__name__)


# -- the app -----------------------------------------------------------------------


def create_app(
    settings: Settings | None = None, *, wrap_table: TableWrapper | None = None
) -> Starlette:
    """Build the service.

    Args:
        settings: Table and scheme; :meth:`Settings.from_env` when None.
        wrap_table: Wraps the Bigtable table before it is salted (a seam for
            instrumentation and tests: anything implementing ``TableLike``).

    Returns:
        The Starlette app; its lifespan opens and closes the client and table.
    """
    config = Settings.from_env() if settings is None else settings
    scheme = config.scheme()  # a bad scheme fails here, not at the first request

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                BigtableDataClientAsync(project=config.project)
            )
            raw: TableLike = client.get_table(config.instance, config.table)
            if wrap_table is not None:
                raw = wrap_table(raw)
            table = await stack.enter_async_context(SaltedTableAsync(raw, scheme))
            yield {"table": table}

    return Starlette(
        routes=[
            Route("/rows/{key:path}", get_row, methods=["GET"]),
            Route("/rows/{key:path}", put_row, methods=["PUT"]),
            Route("/scan", scan, methods=["GET"]),
        ],
        exception_handlers={
            _BadRequest: _bad_request,
            RowKeyError: _bad_request,
            QueryPlanError: _bad_request,
            GoogleAPICallError: _upstream_error,
        },
        lifespan=lifespan,
    )


def main() -> None:
    """Serve on 127.0.0.1:$PORT (default 8080) until interrupted."""
    import uvicorn

    if os.environ.get("BIGTABLE_EMULATOR_HOST"):
        # The client warns that it talks to an emulator; that is the point here.
        warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
    port = int(os.environ.get("PORT", "8080"))
    uvicorn.run(create_app(), host=HOST, port=port)


if __name__ == "__main__":
    main()
