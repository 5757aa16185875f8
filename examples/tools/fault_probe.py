"""Probe for issue 26's defects (R2, R3, R4) on the emulator, through the fault proxy.

Run from the repository root (starts its own emulator)::

    .venv/bin/python examples/tools/fault_probe.py r2 [--op 30 --attempt 5 | --defaults]
    .venv/bin/python examples/tools/fault_probe.py r3 [--slots 1 2]
    .venv/bin/python examples/tools/fault_probe.py r4
    .venv/bin/python examples/tools/fault_probe.py fair [--slots 1 2 8 64 --reads 20]
        [--tables async sync] [--budget-rows 20000] [--rounds 1] [--scans 10]
    .venv/bin/python examples/tools/fault_probe.py scan [--tables async sync] [--rounds 2]

r2: a 20,000-row 16-bucket table read (unordered) by the sync table through a proxy
that stalls once 300 kB went to the client (requests mid-stream); ``break`` then
``close()`` (and ``del``): how long leaving takes, and the worker threads alive after it.
r3: six threads streaming the whole table, and small reads one after another
(``operation_timeout=10``), sync and async, at each slot bound: failures and latency.
r4: A ``read_row(operation_timeout=8)`` and B, 0.1 s later, ``operation_timeout=1.0``
on a fresh table object (so both wait for the guard's record read): B's outcome and time,
with the server stalled throughout, and with the server back after 2.5 s.
fair: 10 whole-table streams whose consumers are slow (5 ms a row) and small reads (10-row
ranges, one every 0.1 s, all in flight together) on the same table object, at each slot
bound, against the same load on the plain (unsalted) table through the raw client: the
small reads' median and p90 latency, and the ratio to the plain table's median; with
``--rounds R``, R plain/salted pairs per bound and the median (and range) of their ratios;
``--scans 0``: the small reads alone (what a salted small read costs next to a plain one).
scan: a whole-table scan (ordered, then not) whose consumer keeps up, alone and next to
``--readers`` loops of small reads back to back, ``--rounds`` times: its rows/s, and the
small reads' median (read-ahead that pauses for small reads must not slow such a scan).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from google.cloud.bigtable.data import (
    BigtableDataClient,
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)

from saltedtable import ReadBudget, SaltedTable, SaltedTableAsync, SaltScheme
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT, create_table, start_emulator

REPO = Path(__file__).resolve().parents[2]
SCHEME = SaltScheme(16)


def _faultproxy() -> Any:
    spec = importlib.util.spec_from_file_location("faultproxy", REPO / "emulator/faultproxy.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["faultproxy"] = module
    spec.loader.exec_module(module)
    return module


class ThreadProxy:
    """The asyncio fault proxy, run on an event loop in a thread of its own."""

    def __init__(self, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        fp = _faultproxy()
        self.proxy = self.call(lambda: fp.FaultProxy("127.0.0.1", port).start(), wait=True)

    def call(self, fn: Callable[[], Any], wait: bool = False) -> Any:
        async def run() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def stall(self) -> None:
        self.call(self.proxy.stall)

    def clear(self) -> None:
        self.call(self.proxy.clear)


@contextmanager
def env(address: str) -> Iterator[None]:
    saved = os.environ.get(EMULATOR_HOST_ENV)
    os.environ[EMULATOR_HOST_ENV] = address
    try:
        yield
    finally:
        if saved is None:
            del os.environ[EMULATOR_HOST_ENV]
        else:
            os.environ[EMULATOR_HOST_ENV] = saved


def load(address: str, table_id: str, rows: int) -> None:
    create_table(address, table_id)
    with env(address), BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable.from_client(client, INSTANCE, table_id, SCHEME)
        for start in range(0, rows, 2000):
            table.bulk_mutate_rows(
                [
                    RowMutationEntry(b"k%06d" % i, SetCell("cf", b"q", b"v" * 100))
                    for i in range(start, min(rows, start + 2000))
                ]
            )


def workers() -> int:
    return sum(t.name.startswith("saltedtable-subscan") for t in threading.enumerate())


def r2(address: str, proxy: ThreadProxy, args: argparse.Namespace) -> None:
    load(address, "r2", 20_000)
    timeouts = {"operation_timeout": args.op, "attempt_timeout": args.attempt}
    if args.defaults:
        timeouts = {}
    for leave in ("close", "del"):
        with env(proxy.proxy.address), BigtableDataClient(project=PROJECT) as client:
            table = SaltedTable.from_client(client, INSTANCE, "r2", SCHEME)
            table.read_row(b"k000000")  # connected, guard read
            stream = table.read_rows_stream(ReadRowsQuery(), ordered=False, **timeouts)
            # Stall once every bucket has sent some rows: requests are mid-stream.
            proxy.call(lambda: proxy.proxy.stall_after(args.stall_after))
            next(stream)
            deadline = time.monotonic() + 30
            while not proxy.call(lambda: proxy.proxy.stalled):
                # The buckets read ahead while the caller holds its first row: the
                # stall comes once they have sent --stall-after bytes.
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"r2: the server never stalled: --stall-after {args.stall_after} "
                        "is more than the scan's read-ahead sends; give fewer bytes"
                    )
                time.sleep(0.01)
            start = time.monotonic()
            if leave == "close":
                stream.close()  # type: ignore[attr-defined]
            del stream
            gc.collect()
            took = time.monotonic() - start
            alive = workers()
            proxy.clear()
            print(
                f"r2 {leave:5} timeouts={timeouts or 'defaults'}: left in {took:.2f}s, "
                f"{alive} worker threads alive after"
            )


def r3(address: str, proxy: ThreadProxy, args: argparse.Namespace) -> None:
    load(address, "r3", 20_000)
    small = ReadRowsQuery(row_ranges=RowRange(b"k001000", b"k001010"))
    for slots in args.slots:
        with env(address), BigtableDataClient(project=PROJECT) as client:
            table = SaltedTable.from_client(
                client, INSTANCE, "r3", SCHEME, max_concurrent_subscans=slots
            )
            stop = threading.Event()

            scanners = [threading.Thread(target=_scan, args=(table, stop)) for _ in range(6)]
            for t in scanners:
                t.start()
            time.sleep(0.5)
            failed, took = 0, []
            for _ in range(args.reads):
                start = time.monotonic()
                try:
                    table.read_rows(small, operation_timeout=10)
                except Exception:
                    failed += 1
                took.append(time.monotonic() - start)
            stop.set()
            for t in scanners:
                t.join()
            print(
                f"r3 sync  slots={slots}: {failed} of {args.reads} small reads failed, "
                f"median {statistics.median(took):.2f}s, max {max(took):.2f}s"
            )

        async def run_async(slots: int = slots) -> None:
            with env(address):
                client = BigtableDataClientAsync(project=PROJECT)
            table = SaltedTableAsync(
                client.get_table(INSTANCE, "r3"), SCHEME, max_concurrent_subscans=slots
            )
            stop = asyncio.Event()

            async def scan() -> None:
                while not stop.is_set():
                    rows = await table.read_rows_stream(ReadRowsQuery(), operation_timeout=60)
                    async for _ in rows:
                        if stop.is_set():
                            break

            scanners = [asyncio.create_task(scan()) for _ in range(6)]
            await asyncio.sleep(0.5)
            failed, took = 0, []
            for _ in range(args.reads):
                start = time.monotonic()
                try:
                    await table.read_rows(small, operation_timeout=10)
                except Exception:
                    failed += 1
                took.append(time.monotonic() - start)
            stop.set()
            await asyncio.gather(*scanners)
            await client.close()
            print(
                f"r3 async slots={slots}: {failed} of {args.reads} small reads failed, "
                f"median {statistics.median(took):.2f}s, max {max(took):.2f}s"
            )

        asyncio.run(run_async())


def r4(address: str, proxy: ThreadProxy, args: argparse.Namespace) -> None:
    load(address, "r4", 100)
    for back_after in (None, 2.5):
        # sync
        with env(proxy.proxy.address), BigtableDataClient(project=PROJECT) as client:
            client.get_table(INSTANCE, "r4").read_row(b"connect")
            table = SaltedTable.from_client(client, INSTANCE, "r4", SCHEME)
            proxy.stall()
            if back_after is not None:
                threading.Timer(back_after, proxy.clear).start()
            a = threading.Thread(target=_outcome, args=(table.read_row, b"k000001", 8))
            a.start()
            time.sleep(0.1)
            start = time.monotonic()
            outcome = _outcome(table.read_row, b"k000002", 1.0)
            took = time.monotonic() - start
            a.join()
            proxy.clear()
            print(f"r4 sync  server back after {back_after}: B {outcome} after {took:.2f}s")

        async def run_async(back_after: float | None = back_after) -> None:
            with env(proxy.proxy.address):
                client = BigtableDataClientAsync(project=PROJECT)
            raw = client.get_table(INSTANCE, "r4")
            await raw.read_row(b"connect")
            table = SaltedTableAsync(raw, SCHEME)
            proxy.stall()
            if back_after is not None:
                threading.Timer(back_after, proxy.clear).start()

            async def first() -> None:
                with suppress(Exception):
                    await table.read_row(b"k000001", operation_timeout=8)

            a = asyncio.create_task(first())
            await asyncio.sleep(0.1)
            start = time.monotonic()
            try:
                await table.read_row(b"k000002", operation_timeout=1.0)
                outcome = "succeeded"
            except Exception as exc:
                outcome = type(exc).__name__
            took = time.monotonic() - start
            await a
            proxy.clear()
            await client.close()
            print(f"r4 async server back after {back_after}: B {outcome} after {took:.2f}s")

        asyncio.run(run_async())


SLOW_ROW = 0.005  # fair: seconds a slow consumer spends on each row


def _fair_small(i: int) -> ReadRowsQuery:
    start = (i * 7919) % 19_990
    return ReadRowsQuery(row_ranges=RowRange(b"k%06d" % start, b"k%06d" % (start + 10)))


def _fair_line(name: str, took: list[float], plain: float | None) -> float:
    took = sorted(took)
    median = statistics.median(took)
    p90 = took[int(0.9 * (len(took) - 1))]
    ratio = "" if plain is None else f", {median / plain:.2f}x plain"
    print(f"fair {name}: median {median:.3f}s, p90 {p90:.3f}s, max {took[-1]:.3f}s{ratio}")
    return median


async def _fair_async(address: str, args: argparse.Namespace, slots: int | None) -> list[float]:
    """Small-read latencies next to 10 slow whole-table consumers (None: the plain table)."""
    with env(address):
        client = BigtableDataClientAsync(project=PROJECT)
    if slots is None:
        table: Any = client.get_table(INSTANCE, "plain")
    else:
        table = SaltedTableAsync(
            client.get_table(INSTANCE, "fair"),
            SCHEME,
            max_concurrent_subscans=slots,
            budget=ReadBudget(rows=args.budget_rows),
        )
    await table.read_rows(_fair_small(0))  # connected (and the guard's record read)
    stop = asyncio.Event()

    async def slow() -> None:
        while not stop.is_set():
            rows = await table.read_rows_stream(ReadRowsQuery(), operation_timeout=600)
            async for _ in rows:
                if stop.is_set():
                    break
                await asyncio.sleep(SLOW_ROW)
            await rows.aclose()

    async def small(i: int) -> float:
        start = time.monotonic()
        await table.read_rows(_fair_small(i), operation_timeout=120)
        return time.monotonic() - start

    consumers = [asyncio.create_task(slow()) for _ in range(args.scans)]
    await asyncio.sleep(1.0)
    reads = []
    for i in range(args.reads):
        reads.append(asyncio.create_task(small(i + 1)))
        await asyncio.sleep(0.1)
    took = list(await asyncio.gather(*reads))
    stop.set()
    await asyncio.gather(*consumers)
    await client.close()
    return took


def _fair_sync(address: str, args: argparse.Namespace, slots: int | None) -> list[float]:
    """As :func:`_fair_async`, for the sync table (threads)."""
    with env(address), BigtableDataClient(project=PROJECT) as client:
        if slots is None:
            table: Any = client.get_table(INSTANCE, "plain")
        else:
            table = SaltedTable.from_client(
                client,
                INSTANCE,
                "fair",
                SCHEME,
                max_concurrent_subscans=slots,
                budget=ReadBudget(rows=args.budget_rows),
            )
        table.read_rows(_fair_small(0))
        stop = threading.Event()

        def slow() -> None:
            while not stop.is_set():
                rows = table.read_rows_stream(ReadRowsQuery(), operation_timeout=600)
                for _ in rows:
                    if stop.is_set():
                        break
                    time.sleep(SLOW_ROW)
                close = getattr(rows, "close", None)
                if close is not None:
                    close()

        took: list[float] = [0.0] * args.reads

        def small(i: int) -> None:
            start = time.monotonic()
            table.read_rows(_fair_small(i + 1), operation_timeout=120)
            took[i] = time.monotonic() - start

        consumers = [threading.Thread(target=slow) for _ in range(args.scans)]
        for t in consumers:
            t.start()
        time.sleep(1.0)
        readers = []
        for i in range(args.reads):
            readers.append(threading.Thread(target=small, args=(i,)))
            readers[-1].start()
            time.sleep(0.1)
        for t in readers:
            t.join()
        stop.set()
        for t in consumers:
            t.join()
        return took


def fair(address: str, proxy: ThreadProxy, args: argparse.Namespace) -> None:
    load(address, "fair", 20_000)
    create_table(address, "plain")
    with env(address), BigtableDataClient(project=PROJECT) as client:
        plain_table = client.get_table(INSTANCE, "plain")
        for start in range(0, 20_000, 2000):
            plain_table.bulk_mutate_rows(
                [
                    RowMutationEntry(b"k%06d" % i, SetCell("cf", b"q", b"v" * 100))
                    for i in range(start, min(20_000, start + 2000))
                ]
            )
    for kind in args.tables:
        run = (
            (lambda s: asyncio.run(_fair_async(address, args, s)))
            if kind == "async"
            else (lambda s: _fair_sync(address, args, s))
        )
        for slots in args.slots:
            ratios = []
            for _ in range(args.rounds):
                # Plain and salted alternate (the emulator slows over a long run).
                plain = _fair_line(f"{kind:5} plain   ", run(None), None)
                ratios.append(_fair_line(f"{kind:5} slots={slots:<3}", run(slots), plain) / plain)
            if args.rounds > 1:
                ratios.sort()
                low, mid, high = ratios[0], statistics.median(ratios), ratios[-1]
                print(
                    f"fair {kind:5} slots={slots:<3} over {args.rounds} rounds: ratio median "
                    f"{mid:.2f}x (min {low:.2f}x, max {high:.2f}x)"
                )


def _scan_rate_async(address: str, args: argparse.Namespace) -> None:
    """``scan``, async: the scan's rows/s alone and next to small reads back to back."""

    async def run() -> None:
        with env(address):
            client = BigtableDataClientAsync(project=PROJECT)
        table = SaltedTableAsync(client.get_table(INSTANCE, "fair"), SCHEME, guard=False)
        stop = asyncio.Event()
        took: list[float] = []

        async def smalls() -> None:
            i = 0
            while not stop.is_set():
                start = time.monotonic()
                await table.read_rows(_fair_small(i))
                took.append(time.monotonic() - start)
                i += 1

        for ordered, readers in _scan_cases(args):
            stop.clear()
            took.clear()
            tasks = [asyncio.create_task(smalls()) for _ in range(readers)]
            start, rows = time.monotonic(), 0
            async for _ in await table.read_rows_stream(ReadRowsQuery(), ordered=ordered):
                rows += 1
            rate = rows / (time.monotonic() - start)
            stop.set()
            await asyncio.gather(*tasks)
            _scan_line("async", ordered, readers, rate, took)
        await client.close()

    asyncio.run(run())


def _scan_rate_sync(address: str, args: argparse.Namespace) -> None:
    """``scan``, sync: as :func:`_scan_rate_async`, small reads in threads."""
    with env(address), BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable.from_client(client, INSTANCE, "fair", SCHEME, guard=False)
        stop = threading.Event()
        took: list[float] = []

        def smalls() -> None:
            i = 0
            while not stop.is_set():
                start = time.monotonic()
                table.read_rows(_fair_small(i))
                took.append(time.monotonic() - start)
                i += 1

        for ordered, readers in _scan_cases(args):
            stop.clear()
            took.clear()
            threads = [threading.Thread(target=smalls) for _ in range(readers)]
            for thread in threads:
                thread.start()
            start, rows = time.monotonic(), 0
            for _ in table.read_rows_stream(ReadRowsQuery(), ordered=ordered):
                rows += 1
            rate = rows / (time.monotonic() - start)
            stop.set()
            for thread in threads:
                thread.join()
            _scan_line("sync ", ordered, readers, rate, took)


def _scan_cases(args: argparse.Namespace) -> Iterator[tuple[bool, int]]:
    """``scan``'s runs in order: per round, ordered then not, each alone then with readers."""
    for _ in range(args.rounds):
        for ordered in (True, False):
            for readers in (0, args.readers):
                yield ordered, readers


def _scan_line(kind: str, ordered: bool, readers: int, rate: float, took: list[float]) -> None:
    small = f", small reads' median {statistics.median(took) * 1000:.1f} ms" if took else ""
    print(f"scan {kind} ordered={ordered!s:5} small readers={readers}: {rate:,.0f} rows/s{small}")


def scan(address: str, proxy: ThreadProxy, args: argparse.Namespace) -> None:
    """A whole-table scan with a fast consumer, alone and next to small reads back to back."""
    load(address, "fair", 20_000)
    for kind in args.tables:
        (_scan_rate_async if kind == "async" else _scan_rate_sync)(address, args)


def _scan(table: SaltedTable, stop: threading.Event) -> None:
    while not stop.is_set():
        for _ in table.read_rows_stream(ReadRowsQuery(), operation_timeout=60):
            if stop.is_set():
                break


def _outcome(read_row: Callable[..., Any], key: bytes, timeout: float) -> str:
    try:
        read_row(key, operation_timeout=timeout)
        return "succeeded"
    except Exception as exc:
        return type(exc).__name__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("item", choices=["r2", "r3", "r4", "fair", "scan"])
    parser.add_argument("--op", type=float, default=30)
    parser.add_argument("--attempt", type=float, default=5)
    parser.add_argument("--defaults", action="store_true", help="r2: the table's default timeouts")
    parser.add_argument("--stall-after", type=int, default=60_000, help="r2: bytes, then stall")
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--reads", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1, help="fair: plain/salted pairs per bound")
    parser.add_argument("--scans", type=int, default=10, help="fair: slow whole-table streams")
    parser.add_argument("--readers", type=int, default=2, help="scan: small readers beside it")
    parser.add_argument("--budget-rows", type=int, default=20_000, help="fair: the read budget")
    parser.add_argument("--tables", nargs="+", choices=["async", "sync"], default=["async"])
    args = parser.parse_args()
    with start_emulator() as emulator:
        proxy = ThreadProxy(emulator.port)
        items = {"r2": r2, "r3": r3, "r4": r4, "fair": fair, "scan": scan}
        items[args.item](emulator.address, proxy, args)
    os._exit(0)  # the proxy's loop thread and anything left behind


if __name__ == "__main__":
    main()
