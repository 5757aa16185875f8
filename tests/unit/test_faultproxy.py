"""emulator/faultproxy.py against a trivial echo server, all on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
PROXY_SCRIPT = REPO / "emulator" / "faultproxy.py"


def load_faultproxy() -> ModuleType:
    """Import emulator/faultproxy.py by path (emulator/ is not a package)."""
    return load_script("faultproxy", PROXY_SCRIPT)


fp = load_faultproxy()


class EchoServer:
    """A loopback TCP server that sends back everything it reads."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[Any]] = set()
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._echo, "127.0.0.1", 0)

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.writers.add(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.write_eof()
        except OSError:
            pass  # the client went away abruptly
        finally:
            writer.close()
            self.handlers.discard(task)
            self.writers.discard(writer)

    def abort_all(self) -> None:
        """Reset every connection from the server's side (RST)."""
        for writer in self.writers:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    async def aclose(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.handlers):
            task.cancel()
        if self.handlers:
            await asyncio.wait(list(self.handlers))
        await self.server.wait_closed()


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    """An echo server on a free loopback port."""
    server = EchoServer()
    await server.start()
    try:
        yield server
    finally:
        await server.aclose()


@pytest.fixture
async def proxy(echo: EchoServer) -> AsyncIterator[Any]:
    """A FaultProxy in front of the echo server, closed (and checked idle) after the test."""
    async with fp.FaultProxy("127.0.0.1", echo.port) as running:
        yield running
    assert not running.tasks


class Client:
    """One connection through the proxy."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def receive(self, n: int, within: float = 5.0) -> bytes:
        async with asyncio.timeout(within):
            return await self.reader.readexactly(n)

    async def read_until_closed(self, within: float = 5.0) -> tuple[bytes, str]:
        """Everything until the connection ends, and how: ``eof`` or ``reset``."""
        got = bytearray()
        async with asyncio.timeout(within):
            try:
                while data := await self.reader.read(65536):
                    got += data
            except ConnectionResetError:
                return bytes(got), "reset"
        return bytes(got), "eof"

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    """Connections opened by a test; closed afterwards."""
    opened: list[Client] = []
    yield opened
    for client in opened:
        await client.close()


async def connect(proxy: Any, clients: list[Client]) -> Client:
    """Open a connection through ``proxy`` and remember it for cleanup."""
    client = await Client.connect(proxy.port)
    clients.append(client)
    return client


def free_port() -> int:
    """A loopback port nobody listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_for(predicate: Any, within: float = 5.0) -> None:
    """Poll ``predicate`` until true (bounded by ``within`` seconds)."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - the counters have no event to wait on
            await asyncio.sleep(0.005)


async def test_forwards_both_ways_and_counts_bytes(proxy: Any, clients: list[Client]) -> None:
    """Bytes go through unchanged in both directions and the counters see every one."""
    client = await connect(proxy, clients)
    payload = bytes(range(256)) * 1000
    await client.send(payload)
    assert await client.receive(len(payload)) == payload
    stats = proxy.stats
    assert (stats.accepted, stats.active, stats.bytes_up, stats.bytes_down) == (
        1,
        1,
        len(payload),
        len(payload),
    )
    assert proxy.address == f"127.0.0.1:{proxy.port}"


async def test_half_close_is_passed_on(proxy: Any, clients: list[Client]) -> None:
    """A client's EOF reaches the server, whose EOF comes back as a clean end of stream."""
    client = await connect(proxy, clients)
    await client.send(b"last words")
    client.writer.write_eof()
    assert await client.read_until_closed() == (b"last words", "eof")
    await wait_for(lambda: proxy.stats.active == 0)


async def test_latency_delays_every_chunk(proxy: Any, clients: list[Client]) -> None:
    """With latency set, a round trip (two forwarded chunks) takes at least twice as long."""
    client = await connect(proxy, clients)
    proxy.latency = 0.1
    start = time.monotonic()
    await client.send(b"ping")
    assert await client.receive(4) == b"ping"
    assert time.monotonic() - start >= 0.2
    proxy.latency = 0.0
    with pytest.raises(ValueError, match="latency"):
        proxy.latency = -1


async def test_reset_all_sends_rst_to_every_connection(proxy: Any, clients: list[Client]) -> None:
    """reset_all() aborts every current connection: the client reads a reset, not EOF."""
    first, second = await connect(proxy, clients), await connect(proxy, clients)
    for client in (first, second):
        await client.send(b"x")
        assert await client.receive(1) == b"x"
    assert proxy.reset_all() == 2
    assert (await first.read_until_closed())[1] == "reset"
    assert (await second.read_until_closed())[1] == "reset"
    assert proxy.stats.resets == 2
    await wait_for(lambda: proxy.stats.active == 0)


@pytest.mark.parametrize("after", [0, 1, 1000, 65536, 100_000])
async def test_reset_after_cuts_the_stream_at_exactly_n_bytes(
    proxy: Any, clients: list[Client], after: int
) -> None:
    """reset_after(n): the client gets exactly n more server->client bytes, then a reset."""
    client = await connect(proxy, clients)
    proxy.reset_after(after)
    await client.send(b"a" * 300_000)
    got, how = await client.read_until_closed()
    assert (len(got), how) == (after, "reset")
    stats = proxy.stats
    assert (stats.bytes_down, stats.resets) == (after, 1)
    # Fired once: a new connection is not reset.
    again = await connect(proxy, clients)
    await again.send(b"b" * 200_000)
    assert await again.receive(200_000) == b"b" * 200_000


async def test_reset_after_rearms_the_given_number_of_times(
    proxy: Any, clients: list[Client]
) -> None:
    """reset_after(n, times=3) resets three connections, each after n bytes of its own."""
    proxy.reset_after(5000, times=3)
    for _ in range(3):
        client = await connect(proxy, clients)
        await client.send(b"c" * 20_000)
        got, how = await client.read_until_closed()
        assert (len(got), how) == (5000, "reset")
    client = await connect(proxy, clients)
    await client.send(b"d" * 20_000)
    assert await client.receive(20_000) == b"d" * 20_000
    assert proxy.stats.resets == 3


async def test_reset_after_upload_counts_client_to_server_bytes(
    proxy: Any, clients: list[Client]
) -> None:
    """reset_after(n, direction="up") forwards exactly n client->server bytes, then resets."""
    client = await connect(proxy, clients)
    proxy.reset_after(7000, direction="up")
    await client.send(b"u" * 5000)
    assert await client.receive(5000) == b"u" * 5000
    await client.send(b"v" * 5000)
    got, how = await client.read_until_closed()
    assert how == "reset"
    assert len(got) <= 2000  # the echo of the forwarded part may not make it back
    assert (proxy.stats.bytes_up, proxy.stats.resets) == (7000, 1)


def test_bad_fault_arguments_are_refused() -> None:
    """Negative byte counts, zero repetitions and unknown directions raise ValueError."""
    proxy = fp.FaultProxy("127.0.0.1", 80)
    with pytest.raises(ValueError, match="nbytes"):
        proxy.reset_after(-1)
    with pytest.raises(ValueError, match="times"):
        proxy.drop_after(10, times=0)
    with pytest.raises(ValueError, match="direction"):
        proxy.stall_after(10, direction="sideways")


async def test_drop_closes_connections_in_order(proxy: Any, clients: list[Client]) -> None:
    """drop_all() and drop_after(n) end connections with FIN: the client reads a clean EOF."""
    client = await connect(proxy, clients)
    await client.send(b"hello")
    assert await client.receive(5) == b"hello"
    assert proxy.drop_all() == 1
    assert await client.read_until_closed() == (b"", "eof")
    other = await connect(proxy, clients)
    proxy.drop_after(3)
    await other.send(b"abcdef")
    assert await other.read_until_closed() == (b"abc", "eof")
    assert proxy.stats.drops == 2


async def test_stall_holds_data_until_release(proxy: Any, clients: list[Client]) -> None:
    """While stalled nothing is forwarded; release() lets the held data through."""
    client = await connect(proxy, clients)
    proxy.stall()
    assert proxy.stalled
    await client.send(b"held")
    with pytest.raises(TimeoutError):
        await client.receive(4, within=0.3)
    assert proxy.stats.bytes_up == 0
    proxy.release()
    assert await client.receive(4) == b"held"
    assert not proxy.stalled


async def test_stall_for_seconds_releases_by_itself(proxy: Any, clients: list[Client]) -> None:
    """stall(t) ends after about t seconds without a release() call."""
    client = await connect(proxy, clients)
    proxy.stall(0.3)
    start = time.monotonic()
    await client.send(b"later")
    assert await client.receive(5) == b"later"
    assert 0.25 <= time.monotonic() - start < 3
    assert proxy.stats.stalls == 1


async def test_stall_after_n_bytes_stops_mid_stream(proxy: Any, clients: list[Client]) -> None:
    """stall_after(n) forwards exactly n server->client bytes, then holds the rest."""
    client = await connect(proxy, clients)
    proxy.stall_after(1500)
    await client.send(b"s" * 4000)
    assert await client.receive(1500) == b"s" * 1500
    with pytest.raises(TimeoutError):
        await client.receive(1, within=0.3)
    proxy.release()
    assert await client.receive(2500) == b"s" * 2500


async def test_refuse_resets_new_connections_only(proxy: Any, clients: list[Client]) -> None:
    """refuse() resets connections on arrival, leaves open ones alone, and can be undone."""
    existing = await connect(proxy, clients)
    proxy.refuse()
    refused = await connect(proxy, clients)
    got, how = await refused.read_until_closed()
    assert (got, how) == (b"", "reset")
    await existing.send(b"still here")
    assert await existing.receive(10) == b"still here"
    proxy.refuse(False)
    fresh = await connect(proxy, clients)
    await fresh.send(b"ok")
    assert await fresh.receive(2) == b"ok"
    assert (proxy.stats.refused, proxy.stats.accepted) == (1, 2)


async def test_clear_removes_every_fault(proxy: Any, clients: list[Client]) -> None:
    """clear() drops latency, armed faults, refusal and a stall at once."""
    proxy.latency = 5
    proxy.reset_after(1)
    proxy.refuse()
    proxy.stall()
    proxy.clear()
    client = await connect(proxy, clients)
    await client.send(b"plain")
    assert await client.receive(5, within=2) == b"plain"
    assert proxy.stats.resets == 0


async def test_target_down_resets_the_client(clients: list[Client]) -> None:
    """When the target refuses, the proxy resets the client's connection and counts it."""
    port = free_port()  # bound and released: nothing listens there now
    async with fp.FaultProxy("127.0.0.1", port) as proxy:
        client = await connect(proxy, clients)
        assert (await client.read_until_closed())[1] in {"reset", "eof"}
        await wait_for(lambda: proxy.stats.upstream_failures == 1)


async def test_server_reset_is_passed_on_as_a_reset(
    echo: EchoServer, clients: list[Client]
) -> None:
    """A server that aborts its connection makes the proxy reset the client's too."""
    async with fp.FaultProxy("127.0.0.1", echo.port) as proxy:
        client = await connect(proxy, clients)
        await client.send(b"x")
        assert await client.receive(1) == b"x"
        echo.abort_all()
        assert (await client.read_until_closed())[1] == "reset"
        await wait_for(lambda: proxy.stats.active == 0)


async def test_aclose_ends_everything_and_stops_listening(
    echo: EchoServer, clients: list[Client]
) -> None:
    """aclose() resets open connections, leaves no task behind and frees the port."""
    before = asyncio.all_tasks()
    proxy = await fp.FaultProxy("127.0.0.1", echo.port).start()
    port = proxy.port
    client = await connect(proxy, clients)
    await client.send(b"x")
    assert await client.receive(1) == b"x"
    proxy.stall()  # a stalled pump must not keep aclose() waiting
    await client.send(b"y")
    await proxy.aclose()
    assert not proxy.tasks
    assert (await client.read_until_closed())[1] == "reset"
    assert asyncio.all_tasks() - before == set()
    with pytest.raises(ConnectionRefusedError):
        await Client.connect(port)
    await proxy.aclose()  # twice is fine


def test_only_loopback_addresses_are_accepted() -> None:
    """Non-loopback targets or listen addresses are refused before anything opens."""
    with pytest.raises(ValueError, match="loopback"):
        fp.FaultProxy("10.0.0.1", 80)
    with pytest.raises(ValueError, match="loopback"):
        fp.FaultProxy("example.com", 80)
    with pytest.raises(ValueError, match="loopback"):
        fp.FaultProxy("127.0.0.1", 80, host="0.0.0.0")
    assert fp.FaultProxy("localhost", 80).target_host == "127.0.0.1"


async def test_runs_as_a_script_with_stdin_commands(echo: EchoServer) -> None:
    """`python emulator/faultproxy.py --target ...` forwards, obeys commands and quits."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PROXY_SCRIPT),
        "--target",
        f"127.0.0.1:{echo.port}",
        "--duration",
        "30",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        async with asyncio.timeout(20):
            banner = (await process.stdout.readline()).decode()
            assert banner.startswith("faultproxy listening on 127.0.0.1:"), banner
            port = int(banner.split()[3].rsplit(":", 1)[1])
            client = await Client.connect(port)
            try:
                await client.send(b"through")
                assert await client.receive(7) == b"through"
                process.stdin.write(b"reset\n")
                assert (await process.stdout.readline()).startswith(b"reset 1 connection")
                assert (await client.read_until_closed())[1] == "reset"
            finally:
                await client.close()
            process.stdin.write(b"bogus\nquit\n")
            rest = (await process.stdout.read()).decode()
            assert "commands:" in rest
            assert "faultproxy stopping" in rest
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
