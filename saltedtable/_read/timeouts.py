"""Time budgets as the client resolves them, and the errors of a budget spent.

The client checks and resolves ``operation_timeout`` and ``attempt_timeout``
before it sends anything; every salted method does the same, before its
layout guard or any sub-scan sends a request, so that the whole operation,
guard included, keeps to the caller's budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import final

from google.api_core.exceptions import DeadlineExceeded
from google.cloud.bigtable.data import TABLE_DEFAULT

from .._contracts import GuardTimeouts, RequestTimeouts, Retryable, TableDefaults, Timeout

__all__ = [
    "GuardTime",
    "Timeouts",
    "check_timeouts",
    "deadline_exceeded",
    "guard_limit",
    "guard_timeouts",
    "request_timeouts",
    "resolve_timeouts",
    "slot_timeout",
    "time_left",
]


@final
@dataclass(frozen=True, slots=True)
class Timeouts:
    """A read's resolved time budget and retry policy."""

    #: Seconds for the whole read, every sub-scan included.
    operation: float
    #: Seconds for each request, at most.
    attempt: float
    #: Errors the client retries within the budget.
    retryable: Retryable


def check_timeouts(
    operation: float | TABLE_DEFAULT | None, attempt: float | TABLE_DEFAULT | None
) -> None:
    """Refuse timeouts given explicitly that the client would refuse, as it would.

    The client checks them before it sends anything; so does every method here,
    before the layout guard sends its request. (The table's defaults are the
    wrapped table's to check.)
    """
    if not isinstance(operation, TABLE_DEFAULT):
        if operation is None:
            raise ValueError("operation_timeout cannot be None")
        if operation <= 0:
            raise ValueError("operation_timeout must be greater than 0")
    if not isinstance(attempt, TABLE_DEFAULT) and attempt is not None and attempt <= 0:
        raise ValueError("attempt_timeout must be greater than 0")


def resolve_timeouts(
    table: TableDefaults,
    operation: float | TABLE_DEFAULT | None,
    attempt: float | TABLE_DEFAULT | None,
    kind: str,
) -> tuple[float, float]:
    """Timeouts as the client resolves them: the table's defaults, attempt capped, validated.

    Args:
        table: The wrapped table (its ``default_*`` attributes).
        operation: ``operation_timeout`` as the caller gave it.
        attempt: ``attempt_timeout`` as the caller gave it.
        kind: ``"read_rows"``, ``"mutate_rows"`` or ``"default"``: which defaults.

    Raises:
        ValueError: With the client's messages, for a timeout that is None or not positive.
    """
    prefix = "" if kind == "default" else f"{kind}_"
    op: float | None = (
        getattr(table, f"default_{prefix}operation_timeout")
        if isinstance(operation, TABLE_DEFAULT)
        else operation
    )
    at: float | None = (
        getattr(table, f"default_{prefix}attempt_timeout")
        if isinstance(attempt, TABLE_DEFAULT)
        else attempt
    )
    if op is None:
        raise ValueError("operation_timeout cannot be None")
    if at is None:
        at = op
    elif op:
        at = min(at, op)
    if op <= 0:
        raise ValueError("operation_timeout must be greater than 0")
    if at <= 0:
        raise ValueError("attempt_timeout must be greater than 0")
    return op, at


def deadline_exceeded(message: str) -> DeadlineExceeded:
    """The client's own error for a read that ran out of its operation_timeout."""
    return DeadlineExceeded(message)  # type: ignore[no-untyped-call]


def slot_timeout(timeouts: Timeouts, slots: float) -> DeadlineExceeded:
    """The error of a request that waited for a concurrency slot past the deadline."""
    return deadline_exceeded(
        f"operation_timeout of {timeouts.operation:0.1f}s exceeded waiting for a sub-scan slot "
        f"(max_concurrent_subscans={slots:g}, all busy)"
    )


def request_timeouts(deadline: float, timeouts: Timeouts) -> RequestTimeouts:
    """The timeouts of the next request: what is left of the read's budget.

    Raises:
        DeadlineExceeded: Nothing is left.
    """
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise deadline_exceeded(f"operation_timeout of {timeouts.operation:0.1f}s exceeded")
    return {
        "operation_timeout": remaining,
        "attempt_timeout": min(timeouts.attempt, remaining),
        "retryable_errors": timeouts.retryable,
    }


#: When the guard's own requests must end, and the longest each may take: the
#: calling operation's deadline (``time.monotonic()``) and attempt timeout.
#: None: the table's defaults (an operation with no time budget of its own).
GuardTime = tuple[float, float] | None


def guard_timeouts(limit: GuardTime) -> GuardTimeouts:
    """The timeouts of a guard request within ``limit`` (empty: the table's defaults).

    Raises:
        DeadlineExceeded: The operation's time is already spent.
    """
    if limit is None:
        return {}
    deadline, attempt = limit
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise deadline_exceeded("operation_timeout exceeded while checking the layout record")
    return {"operation_timeout": remaining, "attempt_timeout": min(attempt, remaining)}


def guard_limit(
    table: TableDefaults,
    operation: float | TABLE_DEFAULT | None,
    attempt: float | TABLE_DEFAULT | None,
    kind: str,
) -> GuardTime:
    """The time the layout guard may take before an operation with these timeouts.

    Args:
        table: The wrapped table (its defaults).
        operation: ``operation_timeout`` as the caller gave it (already checked).
        attempt: ``attempt_timeout`` as the caller gave it (None: the operation's).
        kind: Which of the table's defaults apply (see :func:`resolve_timeouts`).
    """
    op, at = resolve_timeouts(table, operation, attempt, kind)
    return (time.monotonic() + op, at)


def time_left(limit: GuardTime, given: Timeout) -> Timeout:
    """The operation timeout left for the call after the guard spent part of ``limit``."""
    if limit is None:
        return given
    return max(limit[0] - time.monotonic(), 1e-3)
