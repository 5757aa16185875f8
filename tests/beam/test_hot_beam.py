"""Beam reads and verify of a table with hot lists (the emulator, Beam's runner).

A hot part's rows live in K buckets, a split row in K sub-rows. Beam must read what
``SaltedTable.read_rows`` reads: every row of the part (a range the key part narrows to
one bucket reads all K), and a split row once, combined; a filter that cannot keep its
meaning on a split row is refused naming the row.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import apache_beam as beam
import pytest
from apache_beam.pvalue import PCollection
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowMutationEntry, RowRange
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import ValueRegexFilter

from saltedtable import (
    SaltedTable,
    SaltScheme,
    SplitKeyError,
    fields,
    finish_hot_move,
    split_hot_key,
)
from saltedtable._scheme.hot import HotLayout
from saltedtable.beam import BigtableTarget, ReadSaltedRows, resalt, verify_resalt
from saltedtable.testing import INSTANCE, PROJECT
from tests.beam.helpers import run_collect, snapshot
from tests.conftest import MakeTable

SCHEME = SaltScheme(16, key_part=fields(1))  # a tenant's rows share a bucket
SPLIT = b"stats#clicks"


def _hot_table(make_table: MakeTable) -> tuple[str, HotLayout]:
    """Tenant t7 spread over 4 buckets, ``stats#clicks`` split into 4 sub-rows, other tenants."""
    name = make_table(("cf",))
    with BigtableDataClient(project=PROJECT) as client:
        raw = client.get_table(INSTANCE, name)
        SaltedTable(raw, SCHEME).mutate_row(b"t1#000", SetCell("cf", b"v", b"x", 1000))
        # Clocks far enough back that each split's start (now plus the lead) has passed.
        now = dt.datetime.now(dt.UTC)
        split_hot_key(raw, "part", b"t7", 4, now=now - dt.timedelta(seconds=600))
        _, moving = split_hot_key(raw, "row", SPLIT, 4, now=now - dt.timedelta(seconds=300))
        with pytest.raises(SplitKeyError, match="'t7' are moving"):
            ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, name), SCHEME, hot=moving)
        assert finish_hot_move(raw, b"t7").finished  # (no row was written yet; start 480 s ago)
        hot = dataclasses.replace(moving, moving={})
        table = SaltedTable(raw, SCHEME, hot=hot)
        entries = [
            RowMutationEntry(b"t%d#%03d" % (t, i), SetCell("cf", b"v", b"x", 1000))
            for t in (1, 2, 7)
            for i in range(30)
        ]
        table.bulk_mutate_rows(entries)
        # Columns of a split row live in different sub-rows.
        table.mutate_row(
            SPLIT, [SetCell("cf", b"c%d" % i, b"%d" % i, 1000 * (1 + i)) for i in range(12)]
        )
        physical = {r.row_key for r in raw.read_rows(ReadRowsQuery())}
    assert len({p for p in physical if p.endswith(SPLIT)}) > 1  # really in several sub-rows
    assert len({p[:3] for p in physical if p[3:].startswith(b"t7#")}) == 4
    return name, hot


def _table_rows(name: str, hot: HotLayout, query: ReadRowsQuery) -> list[Row]:
    with BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable(client.get_table(INSTANCE, name), SCHEME, hot=hot)
        return list(table.read_rows(query))


def _beam_rows(read: ReadSaltedRows) -> list[Row]:
    def build(p: beam.Pipeline) -> PCollection[Row]:
        out: PCollection[Row] = p | read
        return out

    rows, _ = run_collect(build)
    return rows


def test_beam_reads_hot_parts_in_their_buckets_and_split_rows_once(
    make_table: MakeTable,
) -> None:
    """Whole table, the hot part's range, point keys: as the table reads them."""
    name, hot = _hot_table(make_table)
    target = BigtableTarget(PROJECT, INSTANCE, name)
    for query in (
        ReadRowsQuery(),
        ReadRowsQuery(row_ranges=RowRange(b"t7#", b"t7$")),  # the key part: t7's 4 buckets
        ReadRowsQuery(row_ranges=RowRange(b"stats", b"stats~")),
        ReadRowsQuery(row_keys=[b"t7#005", SPLIT, b"t1#001", b"nope#1"]),
    ):
        expected = _table_rows(name, hot, query)
        got = _beam_rows(ReadSaltedRows(target, SCHEME, query, split_bytes=2_000, hot=hot))
        assert snapshot(got) == snapshot(expected)
        assert [r.row_key for r in got].count(SPLIT) == (SPLIT in {r.row_key for r in expected})
    everything = _table_rows(name, hot, ReadRowsQuery())
    assert len([r for r in everything if r.row_key.startswith(b"t7#")]) == 30
    split = next(r for r in everything if r.row_key == SPLIT)
    assert len(split.cells) == 12


def test_a_split_row_is_refused_with_a_filter_it_cannot_keep_and_without_the_lists(
    make_table: MakeTable,
) -> None:
    """A value filter over a split row names the row; a reader without hot= is refused."""
    name, hot = _hot_table(make_table)
    target = BigtableTarget(PROJECT, INSTANCE, name)
    with pytest.raises(SplitKeyError, match="stats#clicks"):
        ReadSaltedRows(target, SCHEME, ReadRowsQuery(row_filter=ValueRegexFilter(b"1")), hot=hot)
    # The same filter on a range without split rows is fine.
    tenants = ReadRowsQuery(row_ranges=RowRange(b"t", b"u"), row_filter=ValueRegexFilter(b"x"))
    rows = _beam_rows(ReadSaltedRows(target, SCHEME, tenants, hot=hot))
    assert len(rows) == 90
    with pytest.raises(Exception, match="hot"):  # the record's hot lists differ
        _beam_rows(ReadSaltedRows(target, SCHEME))


def test_resalt_verifies_a_table_with_hot_lists(make_table: MakeTable) -> None:
    """A split row is copied and compared as one row; the copy has every tenant's rows."""
    name, hot = _hot_table(make_table)
    copy = make_table(("cf",))
    source = BigtableTarget(PROJECT, INSTANCE, name)
    destination = BigtableTarget(PROJECT, INSTANCE, copy)
    new = SaltScheme(8, key_part=fields(1))
    report = resalt(source, SCHEME, destination, new, family="cf", hot=hot)
    assert report.ok, report.lines()
    again = verify_resalt(source, SCHEME, destination, new, hot=hot)
    assert again.ok
    assert again.checksums is not None
    assert again.checksums.rows == (91, 91)  # 90 tenant rows and the split row, once
    with BigtableDataClient(project=PROJECT) as client:
        copied = list(SaltedTable(client.get_table(INSTANCE, copy), new).read_rows({}))
    assert snapshot(copied) == snapshot(_table_rows(name, hot, ReadRowsQuery()))
