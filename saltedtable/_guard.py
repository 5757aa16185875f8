"""The scheme guard: the layout a table was written with, stored in the table.

The bucket count, hash, key part, separator, marker and cutoff are part of
the data's meaning: reading with another scheme silently misses rows.
:func:`describe_layout` turns a layout into a small JSON record, stored in one
reserved row (:data:`SCHEME_ROW_KEY`) of the table's first column family that
a write names.

:class:`TableGuard` does the I/O for one table object: it reads the record on
the object's first operation (one request per object lifetime; concurrent
first operations share it), refuses a different layout with
:class:`~saltedtable.SchemeMismatchError`, and, when the table has no record
yet, stores one with the first write that names a column family. The record
is created only if the row is still empty (a conditional mutation), so two
services starting on a new table at once agree on one record. The decisions
are pure (:func:`guard_action`); the I/O around them is here for async tables
and in ``_sync`` for sync ones.

The reserved row starts with ``0xff 0xfe``: outside every salted prefix range
(decimal prefixes start with a digit, ``-`` or the marker) and excluded from
the legacy side of a cutoff layout, so no read ever returns it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import anyio
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, Mutation, SetCell
from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery, RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsRowLimitFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from ._cutoff import CutoffPolicy
from ._exceptions import LayoutError, SchemeMismatchError
from ._layout import Layout
from ._plan import PageCursor, SubQuery
from ._salt import SCHEME_ROW_KEY, SaltScheme, prefix_end

__all__ = [
    "SCHEME_QUALIFIER",
    "SCHEME_ROW_KEY",
    "TableGuard",
    "decode_layout",
    "describe_layout",
    "encode_layout",
    "family_of",
    "guard_action",
    "layout_differences",
    "layout_offenders",
    "record_of_row",
]

_log = logging.getLogger("saltedtable.guard")

#: The column qualifier of the record.
SCHEME_QUALIFIER: Final = b"scheme"
_VERSION: Final = 1

#: What the guard does next (see :func:`guard_action`).
Action = Literal["ok", "create", "replace", "skip"]


def _callable_name(func: Callable[..., Any] | None) -> str | None:
    if func is None:
        return None
    if dataclasses.is_dataclass(func):
        return repr(func)  # the ready-made key parts and readers: a stable repr
    module = getattr(func, "__module__", None) or type(func).__module__
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{module}.{name}"


def describe_layout(scheme: SaltScheme, cutoff: CutoffPolicy | None = None) -> dict[str, Any]:
    """The JSON-friendly record of a layout (what a reader must agree on)."""
    record: dict[str, Any] = {
        "version": _VERSION,
        "buckets": scheme.buckets,
        "hash": scheme.hash,
        "key_part": _callable_name(scheme.key_part),
        "separator": scheme.separator.hex(),
        "marker": scheme.marker.hex(),
        "cutoff": None,
    }
    if cutoff is not None:
        record["cutoff"] = {
            "at": cutoff.cutoff.isoformat(),
            "at_micros": cutoff.cutoff_micros,
            "timestamp": _callable_name(cutoff.timestamp),
            "unreadable": cutoff.unreadable,
        }
    return record


def encode_layout(record: dict[str, Any]) -> bytes:
    """The stored form of a record."""
    return json.dumps(record, sort_keys=True).encode()


def decode_layout(value: bytes) -> dict[str, Any]:
    """Parse a stored record.

    Raises:
        LayoutError: The reserved row holds something that is not a record.
    """
    try:
        record = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutError(
            f"the reserved row {SCHEME_ROW_KEY!r} holds {value[:80]!r}, not a layout record"
        ) from exc
    if not isinstance(record, dict) or "buckets" not in record:
        raise LayoutError(f"the reserved row {SCHEME_ROW_KEY!r} holds {record!r}")
    return record


def layout_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human-readable differences between two records (empty when they agree).

    The cutoff's ``at`` text is not compared, only the instant it names.
    """
    diffs = []
    for name in sorted(stored.keys() | current.keys()):
        if name == "version":
            continue
        a, b = stored.get(name), current.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            a = {k: v for k, v in a.items() if k != "at"}
            b = {k: v for k, v in b.items() if k != "at"}
        if a != b:
            diffs.append(f"{name}: stored {a!r}, now {b!r}")
    return diffs


def record_of_row(row: Row | None) -> dict[str, Any] | None:
    """The layout record stored in the reserved row, or None if there is none."""
    if row is None:
        return None
    cells = [c for c in row.cells if c.qualifier == SCHEME_QUALIFIER]
    if not cells:
        return None
    newest = max(cells, key=lambda c: c.timestamp_micros)
    return decode_layout(newest.value)


def guard_action(
    stored: dict[str, Any] | None,
    current: dict[str, Any],
    *,
    family: str | None,
    override: bool = False,
) -> Action:
    """What the guard must do about a table's stored record.

    Args:
        stored: The record found in the table (None: none yet).
        current: The record of the layout the table object was made with.
        family: A column family to store a record in (None: none known yet).
        override: Replace a different stored record instead of refusing.

    Returns:
        ``"ok"`` (the records agree), ``"create"`` (store the record: there is
        none and a family is known), ``"skip"`` (none stored and no family to
        store it in yet) or ``"replace"`` (override a different record).

    Raises:
        SchemeMismatchError: The records differ and ``override`` is False.
        LayoutError: ``override`` without a family to store the new record in.
    """
    if stored is None:
        return "create" if family is not None else "skip"
    if not layout_differences(stored, current):
        return "ok"
    if not override:
        raise SchemeMismatchError(stored, current)
    if family is None:
        raise LayoutError("override_scheme=True needs family= to store the new layout record")
    return "replace"


def family_of(mutations: Mutation | Sequence[Mutation]) -> str | None:
    """The first column family a mutation (or list of mutations) names, if any."""
    for mutation in mutations if isinstance(mutations, Sequence) else (mutations,):
        family = getattr(mutation, "family", None)
        if isinstance(family, str) and family:
            return family
    return None


def _record_cell(family: str, record: dict[str, Any]) -> SetCell:
    return SetCell(family, SCHEME_QUALIFIER, encode_layout(record))


#: Keys only: what the layout sampling needs of each row.
KEYS_ONLY: Final = RowFilterChain([CellsRowLimitFilter(1), StripValueTransformerFilter(True)])


def sample_queries(layout: Layout, sample_rows: int) -> list[ReadRowsQuery]:
    """The reads :func:`layout_offenders` judges: the first rows of each salt prefix, and beyond."""
    queries = [
        ReadRowsQuery(
            row_ranges=RowRange(prefix, prefix_end(prefix) or None),
            limit=sample_rows,
            row_filter=KEYS_ONLY,
        )
        for prefix in layout.scheme.prefixes
    ]
    # Rows outside every salt prefix: the legacy side of a cutoff layout, and
    # otherwise rows this scheme never writes (unsalted data, or another bucket
    # count: 16 buckets write "07-", 8 write "7-").
    outside = PageCursor(SubQuery(None, b"", (), layout.legacy_gaps(), KEYS_ONLY))
    query = outside.next_query(sample_rows)
    if query is not None:
        queries.append(query)
    return queries


def layout_offenders(layout: Layout, samples: Sequence[Sequence[bytes]]) -> list[str]:
    """Why sampled keys do not fit the layout (empty: they all fit).

    ``samples`` holds the keys each query of :func:`sample_queries` returned, in order.
    """
    offenders: list[str] = []
    prefixes = len(layout.scheme.prefixes)
    for i, keys in enumerate(samples):
        check = layout.misplaced if i < prefixes else layout.unexpected_outside
        offenders.extend(p for key in keys if (p := check(key)) is not None)
    return offenders


def layout_error(layout: Layout, offenders: Sequence[str]) -> LayoutError:
    """The error for sampled rows that do not fit the layout."""
    shown = "\n  ".join(offenders[:5])
    cutoff = "" if layout.cutoff is None else " with " + repr(layout.cutoff)
    return LayoutError(
        f"{len(offenders)} sampled row(s) do not fit the layout of {layout.scheme}{cutoff}, "
        f"e.g.\n  {shown}\nIf these are older unsalted keys that look salted, give the "
        "scheme a marker (SaltScheme(..., marker=b'~')) so salted keys cannot meet them; if "
        "the table was written with another bucket count or hash, open it with that scheme."
    )


class TableGuard:
    """The guard of one async table object: check once, store the record on the first write.

    Args:
        table: The physical table.
        layout: The layout the table object uses.
        enabled: False switches the guard off (nothing is read or written).
    """

    def __init__(self, table: Any, layout: Layout, *, enabled: bool = True) -> None:
        self._table = table
        self._layout = layout
        self._record = describe_layout(layout.scheme, layout.cutoff)
        # The reserved row lies inside a salt prefix range for some schemes
        # (a raw phoenix byte 0xff): such tables cannot hold a record.
        self._storable = not layout.scheme.has_prefix(SCHEME_ROW_KEY)
        self._enabled = enabled and self._storable
        self._stored: dict[str, Any] | None = None
        self._checked = False
        self._settled = not self._enabled  # a record is known to agree (or the guard is off)
        self._error: BaseException | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def record(self) -> dict[str, Any]:
        """The record of this table object's layout."""
        return self._record

    async def check(self) -> None:
        """Before any operation: read the stored record once and refuse a different one."""
        if self._settled:
            return
        if self._error is not None:
            raise self._error
        if self._checked:
            return
        async with self._locked():
            if not self._checked:
                await self._read_and_judge(family=None)

    async def before_write(self, family: str | None) -> None:
        """Before a write: check, and store the record if the table has none yet."""
        if self._settled:
            return
        await self.check()
        if self._settled or family is None:
            return
        async with self._locked():
            if not self._settled:
                await self._read_and_judge(family=family)

    async def ensure(self, *, family: str | None, override: bool = False) -> None:
        """The explicit guard (``guard_scheme``): check, store if absent, or replace."""
        if not self._storable:
            if family is not None or override:
                raise LayoutError(
                    f"{self._layout.scheme} has a prefix covering the reserved row "
                    f"{SCHEME_ROW_KEY!r}, so the layout cannot be stored; give the scheme a "
                    "marker or open without family="
                )
            return
        async with self._locked():
            self._error = None
            await self._read_and_judge(family=family, override=override)

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _stored_record(self) -> dict[str, Any] | None:
        return record_of_row(await self._table.read_row(SCHEME_ROW_KEY))

    async def _read_and_judge(self, *, family: str | None, override: bool = False) -> None:
        try:
            stored = await self._stored_record()
            action = guard_action(stored, self._record, family=family, override=override)
            if action == "create":
                # Only if the row is still empty: two writers agree on one record.
                assert family is not None
                await self._table.check_and_mutate_row(
                    SCHEME_ROW_KEY,
                    None,
                    false_case_mutations=[_record_cell(family, self._record)],
                )
                stored = await self._stored_record()
                if stored is None:
                    raise LayoutError(f"the layout record {SCHEME_ROW_KEY!r} did not persist")
                guard_action(stored, self._record, family=family)  # the other writer's?
            elif action == "replace":
                assert family is not None
                _log.warning("replacing the stored salt layout %s with %s", stored, self._record)
                await self._table.mutate_row(
                    SCHEME_ROW_KEY, [DeleteAllFromRow(), _record_cell(family, self._record)]
                )
                stored = self._record
        except LayoutError as exc:
            self._error = exc
            self._checked = True
            raise
        self._checked = True
        self._stored = stored
        self._settled = stored is not None or not self._enabled

    async def check_layout(self, *, sample_rows: int, limiter: anyio.CapacityLimiter) -> None:
        """Sample the key space and refuse rows that do not fit the layout.

        Raises:
            LayoutError: With up to five offending keys and the way out.
        """
        queries = sample_queries(self._layout, sample_rows)
        samples: list[list[bytes]] = [[] for _ in queries]
        errors: list[Exception] = []

        async def sample(i: int) -> None:
            try:
                async with limiter:
                    # The limit ends the stream on the server side: reading it
                    # to the end leaves no RPC behind.
                    stream = await self._table.read_rows_stream(queries[i])
                    samples[i] = [row.row_key async for row in stream]
            except Exception as exc:  # the first one is raised as it is, below
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(len(queries)):
                tg.start_soon(sample, i)
        if errors:
            raise errors[0]
        offenders = layout_offenders(self._layout, samples)
        if offenders:
            raise layout_error(self._layout, offenders)
