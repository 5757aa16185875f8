"""A fault-injecting TCP proxy for tests, loopback only.

Put it between a client and a server (typically the Bigtable emulator) and break the
connections on demand, while the client is in the middle of something::

    async with FaultProxy("127.0.0.1", emulator.port) as proxy:
        os.environ["BIGTABLE_EMULATOR_HOST"] = proxy.address  # before creating the client
        proxy.reset_after(200_000)   # RST every connection after 200 kB more server->client
        proxy.stall(2.0)             # forward nothing for 2 s (both ways)
        proxy.refuse()               # reset new connections as soon as they are accepted
        proxy.clear()                # back to a plain proxy
        print(proxy.stats)           # accepted, refused, bytes each way, resets, ...

Faults, all switchable at run time from the event loop the proxy runs on:

``latency``
    Seconds to wait before forwarding each chunk, in both directions.
``reset_all()`` / ``reset_after(n)``
    Abort every current connection with a TCP RST (``SO_LINGER`` 0, then
    ``transport.abort()``), now or once ``n`` more bytes went server->client
    (``direction="up"``: client->server). The chunk that crosses ``n`` is cut there,
    so the peer sees a message cut mid-way.
``drop_all()`` / ``drop_after(n)``
    The same with an orderly close (FIN) instead of a reset.
``stall(seconds)`` / ``stall_after(n, seconds)`` / ``release()``
    Stop forwarding (connections stay open) for ``seconds``, or until ``release()``.
``refuse()``
    Accept new connections and reset them at once: the client sees its connection
    attempt fail. Current connections are not touched.

The proxy only listens on and connects to loopback addresses. As a script it runs
until ``--duration`` ends or ``quit`` is typed, and reads fault commands from stdin
(``help`` lists them)::

    python emulator/faultproxy.py --target 127.0.0.1:8086 --port 8087 --duration 600
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import socket
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, final

__all__ = ["FaultProxy", "ProxyStats", "main"]

Action = Literal["reset", "drop", "stall"]
Direction = Literal["down", "up"]

#: Bytes read per chunk; also the granularity of ``latency``.
DEFAULT_CHUNK: Final = 64 * 1024
_LINGER_RST: Final = struct.pack("ii", 1, 0)


def _loopback(host: str) -> str:
    """``host`` as a loopback IP address; anything that leaves the machine is refused."""
    name = "127.0.0.1" if host == "localhost" else host
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        raise ValueError(f"faultproxy is loopback only: {host!r} is not an IP address") from None
    if not address.is_loopback:
        raise ValueError(f"faultproxy is loopback only: {host!r} is not a loopback address")
    return name


@final
@dataclass(frozen=True, slots=True)
class ProxyStats:
    """Counters since the proxy started (a snapshot; see :attr:`FaultProxy.stats`)."""

    accepted: int = 0
    """Connections accepted and forwarded (refused ones not included)."""
    refused: int = 0
    """Connections reset on arrival because of :meth:`FaultProxy.refuse`."""
    upstream_failures: int = 0
    """Connections reset on arrival because the target did not accept ours."""
    active: int = 0
    """Connections open now."""
    bytes_up: int = 0
    """Bytes forwarded client->server."""
    bytes_down: int = 0
    """Bytes forwarded server->client."""
    resets: int = 0
    """Connections aborted with RST by a reset fault (refusals not included)."""
    drops: int = 0
    """Connections closed by a drop fault."""
    stalls: int = 0
    """Times forwarding was stalled."""


@dataclass(slots=True)
class _Wire:
    """A fault armed to fire after ``remaining`` more bytes one way (``down``: server->client)."""

    action: Action
    down: bool
    after: int
    remaining: int
    times: int
    stall_seconds: float | None


@final
class _Connection:
    """One client connection and the proxy's own connection to the target."""

    __slots__ = ("client", "closed", "pumps", "upstream")

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.pumps: list[asyncio.Task[None]] = []
        self.closed = False

    def abort(self) -> None:
        """Reset both sides (RST) and stop forwarding."""
        if self.closed:
            return
        self.closed = True
        for writer in (self.client, self.upstream):
            _rst(writer)
        for pump in self.pumps:
            pump.cancel()

    def close(self) -> None:
        """Close both sides in order (FIN) and stop forwarding."""
        if self.closed:
            return
        self.closed = True
        for writer in (self.client, self.upstream):
            writer.close()
        for pump in self.pumps:
            pump.cancel()


def _rst(writer: asyncio.StreamWriter) -> None:
    """Abort a connection so that the peer gets a TCP RST, not an orderly FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


@final
class FaultProxy:
    """An asyncio TCP proxy from ``127.0.0.1:port`` to a loopback target, with faults.

    Every method is meant to be called from the event loop the proxy runs on.

    Args:
        target_host: Loopback address of the server to forward to.
        target_port: Its port.
        host: Loopback address to listen on.
        port: Port to listen on; 0 picks a free one (see :attr:`port` after :meth:`start`).
        chunk_size: Largest read per chunk.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.target_host = _loopback(target_host)
        self.target_port = target_port
        self.host = _loopback(host)
        self._requested_port = port
        self._chunk = chunk_size
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stats = ProxyStats()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._release_timer: asyncio.TimerHandle | None = None
        self._wires: list[_Wire] = []
        self._latency = 0.0
        self._refusing = False
        self._closed = False

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> FaultProxy:
        """Start listening; returns the proxy."""
        if self._server is not None:
            raise RuntimeError("the proxy is already started")
        if self._closed:
            raise RuntimeError("the proxy is closed")
        self._server = await asyncio.start_server(
            self._accept, self.host, self._requested_port, reuse_address=True
        )
        return self

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def address(self) -> str:
        """``host:port`` to connect to (e.g. the value of ``BIGTABLE_EMULATOR_HOST``)."""
        return f"{self.host}:{self.port}"

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        """The proxy's own running tasks (so leak checks can leave them out)."""
        return frozenset(self._tasks | {p for c in self._connections for p in c.pumps})

    async def aclose(self) -> None:
        """Stop listening, reset every connection and wait until every task is gone."""
        self._closed = True
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        self._flowing.set()
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.abort()
        if self._tasks:
            # Handlers end once their connection is reset; one still connecting
            # to the target is cancelled if it takes longer than that.
            _, pending = await asyncio.wait(list(self._tasks), timeout=5)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FaultProxy:
        if self._server is None:
            await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- faults ---------------------------------------------------------------

    @property
    def stats(self) -> ProxyStats:
        """The counters now."""
        return replace(self._stats, active=len(self._connections))

    @property
    def latency(self) -> float:
        """Seconds added before each forwarded chunk (both directions)."""
        return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, got {seconds}")
        self._latency = seconds

    @property
    def stalled(self) -> bool:
        """Whether forwarding is stalled now."""
        return not self._flowing.is_set()

    def reset_all(self) -> int:
        """Abort every current connection with RST; returns how many."""
        conns = list(self._connections)
        for conn in conns:
            conn.abort()
        self._count(resets=len(conns))
        return len(conns)

    def drop_all(self) -> int:
        """Close every current connection in order (FIN); returns how many."""
        conns = list(self._connections)
        for conn in conns:
            conn.close()
        self._count(drops=len(conns))
        return len(conns)

    def stall(self, seconds: float | None = None) -> None:
        """Stop forwarding in both directions, for ``seconds`` or until :meth:`release`."""
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        if self._flowing.is_set():
            self._count(stalls=1)
        self._flowing.clear()
        if seconds is not None:
            self._release_timer = asyncio.get_running_loop().call_later(seconds, self.release)

    def release(self) -> None:
        """End a stall."""
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        self._flowing.set()

    def refuse(self, on: bool = True) -> None:
        """Reset new connections on arrival (``on``), or accept them again."""
        self._refusing = on

    def reset_after(self, nbytes: int, *, times: int = 1, direction: Direction = "down") -> None:
        """Reset every connection once ``nbytes`` more bytes went server->client.

        With ``times`` > 1 the fault re-arms itself after firing, counting ``nbytes`` again.
        ``direction="up"`` counts client->server bytes instead (to cut a large request).
        """
        self._arm("reset", nbytes, times, None, direction)

    def drop_after(self, nbytes: int, *, times: int = 1, direction: Direction = "down") -> None:
        """Close every connection (FIN) once ``nbytes`` more bytes went that way."""
        self._arm("drop", nbytes, times, None, direction)

    def stall_after(
        self, nbytes: int, seconds: float | None = None, *, direction: Direction = "down"
    ) -> None:
        """Stall (see :meth:`stall`) once ``nbytes`` more bytes went that way."""
        self._arm("stall", nbytes, 1, seconds, direction)

    def clear(self) -> None:
        """Remove every fault: no latency, no armed faults, no refusal, no stall."""
        self._latency = 0.0
        self._wires.clear()
        self._refusing = False
        self.release()

    def _arm(
        self,
        action: Action,
        nbytes: int,
        times: int,
        seconds: float | None,
        direction: Direction,
    ) -> None:
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        if direction not in ("down", "up"):
            raise ValueError(f"direction must be 'down' or 'up', got {direction!r}")
        self._wires.append(_Wire(action, direction == "down", nbytes, nbytes, times, seconds))

    def _count(self, **deltas: int) -> None:
        self._stats = replace(
            self._stats, **{k: getattr(self._stats, k) + v for k, v in deltas.items()}
        )

    # -- forwarding -----------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            # Only aclose() cancels a handler. asyncio logs a cancelled
            # client_connected_cb as an error, so end it quietly instead.
            if not self._closed:
                raise
        finally:
            self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closed or self._refusing:
            self._count(refused=1)
            _rst(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            self._count(upstream_failures=1)
            _rst(writer)
            return
        except asyncio.CancelledError:
            _rst(writer)
            raise
        conn = _Connection(writer, up_writer)
        self._connections.add(conn)
        self._count(accepted=1)
        loop = asyncio.get_running_loop()
        conn.pumps = [
            loop.create_task(self._pump(conn, reader, up_writer, down=False)),
            loop.create_task(self._pump(conn, up_reader, writer, down=True)),
        ]
        try:
            await asyncio.wait(conn.pumps)
        except asyncio.CancelledError:
            conn.abort()
            await asyncio.wait(conn.pumps)
            raise
        finally:
            self._connections.discard(conn)
            if not conn.closed:
                conn.closed = True
                writer.close()
                up_writer.close()

    async def _pump(
        self,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        down: bool,
    ) -> None:
        try:
            while True:
                data = await reader.read(self._chunk)
                if not data:
                    # Half-close: pass the EOF on, keep the other direction going.
                    if not conn.closed and writer.can_write_eof():
                        writer.write_eof()
                    return
                if self._latency:
                    await asyncio.sleep(self._latency)
                while data:
                    await self._flowing.wait()
                    if conn.closed:
                        return
                    # An armed fault may cut the chunk: send up to the cut, fire, go on.
                    piece, wire = self._trip(data, down)
                    if piece:
                        writer.write(piece)
                        if down:
                            self._count(bytes_down=len(piece))
                        else:
                            self._count(bytes_up=len(piece))
                    data = data[len(piece) :]
                    if wire is not None:
                        self._fire(wire)
                        if conn.closed:
                            return
                await writer.drain()
        except OSError:
            # One side went away abruptly: pass that on to the other side as a reset.
            conn.abort()

    def _trip(self, data: bytes, down: bool) -> tuple[bytes, _Wire | None]:
        """Cut ``data`` where the first armed fault fires; return the part to send and it."""
        wires = [w for w in self._wires if w.down == down]
        if not wires:
            return data, None
        first = min(wires, key=lambda w: w.remaining)
        if first.remaining > len(data):
            for w in wires:
                w.remaining -= len(data)
            return data, None
        cut = first.remaining
        for w in wires:
            w.remaining -= cut
        first.times -= 1
        if first.times > 0:
            first.remaining = first.after
        else:
            self._wires.remove(first)
        return data[:cut], first

    def _fire(self, wire: _Wire) -> None:
        if wire.action == "reset":
            self.reset_all()
        elif wire.action == "drop":
            self.drop_all()
        else:
            self.stall(wire.stall_seconds)


# --------------------------------------------------------------------------- script

_HELP: Final = """\
commands: stats | reset | drop | reset-after N [TIMES] | drop-after N [TIMES]
          stall [SECONDS] | stall-after N [SECONDS] | release | refuse on|off
          latency SECONDS | clear | quit"""


def _command(proxy: FaultProxy, line: str) -> str | None:
    """Apply one stdin command; returns the reply, or None to quit."""
    words = line.split()
    if not words:
        return ""
    name, args = words[0], words[1:]
    number = [float(a) for a in args]
    if name == "quit":
        return None
    if name == "stats":
        return str(proxy.stats)
    if name == "reset":
        return f"reset {proxy.reset_all()} connection(s)"
    if name == "drop":
        return f"dropped {proxy.drop_all()} connection(s)"
    if name == "reset-after":
        proxy.reset_after(int(number[0]), times=int(number[1]) if len(number) > 1 else 1)
    elif name == "drop-after":
        proxy.drop_after(int(number[0]), times=int(number[1]) if len(number) > 1 else 1)
    elif name == "stall":
        proxy.stall(number[0] if number else None)
    elif name == "stall-after":
        proxy.stall_after(int(number[0]), number[1] if len(number) > 1 else None)
    elif name == "release":
        proxy.release()
    elif name == "refuse":
        proxy.refuse(args != ["off"])
    elif name == "latency":
        proxy.latency = number[0]
    elif name == "clear":
        proxy.clear()
    else:
        return _HELP
    return "ok"


async def _control(proxy: FaultProxy) -> None:
    """Read commands from stdin until ``quit`` or end of input."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
        )
    except (OSError, ValueError):  # stdin is a regular file or closed: no control
        await asyncio.Event().wait()
        return
    try:
        while line := await reader.readline():
            try:
                reply = _command(proxy, line.decode(errors="replace"))
            except (ValueError, IndexError) as error:
                reply = f"error: {error}\n{_HELP}"
            if reply is None:
                return
            if reply:
                print(reply, flush=True)
        await asyncio.Event().wait()  # stdin closed: keep running until --duration
    finally:
        transport.close()


async def _run(args: argparse.Namespace) -> int:
    host, _, port = args.target.rpartition(":")
    proxy = FaultProxy(host or "127.0.0.1", int(port), port=args.port)
    async with proxy:
        proxy.latency = args.latency
        proxy.refuse(args.refuse)
        if args.reset_after is not None:
            proxy.reset_after(args.reset_after)
        print(f"faultproxy listening on {proxy.address} -> {args.target}", flush=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(args.duration):
                await _control(proxy)
        print(f"faultproxy stopping: {proxy.stats}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy from the command line; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="faultproxy", description=__doc__.split("\n\n")[0], epilog=_HELP
    )
    parser.add_argument("--target", required=True, help="loopback HOST:PORT to forward to")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: free)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per chunk")
    parser.add_argument("--refuse", action="store_true", help="start refusing connections")
    parser.add_argument("--reset-after", type=int, default=None, metavar="N", help="bytes")
    parser.add_argument(
        "--duration", type=float, default=3600.0, help="seconds to run (default: 3600)"
    )
    args = parser.parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
