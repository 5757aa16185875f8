"""The dual-layout window's pure rules (saltedtable/_scheme/window.py).

The combine rule is checked against a plain dict model by a hypothesis state
machine: writes and deletes go through the window's write plan, the backfill
reads, copies and retires in any interleaving (a delete's old-row step may come
late or never, a backfill copy may be applied long after its read, or dropped:
a crash), and after every step the combined row equals the model's row.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from google.cloud.bigtable.data.mutations import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
    SetCell,
)
from google.cloud.bigtable.data.row import Cell, Row
from google.cloud.bigtable.data.row_filters import (
    ApplyLabelFilter,
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    CellsRowOffsetFilter,
    ColumnRangeFilter,
    ConditionalRowFilter,
    FamilyNameRegexFilter,
    PassAllFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    RowSampleFilter,
    SinkFilter,
    StripValueTransformerFilter,
    ValueRegexFilter,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
)

from saltedtable._exceptions import (
    LayoutError,
    QueryPlanError,
    SaltSchemeError,
    WindowError,
    WindowFilterError,
)
from saltedtable._scheme.salt import HASHES, SaltScheme
from saltedtable._scheme.window import (
    WINDOW_FAMILY,
    Tombstone,
    Window,
    apply_filter,
    combine,
    plan_filter,
)
from tests.window_cases import (
    FAMILIES,
    QUALIFIERS,
    STAMPS,
    Physical,
    allowed_filters,
    apply_mutations,
    as_row,
    as_tuples,
    cell_tuples,
    cells_dict,
    mutation_lists,
)

WINDOW = Window(SaltScheme(16), SaltScheme(64))


def _key_where(shared: bool) -> bytes:
    """A logical key whose two physical rows are (or are not) one row in :data:`WINDOW`."""
    for i in itertools.count():
        key = b"user%d" % i
        if WINDOW.shares_row(key) == shared:
            return key
    raise AssertionError("unreachable")


SPLIT_KEY = _key_where(False)
SHARED_KEY = _key_where(True)
KEYS = (SPLIT_KEY, SHARED_KEY)


def _cell(f: str, q: bytes, ts: int, v: bytes, key: bytes = b"k") -> Cell:
    return Cell(v, key, f, q, ts)


def _tomb(scope: Tombstone, qualifier: bytes = b"t1") -> Cell:
    return Cell(scope.encode(), b"n", WINDOW_FAMILY, qualifier, 5000)


# -- the combine rule, case by case ------------------------------------------------


def test_same_cell_in_both_layouts_resolves_to_the_new_one() -> None:
    """Two cells with one family, qualifier and timestamp: the new layout's value is the row's."""
    old = Row(b"o", [_cell("cf", b"a", 1000, b"old")])
    new = Row(b"n", [_cell("cf", b"a", 1000, b"new")])
    assert as_tuples(combine(b"k", old, new)) == [("cf", b"a", 1000, b"new")]


def test_partial_update_keeps_older_columns_of_the_old_layout() -> None:
    """A write of one column in the new layout hides no other column of the old one."""
    old = Row(b"o", [_cell("cf", b"a", 1000, b"1"), _cell("cf", b"b", 1000, b"2")])
    new = Row(b"n", [_cell("cf", b"b", 2000, b"3")])
    assert as_tuples(combine(b"k", old, new)) == [
        ("cf", b"a", 1000, b"1"),
        ("cf", b"b", 2000, b"3"),
        ("cf", b"b", 1000, b"2"),
    ]


def test_tombstone_hides_old_cells_only() -> None:
    """A column tombstone hides the old column, not a new cell written after the delete."""
    old = Row(b"o", [_cell("cf", b"a", 1000, b"1"), _cell("cf", b"b", 1000, b"2")])
    new = Row(b"n", [_cell("cf", b"a", 500, b"late"), _tomb(Tombstone("cf", b"a", 0, None))])
    got = combine(b"k", old, new)
    assert as_tuples(got) == [("cf", b"a", 500, b"late"), ("cf", b"b", 1000, b"2")]
    assert got is not None
    assert all(c.row_key == b"k" for c in got.cells)


def test_time_range_tombstone_hides_only_its_range() -> None:
    """A ``DeleteRangeFromColumn`` tombstone hides old cells in [start, end) of its column."""
    old = Row(b"o", [_cell("cf", b"a", ts, b"x") for ts in (1000, 2000, 3000)])
    new = Row(b"n", [_tomb(Tombstone("cf", b"a", 2000, 3000))])
    assert [t[2] for t in as_tuples(combine(b"k", old, new))] == [3000, 1000]


def test_row_and_family_tombstones() -> None:
    """A row tombstone hides every old cell; a family tombstone that family's."""
    old = Row(b"o", [_cell("cf", b"a", 1000, b"1"), _cell("cg", b"a", 1000, b"2")])
    assert combine(b"k", old, Row(b"n", [_tomb(Tombstone())])) is None
    fam = combine(b"k", old, Row(b"n", [_tomb(Tombstone("cf"))]))
    assert as_tuples(fam) == [("cg", b"a", 1000, b"2")]


def test_max_versions_is_reapplied_after_the_union() -> None:
    """Old and new versions of one column are cut to the family's ``max_versions``, newest kept."""
    old = Row(b"o", [_cell("cf", b"a", 1000, b"1"), _cell("cg", b"a", 1000, b"x")])
    new = Row(b"n", [_cell("cf", b"a", 2000, b"2"), _cell("cg", b"a", 2000, b"y")])
    got = combine(b"k", old, new, max_versions={"cf": 1})
    assert as_tuples(got) == [
        ("cf", b"a", 2000, b"2"),
        ("cg", b"a", 2000, b"y"),
        ("cg", b"a", 1000, b"x"),
    ]
    assert len(combine(b"k", old, new, max_versions=1).cells) == 2  # type: ignore[union-attr]


def test_duplicates_from_an_interleaved_read_count_once() -> None:
    """A cell read twice (an interleave passed it on two branches) is one cell of the row."""
    c = _cell("cf", b"a", 1000, b"1")
    assert as_tuples(combine(b"k", Row(b"o", [c, c]), Row(b"n", [c, c]))) == [
        ("cf", b"a", 1000, b"1")
    ]


def test_window_family_never_shows() -> None:
    """Tombstones (and stray window-family cells of the old row) are not user cells."""
    old = Row(b"o", [Cell(b"?", b"o", WINDOW_FAMILY, b"q", 1)])
    assert combine(b"k", old, Row(b"n", [_tomb(Tombstone("cf"))])) is None


def test_unreadable_tombstone_is_refused() -> None:
    """A window-family cell saltedtable did not write stops the read instead of guessing."""
    bad = Row(b"n", [Cell(b"junk", b"n", WINDOW_FAMILY, b"t", 1)])
    with pytest.raises(LayoutError, match="unreadable window tombstone"):
        combine(b"k", None, bad)


@given(
    st.one_of(
        st.just(DeleteAllFromRow()),
        st.sampled_from(FAMILIES).map(DeleteAllFromFamily),
        st.builds(
            DeleteRangeFromColumn,
            st.sampled_from(FAMILIES),
            st.binary(max_size=4),
            st.none() | st.integers(0, 10**15),
            st.none(),
        ),
    )
)
def test_tombstone_round_trip(delete: Mutation) -> None:
    """A delete's tombstone reads back as the same scope."""
    scope = Tombstone.of(delete)
    assert scope is not None
    assert Tombstone.decode(scope.encode()) == scope


# -- the state machine -------------------------------------------------------------


class WindowMachine(RuleBasedStateMachine):
    """Writes, deletes and backfill steps in any order; the combined row is the model's."""

    pending_deletes = Bundle("pending_deletes")
    pending_copies = Bundle("pending_copies")
    pending_retires = Bundle("pending_retires")

    def __init__(self) -> None:
        super().__init__()
        self.physical = Physical()
        self.model: dict[bytes, dict[tuple[str, bytes, int], bytes]] = {k: {} for k in KEYS}
        self.tokens = itertools.count()

    @initialize(split=st.lists(cell_tuples, max_size=6), shared=st.lists(cell_tuples, max_size=6))
    def old_rows(self, split: list[tuple[str, bytes, int, bytes]], shared: list) -> None:
        """The rows the old layout holds when the window opens."""
        for key, cells in ((SPLIT_KEY, split), (SHARED_KEY, shared)):
            self.model[key] = cells_dict(cells)
            self.physical.rows[WINDOW.old.salt_key(key)] = cells_dict(cells)

    @rule(target=pending_deletes, key=st.sampled_from(KEYS), mutations=mutation_lists)
    def mutate(self, key: bytes, mutations: Sequence[Mutation]) -> object:
        """A logical mutate_row: the new row now; the old row's deletes later (or never)."""
        plan = WINDOW.write(key, mutations, token=b"%08d" % next(self.tokens), now_micros=9_000_123)
        self.physical.mutate(plan.new_key, plan.new_mutations)
        apply_mutations(self.model[key], mutations)
        if plan.old_key is None:
            return multiple()
        return (plan.old_key, plan.old_mutations)

    @rule(step=consumes(pending_deletes))
    def finish_delete(self, step: tuple[bytes, Sequence[Mutation]]) -> None:
        """A delete reaches the old row (late)."""
        self.physical.mutate(*step)

    @rule(target=pending_copies, key=st.sampled_from(KEYS), max_cells=st.integers(1, 3))
    def backfill_read(self, key: bytes, max_cells: int) -> object:
        """The backfill reads the old row, then the new row, and plans its copies."""
        new_key, old_key = WINDOW.physical_keys(key)
        old = self.physical.read(old_key) if old_key is not None else None
        new = self.physical.read(new_key)
        copies = WINDOW.backfill(key, old, new, max_cells=max_cells)
        return multiple(*copies)

    @rule(copy=consumes(pending_copies))
    def backfill_apply(self, copy: object) -> None:
        """A planned copy is sent, however late (a dropped one is a crash)."""
        from saltedtable._scheme.window import BackfillCopy

        assert isinstance(copy, BackfillCopy)
        self.physical.check_and_mutate(copy.row_key, copy.predicate, copy.mutations)

    @rule(target=pending_retires, key=st.sampled_from(KEYS))
    def retire_read(self, key: bytes) -> object:
        """The retire step reads both rows and decides whether the old row can go."""
        new_key, old_key = WINDOW.physical_keys(key)
        old = self.physical.read(old_key) if old_key is not None else None
        step = WINDOW.retire_old(key, old, self.physical.read(new_key))
        return multiple() if step is None else step

    @rule(step=consumes(pending_retires))
    def retire_apply(self, step: tuple[bytes, Sequence[Mutation]]) -> None:
        """The old row is deleted, however late."""
        self.physical.mutate(*step)

    @invariant()
    def combined_rows_are_the_model(self) -> None:
        """Every logical row read through the window equals the model's."""
        for key in KEYS:
            new_key, old_key = WINDOW.physical_keys(key)
            old = self.physical.read(old_key) if old_key is not None else None
            got = WINDOW.combine(key, old, self.physical.read(new_key))
            assert as_tuples(got) == as_tuples(as_row(key, self.model[key])), key


WindowMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=30)
TestWindowMachine = WindowMachine.TestCase


def test_delete_racing_the_backfill_does_not_resurrect() -> None:
    """Backfill reads, a delete lands on both rows, the copy is sent: nothing comes back."""
    phys = Physical()
    old_key = WINDOW.old.salt_key(SPLIT_KEY)
    phys.rows[old_key] = {("cf", b"a", 1000): b"1"}
    new_key = WINDOW.new.salt_key(SPLIT_KEY)
    copies = WINDOW.backfill(SPLIT_KEY, phys.read(old_key), phys.read(new_key))
    plan = WINDOW.write(SPLIT_KEY, [DeleteAllFromRow()], token=b"t", now_micros=0)
    phys.mutate(plan.new_key, plan.new_mutations)
    assert plan.old_key == old_key
    phys.mutate(old_key, plan.old_mutations)
    assert [phys.check_and_mutate(c.row_key, c.predicate, c.mutations) for c in copies] == [True]
    assert WINDOW.combine(SPLIT_KEY, phys.read(old_key), phys.read(new_key)) is None


def test_write_racing_the_backfill_keeps_the_write() -> None:
    """A write of the same cell between the backfill's read and its copy is not overwritten."""
    phys = Physical()
    old_key, new_key = WINDOW.old.salt_key(SPLIT_KEY), WINDOW.new.salt_key(SPLIT_KEY)
    phys.rows[old_key] = {("cf", b"a", 1000): b"old"}
    (copy,) = WINDOW.backfill(SPLIT_KEY, phys.read(old_key), None)
    phys.mutate(new_key, [SetCell("cf", b"a", b"new", 1000)])
    assert phys.check_and_mutate(copy.row_key, copy.predicate, copy.mutations)
    assert phys.rows[new_key] == {("cf", b"a", 1000): b"new"}


# -- writes and atomic operations ------------------------------------------------------


def test_write_plan_for_a_split_key() -> None:
    """Sets go to the new row; each delete is followed by its tombstone and sent to the old row."""
    muts = [SetCell("cf", b"a", b"1", 1000), DeleteAllFromFamily("cg")]
    plan = WINDOW.write(SPLIT_KEY, muts, token=b"tok", now_micros=1_234_567)
    assert plan.new_key == WINDOW.new.salt_key(SPLIT_KEY)
    assert plan.old_key == WINDOW.old.salt_key(SPLIT_KEY)
    assert plan.new_mutations[:2] == tuple(muts)
    tomb = plan.new_mutations[2]
    assert isinstance(tomb, SetCell)
    assert (tomb.family, tomb.qualifier, tomb.timestamp_micros) == (
        WINDOW_FAMILY,
        b"tok\x00\x00\x00\x01",
        1_234_000,
    )
    assert Tombstone.decode(tomb.new_value) == Tombstone("cg")
    assert plan.old_mutations == (muts[1],)
    only_sets = WINDOW.write(SPLIT_KEY, muts[:1], token=b"t", now_micros=0)
    assert only_sets.old_key is None
    assert only_sets.new_mutations == (muts[0],)


def test_write_plan_for_a_shared_row_deletes_once_without_tombstone() -> None:
    """A key whose two rows are one gets its mutations as they are, on that row."""
    muts = [DeleteAllFromRow(), SetCell("cf", b"a", b"1", 1000)]
    plan = WINDOW.write(SHARED_KEY, muts, token=b"t", now_micros=0)
    assert plan.new_key == WINDOW.old.salt_key(SHARED_KEY)
    assert (plan.new_mutations, plan.old_key) == (tuple(muts), None)
    assert WINDOW.backfill(SHARED_KEY, Row(b"x", [_cell("cf", b"a", 1, b"v")]), None) == []


@pytest.mark.parametrize(
    "mutation",
    [
        SetCell(WINDOW_FAMILY, b"q", b"v", 0),
        DeleteAllFromFamily(WINDOW_FAMILY),
        DeleteRangeFromColumn(WINDOW_FAMILY, b"q"),
        AddToCell("cf", b"n", 1, 0),
    ],
)
def test_write_refuses_the_window_family_and_aggregates(mutation: Mutation) -> None:
    """Writes cannot touch tombstones, nor add to an aggregate split across layouts."""
    with pytest.raises(WindowError, match="resalt window"):
        WINDOW.write(SPLIT_KEY, [mutation], token=b"t", now_micros=0)


@pytest.mark.parametrize("operation", ["check_and_mutate_row", "read_modify_write_row"])
@pytest.mark.parametrize("key", KEYS)
def test_atomic_operations_are_refused(operation: str, key: bytes) -> None:
    """Atomic single-row operations name the window and the key, for every key."""
    with pytest.raises(WindowError) as caught:
        WINDOW.refuse_atomic(operation, key)
    message = str(caught.value)
    assert operation in message
    assert str(WINDOW) in message
    assert key.decode() in message
    assert isinstance(caught.value, LayoutError)


def test_refuse_atomic_knows_its_operations() -> None:
    """A name that is no atomic operation is a programming error, not a refusal."""
    with pytest.raises(ValueError, match="not an atomic"):
        WINDOW.refuse_atomic("mutate_row", b"k")


# -- layouts, collisions, M = k * N ------------------------------------------------------


@pytest.mark.parametrize(
    ("new", "problem"),
    [
        (SaltScheme(64, hash="crc32c"), "hash"),
        (SaltScheme(64, separator=b"_"), "separator"),
        (SaltScheme(64, marker=b"~"), "marker"),
        (SaltScheme(16), "needs a new bucket count"),
    ],
)
def test_window_refuses_layouts_it_cannot_tell_apart(new: SaltScheme, problem: str) -> None:
    """Hash, separator and marker stay; the bucket count changes."""
    with pytest.raises(SaltSchemeError, match=problem):
        Window(SaltScheme(16), new)


def test_window_family_must_be_a_family_name() -> None:
    """The tombstone family is checked like Bigtable checks family ids."""
    with pytest.raises(SaltSchemeError, match="column family"):
        Window(SaltScheme(16), SaltScheme(64), family="no/slash")


_schemes = st.sampled_from(HASHES).flatmap(
    lambda h: st.tuples(
        st.just(h),
        st.integers(1, 64 if h == "phoenix" else 512),
        st.integers(2, 4),
    )
)
_keys = st.text(min_size=1, max_size=12).map(lambda t: t.encode())


@given(_schemes, st.lists(_keys, min_size=1, max_size=20))
def test_old_bucket_is_new_bucket_mod_n_when_m_is_a_multiple(
    scheme: tuple[str, int, int], keys: list[bytes]
) -> None:
    """For M = k*N, every key's old bucket is its new bucket mod N (Java: signed remainder)."""
    hash_, n, k = scheme
    window = Window(SaltScheme(n, hash=hash_), SaltScheme(n * k, hash=hash_))
    assert window.divides
    for key in keys:
        assert window.old_bucket(window.new.bucket_of(key)) == window.old.bucket_of(key)


def test_old_bucket_needs_a_multiple() -> None:
    """M not a multiple of N: a new bucket mixes old buckets, and the helper says so."""
    with pytest.raises(SaltSchemeError, match="not a multiple"):
        Window(SaltScheme(16), SaltScheme(24)).old_bucket(3)


@given(st.sampled_from(HASHES), _keys)
def test_shared_rows_and_placement(hash_: str, key: bytes) -> None:
    """A key's rows are one exactly when its physical keys are equal; scans place each row."""
    window = Window(SaltScheme(16, hash=hash_), SaltScheme(64, hash=hash_))
    new_key, old_key = window.physical_keys(key)
    assert new_key == window.new.salt_key(key)
    if old_key is None:
        assert window.shares_row(key)
        assert window.old.salt_key(key) == new_key
        assert window.place(new_key).shared
        assert window.old.bucket_of(key) == window.new.bucket_of(key)
    else:
        assert window.place(old_key) == type(window.place(old_key))(key, True, False)
        assert window.place(new_key) == type(window.place(new_key))(key, False, True)


def test_shared_rows_exist_for_the_same_prefix_width() -> None:
    """N=16 -> M=64 (both two digits): about a quarter of keys share their row; N=8 -> 64: none."""
    keys = [b"k%d" % i for i in range(2000)]
    shared = sum(WINDOW.shares_row(k) for k in keys)
    assert 400 < shared < 600
    narrow = Window(SaltScheme(8), SaltScheme(64))
    assert not any(narrow.shares_row(k) for k in keys)


def test_placement_of_a_row_no_layout_writes() -> None:
    """A physical key whose bucket fits neither layout's hash of its key belongs to neither."""
    key = SPLIT_KEY
    wrong = next(
        b for b in range(16) if b not in (WINDOW.old.bucket_of(key), WINDOW.new.bucket_of(key))
    )
    placed = WINDOW.place(WINDOW.old.prefix(wrong) + key)
    assert (placed.key, placed.old, placed.new) == (None, False, False)
    assert WINDOW.place(b"zz-plain") == type(placed)(None, False, False)


# -- filters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row_filter", "path"),
    [
        (CellsRowLimitFilter(1), "CellsRowLimitFilter"),
        (CellsRowOffsetFilter(1), "CellsRowOffsetFilter"),
        (RowSampleFilter(0.5), "RowSampleFilter"),
        (SinkFilter(True), "SinkFilter"),
        (ApplyLabelFilter("x"), "ApplyLabelFilter"),
        (StripValueTransformerFilter(False), "flag of False"),
        (PassAllFilter(False), "flag of False"),
        (
            ConditionalRowFilter(PassAllFilter(True), PassAllFilter(True)),
            "ConditionalRowFilter",
        ),
        (
            RowFilterChain([FamilyNameRegexFilter("cf"), CellsRowLimitFilter(2)]),
            "RowFilterChain[1] > CellsRowLimitFilter",
        ),
        (
            RowFilterUnion([PassAllFilter(True), RowFilterChain([RowSampleFilter(0.1)])]),
            "RowFilterUnion[1] > RowFilterChain[0] > RowSampleFilter",
        ),
    ],
)
def test_refused_filters_name_the_window_and_the_filter(row_filter: object, path: str) -> None:
    """Row-level, conditional, sampling, sink and label filters are refused, by path."""
    with pytest.raises(WindowFilterError) as caught:
        plan_filter(row_filter, window=str(WINDOW))  # type: ignore[arg-type]
    assert path in str(caught.value)
    assert str(WINDOW) in str(caught.value)
    assert isinstance(caught.value, QueryPlanError)


def test_plan_of_allowed_filters() -> None:
    """Selectors go to the server with the tombstones; value and column filters stay local."""
    assert plan_filter(None, window="w") == plan_filter(None, window="w")
    assert plan_filter(None, window="w").server is None
    latest = plan_filter(CellsColumnLimitFilter(1), window="w")
    assert latest.server is None
    assert latest.local == CellsColumnLimitFilter(1)
    chain = RowFilterChain(
        [FamilyNameRegexFilter("cf"), ValueRegexFilter(b"v"), StripValueTransformerFilter(True)]
    )
    planned = plan_filter(chain, window="w")
    assert planned.server == RowFilterUnion(
        [FamilyNameRegexFilter("cf"), ColumnRangeFilter(WINDOW_FAMILY)]
    )
    assert planned.local == chain


def test_row_key_regex_is_matched_against_the_logical_key() -> None:
    """Locally a row-key regex sees the logical key, as the salted table's rewrite makes it."""
    row = Row(b"user1", [_cell("cf", b"a", 1, b"v", b"user1")])
    assert apply_filter(RowKeyRegexFilter(b"user\\d"), row) == row
    assert apply_filter(RowKeyRegexFilter(b"user"), row) is None


_rows = st.lists(cell_tuples, max_size=8).map(cells_dict)
_tombstone_rows = st.lists(
    st.one_of(
        st.just(Tombstone()),
        st.sampled_from(FAMILIES).map(Tombstone),
        st.builds(Tombstone, st.sampled_from(FAMILIES), st.sampled_from(QUALIFIERS)),
    ),
    max_size=2,
)


@settings(max_examples=400)
@given(_rows, _rows, _tombstone_rows, allowed_filters)
@example({("cf", b"a", 1000): b"v1"}, {("cf", b"a", 1000): b"w"}, [], ValueRegexFilter(b"v.*"))
def test_server_filter_keeps_what_the_user_filter_needs(
    old: dict, new: dict, tombs: list[Tombstone], row_filter: object
) -> None:
    """Both layouts read through the server filter, combined, then filtered: as if read whole."""
    planned = plan_filter(row_filter, window="w")  # type: ignore[arg-type]
    new_row = dict(new)
    for i, t in enumerate(tombs):
        new_row[(WINDOW_FAMILY, b"t%d" % i, 5000)] = t.encode()
    whole_old, whole_new = as_row(b"o", old), as_row(b"n", new_row)
    expected = planned.apply(combine(b"k", whole_old, whole_new))
    read_old = apply_filter(planned.server, whole_old)
    read_new = apply_filter(planned.server, whole_new)
    got = planned.apply(combine(b"k", read_old, read_new))
    assert as_tuples(got) == as_tuples(expected)


def test_apply_filter_union_keeps_duplicates_and_column_limit_counts_them() -> None:
    """Interleave outputs a cell once per branch that passes it, as Bigtable does."""
    row = Row(b"k", [_cell("cf", b"a", 2000, b"x"), _cell("cf", b"a", 1000, b"y")])
    twice = RowFilterUnion([PassAllFilter(True), PassAllFilter(True)])
    assert len(apply_filter(twice, row).cells) == 4  # type: ignore[union-attr]
    limited = apply_filter(RowFilterChain([twice, CellsColumnLimitFilter(1)]), row)
    assert [c.timestamp_micros for c in limited.cells] == [2000]  # type: ignore[union-attr]


def test_random_backfill_never_loses_a_cell() -> None:
    """A whole backfill of random rows leaves the old rows redundant and the union unchanged."""
    rng = random.Random(7)
    phys = Physical()
    for i in range(50):
        key = b"r%d" % i
        cells = {
            (rng.choice(FAMILIES), rng.choice(QUALIFIERS), rng.choice(STAMPS)): b"v"
            for _ in range(rng.randint(1, 6))
        }
        phys.rows[WINDOW.old.salt_key(key)] = dict(cells)
        new_key, old_key = WINDOW.physical_keys(key)
        old = phys.read(old_key) if old_key else None
        for copy in WINDOW.backfill(key, old, phys.read(new_key), max_cells=2):
            assert not phys.check_and_mutate(copy.row_key, copy.predicate, copy.mutations)
        after_old = phys.read(old_key) if old_key else None
        assert as_tuples(WINDOW.combine(key, after_old, phys.read(new_key))) == as_tuples(
            as_row(key, cells)
        )
        retire = WINDOW.retire_old(key, after_old, phys.read(new_key))
        assert (retire is None) == (old_key is None)


@given(st.dictionaries(_keys, st.tuples(_rows, _rows), max_size=12), st.sampled_from(HASHES))
def test_logical_rows_of_a_scan_are_the_combined_rows(
    data: dict[bytes, tuple[dict, dict]], hash_: str
) -> None:
    """Physical rows of both layouts, in logical-key order, combine into each key's row."""
    window = Window(SaltScheme(16, hash=hash_), SaltScheme(64, hash=hash_))
    physical: dict[bytes, dict] = {}
    expected = []
    for key in sorted(data):
        old, new = data[key]
        new_key, old_key = window.physical_keys(key)
        if old_key is None:
            physical[new_key] = {**old, **new}
        else:
            physical[old_key], physical[new_key] = old, new
        row = window.combine(
            key,
            None if old_key is None else as_row(old_key, physical[old_key]),
            as_row(new_key, physical[new_key]),
        )
        if row is not None:
            expected.append(row)
    # What a merged scan hands out: every non-empty physical row, in logical-key order.
    scanned = sorted(
        (r for k, cells in physical.items() if (r := as_row(k, cells)) is not None),
        key=lambda r: (window.place(r.row_key).key, r.row_key),
    )
    # A row at a prefix that neither layout gives its key: not part of the logical table.
    nobody = b"nobody"
    wrong = next(
        b
        for b in range(16)
        if b not in (window.old.bucket_of(nobody), window.new.bucket_of(nobody))
    )
    stray = Row(window.old.prefix(wrong) + nobody, [_cell("cf", b"a", 1, b"x")])
    got = list(window.logical_rows([stray, *scanned]))
    assert [(r.row_key, as_tuples(r)) for r in got] == [(r.row_key, as_tuples(r)) for r in expected]


def test_backfill_of_a_cell_past_year_9999() -> None:
    """A timestamp no datetime can name (reverse timestamps) still gets a safe predicate."""
    phys = Physical()
    old_key, new_key = WINDOW.old.salt_key(SPLIT_KEY), WINDOW.new.salt_key(SPLIT_KEY)
    far = 2**62 - 2**62 % 1000
    phys.rows[old_key] = {("cf", b"a", far): b"v"}
    (copy,) = WINDOW.backfill(SPLIT_KEY, phys.read(old_key), None)
    phys.mutate(new_key, [SetCell("cf", b"a", b"other", 1000)])
    assert phys.check_and_mutate(copy.row_key, copy.predicate, copy.mutations)
    phys.rows[new_key] = {}
    assert not phys.check_and_mutate(copy.row_key, copy.predicate, copy.mutations)
    assert phys.rows[new_key] == {("cf", b"a", far): b"v"}
