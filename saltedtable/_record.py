"""The layout record: what a table was written with, as a small JSON value (pure).

The bucket count, hash, key part, separator, marker and cutoff are part of
the data's meaning: reading with another scheme silently misses rows.
:func:`describe_layout` turns a layout into a record; the guard (``_guard``)
stores it in the reserved row :data:`SCHEME_ROW_KEY` and compares it with
every table object's own (:func:`guard_action`); a migration in progress
marks it (``_migration``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from ._cutoff import CutoffPolicy
from ._exceptions import LayoutError, SchemeMismatchError, layout_differences
from ._named import key_part_identity
from ._salt import SCHEME_ROW_KEY, SaltScheme

if TYPE_CHECKING:
    from google.cloud.bigtable.data.mutations import Mutation
    from google.cloud.bigtable.data.row import Cell, Row

__all__ = [
    "BACKFILL",
    "CUTOVER",
    "DEFAULT_LEGACY_GRACE",
    "DEFAULT_RECORD_REFRESH",
    "DELETING",
    "MIGRATION_KEY",
    "MIGRATION_STATES",
    "SCHEME_QUALIFIER",
    "SCHEME_ROW_KEY",
    "Action",
    "MigrationState",
    "decode_layout",
    "describe_layout",
    "encode_layout",
    "family_of",
    "guard_action",
    "newest_record_cell",
    "open_differences",
    "record_of_row",
]

#: The column qualifier of the record.
SCHEME_QUALIFIER: Final = b"scheme"
_VERSION: Final = 1
#: The record's key for the state of a migration in progress (see ``_migration``).
MIGRATION_KEY: Final = "migration"
#: The states of a migration in progress, in order (see ``_migration``).
MigrationState = Literal["backfill", "cutover", "deleting"]
BACKFILL: Final = "backfill"
CUTOVER: Final = "cutover"
DELETING: Final = "deleting"
MIGRATION_STATES: Final[tuple[MigrationState, ...]] = (BACKFILL, CUTOVER, DELETING)

#: Seconds between two reads of the record by one table object (``record_refresh``).
DEFAULT_RECORD_REFRESH: Final = 30.0
#: Seconds ``delete-legacy`` waits between moving the record to ``deleting`` and
#: deleting the first legacy row: strictly longer than the default refresh, so that
#: a cutoff reader with the default interval has read the record again (the margin
#: covers clocks that run at slightly different rates on two machines).
DEFAULT_LEGACY_GRACE: Final = DEFAULT_RECORD_REFRESH + 10.0

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
    """The JSON-friendly record of a layout (what a reader must agree on).

    Raises:
        LayoutError: A custom key part without a stable name (see
            :func:`~saltedtable.named_key_part`).
    """
    record: dict[str, Any] = {
        "version": _VERSION,
        "buckets": scheme.buckets,
        "hash": scheme.hash,
        "key_part": key_part_identity(scheme.key_part),
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


def newest_record_cell(row: Row | None) -> Cell | None:
    """The cell holding the current layout record in the reserved row, or None."""
    if row is None:
        return None
    cells = [c for c in row.cells if c.qualifier == SCHEME_QUALIFIER]
    return max(cells, key=lambda c: c.timestamp_micros) if cells else None


def record_of_row(row: Row | None) -> dict[str, Any] | None:
    """The layout record stored in the reserved row, or None if there is none."""
    cell = newest_record_cell(row)
    return None if cell is None else decode_layout(cell.value)


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
    if not open_differences(stored, current):
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


def open_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Why a table whose record is ``stored`` may not be opened with ``current`` (empty: it may).

    Outside a migration this is :func:`layout_differences`. During one
    (``saltedtable migrate``) the record describes the cutoff layout, which
    keeps opening through the backfill and the cut-over; from the cut-over on
    the fully salted layout of the same scheme opens too, and while the legacy
    rows are deleted only that one does.
    """
    state = stored.get(MIGRATION_KEY)
    base = {k: v for k, v in stored.items() if k != MIGRATION_KEY}
    diffs = layout_differences(base, current)
    salted_reader = state in (CUTOVER, DELETING) and current.get("cutoff") is None
    if salted_reader and not layout_differences({**base, "cutoff": None}, current):
        return []
    if state == DELETING and not diffs:
        # A reader with the cutoff would miss the rows being deleted.
        diffs.append(
            f"{MIGRATION_KEY}: the legacy rows are being deleted; open the table without the cutoff"
        )
    if state is not None and state not in MIGRATION_STATES:
        diffs.append(f"{MIGRATION_KEY}: unknown state {state!r} (a newer saltedtable wrote it)")
    return diffs
