"""Hot keys on the emulator: ``saltedtable split``, the guard, inspect, and the model test.

* ``split --part`` and ``--row`` change the record by compare-and-swap; ``inspect``
  lists them and finds no stray key among a hot part's rows and a split row's
  sub-rows; a table object without the lists (or with older ones) is refused; one
  with the record's lists reads and writes them; a part whose rows exist moves:
  read in both places, then ``split --finish`` moves its rows and ends the move.
* The model machine of ``tests/unit/_async/test_hot_fake.py`` runs against two
  emulator tables (the hot one and a plain model), reversed scans included, with
  parts listed and K raised while rows exist, backfill steps and finished moves. Left
  out: ``AddToCell`` to min and max families (the emulator keeps the last value
  there), and a cell limit across families (the emulator orders a row's families
  its own way, per table).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery
from google.cloud.bigtable.data.mutations import AddToCell, DeleteAllFromRow, Mutation, SetCell
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import CellsRowLimitFilter, RowFilter
from google.cloud.bigtable_admin_v2 import types
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from saltedtable import HotLayout, SaltedTableAsync, SaltScheme, SchemeMismatchError, fields
from saltedtable._admin import admin_client
from saltedtable._exceptions import SplitKeyError
from saltedtable._guard.families import parse_family
from saltedtable._scheme.hot_move import MOVE_FAMILY
from saltedtable.testing import INSTANCE, PROJECT, Emulator, delete_table
from tests.cli_helpers import assert_one_line_error, run
from tests.hot_model import AGGREGATES, FAMILY_SPECS
from tests.unit._async.test_hot_fake import FILTERS, SCHEME, HotTableMachine, Shape, shape

pytestmark = pytest.mark.emulator
WHERE = ("--project", PROJECT, "--instance", INSTANCE)


def _create(emulator: Emulator) -> str:
    table_id = f"hot-{uuid.uuid4().hex[:12]}"
    with admin_client(emulator_host=emulator.address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{PROJECT}/instances/{INSTANCE}",
                table_id=table_id,
                table=types.Table(
                    column_families=dict(parse_family(s) for s in (*FAMILY_SPECS, MOVE_FAMILY))
                ),
            )
        )
    return table_id


@pytest.fixture
def tables(emulator: Emulator) -> Iterator[list[str]]:
    """Makes tables with plain and aggregate families; deletes them after the test."""
    made: list[str] = []
    yield made
    for name in made:
        delete_table(emulator.address, name, missing_ok=True)


async def test_split_inspect_and_the_guard(
    emulator: Emulator,
    tables: list[str],
    capsys: pytest.CaptureFixture[str],
    data_client: BigtableDataClientAsync,
) -> None:
    table_id = _create(emulator)
    tables.append(table_id)
    scheme = SaltScheme(8, key_part=fields(1))
    raw = data_client.get_table(INSTANCE, table_id)
    plain = SaltedTableAsync(raw, scheme)
    await plain.guard_scheme(family="cf")  # the record, without hot lists
    await plain.mutate_row(b"t1#x", SetCell("cf", b"a", b"v", 1000))

    # A short lead, waited out: a split starts the lead after it is stored, and the
    # next split waits for that start.
    lead = ("--min-lead", "1")
    assert run(capsys, "split", table_id, *WHERE, "--part", "t0", "-k", "4", *lead)[0] == 0
    code, _, err = run(capsys, "split", table_id, *WHERE, "--row", "t2#ctr", "-k", "4")
    assert code == 1
    assert_one_line_error(err, "previous hot-key split starts at")
    await asyncio.sleep(1.1)
    code, out, err = run(capsys, "split", table_id, *WHERE, "--row", "t2#ctr", "-k", "4")
    assert (code, err) == (0, "")
    assert "hot row 't2#ctr' listed to K=4" in out
    assert "it starts at" in out
    await asyncio.sleep(1.1)
    code, _, err = run(capsys, "split", table_id, *WHERE, "--row", "t2#ctr", "-k", "3")
    assert code == 2  # a usage error: the K given
    assert_one_line_error(err, "K may only rise")

    # A table object whose lists are neither the record's nor those before its latest
    # split (it missed the first) is refused at its next record read.
    stale = SaltedTableAsync(raw, scheme)
    with pytest.raises(SchemeMismatchError, match="hot"):
        await stale.read_row(b"t2#ctr")
    hot = HotLayout(scheme, parts={b"t0": 4}, rows={b"t2#ctr": 4})
    table = SaltedTableAsync(raw, scheme, hot=hot, aggregates=AGGREGATES)
    for i in range(40):
        await table.mutate_row(b"t0#%03d" % i, SetCell("cf", b"a", b"v", 1000))
    for _ in range(12):
        await table.mutate_row(b"t2#ctr", AddToCell("sm", b"n", 1, 0))
    row = await table.read_row(b"t2#ctr")
    assert row is not None
    assert [int.from_bytes(c.value, "big") for c in row.cells] == [12]
    keys = [r.row_key async for r in table.read_prefix(b"t0#", limit=25)]
    assert keys == [b"t0#%03d" % i for i in range(25)]
    every = await table.read_rows(ReadRowsQuery())
    assert [r.row_key for r in every].count(b"t2#ctr") == 1

    code, out, err = run(capsys, "inspect", table_id, *WHERE, "--json")
    report = json.loads(out)
    assert report["stray_keys"] == []
    assert {(h["kind"], h["value"], h["k"]) for h in report["hot"]} == {
        ("part", "t0", 4),
        ("row", "t2#ctr", 4),
    }
    assert (code, err) == (0, "")

    # A part whose rows exist moves: both places are read until --finish.
    for i in range(12):
        await table.mutate_row(b"t1#%02d" % i, SetCell("cf", b"a", b"old", 1000))
    code, out, err = run(capsys, "split", table_id, *WHERE, "--part", "t1", "-k", "4")
    assert (code, err) == (0, "")
    assert "hot part 't1' moves from K=1 to K=4" in out
    await asyncio.sleep(1.1)  # the split's start (the stored lead): writers move then
    moving = HotLayout(scheme, parts={b"t0": 4, b"t1": 4}, rows={b"t2#ctr": 4}, moving={b"t1": 1})
    table = SaltedTableAsync(raw, scheme, hot=moving, aggregates=AGGREGATES)
    moved = [k for k in (b"t1#%02d" % i for i in range(12)) if moving.move_keys(k)[1]]
    assert moved  # the jump hash moves about 3 of every 4 keys
    await table.mutate_row(moved[0], SetCell("cf", b"b", b"new", 2000))
    await table.mutate_row(moved[-1], DeleteAllFromRow())
    want = {b"t1#x"} | {b"t1#%02d" % i for i in range(12)} - {moved[-1]}
    got = {r.row_key async for r in table.read_prefix(b"t1#")}
    assert got == want
    row = await table.read_row(moved[0])
    assert row is not None
    assert sorted((c.qualifier, c.value) for c in row.cells) == [(b"a", b"old"), (b"b", b"new")]
    with pytest.raises(SplitKeyError, match="is moving"):
        await table.check_and_mutate_row(moved[0], None, true_case_mutations=[])
    code, out, _ = run(capsys, "inspect", table_id, *WHERE)
    assert "hot part 't1': K=4" in out
    assert "moving from K=1" in out
    code, out, _ = run(capsys, "inspect", table_id, *WHERE, "--json")
    assert json.loads(out)["stray_keys"] == []  # rows at their old place are not strays

    # Writers whose clocks run behind still write the old place: refused until the margin.
    code, _, err = run(capsys, "split", table_id, *WHERE, "--finish", "--part", "t1")
    assert code == 1
    assert_one_line_error(err, "the move can be finished only 60 s after the start")
    finish = ("--finish", "--part", "t1", "--clock-margin", "0")
    code, out, err = run(capsys, "split", table_id, *WHERE, *finish)
    assert (code, err) == (0, "")
    assert "hot part 't1' moved" in out
    done = HotLayout(scheme, parts={b"t0": 4, b"t1": 4}, rows={b"t2#ctr": 4})
    table = SaltedTableAsync(raw, scheme, hot=done, aggregates=AGGREGATES)
    assert {r.row_key async for r in table.read_prefix(b"t1#")} == want
    row = await table.read_row(moved[0])
    assert row is not None
    assert sorted((c.family, c.qualifier, c.value) for c in row.cells) == [
        ("cf", b"a", b"old"),
        ("cf", b"b", b"new"),
    ]
    code, out, err = run(capsys, "inspect", table_id, *WHERE, "--json")
    assert json.loads(out)["stray_keys"] == []
    listed = {h["value"]: h for h in json.loads(out)["hot"]}
    assert "moving_from" not in listed["t1"]  # finished (t0, listed with no rows, still moves)
    assert listed["t0"]["moving_from"] == 1
    code, _, err = run(capsys, "split", table_id, *WHERE, "--finish", "--part", "t1")
    assert code == 1
    assert_one_line_error(err, "hot part 't1' is not moving")


def test_the_hot_table_answers_like_a_plain_table_on_the_emulator(
    emulator: Emulator, tables: list[str]
) -> None:
    """Random histories with splits and K raises: every read equals the plain table's."""

    class OnEmulator(HotTableMachine):
        filters: Sequence[RowFilter | None] = [
            f for f in FILTERS if not isinstance(f, CellsRowLimitFilter)
        ]

        def __init__(self) -> None:
            super().__init__()
            names = (_create(emulator), _create(emulator))
            tables.extend(names)

            async def connect() -> tuple[BigtableDataClientAsync, Any, Any]:
                client = BigtableDataClientAsync(project=PROJECT)
                return client, *(client.get_table(INSTANCE, name) for name in names)

            self.client, self.model, self.fake = self.run(connect())
            self.table = self.new_table(self.hot)

        def new_table(self, hot: HotLayout) -> SaltedTableAsync:
            return SaltedTableAsync(self.fake, SCHEME, guard=False, hot=hot, aggregates=AGGREGATES)

        def keep(self, mutation: Mutation) -> bool:
            return not (isinstance(mutation, AddToCell) and mutation.family != "sm")

        def shape(self, rows: Sequence[Row]) -> Shape:
            for row in rows:
                row.cells.sort(key=lambda c: c.family)
            return shape(rows)

        def teardown(self) -> None:
            self.run(self.client.close())
            super().teardown()

    run_state_machine_as_test(
        OnEmulator, settings=settings(max_examples=15, stateful_step_count=25, deadline=None)
    )
