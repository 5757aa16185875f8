# Generated from saltedtable/_async/guard.py by .ci/unasync.py: do not edit.
# Edit the async source, then run `make generate`.
"""The scheme guard's driver: its reads, writes and layout sampling for one table object.

:class:`SyncTableGuard` does the I/O around the decisions of
:class:`~.._guard.decisions.GuardCore` (see :mod:`.._guard.decisions`);
the sync ``SyncTableGuard`` (``_sync_autogen/guard.py``) is generated from this module
by ``.ci/unasync.py``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Generator
from typing import Any

from google.api_core.exceptions import FailedPrecondition, GoogleAPICallError, PermissionDenied
from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery

from .._contracts import AttemptTimeout, Timeout
from .._engine.runtime_threads import Lock, capacity, fan_out, run_blocking, slot
from .._engine.slots_threads import Slots
from .._exceptions import LayoutError
from .._guard.decisions import (
    RECORD_ONLY,
    SAMPLE_REQUESTS,
    STORE_SAMPLE_ROWS,
    Found,
    GuardCore,
    Step,
    found_record,
    guard_wait_exceeded,
    layout_error,
    layout_offenders,
    missing_family,
    operation_only,
    sample_queries,
)
from .._guard.families import Placement, TableSchema
from .._read.timeouts import GuardTime, guard_limit, guard_timeouts, time_left
from .._scheme.layout import Layout
from .._scheme.salt import SCHEME_ROW_KEY
from .table_like import SyncTableLike

__all__ = ["SyncTableGuard"]


class SyncTableGuard(GuardCore):
    """The guard of one table object: check, store the record on the first write.

    Args:
        table: The physical table.
        layout: The layout the table object uses.
        enabled: False switches the guard off (nothing is read or written).
        limiter: The table's request slots, which the sample taken before a
            record is stored keeps to (None: slots of its own, one per request).
        **options: See :class:`GuardCore`.
    """

    def __init__(
        self,
        table: SyncTableLike,
        layout: Layout,
        *,
        enabled: bool = True,
        limiter: Slots | None = None,
        **options: Any,
    ) -> None:
        options.setdefault("view", getattr(table, "authorized_view_id", None) is not None)
        super().__init__(layout, enabled=enabled, **options)
        self._table = table
        self._lock = Lock()
        self._limiter = limiter if limiter is not None else Slots(SAMPLE_REQUESTS + 1)

    def check(self, limit: GuardTime = None) -> bool:
        """Before any operation: read the stored record (once, or again when due); refuse another.

        Args:
            limit: The operation's deadline and attempt timeout, which the
                guard's own requests keep to.

        Returns:
            Whether the guard was not settled yet: the operation waited for it,
            or sent its requests, and has less time left.
        """
        return self._settle(None, limit)

    def before_write(self, family: str | None, limit: GuardTime = None) -> bool:
        """Before a write: check, and store the record if the table has none yet."""
        return self._settle(family, limit)

    def settled(self) -> bool:
        """Whether an operation now needs no I/O of the guard first (one clock read at most)."""
        until = self.clear_until
        return until == math.inf or (until > -math.inf and time.monotonic() < until)

    def within(
        self, family: str | None, operation: Timeout, attempt: AttemptTimeout, kind: str
    ) -> Timeout:
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
        if self.settled():
            return operation
        if not self._pending(family):
            return operation
        limit = guard_limit(self._table, operation, attempt, kind)
        self._settle(family, limit)
        return time_left(limit, operation)  # what the wait for the guard, or its reads, left

    def _settle(self, family: str | None, limit: GuardTime) -> bool:
        if not self._pending(family):
            return False
        # Another operation may be checking the record: wait for it within this
        # operation's own deadline, not for as long as that one takes.
        if not self._lock.acquire(None if limit is None else limit[0]):
            raise guard_wait_exceeded()
        try:
            if self._pending(family):  # (else another operation settled it meanwhile)
                self._run(self._judging(family), limit)
        finally:
            self._lock.release()
        return True

    def ensure(
        self, *, family: str | None, override: bool = False, sample_rows: int = STORE_SAMPLE_ROWS
    ) -> None:
        """The explicit guard (``guard_scheme``): check, store if absent, or replace.

        A record is stored (or replaces another) only after a sample of
        ``sample_rows`` rows per request fits this layout (see :attr:`outcome`).
        """
        if self._refuse_unstorable(family, override):
            with self._lock:
                self._error = None
                if self._state in ("refused", "unstored"):
                    self._state = "unread"
                steps = self._judging(family, override, explicit=True, sample_rows=sample_rows)
                self._run(steps, None)

    def _stored_record(self, limit: GuardTime = None) -> Found:
        return found_record(
            self._table.read_row(SCHEME_ROW_KEY, row_filter=RECORD_ONLY, **guard_timeouts(limit))
        )

    def _read_schema(self, limit: GuardTime = None) -> tuple[TableSchema | None, str | None]:
        reader = self._schema_reader
        if self._schema is None and reader is not None:
            try:
                self._schema = run_blocking(reader, self._schema_timeout(limit))
            except GoogleAPICallError as exc:  # a timeout too: as for an unreadable schema
                self._schema_failed(exc)
                self._schema_reader = None  # one try per object
        return self._schema_answer()

    def _create(self, placement: Placement, limit: GuardTime) -> bool | None:
        """Store the record if the row is empty: True stored, None taken, False no such family."""
        assert placement.family is not None
        mutations = self._record_mutations("create", placement.family, self.record)
        try:
            try:
                taken = self._table.check_and_mutate_row(
                    SCHEME_ROW_KEY,
                    None,
                    false_case_mutations=mutations,
                    **operation_only(guard_timeouts(limit)),
                )
                # True: the row held cells (another writer's record), so nothing was written.
                return None if taken is True else True
            except FailedPrecondition as exc:
                self._plain_store_warning(exc)
            self._table.mutate_row(SCHEME_ROW_KEY, mutations, **guard_timeouts(limit))
        except GoogleAPICallError as exc:
            if placement.probe and missing_family(exc):
                return False
            raise
        return True

    def _run(self, steps: Generator[Step, Any, None], limit: GuardTime) -> None:
        answer: Any = None
        with contextlib.suppress(StopIteration):
            while True:
                kind, arg = steps.send(answer)
                if kind == "read":
                    try:
                        answer = self._stored_record(limit)
                    except PermissionDenied as exc:
                        if not self._view:
                            raise
                        self._blind(exc)
                        return
                elif kind == "schema":
                    answer = self._read_schema(limit)
                elif kind == "sample":
                    answer = self._read_samples(arg, self._limiter, limit)
                elif kind == "create":
                    answer = self._create(arg, limit)
                else:
                    family, record = arg
                    answer = None
                    self._table.mutate_row(
                        SCHEME_ROW_KEY,
                        self._record_mutations(kind, family, record),
                        **guard_timeouts(limit),
                    )

    def _read_samples(
        self, queries: list[ReadRowsQuery], limiter: Slots, limit: GuardTime = None
    ) -> list[list[bytes]]:
        """The keys each of ``queries`` returns, each request holding one of the table's slots."""

        def sample(i: int) -> list[bytes] | Exception:
            try:
                with slot(limiter):
                    # The limit ends the stream on the server side: reading it
                    # to the end leaves no RPC behind.
                    stream = self._table.read_rows_stream(queries[i], **guard_timeouts(limit))
                    return [row.row_key for row in stream]
            except Exception as exc:  # the first one is raised as it is, below
                return exc

        samples: list[list[bytes]] = []
        for keys in fan_out(sample, len(queries), limit=capacity(limiter)):
            if isinstance(keys, Exception):
                raise keys
            samples.append(keys)
        return samples

    def check_layout(self, *, sample_rows: int, limiter: Slots) -> None:
        """Sample the key space and refuse rows that do not fit the layout.

        Also refuses a record stored in a family whose GC rule can collect it
        (when the schema can be read).

        Args:
            sample_rows: Rows read by each request of the sample (see
                :func:`~.._guard.decisions.sample_queries`).
            limiter: The table's request slots: each sample holds one.

        Raises:
            LayoutError: With up to five offending keys and the way out.
        """
        if not self.checked:
            found = self._stored_record()
            self._stored, self._stored_family = found if found is not None else (None, None)
        stored = self._stored
        samples = self._read_samples(sample_queries(self._layout, sample_rows, stored), limiter)
        offenders = layout_offenders(self._layout, samples, stored, self._hot)
        if offenders:
            raise layout_error(self._layout, offenders)
        if stored is not None:
            schema, _ = self._read_schema()
            problem = self._family_problem(schema, stored)
            if problem is not None:
                raise LayoutError(problem)
