"""Native memory per cancelled scan: which ways of stopping a Bigtable stream leak (issue 18).

Each *mode* stops scans of a 20,000-row table after two rows, one way, over and
over, in a fresh child process, and prints that process's resident set size
(``/proc/self/statm``, after ``gc.collect()`` and glibc ``malloc_trim(0)``, so
memory that was freed but kept by the allocator does not count) after 0, 1k, 5k
and 20k stopped scans::

    python examples/tools/leak_probe.py                    # every mode, 0/1k/5k/20k scans
    python examples/tools/leak_probe.py --quick            # 0/500/2000, a few minutes
    python examples/tools/leak_probe.py --modes stream-end,stream-task-cancel --counts 0,1000

It starts the official emulator itself (``saltedtable.testing``) unless
``BIGTABLE_EMULATOR_HOST`` is set, loads the rows once into a plain table and
into a 16-bucket salted one, and deletes both at the end. Loopback only.

Modes (``stream`` = the client's ``read_rows_stream``; ``grpc`` = the generated
``read_rows`` call under it, no client library in between; ``salted`` =
``SaltedTableAsync.read_rows_stream`` over 16 buckets, left with ``aclose()``):

=========================  ===================================================
stream-task-cancel         a task waiting in ``__anext__`` is cancelled
stream-aclose              ``aclose()`` only: the RPC runs on to its deadline
stream-end                 ``saltedtable._read.cancel_asyncio.end_stream`` (the mitigation)
grpc-task-cancel           a task waiting in ``call.read()`` is cancelled
grpc-cancel-idle           ``call.cancel()`` while no read is pending
grpc-cancel-pending        ``call.cancel()`` while another task's read is pending
salted-task-cancel         the merge cancels its readers while they wait (the
                           pre-fix way: ``stop_sources`` patched out)
salted                     this checkout: the merge cancels the requests' RPCs
                           under its readers first (``stop_requests``)
=========================  ===================================================
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack
from typing import Any, Final

MODES: Final = (
    "stream-task-cancel",
    "stream-aclose",
    "stream-end",
    "grpc-task-cancel",
    "grpc-cancel-idle",
    "grpc-cancel-pending",
    "salted-task-cancel",
    "salted",
)
PROJECT: Final = "test-project"
INSTANCE: Final = "test-instance"
BUCKETS: Final = 16
PAGE: Final = os.sysconf("SC_PAGE_SIZE")
#: How long stream-aclose's abandoned RPCs may run (the client's attempt timeout).
ACLOSE_ATTEMPT_TIMEOUT: Final = 5.0
#: Modes that leak ~0.7 MB per scan stop at --leaky-max scans (20k would need ~15 GB).
LEAKY: Final = ("salted-task-cancel",)

try:
    _LIBC: Any = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc: RSS is then measured without trimming
    _LIBC = None


def rss() -> int:
    """Resident bytes of this process once garbage is collected and the heap trimmed."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


# -- the ways to stop a stream -----------------------------------------------------


async def _wait_in(reader: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
    """A task that reads until it has to wait for the server; returned once it waits (or ends)."""
    entered = asyncio.Event()

    async def drain() -> None:
        entered.set()
        while await reader() is not None:
            pass

    task = asyncio.get_running_loop().create_task(drain())
    await entered.wait()  # now it is suspended in a read that waits, or finished
    return task


async def _finish(task: asyncio.Task[None]) -> None:
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # the stream ended on its own, or raised CancelledError


def _stream_reader(stream: AsyncIterator[Any]) -> Callable[[], Awaitable[object]]:
    return lambda: anext(stream, None)


def _call_reader(call: Any) -> Callable[[], Awaitable[object]]:
    async def read() -> object:
        from grpc import aio

        message = await call.read()
        return None if message is aio.EOF else message

    return read


async def scan_once(mode: str, ctx: dict[str, Any]) -> None:
    """Open one scan, take two rows, and stop it the way ``mode`` says."""
    from google.cloud.bigtable.data import ReadRowsQuery

    from saltedtable._read.cancel_asyncio import _cancel_pending_read, end_stream

    if mode.startswith("stream"):
        table = ctx["table"]
        kwargs = {"attempt_timeout": ACLOSE_ATTEMPT_TIMEOUT} if mode == "stream-aclose" else {}
        stream = await table.read_rows_stream(ReadRowsQuery(), **kwargs)
        await anext(stream)
        await anext(stream)
        if mode == "stream-task-cancel":
            await _cancel_pending_read(stream)
        elif mode == "stream-aclose":
            await stream.aclose()
        else:
            await end_stream(stream)
    elif mode.startswith("grpc"):
        table = ctx["table"]
        request = ReadRowsQuery()._to_pb(table)
        call = await table.client._gapic_client.read_rows(request, timeout=30, retry=None)
        await call.read()
        await call.read()
        if mode == "grpc-cancel-idle":
            call.cancel()
        else:
            task = await _wait_in(_call_reader(call))
            if mode == "grpc-task-cancel":
                task.cancel()
            else:
                call.cancel()
            await _finish(task)
    else:
        stream = await ctx["salted"].read_rows_stream(ReadRowsQuery())
        await anext(stream)
        await anext(stream)
        await stream.aclose()


# -- salted-task-cancel: the merge as it was before issue 18 ------------------------


def patch_task_cancel() -> None:
    """Make every fan-out cancel its readers while they wait for a message (the leak)."""
    import saltedtable._async.read_call as _read_call

    async def keep_reading(sources: Any) -> None:
        return None

    _read_call.stop_sources = keep_reading  # type: ignore[attr-defined]


# -- the child: one mode, RSS at each count ------------------------------------------


async def child(
    mode: str, table_id: str, salted_id: str, counts: list[int], warmup: int = 200
) -> None:
    """Run ``mode`` up to each count and print one JSON line per count."""
    import logging

    from google.cloud.bigtable.data import BigtableDataClientAsync

    from saltedtable import SaltedTableAsync, SaltScheme

    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
    warnings.filterwarnings("ignore", category=ResourceWarning)
    logging.basicConfig(level=logging.WARNING)
    async with BigtableDataClientAsync(project=PROJECT) as client:
        table = client.get_table(INSTANCE, table_id)
        salted = SaltedTableAsync(client.get_table(INSTANCE, salted_id), SaltScheme(BUCKETS))
        if mode == "salted-task-cancel":
            patch_task_cancel()
        ctx = {"table": table, "salted": salted}
        for _ in range(warmup):  # warm up: channel, pools, caches
            await scan_once(mode, ctx)
        if mode == "stream-aclose":
            await asyncio.sleep(ACLOSE_ATTEMPT_TIMEOUT + 1)
        done = 0
        started = time.monotonic()
        for count in counts:
            while done < count:
                await scan_once(mode, ctx)
                done += 1
            line = {"mode": mode, "count": count, "rss": rss()}
            line["seconds"] = round(time.monotonic() - started, 1)
            if mode == "stream-aclose":
                # Abandoned RPCs still stream into the client; measure again once they are over.
                await asyncio.sleep(ACLOSE_ATTEMPT_TIMEOUT + 1)
                line["rss_after_deadline"] = rss()
            print(json.dumps(line), flush=True)
        await salted.close()


SERVICE_VARIANTS: Final = {
    "task-cancel": "readers cancelled while they wait (before)",
    "checkout": "this checkout",
}


# -- the service: rounds of clients that read two lines and hang up ------------------


def serve(port: int, salted_id: str, variant: str) -> None:
    """Run examples/service.py over the salted table; SIGUSR1 collects garbage and trims."""
    import logging
    import signal

    import uvicorn

    # examples/service.py (with its service_http.py) is one folder up from this tool.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import service  # examples/service.py

    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
    # asyncio warns for every write to a socket whose client has hung up: that is the test.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    signal.signal(signal.SIGUSR1, lambda *_: rss())
    settings = service.Settings(
        project=PROJECT, instance=INSTANCE, table=salted_id, buckets=BUCKETS
    )
    if variant == "task-cancel":
        patch_task_cancel()
    app = service.create_app(settings)
    uvicorn.Server(service.uvicorn_config(app, port=port, log_level="warning")).run()


async def _hang_ups(port: int, clients: int, concurrency: int) -> int:
    """``clients`` full-table scans that each read two NDJSON lines, then disconnect."""
    import httpx

    got = 0
    limit = asyncio.Semaphore(concurrency)

    async def one(http: httpx.AsyncClient) -> None:
        nonlocal got
        async with limit, http.stream("GET", "/scan", params={"prefix": ""}) as response:
            lines = 0
            async for _ in response.aiter_lines():
                lines += 1
                if lines == 2:
                    break
            got += lines == 2

    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=60, trust_env=False
    ) as http:
        await asyncio.gather(*(one(http) for _ in range(clients)))
    return got


def _server_rss(pid: int) -> int:
    os.kill(pid, signal_usr1())
    time.sleep(1.0)
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def signal_usr1() -> int:
    import signal

    return int(signal.SIGUSR1)


def service_repro(salted_id: str, rounds: int, clients: int, variant: str) -> list[int]:
    """The server's RSS (after a trim) before and after each round of hang-ups."""
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, __file__, "--serve", str(port), "--tables", f"unused,{salted_id}"]
    server = subprocess.Popen([*command, "--variant", variant])
    try:
        for _ in range(300):
            if server.poll() is not None:
                raise RuntimeError(f"the service exited with status {server.returncode}")
            try:
                httpx.get(f"http://127.0.0.1:{port}/scan?prefix=none", trust_env=False)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        asyncio.run(_hang_ups(port, 100, 50))  # warm up
        time.sleep(1.0)
        sizes = [_server_rss(server.pid)]
        for _ in range(rounds):
            done = asyncio.run(_hang_ups(port, clients, 100))
            if done != clients:
                raise RuntimeError(f"only {done} of {clients} clients got two rows")
            time.sleep(2.0)  # idle, as the issue measured
            sizes.append(_server_rss(server.pid))
        return sizes
    finally:
        server.terminate()
        server.wait(30)


# -- the parent: emulator, tables, one child per mode, a table of results ------------


def load_tables(table_id: str, salted_id: str, rows: int) -> None:
    """Write ``rows`` rows of ~100 bytes into the plain table, and salted into the other."""
    from google.cloud.bigtable.data import BigtableDataClientAsync, RowMutationEntry, SetCell

    from saltedtable import SaltedTableAsync, SaltScheme

    async def load() -> None:
        async with BigtableDataClientAsync(project=PROJECT) as client:
            plain = client.get_table(INSTANCE, table_id)
            salted = SaltedTableAsync.from_client(client, INSTANCE, salted_id, SaltScheme(BUCKETS))
            for lo in range(0, rows, 5000):
                entries = [
                    RowMutationEntry(b"user%06d" % i, SetCell("cf", b"q", b"v" * 100))
                    for i in range(lo, min(rows, lo + 5000))
                ]
                await plain.bulk_mutate_rows(entries)
                await salted.bulk_mutate_rows(entries)

    asyncio.run(load())


def _mb(value: int) -> str:
    return f"{value / 2**20:7.1f}"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments; run as the parent, or as one mode's child."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument("--counts", default="0,1000,5000,20000", help="comma-separated counts")
    parser.add_argument("--quick", action="store_true", help="counts 0,500,2000")
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--leaky-max", type=int, default=5000, help=f"most scans for {', '.join(LEAKY)}"
    )
    parser.add_argument(
        "--service",
        action="store_true",
        help="instead of the modes: the example service under rounds of clients that hang up",
    )
    parser.add_argument("--rounds", type=int, default=5, help="--service: rounds")
    parser.add_argument("--clients", type=int, default=1000, help="--service: clients a round")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=200, help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="checkout", help=argparse.SUPPRESS)
    parser.add_argument("--tables", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = [int(c) for c in ("0,500,2000" if args.quick else args.counts).split(",")]

    if args.child:
        table_id, salted_id = args.tables.split(",")
        asyncio.run(child(args.child, table_id, salted_id, counts, args.warmup))
        return 0
    if args.serve:
        serve(args.serve, args.tables.split(",")[1], args.variant)
        return 0

    from saltedtable.testing import EMULATOR_HOST_ENV, create_table, delete_table, start_emulator

    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {', '.join(MODES)}")
    suffix = uuid.uuid4().hex[:8]
    table_id, salted_id = f"leak-{suffix}", f"leak-salted-{suffix}"
    results: list[dict[str, Any]] = []
    with ExitStack() as stack:
        address = os.environ.get(EMULATOR_HOST_ENV)
        if not address:
            emulator = stack.enter_context(start_emulator())
            address = emulator.address
            os.environ[EMULATOR_HOST_ENV] = address
        warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
        for name in (table_id, salted_id):
            create_table(address, name, ["cf"])
            stack.callback(delete_table, address, name, missing_ok=True)
        load_tables(table_id, salted_id, args.rows)
        print(
            f"grpcio {_version('grpcio')}, google-cloud-bigtable "
            f"{_version('google-cloud-bigtable')}, {args.rows} rows, counts {counts}"
        )
        if args.service:
            print(
                f"examples/service.py server RSS (MB, after a trim): warm, then after each "
                f"round of {args.clients} clients that read 2 lines and hang up"
            )
            for variant, name in SERVICE_VARIANTS.items():
                sizes = service_repro(salted_id, args.rounds, args.clients, variant)
                print(f"{name:22} " + " ".join(_mb(x) for x in sizes), flush=True)
                results.append({"service": name, "rss": sizes})
            modes = []
        print(f"{'mode':22} " + " ".join(f"{c:>7}" for c in counts) + "   KB/scan")
        for mode in modes:
            mode_counts = [c for c in counts if mode not in LEAKY or c <= args.leaky_max]
            command = [
                sys.executable,
                __file__,
                "--child",
                mode,
                "--tables",
                f"{table_id},{salted_id}",
                "--counts",
                ",".join(map(str, mode_counts)),
            ]
            proc = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or len(lines) != len(mode_counts):
                print(f"{mode:22} failed:\n{proc.stderr[-2000:]}")
                continue
            results.extend(lines)
            first, last = lines[0], lines[-1]
            per_scan = (last["rss"] - first["rss"]) / max(1, last["count"] - first["count"])
            row = " ".join(_mb(x["rss"]) for x in lines)
            row += "        -" * (len(counts) - len(lines))
            extra = ""
            if "rss_after_deadline" in last:
                extra = f"   (after the deadline: {_mb(last['rss_after_deadline']).strip()} MB)"
            print(f"{mode:22} {row}   {per_scan / 1024:7.2f}{extra}", flush=True)
        print("RSS in MB after each count of stopped scans; KB/scan: growth from first to last.")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main())
