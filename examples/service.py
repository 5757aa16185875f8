"""saltedtable example service: point reads and streamed prefix scans over HTTP.

A small Starlette app served by uvicorn. One ``BigtableDataClientAsync`` and one
``SaltedTableAsync`` live as long as the app (Starlette lifespan). Routes::

    GET /rows/{key}                          one row as JSON, or 404
    PUT /rows/{key}   {"family", "qualifier", "value"}   write one cell (204)
    GET /scan?prefix=P[&limit=N][&ordered=true|false]    rows as NDJSON, one per line

Keys are UTF-8 text in the URL (percent-encode ``#`` as ``%23``). In the JSON,
every bytes field (``key``, ``qualifier``, ``value``) is text when it is valid
UTF-8; otherwise it is named ``<field>_b64`` and holds base64. PUT takes the
same two spellings. Every error is a JSON object ``{"error": "..."}`` with a 4xx
(the request's fault: it changed nothing) or 5xx status; docs/service.md lists
them. A scan that fails after rows were sent ends with an ``{"error": ...}``
line and an aborted (unterminated) chunked response, so a client can never take
a partial scan for a complete one. A client that hangs up mid-scan cancels every
sub-scan at once.

Run it against the local emulator (started and stopped around the service)::

    saltedtable emulator --table quickstart:cf -- python examples/service.py

or against Cloud Bigtable with the settings of ``examples/quickstart.py``::

    export SALTEDTABLE_PROJECT=my-project SALTEDTABLE_INSTANCE=my-instance
    export SALTEDTABLE_TABLE=quickstart SALTEDTABLE_BUCKETS=8  # the scheme of the data
    export SALTEDTABLE_FAMILIES=cf        # the column families PUT may write
    python examples/service.py            # http://127.0.0.1:8080, PORT= to change

It listens on 127.0.0.1 only: an example, with no authentication.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import urllib.parse
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, NoReturn, cast, final

import anyio
from google.api_core.exceptions import DeadlineExceeded, GoogleAPICallError, InvalidArgument
from google.cloud.bigtable.data import BigtableDataClientAsync, SetCell
from google.cloud.bigtable.data.row import Row
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from saltedtable import (
    QueryPlanError,
    RowKeyError,
    SaltedTableAsync,
    SaltScheme,
    TableLike,
)

__all__ = [
    "JSONErrorH11Protocol",
    "NDJSONRows",
    "ScanAborted",
    "Settings",
    "create_app",
    "main",
    "row_to_json",
    "uvicorn_config",
]

HOST: Final = "127.0.0.1"  # loopback only: this example has no authentication
_INT64_MAX: Final = 2**63 - 1
_POSITIVE_INT: Final = re.compile(r"[1-9][0-9]*")
#: Bigtable's rule for column family names.
_FAMILY_NAME: Final = re.compile(r"[-_.a-zA-Z0-9]{1,64}")
_ROWS_PREFIX: Final = b"/rows/"
_SCAN_PARAMS: Final = frozenset({"prefix", "limit", "ordered"})
_CELL_FIELDS: Final = frozenset({"family", "qualifier", "qualifier_b64", "value", "value_b64"})

TableWrapper = Callable[[TableLike], TableLike]


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """Where the table is, how its keys are salted, and what a request may send."""

    project: str = "test-project"
    instance: str = "test-instance"
    table: str = "quickstart"
    buckets: int = 8
    hash: str = "crc32"
    #: The column families PUT may write: the table's (Bigtable's own answer to
    #: an unknown family cannot be told from other failures; see docs/service.md).
    families: tuple[str, ...] = ("cf",)
    #: The largest request body accepted (413 beyond).
    max_body_bytes: int = 1024 * 1024
    #: Seconds a client may take to send its body (408 beyond).
    body_timeout: float = 10.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Read ``SALTEDTABLE_PROJECT``/``INSTANCE``/``TABLE``/``BUCKETS``/``HASH``/``FAMILIES``.

        ``SALTEDTABLE_FAMILIES`` is comma-separated.

        Raises:
            ValueError: ``SALTEDTABLE_BUCKETS`` is not an integer, or a family
                name is not one Bigtable allows.
        """
        default = cls()
        buckets = environ.get("SALTEDTABLE_BUCKETS", str(default.buckets))
        try:
            bucket_count = int(buckets)
        except ValueError:
            raise ValueError(f"SALTEDTABLE_BUCKETS must be an integer, got {buckets!r}") from None
        families = environ.get("SALTEDTABLE_FAMILIES", ",".join(default.families))
        names = tuple(name.strip() for name in families.split(",") if name.strip())
        bad = [name for name in names if not _FAMILY_NAME.fullmatch(name)]
        if bad or not names:
            raise ValueError(f"SALTEDTABLE_FAMILIES must name column families, got {families!r}")
        return cls(
            project=environ.get("SALTEDTABLE_PROJECT", default.project),
            instance=environ.get("SALTEDTABLE_INSTANCE", default.instance),
            table=environ.get("SALTEDTABLE_TABLE", default.table),
            buckets=bucket_count,
            hash=environ.get("SALTEDTABLE_HASH", default.hash),
            families=names,
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


class _ErrorJSON(JSONResponse):
    """An error body, ASCII-escaped: its message may quote client input, lone surrogates too."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return _ErrorJSON({"error": message, **extra}, status_code=status)


class _Refused(Exception):
    """The request cannot be served as sent: answered with ``status`` (a 4xx) and nothing done."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _text(value: object, name: str) -> str:
    """``value`` as a string that is valid Unicode (JSON can carry lone surrogates)."""
    if not isinstance(value, str):
        raise _Refused(f"{name!r} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refused(
            f"{name!r} is not valid Unicode (it holds a lone surrogate escape); "
            f"send bytes that are not UTF-8 text as '{name}_b64'"
        ) from None
    return value


def _take_bytes(body: Mapping[str, Any], name: str) -> bytes:
    """``name`` (UTF-8 text) or ``name_b64`` (base64): exactly one, as bytes."""
    text, b64 = body.get(name), body.get(f"{name}_b64")
    if (text is None) == (b64 is None):
        raise _Refused(f"give exactly one of {name!r} (text) or '{name}_b64' (base64)")
    if text is not None:
        return _text(text, name).encode("utf-8")
    try:
        return base64.b64decode(_text(b64, f"{name}_b64"), validate=True)
    except binascii.Error:
        raise _Refused(f"'{name}_b64' is not valid base64") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise _Refused(f"the JSON body names {name!r} twice")
        out[name] = value
    return out


def _no_constant(name: str) -> NoReturn:
    raise _Refused(f"the body is not JSON: {name} is not a JSON value")


def _parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no duplicate names, no NaN/Infinity; nesting too deep is refused."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("the body is not UTF-8 text") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise _Refused("the body is not a JSON object: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise _Refused(f"the body is not valid JSON: {exc}") from None


# -- what the request carries --------------------------------------------------------


#: A ``%`` that does not start a percent-escape (two hex digits).
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def _check_escapes(raw: bytes, where: str) -> None:
    """Refuse a stray ``%``: decoders keep it literally, naming another key than meant."""
    bad = _BAD_ESCAPE.search(raw)
    if bad is not None:
        shown = raw[bad.start() : bad.start() + 3]
        raise _Refused(
            f"the {where} has a malformed percent-escape {shown!r} (write a literal % as %25)"
        )


def _query(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    """The query parameters, decoded strictly as UTF-8; unknown or repeated ones refused."""
    raw_bytes = cast(bytes, request.scope.get("query_string", b""))
    _check_escapes(raw_bytes, "query string")
    raw = raw_bytes.decode("ascii", "replace")
    try:
        pairs = urllib.parse.parse_qsl(
            raw, keep_blank_values=True, strict_parsing=bool(raw), errors="strict"
        )
    except UnicodeDecodeError:
        raise _Refused("the query string is not UTF-8 once percent-decoded") from None
    except ValueError:
        raise _Refused(f"the query string is malformed: {raw!r}") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise _Refused(f"unknown query parameter {name!r} (this route takes: {known})")
        if name in params:
            raise _Refused(f"the query parameter {name!r} is given more than once")
        params[name] = value
    return params


def _row_key(request: Request) -> bytes:
    """The row key of ``/rows/{key}``: the raw path's bytes, percent-decoded, UTF-8 checked.

    Starlette's decoded path replaces bytes that are not UTF-8 (``%FF``) with
    U+FFFD, which would write another row than the client named.
    """
    scope = request.scope
    raw = scope.get("raw_path")
    if raw is None:  # an ASGI server that does not send it: the decoded path is all there is
        path = cast(str, scope["path"]).encode("utf-8", "surrogateescape")
    else:
        _check_escapes(cast(bytes, raw), "path")
        path = urllib.parse.unquote_to_bytes(cast(bytes, raw))
    root = cast(str, scope.get("root_path", "")).encode("utf-8")
    if path.startswith(root):
        path = path[len(root) :]
    if not path.startswith(_ROWS_PREFIX):
        raise _Refused(f"the path must start with /rows/, got {path!r}")
    key = path[len(_ROWS_PREFIX) :]
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"row keys are UTF-8 text; the key in the path is not: {key!r}") from None
    return key


async def _read_body(request: Request, settings: Settings) -> bytes:
    """The request body: JSON (or untyped), at most ``max_body_bytes``, within ``body_timeout``."""
    media = request.headers.get("content-type")
    if media is not None:
        kind, _, params = media.partition(";")
        kind = kind.strip().lower()
        charset = re.search(r"charset\s*=\s*\"?([^\s\";]+)", params, re.IGNORECASE)
        if not (kind == "application/json" or kind.endswith("+json")) or (
            charset is not None and charset.group(1).lower() not in ("utf-8", "utf8")
        ):
            raise _Refused(f"send the body as application/json (UTF-8), not {media!r}", 415)
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length")
    if (
        declared is not None
        and declared.isdigit()
        and (len(declared) > 18 or int(declared) > limit)
    ):
        raise _Refused(f"the body is {declared} bytes; at most {limit} are accepted", 413)
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(settings.body_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _Refused(f"the body is over {limit} bytes", 413)
                chunks.append(chunk)
    except TimeoutError:
        raise _Refused(f"the body did not arrive within {settings.body_timeout:g} s", 408) from None
    return b"".join(chunks)


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
    # The length first: int() refuses strings of more than 4300 digits.
    if len(text) > 19 or not _POSITIVE_INT.fullmatch(text) or int(text) > _INT64_MAX:
        raise _Refused(f"{name} must be a positive integer, got {text!r}")
    return int(text)


async def scan(request: Request) -> Response:
    """``GET /scan?prefix=P&limit=N&ordered=true|false``: the rows under ``P`` as NDJSON."""
    table: SaltedTableAsync = request.state.table
    params = _query(request, _SCAN_PARAMS)
    if "prefix" not in params:
        raise _Refused("the query parameter 'prefix' is required ('prefix=' scans everything)")
    prefix = params["prefix"].encode("utf-8")
    limit = None if "limit" not in params else _positive_int(params["limit"], "limit")
    ordered_text = params.get("ordered", "true").lower()
    if ordered_text not in ("true", "false"):
        raise _Refused(f"ordered must be true or false, got {params['ordered']!r}")
    if request.method == "HEAD":
        return Response(media_type=NDJSONRows.media_type)  # the headers, without a scan
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
    _query(request, frozenset())
    key = _row_key(request)
    row = await table.read_row(key)
    if row is None:
        return _error(404, "row not found", key=key.decode("utf-8"))
    return JSONResponse(row_to_json(row))


async def put_row(request: Request) -> Response:
    """``PUT /rows/{key}`` with ``{"family", "qualifier", "value"}``: write one cell (204)."""
    table: SaltedTableAsync = request.state.table
    settings: Settings = request.state.settings
    _query(request, frozenset())
    key = _row_key(request)
    body = _parse_json(await _read_body(request, settings))
    if not isinstance(body, dict):
        raise _Refused("the body must be a JSON object")
    unknown = sorted(set(body) - _CELL_FIELDS)
    if unknown:
        raise _Refused(f"unknown fields {unknown} (a cell has: {', '.join(sorted(_CELL_FIELDS))})")
    family = body.get("family")
    if not isinstance(family, str) or not family:
        raise _Refused("'family' must be a non-empty string")
    if family not in settings.families:
        raise _Refused(
            f"unknown column family {family!r}; this table has: {', '.join(settings.families)}"
        )
    cell = SetCell(family, _take_bytes(body, "qualifier"), _take_bytes(body, "value"))
    await table.mutate_row(key, cell)
    return Response(status_code=204)


async def _rows(request: Request) -> Response:
    return await (put_row if request.method == "PUT" else get_row)(request)


# -- errors ------------------------------------------------------------------------


async def _refused(request: Request, exc: Exception) -> Response:
    return _error(exc.status if isinstance(exc, _Refused) else 400, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own answers (no such route: 404, wrong method: 405) as JSON.
    assert isinstance(exc, HTTPException)
    return _ErrorJSON({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _disconnected(request: Request, exc: Exception) -> Response:
    # The client left while sending its body: nobody reads this answer.
    return _error(400, "the client disconnected before its body arrived")


def _upstream_status(exc: BaseException) -> int:
    if isinstance(exc, DeadlineExceeded | TimeoutError):
        return 504
    if isinstance(exc, InvalidArgument):
        return 400  # Bigtable refused the request itself (it came from the client's input)
    return 502


async def _upstream_error(request: Request, exc: Exception) -> Response:
    # Bigtable failed (after the client's retries), or one bucket of a scan did.
    return _error(_upstream_status(exc), str(exc), type=type(exc).__name__)


async def _internal_error(request: Request, exc: Exception) -> Response:
    # A bug: the traceback goes to the log (Starlette re-raises), not to the client.
    return _error(500, "internal error", type=type(exc).__name__)


# -- the app -----------------------------------------------------------------------


def create_app(
    settings: Settings | None = None, *, wrap_table: TableWrapper | None = None
) -> Starlette:
    """Build the service.

    Args:
        settings: Table, scheme and request limits; :meth:`Settings.from_env` when None.
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
            yield {"table": table, "settings": config}

    app = Starlette(
        routes=[
            # One route for both methods, so that a 405 lists both in Allow.
            Route("/rows/{key:path}", _rows, methods=["GET", "PUT"]),
            Route("/scan", scan, methods=["GET"]),
        ],
        exception_handlers={
            _Refused: _refused,
            RowKeyError: _refused,
            QueryPlanError: _refused,
            ClientDisconnect: _disconnected,
            HTTPException: _http_error,
            GoogleAPICallError: _upstream_error,
            TimeoutError: _upstream_error,
            Exception: _internal_error,
        },
        lifespan=lifespan,
    )
    # "/scan/" is not "/scan": a JSON 404, not a redirect.
    app.router.redirect_slashes = False
    return app


class JSONErrorH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, answering a request it cannot parse with a JSON 400.

    uvicorn answers such requests itself, before any application runs, in
    plain text; this override of ``send_400_response`` keeps every error of the
    service JSON (see docs/service.md for the answers no application can shape).
    """

    def send_400_response(self, msg: str) -> None:
        """Answer an unparseable request with ``{"error": ...}`` and close the connection."""
        import h11

        body = json.dumps({"error": f"invalid HTTP request: {msg}"}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def uvicorn_config(app: Starlette, *, port: int, **options: Any) -> Any:
    """The uvicorn configuration the service runs with (``options`` override it)."""
    import uvicorn

    settings: dict[str, Any] = {
        "host": HOST,
        "port": port,
        "http": JSONErrorH11Protocol,
        "ws": "none",
    }
    settings.update(options)
    return uvicorn.Config(app, **settings)


def main() -> None:
    """Serve on 127.0.0.1:$PORT (default 8080) until interrupted."""
    import uvicorn

    if os.environ.get("BIGTABLE_EMULATOR_HOST"):
        # The client warns that it talks to an emulator; that is the point here.
        warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
    port = int(os.environ.get("PORT", "8080"))
    uvicorn.Server(uvicorn_config(create_app(), port=port)).run()


if __name__ == "__main__":
    main()
