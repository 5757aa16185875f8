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
before. A split made by :func:`split_record` with a clock also stores, in
the same field, its start (``start_micros``), its lead (``min_lead_s``) and
the lists before it (``previous``): writers keep those until the start. The
field is compared like any other, except that a table object whose lists are
the stored ones or the stored ``previous`` adopts the stored field at its
next read of the record (the guard); any other lists are refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import TYPE_CHECKING, Any, Final, Literal

from .._exceptions import LayoutError, SaltedTableError, SaltSchemeError
from .._scheme.epochs import instant_of
from .._scheme.hot import HotLayout, check_hot_change
from .._scheme.salt import SaltScheme, format_key, to_key
from .record import LayoutRecord
from .resalt import DEFAULT_MIN_LEAD

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


def _pair(value: Any, where: str) -> tuple[dict[bytes, int], dict[bytes, int]]:
    if not isinstance(value, dict):
        raise LayoutError(f"the layout record's {where} holds {value!r}")
    out: list[dict[bytes, int]] = []
    for what in ("parts", "rows"):
        listed = value.get(what) or {}
        if not isinstance(listed, dict):
            raise LayoutError(f"the layout record's {where} {what} are {listed!r}")
        try:
            out.append({bytes.fromhex(k): v for k, v in listed.items()})
        except ValueError as exc:
            raise LayoutError(f"the layout record's {where} {what}: {exc}") from None
    return out[0], out[1]


def _listed(value: Any, where: str) -> dict[bytes, int]:
    """A ``{hex key: int}`` object of the hot field (absent: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LayoutError(f"the layout record's {where} are {value!r}")
    try:
        return {bytes.fromhex(k): v for k, v in value.items()}
    except ValueError as exc:
        raise LayoutError(f"the layout record's {where}: {exc}") from None


def _field_value(record: LayoutRecord) -> dict[str, Any] | None:
    for name, text in record.extra:
        if name == HOT_FIELD:
            value = json.loads(text)
            if not isinstance(value, dict):
                raise LayoutError(f"the layout record's {HOT_FIELD!r} field holds {value!r}")
            return value
    return None


def hot_layout_of(record: LayoutRecord, scheme: SaltScheme) -> HotLayout | None:
    """The hot lists the record stores, for ``scheme`` (the record's); None: no field.

    A field written before splits had a start (no ``start_micros``) reads as
    lists in effect since they were stored.

    Raises:
        LayoutError: The field is not a hot-lists object, or a K does not fit ``scheme``.
    """
    value = _field_value(record)
    if value is None:
        return None
    parts, rows = _pair(value, "hot field")
    moving = _listed(value.get("moving"), "hot moving parts")
    start = value.get("start_micros")
    lead = value.get("min_lead_s")
    if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
        raise LayoutError(f"the layout record's hot start_micros is {start!r}")
    if lead is not None and (not isinstance(lead, int | float) or isinstance(lead, bool)):
        raise LayoutError(f"the layout record's hot min_lead_s is {lead!r}")
    try:
        previous = None
        if value.get("previous") is not None:
            before = _pair(value["previous"], "hot previous")
            previous = HotLayout(scheme, parts=before[0], rows=before[1])
        return HotLayout(
            scheme,
            parts=parts,
            rows=rows,
            previous=previous,
            start_micros=start,
            min_lead_s=None if lead is None else float(lead),
            moving=moving,
        )
    except SaltSchemeError as exc:
        raise LayoutError(f"the layout record's hot lists: {exc}") from None


def _lists_value(hot: HotLayout) -> dict[str, dict[str, int]]:
    return {
        "parts": {k.hex(): v for k, v in hot.parts.items()},
        "rows": {k.hex(): v for k, v in hot.rows.items()},
    }


def _field(hot: HotLayout) -> str:
    value: dict[str, Any] = dict(_lists_value(hot))
    if hot.start_micros is not None:
        assert hot.previous is not None  # (HotLayout fills it in)
        value["start_micros"] = hot.start_micros
        value["previous"] = _lists_value(hot.previous)
    if hot.min_lead_s is not None:
        value["min_lead_s"] = hot.min_lead_s
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
    now_micros: int | None = None,
    at_micros: int | None = None,
    min_lead: float | None = None,
    rows_exist: bool = False,
) -> tuple[HotLayout, HotLayout, LayoutRecord]:
    """The record after listing a part or row with fan-out ``k`` (or raising its K).

    With ``now_micros`` the change starts in the future: the new lists store
    ``start_micros`` (``at_micros``, default now plus the lead), the lead and
    the lists before the change (``previous``); writers keep placing rows by
    those until the start (:meth:`HotLayout.writers_at`). Without it the
    change is in effect at once (what a pure caller that has no clock asks).

    Listing a part, or raising its K, moves some of its rows. The new lists
    name the part as moving from its old fan-out (``moving``), so readers
    consult both placements until the move is finished, when rows exist
    (``rows_exist``) or may be written before the start (``now_micros``: until
    then writers place the part's rows by the old fan-out).

    Returns:
        The hot lists before and after, and the new record.

    Raises:
        LayoutError: The record has a cutoff or epochs (hot lists need one
            scheme), or a split stored earlier has not started yet.
        SaltSchemeError: ``k`` outside ``2..N``, a K that would fall, a part on a
            whole-key scheme, a change :func:`check_hot_change` refuses (a part
            still moving included), a start sooner than now plus the lead
            (naming the earliest), or a lead other than the stored one.
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
    if kind == "part" and (rows_exist or now_micros is not None):
        moving[key] = before.parts.get(key, 1)
    after = HotLayout(scheme, parts=parts, rows=rows, moving=moving)
    check_hot_change(before, after)
    if now_micros is not None:
        after = _started(before, after, now_micros, at_micros, min_lead)
    return before, after, with_hot(record, after)


def _started(
    before: HotLayout,
    after: HotLayout,
    now_micros: int,
    at_micros: int | None,
    min_lead: float | None,
) -> HotLayout:
    """``after`` with its start, lead and previous lists (see :func:`split_record`)."""
    if before.pending(now_micros):
        assert before.start_micros is not None
        raise LayoutError(
            "the table's previous hot-key split starts at "
            f"{instant_of(before.start_micros).isoformat()}: change the lists again after "
            "that (writers still place rows by the lists before it)"
        )
    stored = before.min_lead_s
    if stored is not None and min_lead is not None and min_lead != stored:
        raise SaltSchemeError(
            f"the table's hot lists store a minimum lead of {stored:g} s, which table objects "
            f"keep; it cannot be changed to {min_lead:g} s"
        )
    lead = stored if stored is not None else min_lead
    if lead is None:
        lead = DEFAULT_MIN_LEAD
    if not lead > 0:
        raise SaltSchemeError(f"the minimum lead must be seconds > 0, got {lead!r}")
    earliest = now_micros + math.ceil(lead * 1_000_000)
    start = earliest if at_micros is None else at_micros
    if start < earliest:
        raise SaltSchemeError(
            f"the split would start at {instant_of(start).isoformat()}, sooner than the "
            f"minimum lead of {lead:g} s from now allows: start it at "
            f"{instant_of(earliest).isoformat()} or later (table objects re-read the record "
            "within the lead, and writers place rows by the old lists until the start)"
        )
    return HotLayout(
        after.scheme,
        parts=after.parts,
        rows=after.rows,
        previous=before,
        start_micros=start,
        min_lead_s=float(lead),
        moving=after.moving,
    )


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
                if physical in hot.physical_keys(key):
                    return True
                # A moving part's row may still sit where its old fan-out put it.
                if physical == hot.move_keys(key)[1]:
                    return True
                # A row written before the latest split's start, where the lists before it put it.
                return hot.previous is not None and physical in hot.previous.physical_keys(key)
            except SaltedTableError:
                return False
    return False


def describe_hot(hot: HotLayout | None) -> list[dict[str, Any]]:
    """The hot lists as rows for ``inspect``: kind, value (text), K, buckets, and ``from``:
    the start of the split that listed it or raised its K (None: in effect since stored)."""
    if hot is None:
        return []
    out: list[dict[str, Any]] = []
    before = hot.previous
    start = None if hot.start_micros is None else instant_of(hot.start_micros).isoformat()
    for part, k in hot.parts.items():
        entry: dict[str, Any] = {
            "kind": "part",
            "value": format_key(part),
            "k": k,
            "buckets": hot.part_buckets(part),
        }
        changed = before is not None and before.parts.get(part) != k
        entry["from"] = start if changed else None
        if part in hot.moving:
            entry["moving_from"] = hot.moving[part]
        out.append(entry)
    for row, k in hot.rows.items():
        out.append(
            {"kind": "row", "value": format_key(row), "k": k, "buckets": hot.row_buckets(row)}
        )
        changed = before is not None and before.rows.get(row) != k
        out[-1]["from"] = start if changed else None
    return out
