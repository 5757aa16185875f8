"""The scheme guard: check a table's stored layout record, store it, sample the rows.

:class:`TableGuard` (async) and :class:`SyncTableGuard` (sync) do the I/O for
one table object around the decisions of :class:`GuardCore` and the pure
rules of ``_record``: each reads the record on the object's first operation
(one request per object lifetime; concurrent first operations share it),
refuses a different layout with :class:`~saltedtable.SchemeMismatchError`,
and, when the table has no record yet, stores one with the first write that
names a column family. The record is created only if the row is still empty
(a conditional mutation), so two services starting on a new table at once
agree on one record.

:meth:`TableGuard.check_layout` (and the sync one) samples the key space and
refuses rows that do not fit the layout (a migration's copies and legacy rows
are expected in the states ``_migration`` describes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Generator, Sequence
from typing import Any, Final

import anyio
from google.api_core.exceptions import FailedPrecondition
from google.cloud.bigtable.data.mutations import DeleteAllFromRow, Mutation, SetCell
from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery, RowRange
from google.cloud.bigtable.data.row_filters import (
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    ColumnQualifierRegexFilter,
    RowFilterChain,
    StripValueTransformerFilter,
)

from ._exceptions import LayoutError, SchemeMismatchError
from ._layout import Layout
from ._migration import tolerates_copies, tolerates_legacy_rows
from ._plan import PageCursor, SubQuery
from ._record import (
    SCHEME_QUALIFIER,
    SCHEME_ROW_KEY,
    decode_layout,
    describe_layout,
    encode_layout,
    family_of,
    guard_action,
    layout_differences,
    open_differences,
    record_of_row,
)
from ._salt import prefix_end
from ._timeouts import GuardTime, deadline_exceeded, guard_limit, guard_timeouts, time_left

__all__ = [
    "RECORD_ONLY",
    "SCHEME_QUALIFIER",
    "SCHEME_ROW_KEY",
    "GuardCore",
    "SchemeMismatchError",
    "SyncTableGuard",
    "TableGuard",
    "decode_layout",
    "describe_layout",
    "encode_layout",
    "family_of",
    "guard_action",
    "layout_differences",
    "layout_offenders",
    "open_differences",
    "operation_only",
    "record_of_row",
]


def operation_only(timeouts: dict[str, float]) -> dict[str, float]:
    # check_and_mutate_row takes an operation timeout only.
    return {k: v for k, v in timeouts.items() if k == "operation_timeout"}


_log = logging.getLogger("saltedtable.guard")


#: The record's own cell, latest version only.
RECORD_ONLY: Final = RowFilterChain(
    [ColumnQualifierRegexFilter(SCHEME_QUALIFIER), CellsColumnLimitFilter(1)]
)

#: Keys only: what the layout sampling needs of each row.
KEYS_ONLY: Final = RowFilterChain([CellsRowLimitFilter(1), StripValueTransformerFilter(True)])


def sample_queries(
    layout: Layout, sample_rows: int, stored: dict[str, Any] | None = None
) -> list[ReadRowsQuery]:
    """The reads :func:`layout_offenders` judges: the first rows of each salt prefix, and beyond."""
    queries = [
        ReadRowsQuery(
            row_ranges=RowRange(prefix, prefix_end(prefix) or None),
            limit=sample_rows,
            row_filter=KEYS_ONLY,
        )
        for prefix in layout.scheme.prefixes
    ]
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
    layout: Layout, samples: Sequence[Sequence[bytes]], stored: dict[str, Any] | None = None
) -> list[str]:
    """Why sampled keys do not fit the layout (empty: they all fit).

    ``samples`` holds the keys each query of :func:`sample_queries` returned,
    in order; ``stored`` is the table's record (a migration in progress
    expects copies of legacy rows in the buckets).
    """
    offenders: list[str] = []
    prefixes = len(layout.scheme.prefixes)
    copies = tolerates_copies(stored)
    for i, keys in enumerate(samples):
        for key in keys:
            if i < prefixes:
                problem = layout.misplaced(key, copies=copies)
            else:
                problem = layout.unexpected_outside(key)
            if problem is not None:
                offenders.append(problem)
    return offenders


def layout_error(layout: Layout, offenders: Sequence[str]) -> LayoutError:
    """The error for sampled rows that do not fit the layout."""
    shown = "\n  ".join(offenders[:5])
    cutoff = "" if layout.cutoff is None else " with " + repr(layout.cutoff)
    return LayoutError(
        f"{len(offenders)} sampled row(s) do not fit the layout of {layout.scheme}{cutoff}, "
        f"e.g.\n  {shown}\nIf these are older unsalted keys that look salted, give the "
        "scheme a marker (SaltScheme(..., marker=b'~')) so salted keys cannot meet them; if "
        "the table was written with another bucket count or hash, open it with that scheme."
    )


def _fresh(error: BaseException) -> BaseException:
    """A copy of a refusal to raise again (one object raised many times grows its traceback)."""
    copy = type(error).__new__(type(error), *error.args)
    copy.__dict__.update(error.__dict__)
    return copy


class GuardCore:
    """The guard's state and decisions for one table object, without I/O.

    The state is one of ``"off"`` (the guard is switched off, or the table
    cannot hold a record), ``"unread"`` (no operation has read the record
    yet), ``"absent"`` (the table has no record), ``"agrees"`` or
    ``"refused"`` (the stored record differs: every operation raises a copy
    of the refusal). An operation asks :meth:`_pending` whether it must do
    I/O first, and again after taking the driver's lock, so that operations
    waiting for another's check see its outcome (a refusal included).

    The drivers (:class:`TableGuard` and :class:`SyncTableGuard`, below)
    run :meth:`_judging`, a generator of I/O steps: ``("read", None)`` asks
    for the stored record (sent back in), ``("create", family)`` for a
    conditional write of the record, ``("replace", family)`` for overwriting it.

    Args:
        layout: The layout the table object uses.
        enabled: False switches the guard off (nothing is read or written).
    """

    def __init__(self, layout: Layout, *, enabled: bool = True) -> None:
        self._layout = layout
        self._record = describe_layout(layout.scheme, layout.cutoff)
        # The reserved row lies inside a salt prefix range for some schemes
        # (a raw phoenix byte 0xff): such tables cannot hold a record.
        self._storable = not layout.scheme.has_prefix(SCHEME_ROW_KEY)
        self._state = "unread" if enabled and self._storable else "off"
        self._stored: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._warned_plain_store = False

    @property
    def record(self) -> dict[str, Any]:
        """The record of this table object's layout."""
        return self._record

    @property
    def stored(self) -> dict[str, Any] | None:
        """The record found in the table by the last check (None: none, or not read yet)."""
        return self._stored

    @property
    def checked(self) -> bool:
        """Whether the record was read (or the guard is off)."""
        return self._state != "unread"

    def _pending(self, family: str | None) -> bool:
        """Whether an operation (a write naming ``family``, or None) must do I/O first.

        Raises:
            SchemeMismatchError: A copy of the refusal an earlier check made.
        """
        state = self._state
        if state == "refused":
            assert self._error is not None
            raise _fresh(self._error)
        return state == "unread" or (state == "absent" and family is not None)

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

    def _judging(
        self, family: str | None, override: bool = False
    ) -> Generator[tuple[str, str | None], dict[str, Any] | None, None]:
        try:
            stored = yield ("read", None)
            action = guard_action(stored, self._record, family=family, override=override)
            if action == "create":
                # Only if the row is still empty: two writers agree on one record.
                yield ("create", family)
                stored = yield ("read", None)
                if stored is None:
                    raise LayoutError(f"the layout record {SCHEME_ROW_KEY!r} did not persist")
                guard_action(stored, self._record, family=family)  # the other writer's?
            elif action == "replace":
                _log.warning("replacing the stored salt layout %s with %s", stored, self._record)
                yield ("replace", family)
                stored = self._record
        except LayoutError as exc:
            self._error = exc
            self._state = "refused"
            raise
        self._stored = stored
        if self._state != "off":
            self._state = "absent" if stored is None else "agrees"

    def _record_mutations(self, kind: str, family: str) -> list[Mutation]:
        cell = SetCell(family, SCHEME_QUALIFIER, encode_layout(self._record))
        return [cell] if kind == "create" else [DeleteAllFromRow(), cell]

    def _plain_store_warning(self, error: BaseException) -> None:
        """Once per table object: the app profile refused the conditional create."""
        if not self._warned_plain_store:
            self._warned_plain_store = True
            _log.warning(
                "the app profile refuses single-row transactions (%s): the layout record "
                "is stored with a plain write and read back; two services starting at "
                "once on this empty table with different layouts are then not told "
                "apart. Store it once through a profile with transactional writes "
                "(guard_scheme(family=...)) to close that window.",
                error,
            )


def _guard_wait_exceeded() -> Exception:
    return deadline_exceeded(
        "operation_timeout exceeded waiting for another operation's check of the layout record"
    )


class TableGuard(GuardCore):
    """The guard of one async table object: check once, store the record on the first write.

    Args:
        table: The physical table.
        layout: The layout the table object uses.
        enabled: False switches the guard off (nothing is read or written).
    """

    def __init__(self, table: Any, layout: Layout, *, enabled: bool = True) -> None:
        super().__init__(layout, enabled=enabled)
        self._table = table
        self._lock: asyncio.Lock | None = None

    async def check(self, limit: GuardTime = None) -> bool:
        """Before any operation: read the stored record once and refuse a different one.

        Args:
            limit: The operation's deadline and attempt timeout, which the
                guard's own requests keep to.

        Returns:
            Whether the guard was not settled yet: the operation waited for it,
            or sent its requests, and has less time left.
        """
        return await self._settle(None, limit)

    async def before_write(self, family: str | None, limit: GuardTime = None) -> bool:
        """Before a write: check, and store the record if the table has none yet."""
        return await self._settle(family, limit)

    async def within(self, family: str | None, operation: Any, attempt: Any, kind: str) -> Any:
        """Settle the guard before an operation with these timeouts; the operation_timeout left.

        A settled guard costs one state check. Otherwise the record is read
        (and, for a write naming ``family``, stored) within the operation's
        own budget, and the operation gets what is left of it.

        Args:
            family: The column family a write names (None: a read).
            operation: ``operation_timeout`` as the caller gave it.
            attempt: ``attempt_timeout`` as the caller gave it (None: the operation's).
            kind: Which of the table's defaults apply (see ``resolve_timeouts``).
        """
        if not self._pending(family):
            return operation
        limit = guard_limit(self._table, operation, attempt, kind)
        await self._settle(family, limit)
        return time_left(limit, operation)  # what the wait for the guard, or its reads, left

    async def _settle(self, family: str | None, limit: GuardTime) -> bool:
        if not self._pending(family):
            return False
        # Another operation may be checking the record: wait for it within this
        # operation's own deadline, not for as long as that one takes.
        lock = self._locked()
        if limit is None:
            await lock.acquire()
        else:
            acquired = False
            with anyio.move_on_after(limit[0] - time.monotonic()):
                await lock.acquire()
                acquired = True
            if not acquired:
                raise _guard_wait_exceeded()
        try:
            if self._pending(family):  # (else another operation settled it meanwhile)
                await self._run(self._judging(family), limit)
        finally:
            lock.release()
        return True

    async def ensure(self, *, family: str | None, override: bool = False) -> None:
        """The explicit guard (``guard_scheme``): check, store if absent, or replace."""
        if self._refuse_unstorable(family, override):
            async with self._locked():
                self._error = None
                if self._state == "refused":
                    self._state = "unread"
                await self._run(self._judging(family, override), None)

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _stored_record(self, limit: GuardTime = None) -> dict[str, Any] | None:
        return record_of_row(
            await self._table.read_row(
                SCHEME_ROW_KEY, row_filter=RECORD_ONLY, **guard_timeouts(limit)
            )
        )

    async def _run(
        self,
        steps: Generator[tuple[str, str | None], dict[str, Any] | None, None],
        limit: GuardTime,
    ) -> None:
        answer: dict[str, Any] | None = None
        try:
            while True:
                kind, family = steps.send(answer)
                answer = None
                if kind == "read":
                    answer = await self._stored_record(limit)
                    continue
                assert family is not None
                mutations = self._record_mutations(kind, family)
                if kind == "create":
                    try:
                        await self._table.check_and_mutate_row(
                            SCHEME_ROW_KEY,
                            None,
                            false_case_mutations=mutations,
                            **operation_only(guard_timeouts(limit)),
                        )
                        continue
                    except FailedPrecondition as exc:
                        self._plain_store_warning(exc)
                await self._table.mutate_row(SCHEME_ROW_KEY, mutations, **guard_timeouts(limit))
        except StopIteration:
            pass

    async def check_layout(self, *, sample_rows: int, limiter: anyio.CapacityLimiter) -> None:
        """Sample the key space and refuse rows that do not fit the layout.

        Raises:
            LayoutError: With up to five offending keys and the way out.
        """
        stored = self._stored if self.checked else await self._stored_record()
        queries = sample_queries(self._layout, sample_rows, stored)
        samples: list[list[bytes]] = [[] for _ in queries]
        errors: list[Exception] = []

        async def sample(i: int) -> None:
            try:
                async with limiter:
                    # The limit ends the stream on the server side: reading it
                    # to the end leaves no RPC behind.
                    stream = await self._table.read_rows_stream(queries[i])
                    samples[i] = [row.row_key async for row in stream]
            except Exception as exc:  # the first one is raised as it is, below
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(len(queries)):
                tg.start_soon(sample, i)
        if errors:
            raise errors[0]
        offenders = layout_offenders(self._layout, samples, stored)
        if offenders:
            raise layout_error(self._layout, offenders)


# -- the guard -----------------------------------------------------------------------------


class SyncTableGuard(GuardCore):
    """The guard of one sync table object (see :class:`TableGuard`)."""

    def __init__(self, table: Any, layout: Layout, *, enabled: bool = True) -> None:
        super().__init__(layout, enabled=enabled)
        self._table = table
        self._lock = threading.Lock()

    def check(self, limit: GuardTime = None) -> bool:
        """Before any operation: read the stored record once and refuse a different one.

        Returns:
            Whether the guard was not settled yet: the operation waited for it,
            or sent its requests, and has less time left.
        """
        return self._settle(None, limit)

    def before_write(self, family: str | None, limit: GuardTime = None) -> bool:
        """Before a write: check, and store the record if the table has none yet."""
        return self._settle(family, limit)

    def within(self, family: str | None, operation: Any, attempt: Any, kind: str) -> Any:
        """Settle the guard before an operation with these timeouts; the operation_timeout left.

        A settled guard costs one state check. Otherwise the record is read
        (and, for a write naming ``family``, stored) within the operation's
        own budget, and the operation gets what is left of it.

        Args:
            family: The column family a write names (None: a read).
            operation: ``operation_timeout`` as the caller gave it.
            attempt: ``attempt_timeout`` as the caller gave it (None: the operation's).
            kind: Which of the table's defaults apply (see ``resolve_timeouts``).
        """
        if not self._pending(family):
            return operation
        limit = guard_limit(self._table, operation, attempt, kind)
        self._settle(family, limit)
        return time_left(limit, operation)  # what the wait for the guard, or its reads, left

    def _settle(self, family: str | None, limit: GuardTime) -> bool:
        if not self._pending(family):
            return False
        # Another thread may be checking the record: wait for it within this
        # operation's own deadline, not for as long as that one takes.
        wait = -1.0 if limit is None else max(0.0, limit[0] - time.monotonic())
        if not self._lock.acquire(timeout=wait):
            raise _guard_wait_exceeded()
        try:
            if self._pending(family):  # (else another thread settled it meanwhile)
                self._run(self._judging(family), limit)
        finally:
            self._lock.release()
        return True

    def ensure(self, *, family: str | None, override: bool = False) -> None:
        """The explicit guard (``guard_scheme``): check, store if absent, or replace."""
        if self._refuse_unstorable(family, override):
            with self._lock:
                self._error = None
                if self._state == "refused":
                    self._state = "unread"
                self._run(self._judging(family, override), None)

    def _stored_record(self, limit: GuardTime = None) -> dict[str, Any] | None:
        return record_of_row(
            self._table.read_row(SCHEME_ROW_KEY, row_filter=RECORD_ONLY, **guard_timeouts(limit))
        )

    def _run(
        self,
        steps: Generator[tuple[str, str | None], dict[str, Any] | None, None],
        limit: GuardTime,
    ) -> None:
        answer: dict[str, Any] | None = None
        with contextlib.suppress(StopIteration):
            while True:
                kind, family = steps.send(answer)
                answer = None
                if kind == "read":
                    answer = self._stored_record(limit)
                    continue
                assert family is not None
                mutations = self._record_mutations(kind, family)
                if kind == "create":
                    try:
                        self._table.check_and_mutate_row(
                            SCHEME_ROW_KEY,
                            None,
                            false_case_mutations=mutations,
                            **operation_only(guard_timeouts(limit)),
                        )
                        continue
                    except FailedPrecondition as exc:
                        self._plain_store_warning(exc)
                self._table.mutate_row(SCHEME_ROW_KEY, mutations, **guard_timeouts(limit))

    def check_layout(self, *, sample_rows: int, threads: int) -> None:
        """Sample the key space and refuse rows that do not fit the layout."""
        stored = self._stored if self.checked else self._stored_record()
        queries = sample_queries(self._layout, sample_rows, stored)

        def sample(query: ReadRowsQuery) -> list[bytes]:
            # The limit ends the stream on the server side: reading it to the
            # end leaves no RPC behind.
            return [row.row_key for row in self._table.read_rows_stream(query)]

        with concurrent.futures.ThreadPoolExecutor(min(threads, len(queries))) as pool:
            samples = list(pool.map(sample, queries))
        offenders = layout_offenders(self._layout, samples, stored)
        if offenders:
            raise layout_error(self._layout, offenders)
