"""Per-call statistics: rows, bytes, pages, latency and retries per bucket, and skew.

A :class:`CallStats` is filled in while a call runs. Pass one to a read or a
bulk write (``stats=CallStats()``) to inspect it afterwards, or give the table
a ``stats_hook`` that receives every finished call (to log or export it; see
:func:`..otel.stats_hook`). Collection costs a little per row, so it
happens only when someone asks for it.

Retries happen inside the Bigtable client. They are counted through the
client's metrics handlers when the client has them (google-cloud-bigtable
2.50 does): each finished RPC reports its attempts, and the ones beyond the
first are attributed to the bucket whose page was being read.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, final

from .settings import ReadSettings

__all__ = [
    "BucketStats",
    "CallStats",
    "OneRequestOutcome",
    "OneRequestResult",
    "StatsHook",
    "install_retry_counter",
    "report",
    "settings_dict",
]

_log = logging.getLogger("saltedtable.stats")


@final
@dataclass(slots=True)
class BucketStats:
    """What one bucket (or the legacy side, bucket None) did during a call.

    Attributes:
        rows: Rows read from (or entries written to) the bucket.
        bytes: Bytes of keys and cell values read (or mutation bytes written).
        pages: Page requests (ReadRows RPCs with a row limit) sent to this
            bucket alone. A small read's one request over every bucket is
            counted once, in :attr:`CallStats.requests`; its rows count here.
        seconds: Time from the start of each of those requests to its end
            (a request never waits for the caller: room for all it may
            return is reserved before it is sent).
        first_page_seconds: Time from the start of the bucket's first request
            to its first row (to its end if it returned none), or None.
        retries: Attempts beyond the first inside the client's RPCs.
    """

    rows: int = 0
    bytes: int = 0
    pages: int = 0
    seconds: float = 0.0
    first_page_seconds: float | None = None
    retries: int = 0


OneRequestResult = Literal["answered", "full", "over_budget", "failed", "skipped"]
"""How a small read's one request over every bucket went (:attr:`OneRequestOutcome.result`)."""


@final
@dataclass(frozen=True, slots=True)
class OneRequestOutcome:
    """How a small read's one request over every bucket went (``CallStats.one_request``).

    A small read (see :attr:`ReadSettings.one_request_rows
    <saltedtable.ReadSettings.one_request_rows>`) first sends one request
    naming every bucket's keys and ranges. When fewer rows come back than it
    asked for, that was the whole read; otherwise the read goes on bucket by
    bucket, and the table tries the one request less often for a while.

    Attributes:
        result: ``"answered"``: it was the whole read (fewer rows came back
            than it asked for, or an unordered read with a limit got that
            many); ``"full"``: it came back full, so there may be more;
            ``"over_budget"``: it stopped after the row that took it past the
            budget's bytes; ``"failed"``: see ``error``; ``"skipped"``: not
            sent this time, because the table's last ones came back full or
            failed.
        asked: Rows it asked for (its row limit; when skipped, what it would have).
        rows: Rows it returned.
        bytes: What the rows it returned count in the budget (keys, values and
            their objects, see :class:`~saltedtable.ReadBudget`).
        error: Why it failed: the exception's type name, or ``"cancelled"``
            ("" unless ``result`` is ``"failed"``).
        went_on: The read went on bucket by bucket after it (False when it
            answered the read, or when its failure or the caller's leaving
            ended the read).
    """

    result: OneRequestResult
    asked: int
    rows: int = 0
    bytes: int = 0
    error: str = ""
    went_on: bool = False

    @property
    def tried(self) -> bool:
        """It was sent (it was not skipped)."""
        return self.result != "skipped"

    @property
    def fitted(self) -> bool:
        """The whole read fitted in it: ``result == "answered"``."""
        return self.result == "answered"

    def describe(self) -> str:
        """What happened, in words (the end of :attr:`CallStats.strategy`)."""
        if self.result == "skipped":
            return (
                "the one request over every bucket skipped this time "
                "(the table's last ones came back full or failed)"
            )
        what = f"one request over every bucket for up to {self.asked} rows"
        if self.result == "answered":
            what += f" answered the read ({self.rows} rows)"
        elif self.result == "failed":
            what += f" failed ({self.error}) after {self.rows} rows"
        elif self.result == "over_budget":
            what += f" passed the byte budget after {self.rows} rows"
        else:
            what += f" came back full ({self.rows} rows)"
        if self.went_on:
            what += ", so the read went on bucket by bucket"
        return what


@final
@dataclass(slots=True)
class CallStats:
    """Statistics of one call (a read or a bulk write) on a salted table.

    Attributes:
        operation: ``"read_rows"``, ``"bulk_mutate_rows"``, ...
        buckets: Per-bucket statistics, keyed by bucket (None: legacy side).
        rows: Rows handed to the caller (reads) or entries written.
        started: ``time.monotonic()`` when the call began.
        elapsed: Seconds the call took (set when it ends).
        error: The exception the call ended with, if any. A caller that left a
            stream early (``break``, ``aclose()``, cancellation) is not an
            error: see ``ended_early``.
        ended_early: The caller stopped reading before the read was complete.
        settings: How a read ran: its budget, ordering, slots, sub-queries,
            limit and one-request size (None for writes).
        one_request: How a small read's one request over every bucket went
            (None: the read did not consider one; see ``settings.one_request_rows``).
        requests: ReadRows requests the read sent across every bucket.
        rounds: Rounds of requests a read with a limit took (0 without a limit).
        peak_buffered_rows: The most rows the read's merge had granted its
            buckets and not yet handed over, at any one time (see
            :class:`~saltedtable.ReadBudget`). A streamed request's row limit
            may ask the server for more than its grants; those rows are
            bounded by the budget's ``bytes`` and are not counted here.
        peak_buffered_bytes: The same in bytes, a row counted at what it costs
            as objects (see :class:`~saltedtable.ReadBudget`): a running
            request counts its byte cap, or what it returned past it; rows
            returned count until the last row of their request is handed
            over. At most the budget's ``bytes`` plus one row per bucket.
        row_bytes: The mean a row read counted in the budget (its key and values
            and its objects).
        stray_rows: Legacy-side rows a cutoff read left out because their key
            says they live on the salted side (see ``check_layout``).
    """

    operation: str = ""
    buckets: dict[int | None, BucketStats] = field(default_factory=dict)
    rows: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed: float | None = None
    error: BaseException | None = None
    ended_early: bool = False
    settings: ReadSettings | None = None
    one_request: OneRequestOutcome | None = None
    requests: int = 0
    rounds: int = 0
    peak_buffered_rows: int = 0
    peak_buffered_bytes: int = 0
    row_bytes: float = 0.0
    stray_rows: int = 0

    def bucket(self, bucket: int | None) -> BucketStats:
        """The (created on first use) statistics of ``bucket``."""
        stats = self.buckets.get(bucket)
        if stats is None:
            stats = self.buckets[bucket] = BucketStats()
        return stats

    @property
    def skew(self) -> float:
        """Rows in the busiest bucket over the mean rows per bucket (1.0 = even).

        Reads and writes spread by a good salt stay near 1. A large figure on
        a big call means one bucket does most of the work: typically one hot
        logical key, which no salt computed from that key can spread.
        """
        counts = [b.rows for b in self.buckets.values()]
        total = sum(counts)
        if not counts or total == 0:
            return 1.0
        return max(counts) / (total / len(counts))

    @property
    def strategy(self) -> str:
        """How the read ran, in words ("" for writes).

        Rendered from :attr:`settings` (the ``how:`` line of
        ``plan(query).explain()``) and :attr:`one_request`. The words may
        change between versions: a program reads the fields.
        """
        if self.settings is None:
            return ""
        text = self.settings.describe()
        if self.one_request is not None:
            text += "; " + self.one_request.describe()
        return text

    @property
    def retries(self) -> int:
        """Client-side retries across every bucket."""
        return sum(b.retries for b in self.buckets.values())

    def finish(self, error: BaseException | None = None) -> None:
        """Record the end of the call."""
        self.elapsed = time.monotonic() - self.started
        self.error = error

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (bucket keys become strings; None is "legacy")."""
        return {
            "operation": self.operation,
            "rows": self.rows,
            "elapsed": self.elapsed,
            "skew": round(self.skew, 3),
            "retries": self.retries,
            "error": None if self.error is None else repr(self.error),
            "ended_early": self.ended_early,
            "strategy": self.strategy,
            "settings": None if self.settings is None else settings_dict(self.settings),
            "one_request": None
            if self.one_request is None
            else {name: getattr(self.one_request, name) for name in _ONE_FIELDS},
            "requests": self.requests,
            "rounds": self.rounds,
            "peak_buffered_rows": self.peak_buffered_rows,
            "peak_buffered_bytes": self.peak_buffered_bytes,
            "row_bytes": round(self.row_bytes, 1),
            "stray_rows": self.stray_rows,
            "buckets": {
                ("legacy" if k is None else str(k)): {
                    "rows": b.rows,
                    "bytes": b.bytes,
                    "pages": b.pages,
                    "seconds": round(b.seconds, 6),
                    "first_page_seconds": b.first_page_seconds,
                    "retries": b.retries,
                }
                for k, b in sorted(self.buckets.items(), key=lambda kv: (kv[0] is not None, kv[0]))
            },
        }


_ONE_FIELDS: Final = ("result", "asked", "rows", "bytes", "error", "went_on")


def settings_dict(settings: ReadSettings) -> dict[str, Any]:
    """A read's settings as flat fields (the budget as ``budget_rows`` and ``budget_bytes``)."""
    return {
        "ordered": settings.ordered,
        "budget_rows": settings.budget.rows,
        "budget_bytes": settings.budget.bytes,
        "slots": settings.slots,
        "subqueries": settings.subqueries,
        "limit": settings.limit,
        "one_request_rows": settings.one_request_rows,
    }


StatsHook = Callable[[CallStats], None]
"""Called with every finished call's statistics (see ``stats_hook=`` on the tables)."""


def report(stats: CallStats, error: BaseException | None, hook: StatsHook | None) -> None:
    """End a call's statistics: log a summary and hand them to the hook."""
    stats.finish(error)
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug(
            "%s: %d rows over %d bucket(s) in %.3fs, skew %.2f, %d retries%s",
            stats.operation,
            stats.rows,
            len(stats.buckets),
            stats.elapsed or 0.0,
            stats.skew,
            stats.retries,
            "" if error is None else f", failed: {error!r}",
        )
    if hook is not None:
        try:
            hook(stats)
        except Exception:  # a broken exporter must not break the call
            _log.exception("saltedtable stats_hook raised")


#: The bucket statistics of the page being read in this task, for the retry counter.
_current_bucket: Final = contextvars.ContextVar[BucketStats | None](
    "saltedtable_current_bucket", default=None
)


class _RetryCounter:
    """A Bigtable client metrics handler that credits retries to the current bucket."""

    def __init__(self, **kwargs: Any) -> None:
        pass

    def on_operation_complete(self, op: Any) -> None:
        bucket = _current_bucket.get()
        attempts = len(getattr(op, "completed_attempts", ()) or ())
        if bucket is not None and attempts > 1:
            bucket.retries += attempts - 1

    def on_attempt_complete(self, attempt: Any, op: Any) -> None:
        pass

    def close(self) -> None:
        pass


_RETRY_COUNTER: Final = _RetryCounter()


def install_retry_counter(table: Any) -> bool:
    """Subscribe the retry counter to the table's client metrics, once.

    Called when a call first asks for statistics, not before: the handler
    hooks into the client's private metrics controller. Where that is not
    possible (another client version, a fake table) retries are not counted,
    and a warning says so once.

    Returns:
        Whether retries are counted.
    """
    client = getattr(table, "client", None)
    controller = getattr(client, "_metrics", None)
    handlers = getattr(controller, "handlers", None)
    if controller is None or not isinstance(handlers, list):
        kind = type(table).__qualname__
        if kind not in _CANNOT_COUNT:
            _CANNOT_COUNT.add(kind)
            _log.warning(
                "saltedtable cannot count client retries for %s tables (no client metrics "
                "handlers to hook into); BucketStats.retries stays 0",
                kind,
            )
        return False
    if not any(h is _RETRY_COUNTER for h in handlers):
        controller.add_handler(_RETRY_COUNTER)
    return True


_CANNOT_COUNT: Final[set[str]] = set()


def current_bucket() -> contextvars.ContextVar[BucketStats | None]:
    """The context variable the table sets around each page read."""
    return _current_bucket
