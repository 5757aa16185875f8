"""Appending a layout epoch, and adopting one: the pure rules (no I/O, no clock).

``saltedtable resalt`` (:func:`saltedtable.append_epoch`) changes a live
table's bucket count forward only: it appends an epoch whose start lies in
the future, by a compare-and-swap of the layout record. This module decides
what is appended (:func:`plan_append`), which rows already written the new
epoch would orphan (:func:`orphaned`), and what a long-lived table object
adopts when the record it reads again extends its own (:func:`adoption`).

The guarantee rests on one stored number, the record's minimum lead
(``epochs.min_lead_s``):

* an epoch may be appended only to start at least the lead after the moment
  it is appended (the appender's clock);
* a table object that reads a record with epochs reads it again at least every
  lead seconds (its ``record_refresh`` may not be longer, nor unset:
  :func:`refresh_problem`; an object with its guard off reads no record and
  cannot be refused);
* a table object refuses to write a key whose time is at or after its last
  successful read of the record plus the lead (:func:`beyond_horizon`).

So a writer that has not seen an append (its last read came before it) can
write only keys older than the last read plus the lead, which is before the
new epoch's start: no row lands where readers of the new record will not
look. Rows written before the append by writers that do not keep the horizon
(raw clients, Beam, objects without epochs) are checked by the append itself
(:func:`orphaned`): it is refused while such a row exists. Objects that
could not read the lead (opened before the table's first lead was stored and
not re-read yet, refresh None or longer than the lead, guard off) can still
write such a row after the check, until they re-read the record or restart:
``resalt --repair`` finds and moves those rows afterwards (:func:`misplaced`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, final

from .._exceptions import (
    CutoffError,
    LayoutError,
    RowKeyError,
    SaltSchemeError,
    SchemeMismatchError,
)
from .._scheme.cutoff import epoch_field, reversed_epoch_field
from .._scheme.epochs import Epoch, Epochs, Unreadable, instant_of
from .._scheme.flags import rebuild_key_part, rebuild_time_reader
from .._scheme.layout import Layout
from .._scheme.named import key_part_identity
from .._scheme.salt import SCHEME_ROW_KEY, SaltScheme
from .from_record import epochs_of_record, layout_of_record
from .record import (
    DEFAULT_RECORD_REFRESH,
    EpochRecord,
    EpochsRecord,
    LayoutRecord,
    describe_layout,
)

__all__ = [
    "CLOCK_SKEW_MARGIN",
    "DEFAULT_MIN_LEAD",
    "Appending",
    "Misplaced",
    "adoption",
    "beyond_horizon",
    "current_epochs",
    "horizon_error",
    "late_range",
    "lead_problem",
    "misplaced",
    "orphaned",
    "plan_append",
    "refresh_problem",
]

#: Seconds of clock difference between machines the default lead allows for.
CLOCK_SKEW_MARGIN: Final = 60.0
#: The minimum lead stored with a table's first epoch record unless another is
#: given: twice the default record refresh (a reader that refreshes on time
#: re-reads well before an epoch starts, with one missed refresh to spare) plus
#: a margin for clocks that disagree.
DEFAULT_MIN_LEAD: Final = 2 * DEFAULT_RECORD_REFRESH + CLOCK_SKEW_MARGIN


@final
@dataclass(frozen=True, slots=True)
class Appending:
    """What an append stores: the epoch lists before and after, and the new record.

    Attributes:
        current: The table's epochs now (a plain or cutoff table as an epoch list).
        appended: The epochs after the append.
        record: The record to store (version 2; the stored one's other fields kept).
        min_lead: The lead the append respects (stored in ``record``), seconds.
    """

    current: Epochs
    appended: Epochs
    record: LayoutRecord
    min_lead: float

    @property
    def start(self) -> int:
        """The new epoch's start, microseconds since the Unix epoch."""
        start = self.appended.epochs[-1].start
        assert start is not None  # only the first epoch has none
        return start


def current_epochs(stored: LayoutRecord, current: Layout | None) -> Epochs:
    """The stored record's layout as an epoch list (``current``: the caller's, when given).

    Raises:
        SchemeMismatchError: ``current`` differs from ``stored``.
        LayoutError: The record names a key part or reader that cannot be rebuilt.
    """
    if current is not None:
        mine = describe_layout(current.scheme, current.cutoff, epochs=current.epochs)
        diffs = dataclasses.replace(stored, migration=None).differences(mine)
        if diffs:
            raise SchemeMismatchError(stored, mine)
        return current.as_epochs()
    if stored.epochs is not None:
        return epochs_of_record(stored.epochs)
    return layout_of_record(stored).as_epochs()


def plan_append(
    stored: LayoutRecord,
    scheme: SaltScheme,
    at: dt.datetime,
    now: dt.datetime,
    *,
    timestamp: Callable[[bytes], int | dt.datetime] | None = None,
    unreadable: Unreadable | None = None,
    min_lead: float | None = None,
    current: Layout | None = None,
) -> Appending:
    """Decide an append of ``scheme`` from ``at`` to the table whose record is ``stored``.

    Args:
        stored: The record in the table now.
        scheme: The new epoch's scheme.
        at: The new epoch's start (an aware datetime).
        now: The appender's clock.
        timestamp: The key-time reader, needed when the table has none yet (a
            plain salted table); otherwise it must be the stored one (or None).
        unreadable: Where keys whose time cannot be read live, for a table that
            has no epochs yet (default ``"error"``).
        min_lead: The lead to store with the table's first epoch record
            (default :data:`DEFAULT_MIN_LEAD`); a record that has one keeps it.
        current: The caller's layout of the table (needed when the record
            names a custom key part or time reader); it must agree with ``stored``.

    Raises:
        SaltSchemeError: ``at`` is sooner than ``now`` plus the lead (the
            message names the earliest start allowed), or the new list breaks
            a rule of the epoch lists.
        LayoutError: A migration is in progress, a stored reader or key part
            cannot be rebuilt (give ``current``), the reader differs, or keys
            without a readable time live in the last epoch (``"last"``: an append
            would move them at once).
        SchemeMismatchError: ``current`` differs from the stored record.
    """
    if stored.migration is not None:
        raise LayoutError(
            f"a migration is in progress ({stored.migration!r}): finish it before appending "
            "an epoch"
        )
    if at.tzinfo is None or now.tzinfo is None:
        raise SaltSchemeError(f"give the epoch's start with a UTC offset, got {at.isoformat()}")
    epochs = current_epochs(stored, current)
    stored_lead = None if stored.epochs is None else stored.epochs.min_lead_s
    if stored_lead is not None and min_lead is not None and min_lead != stored_lead:
        raise SaltSchemeError(
            f"the table's record stores a minimum lead of {stored_lead:g} s; it is set when "
            f"the first epoch record is written and cannot be changed to {min_lead:g} s here"
        )
    lead = stored_lead if stored_lead is not None else min_lead
    if lead is None:
        lead = DEFAULT_MIN_LEAD
    if not lead > 0:
        raise SaltSchemeError(f"the minimum lead must be seconds > 0, got {lead!r}")
    earliest = now + dt.timedelta(seconds=lead)
    if at < earliest:
        raise SaltSchemeError(
            f"the new epoch would start at {at.astimezone(dt.UTC).isoformat()}, sooner than "
            f"the minimum lead of {lead:g} s from now allows: start it at "
            f"{earliest.astimezone(dt.UTC).isoformat()} or later (table objects re-read the "
            "record within the lead, and refuse keys past their last read plus the lead)"
        )
    if epochs.timestamp is not None and timestamp is not None:
        if _name(timestamp) != _name(epochs.timestamp):
            raise LayoutError(
                f"the table's epochs read key times with {_name(epochs.timestamp)}, not "
                f"{_name(timestamp)}: every epoch shares one reader"
            )
        timestamp = None
    if len(epochs) > 1 and unreadable is not None and unreadable != epochs.unreadable:
        raise LayoutError(
            f"the table's epochs send keys without a readable time to {epochs.unreadable!r}; "
            "an append keeps that"
        )
    if (epochs.unreadable if len(epochs) > 1 else unreadable) == "last":
        # A key without a readable time lives in the newest epoch: an append would move
        # every such key to the new epoch at once (not at its start), while running
        # writers still place them in the old newest epoch, where readers stop looking.
        raise LayoutError(
            "keys without a readable time live in the table's last epoch "
            "(unreadable='last'), so appending an epoch would move them at the append, "
            "not at its start, where running writers still put them: an append needs "
            "unreadable='first' or 'error'"
        )
    if epochs.timestamp is None and timestamp is None:
        raise SaltSchemeError(
            "the table has one scheme and no key-time reader yet: give the reader of the "
            "time in its keys (e.g. epoch_field('ms', index=1), or --time epoch:ms:1)"
        )
    new = Epoch.at(at, scheme)
    appended = epochs.appended(
        new,
        timestamp=timestamp,
        unreadable=unreadable if len(epochs) == 1 else None,
        min_lead=lead,
    )
    record = describe_layout(appended.newest, epochs=appended)
    # Fields a newer saltedtable wrote (and a window, say) stay as they were.
    record = dataclasses.replace(record, extra=stored.extra)
    return Appending(epochs, appended, record, float(lead))


def _name(reader: Callable[[bytes], int | dt.datetime]) -> str:
    """The name the record stores for a key-time reader."""
    epochs = Epochs((Epoch(None, SaltScheme(1)),), reader)
    found = describe_layout(SaltScheme(1), epochs=epochs).epochs
    assert found is not None
    return found.time or repr(reader)


def orphaned(current: Epochs, appended: Epochs, keys: Iterable[bytes]) -> list[bytes]:
    """The physical keys, of rows already written, that ``appended`` would hide.

    A row is orphaned when the current list shows it (``current.owner`` names
    an epoch) and the appended one does not: its key's time lies at or after
    the new epoch's start, so readers would look for it under the new scheme.
    """
    return [p for p in keys if current.owner(p) is not None and appended.owner(p) is None]


def late_range(
    timestamp: Callable[[bytes], int | dt.datetime] | None, at_micros: int
) -> tuple[bytes, bytes] | None:
    """The logical keys an append's row check must read: ``(start, end)``, or None (all).

    Rows whose key time lies before the new epoch's start keep their epoch,
    so the check reads only keys that can have a time at or after it. The
    key-time reader must prove that: a decimal field of fixed width that
    leads the key (``epoch_field(..., index=0, digits=D)``, or the reversed
    one) orders keys by time, and its own :meth:`time_bounds` confirms that
    no readable key outside the range has a time at or after ``at_micros``.
    Keys the reader cannot read are outside the proof: the caller reads
    everything when they move to the new epoch (``unreadable="last"``).
    ``b""`` leaves a side open.
    """
    bounds_of = getattr(timestamp, "time_bounds", None)
    if bounds_of is None or not isinstance(timestamp, epoch_field | reversed_epoch_field):
        return None
    digits = timestamp.digits
    if timestamp.index != 0 or digits is None:
        return None

    def field(value: int) -> bytes | None:
        text = str(value).encode()
        return text.rjust(digits, b"0") if value >= 0 and len(text) <= digits else None

    one, zero = field(1), field(0)
    assert one is not None
    assert zero is not None
    if isinstance(timestamp, epoch_field):
        scale = timestamp(one)  # the microseconds of one field unit
        cut = field(-(-at_micros // scale))  # the least field whose time is at or after
        if cut is None:
            return None
        bounds = bounds_of(b"\x00", cut, False)
        proven = (cut, b"")
    else:
        scale = timestamp(zero) - timestamp(one)
        newest = timestamp(zero) // scale - -(-at_micros // scale)  # the greatest such field
        cut = field(newest + 1)
        if cut is None:
            return None
        bounds = bounds_of(cut, b"\xff", True)
        proven = (b"", cut)
    if bounds is None or bounds[1] is None or bounds[1] >= at_micros:
        return None  # (not proven: read everything)
    return proven


# -- repairing ----------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Misplaced:
    """A row that belongs to no epoch, and where it belongs (``saltedtable resalt --repair``).

    Attributes:
        source: The physical key the row is stored at (readers leave it out).
        logical: Its logical key (as the epoch that wrote it salted it).
        destination: The physical key its epoch gives it; None: it cannot be
            moved (``why`` says why: no epoch can hold it, or the key is ambiguous).
        why: Why readers do not see it (and, when it cannot be moved, why not).
    """

    source: bytes
    logical: bytes
    destination: bytes | None
    why: str


def _unsalted_everywhere(epochs: Epochs, key: bytes) -> bool:
    """Whether every epoch list that begins like ``epochs`` stores ``key`` unsalted."""
    if not epochs.has_legacy or len(epochs) < 2:
        return epochs.has_legacy
    try:
        when = epochs.key_time(key)
    except ValueError:
        return epochs.unreadable == "first"
    first_salted = epochs.epochs[1].start
    assert first_salted is not None
    return when < first_salted


def misplaced(epochs: Epochs, physical: bytes) -> Misplaced | None:
    """Whether the row at ``physical`` is hidden, and the key it belongs at (None: it is seen).

    The append's row check, run against the stored layout: a row is hidden
    when no epoch owns it (:meth:`Epochs.owner`). Such a row was written by an
    object that had not yet read an appended epoch (opened before the table's
    first lead was stored, or with a refresh that never re-reads): it was salted
    with an older epoch's scheme although its key's time selects a newer one.
    Its logical key is recovered from the salted epoch that stores it exactly at
    ``physical`` (hash and prefix agree), or is ``physical`` itself for an unsalted
    first epoch; a key both could have written is reported as ambiguous, not moved.
    """
    if physical.startswith(SCHEME_ROW_KEY):
        return None
    why = epochs.why_hidden(physical)
    if why is None:
        return None
    salted: set[bytes] = set()
    for scheme in dict.fromkeys(epochs.schemes):
        for prefix in scheme.prefixes:
            logical = physical[len(prefix) :]
            if physical.startswith(prefix) and logical and scheme.salt_key(logical) == physical:
                salted.add(logical)
    # An unsalted writer of any epoch list wrote this key unsalted when its time lies
    # before the first salted epoch (or cannot be read, with unreadable="first"): then it
    # is as likely a legacy key as a salted one, and only a person can tell.
    legacy = {physical} if _unsalted_everywhere(epochs, physical) else set()
    candidates = (salted | legacy) or ({physical} if epochs.has_legacy else set())
    if not candidates:
        return Misplaced(physical, physical, None, f"{why}; no epoch writes this key")
    if len(candidates) > 1:
        return Misplaced(
            physical,
            physical,
            None,
            f"{why}; its logical key is ambiguous ({sorted(candidates)!r}): move it by hand",
        )
    (logical,) = candidates
    try:
        _, _, destination = epochs.locate(logical)
    except (RowKeyError, CutoffError) as exc:
        return Misplaced(physical, logical, None, f"{why}; it cannot be moved: {exc}")
    if destination == physical:
        return Misplaced(physical, logical, None, f"{why}; its epoch stores it here")
    return Misplaced(physical, logical, destination, why)


# -- adopting --------------------------------------------------------------------------


def _resolve_scheme(
    found: EpochRecord, mine: dict[str | None, Callable[[bytes], bytes] | None]
) -> SaltScheme:
    """An appended epoch's scheme; its key part is the object's own (by name) or ready-made."""
    assert found.buckets is not None
    part: Callable[[bytes], bytes] | None = None
    if found.key_part is not None:
        part = mine.get(found.key_part) or rebuild_key_part(found.key_part)
        if part is None:
            raise LayoutError(
                f"the appended epoch's key part {found.key_part!r} is neither ready-made nor "
                "one this table object knows: open a new table object with the new layout"
            )
    return SaltScheme(
        found.buckets,
        hash=found.hash or "crc32",
        key_part=part,
        separator=b"-" if found.separator is None else found.separator,
        marker=found.marker or b"",
    )


def adoption(layout: Layout, stored: LayoutRecord) -> Layout | None:
    """The layout a table object adopts when it reads ``stored``; None: nothing to adopt.

    An object adopts a record that *extends* its own layout: the same epochs
    (a plain or cutoff layout as its epoch list), then one or more epochs
    appended (:meth:`Epochs.extends`). The new epochs are rebuilt from the
    record, reusing the object's own key parts and time reader by their
    stored names, or the ready-made ones; anything else (a custom key part or
    reader the object does not hold) cannot be adopted: the object raises
    :class:`~saltedtable.LayoutError` saying so, and a new object must be
    opened with the new layout.

    Raises:
        LayoutError: The record extends this layout but names a key part or
            time reader this object cannot resolve.
    """
    found: EpochsRecord | None = stored.epochs
    if found is None or stored.migration is not None:
        return None
    mine = layout.as_epochs()
    n = len(mine)
    if len(found.epochs) <= n:
        return None
    own = describe_layout(mine.newest, epochs=dataclasses.replace(mine, min_lead=None))
    assert own.epochs is not None
    if found.epochs[:n] != own.epochs.epochs:
        return None
    if n > 1 and (found.time, found.unreadable or "error") != (
        own.epochs.time,
        own.epochs.unreadable,
    ):
        return None
    reader = mine.timestamp
    if reader is None:
        reader = rebuild_time_reader(found.time)
        if reader is None:
            raise LayoutError(
                f"the table's record appends epochs read by the time reader {found.time!r}, "
                "which is not ready-made: open a new table object with the new layout"
            )
    parts = {key_part_identity(s.key_part): s.key_part for s in mine.schemes}
    added = tuple(Epoch(e.start_micros, _resolve_scheme(e, parts)) for e in found.epochs[n:])
    unreadable = found.unreadable or "error"
    if unreadable not in ("error", "first", "last"):
        return None
    try:
        grown = Epochs(
            (*mine.epochs, *added),
            reader,
            unreadable,  # type: ignore[arg-type]
            found.min_lead_s,
        )
    except SaltSchemeError as exc:
        raise LayoutError(f"the table's record appends epochs this object refuses: {exc}") from exc
    return Layout.of_epochs(grown)


def refresh_problem(
    stored: LayoutRecord, *, enabled: bool, refresh: float | None, name: str
) -> str | None:
    """Why a table object may not use a table whose record has epochs (None: it may).

    The lead holds only if every object re-reads the record within it.
    """
    found = stored.epochs
    if found is None or found.min_lead_s is None:
        return None
    return lead_problem(found.min_lead_s, enabled=enabled, refresh=refresh, name=name)


def lead_problem(
    lead: float,
    *,
    enabled: bool,
    refresh: float | None,
    name: str,
    holds: str = "layout epochs",
) -> str | None:
    """Why a table object cannot keep a minimum lead of ``lead`` seconds (None: it can).

    ``holds`` names what stores the lead (layout epochs, or a resalt window).
    """
    if not enabled:
        why = "its layout guard is off"
    elif refresh is None:
        why = "record_refresh=None (it would never read the record again)"
    elif refresh > lead:
        why = f"record_refresh={refresh:g} s is longer than the lead"
    else:
        return None
    return (
        f"{name} has {holds} with a minimum lead of {lead:g} s, and this table object "
        f"cannot keep it: {why}; open it with the guard on and record_refresh at most "
        f"{lead:g} s"
    )


def beyond_horizon(epochs: Epochs, key: bytes, read_at: float, lead: float) -> str | None:
    """Why a write of ``key`` is refused (None: its time is before the writer's horizon).

    ``read_at`` is the wall clock (seconds since the Unix epoch) of the last
    successful read of the record; the horizon is ``read_at + lead``. Keys
    whose time cannot be read are not judged here (the epochs' ``unreadable``
    rule routes or refuses them).
    """
    try:
        when = epochs.key_time(key)
    except ValueError:
        return None
    horizon = int((read_at + lead) * 1_000_000)
    if when < horizon:
        return None
    return (
        f"row key {key!r} has time {instant_of(when).isoformat()}, at or after this table "
        f"object's horizon {instant_of(horizon).isoformat()} (its last read of the layout "
        f"record plus the minimum lead of {lead:g} s): an epoch appended meanwhile could "
        "start before it. Write such scheduled keys later, when the horizon has passed them "
        "(every read of the record moves it), or append the epoch that will hold them first"
    )


def horizon_error(message: str) -> RowKeyError:
    """The error a write past the horizon raises."""
    return RowKeyError(message)
