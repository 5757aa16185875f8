"""What a parity scenario is made of: steps on a table, as plain data.

A :class:`Scenario` is a short program of :data:`Step` values. A driver
(:mod:`tests.parity.drivers`) runs it against one table and records an
:data:`Observation` per step; the test compares the plain table's observations with
the salted table's. Nothing here does I/O, so a new driver (the sync table) reuses
every scenario as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from google.cloud.bigtable.data import RowMutationEntry

from saltedtable import SaltScheme

#: The salted table's scheme unless a scenario names another.
DEFAULT_SCHEME = SaltScheme(8)

#: What a driver records for one step: ``("ok", value)``, ``("raised", phase, error)``
#: and, for streams, ``("rows", [...])`` before the end.
Observation = tuple[Any, ...]


@dataclass(frozen=True)
class Call:
    """Call a public table method with these arguments.

    A method whose name ends in ``_stream`` returns a stream: the driver awaits the call
    (the "call" phase), then takes rows (the "iterate" phase). With ``take`` it leaves
    after that many rows, closes the stream the documented way, and asks for one more
    row (which must end the stream).
    """

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    take: int | None = None


@dataclass(frozen=True)
class Attr:
    """Read a public attribute of the table."""

    name: str


@dataclass(frozen=True)
class SetAttr:
    """Assign a public attribute of the table (the defaults are writable on TableAsync)."""

    name: str
    value: Any


@dataclass(frozen=True)
class Append:
    """``batcher.append(entry)``."""

    entry: Any


@dataclass(frozen=True)
class BatcherClose:
    """``batcher.close()``."""


@dataclass(frozen=True)
class BatcherClosed:
    """Read ``batcher.closed``."""


@dataclass(frozen=True)
class Pause:
    """Let the event loop (and the batcher's timer and flushes) run for a while."""

    seconds: float


@dataclass(frozen=True)
class Contents:
    """Record every row the table holds now (read independently of the flavour)."""


BatchStep = Append | BatcherClose | BatcherClosed | Pause | Contents


@dataclass(frozen=True)
class Batch:
    """Open ``mutations_batcher(**kwargs)`` and run ``steps`` on it.

    ``context``: use it as a context manager (``async with`` / ``with``) around the
    steps, as the client's documentation shows; else the steps close it themselves.
    """

    kwargs: Mapping[str, Any] = field(default_factory=dict)
    steps: tuple[BatchStep, ...] = ()
    context: bool = False


@dataclass(frozen=True)
class Close:
    """``table.close()``."""


@dataclass(frozen=True)
class Within:
    """Run ``steps`` inside ``async with table`` / ``with table``."""

    steps: tuple[Step, ...]


Step = Call | Attr | SetAttr | Batch | Close | Within | Contents | Pause

#: A documented difference: given the plain and the salted observations, fails unless
#: the two differ exactly as the docs say.
Deliberate = Callable[[list[Observation], list[Observation]], None]


@dataclass(frozen=True)
class Scenario:
    """Steps run against a plain table and a salted table holding the same rows.

    Attributes:
        id: The test id.
        steps: What to do, in order.
        seed: Rows written to both tables first (logical keys, fixed timestamps).
        families: Column families of both tables.
        table: ``"own"``: a fresh table each; ``"missing"``: a table id that does not exist.
        scheme: The salted table's scheme.
        table_kwargs: Passed to ``client.get_table`` for both tables.
        contents: Compare both tables' rows after the steps (every scenario that writes).
        samples: Results are ``sample_row_keys`` samples: compare their shape only
            (a documented difference: the salted table's are estimates).
        server_time: Cells get server timestamps (read-modify-write): leave them out.
        latency: Seconds a fault proxy between the client and the emulator waits before
            passing on each chunk: deadlines short of it expire on both tables alike
            (the emulator answers too fast for a tiny deadline to expire reliably).
        deliberate: Set for a documented difference; checks it instead of equality.
        known: A difference that is a defect not fixed yet: the reason, and the test
            is expected to fail (strictly: once fixed, the mark must go).
    """

    id: str
    steps: tuple[Step, ...]
    seed: tuple[RowMutationEntry, ...] = ()
    families: tuple[str, ...] = ("cf", "cg")
    table: Literal["own", "missing"] = "own"
    scheme: SaltScheme = DEFAULT_SCHEME
    table_kwargs: Mapping[str, Any] = field(default_factory=dict)
    contents: bool = False
    samples: bool = False
    server_time: bool = False
    latency: float = 0.0
    deliberate: Deliberate | None = None
    known: str | None = None

    def objects(self) -> list[Any]:
        """Every argument object the steps pass (for identity checks on what comes back)."""
        found: list[Any] = []

        def walk(steps: tuple[Any, ...]) -> None:
            for step in steps:
                if isinstance(step, Call):
                    for arg in (*step.args, *step.kwargs.values()):
                        found.append(arg)
                        if isinstance(arg, list | tuple):
                            found.extend(arg)
                elif isinstance(step, Append):
                    found.append(step.entry)
                elif isinstance(step, Batch | Within):
                    walk(step.steps)

        walk(self.steps)
        return found
