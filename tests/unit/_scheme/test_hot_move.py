"""A hot part on the move (pure): placements, the window's rule for its keys, the backfill.

A hypothesis state machine lists a part whose rows exist (or raises its K),
then writes and deletes through the move's write rule, runs backfill copies
and retires in any interleaving (a delete's old-row step late or lost, a copy
sent long after its read, or dropped), finishes the move, and after every
step checks each point read and the part's scan against a dict model.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Sequence
from typing import Any

import pytest
from google.cloud.bigtable.data.mutations import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.row import Row
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from saltedtable import SaltScheme, SaltSchemeError, fields
from saltedtable._exceptions import SplitKeyError
from saltedtable._guard.hot_record import hot_layout_of, split_record, with_hot
from saltedtable._guard.record import describe_layout
from saltedtable._scheme.hot import HotLayout, check_hot_change, refuse_atomic
from saltedtable._scheme.hot_move import (
    MOVE_FAMILY,
    combine_move,
    finished,
    move_copies,
    move_logical_rows,
    move_place,
    move_retire,
    move_write,
    old_buckets,
)
from saltedtable._scheme.window import BackfillCopy
from tests.window_cases import (
    Physical,
    apply_mutations,
    as_row,
    as_tuples,
    cell_tuples,
    cells_dict,
    mutation_lists,
)

TENANT = SaltScheme(16, key_part=fields(1))
PART = b"t7"
KEYS = tuple(PART + b"#%02d" % i for i in range(8))


def _moving(k_old: int, k: int) -> HotLayout:
    return HotLayout(TENANT, parts={PART: k}, moving={PART: k_old})


# -- where a moving key's rows are ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 15), st.integers(1, 15), st.binary(min_size=0, max_size=12))
def test_a_key_moves_only_from_an_old_bucket_to_a_new_one(
    k_old: int, more: int, tail: bytes
) -> None:
    """Raising K keeps a key or moves it from one of the old buckets to one the part gains."""
    k = min(16, k_old + more)
    if k == k_old:
        return
    layout = _moving(k_old, k)
    key = PART + b"#" + tail
    new, old = layout.move_keys(key)
    before = layout.before
    assert before is not None
    assert new == layout.physical_keys(key)[0]
    was = before.physical_keys(key)[0]
    assert (old is None) == (was == new)
    old_set = set(old_buckets(layout, PART))
    assert old_set == set(before.part_buckets(PART)) <= set(layout.part_buckets(PART))
    if old is not None:
        assert before.bucket_of(key) in old_set
        assert layout.bucket_of(key) not in old_set
        assert move_place(layout, old).key == key
        assert not move_place(layout, old).new
    placed = move_place(layout, new)
    assert placed.key == key
    assert placed.new
    assert placed.old == (old is None)


def test_a_row_at_its_old_place_is_placed_by_the_lists_until_the_move_ends() -> None:
    from saltedtable._guard.hot_record import placed_by_hot

    layout = _moving(1, 4)
    key = _a_key(layout, True)
    new, old = layout.move_keys(key)
    assert old is not None
    assert placed_by_hot(layout, new)
    assert placed_by_hot(layout, old)
    assert not placed_by_hot(finished(layout, PART), old)


def test_keys_of_other_parts_and_split_rows_never_move() -> None:
    layout = HotLayout(TENANT, parts={PART: 4, b"t8": 2}, rows={b"t7#home": 3}, moving={PART: 1})
    assert layout.move_keys(b"t8#1")[1] is None
    assert layout.move_keys(b"t1#1")[1] is None
    # A split row's home must not move (check_hot_change), so it is never moving.
    assert layout.move_keys(b"t7#home")[1] is None
    assert move_place(layout, b"zz-nothing").key is None


@pytest.mark.parametrize(
    ("moving", "match"),
    [
        ({b"t9": 1}, "not a listed hot part"),
        ({PART: 4}, "from 1 to K - 1 = 3"),
        ({PART: 0}, "from 1 to K - 1"),
    ],
)
def test_bad_moving_entries_are_refused(moving: dict[bytes, int], match: str) -> None:
    with pytest.raises(SaltSchemeError, match=match):
        HotLayout(TENANT, parts={PART: 4}, moving=moving)


def test_a_layout_without_moves_is_what_it_was() -> None:
    plain = HotLayout(TENANT, parts={PART: 4})
    assert repr(plain) == (
        "HotLayout(SaltScheme(buckets=16, hash='crc32', key_part=fields(k=1, sep=b'#')), "
        "parts={b't7': 4}, rows={})"
    )
    assert plain.before is None
    assert plain.move_keys(KEYS[0])[1] is None
    moving = _moving(1, 4)
    assert moving != plain
    assert hash(moving) != hash(plain)
    assert "moving={b't7': 1}" in repr(moving)
    assert pickle.loads(pickle.dumps(moving)) == moving
    assert finished(moving, PART) == plain
    with pytest.raises(SaltSchemeError, match="not moving"):
        finished(plain, PART)


# -- the record -----------------------------------------------------------------------


def test_the_record_keeps_moving_parts_and_keys_it_does_not_know() -> None:
    record = describe_layout(TENANT)
    plain = with_hot(record, HotLayout(TENANT, parts={PART: 4}))
    assert "moving" not in dict(plain.extra)["hot"]  # byte for byte as before
    before, after, listed = split_record(record, TENANT, "part", PART, 4, rows_exist=True)
    assert before == HotLayout(TENANT)
    assert after == _moving(1, 4)
    assert hot_layout_of(listed, TENANT) == after
    # Raising K again while the part moves is refused, naming the move.
    with pytest.raises(SaltSchemeError, match="still moving from K=1"):
        split_record(listed, TENANT, "part", PART, 8, rows_exist=True)
    # A raise of a part without rows records no move.
    _, raised, _ = split_record(plain, TENANT, "part", PART, 8)
    assert raised == HotLayout(TENANT, parts={PART: 8})
    _, moved, _ = split_record(plain, TENANT, "part", PART, 8, rows_exist=True)
    assert moved == _moving(4, 8)
    # Another release's keys in the field survive a rewrite.
    import dataclasses
    import json

    text = json.loads(dict(plain.extra)["hot"])
    text["start_micros"] = 5
    other = dataclasses.replace(plain, extra=(("hot", json.dumps(text)),))
    _, _, rewritten = split_record(other, TENANT, "row", b"ctr", 2)
    assert json.loads(dict(rewritten.extra)["hot"])["start_micros"] == 5


def test_a_change_may_not_touch_a_moving_part_but_may_list_others() -> None:
    moving = _moving(1, 4)
    check_hot_change(moving, HotLayout(TENANT, parts={PART: 4, b"t8": 2}, moving={PART: 1}))
    with pytest.raises(SaltSchemeError, match="still moving"):
        check_hot_change(moving, HotLayout(TENANT, parts={PART: 8}, moving={PART: 1}))
    key = _a_key(moving, True)
    with pytest.raises(SaltSchemeError, match="belongs to a moving part"):
        check_hot_change(
            moving, HotLayout(TENANT, parts={PART: 4}, rows={key: 2}, moving={PART: 1})
        )
    staying = _a_key(moving, False)
    check_hot_change(
        moving, HotLayout(TENANT, parts={PART: 4}, rows={staying: 2}, moving={PART: 1})
    )


# -- writes and atomics -------------------------------------------------------------


def _a_key(layout: HotLayout, moves: bool) -> bytes:
    return next(
        k
        for k in (PART + b"#%d" % i for i in itertools.count())
        if (layout.move_keys(k)[1] is not None) == moves
    )


def test_writes_go_new_deletes_reach_both_with_a_tombstone() -> None:
    layout = _moving(1, 4)
    key = _a_key(layout, True)
    plan = move_write(
        layout, key, [SetCell("cf", b"a", b"v", 1000), DeleteAllFromRow()], token=b"t", now_micros=1
    )
    assert plan is not None
    new, old = layout.move_keys(key)
    assert plan.new_key == new
    assert plan.old_key == old
    assert [type(m).__name__ for m in plan.new_mutations] == [
        "SetCell",
        "DeleteAllFromRow",
        "SetCell",
    ]
    assert plan.new_mutations[2].family == MOVE_FAMILY  # type: ignore[attr-defined]
    assert [type(m).__name__ for m in plan.old_mutations] == ["DeleteAllFromRow"]
    still = _a_key(layout, False)
    assert move_write(layout, still, [DeleteAllFromRow()], token=b"t", now_micros=1) is None


@pytest.mark.parametrize(
    ("mutation", "match"),
    [
        (
            AddToCell("sm", b"n", 1, 0),
            "AddToCell on row .* is refused while its key part 't7' moves",
        ),
        (DeleteAllFromFamily(MOVE_FAMILY), "holds the tombstones of a move"),
    ],
)
def test_writes_a_move_cannot_combine_are_refused(mutation: Mutation, match: str) -> None:
    layout = _moving(1, 4)
    with pytest.raises(SplitKeyError, match=match):
        move_write(layout, _a_key(layout, True), [mutation], token=b"t", now_micros=1)


def test_atomic_operations_on_a_moving_key_name_the_move() -> None:
    layout = _moving(2, 5)
    with pytest.raises(
        SplitKeyError, match=r"is moving: its key part 't7' moves from fan-out K=2 to K=5"
    ):
        refuse_atomic(layout, _a_key(layout, True), "check_and_mutate_row")
    refuse_atomic(layout, _a_key(layout, False), "check_and_mutate_row")  # one row: allowed


# -- the state machine ------------------------------------------------------------------


class MoveMachine(RuleBasedStateMachine):
    """A part listed (or raised) with rows present; writes, deletes, backfill, finish."""

    pending_deletes = Bundle("pending_deletes")
    pending_copies = Bundle("pending_copies")
    pending_retires = Bundle("pending_retires")

    def __init__(self) -> None:
        super().__init__()
        self.physical = Physical()
        self.model: dict[bytes, dict[tuple[str, bytes, int], bytes]] = {k: {} for k in KEYS}
        self.tokens = itertools.count()
        self.layout = HotLayout(TENANT)
        self.in_flight: set[int] = set()

    @initialize(
        ks=st.sampled_from([(1, 2), (1, 4), (1, 16), (2, 3), (2, 8), (4, 5)]),
        rows=st.lists(st.tuples(st.sampled_from(KEYS), cell_tuples), max_size=16),
    )
    def rows_then_move(self, ks: tuple[int, int], rows: list[tuple[bytes, Any]]) -> None:
        """Rows written at K_old, then the move to K opens."""
        k_old, k = ks
        start = HotLayout(TENANT, parts={PART: k_old} if k_old > 1 else {})
        for key, cell in rows:
            self.physical.mutate(
                start.physical_keys(key)[0], [SetCell(cell[0], cell[1], cell[3], cell[2])]
            )
            self.model[key].update(cells_dict([cell]))
        self.layout = _moving(k_old, k)
        assert self.layout.before == start

    def _rows(self, key: bytes) -> tuple[Row | None, Row | None]:
        new, old = self.layout.move_keys(key)
        return (self.physical.read(old) if old is not None else None), self.physical.read(new)

    @rule(target=pending_deletes, key=st.sampled_from(KEYS), mutations=mutation_lists)
    def mutate(self, key: bytes, mutations: Sequence[Mutation]) -> object:
        """A logical mutate_row: the new row now; the old row's deletes later (or never)."""
        plan = move_write(
            self.layout, key, mutations, token=b"%08d" % next(self.tokens), now_micros=9_000_123
        )
        apply_mutations(self.model[key], mutations)
        if plan is None:
            self.physical.mutate(self.layout.physical_keys(key)[0], mutations)
            return multiple()
        self.physical.mutate(plan.new_key, plan.new_mutations)
        return multiple() if plan.old_key is None else (plan.old_key, plan.old_mutations)

    @rule(step=consumes(pending_deletes))
    def finish_delete(self, step: tuple[bytes, Sequence[Mutation]]) -> None:
        """A delete reaches the old row (late)."""
        self.physical.mutate(*step)

    @rule(target=pending_copies, key=st.sampled_from(KEYS), max_cells=st.integers(1, 3))
    def backfill_read(self, key: bytes, max_cells: int) -> object:
        """The backfill reads both rows (one request) and plans its copies."""
        old, new = self._rows(key)
        copies = move_copies(self.layout, key, old, new, max_cells=max_cells)
        self.in_flight.update(id(c) for c in copies)
        return multiple(*copies)

    @rule(copy=consumes(pending_copies))
    def backfill_apply(self, copy: BackfillCopy) -> None:
        """A planned copy is sent, however late."""
        self.in_flight.discard(id(copy))
        self.physical.check_and_mutate(copy.row_key, copy.predicate, copy.mutations)

    @rule(copy=consumes(pending_copies))
    def backfill_crash(self, copy: BackfillCopy) -> None:
        """A planned copy is never sent (the backfill crashed)."""
        self.in_flight.discard(id(copy))

    @rule(target=pending_retires, key=st.sampled_from(KEYS))
    def retire_read(self, key: bytes) -> object:
        old, new = self._rows(key)
        step = move_retire(self.layout, key, old, new)
        return multiple() if step is None else step

    @rule(step=consumes(pending_retires))
    def retire_apply(self, step: tuple[bytes, Sequence[Mutation]]) -> None:
        """An old row is deleted, however late."""
        self.physical.mutate(*step)

    # Finishing waits for every backfill step in flight: a copy planned before the
    # finish and sent after it (tombstones gone) could bring a deleted cell back, as
    # when a resalt window closes (docs/epochs-window.md, "Opening and closing").
    @precondition(lambda self: bool(self.layout.moving) and not self.in_flight)
    @rule()
    def finish(self) -> None:
        """The whole backfill, verify, old rows and tombstones deleted, then the record change."""
        for key in KEYS:
            old, new = self._rows(key)
            for copy in move_copies(self.layout, key, old, new):
                assert not self.physical.check_and_mutate(
                    copy.row_key, copy.predicate, copy.mutations
                )
            old, new = self._rows(key)
            assert not move_copies(self.layout, key, old, new)
            step = move_retire(self.layout, key, old, new)
            if step is not None:
                self.physical.mutate(*step)
        for key in KEYS:
            self.physical.mutate(
                self.layout.physical_keys(key)[0], [DeleteAllFromFamily(MOVE_FAMILY)]
            )
        self.layout = finished(self.layout, PART)
        # Nothing is left where the old placement put a row that moved.
        for physical, cells in self.physical.rows.items():
            if cells:
                assert move_place(self.layout, physical).new, physical

    @invariant()
    def point_reads_are_the_model(self) -> None:
        for key in KEYS:
            old, new = self._rows(key)
            got = combine_move(self.layout, key, old, new)
            assert as_tuples(got) == as_tuples(as_row(key, self.model[key])), key
            if not self.layout.moving:  # a plain read of the one row, no tombstone left
                assert as_tuples(new) == as_tuples(
                    as_row(self.layout.physical_keys(key)[0], self.model[key])
                )

    @invariant()
    def the_parts_scan_is_the_model(self) -> None:
        """The part's buckets, merged by logical key: each row once, in key order."""
        prefixes = [TENANT.prefix(b) for b in self.layout.part_buckets(PART)]
        found = [
            self.physical.read(p)
            for p, cells in self.physical.rows.items()
            if cells and any(p.startswith(x) for x in prefixes)
        ]
        ordered = sorted(
            (r for r in found if r is not None),
            key=lambda r: (move_place(self.layout, r.row_key).key or b"", r.row_key),
        )
        got = list(move_logical_rows(self.layout, ordered))
        want = [as_row(k, self.model[k]) for k in KEYS if self.model[k]]
        assert [r.row_key for r in got] == [r.row_key for r in want if r is not None]
        assert [as_tuples(r) for r in got] == [as_tuples(r) for r in want]


MoveMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestMoveMachine = MoveMachine.TestCase
