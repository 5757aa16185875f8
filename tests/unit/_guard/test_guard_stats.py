"""Scheme guard, per-call statistics and the OpenTelemetry hook, on the in-memory FakeTable."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, RowRange
from google.cloud.bigtable.data.mutations import SetCell
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from saltedtable import (
    SCHEME_ROW_KEY,
    CallStats,
    CutoffPolicy,
    LayoutError,
    OneRequestOutcome,
    ReadBudget,
    ReadSettings,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
    describe_layout,
    epoch_field,
    fields,
)
from saltedtable._engine.budget import row_cost
from saltedtable._guard.record import decode_layout, encode_layout
from saltedtable._scheme.layout import _legacy_gaps
from saltedtable.otel import attributes, stats_hook
from tests.fakes import FakeTable

CUTOFF = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))


def entries(n: int, prefix: str = "k") -> list[RowMutationEntry]:
    return [RowMutationEntry(f"{prefix}{i:04d}", SetCell("f1", b"q", b"v" * 10)) for i in range(n)]


# -- the layout record (pure) -------------------------------------------------


def test_layout_record_round_trips_and_compares() -> None:
    """A record survives encode/decode, and equal layouts show no difference."""
    record = describe_layout(SaltScheme(16, key_part=fields(2)), CUTOFF)
    assert decode_layout(encode_layout(record)) == record
    assert record.differences(describe_layout(SaltScheme(16, key_part=fields(2)), CUTOFF)) == []


@pytest.mark.parametrize(
    ("other", "field"),
    [
        (SaltScheme(8), "buckets"),
        (SaltScheme(16, hash="java"), "hash"),
        (SaltScheme(16, key_part=fields(1)), "key_part"),
        (SaltScheme(16, separator=b"_"), "separator"),
        (SaltScheme(16, marker=b"~"), "marker"),
    ],
)
def test_every_part_of_the_scheme_is_compared(other: SaltScheme, field: str) -> None:
    """Bucket count, hash, key part, separator and marker each make a difference."""
    diffs = describe_layout(SaltScheme(16)).differences(describe_layout(other))
    assert len(diffs) == 1
    assert diffs[0].startswith(field)


def test_cutoff_is_part_of_the_layout() -> None:
    """Adding or moving the cutoff is a different layout; its text form is not."""
    plain = describe_layout(SaltScheme(16))
    with_cutoff = describe_layout(SaltScheme(16), CUTOFF)
    assert plain.differences(with_cutoff)
    same_instant = CutoffPolicy(
        dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))),
        epoch_field(digits=10),
    )
    assert with_cutoff.differences(describe_layout(SaltScheme(16), same_instant)) == []


def test_garbage_in_the_reserved_row_is_a_layout_error() -> None:
    """A reserved row that does not hold a record is reported, not guessed at."""
    with pytest.raises(LayoutError, match="not a layout record"):
        decode_layout(b"\xff\x00nonsense")


@pytest.mark.parametrize(
    "scheme", [SaltScheme(16), SaltScheme(7, hash="java"), SaltScheme(100, hash="phoenix")]
)
def test_reserved_row_is_outside_salted_and_legacy_key_space(scheme: SaltScheme) -> None:
    """The reserved row starts no salted prefix and lies in no legacy gap."""
    assert not scheme.has_prefix(SCHEME_ROW_KEY)
    for gap in _legacy_gaps(scheme):
        assert gap.clip(None, None) is not None
        assert not (
            (not gap.start or gap.start <= SCHEME_ROW_KEY)
            and (not gap.end or gap.end > SCHEME_ROW_KEY)
        )


# -- the guard on a table ------------------------------------------------------


async def test_first_open_stores_the_layout_and_reopen_agrees() -> None:
    """open(family=...) writes the record once; the same scheme opens again."""
    fake = FakeTable()
    await SaltedTableAsync.open(fake, SaltScheme(16), family="f1")
    stored = fake.cells_of(SCHEME_ROW_KEY)
    assert len(stored) == 1
    await SaltedTableAsync.open(fake, SaltScheme(16), family="f1")
    assert fake.cells_of(SCHEME_ROW_KEY) == stored


async def test_other_scheme_is_refused_with_both_layouts() -> None:
    """Opening with another bucket count raises SchemeMismatchError naming both."""
    fake = FakeTable()
    await SaltedTableAsync.open(fake, SaltScheme(16), family="f1")
    with pytest.raises(SchemeMismatchError, match="buckets: stored 16, now 8") as info:
        await SaltedTableAsync.open(fake, SaltScheme(8))
    assert info.value.stored.buckets == 16
    assert info.value.current.buckets == 8


async def test_override_replaces_the_record() -> None:
    """override_scheme=True stores the new layout; the old one is then refused."""
    fake = FakeTable()
    await SaltedTableAsync.open(fake, SaltScheme(16), family="f1")
    await SaltedTableAsync.open(fake, SaltScheme(8), family="f1", override_scheme=True)
    await SaltedTableAsync.open(fake, SaltScheme(8))
    with pytest.raises(SchemeMismatchError):
        await SaltedTableAsync.open(fake, SaltScheme(16))


async def test_override_without_family_is_refused() -> None:
    """An override must be able to store the record: no family, clear error."""
    fake = FakeTable()
    await SaltedTableAsync.open(fake, SaltScheme(16), family="f1")
    with pytest.raises(LayoutError, match="needs family"):
        await SaltedTableAsync.open(fake, SaltScheme(8), override_scheme=True)


async def test_open_without_family_stores_nothing() -> None:
    """Without family= nothing is written to the table."""
    fake = FakeTable()
    await SaltedTableAsync.open(fake, SaltScheme(16))
    assert fake.data_keys() == []


async def test_reserved_row_never_shows_in_reads() -> None:
    """Full scans (salted and cutoff layouts) do not return the reserved row."""
    fake = FakeTable()
    table = await SaltedTableAsync.open(fake, SaltScheme(4), family="f1")
    await table.bulk_mutate_rows(entries(20))
    rows = await table.read_rows(ReadRowsQuery())
    assert [r.row_key for r in rows] == [b"k%04d" % i for i in range(20)]
    cut = SaltedTableAsync(
        fake, SaltScheme(4), cutoff=CutoffPolicy(CUTOFF.cutoff, lambda k: 0), guard=False
    )
    assert SCHEME_ROW_KEY not in [r.row_key for r in await cut.read_rows(ReadRowsQuery())]


async def test_phoenix_256_cannot_store_the_record() -> None:
    """A scheme whose prefixes cover the reserved row refuses to store it."""
    fake = FakeTable()
    with pytest.raises(LayoutError, match="marker"):
        await SaltedTableAsync.open(fake, SaltScheme(256, hash="phoenix"), family="f1")
    await SaltedTableAsync.open(fake, SaltScheme(256, hash="phoenix", marker=b"p"), family="f1")


async def test_check_layout_refuses_rows_of_another_scheme() -> None:
    """Rows written with 8 buckets, opened with 16 (no record): check_layout refuses."""
    fake = FakeTable()
    await SaltedTableAsync(fake, SaltScheme(8), guard=False).bulk_mutate_rows(entries(50))
    with pytest.raises(LayoutError, match="do not fit"):
        await SaltedTableAsync.open(fake, SaltScheme(16, separator=b"-"))
    await SaltedTableAsync.open(fake, SaltScheme(8))


# -- statistics ----------------------------------------------------------------


@pytest.mark.parametrize("budget", [20_000, 40], ids=["one-request", "many-requests"])
async def test_read_stats_count_rows_bytes_pages_per_bucket(budget: int) -> None:
    """A full scan's stats add up to the rows read, one entry per bucket, skew >= 1."""
    fake = FakeTable()
    table = SaltedTableAsync(
        fake, SaltScheme(8), budget=ReadBudget(rows=budget), max_concurrent_subscans=2
    )
    await table.bulk_mutate_rows(entries(200))
    stats = CallStats()
    rows = await table.read_rows(ReadRowsQuery(), stats=stats)
    assert stats.rows == len(rows) == 200
    assert sum(b.rows for b in stats.buckets.values()) == 200
    assert set(stats.buckets) == set(range(8))
    min_pages = 1 if budget > 200 else 2  # one request each, or requests of a few rows
    assert all(b.pages >= min_pages and b.bytes > 0 for b in stats.buckets.values())
    assert all(b.seconds >= 0 for b in stats.buckets.values())
    assert all(b.first_page_seconds is not None for b in stats.buckets.values())
    assert sum(b.bytes for b in stats.buckets.values()) == sum(
        len(r.row_key) + sum(len(c.value) for c in r.cells) for r in rows
    )
    assert stats.skew >= 1.0
    assert stats.elapsed is not None
    assert stats.error is None
    assert stats.operation == "read_rows"


async def test_a_hot_key_shows_as_skew_in_writes() -> None:
    """Entries for one logical key land in one bucket: the bulk write's skew is high."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(8))
    spread, hot = CallStats(), CallStats()
    await table.bulk_mutate_rows(entries(80), stats=spread)
    await table.bulk_mutate_rows(
        [RowMutationEntry(b"celebrity", SetCell("f1", b"q", b"v")) for _ in range(80)], stats=hot
    )
    assert spread.skew < 2.5
    assert hot.skew == pytest.approx(1.0)  # one bucket only: max == mean over buckets seen
    assert len(hot.buckets) == 1
    assert hot.as_dict()["rows"] == 80


async def test_stats_hook_receives_every_call_and_errors() -> None:
    """The table's hook sees reads, streams and bulk writes, including a failed read."""
    seen: list[CallStats] = []
    fake = FakeTable()
    table = SaltedTableAsync(fake, SaltScheme(4), stats_hook=seen.append)
    await table.bulk_mutate_rows(entries(10))
    await table.read_rows(ReadRowsQuery(limit=3))
    async for _ in await table.read_rows_stream(ReadRowsQuery()):
        pass
    fake.fail_when = lambda query: True
    fake.fail_with = RuntimeError("boom")
    with pytest.raises(Exception, match="boom"):
        await table.read_rows(ReadRowsQuery())
    assert [s.operation for s in seen] == [
        "bulk_mutate_rows",
        "read_rows",
        "read_rows_stream",
        "read_rows",
    ]
    assert seen[1].rows == 3
    assert seen[2].rows == 10
    assert seen[3].error is not None


async def test_broken_hook_does_not_break_the_read(caplog: pytest.LogCaptureFixture) -> None:
    """A hook that raises is logged; the caller still gets the rows."""

    def broken(stats: CallStats) -> None:
        raise ValueError("exporter down")

    table = SaltedTableAsync(FakeTable(), SaltScheme(4), stats_hook=broken)
    await table.bulk_mutate_rows(entries(5))
    with caplog.at_level(logging.ERROR, logger="saltedtable"):
        assert len(await table.read_rows(ReadRowsQuery())) == 5
    assert "stats_hook raised" in caplog.text


async def test_debug_log_summarises_each_call(caplog: pytest.LogCaptureFixture) -> None:
    """With stats on, a debug line summarises rows, buckets, skew and retries."""
    table = SaltedTableAsync(FakeTable(), SaltScheme(4))
    await table.bulk_mutate_rows(entries(12))
    with caplog.at_level(logging.DEBUG, logger="saltedtable"):
        await table.read_rows(ReadRowsQuery(), stats=CallStats())
    assert "read_rows: 12 rows over 4 bucket(s)" in caplog.text


async def test_otel_hook_records_instruments() -> None:
    """The OpenTelemetry hook records rows per bucket, duration and skew on a real SDK meter."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    table = SaltedTableAsync(
        FakeTable(), SaltScheme(4), stats_hook=stats_hook(provider.get_meter("test"))
    )
    await table.bulk_mutate_rows(entries(40))
    await table.read_rows(ReadRowsQuery())
    data = reader.get_metrics_data()
    metrics = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert {"saltedtable.bucket.rows", "saltedtable.call.duration", "saltedtable.call.skew"} <= set(
        metrics
    )
    points = metrics["saltedtable.bucket.rows"].data.data_points
    read_rows = sum(p.value for p in points if p.attributes["saltedtable.operation"] == "read_rows")
    assert read_rows == 40
    provider.shutdown()


# -- what a read did, as data ---------------------------------------------------------


def span_exporter() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_a_read_records_its_settings_and_its_one_request() -> None:
    """A small bounded read records the table's settings and that its one request
    answered it; the next read on the same CallStats replaces both."""
    budget = ReadBudget(rows=5000, one_request_rows=300)
    table = SaltedTableAsync(FakeTable(), SaltScheme(4), budget=budget, max_concurrent_subscans=8)
    await table.bulk_mutate_rows(entries(40))
    stats = CallStats()
    query = ReadRowsQuery(row_ranges=RowRange(b"k0000", b"k0020"))
    assert len(await table.read_rows(query, ordered=False, stats=stats)) == 20
    assert stats.settings == ReadSettings(
        ordered=False, budget=budget, slots=8, subqueries=4, limit=None, one_request_rows=300
    )
    assert stats.settings == table.plan(query, ordered=False).settings()
    one = stats.one_request
    assert one is not None
    # (Each row's key and value are 15 bytes; the budget counts its objects too.)
    assert one == OneRequestOutcome("answered", asked=300, rows=20, bytes=20 * row_cost(15, 1))
    assert (one.tried, one.fitted) == (True, True)
    assert stats.requests == 1

    await table.read_rows(ReadRowsQuery(limit=5), stats=stats)  # whole buckets: no one request
    assert stats.one_request is None
    assert stats.settings is not None
    assert (stats.settings.limit, stats.settings.ordered) == (5, True)
    assert stats.settings.one_request_rows == 0
    assert stats.as_dict()["settings"]["limit"] == 5
    assert stats.as_dict()["one_request"] is None

    written = CallStats()
    await table.bulk_mutate_rows(entries(3), stats=written)  # a write has no read settings
    assert (written.settings, written.one_request, written.strategy) == (None, None, "")


@pytest.mark.parametrize(
    ("one", "words"),
    [
        (OneRequestOutcome("answered", 1000, 42, 900), "for up to 1000 rows answered the read (42"),
        (
            OneRequestOutcome("full", 50, 50, went_on=True),
            "came back full (50 rows), so the read went on bucket by bucket",
        ),
        (
            OneRequestOutcome("over_budget", 1000, 128, went_on=True),
            "passed the byte budget after 128 rows, so the read went on",
        ),
        (
            OneRequestOutcome("failed", 82, 3, error="ServiceUnavailable", went_on=True),
            "failed (ServiceUnavailable) after 3 rows, so the read went on",
        ),
        (OneRequestOutcome("failed", 82, 2, error="cancelled"), "failed (cancelled) after 2 rows"),
        (OneRequestOutcome("skipped", 50), "skipped this time"),
    ],
)
def test_the_strategy_words_say_what_the_fields_say(one: OneRequestOutcome, words: str) -> None:
    """``strategy`` is the settings' words, then the one request's: nothing but the fields."""
    settings = ReadSettings(
        ordered=True, budget=ReadBudget(), slots=64, subqueries=16, limit=10, one_request_rows=52
    )
    stats = CallStats(settings=settings, one_request=one)
    assert stats.strategy == f"{settings.describe()}; {one.describe()}"
    assert words in one.describe()
    assert ("went on bucket by bucket" in one.describe()) is one.went_on
    assert settings.describe().startswith("first one request naming all 16 sub-queries'")
    assert "for up to 52 rows" in settings.describe()
    assert "limit 10 in rounds" in settings.describe()
    quiet = ReadSettings(ordered=False, budget=ReadBudget(), slots=64, subqueries=4)
    assert "one request" not in quiet.describe()
    assert quiet.describe().startswith("4 sub-queries read concurrently, unordered")


async def test_otel_exports_settings_and_one_request() -> None:
    """Spans carry the settings and the one request's outcome; a counter counts outcomes."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    tracers, exporter = span_exporter()
    hook = stats_hook(meters.get_meter("test"), tracer=tracers.get_tracer("test"))
    table = SaltedTableAsync(FakeTable(), SaltScheme(4), stats_hook=hook)
    await table.bulk_mutate_rows(entries(40))
    await table.read_rows(ReadRowsQuery(row_ranges=RowRange(b"k0000", b"k0010")))
    write, read = exporter.get_finished_spans()
    assert (write.name, read.name) == ("saltedtable.bulk_mutate_rows", "saltedtable.read_rows")
    assert not any(k.startswith("saltedtable.read.") for k in write.attributes or {})
    attrs = dict(read.attributes or {})
    assert attrs["saltedtable.rows"] == 10
    assert attrs["saltedtable.read.subqueries"] == 4
    assert attrs["saltedtable.read.ordered"] is True
    assert attrs["saltedtable.read.one_request_rows"] == 1000
    assert attrs["saltedtable.read.budget_bytes"] == ReadBudget().bytes
    assert "saltedtable.read.limit" not in attrs  # None: left out
    assert attrs["saltedtable.one_request.result"] == "answered"
    assert attrs["saltedtable.one_request.rows"] == 10
    assert "saltedtable.one_request.error" not in attrs
    assert read.start_time is not None
    assert read.end_time is not None
    assert read.start_time <= read.end_time
    points = [
        p
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "saltedtable.read.one_request"
        for p in m.data.data_points
    ]
    assert [(p.attributes["saltedtable.one_request.result"], p.value) for p in points] == [
        ("answered", 1)
    ]
    meters.shutdown()


def test_otel_span_of_a_failed_call_has_an_error_status() -> None:
    """A call that failed ends its span with an error status and the exception."""
    tracers, exporter = span_exporter()
    hook = stats_hook(MeterProvider().get_meter("test"), tracer=tracers.get_tracer("test"))
    stats = CallStats(operation="read_rows")
    stats.finish(RuntimeError("boom"))
    hook(stats)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]
    assert attributes(stats)["saltedtable.operation"] == "read_rows"


async def test_the_observability_snippet_runs_and_prints_what_the_docs_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The "What a read did" snippet of docs/observability.md, run on a 4-bucket table
    of 10 ``user1#`` rows, prints what the text after it says."""
    doc = (Path(__file__).parents[3] / "docs" / "observability.md").read_text(encoding="utf-8")
    section = doc.split("## What a read did", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "observability.md", "exec"), namespace)
    table = SaltedTableAsync(FakeTable(), SaltScheme(4))
    await table.bulk_mutate_rows(
        [RowMutationEntry(f"user1#{i}", SetCell("f1", b"q", b"v")) for i in range(10)]
        + [RowMutationEntry(f"user2#{i}", SetCell("f1", b"q", b"v")) for i in range(5)]
    )
    stats = await namespace["how_it_ran"](table)
    assert stats.rows == 10
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "sub-queries: 4 ordered: True",
        "one request of up to 1000 rows",
        "answered 10 rows, went on: False",
    ]
    for line in printed:  # the docs quote each line
        assert f"`{line}`" in " ".join(section.split())


# -- the guard by default ------------------------------------------------------------


class CountingFake(FakeTable):
    """A fake that counts the guard's reads of the reserved row."""

    def __init__(self) -> None:
        super().__init__()
        self.record_reads = 0

    async def read_row(self, row_key: bytes | str, **kwargs: Any) -> Any:
        if row_key == SCHEME_ROW_KEY:
            self.record_reads += 1
            await anyio.sleep(0.01)  # so concurrent first operations overlap
        return await super().read_row(row_key, **kwargs)


async def test_the_first_operation_reads_the_record_once_for_the_object() -> None:
    """Concurrent first operations share one read of the record; later ones read none."""
    fake = CountingFake()
    await SaltedTableAsync(fake, SaltScheme(8)).bulk_mutate_rows(entries(20))
    table = SaltedTableAsync(fake, SaltScheme(8))
    fake.record_reads = 0
    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(table.read_row, b"k%04d" % i)
    await table.read_rows(ReadRowsQuery(limit=3))
    assert fake.record_reads == 1
    assert table.stored_layout == describe_layout(SaltScheme(8))


async def test_the_first_write_stores_the_record_in_its_family() -> None:
    """No record, no reserved family: the first write stores it in its own (safe) family."""
    fake = FakeTable(families=["f1", "f2"])
    table = SaltedTableAsync(fake, SaltScheme(8))
    assert await table.read_row(b"a") is None
    assert SCHEME_ROW_KEY not in fake.row_keys()
    await table.mutate_row(b"a", SetCell("f2", b"q", b"v"))
    assert [c[0] for c in fake.cells_of(SCHEME_ROW_KEY)] == ["f2"]
    with pytest.raises(SchemeMismatchError, match="buckets: stored 8, now 4"):
        await SaltedTableAsync(fake, SaltScheme(4)).read_row(b"a")


async def test_a_mismatch_is_refused_for_every_operation_without_asking_again() -> None:
    """After a refusal, reads and writes keep raising it; nothing is written."""
    fake = CountingFake()
    await SaltedTableAsync(fake, SaltScheme(8)).mutate_row(b"a", SetCell("f1", b"q", b"v"))
    wrong = SaltedTableAsync(fake, SaltScheme(16))
    fake.record_reads = 0
    for call in (
        lambda: wrong.read_row(b"a"),
        lambda: wrong.read_rows(ReadRowsQuery()),
        lambda: wrong.mutate_row(b"b", SetCell("f1", b"q", b"v")),
        lambda: wrong.bulk_mutate_rows(entries(2)),
    ):
        with pytest.raises(SchemeMismatchError):
            await call()
    assert fake.record_reads == 1
    assert fake.data_keys() == [SaltScheme(8).salt_key(b"a")]


@pytest.mark.parametrize("same", [True, False])
async def test_two_writers_on_a_new_table_agree_on_one_record(same: bool) -> None:
    """Two objects racing to store the first record: one record; a different scheme loses."""
    fake = CountingFake()
    first = SaltedTableAsync(fake, SaltScheme(8))
    second = SaltedTableAsync(fake, SaltScheme(8 if same else 4))
    results = await asyncio.gather(
        first.mutate_row(b"a", SetCell("f1", b"q", b"1")),
        second.mutate_row(b"b", SetCell("f1", b"q", b"2")),
        return_exceptions=True,
    )
    stored = decode_layout(fake.cells_of(SCHEME_ROW_KEY)[0][3])
    assert len(fake.cells_of(SCHEME_ROW_KEY)) == 1
    if same:
        assert results == [None, None]
    else:
        winner = 8 if results[0] is None else 4
        assert stored.buckets == winner
        assert sum(isinstance(r, SchemeMismatchError) for r in results) == 1


async def test_guard_off_reads_and_writes_nothing_of_its_own() -> None:
    """guard=False: no record read, none stored."""
    fake = CountingFake()
    table = SaltedTableAsync(fake, SaltScheme(8), guard=False)
    await table.mutate_row(b"a", SetCell("f1", b"q", b"v"))
    await table.read_rows(ReadRowsQuery())
    assert fake.record_reads == 0
    assert SCHEME_ROW_KEY not in fake.row_keys()


# -- the client's metrics hook ---------------------------------------------------------


class Controller:
    """Stands in for the client's metrics controller: handlers and add_handler."""

    def __init__(self) -> None:
        self.handlers: list[object] = []

    def add_handler(self, handler: object) -> None:
        self.handlers.append(handler)


class ClientTable(FakeTable):
    """A fake table whose ``client`` has a metrics controller, like the real one."""

    def __init__(self) -> None:
        super().__init__()
        self.client = type("Client", (), {})()
        self.client._metrics = Controller()


async def test_the_retry_counter_is_installed_only_when_statistics_are_asked_for() -> None:
    """Reads without stats leave the client's metrics alone; the first with stats hooks in once."""
    fake = ClientTable()
    table = SaltedTableAsync(fake, SaltScheme(4))
    await table.bulk_mutate_rows(entries(10))
    await table.read_rows(ReadRowsQuery())
    assert fake.client._metrics.handlers == []
    await table.read_rows(ReadRowsQuery(), stats=CallStats())
    await table.read_rows(ReadRowsQuery(), stats=CallStats())
    assert len(fake.client._metrics.handlers) == 1


async def test_a_table_without_client_metrics_says_so_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No metrics controller to hook into: one warning however many reads ask for stats."""
    monkeypatch.setattr("saltedtable._read.stats._CANNOT_COUNT", set())
    table = SaltedTableAsync(FakeTable(), SaltScheme(4))
    with caplog.at_level(logging.WARNING, logger="saltedtable"):
        for _ in range(3):
            await table.read_rows(ReadRowsQuery(), stats=CallStats())
    warnings = [r for r in caplog.records if "cannot count client retries" in r.getMessage()]
    assert len(warnings) == 1


# -- the guard under concurrency, deadlines and app profiles --------------------------


async def test_concurrent_first_operations_with_the_wrong_scheme_are_all_refused() -> None:
    """Many first operations at once all raise; none reads or writes by the wrong layout."""
    fake = CountingFake()
    await SaltedTableAsync(fake, SaltScheme(8)).bulk_mutate_rows(entries(20))
    before = fake.data_keys()
    fake.record_reads = 0
    wrong = SaltedTableAsync(fake, SaltScheme(16))
    calls = [wrong.read_row(b"k%04d" % i) for i in range(5)]
    calls += [wrong.mutate_row(b"w%d" % i, SetCell("f1", b"q", b"v")) for i in range(5)]
    calls += [wrong.read_rows_sharded([ReadRowsQuery(limit=2), ReadRowsQuery(limit=3)])]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["SchemeMismatchError"] * len(calls)
    assert fake.data_keys() == before
    assert fake.record_reads == 1
    # Each raise is its own object: a shared one would grow its traceback call after call.
    assert len({id(r) for r in results}) == len(results)


async def test_the_guard_keeps_to_the_first_operations_deadline() -> None:
    """A slow record read is bounded by the caller's operation_timeout, not the table's 600 s."""
    seen: list[dict[str, Any]] = []

    class Slow(FakeTable):
        async def read_row(self, row_key: bytes | str, **kwargs: Any) -> Any:
            if row_key == SCHEME_ROW_KEY:
                seen.append(kwargs)
                await anyio.sleep(0.05)
            return await super().read_row(row_key, **kwargs)

    table = SaltedTableAsync(Slow(), SaltScheme(8))
    await table.read_row(b"a", operation_timeout=2.0, attempt_timeout=0.5)
    assert 1.5 < seen[0]["operation_timeout"] <= 2.0
    assert seen[0]["attempt_timeout"] == 0.5
    reads = SaltedTableAsync(Slow(), SaltScheme(8))
    await reads.read_rows(ReadRowsQuery(), operation_timeout=3.0)
    assert 2.5 < seen[1]["operation_timeout"] <= 3.0


async def test_a_profile_without_transactions_stores_the_record_with_a_plain_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """CheckAndMutateRow refused (FailedPrecondition): a warning, a plain write, read back."""
    from google.api_core.exceptions import FailedPrecondition

    class NoTransactions(FakeTable):
        async def check_and_mutate_row(self, *args: Any, **kwargs: Any) -> bool:
            raise FailedPrecondition("Single-row transactions are not allowed by this app profile")

    fake = NoTransactions()
    with caplog.at_level(logging.WARNING, "saltedtable.guard"):
        await SaltedTableAsync(fake, SaltScheme(8)).mutate_row(b"a", SetCell("f1", b"q", b"v"))
    assert decode_layout(fake.cells_of(SCHEME_ROW_KEY)[0][3]).buckets == 8
    assert "transactional writes" in caplog.text
    with pytest.raises(SchemeMismatchError):
        await SaltedTableAsync(fake, SaltScheme(4)).read_row(b"a")


async def test_bulk_mutate_rows_takes_any_iterable_and_stores_the_record() -> None:
    """A generator of entries, as the client accepts: written, counted, record stored."""
    fake = FakeTable()
    reported: list[CallStats] = []
    table = SaltedTableAsync(fake, SaltScheme(8), stats_hook=reported.append)
    await table.bulk_mutate_rows(e for e in entries(5))  # type: ignore[arg-type]
    assert len(fake.data_keys()) == 5
    assert SCHEME_ROW_KEY in fake.row_keys()
    assert reported[-1].rows == 5
