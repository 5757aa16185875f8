"""ReadSaltedRows and WriteSaltedRows on the emulator, run by Beam's in-process runner."""

from __future__ import annotations

import datetime as dt
import logging
import pickle
import re
import types
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pvalue import PCollection
from apache_beam.transforms.combiners import Count
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data.mutations import Mutation
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    FamilyNameRegexFilter,
    RowFilterChain,
    RowKeyRegexFilter,
)

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    Layout,
    QueryPlanError,
    ReadBudget,
    SaltedTableAsync,
    SaltScheme,
    epoch_field,
    fields,
    plan_reads,
)
from saltedtable.beam import (
    BackfillLegacy,
    BigtableTarget,
    FailedWrite,
    ReadSaltedRows,
    WriteSaltedRows,
    counters,
    row_digest,
    run_pipeline,
)
from saltedtable.beam._io import PlanSplits, ReadSplits, SplitScan, WriteEntries
from saltedtable.testing import INSTANCE, PROJECT
from tests.beam.helpers import run_collect, snapshot
from tests.conftest import MakeTable

SCHEME = SaltScheme(16)
C = 1_704_067_200_000  # 2024-01-01 in epoch milliseconds
POLICY = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field("ms", index=1, digits=13))
MIN = 60_000


def k(sensor: int, ms: int) -> bytes:
    """``s<n>#<13-digit epoch millis>``."""
    return b"s%d#%013d" % (sensor, ms)


def cells(key: bytes) -> list[Mutation]:
    """Two families, two versions of one column."""
    return [
        SetCell("cf", b"temp", b"old" + key, 1_000_000),
        SetCell("cf", b"temp", b"new" + key, 2_000_000),
        SetCell("cg", b"x", key[-4:], 3_000_000),
    ]


async def _cutoff_table(data_client: BigtableDataClientAsync, table_id: str) -> SaltedTableAsync:
    """400 legacy rows loaded unsalted, then 1,600 rows after the cutoff, salted."""
    raw = data_client.get_table(INSTANCE, table_id)
    legacy = [k(s, C - m * MIN) for s in range(8) for m in range(1, 51)]
    await raw.bulk_mutate_rows([RowMutationEntry(key, cells(key)) for key in legacy])
    table = await SaltedTableAsync.open(raw, SCHEME, cutoff=POLICY, family="cf")
    new = [k(s, C + m * MIN) for s in range(8) for m in range(200)]
    await table.bulk_mutate_rows([RowMutationEntry(key, cells(key)) for key in new])
    return table


async def test_read_equals_the_async_reader(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Every query shape: ReadSaltedRows' rows and cells == SaltedTableAsync.read_rows, as sets."""
    table_id = make_table(("cf", "cg"))
    table = await _cutoff_table(data_client, table_id)
    queries = {
        "full": ReadRowsQuery(),
        "across the cutoff": ReadRowsQuery(row_ranges=RowRange(k(2, C - 20 * MIN), k(5, C))),
        "points": ReadRowsQuery(row_keys=[k(1, C - MIN), k(3, C + MIN), k(9, C)]),
        "regex and family": ReadRowsQuery(
            row_filter=RowFilterChain([RowKeyRegexFilter(b"s[37]#.*"), FamilyNameRegexFilter("cg")])
        ),
        "ranges and keys": ReadRowsQuery(
            row_keys=[k(0, C - 2 * MIN), k(6, C + 3 * MIN)],
            row_ranges=[RowRange(b"s1", b"s2"), RowRange(k(4, C), k(4, C + 50 * MIN))],
        ),
    }
    for name, query in queries.items():
        expected = snapshot(await table.read_rows(query))
        read = ReadSaltedRows(
            BigtableTarget(PROJECT, INSTANCE, table_id), SCHEME, query, POLICY, split_bytes=8_000
        )

        def build(p: beam.Pipeline, read: ReadSaltedRows = read) -> PCollection[Row]:
            out: PCollection[Row] = p | read
            return out

        rows, found = run_collect(build)
        assert snapshot(rows) == expected, name
        assert sum(v for n, v in found.items() if n.startswith("rows_read.")) == len(expected)
        if name == "full":
            assert len(expected) == 2000
            # More splits than buckets (and the legacy side): the samples cut them. (How
            # many varies with the emulator's samples: 33 and 34 seen for the same rows.)
            assert found["splits"] >= 30
            assert found["rows_read.legacy"] == 400


async def test_a_limit_is_refused() -> None:
    """A row limit has no meaning for an unordered parallel read: QueryPlanError, before any I/O."""
    with pytest.raises(QueryPlanError, match="limit=5"):
        ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, "t"), SCHEME, ReadRowsQuery(limit=5))


@pytest.mark.parametrize("split_bytes", [0, -1])
def test_a_split_size_below_one_byte_is_refused_at_construction(split_bytes: int) -> None:
    """ReadSaltedRows and the migration transforms check split_bytes before any I/O."""
    target = BigtableTarget(PROJECT, INSTANCE, "t")
    message = f"split_bytes must be >= 1, got {split_bytes}"
    with pytest.raises(ValueError, match=re.escape(message)):
        ReadSaltedRows(target, SCHEME, split_bytes=split_bytes)
    with pytest.raises(ValueError, match=re.escape(message)):
        BackfillLegacy(target, SCHEME, POLICY, split_bytes=split_bytes)
    with pytest.raises(ValueError, match=re.escape(message)):
        SplitScan(target, Layout(SCHEME), (), split_bytes, check_layout=True)


async def test_writes_are_salted_routed_and_failures_named_by_logical_key(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Keys before the cutoff stay unsalted, later ones salted; a bad entry comes back by key."""
    table_id = make_table(("cf", "cg"))
    raw = data_client.get_table(INSTANCE, table_id)
    keys = [k(s, C + d) for s in range(4) for d in (-2 * MIN, -1, 0, MIN)]
    entries = [RowMutationEntry(key, cells(key)) for key in keys]
    bad = RowMutationEntry(k(7, C + MIN), [SetCell("no-such-family", b"q", b"v", 1000)])
    failed, found = run_collect(
        lambda p: (
            p
            | beam.Create([*entries, bad])
            | WriteSaltedRows(
                BigtableTarget(PROJECT, INSTANCE, table_id), SCHEME, POLICY, on_failure="output"
            )
        )
    )
    assert [f.row_key for f in failed] == [bad.row_key]
    assert isinstance(failed[0], FailedWrite)
    physical = {row.row_key for row in await raw.read_rows(ReadRowsQuery())}
    assert SCHEME_ROW_KEY in physical  # the layout record, stored before the first write
    physical.discard(SCHEME_ROW_KEY)
    assert physical == {key if int(key[-13:]) < C else SCHEME.salt_key(key) for key in keys}
    assert found["rows_written.legacy"] == 8
    salted = SaltedTableAsync(raw, SCHEME, cutoff=POLICY)
    assert snapshot(await salted.read_rows(ReadRowsQuery())) == snapshot(
        await _plain_rows(data_client, make_table, entries)
    )
    with pytest.raises(Exception, match=re.escape(repr(bad.row_key))):
        run_collect(
            lambda p: (
                p
                | beam.Create([bad])
                | WriteSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), SCHEME, POLICY)
            )
        )


async def _plain_rows(
    data_client: BigtableDataClientAsync, make_table: MakeTable, entries: list[RowMutationEntry]
) -> list[Row]:
    plain = data_client.get_table(INSTANCE, make_table(("cf", "cg")))
    await plain.bulk_mutate_rows(entries)
    rows: list[Row] = await plain.read_rows(ReadRowsQuery())
    return rows


def test_public_names_say_saltedtable_beam_and_pickle_under_it() -> None:
    """Reprs and pickles name ``saltedtable.beam``, not the private module a name lives in."""
    import saltedtable.beam as public

    named = [
        value
        for value in map(public.__dict__.__getitem__, public.__all__)
        if isinstance(value, type | types.FunctionType)
    ]
    assert ReadSaltedRows in named
    for value in named:
        assert (value.__module__, getattr(public, value.__qualname__)) == (
            "saltedtable.beam",
            value,
        )
        data = pickle.dumps(value)
        assert b"saltedtable.beam" in data
        assert b"saltedtable.beam._" not in data
        assert pickle.loads(data) is value
    assert repr(public.WriteFailedError) == "<class 'saltedtable.beam.WriteFailedError'>"


def test_schemes_policies_plans_and_transforms_pickle() -> None:
    """What Beam ships to workers pickles; a set-up DoFn leaves its client behind."""
    scheme = SaltScheme(24, key_part=fields(1), marker=b"~")
    layout = Layout(scheme, POLICY)
    plan = plan_reads(ReadRowsQuery(row_ranges=RowRange(b"a", b"z")), layout)
    for value in (scheme, POLICY, layout, plan):
        assert pickle.loads(pickle.dumps(value)) == value
    assert pickle.loads(pickle.dumps(scheme)).salt_key(b"u1#x") == scheme.salt_key(b"u1#x")
    read = ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, "t"), scheme, cutoff=POLICY)
    write = WriteSaltedRows(BigtableTarget(PROJECT, INSTANCE, "t"), scheme, POLICY)
    target = BigtableTarget(PROJECT, INSTANCE, "t")
    again_read = pickler.loads(pickler.dumps(read))
    assert (again_read.layout, again_read.plan) == (layout, read.plan)
    again_write = pickler.loads(pickler.dumps(write))
    assert (again_write.layout, again_write.target) == (layout, target)
    for dofn in (
        ReadSplits(target, layout, ReadBudget(), "visible"),
        WriteEntries(
            target,
            layout,
            on_failure="raise",
            flush_mutations=10,
            counter_prefix="w",
            check_layout=False,
        ),
    ):
        dofn.__dict__.update(_client=object(), _table=object())  # as if set up on a worker
        again = pickler.loads(pickler.dumps(dofn))
        assert again._client is None
        assert again._table is None
        assert again.layout == layout
    scan = SplitScan(target, layout, plan.subqueries, 1 << 20, check_layout=True)
    planner = PlanSplits(scan)
    planner.__dict__.update(_client=object(), _table=object())
    again_planner = pickler.loads(pickler.dumps(planner))
    assert (again_planner._client, again_planner._table) == (None, None)
    assert again_planner.scan == scan


async def test_read_on_two_worker_processes(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """With two local worker processes (each opens its own client) every row is read once."""
    table_id = make_table(("cf", "cg"))
    await _cutoff_table(data_client, table_id)
    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    read = ReadSaltedRows(
        BigtableTarget(PROJECT, INSTANCE, table_id), SCHEME, cutoff=POLICY, split_bytes=8_000
    )
    result = run_pipeline(lambda p: p | read | beam.Map(row_digest) | Count.Globally(), options)
    found = counters(result)
    assert sum(v for n, v in found.items() if n.startswith("rows_read.")) == 2000
    assert found["rows_read.legacy"] == 400


async def test_every_failure_comes_back_by_logical_key_and_only_successes_count(
    data_client: BigtableDataClientAsync, make_table: MakeTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key the layout cannot place, 30 bad entries and an oversized bad entry: all output."""
    table_id = make_table(("cf",))
    good = [RowMutationEntry(k(s, C + MIN), SetCell("cf", b"q", b"v", 1000)) for s in range(5)]
    unplaceable = RowMutationEntry(b"x#notatime", SetCell("cf", b"q", b"v", 1000))
    bad = [
        RowMutationEntry(k(s, C + 2 * MIN), SetCell("no-such-family", b"q", b"v", 1000))
        for s in range(30)
    ]
    # An entry too big for one request is written in parts (the limit made small here).
    monkeypatch.setattr("saltedtable.beam._io.MAX_MUTATIONS_PER_ENTRY", 4)
    big_mutations: list[Mutation] = [SetCell("no-such-family", b"q", b"v", 1000)]
    big_mutations += [SetCell("cf", b"q%d" % i, b"v", 1000) for i in range(5)]
    big = RowMutationEntry(k(99, C + MIN), big_mutations)
    big_good = RowMutationEntry(k(98, C + MIN), [SetCell("cf", b"q%d" % i, b"v") for i in range(9)])
    failed, found = run_collect(
        lambda p: (
            p
            | beam.Create([*good, unplaceable, *bad, big, big_good])
            | WriteSaltedRows(
                BigtableTarget(PROJECT, INSTANCE, table_id),
                SCHEME,
                POLICY,
                on_failure="output",
                flush_mutations=3,
            )
        )
    )
    assert sorted(f.row_key for f in failed) == sorted(
        [unplaceable.row_key, big.row_key] + [e.row_key for e in bad]
    )
    by_key = {f.row_key: f for f in failed}
    assert "CutoffError" in by_key[unplaceable.row_key].error
    assert len(by_key[big.row_key].mutations) == 6
    written = sum(v for n, v in found.items() if n.startswith("rows_written."))
    assert written == len(good) + 1
    salted = SaltedTableAsync(data_client.get_table(INSTANCE, table_id), SCHEME, cutoff=POLICY)
    keys = {row.row_key for row in await salted.read_rows(ReadRowsQuery())}
    assert keys == {e.row_key for e in good} | {big_good.row_key}


async def test_pages_stay_within_the_byte_budget(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Wide rows: no page holds more than the budget's bytes; every row is still read once."""
    table_id = make_table(("cf",))
    table = SaltedTableAsync(data_client.get_table(INSTANCE, table_id), SaltScheme(2))
    wide = b"w" * 20_000
    await table.bulk_mutate_rows(
        [RowMutationEntry(b"row%03d" % i, SetCell("cf", b"q", wide, 1000)) for i in range(60)]
    )
    budget = ReadBudget(bytes=64 * 1024)
    read = ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), SaltScheme(2), budget=budget)
    result = run_pipeline(lambda p: p | read | beam.Map(row_digest))
    found = counters(result)
    assert sum(v for n, v in found.items() if n.startswith("rows_read.")) == 60
    assert found["read_requests"] >= 60 // 3  # about three 20 KB rows fit in 64 KiB
    pages = result.metrics().query(MetricsFilter().with_name("page_bytes"))["distributions"]
    largest = max(p.committed.max for p in pages)
    assert 20_000 < largest <= budget.bytes


async def test_a_page_cut_at_the_budget_resumes_after_its_last_row(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """Narrow rows grow the pages (sized at the largest row seen); wide rows after them
    take a page past the budget's bytes: read_page stops after that row and the next
    page starts right after it, so every row is read exactly once."""
    table_id = make_table(("cf",))
    scheme = SaltScheme(2)
    table = SaltedTableAsync(data_client.get_table(INSTANCE, table_id), scheme)
    narrow = [b"a%03d" % i for i in range(200)]  # 100 B each: pages double to 64 rows
    wide = [b"b%03d" % i for i in range(40)]  # 20 KB each: a 64-row page passes 64 KiB
    await table.bulk_mutate_rows(
        [RowMutationEntry(key, SetCell("cf", b"q", b"n" * 100, 1000)) for key in narrow]
        + [RowMutationEntry(key, SetCell("cf", b"q", b"w" * 20_000, 1000)) for key in wide]
    )
    budget = ReadBudget(bytes=64 * 1024)
    rows, _ = run_collect(
        lambda p: (
            p | ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), scheme, budget=budget)
        )
    )
    keys = sorted(row.row_key for row in rows)
    assert keys == narrow + wide  # each once: the cursor resumed exactly after the cut
    result = run_pipeline(
        lambda p: (
            p | ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), scheme, budget=budget)
        )
    )
    pages = result.metrics().query(MetricsFilter().with_name("page_bytes"))["distributions"]
    largest = max(p.committed.max for p in pages)
    # Only a page cut after the row past the budget holds more than the budget.
    assert budget.bytes < largest <= budget.bytes + 20_000 + 8


async def test_dict_queries_read_like_read_rows_query(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """A dict of ReadRowsRequest fields is read as TableAsync reads it."""
    table_id = make_table(("cf", "cg"))
    table = await _cutoff_table(data_client, table_id)
    query = {"rows": {"row_keys": [k(1, C - MIN), k(3, C + MIN)]}}
    rows, _ = run_collect(
        lambda p: (
            p | ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), SCHEME, query, POLICY)
        )
    )
    assert snapshot(rows) == snapshot(await table.read_rows(query))
    assert len(rows) == 2


async def test_stray_legacy_rows_are_left_out_counted_and_logged(
    data_client: BigtableDataClientAsync, make_table: MakeTable, caplog: pytest.LogCaptureFixture
) -> None:
    """An unsalted row from after the cutoff is skipped as the async reader skips it; reported."""
    table_id = make_table(("cf", "cg"))
    table = await _cutoff_table(data_client, table_id)
    stray = k(3, C + 500 * MIN)  # no salted row has this key
    await data_client.get_table(INSTANCE, table_id).mutate_row(stray, cells(stray))
    with caplog.at_level(logging.WARNING, logger="saltedtable.beam"):
        rows, found = run_collect(
            lambda p: (
                p
                | ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), SCHEME, cutoff=POLICY)
            )
        )
    assert snapshot(rows) == snapshot(await table.read_rows(ReadRowsQuery()))
    assert stray not in {row.row_key for row in rows}
    assert found["stray_rows.legacy"] == 1
    assert any(repr(stray) in r.getMessage() for r in caplog.records), caplog.text


async def test_a_beam_loaded_table_holds_the_record_and_refuses_a_wrong_scheme(
    data_client: BigtableDataClientAsync, make_table: MakeTable
) -> None:
    """WriteSaltedRows stores the record before its first write; other layouts are refused."""
    from saltedtable import RecordMissingError, SchemeMismatchError

    table_id = make_table(("cf", "cg"))
    keys = [b"user%03d" % i for i in range(40)]
    entries = [RowMutationEntry(key, [SetCell("cf", b"q", key)]) for key in keys]
    run_collect(
        lambda p: (
            p
            | beam.Create(entries)
            | WriteSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), SCHEME)
        )
    )
    raw = data_client.get_table(INSTANCE, table_id)
    record = await raw.read_row(SCHEME_ROW_KEY)
    assert record is not None
    assert [c.family for c in record.cells] == ["cf"]
    with pytest.raises(SchemeMismatchError, match="buckets: stored 16, now 8"):
        await SaltedTableAsync(raw, SaltScheme(8)).read_row(b"user001")
    with pytest.raises(Exception, match="buckets: stored 16, now 8"):
        run_collect(
            lambda p: (
                p
                | beam.Create(entries)
                | WriteSaltedRows(BigtableTarget(PROJECT, INSTANCE, table_id), SaltScheme(8))
            )
        )
    assert len(await SaltedTableAsync(raw, SCHEME).read_rows(ReadRowsQuery())) == 40
    empty = make_table(("cf",))
    with pytest.raises(Exception, match="no layout record"):
        run_collect(
            lambda p: (
                p
                | beam.Create(entries)
                | WriteSaltedRows(
                    BigtableTarget(PROJECT, INSTANCE, empty), SCHEME, require_record=True
                )
            )
        )
    assert await data_client.get_table(INSTANCE, empty).read_rows(ReadRowsQuery()) == []
    assert RecordMissingError.__mro__[1].__name__ == "LayoutError"


# -- the calling convention -------------------------------------------------------


def test_every_transform_takes_a_target_and_the_old_form_warns() -> None:
    """(project, instance, table, ..., app_profile_id=) still builds the same transform, warning."""
    from saltedtable.beam import BackfillLegacy, DeleteLegacy, PruneOrphanCopies

    target = BigtableTarget(PROJECT, INSTANCE, "t", "profile")
    layout = Layout(SCHEME, POLICY)
    new: list[Any] = [
        ReadSaltedRows(target, SCHEME, None, POLICY),
        WriteSaltedRows(target, SCHEME, POLICY),
        BackfillLegacy(target, SCHEME, POLICY),
        PruneOrphanCopies(target, SCHEME, POLICY),
        DeleteLegacy(target, SCHEME, POLICY),
    ]
    # The deprecated form, through Any: its signature is no longer the typed one.
    legacy: list[Any] = [ReadSaltedRows, WriteSaltedRows, BackfillLegacy, PruneOrphanCopies]
    read, write, fill, prune = legacy
    drop: Any = DeleteLegacy
    with pytest.warns(DeprecationWarning, match="is deprecated") as caught:
        old = [
            read(PROJECT, INSTANCE, "t", SCHEME, None, POLICY, app_profile_id="profile"),
            write(
                project=PROJECT,
                instance=INSTANCE,
                table="t",
                scheme=SCHEME,
                cutoff=POLICY,
                app_profile_id="profile",
            ),
            fill(PROJECT, INSTANCE, "t", SCHEME, POLICY, app_profile_id="profile"),
            prune(
                PROJECT, INSTANCE, table="t", scheme=SCHEME, cutoff=POLICY, app_profile_id="profile"
            ),
            drop(PROJECT, INSTANCE, "t", SCHEME, POLICY, app_profile_id="profile"),
        ]
    names = [
        "ReadSaltedRows",
        "WriteSaltedRows",
        "BackfillLegacy",
        "PruneOrphanCopies",
        "DeleteLegacy",
    ]
    assert [str(w.message).split("(")[0] for w in caught] == names
    assert all(
        "BigtableTarget(project, instance, table, app_profile_id)" in str(w.message) for w in caught
    )
    for a, b in zip(new, old, strict=True):
        assert (a.target, a.layout) == (b.target, b.layout) == (target, layout)
    with pytest.raises(TypeError, match="missing the argument 'table'"):
        read(PROJECT, INSTANCE, scheme=SCHEME)


def test_a_layout_may_stand_for_scheme_and_cutoff() -> None:
    """ReadSaltedRows/WriteSaltedRows take a Layout; a Layout and a separate cutoff are refused."""
    target = BigtableTarget(PROJECT, INSTANCE, "t")
    layout = Layout(SCHEME, POLICY)
    assert ReadSaltedRows(target, layout).layout == layout
    assert WriteSaltedRows(target, layout).layout == layout
    with pytest.raises(TypeError, match="cutoff inside the Layout"):
        WriteSaltedRows(target, layout, POLICY)


def test_an_opened_target_closes_its_table_and_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """``with target.opened() as table`` closes the table, then the client, even on an error."""
    closed: list[str] = []

    class Closing:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            closed.append(self.name)

    monkeypatch.setattr(BigtableTarget, "open", lambda self: (Closing("client"), Closing("table")))
    target = BigtableTarget(PROJECT, INSTANCE, "t")
    with target.opened() as table:
        assert table.name == "table"  # type: ignore[attr-defined]
        assert closed == []
    assert closed == ["table", "client"]
    with pytest.raises(RuntimeError, match="inside"), target.opened():
        raise RuntimeError("inside")
    assert closed == ["table", "client"] * 2


async def test_an_opened_target_reads_the_emulator(make_table: MakeTable) -> None:
    """opened() gives a working table of the target's instance."""
    from saltedtable.beam._record_steps import read_record

    table_id = make_table(("cf",))
    with BigtableTarget(PROJECT, INSTANCE, table_id).opened() as table:
        assert read_record(table) is None
        assert table.table_id == table_id
