"""Drivers: run a scenario's steps against one table and record what happened.

The step semantics live once, in :class:`Runner`, written against five primitives
(:class:`Primitives`): invoke a method, take the next item of a stream, close a stream,
enter and leave a context manager. :class:`AsyncPrimitives` awaits them;
:class:`SyncPrimitives` runs the sync client's calls in a worker thread. A
:class:`Driver` per flavour opens its two tables: :class:`AsyncDriver`, and
:class:`SyncDriver` where the package has ``SaltedTable``.

Observations are plain data (tuples, lists, strings, bytes), so two runs compare with
``==`` and pytest shows the difference.
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
from google.cloud.bigtable.data import BigtableDataClientAsync, Row
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    FailedQueryShardError,
    MutationsExceptionGroup,
    ShardedReadRowsExceptionGroup,
)

from saltedtable import SaltedTableAsync, SaltedTableError
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT

from .model import (
    Append,
    Attr,
    Batch,
    BatcherClose,
    BatcherClosed,
    Call,
    Close,
    Contents,
    Observation,
    Pause,
    Scenario,
    SetAttr,
    Step,
    Within,
)

#: What :meth:`Primitives.next` returns at the end of a stream.
END: Final = object()

ReadContents = Callable[[], Awaitable[list[Any]]]


# -- observations (pure) -------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What the observation of a value or an error may refer to."""

    #: The argument objects of the scenario: a returned object that *is* one of them
    #: is recorded by its position (the client hands back the caller's own entries).
    objects: Sequence[Any] = ()
    #: The data client behind the table (``table.client`` must be that very object).
    client: Any = None
    #: Leave cell timestamps out (server-assigned).
    server_time: bool = False
    #: Values are ``sample_row_keys`` samples: keep their shape only.
    samples: bool = False
    #: The table's own id, written as ``<table>`` in strings (each side has its own).
    table_id: str = ""


def type_name(kind: type) -> str:
    """A type's full name: parity means the same class, not one that looks alike."""
    return f"{kind.__module__}.{kind.__qualname__}"


def observe_row(row: Row, ctx: Context) -> tuple[Any, ...]:
    """A row as data: key, then its cells (sorted by family only, see below).

    The emulator returns a row's families in an order fixed per table (a Go map), so
    two tables may disagree on it; within a family Bigtable's own order is kept. Each
    cell records its own ``row_key``: cells carry the (logical) key too.
    """
    cells = sorted(
        (
            (
                c.family,
                c.qualifier,
                c.value,
                None if ctx.server_time else c.timestamp_micros,
                tuple(c.labels),
                c.row_key,
            )
            for c in row.cells
        ),
        key=lambda cell: cell[0],
    )
    return ("Row", row.row_key, cells)


def observe_samples(samples: Any) -> tuple[Any, ...]:
    """The shape of ``sample_row_keys`` samples: a list of (bytes, int), offsets not
    decreasing; the values themselves are a documented difference."""
    if not isinstance(samples, list):
        return ("not a list", type_name(type(samples)))
    pairs = all(
        isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], bytes) and isinstance(s[1], int)
        for s in samples
    )
    offsets = [s[1] for s in samples] if pairs else []
    return ("samples", pairs, offsets == sorted(offsets))


def observe(value: Any, ctx: Context) -> Any:
    """A returned value as plain data."""
    if ctx.samples:
        return observe_samples(value)
    if isinstance(value, str) and ctx.table_id:
        return ("str", value.replace(ctx.table_id, "<table>"))
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return (type(value).__name__, value)
    if isinstance(value, Row):
        return observe_row(value, ctx)
    if isinstance(value, type):
        return ("type", type_name(value))
    if ctx.client is not None and value is ctx.client:
        return ("the data client",)
    if isinstance(value, list | tuple):
        return (type(value).__name__, [observe(v, ctx) for v in value])
    return ("object", type(value).__name__)


def ref(obj: Any, ctx: Context) -> Any:
    """An object handed back in an error: the caller's own argument (by position), or a copy."""
    for i, mine in enumerate(ctx.objects):
        if obj is mine:
            return ("argument", i)
    row_key = getattr(obj, "row_key", None)
    return ("copy", type(obj).__name__, row_key)


def observe_error(exc: BaseException, ctx: Context) -> tuple[Any, ...]:
    """An exception as data: its exact type, and the parts of the client's groups.

    saltedtable's own refusals also record the types they are instances of
    (:func:`reconcile` accepts one where the plain table raised a base of it).
    """
    name = type_name(type(exc))
    if isinstance(exc, SaltedTableError):
        return (name, "isa", tuple(type_name(kind) for kind in type(exc).__mro__))
    if isinstance(exc, MutationsExceptionGroup):
        failures = sorted(
            (
                (
                    e.index,
                    ref(e.entry, ctx),
                    None if e.__cause__ is None else type_name(type(e.__cause__)),
                )
                if isinstance(e, FailedMutationEntryError)
                else (-1, type_name(type(e)), None)
                for e in exc.exceptions
            ),
            key=repr,
        )
        return (name, failures, exc.total_entries_attempted)
    if isinstance(exc, ShardedReadRowsExceptionGroup):
        failures = sorted(
            (
                (
                    e.index,
                    ref(e.query, ctx),
                    None if e.__cause__ is None else type_name(type(e.__cause__)),
                )
                if isinstance(e, FailedQueryShardError)
                else (-1, type_name(type(e)), None)
                for e in exc.exceptions
            ),
            key=repr,
        )
        rows = [observe_row(r, ctx) for r in exc.successful_rows]
        return (name, failures, rows)
    return (name,)


def reconcile(expected: list[Observation], got: list[Observation]) -> list[Observation]:
    """``got`` with saltedtable's refusals replaced by the plain table's error where they
    are instances of its type (``except ValueError`` written for the client still matches
    a ``RowKeyError``), in the same phase."""
    out = []
    for i, observation in enumerate(got):
        plain = expected[i] if i < len(expected) else None
        if (
            plain is not None
            and observation[0] == plain[0] == "raised"
            and observation[1] == plain[1]
            and len(observation[2]) == 3
            and observation[2][1] == "isa"
            and len(plain[2]) == 1
            and plain[2][0] in observation[2][2]
        ):
            observation = plain
        out.append(observation)
    return out


# -- running steps ---------------------------------------------------------------------


class Primitives(Protocol):
    """How one flavour performs the few operations the runner needs."""

    async def invoke(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn`` (awaiting its result where the flavour is async)."""
        ...

    async def next(self, stream: Any) -> Any:
        """The stream's next item, or :data:`END`."""
        ...

    async def close_stream(self, stream: Any) -> None:
        """Leave a stream early, the documented way."""
        ...

    async def enter(self, manager: Any) -> Any:
        """Enter a context manager."""
        ...

    async def exit(self, manager: Any) -> None:
        """Leave a context manager without an exception."""
        ...


class AsyncPrimitives:
    """The primitives of the async flavour (``TableAsync``, ``SaltedTableAsync``)."""

    async def invoke(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``await fn(...)`` (or ``fn(...)`` for the async client's sync methods)."""
        result = fn(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def next(self, stream: Any) -> Any:
        """``await stream.__anext__()``."""
        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return END

    async def close_stream(self, stream: Any) -> None:
        """``await stream.aclose()``."""
        await stream.aclose()

    async def enter(self, manager: Any) -> Any:
        """``await manager.__aenter__()``."""
        return await manager.__aenter__()

    async def exit(self, manager: Any) -> None:
        """``await manager.__aexit__(None, None, None)``."""
        await manager.__aexit__(None, None, None)


class SyncPrimitives:
    """The primitives of the sync flavour (``Table``, ``SaltedTable``): each call runs in
    a worker thread, so the event loop (and the proxy on it) keeps running meanwhile."""

    async def invoke(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(...)`` in a worker thread."""
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    async def next(self, stream: Any) -> Any:
        """``next(stream)`` in a worker thread."""
        return await anyio.to_thread.run_sync(next, stream, END)

    async def close_stream(self, stream: Any) -> None:
        """``stream.close()`` (a generator's) in a worker thread."""
        await anyio.to_thread.run_sync(stream.close)

    async def enter(self, manager: Any) -> Any:
        """``manager.__enter__()`` in a worker thread."""
        return await anyio.to_thread.run_sync(manager.__enter__)

    async def exit(self, manager: Any) -> None:
        """``manager.__exit__(None, None, None)`` in a worker thread."""
        await anyio.to_thread.run_sync(manager.__exit__, None, None, None)


class Runner:
    """Runs scenario steps on one table through a flavour's primitives."""

    def __init__(self, primitives: Primitives) -> None:
        self.p = primitives

    async def run(
        self, target: Any, scenario: Scenario, ctx: Context, contents: ReadContents
    ) -> list[Observation]:
        """Every step's observation, in order."""
        out: list[Observation] = []
        for step in scenario.steps:
            await self.step(target, step, ctx, contents, out)
        return out

    async def step(
        self, target: Any, step: Step, ctx: Context, contents: ReadContents, out: list[Observation]
    ) -> None:
        """Run one step, appending what it did to ``out``."""
        p = self.p
        if isinstance(step, Call):
            await self.call(target, step, ctx, out)
        elif isinstance(step, Attr):
            try:
                out.append(("attr", step.name, observe(getattr(target, step.name), ctx)))
            except Exception as exc:
                out.append(("raised", "attr", observe_error(exc, ctx)))
        elif isinstance(step, SetAttr):
            try:
                setattr(target, step.name, step.value)
                out.append(("set", step.name))
            except Exception as exc:
                out.append(("raised", "set", observe_error(exc, ctx)))
        elif isinstance(step, Batch):
            await self.batch(target, step, ctx, contents, out)
        elif isinstance(step, Close):
            await self.guarded("close", out, ctx, p.invoke, target.close)
        elif isinstance(step, Within):
            entered = await self.guarded("enter", out, ctx, p.enter, target)
            if entered is not _FAILED:
                out.append(("entered", entered is target))
                for inner in step.steps:
                    await self.step(target, inner, ctx, contents, out)
                await self.guarded("exit", out, ctx, p.exit, target)
        elif isinstance(step, Contents):
            out.append(("contents", await contents()))
        elif isinstance(step, Pause):
            await anyio.sleep(step.seconds)
        else:  # pragma: no cover - a scenario with a step no runner knows
            raise TypeError(f"unknown step {step!r}")

    async def guarded(
        self,
        phase: str,
        out: list[Observation],
        ctx: Context,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """``await fn(*args, **kwargs)``, recording an exception (then returns :data:`_FAILED`)."""
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            out.append(("raised", phase, observe_error(exc, ctx)))
            return _FAILED

    async def call(self, target: Any, step: Call, ctx: Context, out: list[Observation]) -> None:
        """A method call; for streams the call and the iteration are told apart."""
        p = self.p
        try:
            method = getattr(target, step.method)
            result = await p.invoke(method, *step.args, **step.kwargs)
        except Exception as exc:
            out.append(("raised", "call", observe_error(exc, ctx)))
            return
        if not step.method.endswith("_stream"):
            out.append(("ok", observe(result, ctx)))
            return
        rows: list[Any] = []
        try:
            while step.take is None or len(rows) < step.take:
                row = await p.next(result)
                if row is END:
                    break
                rows.append(observe(row, ctx))
        except Exception as exc:
            # Rows before a failure depend on timing; the failure and its phase do not.
            out.append(("raised", "iterate", observe_error(exc, ctx)))
            await p.close_stream(result)
            return
        if step.take is None:
            out.append(("rows", rows))
            return
        await p.close_stream(result)
        after = await p.next(result)
        out.append(("rows", rows, "then closed", after is END))

    async def batch(
        self,
        target: Any,
        step: Batch,
        ctx: Context,
        contents: ReadContents,
        out: list[Observation],
    ) -> None:
        """Open a batcher and run the batch steps on it."""
        p = self.p
        batcher = await self.guarded(
            "mutations_batcher", out, ctx, p.invoke, target.mutations_batcher, **step.kwargs
        )
        if batcher is _FAILED:
            return
        if step.context:
            entered = await self.guarded("enter", out, ctx, p.enter, batcher)
            if entered is _FAILED:
                return
            out.append(("entered", entered is batcher))
        for inner in step.steps:
            if isinstance(inner, Append):
                appended = await self.guarded(
                    "append", out, ctx, p.invoke, batcher.append, inner.entry
                )
                if appended is not _FAILED:
                    out.append(("appended",))
            elif isinstance(inner, BatcherClose):
                closed = await self.guarded("close", out, ctx, p.invoke, batcher.close)
                if closed is not _FAILED:
                    out.append(("closed",))
            elif isinstance(inner, BatcherClosed):
                out.append(("closed?", batcher.closed))
            elif isinstance(inner, Contents):
                out.append(("contents", await contents()))
            elif isinstance(inner, Pause):
                await anyio.sleep(inner.seconds)
            else:  # pragma: no cover
                raise TypeError(f"unknown batch step {inner!r}")
        if step.context:
            left = await self.guarded("exit", out, ctx, p.exit, batcher)
            if left is not _FAILED:
                out.append(("left",))
        elif not batcher.closed:
            await p.invoke(batcher.close)  # leave nothing running; not observed


_FAILED: Final = object()


# -- drivers ---------------------------------------------------------------------------


class Driver(Protocol):
    """One flavour of table: how to open the two tables, and its runner."""

    name: str
    runner: Runner

    def targets(
        self, address: str, scenario: Scenario, plain_id: str, salted_id: str
    ) -> AbstractAsyncContextManager[tuple[Any, Any, Any]]:
        """``(data client, plain table, salted table)``, on a client of its own that talks
        to the emulator at ``address``; everything is closed after.

        The data client is the one behind both tables (``table.client`` must be it).
        """
        ...


@contextmanager
def emulator_host(address: str) -> Iterator[None]:
    """``BIGTABLE_EMULATOR_HOST=address`` while a client is created (it reads it then)."""
    saved = os.environ.get(EMULATOR_HOST_ENV)
    os.environ[EMULATOR_HOST_ENV] = address
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
            yield
    finally:
        if saved is None:
            del os.environ[EMULATOR_HOST_ENV]
        else:
            os.environ[EMULATOR_HOST_ENV] = saved


class AsyncDriver:
    """``TableAsync`` against ``SaltedTableAsync``, both from ``BigtableDataClientAsync``."""

    name = "async"

    def __init__(self) -> None:
        self.runner = Runner(AsyncPrimitives())

    @asynccontextmanager
    async def targets(
        self, address: str, scenario: Scenario, plain_id: str, salted_id: str
    ) -> AsyncIterator[tuple[Any, Any, Any]]:
        """Both tables from ``client.get_table`` (the salted one wrapped)."""
        with emulator_host(address):
            client = BigtableDataClientAsync(project=PROJECT)
        kwargs = dict(scenario.table_kwargs)
        plain = client.get_table(INSTANCE, plain_id, **kwargs)
        salted = SaltedTableAsync(client.get_table(INSTANCE, salted_id, **kwargs), scenario.scheme)
        try:
            yield client, plain, salted
        finally:
            await plain.close()
            await salted.close()
            await client.close()


class SyncDriver:
    """``Table`` against ``SaltedTable``, both from ``BigtableDataClient`` (the sync client).

    Only where the package has the sync table (``saltedtable.SaltedTable``).
    """

    name = "sync"

    def __init__(self, salted_table: Callable[..., Any]) -> None:
        self.runner = Runner(SyncPrimitives())
        self._salted_table = salted_table

    @asynccontextmanager
    async def targets(
        self, address: str, scenario: Scenario, plain_id: str, salted_id: str
    ) -> AsyncIterator[tuple[Any, Any, Any]]:
        """Both tables from ``client.get_table`` (the salted one wrapped)."""
        from google.cloud.bigtable.data import BigtableDataClient

        with emulator_host(address):
            client = await anyio.to_thread.run_sync(
                functools.partial(BigtableDataClient, project=PROJECT)
            )
        kwargs = dict(scenario.table_kwargs)
        plain = client.get_table(INSTANCE, plain_id, **kwargs)
        salted = self._salted_table(
            client.get_table(INSTANCE, salted_id, **kwargs), scenario.scheme
        )
        try:
            yield client, plain, salted
        finally:
            for close in (plain.close, salted.close, client.close):
                await anyio.to_thread.run_sync(close)


def drivers() -> tuple[Driver, ...]:
    """A driver per flavour: async and sync (an import error fails the suite, not half of it)."""
    from saltedtable import SaltedTable

    return (AsyncDriver(), SyncDriver(SaltedTable))
