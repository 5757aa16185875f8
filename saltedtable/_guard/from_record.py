"""The layout a table's record describes, rebuilt as values (pure).

The layout record names saltedtable's ready-made key parts (``fields``,
``before_last``) and time readers (``epoch_field``, ...) by their ``repr``.
:func:`layout_of_record` turns a record back into the :class:`Layout` it was
made from, so the command line reads a table with the scheme stored in it
instead of one typed by hand. The names are read by :mod:`saltedtable._scheme.flags`, which
parses them and evaluates nothing but literal arguments.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .._exceptions import LayoutError
from .._scheme.cutoff import CutoffPolicy
from .._scheme.epochs import Epoch, Epochs
from .._scheme.flags import rebuild_key_part, rebuild_time_reader, stored_instant
from .._scheme.layout import Layout
from .._scheme.salt import SaltScheme
from .record import DELETING, EpochRecord, EpochsRecord, LayoutRecord

__all__ = ["epochs_of_record", "layout_of_record", "scheme_of_record"]


def _cutoff_instant(at_micros: int | None, at: str | None) -> dt.datetime:
    text = stored_instant({"at_micros": at_micros, "at": at})
    if text is None:
        raise LayoutError(f"the layout record's cutoff has no instant ({at!r})")
    return dt.datetime.fromisoformat(text)


def scheme_of_record(record: LayoutRecord, key_part: Any) -> SaltScheme:
    """The salt scheme ``record`` stores, with ``key_part`` (rebuilt by the caller)."""
    return SaltScheme(
        record.buckets,
        hash=record.hash or "crc32",
        key_part=key_part,
        separator=b"-" if record.separator is None else record.separator,
        marker=record.marker or b"",
    )


def _key_part(name: str | None) -> Any:
    if name is None:
        return None
    key_part = rebuild_key_part(name)
    if key_part is None:
        raise LayoutError(
            f"the layout record names the key part {name!r}, which only the "
            "code that wrote it can rebuild; read the table from Python with that scheme"
        )
    return key_part


def _epoch_of_record(found: EpochRecord) -> Epoch:
    if found.buckets is None:
        return Epoch(found.start_micros, None)
    scheme = SaltScheme(
        found.buckets,
        hash=found.hash or "crc32",
        key_part=_key_part(found.key_part),
        separator=b"-" if found.separator is None else found.separator,
        marker=found.marker or b"",
    )
    return Epoch(found.start_micros, scheme)


def epochs_of_record(found: EpochsRecord) -> Epochs:
    """The epoch list a record's ``epochs`` describes.

    Raises:
        LayoutError: A custom key part or time reader (only the code that
            wrote it can rebuild it), or an ``unreadable`` this release does
            not know.
        SaltSchemeError: A list this saltedtable refuses (see ``Epochs``).
    """
    reader = None
    if found.time is not None:
        reader = rebuild_time_reader(found.time)
        if reader is None:
            raise LayoutError(
                f"the layout record names the time reader {found.time!r}, which only the "
                "code that wrote it can rebuild; read the table from Python with those epochs"
            )
    unreadable = found.unreadable or "error"
    if unreadable not in ("error", "first", "last"):
        raise LayoutError(f"the layout record's epochs have unreadable={unreadable!r}")
    return Epochs(
        tuple(_epoch_of_record(e) for e in found.epochs),
        reader,
        unreadable,  # type: ignore[arg-type]
        found.min_lead_s,
    )


def layout_of_record(record: LayoutRecord) -> Layout:
    """The layout ``record`` describes: the scheme, and the cutoff unless it is being removed.

    A record during a migration's ``deleting`` step describes the cutoff
    layout while only the fully salted one may read (the legacy rows are
    going): that one is returned.

    Raises:
        LayoutError: The record names a custom key part or time reader, which
            only the code that wrote it can rebuild, or a cutoff without an
            instant.
        SaltSchemeError: The record's scheme is one this saltedtable refuses
            (an unknown hash, say).
    """
    if record.epochs is not None:
        if record.migration is not None:
            raise LayoutError(
                f"the layout record has epochs and a migration state {record.migration!r}; "
                "this saltedtable runs migrations on cutoff layouts only"
            )
        return Layout.of_epochs(epochs_of_record(record.epochs))
    scheme = scheme_of_record(record, _key_part(record.key_part))
    found = record.cutoff
    if found is None or record.migration == DELETING:
        return Layout(scheme)
    reader = rebuild_time_reader(found.timestamp)
    if reader is None:
        raise LayoutError(
            f"the layout record names the time reader {found.timestamp!r}, which only the "
            "code that wrote it can rebuild; read the table from Python with that cutoff"
        )
    unreadable = found.unreadable or "error"
    if unreadable not in ("error", "legacy", "salted"):
        raise LayoutError(f"the layout record's cutoff has unreadable={unreadable!r}")
    policy = CutoffPolicy(
        _cutoff_instant(found.at_micros, found.at),
        reader,
        unreadable=unreadable,  # type: ignore[arg-type]
    )
    return Layout(scheme, policy)
