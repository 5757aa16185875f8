"""Where the layout record lives: GC rules, aggregate families, the reserved family."""

from __future__ import annotations

import datetime as dt
import logging
import re

import pytest
from google.cloud.bigtable.data import ReadRowsQuery
from google.cloud.bigtable.data.mutations import SetCell
from google.cloud.bigtable_admin_v2 import types
from google.protobuf import duration_pb2

from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    LayoutError,
    RecordMissingError,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    describe_layout,
    epoch_field,
)
from saltedtable._guard.families import (
    RECORD_FAMILY,
    FamilyInfo,
    check_family_name,
    describe_gc_rule,
    family_info,
    gc_rule_may_drop_latest,
    place_record,
    record_family_problem,
)
from saltedtable._guard.migration import migration_record
from saltedtable._guard.record import encode_layout
from tests.fakes import FakeTable, SyncFakeTable

CUTOFF = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
DAY = duration_pb2.Duration(seconds=86400)
AGE = types.GcRule(max_age=DAY)
VERSIONS = types.GcRule(max_num_versions=2)
TTL = FamilyInfo("ts", "max_age=1s", may_drop_latest=True)
COUNTERS = FamilyInfo("counts", aggregate="int64 sum")


def union(*rules: types.GcRule) -> types.GcRule:
    return types.GcRule(union=types.GcRule.Union(rules=list(rules)))


def both(*rules: types.GcRule) -> types.GcRule:
    return types.GcRule(intersection=types.GcRule.Intersection(rules=list(rules)))


# -- GC rules (pure) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "drops", "text"),
    [
        (None, False, "none"),
        (types.GcRule(), False, "none"),
        (VERSIONS, False, "max_versions=2"),
        (AGE, True, "max_age=1d"),
        (union(VERSIONS, AGE), True, "(max_versions=2 or max_age=1d)"),
        (union(VERSIONS, VERSIONS), False, "(max_versions=2 or max_versions=2)"),
        (both(VERSIONS, AGE), False, "(max_versions=2 and max_age=1d)"),
        (both(AGE, types.GcRule(max_age=duration_pb2.Duration(seconds=90))), True, None),
        (union(both(AGE, VERSIONS), AGE), True, None),
    ],
)
def test_a_rule_may_drop_the_latest_version_only_through_a_max_age(
    rule: types.GcRule | None, drops: bool, text: str | None
) -> None:
    """max-versions keeps one; max-age drops all; a union drops what any part does."""
    assert gc_rule_may_drop_latest(rule) is drops
    if text is not None:
        assert describe_gc_rule(rule) == text


def test_family_info_reads_gc_rules_and_aggregate_types() -> None:
    """An admin ColumnFamily becomes a FamilyInfo: rule in words, aggregate type named."""
    ttl = family_info("ts", types.ColumnFamily(gc_rule=AGE))
    assert ttl == FamilyInfo("ts", "max_age=1d", may_drop_latest=True)
    summed = types.Type(
        aggregate_type=types.Type.Aggregate(
            input_type=types.Type(int64_type=types.Type.Int64()), sum=types.Type.Aggregate.Sum()
        )
    )
    agg = family_info("n", types.ColumnFamily(value_type=summed))
    assert agg.aggregate == "int64 sum"
    assert record_family_problem(agg) is not None
    assert "aggregate" in (record_family_problem(agg) or "")
    assert record_family_problem(family_info("cf", types.ColumnFamily())) is None


@pytest.mark.parametrize("name", ["", "-x", ".x", "a b", "a/b", "x" * 65])
def test_bad_family_names_are_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match="not a valid Bigtable family id"):
        check_family_name(name)


def test_good_family_names_pass() -> None:
    for name in ("cf", "saltedtable", "_x", "a-b.c", "x" * 64):
        check_family_name(name)


# -- placement (pure) --------------------------------------------------------------------


def test_the_reserved_family_wins_when_the_table_has_it() -> None:
    schema = {"cf": FamilyInfo("cf"), RECORD_FAMILY: FamilyInfo(RECORD_FAMILY)}
    assert place_record(schema, family="cf", explicit=False).family == RECORD_FAMILY


def test_without_the_reserved_family_a_safe_write_family_holds_it() -> None:
    assert place_record({"cf": FamilyInfo("cf")}, family="cf", explicit=False).family == "cf"


@pytest.mark.parametrize("info", [TTL, COUNTERS])
def test_an_unsafe_write_family_holds_nothing(info: FamilyInfo) -> None:
    placement = place_record({info.name: info}, family=info.name, explicit=False)
    assert placement.family is None
    assert placement.reason == record_family_problem(info)


@pytest.mark.parametrize("info", [TTL, COUNTERS])
def test_an_unsafe_named_family_is_refused(info: FamilyInfo) -> None:
    with pytest.raises(LayoutError, match=f"{info.name!r}.*--add-family"):
        place_record({info.name: info}, family=info.name, explicit=True)


def test_a_named_family_the_table_lacks_is_refused() -> None:
    with pytest.raises(LayoutError, match="no column family 'nope'"):
        place_record({"cf": FamilyInfo("cf")}, family="nope", explicit=True)


def test_an_unreadable_schema_tries_the_reserved_family_or_the_named_one_unchecked() -> None:
    implicit = place_record(None, family="cf", explicit=False, unreadable="denied")
    assert (implicit.family, implicit.probe, implicit.checked) == (RECORD_FAMILY, True, False)
    named = place_record(None, family="cf", explicit=True, unreadable="denied")
    assert (named.family, named.probe, named.checked, named.reason) == (
        "cf",
        False,
        False,
        "denied",
    )


# -- the guard on a fake table --------------------------------------------------------------


def record_families(fake: FakeTable) -> list[str]:
    return [cell[0] for cell in fake.cells_of(SCHEME_ROW_KEY)]


async def test_a_ttl_family_never_holds_the_record_and_says_how_to_fix_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Writes to a max-age family store no record; one warning names the fixing command."""
    fake = FakeTable(families=[TTL])
    table = SaltedTableAsync(fake, SaltScheme(4))
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        await table.mutate_row(b"a", SetCell("ts", b"q", b"v"))
        await table.mutate_row(b"b", SetCell("ts", b"q", b"v"))
    assert record_families(fake) == []
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "max_age=1s" in warnings[0]
    assert "saltedtable guard" in warnings[0]
    assert "--add-family" in warnings[0]
    assert fake.schema_reads == 1
    assert len(await table.read_rows(ReadRowsQuery())) == 2


async def test_an_aggregate_family_never_holds_the_record() -> None:
    fake = FakeTable(families=[COUNTERS, RECORD_FAMILY])
    table = SaltedTableAsync(fake, SaltScheme(4))
    await table.mutate_row(b"a", SetCell("counts", b"q", b"v"))
    assert record_families(fake) == [RECORD_FAMILY]


async def test_the_reserved_family_holds_the_record_beside_a_ttl_family() -> None:
    fake = FakeTable(families=[TTL, RECORD_FAMILY])
    table = SaltedTableAsync(fake, SaltScheme(4))
    await table.mutate_row(b"a", SetCell("ts", b"q", b"v"))
    assert record_families(fake) == [RECORD_FAMILY]
    assert table.stored_layout == describe_layout(SaltScheme(4))


async def test_an_unreadable_schema_uses_the_reserved_family_if_the_table_has_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No admin rights: the reserved family is tried; without it nothing is stored, one warning."""
    with_it = FakeTable(families=["cf", RECORD_FAMILY], schema_readable=False)
    await SaltedTableAsync(with_it, SaltScheme(4)).mutate_row(b"a", SetCell("cf", b"q", b"v"))
    assert record_families(with_it) == [RECORD_FAMILY]
    without = FakeTable(families=["cf"], schema_readable=False)
    table = SaltedTableAsync(without, SaltScheme(4))
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        await table.mutate_row(b"a", SetCell("cf", b"q", b"v"))
        await table.mutate_row(b"b", SetCell("cf", b"q", b"v"))
    assert record_families(without) == []
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert f"has no column family {RECORD_FAMILY!r}" in message
    assert "PermissionDenied" in message
    assert "--add-family" in message


async def test_naming_a_ttl_family_for_the_record_is_refused_and_writes_nothing() -> None:
    fake = FakeTable(families=[TTL, "cf"])
    with pytest.raises(LayoutError, match="'ts' has the GC rule max_age=1s"):
        await SaltedTableAsync.open(fake, SaltScheme(4), family="ts")
    assert fake.row_keys() == []


async def test_naming_an_unchecked_family_warns_once_naming_the_command(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeTable(families=["cf"], schema_readable=False)
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        await SaltedTableAsync.open(fake, SaltScheme(4), family="cf")
    assert record_families(fake) == ["cf"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "could not be checked" in messages[0]
    assert "saltedtable guard TABLE --family cf" in messages[0]


async def test_guard_scheme_moves_a_record_into_the_named_family() -> None:
    """A record in a TTL family, then guard_scheme(family='saltedtable'): it moves, whole."""
    fake = FakeTable(families=[TTL, RECORD_FAMILY])
    record = migration_record(SaltScheme(4), CUTOFF, "backfill")  # the state moves with it
    fake.set_cell(SCHEME_ROW_KEY, "ts", b"scheme", encode_layout(record))
    table = SaltedTableAsync(fake, SaltScheme(4), cutoff=CUTOFF)
    with pytest.raises(LayoutError, match=r"lives in column family 'ts'.*--add-family"):
        await table.check_layout()
    await table.guard_scheme(family=RECORD_FAMILY)
    assert record_families(fake) == [RECORD_FAMILY]
    assert table.stored_layout == record
    await SaltedTableAsync(fake, SaltScheme(4), cutoff=CUTOFF).check_layout()


# -- require_record ------------------------------------------------------------------------


async def test_require_record_refuses_a_table_without_one_and_writes_nothing() -> None:
    fake = FakeTable(families=["cf", RECORD_FAMILY])
    table = SaltedTableAsync(fake, SaltScheme(4), require_record=True)
    for call in (
        lambda: table.read_row(b"a"),
        lambda: table.read_rows(ReadRowsQuery()),
        lambda: table.mutate_row(b"a", SetCell("cf", b"q", b"v")),
    ):
        with pytest.raises(RecordMissingError, match=r"no layout record.*saltedtable guard"):
            await call()
    assert fake.row_keys() == []
    # The way out the message names: store one explicitly; then it opens.
    await table.guard_scheme(family=RECORD_FAMILY)
    await table.mutate_row(b"a", SetCell("cf", b"q", b"v"))
    opened = SaltedTableAsync(fake, SaltScheme(4), require_record=True)
    assert await opened.read_row(b"a") is not None


def test_require_record_on_the_sync_table() -> None:
    fake = FakeTable(families=["cf", RECORD_FAMILY])
    table = SaltedTable(SyncFakeTable(fake), SaltScheme(4), require_record=True)
    with pytest.raises(RecordMissingError, match="--add-family"):
        table.mutate_row(b"a", SetCell("cf", b"q", b"v"))
    assert fake.row_keys() == []
    SaltedTable(SyncFakeTable(fake), SaltScheme(4)).mutate_row(b"a", SetCell("cf", b"q", b"v"))
    with pytest.raises(RecordMissingError):  # the refusal stays with the object
        table.read_row(b"a")
    fresh = SaltedTable(SyncFakeTable(fake), SaltScheme(4), require_record=True)
    assert fresh.read_row(b"a") is not None


# -- record_refresh ------------------------------------------------------------------------


def test_a_running_sync_cutoff_scan_stops_when_the_record_moves_to_deleting() -> None:
    fake = FakeTable(families=["cf"])
    scheme = SaltScheme(4)
    fake.set_cell(SCHEME_ROW_KEY, "cf", b"scheme", encode_layout(describe_layout(scheme, CUTOFF)))
    for i in range(20):
        fake.set_cell(b"s%d#%010d" % (i, 1_600_000_000 + i), "cf", b"q", b"v")
    reader = SaltedTable(SyncFakeTable(fake), scheme, cutoff=CUTOFF, record_refresh=1e-9)
    got = []
    deleting = encode_layout(migration_record(scheme, CUTOFF, "deleting"))

    def scan() -> None:
        for row in reader.read_rows_stream(ReadRowsQuery()):
            got.append(row.row_key)
            if len(got) == 5:
                fake.set_cell(SCHEME_ROW_KEY, "cf", b"scheme", deleting, ts=2000)

    with pytest.raises(SchemeMismatchError, match="migration: stored 'deleting'"):
        scan()
    assert len(got) == 5


@pytest.mark.parametrize("refresh", [0, -1.0, float("nan")])
def test_a_refresh_interval_must_be_positive(refresh: float) -> None:
    with pytest.raises(ValueError, match="record_refresh must be"):
        SaltedTableAsync(FakeTable(), SaltScheme(4), record_refresh=refresh)


def test_the_refresh_interval_runs_from_before_the_read_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reply that takes longer than the interval leaves the record due at once."""
    import types as pytypes

    import saltedtable._guard.decisions as guard_module
    from saltedtable._scheme.layout import Layout
    from saltedtable._sync_autogen.guard import SyncTableGuard

    clock = [1000.0]
    monkeypatch.setattr(guard_module, "time", pytypes.SimpleNamespace(monotonic=lambda: clock[0]))
    fake = FakeTable(families=["cf"])
    scheme = SaltScheme(4)
    fake.set_cell(SCHEME_ROW_KEY, "cf", b"scheme", encode_layout(describe_layout(scheme, CUTOFF)))
    table = SyncFakeTable(fake)
    delay = [45.0]
    fast_read = table.read_row

    def read_row(*args: object, **kwargs: object) -> object:
        answer = fast_read(*args, **kwargs)
        clock[0] += delay[0]  # the reply arrives this long after the request left
        return answer

    table.read_row = read_row
    guard = SyncTableGuard(table, Layout(scheme, CUTOFF), refresh=30.0)
    guard.check()
    assert guard.stored == describe_layout(scheme, CUTOFF)
    assert guard.due()  # sent at 1000, so due at 1030; the reply came at 1045
    delay[0] = 1.0
    guard.check()  # sent at 1045, answered at 1046: due at 1075
    clock[0] = 1074.0
    assert not guard.due()
    clock[0] = 1075.0
    assert guard.due()


# -- the admin schema read keeps to the operation's deadline ------------------------------------


def test_the_schema_read_gets_what_is_left_of_the_operation_budget() -> None:
    import time

    from saltedtable._scheme.layout import Layout
    from saltedtable._sync_autogen.guard import SyncTableGuard

    fake = FakeTable(families=["cf"])
    asked: list[float | None] = []

    def reader(timeout: float | None) -> dict[str, FamilyInfo]:
        asked.append(timeout)
        return fake.saltedtable_schema()

    guard = SyncTableGuard(SyncFakeTable(fake), Layout(SaltScheme(4)), schema=reader)
    guard.before_write("cf", (time.monotonic() + 5.0, 5.0))
    assert len(asked) == 1
    assert asked[0] is not None
    assert 0 < asked[0] <= 5.0
    assert guard.stored_family == "cf"


def test_a_schema_read_that_times_out_is_an_unreadable_schema(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import time

    from google.api_core.exceptions import DeadlineExceeded

    from saltedtable._scheme.layout import Layout
    from saltedtable._sync_autogen.guard import SyncTableGuard

    fake = FakeTable(families=["cf"])
    asked: list[float | None] = []

    def reader(timeout: float | None) -> dict[str, FamilyInfo]:
        asked.append(timeout)
        raise DeadlineExceeded("the admin API did not answer in time")

    table = SyncFakeTable(fake)
    guard = SyncTableGuard(table, Layout(SaltScheme(4)), schema=reader)
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        for _ in range(2):
            guard.before_write("cf", (time.monotonic() + 5.0, 5.0))
            table.mutate_row(b"0-a", SetCell("cf", b"q", b"v"))
    assert len(asked) == 1  # tried once per object, within the budget
    assert fake.row_keys() == [b"0-a"]  # the writes went on
    assert guard.stored is None  # nothing stored in an unchecked family
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "DeadlineExceeded" in warnings[0].getMessage()
    assert "--add-family" in warnings[0].getMessage()


def test_read_schema_passes_the_timeout_without_retries() -> None:
    from google.cloud.bigtable_admin_v2 import types as admin_types

    from saltedtable._admin import ADMIN_TIMEOUT, read_schema

    calls: list[dict[str, object]] = []

    class Admin:
        def get_table(self, **kwargs: object) -> admin_types.Table:
            calls.append(kwargs)
            return admin_types.Table(column_families={"cf": admin_types.ColumnFamily()})

    assert sorted(read_schema(Admin(), "t", timeout=2.5)) == ["cf"]  # type: ignore[arg-type]
    assert (calls[0]["timeout"], calls[0]["retry"]) == (2.5, None)
    read_schema(Admin(), "t")  # type: ignore[arg-type]
    assert calls[1]["timeout"] == ADMIN_TIMEOUT
    assert "retry" not in calls[1]


@pytest.mark.parametrize(
    ("family", "hint"),
    [
        (RECORD_FAMILY, "guard --add-family adds it"),
        ("meta", f"store the record in {RECORD_FAMILY!r}"),
    ],
)
def test_a_missing_family_named_for_the_record_says_how_to_add_one(family: str, hint: str) -> None:
    """Naming a family the table lacks is refused with the command that gives it one."""
    with pytest.raises(LayoutError, match=re.escape(hint)):
        place_record({"cf": family_info("cf", types.ColumnFamily())}, family=family, explicit=True)
