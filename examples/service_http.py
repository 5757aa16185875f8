"""The HTTP side of examples/service.py: strict request parsing, JSON rows and errors.

Nothing here knows Bigtable beyond the row type: the app in ``service.py`` takes
what the request carries (:func:`row_key`, :func:`query_params`, :func:`read_body`,
:func:`take_bytes`), answers rows (:func:`row_to_json`, :class:`NDJSONRows`) and
leaves every failure to :data:`ERROR_HANDLERS`, which answer it as JSON.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, Final, NoReturn, cast, final

import anyio
from google.api_core.exceptions import DeadlineExceeded, GoogleAPICallError, InvalidArgument
from google.cloud.bigtable.data.row import Row
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from saltedtable import QueryPlanError, RowKeyError

__all__ = [
    "ERROR_HANDLERS",
    "JSONErrorH11Protocol",
    "NDJSONRows",
    "Refused",
    "ScanAborted",
    "error_response",
    "parse_json",
    "positive_int",
    "query_params",
    "read_body",
    "row_key",
    "row_to_json",
    "take_bytes",
]

_INT64_MAX: Final = 2**63 - 1
_POSITIVE_INT: Final = re.compile(r"[1-9][0-9]*")
_ROWS_PREFIX: Final = b"/rows/"


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


def error_response(status: int, message: str, **extra: Any) -> JSONResponse:
    return _ErrorJSON({"error": message, **extra}, status_code=status)


class Refused(Exception):
    """The request cannot be served as sent: answered with ``status`` (a 4xx) and nothing done."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _text(value: object, name: str) -> str:
    """``value`` as a string that is valid Unicode (JSON can carry lone surrogates)."""
    if not isinstance(value, str):
        raise Refused(f"{name!r} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(
            f"{name!r} is not valid Unicode (it holds a lone surrogate escape); "
            f"send bytes that are not UTF-8 text as '{name}_b64'"
        ) from None
    return value


def take_bytes(body: Mapping[str, Any], name: str) -> bytes:
    """``name`` (UTF-8 text) or ``name_b64`` (base64): exactly one, as bytes."""
    text, b64 = body.get(name), body.get(f"{name}_b64")
    if (text is None) == (b64 is None):
        raise Refused(f"give exactly one of {name!r} (text) or '{name}_b64' (base64)")
    if text is not None:
        return _text(text, name).encode("utf-8")
    try:
        return base64.b64decode(_text(b64, f"{name}_b64"), validate=True)
    except binascii.Error:
        raise Refused(f"'{name}_b64' is not valid base64") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise Refused(f"the JSON body names {name!r} twice")
        out[name] = value
    return out


def _no_constant(name: str) -> NoReturn:
    raise Refused(f"the body is not JSON: {name} is not a JSON value")


def parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no duplicate names, no NaN/Infinity; nesting too deep is refused."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("the body is not UTF-8 text") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise Refused("the body is not a JSON object: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise Refused(f"the body is not valid JSON: {exc}") from None


# -- what the request carries --------------------------------------------------------


#: A ``%`` that does not start a percent-escape (two hex digits).
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def _check_escapes(raw: bytes, where: str) -> None:
    """Refuse a stray ``%``: decoders keep it literally, naming another key than meant."""
    bad = _BAD_ESCAPE.search(raw)
    if bad is not None:
        shown = raw[bad.start() : bad.start() + 3]
        raise Refused(
            f"the {where} has a malformed percent-escape {shown!r} (write a literal % as %25)"
        )


def query_params(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    """The query parameters, decoded strictly as UTF-8; unknown or repeated ones refused."""
    raw_bytes = cast(bytes, request.scope.get("query_string", b""))
    _check_escapes(raw_bytes, "query string")
    raw = raw_bytes.decode("ascii", "replace")
    try:
        pairs = urllib.parse.parse_qsl(
            raw, keep_blank_values=True, strict_parsing=bool(raw), errors="strict"
        )
    except UnicodeDecodeError:
        raise Refused("the query string is not UTF-8 once percent-decoded") from None
    except ValueError:
        raise Refused(f"the query string is malformed: {raw!r}") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise Refused(f"unknown query parameter {name!r} (this route takes: {known})")
        if name in params:
            raise Refused(f"the query parameter {name!r} is given more than once")
        params[name] = value
    return params


def row_key(request: Request) -> bytes:
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
        raise Refused(f"the path must start with /rows/, got {path!r}")
    key = path[len(_ROWS_PREFIX) :]
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"row keys are UTF-8 text; the key in the path is not: {key!r}") from None
    return key


async def read_body(request: Request, *, max_bytes: int, seconds: float) -> bytes:
    """The request body: JSON (or untyped), at most ``max_bytes``, within ``seconds``."""
    media = request.headers.get("content-type")
    if media is not None:
        kind, _, params = media.partition(";")
        kind = kind.strip().lower()
        charset = re.search(r"charset\s*=\s*\"?([^\s\";]+)", params, re.IGNORECASE)
        if not (kind == "application/json" or kind.endswith("+json")) or (
            charset is not None and charset.group(1).lower() not in ("utf-8", "utf8")
        ):
            raise Refused(f"send the body as application/json (UTF-8), not {media!r}", 415)
    limit = max_bytes
    declared = request.headers.get("content-length")
    if (
        declared is not None
        and declared.isdigit()
        and (len(declared) > 18 or int(declared) > limit)
    ):
        raise Refused(f"the body is {declared} bytes; at most {limit} are accepted", 413)
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise Refused(f"the body is over {limit} bytes", 413)
                chunks.append(chunk)
    except TimeoutError:
        raise Refused(f"the body did not arrive within {seconds:g} s", 408) from None
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


def positive_int(text: str, name: str) -> int:
    # The length first: int() refuses strings of more than 4300 digits.
    if len(text) > 19 or not _POSITIVE_INT.fullmatch(text) or int(text) > _INT64_MAX:
        raise Refused(f"{name} must be a positive integer, got {text!r}")
    return int(text)


# -- errors ------------------------------------------------------------------------


async def _refused(request: Request, exc: Exception) -> Response:
    return error_response(exc.status if isinstance(exc, Refused) else 400, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own answers (no such route: 404, wrong method: 405) as JSON.
    assert isinstance(exc, HTTPException)
    return _ErrorJSON({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _disconnected(request: Request, exc: Exception) -> Response:
    # The client left while sending its body: nobody reads this answer.
    return error_response(400, "the client disconnected before its body arrived")


def _upstream_status(exc: BaseException) -> int:
    if isinstance(exc, DeadlineExceeded | TimeoutError):
        return 504
    if isinstance(exc, InvalidArgument):
        return 400  # Bigtable refused the request itself (it came from the client's input)
    return 502


async def _upstream_error(request: Request, exc: Exception) -> Response:
    # Bigtable failed (after the client's retries), or one bucket of a scan did.
    return error_response(_upstream_status(exc), str(exc), type=type(exc).__name__)


async def _internal_error(request: Request, exc: Exception) -> Response:
    # A bug: the traceback goes to the log (Starlette re-raises), not to the client.
    return error_response(500, "internal error", type=type(exc).__name__)


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


#: What the app answers for each exception a route may raise (every answer is JSON).
ERROR_HANDLERS: Final[Mapping[Any, Callable[[Request, Exception], Awaitable[Response]]]] = {
    Refused: _refused,
    RowKeyError: _refused,
    QueryPlanError: _refused,
    ClientDisconnect: _disconnected,
    HTTPException: _http_error,
    GoogleAPICallError: _upstream_error,
    TimeoutError: _upstream_error,
    Exception: _internal_error,
}
