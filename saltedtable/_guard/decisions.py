"""The scheme guard: check a table's stored layout record, store it, sample the rows.

:class:`~.._async.guard.TableGuard` (async, and the sync ``SyncTableGuard``
generated from it) does the I/O for one table object around the decisions of
:class:`GuardCore` and the pure rules of ``record``: it reads the record on
the object's first operation (one request per object lifetime; concurrent
first operations share it), refuses a different layout with
:class:`~saltedtable.SchemeMismatchError`, and, when the table has no record
yet, stores one with the first write that names a column family. The record
is created only if the row is still empty (a conditional mutation), so two
services starting on a new table at once agree on one record. No record is
stored, nor replaced by an override, before a sample of the rows fits it.

:meth:`~.._async.guard.TableGuard.check_layout` samples the key space (the
queries: :func:`sample_queries`; the verdict: :func:`layout_offenders`) and
refuses rows that do not fit the layout (a migration's copies and legacy rows
are expected in the states ``migration`` describes).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Generator, Sequence
from time import time as wall_clock
from typing import Any, Final

from google.api_core.exceptions import (
    InvalidArgument,
    NotFound,
    Unknown,
)
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, Mutation, SetCell
from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    ColumnQualifierRegexFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from .._contracts import GuardTimeouts, OperationTimeout
from .._exceptions import LayoutError, RecordMissingError, SchemeMismatchError, WindowError
from .._read.plan import PageCursor, SubQuery
from .._read.timeouts import GuardTime, deadline_exceeded
from .._scheme.hot import HotLayout
from .._scheme.layout import Layout
from .._scheme.ranges import KeyRange
from .._scheme.salt import SCHEME_ROW_KEY
from .families import RECORD_FAMILY, Placement, TableSchema, place_record, record_family_problem
from .hot_record import hot_layout_of, placed_by_hot, with_hot, without_hot
from .migration import tolerates_copies, tolerates_legacy_rows
from .record import (
    DEFAULT_RECORD_REFRESH,
    SCHEME_QUALIFIER,
    LayoutRecord,
    decode_layout,
    describe_layout,
    encode_layout,
    family_of,
    guard_action,
    newest_record_cell,
    open_differences,
    record_of_row,
)
from .resalt import adoption, beyond_horizon, horizon_error, lead_problem, refresh_problem
from .window_state import (
    WINDOW_KEY,
    WindowState,
    adopt_window,
    window_horizon_problem,
    window_of,
)

__all__ = [
    "DEFAULT_RECORD_REFRESH",
    "RECORD_ONLY",
    "SCHEME_QUALIFIER",
    "SCHEME_ROW_KEY",
    "GuardCore",
    "SchemeMismatchError",
    "decode_layout",
    "describe_layout",
    "encode_layout",
    "family_of",
    "guard_action",
    "layout_offenders",
    "open_differences",
    "operation_only",
    "record_of_row",
]


def operation_only(timeouts: GuardTimeouts) -> OperationTimeout:
    # check_and_mutate_row takes an operation timeout only.
    if "operation_timeout" in timeouts:
        return {"operation_timeout": timeouts["operation_timeout"]}
    return {}


_log = logging.getLogger("saltedtable.guard")


#: The record's own cell, latest version only.
RECORD_ONLY: Final = RowFilterChain(
    [ColumnQualifierRegexFilter(SCHEME_QUALIFIER), CellsColumnLimitFilter(1)]
)

#: Keys only: what the layout sampling needs of each row.
KEYS_ONLY: Final = RowFilterChain([CellsRowLimitFilter(1), StripValueTransformerFilter(True)])


#: The most requests a layout sample sends into the salt prefixes. With more
#: buckets than this, each request covers a run of neighbouring buckets (its
#: first rows then come from the lowest of them that holds rows), so a sample
#: costs at most this many requests plus one for the rest of the key space.
SAMPLE_REQUESTS: Final = 16

#: Rows each request of the sample taken before a record is stored reads.
STORE_SAMPLE_ROWS: Final = 100


def _sample_runs(layout: Layout) -> list[tuple[KeyRange, ...]]:
    """The salt prefix ranges in key order, cut into at most :data:`SAMPLE_REQUESTS` runs."""
    holes = [KeyRange(start, True, end, False) for start, end in layout.salted_holes()]
    n = len(holes)
    runs = min(n, SAMPLE_REQUESTS)
    return [tuple(holes[i * n // runs : (i + 1) * n // runs]) for i in range(runs)]


def sample_queries(
    layout: Layout, sample_rows: int, stored: LayoutRecord | None = None
) -> list[ReadRowsQuery]:
    """The reads :func:`layout_offenders` judges: the first rows of the salt prefixes, and beyond.

    One request per bucket up to :data:`SAMPLE_REQUESTS` buckets; with more,
    one per run of neighbouring buckets (every bucket lies in one). Each reads
    up to ``sample_rows`` keys; one more request reads the key space outside
    every prefix. So a sample costs at most ``SAMPLE_REQUESTS + 1`` requests
    and ``(SAMPLE_REQUESTS + 1) * sample_rows`` keys, whatever the bucket count.
    """
    queries = []
    for ranges in _sample_runs(layout):
        query = PageCursor(SubQuery(None, b"", (), ranges, KEYS_ONLY)).next_query(sample_rows)
        assert query is not None  # (a run holds at least one range)
        queries.append(query)
    if layout.cutoff is None and tolerates_legacy_rows(stored):
        return queries  # a migration's cut-over: the legacy rows are still being retired
    # Rows outside every salt prefix: the legacy side of a cutoff layout, and
    # otherwise rows this scheme never writes (unsalted data, or another bucket
    # count: 16 buckets write "07-", 8 write "7-").
    outside = PageCursor(SubQuery(None, b"", (), layout.legacy_gaps(), KEYS_ONLY))
    query = outside.next_query(sample_rows)
    if query is not None:
        queries.append(query)
    return queries


def layout_offenders(
    layout: Layout,
    samples: Sequence[Sequence[bytes]],
    stored: LayoutRecord | None = None,
    hot: HotLayout | None = None,
) -> list[str]:
    """Why sampled keys do not fit the layout (empty: they all fit).

    ``samples`` holds the keys each query of :func:`sample_queries` returned,
    in order; ``stored`` is the table's record (a migration in progress
    expects copies of legacy rows in the buckets); ``hot``: the hot lists, whose
    rows live outside the bucket the scheme computes (:func:`placed_by_hot`).
    """
    offenders: list[str] = []
    prefixes = len(_sample_runs(layout))  # the first queries read inside the prefixes
    copies = tolerates_copies(stored)
    # In a window, rows of the new bucket count are expected too.
    window = None if stored is None else window_of(stored)
    new = None
    if window is not None and layout.cutoff is None and layout.epochs is None:
        new = Layout(dataclasses.replace(layout.scheme, buckets=window.new_buckets))
    for i, keys in enumerate(samples):
        for key in keys:
            if new is not None and new.misplaced(key) is None:
                continue
            if i < prefixes:
                if hot is not None and placed_by_hot(hot, key):
                    continue
                problem = layout.misplaced(key, copies=copies)
            else:
                problem = layout.unexpected_outside(key)
            if problem is not None:
                offenders.append(problem)
    return offenders


def layout_error(
    layout: Layout, offenders: Sequence[str], *, refused: str = "", examples: int = 5
) -> LayoutError:
    """The error for sampled rows that do not fit the layout (``refused``: what was not done)."""
    # One example a line, each ended so that the message still reads when a CLI folds
    # it onto one line.
    shown = ";\n  ".join(offenders[:examples])
    cutoff = "" if layout.cutoff is None else " with " + repr(layout.cutoff)
    if layout.epochs is not None:
        cutoff = f" with epochs ({layout.epochs})"
    return LayoutError(
        f"{refused}{len(offenders)} sampled row(s) do not fit the layout of "
        f"{layout.scheme}{cutoff}, e.g.\n  {shown}.\nIf these are older unsalted keys that "
        "look salted, give the scheme a marker (SaltScheme(..., marker=b'~')) so salted keys "
        "cannot meet them; if the table was written with another bucket count or hash, use "
        "that scheme."
    )


def _fresh(error: BaseException) -> BaseException:
    """A copy of a refusal to raise again (one object raised many times grows its traceback)."""
    copy = type(error).__new__(type(error), *error.args)
    copy.__dict__.update(error.__dict__)
    return copy


#: What reading the record answers: the record and the family it lives in, or None.
Found = tuple[LayoutRecord, str] | None
#: One I/O step the guard asks its driver for, and what the driver sends back.
Step = tuple[str, Any]


def _how_to_store(table: str) -> str:
    return (
        f"store one with `saltedtable guard {table} --add-family` (adds the reserved "
        f"family {RECORD_FAMILY!r} and stores the record there), or create salted tables "
        "with `saltedtable create`"
    )


def missing_family(error: BaseException) -> bool:
    """Whether a write failed because the table has no such column family."""
    return isinstance(error, (NotFound, InvalidArgument, Unknown)) and "family" in str(error)


class GuardCore:
    """The guard's state and decisions for one table object, without I/O.

    The state is one of ``"off"`` (the guard is switched off, or the table
    cannot hold a record), ``"unread"`` (no operation has read the record
    yet), ``"absent"`` (the table has no record), ``"unstored"`` (no record,
    and none may be stored: see :func:`~.families.place_record`),
    ``"agrees"`` or ``"refused"`` (the stored record differs: every operation
    raises a copy of the refusal). A settled state is read again once
    ``refresh`` seconds have passed, on the next operation. An operation asks
    :meth:`_pending` whether it must do I/O first, and again after taking
    the driver's lock, so that operations waiting for another's check see its
    outcome (a refusal included).

    The drivers (:class:`~.._async.guard.TableGuard` and the sync twin)
    run :meth:`_judging`, a generator of I/O steps: ``("read", None)`` asks
    for the stored record and its family (sent back in), ``("schema",
    None)`` for the table's column families (``(schema or None, reason)``),
    ``("sample", queries)`` for the keys each of the queries of
    :func:`sample_queries` returns (judged by :func:`layout_offenders`
    before a record of this layout is stored or replaces another: a row
    that does not fit refuses the write with :class:`LayoutError`),
    ``("create", placement)`` for a conditional write of the record (True
    when this write stored it, None when another writer's record was there
    first, False when the table has no such family) and ``("replace",
    (family, record))`` for overwriting it.

    After each check :attr:`outcome` says what it did (``"agrees"``,
    ``"stored"``, ``"moved"``, ``"replaced"``, or ``"none"`` when no record is
    stored) and :attr:`sampled` how many rows the sample before a store read.

    Args:
        layout: The layout the table object uses.
        enabled: False switches the guard off (nothing is read or written).
        require_record: Refuse a table that has no record
            (:class:`~saltedtable.RecordMissingError`) instead of reading it.
        refresh: Seconds after which the next operation reads the record
            again (None: read it once per object).
        schema: Reads the table's column families within the timeout it is
            given (seconds; None: the admin default) (None: it cannot be read).
        name: How messages name the table.
        view: The table object is an authorized view: the record is read
            through it when the view includes the record row (the guard is
            off, with one warning, when it does not), and never stored
            through it.
        hot: The table object's hot lists: its record carries them, so a
            table whose stored lists differ (a split since) is refused.
    """

    def __init__(
        self,
        layout: Layout,
        *,
        enabled: bool = True,
        require_record: bool = False,
        refresh: float | None = DEFAULT_RECORD_REFRESH,
        schema: Callable[[float | None], TableSchema] | None = None,
        name: str = "TABLE",
        view: bool = False,
        hot: HotLayout | None = None,
    ) -> None:
        if refresh is not None and not refresh > 0:
            raise ValueError(
                f"record_refresh must be a number of seconds > 0 or None, got {refresh!r}"
            )
        lead = None if layout.epochs is None else layout.epochs.min_lead
        if lead is not None:
            problem = lead_problem(lead, enabled=enabled, refresh=refresh, name=name)
            if problem is not None:
                raise LayoutError(problem)
        if hot is not None and hot.min_lead_s is not None and hot.pending(_now_micros()):
            problem = lead_problem(hot.min_lead_s, enabled=enabled, refresh=refresh, name=name)
            if problem is not None:
                raise LayoutError(_pending_split(problem))
        self._layout = layout
        #: The layout in use now (:attr:`layout`), as a plain attribute: a batcher
        #: compares it on every append without a call.
        self.current_layout = layout
        self._hot = hot
        #: The hot lists in use now (the object's own, or those it adopted), as a
        #: plain attribute: a batcher compares it on every append without a call.
        self.current_hot = hot
        #: The stored lead of the hot lists this object knows (None: none): writes
        #: are refused once the last good read of the record is older (its horizon).
        self.hot_lead = None if hot is None else hot.min_lead_s
        #: Called with the record's hot lists when this object adopts them (a split
        #: that extends the object's own lists; see :meth:`_follow_hot`).
        self.on_adopt_hot: Callable[[HotLayout], None] | None = None
        self._record = (
            with_hot(describe_layout(layout.scheme, layout.cutoff, epochs=layout.epochs), hot)
            if enabled
            else None
        )
        #: Called with the longer layout when a stored record that extends this
        #: object's own is adopted (the table swaps its layout; see :meth:`_adopt`).
        self.on_adopt: Callable[[Layout], None] | None = None
        #: The wall clock (seconds since the Unix epoch) when the last read of the
        #: record that settled the guard was sent: the writers' horizon counts from it.
        self._good_wall: float | None = None
        #: The table's window I/O in use now (None: none), which the table sets and a
        #: batcher compares on every append without a call.
        self.window_io: Any = None
        #: The dual-layout window the stored record holds (None: none), as last read.
        self.window_state: WindowState | None = None
        #: Called with the stored window (None: it closed, or there is none) on every
        #: read of a record that holds one, or that closed the one held before: the
        #: table decides by its clock whether it is in the window yet.
        self.on_window: Callable[[WindowState | None], None] | None = None
        # When (time.monotonic()) the stored window starts, while it has not yet:
        # the guard is due then, so the first operation after the start reads the
        # record and the table switches to the window (inf: no start ahead).
        self._window_switch = math.inf
        # The reserved row lies inside a salt prefix range for some schemes
        # (a raw phoenix byte 0xff): such tables cannot hold a record.
        self._storable = not any(s.has_prefix(SCHEME_ROW_KEY) for s in layout.schemes)
        # (Set before the state: setting either keeps clear_until up to date.)
        self._refresh = refresh
        self._due_at = 0.0
        self._state = "unread" if enabled and self._storable else "off"
        if require_record and enabled and not self._storable:
            raise LayoutError(
                f"{layout.scheme} has a prefix covering the reserved row {SCHEME_ROW_KEY!r}, "
                "so the table cannot hold a record: require_record=True cannot be met"
            )
        self._require = require_record
        self._read_at = 0.0  # when the last read of the record was sent (monotonic)
        self._stored: LayoutRecord | None = None
        self._stored_family: str | None = None
        self._error: BaseException | None = None
        self._schema_reader = schema
        self._schema: TableSchema | None = None
        self._schema_reason: str | None = None if schema is not None else "no admin client"
        self._name = name  # the table as a command names it (id and --instance/--project)
        self._id = name.split(" --", 1)[0]  # the table as prose names it
        self._warned: set[str] = set()
        self._probe_failed = False
        self._view = view
        self._outcome: str | None = None
        self._sampled: int | None = None

    #: Until when (``time.monotonic()``) no operation, a write included, needs
    #: the guard's I/O: ``inf`` for a guard that is off (or settled and never
    #: read again), ``-inf`` while :meth:`_pending` must decide. The batcher and
    #: the point operations compare it with the clock on every call, which a
    #: settled guard answers with one clock read instead of a state check.
    clear_until: float

    @property
    def _state(self) -> str:
        return self._state_now

    @_state.setter
    def _state(self, state: str) -> None:
        self._state_now = state
        self._clear()

    @property
    def _due(self) -> float:
        return self._due_at

    @_due.setter
    def _due(self, when: float) -> None:
        self._due_at = when
        self._clear()

    def _clear(self) -> None:
        # Only the settled states clear writes: any other state (one added
        # later too) leaves every operation to _pending.
        state = self._state_now
        if state == "off":
            self.clear_until = math.inf
        elif state in ("agrees", "unstored"):
            self.clear_until = math.inf if self._refresh is None else self._due_at
        else:
            self.clear_until = -math.inf

    @property
    def record(self) -> LayoutRecord:
        """The record of this table object's layout (a guard switched off has none)."""
        if self._record is None:
            raise RuntimeError("the layout guard is off: it has no record")
        return self._record

    @property
    def stored(self) -> LayoutRecord | None:
        """The record found in the table by the last check (None: none, or not read yet)."""
        return self._stored

    @property
    def stored_family(self) -> str | None:
        """The column family the stored record lives in (None: none, or not read yet)."""
        return self._stored_family

    @property
    def outcome(self) -> str | None:
        """What the last check did (None: not checked yet).

        ``"agrees"``: a stored record was found and agrees (nothing written);
        ``"stored"``: there was none, and this object stored its own after a
        sample of the rows fit it; ``"moved"``: an agreeing record was moved to
        another family; ``"replaced"``: ``override`` replaced a different one
        after the sample fit; ``"none"``: no record is stored.
        """
        return self._outcome

    @property
    def sampled(self) -> int | None:
        """Rows the last store (or replacement) sampled before it wrote (None: none sampled)."""
        return self._sampled

    @property
    def checked(self) -> bool:
        """Whether the record was read (or the guard is off)."""
        return self._state != "unread"

    @property
    def refreshes(self) -> bool:
        """Whether this guard reads the record again from time to time."""
        return self._state != "off" and self._refresh is not None

    def due(self) -> bool:
        """Whether the next operation must read the record (first or again)."""
        state = self._state
        if state == "unread":
            return True
        return (
            state in ("absent", "unstored", "agrees")
            and self._refresh is not None
            and time.monotonic() >= self._due
        )

    def _pending(self, family: str | None) -> bool:
        """Whether an operation (a write naming ``family``, or None) must do I/O first.

        Raises:
            SchemeMismatchError: A copy of the refusal an earlier check made.
        """
        state = self._state
        if state == "refused":
            assert self._error is not None
            raise _fresh(self._error)
        return self.due() or (state == "absent" and family is not None)

    def _refuse_unstorable(self, family: str | None, override: bool) -> bool:
        """For the explicit guard: False when nothing can be stored (and nothing was asked)."""
        if self._storable:
            return True
        if family is not None or override:
            raise LayoutError(
                f"{self._layout.scheme} has a prefix covering the reserved row "
                f"{SCHEME_ROW_KEY!r}, so the layout cannot be stored; give the scheme a "
                "marker or open without family="
            )
        return False

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _log.warning(message, *args)

    def _place(self, schema: TableSchema | None, family: str | None, explicit: bool) -> Placement:
        placement = place_record(
            schema, family=family, explicit=explicit, unreadable=self._schema_reason or ""
        )
        if placement.probe and self._probe_failed:
            # Tried once: the table has no reserved family; do not ask again.
            return Placement(None, checked=False, reason=placement.reason)
        if explicit and not placement.checked:
            self._warn_once(
                "unchecked",
                "the GC rule of column family %r of %s could not be checked (%s): if it can "
                "collect the layout record, the guard switches off when it does. Check and "
                "store it with `saltedtable guard %s --family %s` as a caller that may read "
                "the table's schema",
                family,
                self._id,
                placement.reason,
                self._name,
                family,
            )
        return placement

    def _not_stored(self, reason: str | None) -> None:
        self._warn_once(
            "unstored",
            "the layout record of %s is not stored (%s), so the guard cannot protect "
            "this table from a reader with another layout; %s",
            self._id,
            reason,
            _how_to_store(self._name),
        )
        self._state = "unstored"

    def _sample_fits(self, rows: int, action: str) -> Generator[Step, Any, int]:
        """Before a record of this layout is written: sample the rows, refuse misfits.

        Returns:
            The number of rows the sample read.

        Raises:
            LayoutError: A sampled row does not fit this layout (nothing is written).
        """
        samples: list[list[bytes]] = yield ("sample", sample_queries(self._layout, rows))
        offenders = layout_offenders(self._layout, samples, hot=self._hot)
        if offenders:
            refused = f"the layout record of {self._id} was not {action}: "
            raise layout_error(self._layout, offenders, refused=refused, examples=2)
        return sum(len(keys) for keys in samples)

    def _judging(
        self,
        family: str | None,
        override: bool = False,
        explicit: bool = False,
        sample_rows: int = STORE_SAMPLE_ROWS,
    ) -> Generator[Step, Any, None]:
        self._outcome, self._sampled = None, None
        try:
            # The interval runs from before the read is sent: a record the
            # reply shows may have been read by the server at any time since.
            self._read_at = time.monotonic()
            wall = wall_clock()  # (the horizon compares it with key times)
            found: Found = yield ("read", None)
            stored, where = found if found is not None else (None, None)
            if stored is not None:
                self._follow(stored)
            if stored is None and self._require and not (explicit and family is not None):
                raise RecordMissingError(
                    f"{self._id} has no layout record and require_record=True refuses to "
                    f"read it; {_how_to_store(self._name)}"
                )
            action = guard_action(stored, self.record, family=family, override=override)
            outcome = "agrees" if action == "ok" else "none"
            if action == "ok" and explicit and family is not None and where != family:
                # guard_scheme(family=F) with the record elsewhere: move it to F
                # (the record agreed already: nothing new is claimed, so no sample).
                schema, _ = yield ("schema", None)
                placement = self._place(schema, family, explicit=True)
                assert stored is not None
                assert placement.family is not None
                yield ("replace", (placement.family, stored))
                where, outcome = placement.family, "moved"
            elif action == "create" and self._view:
                if explicit:
                    raise LayoutError(
                        "a salted table over an authorized view does not store the layout "
                        f"record: store it through the table ({_how_to_store(self._name)})"
                    )
                self._not_stored("a salted table over an authorized view does not store it")
                self._stored, self._stored_family = None, None
                self._outcome = "none"
                self._settled()
                return
            elif action == "create":
                schema, _ = yield ("schema", None)
                placement = self._place(schema, family, explicit)
                if (
                    placement.family is None
                    and schema is not None
                    and family is not None
                    and family not in schema
                ):
                    # The write names a family the table lacks (the write fails):
                    # a later write may name one that can hold the record.
                    self._stored, self._stored_family = None, None
                    self._state, self._outcome = "absent", "none"
                    return
                created: bool | None = False
                if placement.family is not None:
                    # The record claims the rows already there: they must fit it.
                    self._sampled = yield from self._sample_fits(sample_rows, "stored")
                    created = yield ("create", placement)
                if created is False:
                    self._probe_failed = self._probe_failed or placement.probe
                    reason = placement.reason
                    if placement.probe or self._probe_failed:
                        reason = (
                            f"the table has no column family {RECORD_FAMILY!r}, and its schema "
                            f"cannot be read to check another: {reason}"
                        )
                    self._not_stored(reason)
                    self._stored, self._stored_family = None, None
                    self._outcome = "none"
                    self._settled()
                    return
                found = yield ("read", None)
                if found is None:
                    raise LayoutError(f"the layout record {SCHEME_ROW_KEY!r} did not persist")
                stored, where = found
                guard_action(stored, self.record, family=family)  # the other writer's?
                outcome = "stored" if created else "agrees"
            elif action == "replace":
                schema, _ = yield ("schema", None)
                placement = self._place(schema, family, explicit=True)
                assert placement.family is not None
                # An override follows a deliberate rewrite: the rows must fit the new layout.
                self._sampled = yield from self._sample_fits(sample_rows, "replaced")
                _log.warning("replacing the stored salt layout %s with %s", stored, self.record)
                yield ("replace", (placement.family, self.record))
                stored, where, outcome = self.record, placement.family, "replaced"
        except LayoutError as exc:
            self._error = exc
            self._state = "refused"
            raise
        self._stored, self._stored_family = stored, where
        self._outcome = outcome
        self._good_wall = wall
        if self._state != "off":
            self._state = "absent" if stored is None else "agrees"
            self._settled()

    @property
    def layout(self) -> Layout:
        """The layout this guard checks: the object's own, or the longer one it adopted."""
        return self._layout

    def _follow(self, stored: LayoutRecord) -> None:
        """A stored record with epochs: refuse an object that cannot keep its lead; adopt
        one that extends this object's layout (see ``resalt.adoption``).

        Raises:
            LayoutError: The object's refresh cannot keep the stored lead, or the
                record extends its layout with a key part or reader it cannot resolve.
        """
        problem = refresh_problem(stored, enabled=True, refresh=self._refresh, name=self._id)
        if problem is not None:
            raise LayoutError(problem)
        if self._follow_window(stored):
            return
        grown = adoption(self._layout, stored)
        if grown is None:
            self._follow_hot(stored)
            return
        if self._hot is not None:
            # (hot key lists are kept for one scheme: a table with them never has epochs)
            raise LayoutError(
                f"the layout record of {self._id} now has epochs, which a table object "
                "with hot keys cannot adopt: open it again without hot="
            )
        _log.info("%s: adopting the layout record's appended epochs: %s", self._id, grown.epochs)
        self._layout = self.current_layout = grown
        self._record = describe_layout(grown.scheme, grown.cutoff, epochs=grown.epochs)
        if self.on_adopt is not None:
            self.on_adopt(grown)

    def _follow_hot(self, stored: LayoutRecord) -> None:
        """A stored record whose hot lists extend this object's: adopt them.

        The object adopts when the record is its own apart from the hot field,
        and the stored lists are its own (a start or lead it did not know) or
        the stored split's ``previous`` lists are (a split made since: parts
        and rows only added, K only raised, checked when the record is read).
        Anything else is left to the comparison, which refuses it as before.

        Raises:
            LayoutError: The stored field is malformed, or a split is pending and
                this object's refresh cannot keep the stored lead.
        """
        layout, record = self._layout, self._record
        if record is None or layout.cutoff is not None or layout.epochs is not None:
            return
        if without_hot(stored).differences(without_hot(record)):
            return  # another layout: the comparison refuses it
        found = hot_layout_of(stored, layout.scheme)
        if found is None:
            return
        if found.min_lead_s is not None and found.pending(_now_micros()):
            problem = lead_problem(
                found.min_lead_s, enabled=True, refresh=self._refresh, name=self._id
            )
            if problem is not None:
                raise LayoutError(_pending_split(problem))
        own = self._hot if self._hot is not None else HotLayout(layout.scheme)
        if found == own:
            return
        if not own.same_lists(found) and (
            found.previous is None or not own.same_lists(found.previous)
        ):
            return  # lists this object cannot follow: the comparison refuses them
        _log.info("%s: adopting the layout record's hot lists: %r", self._id, found)
        self._hot = self.current_hot = found
        self.hot_lead = found.min_lead_s
        self._record = with_hot(without_hot(record), found)
        if self.on_adopt_hot is not None:
            self.on_adopt_hot(found)

    def check_hot_horizon(self) -> None:
        """Refuse a write once the last good read of the record is older than the hot lead.

        A split stored after that read starts no sooner than the read plus the
        lead, so until then this object's placement is the one every reader
        consults; after it, the object must read the record again first.

        Raises:
            LayoutError: The horizon has passed (nothing is written).
        """
        lead = self.hot_lead
        if lead is None:
            return
        read = self._good_wall or 0.0
        if wall_clock() >= read + lead:
            raise LayoutError(
                f"{self._id}: this table object last read the layout record more than the "
                f"hot lists' minimum lead of {lead:g} s ago, past its horizon: a split stored "
                "since could have started, so the write is refused. Keep record_refresh "
                "within the lead so the next operation reads the record again"
            )

    def _follow_window(self, stored: LayoutRecord) -> bool:
        """A stored record that opened, advanced or closed a window: adopt it.

        Returns:
            Whether the record is (or was) a window's; False leaves the record
            to the other rules (and to the refusal of a different one).

        Raises:
            LayoutError: The object has hot keys, or a refresh that cannot keep
                the window's lead.
        """
        if self.window_state is None and not any(
            name == WINDOW_KEY for name, _ in stored.extra
        ):  # (a plain record: no JSON parsed on every refresh)
            return False
        if self._hot is not None:
            raise LayoutError(
                f"the layout record of {self._id} holds a dual-layout window, which a table "
                "object with hot keys cannot follow: close the window first, or open the "
                "table without hot="
            )
        adopted = adopt_window(self._layout, self.window_state, stored)
        if adopted is None:
            return False
        state, layout, record = adopted
        if state is not None:
            problem = lead_problem(
                state.min_lead_s,
                enabled=True,
                refresh=self._refresh,
                name=self._id,
                holds="a resalt window",
            )
            if problem is not None:
                raise LayoutError(problem)
        if state != self.window_state or layout is not self._layout:
            _log.info("%s: following the layout record's window: %s", self._id, state)
        self.window_state = state
        wall = wall_clock()
        ahead = None if state is None else state.start_micros / 1_000_000 - wall
        self._window_switch = math.inf if ahead is None or ahead <= 0 else time.monotonic() + ahead
        self._record = record
        if layout is not self._layout:
            self._layout = self.current_layout = layout
            if self.on_adopt is not None:
                self.on_adopt(layout)
        if self.on_window is not None:
            self.on_window(state)
        return True

    def check_window_horizon(self) -> None:
        """Refuse a write in a window once the last good read of the record is older than
        the window's lead: the window may have moved on (closed) unseen meanwhile.

        Raises:
            WindowError: The last successful read of the record is too old.
        """
        state = self.window_state
        if state is None:
            return
        problem = window_horizon_problem(state, self._good_wall, wall_clock(), self._id)
        if problem is not None:
            raise WindowError(problem)

    @property
    def horizon_applies(self) -> bool:
        """Whether writes are checked against a horizon (a layout with a stored lead)."""
        epochs = self._layout.epochs
        return epochs is not None and epochs.min_lead is not None

    def check_horizon(self, key: bytes) -> None:
        """Refuse a write of ``key`` at or after this object's horizon (see ``resalt``).

        Only a layout with a stored lead has a horizon: its last successful read
        of the record plus the lead.

        Raises:
            RowKeyError: The key's time is at or after the horizon.
        """
        epochs = self._layout.epochs
        if epochs is None or epochs.min_lead is None:
            return
        problem = beyond_horizon(epochs, key, self._good_wall or 0.0, epochs.min_lead)
        if problem is not None:
            raise horizon_error(problem)

    def _blind(self, error: BaseException) -> None:
        """The view refuses reads of the record row: the guard is off for this object."""
        if self._require:
            exc = RecordMissingError(
                f"the authorized view of {self._id} does not include the layout record row, "
                "so require_record=True cannot be met: build the view with "
                "view_row_prefixes(..., record=True)"
            )
            self._error, self._state = exc, "refused"
            raise exc
        epochs = self._layout.epochs
        if epochs is not None and epochs.min_lead is not None:
            # Blind, the object could not keep the lead (it would never see an append),
            # and every timed write would meet a horizon from 1970: say why instead.
            refused = LayoutError(
                f"{self._id} has layout epochs with a minimum lead of {epochs.min_lead:g} s, "
                f"and this table object cannot keep it: its authorized view refuses reads of "
                f"the layout record row ({error}), so it would never see an appended epoch. "
                "Include the row in the view (saltedtable.view_row_prefixes(..., "
                "record=True))"
            )
            self._error, self._state = refused, "refused"
            raise refused
        self._warn_once(
            "blind",
            "the authorized view of %s refuses reads of the layout record row (%s): the "
            "guard is off for this table object. Include the row in the view "
            "(saltedtable.view_row_prefixes(..., record=True)), or check the record through "
            "the table with `saltedtable guard %s`",
            self._id,
            error,
            self._name,
        )
        self._state = "off"

    def _settled(self) -> None:
        if self._refresh is not None:
            self._due = min(self._read_at + self._refresh, self._window_switch)

    def _schema_answer(self) -> tuple[TableSchema | None, str | None]:
        return self._schema, self._schema_reason

    def _schema_failed(self, error: BaseException) -> None:
        self._schema_reason = f"{type(error).__name__}: {error}".splitlines()[0]

    def _schema_timeout(self, limit: GuardTime) -> float | None:
        """What is left of the operation's budget for the admin read (None: no deadline).

        Raises:
            DeadlineExceeded: Nothing is left (the read is not sent; handled
                like a refused one).
        """
        if limit is None:
            return None
        left = limit[0] - time.monotonic()
        if left <= 0:
            raise deadline_exceeded("no time left in operation_timeout to read the table schema")
        return left

    def _record_mutations(self, kind: str, family: str, record: LayoutRecord) -> list[Mutation]:
        cell = SetCell(family, SCHEME_QUALIFIER, encode_layout(record))
        return [cell] if kind == "create" else [DeleteAllFromRow(), cell]

    def _plain_store_warning(self, error: BaseException) -> None:
        """Once per table object: the app profile refused the conditional create."""
        self._warn_once(
            "plain",
            "the app profile refuses single-row transactions (%s): the layout record "
            "is stored with a plain write and read back; two services starting at "
            "once on this empty table with different layouts are then not told "
            "apart. Store it once through a profile with transactional writes "
            "(guard_scheme(family=...)) to close that window.",
            error,
        )

    def _family_problem(self, schema: TableSchema | None, stored: object) -> str | None:
        """Why the stored record's family can lose it (None: fine, or unknown)."""
        family = self._stored_family
        if stored is None or schema is None or family is None or family not in schema:
            return None
        problem = record_family_problem(schema[family])
        if problem is None:
            return None
        return (
            f"the layout record of {self._id} lives in {problem}; move it with "
            f"`saltedtable guard {self._name} --add-family`"
        )


def _now_micros() -> int:
    return int(wall_clock() * 1_000_000)


def _pending_split(problem: str) -> str:
    # lead_problem speaks of epochs; here the lead is a pending hot-key split's.
    return problem.replace("has layout epochs with", "has a pending hot-key split with")


def found_record(row: Row | None) -> Found:
    """The record a read of the reserved row found, and its family (None: no record)."""
    cell = newest_record_cell(row)
    return None if cell is None else (decode_layout(cell.value), cell.family)


def guard_wait_exceeded() -> Exception:
    """The error of an operation whose deadline passed while another checked the record."""
    return deadline_exceeded(
        "operation_timeout exceeded waiting for another operation's check of the layout record"
    )
