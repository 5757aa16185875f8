"""Writes: logical mutation entries to physical ones, failures back to logical keys.

Every key of a bulk write is placed before anything is sent, so a bad key
fails the call with nothing written. Failures the client reports name the
caller's own (logical) entries. The batchers (:mod:`saltedtable._async.batcher`) wrap the
client's batchers, which keep flushing by count, bytes and timer.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from google.api_core.exceptions import DeadlineExceeded
from google.cloud.bigtable.data import RowMutationEntry
from google.cloud.bigtable.data.exceptions import (
    FailedMutationEntryError,
    MutationsExceptionGroup,
    RetryExceptionGroup,
)

from ._contracts import BatcherLike, SyncBatcherLike
from ._exceptions import RowKeyError
from ._guard.record import family_of
from ._read.stats import CallStats
from ._scheme.layout import Layout
from ._scheme.salt import to_key

__all__ = [
    "BatcherCore",
    "PhysicalEntry",
    "every_entry_failed",
    "logical_group",
    "physical_entries",
    "physical_keys",
]


class _Placed(RowMutationEntry):
    """An entry under its physical key, made without the client's checks.

    The caller's entry was checked when it was made, and the physical one
    shares its mutations (a tuple): one is made per row written, so its
    construction runs no Python ``__init__``; the writer sets ``row_key`` and
    ``mutations`` itself.
    """

    # (The C initialiser that takes no arguments: RowMutationEntry's would
    # check and copy the mutations again.)
    __init__ = object.__init__


class PhysicalEntry(_Placed):
    """A batcher's entry under its physical key that remembers the caller's own entry.

    The client reports a failed entry by handing back the object it was
    given; this lets failures name the caller's object, not a copy. ``seq`` is
    its position among the batcher's appended entries, which tells a
    ``flush()`` which failures are its own.
    """

    __slots__ = ("logical", "seq")

    logical: RowMutationEntry
    seq: int


def physical_keys(
    layout: Layout, entries: Sequence[RowMutationEntry], stats: CallStats | None = None
) -> list[bytes]:
    """The entries' physical keys, every key placed before any is sent.

    Raises:
        RowKeyError, CutoffError: A key cannot be placed; nothing is returned.
    """
    if stats is None:
        salt = layout.salter()
        return [salt(entry.row_key) for entry in entries]
    keys: list[bytes] = []
    locate = layout.locate
    for entry in entries:
        bucket, key = locate(entry.row_key)
        keys.append(key)
        b = stats.bucket(bucket)
        b.rows += 1
        b.bytes += len(key) + sum(m.size() for m in entry.mutations)
    return keys


def physical_entries(
    entries: Sequence[RowMutationEntry], keys: Sequence[bytes]
) -> list[RowMutationEntry]:
    """The entries under their physical keys (:func:`physical_keys`), sharing their mutations."""
    physical: list[RowMutationEntry] = [_Placed() for _ in entries]
    for entry, key, out in zip(entries, keys, physical, strict=True):
        out.row_key = key
        # The client's entries hold a tuple, which the physical entry shares;
        # anything else (a list set on the entry afterwards) is copied.
        mutations = entry.mutations
        out.mutations = mutations if type(mutations) is tuple else tuple(mutations)
    return physical


def first_family(entries: Sequence[RowMutationEntry]) -> str | None:
    """The first column family any entry's mutations name."""
    for entry in entries:
        family = family_of(entry.mutations)
        if family is not None:
            return family
    return None


def logical_group(
    group: MutationsExceptionGroup,
    layout: Layout,
    originals: Sequence[RowMutationEntry] | None = None,
) -> MutationsExceptionGroup:
    """The same failures, naming the caller's logical entries instead of physical ones."""
    failures: list[Exception] = []
    for exc in group.exceptions:
        if not isinstance(exc, FailedMutationEntryError):
            failures.append(exc)  # anything else passes through unchanged
        elif originals is not None and exc.index is not None and exc.index < len(originals):
            failures.append(_failure(exc, originals[exc.index]))
        else:
            failures.append(logical_failure(exc, layout))
    return MutationsExceptionGroup(
        failures,  # type: ignore[arg-type]
        group.total_entries_attempted,
        message=str(group.message),
    )


def logical_failure(exc: FailedMutationEntryError, layout: Layout) -> FailedMutationEntryError:
    """The failure of a physical entry, naming the caller's entry (or one with its logical key)."""
    entry = exc.entry
    if isinstance(entry, PhysicalEntry):
        return _failure(exc, entry.logical)
    try:
        key = layout.to_logical(to_key(entry.row_key))
    except RowKeyError:
        key = to_key(entry.row_key)
    return _failure(exc, RowMutationEntry(key, list(entry.mutations)))


def _failure(exc: FailedMutationEntryError, entry: RowMutationEntry) -> FailedMutationEntryError:
    cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
    return FailedMutationEntryError(exc.index, entry, cause)


def every_entry_failed(
    entries: Sequence[RowMutationEntry], cause: Exception
) -> MutationsExceptionGroup:
    """The client's report of a bulk write whose every entry failed with ``cause``.

    A request that ran out of time after retries (the guard's) is reported as
    the client reports such entries: with the group of its attempts' errors.
    """
    if isinstance(cause, DeadlineExceeded) and isinstance(cause.__cause__, RetryExceptionGroup):
        cause = cause.__cause__
    return MutationsExceptionGroup(
        [FailedMutationEntryError(i, entry, cause) for i, entry in enumerate(entries)],
        len(entries),
    )


#: The client's batcher's private parts that ``flush()`` and the outcome tracking use
#: (google-cloud-bigtable 2.50: ``_schedule_flush()`` stages a flush job and returns
#: it, ``_flush_jobs`` holds the running ones, and each job hands its failed entries
#: to ``_add_exceptions``).
_FLUSH_INTERNALS: Final = ("_add_exceptions", "_schedule_flush", "_flush_jobs")


class BatcherCore:
    """What the async and the sync batcher share: placing entries, tracking their outcomes.

    The client's batcher keeps ten of the first and ten of the last failures
    for ``close()``. This one takes the client's private store of failures
    (``_add_exceptions``, called by each flush job with every entry it could
    not write) and keeps every failure itself, with the position of its entry
    among those appended, so that ``flush()`` raises those appended before it
    and ``close()`` the rest, each failure once.
    """

    __slots__ = (
        "_failed",
        "_inner",
        "_internals",
        "_layout",
        "_lock",
        "_open",
        "_reported",
        "_salt",
        "_seq",
        "_tracked",
    )

    def __init__(
        self, inner: BatcherLike | SyncBatcherLike, layout: Layout, *, internals: bool = True
    ) -> None:
        self._inner = inner
        self._layout = layout
        self._salt = layout.salter()
        #: False once close() began: appends then go to the client's, which refuses them.
        self._open = True
        #: Entries appended (sent to the client's batcher or held back): the next one's seq.
        self._seq = 0
        #: Entries before this seq were counted by a raised group already.
        self._reported = 0
        #: Failures not raised yet, naming the caller's entries, with their seq: the
        #: guard's (held back) and the client's (the sync client's come from its threads).
        self._failed: list[tuple[int, FailedMutationEntryError]] = []
        self._lock = threading.Lock()
        #: False: the client's private parts are not touched (the table's
        #: ``client_internals`` switch); close() raises what the client's batcher kept.
        self._internals = internals
        self._tracked = internals and _track_failures(inner, self._record)

    @property
    def closed(self) -> bool:
        """True once the batcher was closed."""
        return bool(self._inner.closed)

    def _hold(self, entry: RowMutationEntry, cause: Exception) -> None:
        # The client's append never fails for Bigtable: its flush does.
        with self._lock:
            seq, self._seq = self._seq, self._seq + 1
            self._failed.append((seq, FailedMutationEntryError(None, entry, cause)))

    def _record(self, failures: list[FailedMutationEntryError]) -> None:
        """Keep a flush job's failed entries (in place of the client's ``_add_exceptions``)."""
        if not failures:
            return
        with self._lock:
            for exc in failures:
                entry = getattr(exc, "entry", None)
                # (An entry not placed here cannot be flushed, but if one were,
                # the next flush() reports it.)
                seq = entry.seq if isinstance(entry, PhysicalEntry) else -1
                self._failed.append((seq, logical_failure(exc, self._layout)))

    def _send_now(self) -> bool:
        """Start a flush job of what the client's batcher holds (False: its internals are off).

        For entries routed by hot lists that stop being the writers' lists at
        a split's start: sent now, not whenever the client's batcher flushes
        (a move finished meanwhile would hide them at their old place).
        """
        if not (self._tracked and self._open):
            return False
        inner: Any = self._inner
        inner._schedule_flush()
        return True

    def _flush_jobs(self) -> set[Any]:
        """Flush what the client's batcher holds; its flush jobs that are not done.

        Raises:
            RuntimeError: The batcher is closed.
            NotImplementedError: The client's batcher lacks the parts it takes.
        """
        if not self._open:
            raise RuntimeError("Cannot flush a closed MutationsBatcher")
        if not self._internals:
            raise NotImplementedError(
                "flush() needs the private flush jobs of google-cloud-bigtable's "
                "MutationsBatcher, and this table's client_internals switch is off "
                "(client_internals=False or SALTEDTABLE_CLIENT_INTERNALS=off): "
                "close() the batcher to write what was appended and raise its failures"
            )
        if not self._tracked:
            raise NotImplementedError(
                f"flush() needs the internals {', '.join(_FLUSH_INTERNALS)} of "
                f"google-cloud-bigtable's MutationsBatcher, which "
                f"{type(self._inner).__qualname__} lacks"
            )
        inner: Any = self._inner
        new = inner._schedule_flush()
        jobs = set(inner._flush_jobs)  # (a copy: each job leaves the set when done)
        if new is not None:
            jobs.add(new)
        return jobs

    def _take(self, before: int | None = None) -> MutationsExceptionGroup | None:
        """The failures not raised yet of the entries before seq ``before`` (None: all)."""
        with self._lock:
            end = self._seq if before is None else before
            taken = [f for f in self._failed if f[0] < end]
            if not taken:
                return None
            # Entries that share a seq are one logical entry (a split hot row's
            # sub-rows, a window's two rows): its failure is reported once.
            once: dict[int, tuple[int, FailedMutationEntryError]] = {}
            for failure in taken:
                once.setdefault(failure[0], failure)
            unique = [f for f in taken if f[0] < 0 or once[f[0]] is f]
            self._failed = [f for f in self._failed if f[0] >= end]
            attempted = max(len(unique), end - self._reported)
            self._reported = max(self._reported, end)
        unique.sort(key=_SEQ)  # in the order they were appended
        return MutationsExceptionGroup([exc for _, exc in unique], attempted)

    def _combined(
        self, ours: MutationsExceptionGroup | None, group: MutationsExceptionGroup | None
    ) -> MutationsExceptionGroup | None:
        """Every failure to raise on close, naming the caller's entries (None: none).

        ``group`` is what the client's ``close()`` raised: nothing, when its
        failures are tracked here.
        """
        if group is None:
            return ours
        theirs = logical_group(group, self._layout)
        if ours is None:
            return theirs
        return MutationsExceptionGroup(
            [*ours.exceptions, *theirs.exceptions],
            ours.total_entries_attempted,
        )


_SEQ: Final = operator.itemgetter(0)


def _track_failures(
    inner: BatcherLike | SyncBatcherLike,
    record: Callable[[list[FailedMutationEntryError]], None],
) -> bool:
    """Route the client's batcher's failures to ``record``; False where it cannot be done."""
    if not all(hasattr(inner, name) for name in _FLUSH_INTERNALS):
        return False
    # An instance attribute, found before the class's method: the client's
    # store stays empty, so its close() raises nothing of its own.
    inner._add_exceptions = record  # type: ignore[union-attr]
    return True
