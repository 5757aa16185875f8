"""A hot part on the move: its rows in two placements until a backfill (pure, no I/O).

Listing a key part whose rows exist, or raising a listed part's K, changes
where some of its rows belong. The record then names the part in
``HotLayout.moving`` (``{part: K_old}``) until a backfill has moved them. A
key of a moving part has a **new** physical row (where ``parts`` places it)
and an **old** one (where ``K_old`` placed it). The jump hash moves a key
only to a new bucket number when K rises, so a key either stays (its two
physical keys are one: nothing to combine, ``move_keys`` gives ``old`` None)
or moves from one of the ``K_old`` buckets to one of the new ones. So the
part's old buckets hold only old or shared rows, the buckets it gains only
new rows.

A logical row with two physical rows is the resalt window's problem for the
keys of one part, and it follows the window's rule exactly
(:mod:`saltedtable._scheme.window`, docs/epochs-window.md):

* **writes** go to the new row; each delete is followed there by a
  tombstone in the reserved family (:data:`MOVE_FAMILY`, the window's) and
  also reaches the old row (:func:`move_write`);
* **a read** is :func:`~saltedtable._scheme.window.combine` of the old and
  new rows (:func:`combine_move`): the new row, plus old cells no tombstone
  hides and no new cell takes;
* **the backfill** copies each old row into its new row with
  ``check_and_mutate_row`` whose predicate catches a racing write or delete
  (:func:`move_copies`), then deletes an old row its new row fully shows
  (:func:`move_retire`). The move is done when no old row is left; the
  record change that removes the ``moving`` entry (:func:`finished`) comes
  after it.

``AddToCell`` on a key that moves is refused during the move (an aggregate's
partials in two rows have no combined value under this rule), as are
mutations that name the tombstone family; ``check_and_mutate_row`` and
``read_modify_write_row`` are refused by :func:`~saltedtable._scheme.hot.refuse_atomic`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from .._exceptions import SaltedTableError, SaltSchemeError, SplitKeyError
from .hot import HotLayout
from .ranges import KeyRange
from .salt import fields, format_key, prefix_end, to_key
from .window import (
    WINDOW_FAMILY,
    BackfillCopy,
    Placement,
    WindowWrite,
    backfill_copies,
    cells_to_copy,
    combine,
    write_both,
)

if TYPE_CHECKING:
    from google.cloud.bigtable.data.mutations import Mutation
    from google.cloud.bigtable.data.row import Row

__all__ = [
    "MOVE_FAMILY",
    "combine_move",
    "finished",
    "move_copies",
    "move_logical_rows",
    "move_place",
    "move_retire",
    "move_write",
    "old_buckets",
    "part_ranges",
]

#: The family a moving part's tombstones live in: the resalt window's own
#: (one reserved family; a table with hot lists cannot be in a window).
MOVE_FAMILY: Final = WINDOW_FAMILY


def _describe(layout: HotLayout, part: bytes) -> str:
    return (
        f"its key part {format_key(part)!r} moves from fan-out K={layout.moving[part]} to "
        f"K={layout.parts[part]}"
    )


def move_write(
    layout: HotLayout,
    key: bytes | str,
    mutations: Sequence[Mutation],
    *,
    token: bytes,
    now_micros: int,
) -> WindowWrite | None:
    """What one logical ``mutate_row`` of a moving key sends; None: the key does not move.

    Args:
        layout: The hot lists, with their moving parts.
        key: The logical key (unsplit).
        mutations: The call's mutations, in order.
        token: Bytes unique to this call (its tombstones' qualifiers).
        now_micros: The tombstones' timestamp (never compared).

    Raises:
        SplitKeyError: ``AddToCell`` (or ``MergeToCell``), or a mutation naming
            :data:`MOVE_FAMILY`, on a key that moves.
    """
    from google.cloud.bigtable.data.mutations import AddToCell

    key = to_key(key)
    new, old = layout.move_keys(key)
    if old is None:
        return None
    part = layout.moving_part(key)
    assert part is not None
    for m in mutations:
        named = getattr(m, "family", None) or getattr(m, "family_to_delete", None)
        if named == MOVE_FAMILY:
            raise SplitKeyError(
                f"{type(m).__name__} on row {format_key(key)!r} names the family "
                f"{MOVE_FAMILY!r}, which holds the tombstones of a move ({_describe(layout, part)})"
            )
        if isinstance(m, AddToCell) or type(m).__name__ == "MergeToCell":
            raise SplitKeyError(
                f"{type(m).__name__} on row {format_key(key)!r} is refused while "
                f"{_describe(layout, part)}: an aggregate with partials in two places has "
                "no one value; retry once the move is finished"
            )
    return write_both(new, old, mutations, token=token, now_micros=now_micros, family=MOVE_FAMILY)


def combine_move(
    layout: HotLayout,
    key: bytes | str,
    old: Row | None,
    new: Row | None,
    *,
    max_versions: int | Mapping[str, int] | None = None,
) -> Row | None:
    """The logical row of a key of a moving part from its old and new physical rows.

    ``old`` is ignored when the key does not move (its rows are one). The
    tombstone family never shows.
    """
    key = to_key(key)
    if layout.move_keys(key)[1] is None:
        old = None
    return combine(key, old, new, family=MOVE_FAMILY, max_versions=max_versions)


def move_copies(
    layout: HotLayout,
    key: bytes | str,
    old: Row | None,
    new: Row | None,
    *,
    max_cells: int = 100,
) -> list[BackfillCopy]:
    """The backfill's race-safe copies of a moving key's old row into its new row.

    None to send when the key does not move or the new row shows every old
    cell already (the old row may then be deleted, :func:`move_retire`).
    """
    new_key, old_key = layout.move_keys(key)
    if old_key is None:
        return []
    return backfill_copies(new_key, old, new, family=MOVE_FAMILY, max_cells=max_cells)


def move_retire(
    layout: HotLayout, key: bytes | str, old: Row | None, new: Row | None
) -> tuple[bytes, tuple[Mutation, ...]] | None:
    """``(old physical key, mutations)`` deleting the old row once the new row shows it all.

    None while a cell still needs copying, when there is no old row, or when
    the key does not move. Safe at any later time: the old row takes no writes
    (deletes only), so no old cell can become needed again.
    """
    from google.cloud.bigtable.data.mutations import DeleteAllFromRow

    old_key = layout.move_keys(key)[1]
    if old_key is None or old is None or cells_to_copy(old, new, family=MOVE_FAMILY):
        return None
    return old_key, (DeleteAllFromRow(),)


def part_ranges(layout: HotLayout, part: bytes | str) -> tuple[KeyRange, KeyRange]:
    """The logical key ranges that hold exactly the keys of ``part`` (key order).

    With ``fields(k, sep)`` a part's keys are the part itself and every key
    that starts with the part and ``sep``. A move needs this (a scan cuts the
    moving part out of its ranges), so a part can move only under ``fields``.

    Raises:
        SaltSchemeError: The scheme's key part is not ``fields``.
    """
    key_part = layout.scheme.key_part
    if not isinstance(key_part, fields):
        raise SaltSchemeError(
            f"a hot part can move (be listed, or have its K raised, with rows present) only "
            f"under a fields(...) key part, whose parts are key ranges; {layout.scheme} "
            "has another: list parts before their rows are written"
        )
    part = to_key(part)
    inner = part + key_part.sep
    return KeyRange(part, True, part, True), KeyRange(inner, True, prefix_end(inner), False)


def old_buckets(layout: HotLayout, part: bytes | str) -> tuple[int, ...]:
    """The buckets a moving part's old rows sit in (the backfill reads these).

    Raises:
        SaltSchemeError: ``part`` is not moving.
    """
    part = to_key(part)
    before = layout.before
    if before is None or part not in layout.moving:
        raise SaltSchemeError(f"hot part {format_key(part)!r} is not moving")
    return before.part_buckets(part)


def finished(layout: HotLayout, part: bytes | str) -> HotLayout:
    """The hot lists once ``part``'s move is done: the same, without its ``moving`` entry.

    Raises:
        SaltSchemeError: ``part`` is not moving.
    """
    part = to_key(part)
    if part not in layout.moving:
        raise SaltSchemeError(f"hot part {format_key(part)!r} is not moving: nothing to finish")
    moving = {p: k for p, k in layout.moving.items() if p != part}
    # (the split's start, lead and previous lists stay as they are)
    return dataclasses.replace(layout, moving=moving)


def move_place(layout: HotLayout, physical: bytes) -> Placement:
    """What a physical row met in a scan of a moving part's buckets is.

    The row is its key's old row, its new row, both (a key that does not
    move), or neither (no placement writes it there: not part of the logical
    table, like any misplaced row).
    """
    scheme = layout.scheme
    for prefix in sorted(scheme.prefixes, key=len, reverse=True):
        if not physical.startswith(prefix) or len(physical) == len(prefix):
            continue
        key = physical[len(prefix) :]
        try:
            new, old = layout.move_keys(key)
        except SaltedTableError:  # a key no placement accepts is not placed
            continue
        if physical == new:
            return Placement(key, old is None, True)
        if physical == old:
            return Placement(key, True, False)
    return Placement(None, False, False)


def move_logical_rows(
    layout: HotLayout,
    rows: Iterable[Row],
    *,
    max_versions: int | Mapping[str, int] | None = None,
) -> Iterator[Row]:
    """The logical rows of a scan's physical rows of moving parts, given in logical-key order.

    Each row is placed (:func:`move_place`); rows no placement writes there are
    dropped; a key's old and new rows (adjacent, either order) are combined;
    a key whose combination is empty (tombstones only) yields nothing. The
    physical rows must come ordered by logical key (a merge of the buckets).
    """
    key: bytes | None = None
    old: Row | None = None
    new: Row | None = None
    for row in rows:
        placed = move_place(layout, row.row_key)
        if placed.key is None:
            continue
        if placed.key != key:
            if key is not None:
                got = combine(key, old, new, family=MOVE_FAMILY, max_versions=max_versions)
                if got is not None:
                    yield got
            key, old, new = placed.key, None, None
        if placed.new:
            new = row
        else:
            old = row
    if key is not None:
        got = combine(key, old, new, family=MOVE_FAMILY, max_versions=max_versions)
        if got is not None:
            yield got
