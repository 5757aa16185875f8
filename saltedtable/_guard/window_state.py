"""The dual-layout window's state in the layout record, and what a table object adopts (pure).

A window is stored beside the record's scheme fields, under the record's
``window`` key (a field :class:`LayoutRecord` keeps as an extra field, so this
module needs no change to the record's own class): the old and new bucket
counts, the start, the stored lead and the state. The record's scheme fields
keep naming the *old* scheme until the window closes; closing rewrites them to
the new bucket count and removes the window.

States, in order (docs/epochs-window.md, "Opening and closing"):

* ``open``: from ``start_micros`` on, writes go to the new layout and reads
  combine both. The start lies at least ``min_lead_s`` after the record was
  written, as an epoch's does, so every object that re-reads the record within
  its refresh sees the window before it starts.
* ``backfilled``: a verify pass found nothing left to copy; the old rows may be
  retired.
* ``closed``: the old rows and the tombstones are gone; the record names the
  new scheme alone.

Each transition is a compare-and-swap of the whole record (the caller sends
the new record only if the stored one is still the one it read).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Final, Literal, final

from .._exceptions import LayoutError
from .._scheme.layout import Layout
from .._scheme.salt import SaltScheme
from .._scheme.window import WINDOW_FAMILY, Window
from .record import LayoutRecord, describe_layout

__all__ = [
    "WINDOW_KEY",
    "WindowState",
    "adopt_window",
    "advance_window",
    "open_window",
    "window_horizon_problem",
    "window_of",
    "without_window",
]

#: The record's key that holds the window.
WINDOW_KEY: Final = "window"
State = Literal["open", "backfilled", "closed"]
_NEXT: Final[dict[str, str]] = {"open": "backfilled", "backfilled": "closed"}


@final
@dataclass(frozen=True, slots=True)
class WindowState:
    """A window as the layout record stores it.

    Attributes:
        old_buckets: The bucket count rows were written with.
        new_buckets: The bucket count writes go to from ``start_micros`` on.
        start_micros: When the window starts (microseconds since the epoch).
        min_lead_s: The least time between storing the window and its start.
        state: ``open`` or ``backfilled`` (a closed window is not stored).
        family: The tombstones' column family.
    """

    old_buckets: int
    new_buckets: int
    start_micros: int
    min_lead_s: float
    state: State = "open"
    family: str = WINDOW_FAMILY

    def __post_init__(self) -> None:
        for name in ("old_buckets", "new_buckets", "start_micros"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise LayoutError(f"a window's {name} must be an int >= 0, got {value!r}")
        if self.state not in _NEXT:
            raise LayoutError(f"a stored window's state is open or backfilled, not {self.state!r}")
        if not isinstance(self.min_lead_s, int | float) or self.min_lead_s < 0:
            raise LayoutError(f"a window's min_lead_s must be >= 0, got {self.min_lead_s!r}")

    def as_dict(self) -> dict[str, Any]:
        """The JSON object stored under the record's ``window`` key."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, value: object) -> WindowState:
        """A window from its stored JSON object.

        Raises:
            LayoutError: It is not a window this release wrote.
        """
        if not isinstance(value, dict):
            raise LayoutError(f"the layout record's window is {value!r}, not an object")
        try:
            return cls(**value)
        except TypeError as exc:
            raise LayoutError(f"the layout record's window {value!r}: {exc}") from exc

    def window(self, old: SaltScheme) -> Window:
        """The :class:`Window` of this state, given the old scheme the record names."""
        if old.buckets != self.old_buckets:
            raise LayoutError(
                f"the window moves rows from {self.old_buckets} buckets, but the scheme "
                f"given has {old.buckets}"
            )
        new = dataclasses.replace(old, buckets=self.new_buckets)
        return Window(old, new, self.family)

    def mode_at(self, now_micros: int) -> Literal["old", "window"]:
        """How an object that read this state writes at ``now_micros``.

        Before the start: the old layout alone; from the start: the window.
        """
        return "old" if now_micros < self.start_micros else "window"


def window_of(record: LayoutRecord) -> WindowState | None:
    """The window stored in ``record``, or None."""
    for name, text in record.extra:
        if name == WINDOW_KEY:
            return WindowState.from_dict(json.loads(text))
    return None


def without_window(record: LayoutRecord) -> LayoutRecord:
    """``record`` without its window (what a table object of the old scheme compares)."""
    return _with(record, None)


def _with(record: LayoutRecord, state: WindowState | None) -> LayoutRecord:
    extra = tuple((k, v) for k, v in record.extra if k != WINDOW_KEY)
    if state is not None:
        extra = (*extra, (WINDOW_KEY, json.dumps(state.as_dict(), sort_keys=True)))
    return dataclasses.replace(record, extra=tuple(sorted(extra)))


def open_window(
    record: LayoutRecord,
    *,
    new_buckets: int,
    start_micros: int,
    now_micros: int,
    min_lead_s: float,
    family: str = WINDOW_FAMILY,
) -> LayoutRecord:
    """The record with a window opening at ``start_micros``.

    Raises:
        LayoutError: The record has a cutoff, epochs, a migration or a window
            already; the bucket count does not change; or the start is sooner
            than ``now_micros`` plus the lead (the error names the earliest).
    """
    if record.cutoff is not None or record.epochs is not None or record.migration is not None:
        raise LayoutError(
            "a resalt window opens on a table with one salt scheme (no cutoff, epochs or "
            "migration in its layout record)"
        )
    if window_of(record) is not None:
        raise LayoutError("the layout record already holds a window: close it first")
    if new_buckets == record.buckets:
        raise LayoutError(f"a resalt window needs a new bucket count; the table has {new_buckets}")
    earliest = now_micros + round(min_lead_s * 1_000_000)
    if start_micros < earliest:
        raise LayoutError(
            f"a window must start at least {min_lead_s} s after it is stored, so that every "
            f"table object reads it first: the earliest start is {earliest} µs since the epoch"
        )
    state = WindowState(record.buckets, new_buckets, start_micros, min_lead_s, "open", family)
    return _with(record, state)


def advance_window(record: LayoutRecord, to: State) -> LayoutRecord:
    """The record with its window moved to the next state (``backfilled``, then ``closed``).

    Closing names the new bucket count in the record and removes the window.

    Raises:
        LayoutError: No window, or ``to`` is not the state after the stored one.
    """
    state = window_of(record)
    if state is None:
        raise LayoutError("the layout record holds no window")
    if _NEXT[state.state] != to:
        raise LayoutError(
            f"the window is {state.state}: its next state is {_NEXT[state.state]}, not {to}"
        )
    if to == "closed":
        return dataclasses.replace(_with(record, None), buckets=state.new_buckets)
    return _with(record, dataclasses.replace(state, state=to))


def adopt_window(
    layout: Layout, held: WindowState | None, stored: LayoutRecord
) -> tuple[WindowState | None, Layout, LayoutRecord] | None:
    """What a table object adopts from a stored record that opened, advanced or closed a window.

    Args:
        layout: The object's layout: the window's old scheme, alone (a layout
            with a cutoff or epochs never follows a window).
        held: The window the object read last (None: none).
        stored: The record just read.

    Returns:
        The window (None once it closed), the layout to use and the record the
        object now agrees with; None when ``stored`` is not this object's
        record with a window opened, advanced or closed (the guard then
        compares and refuses it as any other record).
    """
    if layout.cutoff is not None or layout.epochs is not None:
        return None
    own = describe_layout(layout.scheme)
    state = window_of(stored)
    if state is not None:
        if state.old_buckets != layout.scheme.buckets or _with(stored, None).differences(own):
            return None
        return state, layout, _with(own, state)
    if held is None:
        return None
    # Closed: the record names the new bucket count and no window.
    new = Layout(dataclasses.replace(layout.scheme, buckets=held.new_buckets))
    record = describe_layout(new.scheme)
    if stored.differences(record):
        return None
    return None, new, record


def window_horizon_problem(
    state: WindowState, good_wall: float | None, now: float, name: str
) -> str | None:
    """Why an object in ``state`` may not write now (None: it may).

    ``good_wall`` is the wall clock (seconds) of its last successful read of
    the record; a window may move on (close) at any time, and a writer that
    has not read the record within the stored lead may have missed it.
    """
    if good_wall is None or now < good_wall + state.min_lead_s:
        return None
    return (
        f"{name} holds a resalt window, and this table object last read its layout record "
        f"{now - good_wall:.0f} s ago, longer than the window's lead of {state.min_lead_s:g} s: "
        "the window may have moved on unseen, so the write is refused. The next operation "
        "reads the record again; retry it"
    )
