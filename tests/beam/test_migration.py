"""Finishing a forward-only migration and resalting, on the emulator with Beam's local runner.

The differential reference is a plain table holding the same logical rows: after the
move, every read shape of the migrated table must answer exactly like it (the query
set of tests/emulator/test_cutoff_emulator.py). During the move a reader keeps reading
and must see every row exactly once, whatever step is running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import apache_beam as beam
import pytest
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
    TableAsync,
)
from google.cloud.bigtable.data.mutations import (
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    Mutation,
)

from saltedtable import (
    Layout,
    LayoutError,
    ReadBudget,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    describe_layout,
    prefix_end,
)
from saltedtable._cli.main import main as cli_main
from saltedtable._guard.migration import migration_record
from saltedtable._guard.record import BACKFILL, CUTOVER, DELETING
from saltedtable.beam import (
    BigtableTarget,
    ReadSaltedRows,
    WriteSaltedRows,
    backfill,
    copy_entry,
    cut_over,
    delete_legacy,
    resalt,
    verify_backfill,
)
from saltedtable.beam._record_steps import read_record, swap_record
from saltedtable.testing import INSTANCE, PROJECT
from tests.beam.helpers import count_element, run_collect, snapshot
from tests.conftest import MakeTable
from tests.emulator.test_cutoff_emulator import MIN, POLICY, PREFIXES, QUERIES, SCHEME, C, k

FAMILIES = ("cf", "cg")
LEGACY = [k(s, C - m * MIN) for s in range(6) for m in range(1, 41)]
NEW = [k(s, C + m * MIN) for s in range(6) for m in range(31)]


def cells(key: bytes) -> list[Mutation]:
    """Two families, two versions of one column, fixed timestamps."""
    return [
        SetCell("cf", b"temp", b"old" + key, 1_000_000),
        SetCell("cf", b"temp", b"new" + key, 2_000_000),
        SetCell("cg", b"x", key[-4:], 3_000_000),
    ]


@dataclass
class Tables:
    """A plain table and a cutoff table holding the same logical rows."""

    plain: TableAsync
    raw: TableAsync
    table_id: str
    cutoff: SaltedTableAsync

    @property
    def target(self) -> BigtableTarget:
        """The cutoff table, for the Beam steps."""
        return BigtableTarget(PROJECT, INSTANCE, self.table_id)


@pytest.fixture
async def tables(data_client: BigtableDataClientAsync, make_table: MakeTable) -> Tables:
    """Legacy rows loaded unsalted, the cutoff turned on (record stored), newer rows salted."""
    plain = data_client.get_table(INSTANCE, make_table(FAMILIES))
    table_id = make_table(FAMILIES)
    raw = data_client.get_table(INSTANCE, table_id)
    everything = [RowMutationEntry(key, cells(key)) for key in LEGACY + NEW]
    await plain.bulk_mutate_rows(everything)
    await raw.bulk_mutate_rows(everything[: len(LEGACY)])
    cutoff = await SaltedTableAsync.open(raw, SCHEME, cutoff=POLICY, family="cf")
    await cutoff.bulk_mutate_rows(everything[len(LEGACY) :])
    return Tables(plain, raw, table_id, cutoff)


async def physical(raw: TableAsync) -> list[bytes]:
    """Every physical key but the layout record's."""
    return [
        r.row_key
        for r in await raw.read_rows(ReadRowsQuery())
        if not r.row_key.startswith(b"\xff\xfe")
    ]


@dataclass
class Watch:
    """A reader that keeps reading while migration steps run in a worker thread."""

    readers: list[SaltedTableAsync]
    expected: Any
    points: dict[bytes, Any]
    reads: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    phase: str = "start"

    async def read_once(self) -> None:
        """One full scan (ordered and not) and a few point reads through every current reader."""
        for reader in list(self.readers):
            layout = "cutoff" if reader.cutoff is not None else "salted"
            got = snapshot(await reader.read_rows(ReadRowsQuery()))
            if got != self.expected:
                keys = [key for key, _ in got]
                dupes = len(keys) - len(set(keys))
                self.failures.append(
                    f"{self.phase}/{layout}: {len(got)} rows ({dupes} twice), expected "
                    f"{len(self.expected)}"
                )
            unordered = snapshot(await reader.read_rows(ReadRowsQuery(), ordered=False))
            if unordered != self.expected:
                self.failures.append(f"{self.phase}/{layout}: unordered scan differs")
            for key, want in self.points.items():
                row = await reader.read_row(key)
                if snapshot([row] if row else []) != want:
                    self.failures.append(f"{self.phase}/{layout}: read_row({key!r}) differs")
            self.reads[self.phase] = self.reads.get(self.phase, 0) + 1

    async def during(self, phase: str, step: Callable[[], Any]) -> Any:
        """Run a blocking step in a thread; read continuously until it ends, then once more."""
        self.phase = phase
        done = anyio.Event()
        result: list[Any] = []

        async def run() -> None:
            try:
                result.append(await anyio.to_thread.run_sync(step))
            finally:
                done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            while not done.is_set():
                await self.read_once()
                await anyio.sleep(0.01)
        await self.read_once()
        return result[0]


async def test_backfill_cutover_delete_while_reading(tables: Tables) -> None:
    """No reader sees a row twice or misses one; then every read shape equals the plain table."""
    t = tables
    expected = snapshot(await t.plain.read_rows(ReadRowsQuery()))
    points = {
        key: snapshot([r] if (r := await t.plain.read_row(key)) else [])
        for key in (LEGACY[0], LEGACY[-1], NEW[0], k(9, C - MIN))
    }
    watch = Watch([t.cutoff], expected, points)

    report = await watch.during(
        "backfill", lambda: backfill(t.target, SCHEME, POLICY, split_bytes=2000)
    )
    assert report.counters["rows_copied.bucket_0"] > 0
    assert sum(v for n, v in report.counters.items() if n.startswith("rows_copied.")) == len(LEGACY)
    assert len(await physical(t.raw)) == 2 * len(LEGACY) + len(NEW)  # legacy rows and their copies
    # A cutoff reader opening now accepts the copies; a fully salted one is refused.
    watch.readers.append(await SaltedTableAsync.open(t.raw, SCHEME, cutoff=POLICY))
    with pytest.raises(SchemeMismatchError):
        await SaltedTableAsync.open(t.raw, SCHEME)

    report = await watch.during(
        "cutover", lambda: cut_over(t.target, SCHEME, POLICY, split_bytes=2000)
    )
    assert report.ok
    assert report.checksums is not None
    assert report.checksums.rows == (len(LEGACY), len(LEGACY))
    assert report.record == migration_record(SCHEME, POLICY, CUTOVER)
    # Both layouts open now and read the same rows (the fully salted one reads the copies).
    watch.readers += [
        await SaltedTableAsync.open(t.raw, SCHEME),
        await SaltedTableAsync.open(t.raw, SCHEME, cutoff=POLICY),
    ]
    await watch.read_once()

    # Every service now runs without the cutoff: only fully salted readers are left.
    watch.readers = [r for r in watch.readers if r.cutoff is None]
    report = await watch.during(
        "delete", lambda: delete_legacy(t.target, SCHEME, POLICY, split_bytes=2000, grace=0)
    )
    assert report.counters["legacy_rows_deleted"] == len(LEGACY)
    assert report.record == describe_layout(SCHEME)
    assert all(SCHEME.has_prefix(key) for key in await physical(t.raw))
    with pytest.raises(SchemeMismatchError):
        await SaltedTableAsync.open(t.raw, SCHEME, cutoff=POLICY)

    assert watch.failures == []
    assert all(watch.reads.get(p, 0) >= 2 for p in ("backfill", "cutover", "delete")), watch.reads

    salted = await SaltedTableAsync.open(t.raw, SCHEME)
    for name, query in QUERIES.items():
        if name == "one-cell-chain":
            continue  # its first cell depends on the emulator's per-table family order
        want = await t.plain.read_rows(query)
        got = await salted.read_rows(query)
        assert [(r.row_key, snapshot([r])) for r in got] == [
            (r.row_key, snapshot([r])) for r in want
        ], name
    for prefix in PREFIXES:
        rng = RowRange(prefix or None, prefix_end(prefix) or None)
        want = snapshot(await t.plain.read_rows(ReadRowsQuery(row_ranges=rng)))
        assert snapshot([r async for r in salted.read_prefix(prefix)]) == want, prefix
    rows, _ = run_collect(
        lambda p: p | ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, t.table_id), SCHEME)
    )
    assert snapshot(rows) == expected


class _Crash(beam.DoFn):
    """Fails the pipeline at its ``after``-th element, as a worker dying mid-run would."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    def process(self, element: Any) -> Any:
        # Counted in an importable module: shared by every instance of this in-process run.
        if count_element("crash") == self.after:
            raise RuntimeError("injected crash")
        yield element


async def test_a_crash_mid_backfill_then_a_rerun_converges(tables: Tables) -> None:
    """Half the copies written, then legacy rows change: verify fails, a re-run makes it equal."""
    t = tables
    target = t.target
    with contextlib.closing(_SyncTable(target)) as sync:
        swap_record(sync.table, read_record(sync.table), migration_record(SCHEME, POLICY, BACKFILL))
    layout = Layout(SCHEME, POLICY)
    read = ReadSaltedRows(
        BigtableTarget(PROJECT, INSTANCE, t.table_id),
        SCHEME,
        cutoff=POLICY,
        budget=ReadBudget(rows=40),
    )
    write = WriteSaltedRows(
        BigtableTarget(PROJECT, INSTANCE, t.table_id),
        SCHEME,
        check_layout=False,
        flush_mutations=40,
    )
    with pytest.raises(Exception, match="injected crash"):
        run_collect(
            lambda p: (
                p
                | read
                | beam.Filter(lambda row: layout.locate(row.row_key)[0] is None)  # legacy rows
                | beam.Map(copy_entry)
                | beam.ParDo(_Crash(len(LEGACY) // 2))
                | write
            )
        )
    copies = len(await physical(t.raw)) - len(LEGACY) - len(NEW)
    assert 0 < copies < len(LEGACY) // 2
    # Meanwhile legacy rows change (a late write), and a stale copy of another sits in its bucket.
    changed, stale = LEGACY[3], LEGACY[-3]
    await t.raw.mutate_row(
        changed, [SetCell("cf", b"temp", b"late", 5_000_000), DeleteRangeFromColumn("cg", b"x")]
    )
    await t.raw.mutate_row(SCHEME.salt_key(stale), SetCell("cf", b"junk", b"stale", 1_000))
    # ... and a copy whose legacy row was deleted after it was copied.
    orphan = k(0, C - 500 * MIN)
    await t.raw.mutate_row(SCHEME.salt_key(orphan), cells(orphan))
    assert not verify_backfill(target, SCHEME, POLICY, split_bytes=2000).ok

    backfill(target, SCHEME, POLICY, split_bytes=2000)
    report = verify_backfill(target, SCHEME, POLICY, split_bytes=2000)
    assert report.checksums is not None
    assert report.checksums.rows == (len(LEGACY), len(LEGACY) + 1)  # the orphan is still there
    pruned = backfill(target, SCHEME, POLICY, split_bytes=2000, prune_orphans=True)
    assert pruned.counters["orphan_copies_deleted"] == 1
    report = verify_backfill(target, SCHEME, POLICY, split_bytes=2000)
    assert report.ok, "\n".join(report.lines())
    legacy = snapshot(await t.raw.read_rows(ReadRowsQuery(row_keys=list[str | bytes](LEGACY))))
    copied = await t.raw.read_rows(ReadRowsQuery(row_keys=[SCHEME.salt_key(key) for key in LEGACY]))
    for row in copied:
        row.row_key = SCHEME.unsalt_key(row.row_key)
        for cell in row.cells:
            cell.row_key = row.row_key
    assert snapshot(copied) == legacy
    assert ("cf", b"temp", 5_000_000, b"late") in dict(legacy)[changed]
    assert all(family == "cf" for family, *_ in dict(legacy)[changed])
    # A cut-over table refuses another backfill: fully salted writers own the copies now.
    cut_over(target, SCHEME, POLICY, split_bytes=2000)
    with pytest.raises(LayoutError, match="already past the backfill"):
        backfill(target, SCHEME, POLICY)


class _SyncTable:
    """A sync client and table for driver-side record moves in a test."""

    def __init__(self, target: BigtableTarget) -> None:
        self.client, self.table = target.open()

    def close(self) -> None:
        self.table.close()
        self.client.close()


async def test_resalt_16_to_24_verifies_equal_and_writes_the_record(
    data_client: BigtableDataClientAsync, make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every row, cell and version lands in 24 buckets; verify passes; a tampered row fails it."""
    old, new = SaltScheme(16), SaltScheme(24)
    source_id, dest_id = make_table(FAMILIES), make_table(FAMILIES)
    source = await SaltedTableAsync.open(
        data_client.get_table(INSTANCE, source_id), old, family="cf"
    )
    keys = [b"user%04d#%d" % (i, i % 7) for i in range(1200)]
    await source.bulk_mutate_rows([RowMutationEntry(key, cells(key)) for key in keys])
    src, dst = (
        BigtableTarget(PROJECT, INSTANCE, source_id),
        BigtableTarget(PROJECT, INSTANCE, dest_id),
    )

    report = resalt(src, old, dst, new, family="cf", split_bytes=4000)
    assert report.ok
    assert report.checksums is not None
    assert report.checksums.rows == (1200, 1200)
    assert sorted(report.checksums.buckets, key=int) == [str(b) for b in range(24)]
    assert report.record == describe_layout(new)
    dest = await SaltedTableAsync.open(data_client.get_table(INSTANCE, dest_id), new)
    assert snapshot(await dest.read_rows(ReadRowsQuery())) == snapshot(
        await source.read_rows(ReadRowsQuery())
    )
    with pytest.raises(SchemeMismatchError):
        await SaltedTableAsync.open(data_client.get_table(INSTANCE, dest_id), old)

    argv = [
        "migrate",
        "verify",
        "--bigtable-project",
        PROJECT,
        "--instance",
        INSTANCE,
        "--table",
        source_id,
        "-n",
        "16",
        "--to-table",
        dest_id,
        "--to-buckets",
        "24",
    ]
    assert cli_main([*argv, "--progress"]) == 0
    shown = capsys.readouterr()
    assert "verified: equal" in shown.out
    assert "splits" in shown.err
    last = shown.err.splitlines()[-1]
    assert last.startswith("verify: splits ")  # the phase, then what this process did
    assert "rows read 2,400" in last  # both tables, read in this process
    tampered = keys[5]
    await dest.mutate_row(tampered, SetCell("cf", b"temp", b"tampered", 2_000_000))
    assert cli_main(argv) == 1
    out = capsys.readouterr().out
    assert "NOT equal" in out
    bad = [line for line in out.splitlines() if "DIFFER" in line]
    assert len(bad) == 1
    assert bad[0].split()[0] == str(new.bucket_of(tampered))
    assert cli_main([*argv[:1], "backfill", *argv[2:8], "-n", "16"]) == 2  # no --cutoff
    with pytest.raises(LayoutError, match="another table"):
        resalt(src, old, src, new, family="cf")
    with pytest.raises(LayoutError, match="changes nothing"):
        resalt(src, old, dst, old, family="cf")


async def test_delete_legacy_finishes_after_fully_salted_writes_to_old_keys(
    tables: Tables,
) -> None:
    """Once services are fully salted, updates and deletes of old keys do not stop delete-legacy."""
    t = tables
    backfill(t.target, SCHEME, POLICY, split_bytes=2000)
    cut_over(t.target, SCHEME, POLICY, split_bytes=2000)
    salted = await SaltedTableAsync.open(t.raw, SCHEME)
    updated, deleted = LEGACY[0], LEGACY[1]
    await salted.mutate_row(updated, SetCell("cf", b"temp", b"after the cut-over", 9_000_000))
    await salted.mutate_row(deleted, DeleteAllFromRow())
    await t.plain.mutate_row(updated, SetCell("cf", b"temp", b"after the cut-over", 9_000_000))
    await t.plain.mutate_row(deleted, DeleteAllFromRow())

    report = delete_legacy(t.target, SCHEME, POLICY, split_bytes=2000, grace=0)
    assert report.record == describe_layout(SCHEME), "\n".join(report.lines())
    assert report.counters["legacy_rows_deleted"] == len(LEGACY)
    assert all(SCHEME.has_prefix(key) for key in await physical(t.raw))
    reader = await SaltedTableAsync.open(t.raw, SCHEME)
    assert snapshot(await reader.read_rows(ReadRowsQuery())) == snapshot(
        await t.plain.read_rows(ReadRowsQuery())
    )


async def test_delete_legacy_refuses_cutoff_readers_first_and_resumes_after_a_crash(
    tables: Tables,
) -> None:
    """While deleting, cutoff readers are refused and salted ones see every row; a re-run ends."""
    t = tables
    expected = snapshot(await t.plain.read_rows(ReadRowsQuery()))
    backfill(t.target, SCHEME, POLICY, split_bytes=2000)
    with pytest.raises(LayoutError, match="cutover or deleting"):
        delete_legacy(t.target, SCHEME, POLICY)
    cut_over(t.target, SCHEME, POLICY, split_bytes=2000)
    # A delete-legacy that died half-way: the record moved, half the legacy rows are gone.
    with contextlib.closing(_SyncTable(t.target)) as sync:
        swap_record(sync.table, read_record(sync.table), migration_record(SCHEME, POLICY, DELETING))
    await t.raw.bulk_mutate_rows([RowMutationEntry(key, DeleteAllFromRow()) for key in LEGACY[::2]])
    with pytest.raises(SchemeMismatchError, match="deleting"):
        await SaltedTableAsync.open(t.raw, SCHEME, cutoff=POLICY)
    salted = await SaltedTableAsync.open(t.raw, SCHEME)
    assert snapshot(await salted.read_rows(ReadRowsQuery())) == expected
    with pytest.raises(LayoutError, match="past the backfill"):
        backfill(t.target, SCHEME, POLICY)

    said: list[str] = []
    report = delete_legacy(t.target, SCHEME, POLICY, split_bytes=2000, grace=0, notify=said.append)
    assert report.ok
    assert report.counters["legacy_rows_deleted"] == len(LEGACY) - len(LEGACY[::2])
    assert report.record == describe_layout(SCHEME)
    assert len(said) == 1
    assert "cutoff readers are refused" in said[0]
    assert snapshot(await salted.read_rows(ReadRowsQuery())) == expected


def test_a_migration_record_never_goes_into_a_ttl_family(emulator: Any) -> None:
    """backfill --family ts (max-age) is refused before anything is written."""
    import uuid

    from google.cloud.bigtable_admin_v2 import types

    from saltedtable._admin import admin_client
    from saltedtable._guard.families import parse_family
    from saltedtable.testing import delete_table

    table_id = f"t-{uuid.uuid4().hex[:12]}"
    with admin_client(emulator_host=emulator.address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{PROJECT}/instances/{INSTANCE}",
                table_id=table_id,
                table=types.Table(
                    column_families=dict(parse_family(s) for s in ("cf", "ts:max_age=1d"))
                ),
            )
        )
    try:
        target = BigtableTarget(PROJECT, INSTANCE, table_id)
        with pytest.raises(LayoutError, match="'ts' has the GC rule max_age=1d"):
            backfill(target, SCHEME, POLICY, family="ts")
        client, table = target.open()
        try:
            assert read_record(table) is None
        finally:
            table.close()
            client.close()
    finally:
        delete_table(emulator.address, table_id, missing_ok=True)


def test_delete_legacy_waits_by_default_as_long_as_the_command() -> None:
    """Python callers get the command's grace, longer than the default record_refresh."""
    import inspect

    from saltedtable._guard.record import DEFAULT_LEGACY_GRACE, DEFAULT_RECORD_REFRESH

    default = inspect.signature(delete_legacy).parameters["grace"].default
    assert default == DEFAULT_LEGACY_GRACE
    assert default > DEFAULT_RECORD_REFRESH
