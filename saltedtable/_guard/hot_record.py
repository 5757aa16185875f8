"""The hot lists in the layout record: one additive field, ``hot`` (pure).

The record keeps the hot parts and rows of its **top-level scheme** (the
newest epoch's, where the record has epochs) in one field::

    "hot": {"parts": {"<hex part>": K, ...}, "rows": {"<hex key>": K, ...}}

and, while a listed part's rows are being moved, ``"moving": {"<hex part>":
K_old}`` in the same object (absent: nothing moves).

It is kept for the newest scheme only, not per epoch: a split answers today's
write load, which goes to the newest scheme; K is bounded by that scheme's N;
and one field leaves the epoch list's format (which other changes append to)
alone. A table object with hot lists refuses a layout with a cutoff or
epochs for now, so no reader meets hot lists on an older epoch.

A record without the field is a table without hot lists, byte for byte as
before. The field is compared like any other: a table object whose hot lists
differ from the record's (one made before a split, or made without them) is
refused by the guard at its next read of the record (``record_refresh``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Final, Literal

from .._exceptions import LayoutError, SaltedTableError, SaltSchemeError
from .._scheme.hot import HotLayout, check_hot_change
from .._scheme.salt import SaltScheme, format_key, to_key
from .record import LayoutRecord

if TYPE_CHECKING:
    pass

__all__ = [
    "HOT_FIELD",
    "describe_hot",
    "hot_layout_of",
    "placed_by_hot",
    "split_record",
    "with_hot",
    "without_hot",
]

#: The record field that holds the hot lists.
HOT_FIELD: Final = "hot"


def _lists(
    record: LayoutRecord,
) -> tuple[dict[bytes, int], dict[bytes, int], dict[bytes, int]] | None:
    for name, text in record.extra:
        if name != HOT_FIELD:
            continue
        value = json.loads(text)
        if not isinstance(value, dict):
            raise LayoutError(f"the layout record's {HOT_FIELD!r} field holds {value!r}")
        out: list[dict[bytes, int]] = []
        for what in ("parts", "rows", "moving"):
            listed = value.get(what) or {}
            if not isinstance(listed, dict):
                raise LayoutError(f"the layout record's hot {what} are {listed!r}")
            try:
                out.append({bytes.fromhex(k): v for k, v in listed.items()})
            except ValueError as exc:
                raise LayoutError(f"the layout record's hot {what}: {exc}") from None
        return out[0], out[1], out[2]
    return None


def hot_layout_of(record: LayoutRecord, scheme: SaltScheme) -> HotLayout | None:
    """The hot lists the record stores, for ``scheme`` (the record's); None: no field.

    Raises:
        LayoutError: The field is not a hot-lists object, or a K does not fit ``scheme``.
    """
    lists = _lists(record)
    if lists is None:
        return None
    try:
        return HotLayout(scheme, parts=lists[0], rows=lists[1], moving=lists[2])
    except SaltSchemeError as exc:
        raise LayoutError(f"the layout record's hot lists: {exc}") from None


def _field(hot: HotLayout) -> str:
    value = {
        "parts": {k.hex(): v for k, v in hot.parts.items()},
        "rows": {k.hex(): v for k, v in hot.rows.items()},
    }
    if hot.moving:
        # Only while a part moves: a record without moves stays byte for byte as before.
        value["moving"] = {k.hex(): v for k, v in hot.moving.items()}
    return json.dumps(value, sort_keys=True)


def without_hot(record: LayoutRecord) -> LayoutRecord:
    """The record without its hot lists (what a table without them compares)."""
    extra = tuple((k, v) for k, v in record.extra if k != HOT_FIELD)
    return record if extra == record.extra else dataclasses.replace(record, extra=extra)


_OWN_KEYS: Final = frozenset({"parts", "rows", "moving"})


def _others(record: LayoutRecord) -> dict[str, Any]:
    # Keys of the hot field this module does not own (a newer release's): kept as they are.
    for name, text in record.extra:
        if name == HOT_FIELD:
            value = json.loads(text)
            if isinstance(value, dict):
                return {k: v for k, v in value.items() if k not in _OWN_KEYS}
    return {}


def with_hot(record: LayoutRecord, hot: HotLayout | None) -> LayoutRecord:
    """The record with these hot lists (none, or empty lists: no field at all).

    Keys of the stored field this release does not know are kept.
    """
    base = without_hot(record)
    if hot is None or (not hot.parts and not hot.rows):
        return base
    text = _field(hot)
    others = _others(record)
    if others:
        text = json.dumps({**others, **json.loads(text)}, sort_keys=True)
    return dataclasses.replace(base, extra=tuple(sorted((*base.extra, (HOT_FIELD, text)))))


def split_record(
    record: LayoutRecord,
    scheme: SaltScheme,
    kind: Literal["part", "row"],
    value: bytes | str,
    k: int,
    *,
    rows_exist: bool = False,
) -> tuple[HotLayout, HotLayout, LayoutRecord]:
    """The record after listing a part or row with fan-out ``k`` (or raising its K).

    Listing a part, or raising its K, moves some of its rows. With
    ``rows_exist`` the new lists name the part as moving from its old fan-out
    (``moving``), so readers consult both placements until the move is
    finished; without, the part has no rows to move (the caller checked).

    Returns:
        The hot lists before and after, and the new record.

    Raises:
        LayoutError: The record has a cutoff or epochs (hot lists need one scheme).
        SaltSchemeError: ``k`` outside ``2..N``, a K that would fall, a part on a
            whole-key scheme, or a change :func:`check_hot_change` refuses (a
            part still moving included).
    """
    if record.cutoff is not None or record.epochs is not None:
        raise LayoutError(
            "hot lists need a table with one salt scheme; this record has "
            + ("a cutoff" if record.cutoff is not None else "layout epochs")
        )
    before = hot_layout_of(record, scheme) or HotLayout(scheme)
    key = to_key(value)
    parts, rows = dict(before.parts), dict(before.rows)
    listed = parts if kind == "part" else rows
    if listed.get(key) == k:
        raise SaltSchemeError(f"hot {kind} {format_key(key)!r} is already listed with K={k}")
    listed[key] = k
    moving = dict(before.moving)
    if kind == "part" and rows_exist:
        moving[key] = before.parts.get(key, 1)
    after = HotLayout(scheme, parts=parts, rows=rows, moving=moving)
    check_hot_change(before, after)
    return before, after, with_hot(record, after)


def placed_by_hot(hot: HotLayout | None, physical: bytes) -> bool:
    """Whether the hot lists put a row at ``physical``: a hot part's row, a split row's sub-row.

    A moving part's row at its old place counts too (until the move is finished).

    The checks that judge where rows belong (the guard's sample, ``check_layout``,
    ``inspect``'s stray keys) accept such rows outside the bucket the scheme computes.
    """
    if hot is None or (not hot.parts and not hot.rows):
        return False
    # (Not split_key: it refuses a key outside the bucket the scheme computes.)
    for prefix in hot.scheme.prefixes:
        if physical.startswith(prefix) and len(physical) > len(prefix):
            key = physical[len(prefix) :]
            try:
                # A moving part's row may still sit where its old fan-out put it.
                return physical in hot.physical_keys(key) or physical == hot.move_keys(key)[1]
            except SaltedTableError:
                return False
    return False


def describe_hot(hot: HotLayout | None) -> list[dict[str, Any]]:
    """The hot lists as rows for ``inspect``: kind, value (text), K, buckets."""
    if hot is None:
        return []
    out: list[dict[str, Any]] = []
    for part, k in hot.parts.items():
        entry: dict[str, Any] = {
            "kind": "part",
            "value": format_key(part),
            "k": k,
            "buckets": hot.part_buckets(part),
        }
        if part in hot.moving:
            entry["moving_from"] = hot.moving[part]
        out.append(entry)
    for row, k in hot.rows.items():
        out.append(
            {"kind": "row", "value": format_key(row), "k": k, "buckets": hot.row_buckets(row)}
        )
    return out
