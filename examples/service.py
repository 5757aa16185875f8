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

import os
import re
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, final

from google.cloud.bigtable.data import BigtableDataClientAsync, SetCell

# service_http.py lies beside this file (python puts a script's folder on sys.path).
from service_http import (
    ERROR_HANDLERS,
    JSONErrorH11Protocol,
    NDJSONRows,
    Refused,
    ScanAborted,
    error_response,
    parse_json,
    positive_int,
    query_params,
    read_body,
    row_key,
    row_to_json,
    take_bytes,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from saltedtable import SaltedTableAsync, SaltScheme, TableLikeAsync

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
#: Bigtable's rule for column family names.
_FAMILY_NAME: Final = re.compile(r"[-_.a-zA-Z0-9]{1,64}")
_SCAN_PARAMS: Final = frozenset({"prefix", "limit", "ordered"})
_CELL_FIELDS: Final = frozenset({"family", "qualifier", "qualifier_b64", "value", "value_b64"})

TableWrapper = Callable[[TableLikeAsync], TableLikeAsync]


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


async def scan(request: Request) -> Response:
    """``GET /scan?prefix=P&limit=N&ordered=true|false``: the rows under ``P`` as NDJSON."""
    table: SaltedTableAsync = request.state.table
    params = query_params(request, _SCAN_PARAMS)
    if "prefix" not in params:
        raise Refused("the query parameter 'prefix' is required ('prefix=' scans everything)")
    prefix = params["prefix"].encode("utf-8")
    limit = None if "limit" not in params else positive_int(params["limit"], "limit")
    ordered_text = params.get("ordered", "true").lower()
    if ordered_text not in ("true", "false"):
        raise Refused(f"ordered must be true or false, got {params['ordered']!r}")
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
    query_params(request, frozenset())
    key = row_key(request)
    row = await table.read_row(key)
    if row is None:
        return error_response(404, "row not found", key=key.decode("utf-8"))
    return JSONResponse(row_to_json(row))


async def put_row(request: Request) -> Response:
    """``PUT /rows/{key}`` with ``{"family", "qualifier", "value"}``: write one cell (204)."""
    table: SaltedTableAsync = request.state.table
    settings: Settings = request.state.settings
    query_params(request, frozenset())
    key = row_key(request)
    body = parse_json(
        await read_body(request, max_bytes=settings.max_body_bytes, seconds=settings.body_timeout)
    )
    if not isinstance(body, dict):
        raise Refused("the body must be a JSON object")
    unknown = sorted(set(body) - _CELL_FIELDS)
    if unknown:
        raise Refused(f"unknown fields {unknown} (a cell has: {', '.join(sorted(_CELL_FIELDS))})")
    family = body.get("family")
    if not isinstance(family, str) or not family:
        raise Refused("'family' must be a non-empty string")
    if family not in settings.families:
        raise Refused(
            f"unknown column family {family!r}; this table has: {', '.join(settings.families)}"
        )
    cell = SetCell(family, take_bytes(body, "qualifier"), take_bytes(body, "value"))
    await table.mutate_row(key, cell)
    return Response(status_code=204)


async def _rows(request: Request) -> Response:
    return await (put_row if request.method == "PUT" else get_row)(request)


# -- the app -----------------------------------------------------------------------


def create_app(
    settings: Settings | None = None, *, wrap_table: TableWrapper | None = None
) -> Starlette:
    """Build the service.

    Args:
        settings: Table, scheme and request limits; :meth:`Settings.from_env` when None.
        wrap_table: Wraps the Bigtable table before it is salted (a seam for
            instrumentation and tests: anything implementing ``TableLikeAsync``).

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
            raw: TableLikeAsync = client.get_table(config.instance, config.table)
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
        exception_handlers=dict(ERROR_HANDLERS),
        lifespan=lifespan,
    )
    # "/scan/" is not "/scan": a JSON 404, not a redirect.
    app.router.redirect_slashes = False
    return app


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
