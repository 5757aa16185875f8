"""The layout record: what a table was written with, as a small JSON value (pure).

The bucket count, hash, key part, separator, marker and cutoff are part of
the data's meaning: reading with another scheme silently misses rows.
:func:`describe_layout` turns a layout into a record; the guard (``decisions``)
stores it in the reserved row :data:`SCHEME_ROW_KEY` and compares it with
every table object's own (:func:`guard_action`); a migration in progress
marks it (``migration``).

A layout with epochs (``Layout.of_epochs``) is stored as version 2: the
top-level scheme fields name its newest epoch's scheme, ``cutoff`` is null,
and ``epochs`` holds the list (:class:`EpochsRecord`). A release that
predates epochs keeps the unknown ``epochs`` field aside and compares it,
so its guard refuses such a table (:class:`~saltedtable.SchemeMismatchError`
naming ``epochs``) instead of reading only the newest epoch. Layouts of
today's two shapes are stored exactly as before (version 1, no ``epochs``).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, final

from .._exceptions import LayoutError, SchemeMismatchError, layout_differences
from .._scheme.cutoff import CutoffPolicy
from .._scheme.epochs import Epochs, instant_of
from .._scheme.flags import LayoutFlags, layout_flags
from .._scheme.named import key_part_identity
from .._scheme.salt import SCHEME_ROW_KEY, SaltScheme

if TYPE_CHECKING:
    from google.cloud.bigtable.data.mutations import Mutation
    from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
    from google.cloud.bigtable.data.row import Cell, Row
    from google.cloud.bigtable.data.row_filters import RowFilter

__all__ = [
    "BACKFILL",
    "CUTOVER",
    "DEFAULT_LEGACY_GRACE",
    "DEFAULT_RECORD_REFRESH",
    "DELETING",
    "MIGRATION_KEY",
    "MIGRATION_STATES",
    "SCHEME_QUALIFIER",
    "WINDOW_CLOCK_MARGIN",
    "Action",
    "CutoffRecord",
    "EpochRecord",
    "EpochsRecord",
    "LayoutRecord",
    "MigrationState",
    "decode_layout",
    "describe_layout",
    "encode_layout",
    "exact_value_regex",
    "family_of",
    "guard_action",
    "newest_record_cell",
    "open_differences",
    "record_of_row",
    "record_swap_filter",
]

#: The column qualifier of the record.
SCHEME_QUALIFIER: Final = b"scheme"
_VERSION: Final = 1
#: The version of a record with epochs (older releases do not read its ``epochs``).
EPOCHS_VERSION: Final = 2
#: The record's key for the state of a migration in progress (see ``migration``).
MIGRATION_KEY: Final = "migration"
#: The states of a migration in progress, in order (see ``migration``).
MigrationState = Literal["backfill", "cutover", "deleting"]
BACKFILL: Final = "backfill"
CUTOVER: Final = "cutover"
DELETING: Final = "deleting"
MIGRATION_STATES: Final[tuple[MigrationState, ...]] = (BACKFILL, CUTOVER, DELETING)

#: Seconds between two reads of the record by one table object (``record_refresh``).
DEFAULT_RECORD_REFRESH: Final = 30.0
#: Seconds ``delete-legacy`` waits between moving the record to ``deleting`` and
#: deleting the first legacy row: strictly longer than the default refresh, so that
#: a cutoff reader with the default interval has read the record again (the margin
#: covers clocks that run at slightly different rates on two machines).
DEFAULT_LEGACY_GRACE: Final = DEFAULT_RECORD_REFRESH + 10.0

#: Seconds after a resalt window's start before a backfill or verify pass runs by
#: default: a writer whose clock runs behind may still delete in the old layout
#: alone until its clock reaches the start, and a copy made before that delete
#: would bring the row back.
WINDOW_CLOCK_MARGIN: Final = 60.0

#: What the guard does next (see :func:`guard_action`).
Action = Literal["ok", "create", "replace", "skip"]


def _callable_name(func: Callable[..., Any] | None) -> str | None:
    if func is None:
        return None
    if dataclasses.is_dataclass(func):
        return repr(func)  # the ready-made key parts and readers: a stable repr
    module = getattr(func, "__module__", None) or type(func).__module__
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{module}.{name}"


def _refuse(what: str) -> LayoutError:
    return LayoutError(f"the reserved row {SCHEME_ROW_KEY!r} holds a record whose {what}")


def _extra(value: Mapping[str, Any], known: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """The fields a newer saltedtable wrote, as sorted (name, JSON text) pairs."""
    return tuple(
        sorted((k, json.dumps(v, sort_keys=True)) for k, v in value.items() if k not in known)
    )


def _optional(value: Mapping[str, Any], name: str, kind: type) -> Any:
    got = value.get(name)
    if got is not None and (not isinstance(got, kind) or isinstance(got, bool)):
        raise _refuse(f"{name!r} is {got!r}, not a {kind.__name__}")
    return got


def _hex(value: Mapping[str, Any], name: str) -> bytes | None:
    text = _optional(value, name, str)
    try:
        return None if text is None else bytes.fromhex(text)
    except ValueError:
        raise _refuse(f"{name!r} is {text!r}, not hex") from None


def _check(name: str, value: object, kinds: tuple[type, ...]) -> None:
    if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
        raise LayoutError(
            f"a layout record's {name} must be {kinds[0].__name__} or None, got {value!r}"
        )


_CUTOFF_FIELDS: Final = frozenset({"at", "at_micros", "timestamp", "unreadable"})
_RECORD_FIELDS: Final = frozenset(
    {
        "version",
        "buckets",
        "hash",
        "key_part",
        "separator",
        "marker",
        "cutoff",
        "epochs",
        MIGRATION_KEY,
    }
)
_EPOCH_FIELDS: Final = frozenset(
    {"start", "start_micros", "buckets", "hash", "key_part", "separator", "marker"}
)
_EPOCHS_FIELDS: Final = frozenset({"time", "unreadable", "min_lead_s", "list"})
#: The top-level fields that name the newest epoch's scheme in a record with epochs.
_SCHEME_FIELDS: Final = ("buckets", "hash", "key_part", "separator", "marker")


@final
@dataclass(frozen=True, slots=True)
class CutoffRecord:
    """The cutoff part of a :class:`LayoutRecord` (see :class:`~saltedtable.CutoffPolicy`)."""

    #: The cutoff instant as ISO text (shown, not compared: ``at_micros`` is).
    at: str | None = field(compare=False)
    #: The cutoff instant in microseconds since the epoch.
    at_micros: int | None
    #: The stable name of the function that reads a key's time.
    timestamp: str | None
    #: Where keys whose time cannot be read live (``"legacy"``, ``"salted"`` or ``"error"``).
    unreadable: str | None
    #: Fields a newer saltedtable wrote, as (name, JSON text) pairs, kept for comparison.
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check("cutoff at", self.at, (str,))
        _check("cutoff at_micros", self.at_micros, (int,))
        _check("cutoff timestamp", self.timestamp, (str,))
        _check("cutoff unreadable", self.unreadable, (str,))

    @classmethod
    def from_dict(cls, value: object) -> CutoffRecord:
        """The cutoff of a stored record's JSON.

        Raises:
            LayoutError: It is not an object with these fields.
        """
        if not isinstance(value, dict):
            raise _refuse(f"cutoff is {value!r}, not an object")
        return cls(
            _optional(value, "at", str),
            _optional(value, "at_micros", int),
            _optional(value, "timestamp", str),
            _optional(value, "unreadable", str),
            _extra(value, _CUTOFF_FIELDS),
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON object stored for the cutoff."""
        out: dict[str, Any] = {
            "at": self.at,
            "at_micros": self.at_micros,
            "timestamp": self.timestamp,
            "unreadable": self.unreadable,
        }
        out.update((k, json.loads(v)) for k, v in self.extra)
        return out


@final
@dataclass(frozen=True, slots=True)
class EpochRecord:
    """One epoch of an :class:`EpochsRecord`: its start and its scheme (None: unsalted)."""

    #: The start instant as ISO text (shown, not compared: ``start_micros`` is); None: -inf.
    start: str | None = field(compare=False)
    #: The start in microseconds since the epoch; None for the first epoch.
    start_micros: int | None
    #: The bucket count; None: the epoch is unsalted.
    buckets: int | None
    hash: str | None = None
    key_part: str | None = None
    separator: bytes | None = None
    marker: bytes | None = None
    #: Fields a newer saltedtable wrote, as (name, JSON text) pairs, kept for comparison.
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check("epoch start", self.start, (str,))
        _check("epoch start_micros", self.start_micros, (int,))
        _check("epoch buckets", self.buckets, (int,))
        _check("epoch hash", self.hash, (str,))
        _check("epoch key_part", self.key_part, (str,))
        _check("epoch separator", self.separator, (bytes,))
        _check("epoch marker", self.marker, (bytes,))
        if self.buckets is not None and self.buckets < 1:
            raise LayoutError(f"an epoch's buckets must be >= 1, got {self.buckets}")

    @classmethod
    def from_dict(cls, value: object) -> EpochRecord:
        """An epoch of a stored record's JSON.

        Raises:
            LayoutError: It is not an object with these fields.
        """
        if not isinstance(value, dict):
            raise _refuse(f"epoch is {value!r}, not an object")
        return cls(
            _optional(value, "start", str),
            _optional(value, "start_micros", int),
            _optional(value, "buckets", int),
            _optional(value, "hash", str),
            _optional(value, "key_part", str),
            _hex(value, "separator"),
            _hex(value, "marker"),
            _extra(value, _EPOCH_FIELDS),
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON object stored for the epoch."""
        out: dict[str, Any] = {
            "start": self.start,
            "start_micros": self.start_micros,
            "buckets": self.buckets,
            "hash": self.hash,
            "key_part": self.key_part,
            "separator": None if self.separator is None else self.separator.hex(),
            "marker": None if self.marker is None else self.marker.hex(),
        }
        out.update((k, json.loads(v)) for k, v in self.extra)
        return out


@final
@dataclass(frozen=True, slots=True)
class EpochsRecord:
    """The ``epochs`` part of a :class:`LayoutRecord` (see ``saltedtable._scheme.epochs``)."""

    #: The epochs, oldest first.
    epochs: tuple[EpochRecord, ...]
    #: The stable name of the function that reads a key's time.
    time: str | None
    #: Where keys whose time cannot be read live (``"error"``, ``"first"``, ``"last"``).
    unreadable: str | None
    #: The least time, in seconds, between appending an epoch and its start.
    min_lead_s: float | None = None
    #: Fields a newer saltedtable wrote, as (name, JSON text) pairs, kept for comparison.
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.epochs or not all(isinstance(e, EpochRecord) for e in self.epochs):
            raise LayoutError(f"a record's epochs must be a non-empty list, got {self.epochs!r}")
        _check("epochs time", self.time, (str,))
        _check("epochs unreadable", self.unreadable, (str,))
        _check("epochs min_lead_s", self.min_lead_s, (float, int))

    @classmethod
    def from_dict(cls, value: object) -> EpochsRecord:
        """The epochs of a stored record's JSON.

        Raises:
            LayoutError: It is not an object with these fields.
        """
        if not isinstance(value, dict) or not isinstance(value.get("list"), list):
            raise _refuse(f"epochs is {value!r}, not an object with a list")
        lead = value.get("min_lead_s")
        if lead is not None and (not isinstance(lead, int | float) or isinstance(lead, bool)):
            raise _refuse(f"'min_lead_s' is {lead!r}, not a number")
        return cls(
            tuple(EpochRecord.from_dict(e) for e in value["list"]),
            _optional(value, "time", str),
            _optional(value, "unreadable", str),
            None if lead is None else float(lead),
            _extra(value, _EPOCHS_FIELDS),
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON object stored for the epochs."""
        out: dict[str, Any] = {
            "list": [e.as_dict() for e in self.epochs],
            "time": self.time,
            "unreadable": self.unreadable,
            "min_lead_s": self.min_lead_s,
        }
        out.update((k, json.loads(v)) for k, v in self.extra)
        return out


@final
@dataclass(frozen=True, slots=True)
class LayoutRecord:
    """The layout a table was written with, as stored in its reserved row (a frozen value).

    Made by :func:`describe_layout` from a scheme and cutoff; stored as sorted
    JSON (:meth:`encode`, :meth:`decode`); compared field by field
    (:meth:`differences`), the version and the cutoff's ISO text left out.
    Fields a record leaves out (written by an older saltedtable) read as None.

    Raises:
        LayoutError: At construction, a field of the wrong type, or
            ``buckets`` below 1.
    """

    #: The number of salt buckets.
    buckets: int
    #: The hash that picks a key's bucket (``"crc32"``, ...).
    hash: str | None
    #: The stable name of the key part hashed (None: the whole key).
    key_part: str | None
    #: The bytes between the salt prefix and the logical key.
    separator: bytes | None
    #: The bytes before the salt prefix.
    marker: bytes | None
    #: The cutoff of a layout with legacy (unsalted) rows, or None.
    cutoff: CutoffRecord | None = None
    #: The state of a migration in progress (``saltedtable migrate``), or None.
    migration: str | None = None
    #: The record format's version (not compared).
    version: int = field(default=_VERSION, compare=False)
    #: Fields a newer saltedtable wrote, as (name, JSON text) pairs, kept for comparison.
    extra: tuple[tuple[str, str], ...] = ()
    #: The layout epochs (None: one scheme, or a cutoff); the top-level scheme
    #: fields then name the newest epoch's scheme.
    epochs: EpochsRecord | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.buckets, int) or isinstance(self.buckets, bool) or self.buckets < 1:
            raise LayoutError(
                f"a layout record's buckets must be an int >= 1, got {self.buckets!r}"
            )
        _check("hash", self.hash, (str,))
        _check("key_part", self.key_part, (str,))
        _check("separator", self.separator, (bytes,))
        _check("marker", self.marker, (bytes,))
        _check("cutoff", self.cutoff, (CutoffRecord,))
        _check("migration", self.migration, (str,))
        _check("version", self.version, (int,))
        _check("epochs", self.epochs, (EpochsRecord,))
        if self.epochs is not None:
            if self.cutoff is not None:
                raise LayoutError("a layout record holds epochs or a cutoff, not both")
            newest = self.epochs.epochs[-1]
            top = (self.buckets, self.hash, self.key_part, self.separator, self.marker)
            last = (newest.buckets, newest.hash, newest.key_part, newest.separator, newest.marker)
            if top != last:
                raise LayoutError(
                    f"a layout record's scheme fields {top!r} must name its newest epoch's "
                    f"scheme {last!r}"
                )

    @classmethod
    def from_dict(cls, value: object) -> LayoutRecord:
        """A record from its JSON object.

        Raises:
            LayoutError: It is not a layout record.
        """
        if not isinstance(value, dict) or "buckets" not in value:
            raise LayoutError(f"the reserved row {SCHEME_ROW_KEY!r} holds {value!r}")
        buckets = value["buckets"]
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 1:
            raise _refuse(f"buckets is {buckets!r}, not a count of buckets")
        cutoff = value.get("cutoff")
        version = _optional(value, "version", int)
        epochs = value.get("epochs")
        return cls(
            buckets,
            _optional(value, "hash", str),
            _optional(value, "key_part", str),
            _hex(value, "separator"),
            _hex(value, "marker"),
            None if cutoff is None else CutoffRecord.from_dict(cutoff),
            _optional(value, MIGRATION_KEY, str),
            _VERSION if version is None else version,
            _extra(value, _RECORD_FIELDS),
            None if epochs is None else EpochsRecord.from_dict(epochs),
        )

    @classmethod
    def decode(cls, value: bytes) -> LayoutRecord:
        """Parse a stored record.

        Raises:
            LayoutError: The reserved row holds something that is not a record.
        """
        try:
            parsed = json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LayoutError(
                f"the reserved row {SCHEME_ROW_KEY!r} holds {value[:80]!r}, not a layout record"
            ) from exc
        return cls.from_dict(parsed)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object stored (``migration`` only while one is in progress)."""
        out: dict[str, Any] = {
            "version": self.version,
            "buckets": self.buckets,
            "hash": self.hash,
            "key_part": self.key_part,
            "separator": None if self.separator is None else self.separator.hex(),
            "marker": None if self.marker is None else self.marker.hex(),
            "cutoff": None if self.cutoff is None else self.cutoff.as_dict(),
        }
        if self.migration is not None:
            out[MIGRATION_KEY] = self.migration
        if self.epochs is not None:
            out["epochs"] = self.epochs.as_dict()
        out.update((k, json.loads(v)) for k, v in self.extra)
        return out

    def encode(self) -> bytes:
        """The stored form: the JSON object with sorted keys."""
        return json.dumps(self.as_dict(), sort_keys=True).encode()

    def differences(self, other: LayoutRecord) -> list[str]:
        """What differs from ``other``, one line per field (empty: they agree).

        The version and the cutoff's ISO text are not compared, only the
        instant it names. What :class:`~saltedtable.SchemeMismatchError` shows.
        """
        return layout_differences(self.as_dict(), other.as_dict())

    def cli_flags(self) -> LayoutFlags:
        """The command-line flags that give this layout (``-n 8 --time epoch:ms:1:13 ...``).

        What to pass ``saltedtable inspect``, ``guard`` or ``create``; a custom
        key part or time reader has no flag and is named instead (see
        :class:`~saltedtable._scheme.flags.LayoutFlags`).
        """
        return layout_flags(self.as_dict())

    def __str__(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    def __getitem__(self, name: str) -> Any:
        """A field as the JSON object has it (the dict the record used to be).

        .. deprecated:: Read the attribute (``record.buckets``) or :meth:`as_dict`.
        """
        warnings.warn(
            f"record[{name!r}] is deprecated: the layout record is a LayoutRecord; read "
            "its attribute, or record.as_dict()",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.as_dict()[name]


def describe_layout(
    scheme: SaltScheme, cutoff: CutoffPolicy | None = None, *, epochs: Epochs | None = None
) -> LayoutRecord:
    """The record of a layout (what a reader must agree on).

    Args:
        scheme: The scheme (with ``epochs``: the newest epoch's).
        cutoff: A cutoff layout's policy.
        epochs: A layout with epochs (``Layout.epochs``): stored as version 2.

    Raises:
        LayoutError: A custom key part without a stable name (see
            :func:`~saltedtable.named_key_part`).
    """
    if epochs is not None:
        return _describe_epochs(epochs)
    return LayoutRecord(
        scheme.buckets,
        scheme.hash,
        key_part_identity(scheme.key_part),
        scheme.separator,
        scheme.marker,
        None
        if cutoff is None
        else CutoffRecord(
            cutoff.cutoff.isoformat(),
            cutoff.cutoff_micros,
            _callable_name(cutoff.timestamp),
            cutoff.unreadable,
        ),
    )


def _epoch_record(start: int | None, scheme: SaltScheme | None) -> EpochRecord:
    iso = None if start is None else instant_of(start).isoformat()
    if scheme is None:
        return EpochRecord(iso, start, None)
    return EpochRecord(
        iso,
        start,
        scheme.buckets,
        scheme.hash,
        key_part_identity(scheme.key_part),
        scheme.separator,
        scheme.marker,
    )


def _describe_epochs(epochs: Epochs) -> LayoutRecord:
    newest = epochs.newest
    return LayoutRecord(
        newest.buckets,
        newest.hash,
        key_part_identity(newest.key_part),
        newest.separator,
        newest.marker,
        version=EPOCHS_VERSION,
        epochs=EpochsRecord(
            tuple(_epoch_record(e.start, e.scheme) for e in epochs),
            _callable_name(epochs.timestamp),
            epochs.unreadable,
            None if epochs.min_lead is None else float(epochs.min_lead),
        ),
    )


def encode_layout(record: LayoutRecord) -> bytes:
    """The stored form of a record (:meth:`LayoutRecord.encode`)."""
    return record.encode()


def decode_layout(value: bytes) -> LayoutRecord:
    """Parse a stored record (:meth:`LayoutRecord.decode`).

    Raises:
        LayoutError: The reserved row holds something that is not a record.
    """
    return LayoutRecord.decode(value)


def exact_value_regex(value: bytes) -> bytes:
    """A value regex (RE2 syntax) that matches exactly ``value``, every byte escaped."""
    return b"\\A" + b"".join(b"\\x%02x" % byte for byte in value) + b"\\z"


def record_swap_filter(family: str, stored: bytes) -> RowFilter:
    """The predicate of a compare-and-swap on the layout record row: true exactly
    while the record's newest cell in ``family`` still holds ``stored``.

    Every change of a stored record that must not overwrite another's (an
    appended epoch, a hot key split, a window's state, a migration step) sends
    its mutations with this predicate in one ``CheckAndMutateRow``.
    """
    import re

    from google.cloud.bigtable.data.row_filters import (
        CellsColumnLimitFilter,
        ColumnQualifierRegexFilter,
        FamilyNameRegexFilter,
        RowFilterChain,
        ValueRegexFilter,
    )

    return RowFilterChain(
        [
            FamilyNameRegexFilter("^" + re.escape(family) + "$"),
            ColumnQualifierRegexFilter(b"^" + re.escape(SCHEME_QUALIFIER) + b"$"),
            CellsColumnLimitFilter(1),
            ValueRegexFilter(exact_value_regex(stored)),
        ]
    )


def newest_record_cell(row: Row | None) -> Cell | None:
    """The cell holding the current layout record in the reserved row, or None."""
    if row is None:
        return None
    cells = [c for c in row.cells if c.qualifier == SCHEME_QUALIFIER]
    return max(cells, key=lambda c: c.timestamp_micros) if cells else None


def record_of_row(row: Row | None) -> LayoutRecord | None:
    """The layout record stored in the reserved row, or None if there is none."""
    cell = newest_record_cell(row)
    return None if cell is None else decode_layout(cell.value)


def guard_action(
    stored: LayoutRecord | None,
    current: LayoutRecord,
    *,
    family: str | None,
    override: bool = False,
) -> Action:
    """What the guard must do about a table's stored record.

    Args:
        stored: The record found in the table (None: none yet).
        current: The record of the layout the table object was made with.
        family: A column family to store a record in (None: none known yet).
        override: Replace a different stored record instead of refusing.

    Returns:
        ``"ok"`` (the records agree), ``"create"`` (store the record: there is
        none and a family is known), ``"skip"`` (none stored and no family to
        store it in yet) or ``"replace"`` (override a different record).

    Raises:
        SchemeMismatchError: The records differ and ``override`` is False.
        LayoutError: ``override`` without a family to store the new record in, or
            a stored record with fields the current one lacks (hot key lists, a
            window's state), which the override would drop.
    """
    if stored is None:
        return "create" if family is not None else "skip"
    if not open_differences(stored, current):
        return "ok"
    if not override:
        raise SchemeMismatchError(stored, current)
    if family is None:
        raise LayoutError("override_scheme=True needs family= to store the new layout record")
    kept = {name for name, _ in current.extra}
    dropped = sorted({name for name, _ in stored.extra} - kept)
    if dropped:
        # (hot key lists, a window's state: a reader that lost them would miss rows)
        raise LayoutError(
            f"the stored layout record holds {', '.join(map(repr, dropped))}, which this "
            "table object does not know; overriding would drop it and readers would miss "
            "rows placed by it. Make the table object with the same setting (e.g. hot= for "
            "hot keys) to keep it"
        )
    return "replace"


def family_of(
    mutations: Mutation | ReadModifyWriteRule | Sequence[Mutation | ReadModifyWriteRule],
) -> str | None:
    """The first column family a mutation or rule (or a list of them) names, if any."""
    # (Exact types first: an ABC's isinstance is three calls, per written row.)
    if type(mutations) is not tuple and type(mutations) is not list:
        mutations = mutations if isinstance(mutations, Sequence) else (mutations,)
    for mutation in mutations:
        family = getattr(mutation, "family", None)
        if isinstance(family, str) and family:
            return family
    return None


def open_differences(stored: LayoutRecord, current: LayoutRecord) -> list[str]:
    """Why a table whose record is ``stored`` may not be opened with ``current`` (empty: it may).

    Outside a migration this is :meth:`LayoutRecord.differences`. During one
    (``saltedtable migrate``) the record describes the cutoff layout, which
    keeps opening through the backfill and the cut-over; from the cut-over on
    the fully salted layout of the same scheme opens too, and while the legacy
    rows are deleted only that one does.
    """
    state = stored.migration
    base = dataclasses.replace(stored, migration=None)
    diffs = base.differences(current)
    salted_reader = state in (CUTOVER, DELETING) and current.cutoff is None
    if salted_reader and not dataclasses.replace(base, cutoff=None).differences(current):
        return []
    if state == DELETING and not diffs:
        # A reader with the cutoff would miss the rows being deleted.
        diffs.append(
            f"{MIGRATION_KEY}: the legacy rows are being deleted; open the table without the cutoff"
        )
    if state is not None and state not in MIGRATION_STATES:
        diffs.append(f"{MIGRATION_KEY}: unknown state {state!r} (a newer saltedtable wrote it)")
    return diffs
