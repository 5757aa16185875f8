"""The salted batchers over the fake table: flush(), every failure once, calls per append.

The fake batchers (tests/fakes.py) have the client's private parts the salted
batcher takes (``_schedule_flush``, ``_flush_jobs``, ``_add_exceptions``) and run
their flush jobs as tasks (async) or on worker threads (sync), as the client's do.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from google.api_core.exceptions import ServiceUnavailable
from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, SetCell

from saltedtable import (
    SCHEME_ROW_KEY,
    SaltedTable,
    SaltedTableAsync,
    SaltScheme,
    SchemeMismatchError,
)
from saltedtable._async.batcher import SaltedMutationsBatcherAsync
from saltedtable._guard.record import describe_layout, encode_layout
from saltedtable._scheme.layout import Layout
from tests.fakes import FakeBatcher, FakeTable, SyncFakeTable

SCHEME = SaltScheme(8)


def entry(key: bytes) -> RowMutationEntry:
    return RowMutationEntry(key, SetCell("f1", b"q", key, 1000))


def failing(*keys: bytes) -> FakeTable:
    """A fake table on which the entries of these logical keys fail."""
    cause = ServiceUnavailable("nope")
    bad = {SCHEME.salt_key(k) for k in keys}
    return FakeTable(fail_entry=lambda e: cause if e.row_key in bad else None)


def failed_entries(group: MutationsExceptionGroup) -> list[RowMutationEntry]:
    out = []
    for exc in group.exceptions:
        assert isinstance(exc, FailedMutationEntryError)
        assert exc.index is None
        out.append(exc.entry)
    return out


# -- flush(), async ------------------------------------------------------------------


async def test_flush_writes_what_was_appended_and_the_batcher_stays_open() -> None:
    """After flush() every appended entry is readable (before close), and appends go on."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SCHEME)
    batcher = table.mutations_batcher()
    for key in (b"a", b"b", b"c"):
        await batcher.append(entry(key))
    assert fake.data_keys() == []  # below every limit: nothing written yet
    await batcher.flush()
    assert sorted(fake.data_keys()) == sorted(SCHEME.salt_key(k) for k in (b"a", b"b", b"c"))
    assert not batcher.closed
    await batcher.append(entry(b"d"))
    await batcher.close()
    assert SCHEME.salt_key(b"d") in fake.data_keys()


async def test_flush_raises_the_callers_own_failed_entries_once() -> None:
    """flush() names the caller's entry objects; close() does not raise them again."""
    table = SaltedTableAsync(failing(b"bad1", b"bad2", b"bad3"), SCHEME)
    batcher = table.mutations_batcher()
    mine = [entry(k) for k in (b"ok1", b"bad1", b"ok2", b"bad2")]
    for e in mine:
        await batcher.append(e)
    with pytest.raises(MutationsExceptionGroup) as info:
        await batcher.flush()
    got = failed_entries(info.value)
    assert [e.row_key for e in got] == [b"bad1", b"bad2"]  # logical keys, in append order
    assert got[0] is mine[1]
    assert got[1] is mine[3]
    assert all(isinstance(exc.__cause__, ServiceUnavailable) for exc in info.value.exceptions)
    assert info.value.total_entries_attempted == 4
    await batcher.flush()  # nothing new: nothing raised
    late = entry(b"bad3")
    await batcher.append(late)
    with pytest.raises(MutationsExceptionGroup) as at_close:
        await batcher.close()
    assert failed_entries(at_close.value) == [late]  # only the failure not raised yet
    assert at_close.value.total_entries_attempted == 1


async def test_flush_does_not_wait_for_entries_appended_after_the_call() -> None:
    """A flush job of later entries that never finishes does not hold flush() up."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SCHEME)
    batcher = table.mutations_batcher(flush_limit_mutation_count=1)  # a job per append
    inner = batcher._inner
    assert isinstance(inner, FakeBatcher)
    release = asyncio.Event()
    inner.blocked[SCHEME.salt_key(b"later")] = release
    await batcher.append(entry(b"first"))
    flushing = asyncio.create_task(batcher.flush())
    await asyncio.sleep(0)  # flush() took its snapshot
    await batcher.append(entry(b"later"))  # its job starts, and waits for `release`
    await asyncio.wait_for(flushing, 5)
    assert fake.data_keys() == [SCHEME.salt_key(b"first")]
    release.set()
    await batcher.close()
    assert SCHEME.salt_key(b"later") in fake.data_keys()


async def test_flush_waits_for_jobs_started_before_it() -> None:
    """Entries already in a flush job (by count) when flush() is called are waited for."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SCHEME)
    batcher = table.mutations_batcher(flush_limit_mutation_count=2)
    inner = batcher._inner
    assert isinstance(inner, FakeBatcher)
    release = asyncio.Event()
    inner.blocked[SCHEME.salt_key(b"slow")] = release
    await batcher.append(entry(b"slow"))
    await batcher.append(entry(b"two"))  # the limit: a job of both starts, and waits
    flushing = asyncio.create_task(batcher.flush())
    await asyncio.sleep(0.05)
    assert not flushing.done()
    release.set()
    await asyncio.wait_for(flushing, 5)
    assert len(fake.data_keys()) == 2
    await batcher.close()


async def test_close_raises_all_fifty_failures() -> None:
    """close() raises each of 50 failures (the client's batcher keeps 20 of them)."""
    keys = [b"bad%02d" % i for i in range(50)]
    table = SaltedTableAsync(failing(*keys), SCHEME)
    batcher = table.mutations_batcher(flush_limit_mutation_count=7)
    for key in keys:
        await batcher.append(entry(key))
    with pytest.raises(MutationsExceptionGroup) as info:
        await batcher.close()
    assert sorted(e.row_key for e in failed_entries(info.value)) == keys


async def test_entries_the_guard_could_not_clear_are_raised_by_flush_and_never_sent() -> None:
    """The guard's read fails: the entry is held back, and flush() reports it."""
    fake = FakeTable()
    cause = ServiceUnavailable("down")

    async def read_row(*args: Any, **kwargs: Any) -> None:
        raise cause

    fake.read_row = read_row  # type: ignore[method-assign]
    batcher = SaltedTableAsync(fake, SCHEME).mutations_batcher()
    mine = entry(b"k")
    await batcher.append(mine)
    with pytest.raises(MutationsExceptionGroup) as info:
        await batcher.flush()
    (failed,) = info.value.exceptions
    assert isinstance(failed, FailedMutationEntryError)
    assert failed.entry is mine
    assert failed.__cause__ is cause
    await batcher.close()  # raised once
    assert fake.data_keys() == []


async def test_flush_on_a_closed_batcher_is_refused() -> None:
    batcher = SaltedTableAsync(FakeTable(), SCHEME).mutations_batcher()
    await batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        await batcher.flush()
    with pytest.raises(RuntimeError, match="closed"):
        await batcher.append(entry(b"k"))


class _PublicOnly:
    """A batcher with only the client's public surface (another client version, say)."""

    def __init__(self, inner: FakeBatcher) -> None:
        self.inner = inner

    @property
    def closed(self) -> bool:
        return self.inner.closed

    async def append(self, mutation_entry: RowMutationEntry) -> None:
        await self.inner.append(mutation_entry)

    async def close(self) -> None:
        await self.inner.close()

    async def __aenter__(self) -> Any:
        return self


async def test_without_the_clients_internals_close_still_names_logical_entries() -> None:
    """flush() says what it lacks; close() raises the client's own group, with logical keys."""
    fake = failing(b"bad")
    layout = Layout(SCHEME)
    batcher = SaltedMutationsBatcherAsync(_PublicOnly(FakeBatcher(fake)), layout)
    mine = entry(b"bad")
    await batcher.append(entry(b"ok"))
    await batcher.append(mine)
    with pytest.raises(NotImplementedError, match="_schedule_flush"):
        await batcher.flush()
    with pytest.raises(MutationsExceptionGroup) as info:
        await batcher.close()
    assert failed_entries(info.value) == [mine]


async def test_with_the_client_internals_switch_off_the_clients_batcher_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """client_internals=False: its private store of failures is not replaced, flush() names
    the switch, and close() raises the client's own group with the caller's entries."""
    fake = failing(b"bad")
    batcher = SaltedTableAsync(fake, SCHEME, client_internals=False).mutations_batcher()
    assert "_add_exceptions" not in vars(batcher._inner)
    mine = entry(b"bad")
    await batcher.append(entry(b"ok"))
    await batcher.append(mine)
    with pytest.raises(NotImplementedError, match="client_internals"):
        await batcher.flush()
    with pytest.raises(MutationsExceptionGroup) as info:
        await batcher.close()
    assert failed_entries(info.value) == [mine]
    # The environment variable does the same; the sync table too.
    monkeypatch.setenv("SALTEDTABLE_CLIENT_INTERNALS", "off")
    sync = SaltedTable(SyncFakeTable(FakeTable()), SCHEME).mutations_batcher()
    with pytest.raises(NotImplementedError, match="SALTEDTABLE_CLIENT_INTERNALS"):
        sync.flush()
    sync.close()


# -- flush(), sync -------------------------------------------------------------------


def test_the_sync_flush_writes_and_raises_the_callers_entries_once() -> None:
    fake = failing(b"bad")
    table = SaltedTable(SyncFakeTable(fake), SCHEME)
    batcher = table.mutations_batcher()
    mine = [entry(k) for k in (b"ok", b"bad")]
    for e in mine:
        batcher.append(e)
    with pytest.raises(MutationsExceptionGroup) as info:
        batcher.flush()
    assert failed_entries(info.value) == [mine[1]]
    assert fake.data_keys() == [SCHEME.salt_key(b"ok")]
    batcher.append(entry(b"ok2"))
    batcher.close()  # the failure was raised by flush()
    assert SCHEME.salt_key(b"ok2") in fake.data_keys()


def test_the_sync_flush_does_not_wait_for_later_entries() -> None:
    fake = FakeTable()
    table = SaltedTable(SyncFakeTable(fake), SCHEME)
    batcher = table.mutations_batcher(flush_limit_mutation_count=1)
    release = threading.Event()
    batcher._inner.blocked[SCHEME.salt_key(b"later")] = release  # type: ignore[attr-defined]
    batcher.append(entry(b"first"))
    batcher.flush()
    assert fake.data_keys() == [SCHEME.salt_key(b"first")]
    batcher.append(entry(b"later"))  # its job waits for `release`
    batcher.append(entry(b"third"))
    # (flush() waits for "later" now: it was appended before this call)
    waiter = threading.Thread(target=batcher.flush)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()
    release.set()
    waiter.join(5)
    assert not waiter.is_alive()
    batcher.close()


def test_the_sync_batcher_raises_every_failure() -> None:
    keys = [b"bad%02d" % i for i in range(30)]
    batcher = SaltedTable(SyncFakeTable(failing(*keys)), SCHEME).mutations_batcher(
        flush_limit_mutation_count=4
    )
    for key in keys:
        batcher.append(entry(key))
    with pytest.raises(MutationsExceptionGroup) as info:
        batcher.close()
    assert sorted(e.row_key for e in failed_entries(info.value)) == keys


# -- the guard on the fast path ------------------------------------------------------


@contextmanager
def clock(*modules: types.ModuleType) -> Iterator[list[float]]:
    """A clock the tests move, read by the guard and the batcher alike."""
    now = [1000.0]
    fake_time = types.SimpleNamespace(monotonic=lambda: now[0])
    saved = [m.time for m in modules]  # type: ignore[attr-defined]
    for m in modules:
        m.time = fake_time  # type: ignore[attr-defined]
    try:
        yield now
    finally:
        for m, t in zip(modules, saved, strict=True):
            m.time = t  # type: ignore[attr-defined]


async def test_the_first_append_stores_the_record_before_the_entry_is_sent() -> None:
    fake = FakeTable()
    batcher = SaltedTableAsync(fake, SCHEME).mutations_batcher()
    await batcher.append(entry(b"k"))
    assert fake.row_keys() == [SCHEME_ROW_KEY]  # the record; the entry waits for a flush
    await batcher.close()


async def test_a_settled_guard_reads_the_record_again_when_due_and_refuses_a_new_one() -> None:
    """Appends skip the guard while it is settled; once due, an append reads the record."""
    import saltedtable._async.batcher as batcher_module
    import saltedtable._guard.decisions as guard_module

    fake = FakeTable()
    with clock(batcher_module, guard_module) as now:
        table = SaltedTableAsync(fake, SCHEME, record_refresh=30)
        batcher = table.mutations_batcher()
        await batcher.append(entry(b"a"))  # stores the record at t=1000: due at 1030
        # Another writer replaces the record: seen only once the guard is due.
        other = encode_layout(describe_layout(SaltScheme(16), None))
        fake.set_cell(SCHEME_ROW_KEY, "f1", b"scheme", other, ts=2_000_000_000_000_000)
        now[0] = 1029.0
        await batcher.append(entry(b"b"))
        now[0] = 1030.0
        with pytest.raises(SchemeMismatchError):
            await batcher.append(entry(b"c"))
        with pytest.raises(SchemeMismatchError):  # the refusal is kept
            await batcher.append(entry(b"d"))
        await batcher.close()
    assert sorted(fake.data_keys()) == sorted(SCHEME.salt_key(k) for k in (b"a", b"b"))


async def test_a_write_naming_no_family_does_not_store_the_record() -> None:
    """A delete names no family: the guard stays unstored-for-now, and each such append asks it."""
    fake = FakeTable()
    batcher = SaltedTableAsync(fake, SCHEME).mutations_batcher()
    await batcher.append(RowMutationEntry(b"k", DeleteAllFromRow()))
    assert SCHEME_ROW_KEY not in fake.row_keys()
    await batcher.append(entry(b"k2"))  # names f1: the record is stored now
    assert SCHEME_ROW_KEY in fake.row_keys()
    await batcher.close()


# -- calls per appended row ----------------------------------------------------------


class _Calls:
    """Python and built-in function calls made between start() and stop() (deterministic).

    The garbage collector is off while counting: a collection would run the finalizers
    and weakref callbacks of whatever earlier tests left behind, and count their calls.
    """

    def __init__(self) -> None:
        self.count = 0
        self._gc_was_enabled = False

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.count += 1

    def start(self) -> None:
        self._gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        sys.setprofile(self._profile)

    def stop(self) -> int:
        sys.setprofile(None)
        if self._gc_was_enabled:
            gc.enable()
        return self.count


ROWS = 500


async def _append_calls(
    append: Callable[[RowMutationEntry], Any], rows: list[RowMutationEntry]
) -> int:
    calls = _Calls()
    calls.start()
    try:
        for e in rows:
            await append(e)
    finally:
        calls.stop()
    return calls.count


@pytest.mark.parametrize("guard", [True, False])
async def test_the_salted_batcher_adds_at_most_five_calls_per_append(guard: bool) -> None:
    """Against the fake batcher it wraps, appended alone (issue 41's measure)."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SCHEME, guard=guard)
    await table.mutations_batcher().append(entry(b"warm"))  # the guard's first write
    salted = table.mutations_batcher(flush_limit_mutation_count=None)
    raw = FakeBatcher(fake)
    rows = [entry(b"k%05d" % i) for i in range(ROWS)]
    raw_calls = await _append_calls(raw.append, rows)
    salted_calls = await _append_calls(salted.append, rows)
    assert (salted_calls - raw_calls) / ROWS <= 5


async def test_bulk_mutate_rows_adds_at_most_two_calls_per_entry() -> None:
    """Per entry: the salter and its hash (the rest is per call)."""
    fake = FakeTable()
    table = SaltedTableAsync(fake, SCHEME, guard=False)
    sent: list[int] = []

    async def bulk(entries: list[RowMutationEntry], **kwargs: Any) -> None:
        sent.append(len(entries))

    fake.bulk_mutate_rows = bulk  # type: ignore[method-assign]

    async def calls_of(entries: list[RowMutationEntry]) -> int:
        calls = _Calls()
        calls.start()
        try:
            await table.bulk_mutate_rows(entries)
        finally:
            calls.stop()
        return calls.count

    small = await calls_of([entry(b"k%05d" % i) for i in range(10)])
    large = await calls_of([entry(b"k%05d" % i) for i in range(10 + ROWS)])
    assert sent == [10, 10 + ROWS]
    assert large - small <= 2 * ROWS, (small, large)


@pytest.mark.parametrize("guard", [True, False])
async def test_point_writes_add_few_calls_a_call(guard: bool) -> None:
    """``mutate_row`` and ``check_and_mutate_row`` over the client's own (issue 41): the key
    placed with one call, the predicate's type checked once, nothing the client rebuilds."""
    from google.cloud.bigtable.data.row_filters import PassAllFilter

    fake = FakeTable()
    table = SaltedTableAsync(fake, SCHEME, guard=guard)
    await table.mutate_row(b"warm", SetCell("f1", b"q", b"v", 1000))  # the guard's first write

    async def write(*args: Any, **kwargs: Any) -> bool:
        return True

    fake.mutate_row = write  # type: ignore[method-assign]
    fake.check_and_mutate_row = write  # type: ignore[method-assign]
    cell = SetCell("f1", b"q", b"v", 1000)
    predicate = PassAllFilter(True)
    keys = [b"k%05d" % i for i in range(ROWS)]
    counts = {}
    for op in ("mutate_row", "check_and_mutate_row"):
        calls = _Calls()
        calls.start()
        try:
            for key in keys:
                if op == "mutate_row":
                    await table.mutate_row(key, cell)
                else:
                    await table.check_and_mutate_row(key, predicate, true_case_mutations=cell)
        finally:
            calls.stop()
        counts[op] = (calls.count - ROWS) / ROWS  # (less the fake's own call)
    assert counts["mutate_row"] <= 20, counts
    assert counts["check_and_mutate_row"] <= 25, counts
