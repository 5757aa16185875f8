"""Today's two layouts, run through the general epoch code, behave exactly as today.

A stored lead keeps a one-scheme or cutoff list in its epoch form (``Layout.epochs``
set), so every read and write takes the epoch paths: routing by ``Epochs.locate``,
planning by ``Epochs.touches``, hiding by ``Epochs.hiding_for``. The cutoff tests'
differential harness (legacy rows, new rows, late old rows, deletes, every read
shape, limits, filters) then runs unchanged against that table, and the rows it
stores are the very rows today's cutoff table stores.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.mutations import DeleteAllFromRow
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import CutoffPolicy, Layout, ReadBudget, SaltedTableAsync, SaltScheme
from tests.fakes import FakeTable
from tests.unit._scheme.test_cutoff import (
    FORMATS,
    MARKED8,
    S8,
    SCHEMES,
    KeyFormat,
    Mirror,
    Scenario,
    _entries,
    _Warnings,
    assert_physical_layout,
    assert_same_reads,
    policy,
    queries,
    run,
    scenarios,
    time_windows,
)


def epoch_form(layout: Layout) -> Layout:
    """``layout`` as epochs, kept in the epoch form by a stored lead."""
    epochs = dataclasses.replace(layout.as_epochs(), min_lead=60.0)
    made = Layout.of_epochs(epochs)
    assert made.epochs is not None
    return made


async def build_mirror(layout: Layout, sc: Scenario, budget: int) -> Mirror:
    """test_cutoff's build_mirror, with the table opened on ``layout``."""
    plain, fake = FakeTable(), FakeTable()
    for key, cells in sc.legacy.items():  # the pre-existing table, unsalted
        for family, qualifier, ts, value in cells:
            plain.set_cell(key, family, qualifier, value, ts)
            fake.set_cell(key, family, qualifier, value, ts)
    table = await SaltedTableAsync.open(fake, layout, budget=ReadBudget(rows=budget))
    new = _entries(sc.new)
    half = len(new) // 2
    await table.bulk_mutate_rows(new[:half])
    async with table.mutations_batcher() as batcher:
        for e in new[half:]:
            await batcher.append(e)
    for e in _entries({**sc.late, **sc.meta}):
        await table.mutate_row(e.row_key, list(e.mutations))
    await plain.bulk_mutate_rows(_entries(sc.new) + _entries({**sc.late, **sc.meta}))
    for key in sc.deleted:
        await table.mutate_row(key, DeleteAllFromRow())
        await plain.mutate_row(key, DeleteAllFromRow())
    return Mirror(plain, fake, table)


def differential(scheme: SaltScheme, fmt: KeyFormat, with_meta: bool = False) -> None:
    """test_cutoff's differential on the epoch form of the cutoff layout."""
    pol = policy(fmt.reader, "legacy" if with_meta else "error")
    layout = epoch_form(Layout(scheme, pol))
    windows = time_windows(fmt)

    @settings(max_examples=8, deadline=None)
    @given(data=st.data(), sc=scenarios(fmt, with_meta), budget=st.sampled_from([20_000, 2]))
    def check(data: st.DataObject, sc: Scenario, budget: int) -> None:
        qs = [data.draw(queries(sc.universe), label=f"query {i}") for i in range(3)]
        qs += [ReadRowsQuery(), *data.draw(st.permutations(windows), label="windows")[:4]]

        async def main() -> None:
            m = await build_mirror(layout, sc, budget)
            # The rows stored are the rows today's cutoff layout stores.
            assert_physical_layout(m, scheme, {*sc.legacy, *sc.late, *sc.meta})
            await assert_same_reads(m, qs, sc.universe)

        log, handler = logging.getLogger("saltedtable"), _Warnings()
        log.addHandler(handler)
        try:
            run(main)
        finally:
            log.removeHandler(handler)
        assert handler.messages == []

    check()


@pytest.mark.parametrize("scheme_name", ["crc32-8", "marker-8", "java-8"])
def test_a_cutoff_as_epochs_reads_as_the_cutoff_does(scheme_name: str) -> None:
    """Legacy + new + late rows, every read shape: the epoch form answers like a plain table."""
    differential(SCHEMES[scheme_name], FORMATS["epoch-ms"])


def test_a_cutoff_as_epochs_with_unreadable_keys_in_the_first_epoch() -> None:
    """``unreadable='legacy'`` is the first epoch's fallback: such keys read back alike."""
    differential(MARKED8, FORMATS["epoch-ms"], with_meta=True)


def test_a_cutoff_as_epochs_with_another_reader() -> None:
    """A reversed timestamp field, whose time bounds run the other way."""
    differential(S8, FORMATS["reversed"])


def test_one_epoch_reads_as_a_plain_salted_table() -> None:
    """A one-scheme layout in epoch form: the rows and every read equal the plain table's."""
    fmt = FORMATS["epoch-ms"]
    layout = epoch_form(Layout(S8))

    @settings(max_examples=8, deadline=None)
    @given(data=st.data(), sc=scenarios(fmt, False), budget=st.sampled_from([20_000, 2]))
    def check(data: st.DataObject, sc: Scenario, budget: int) -> None:
        sc = dataclasses.replace(sc, new={**sc.legacy, **sc.new}, legacy={})
        qs = [data.draw(queries(sc.universe), label=f"query {i}") for i in range(3)]

        async def main() -> None:
            m = await build_mirror(layout, sc, budget)
            assert_physical_layout(m, S8, set())
            await assert_same_reads(m, qs, sc.universe)

        run(main)

    check()


def test_the_epoch_form_hides_what_the_cutoff_hides() -> None:
    """A salted row whose time is before the cutoff, a legacy row after it: hidden by both."""
    fmt = FORMATS["epoch-ms"]
    pol: CutoffPolicy = policy(fmt.reader)
    today = Layout(S8, pol)
    old, new = fmt.make(b"dev1", 1_704_067_199_000), fmt.make(b"dev1", 1_704_067_201_000)

    async def rows(layout: Layout) -> list[bytes]:
        fake = FakeTable()
        fake.set_cell(S8.salt_key(old), "f1", b"q", b"copy")  # a backfilled copy
        fake.set_cell(new, "f1", b"q", b"stray")  # unsalted, after the cutoff
        fake.set_cell(old, "f1", b"q", b"legacy")
        table = SaltedTableAsync(fake, layout)  # (a stored lead needs the guard)
        return [r.row_key for r in await table.read_rows(ReadRowsQuery())]

    assert run(lambda: rows(today)) == run(lambda: rows(epoch_form(today))) == [old]
