"""What the async and the sync salted tables share as facades.

Both tables are thin facades with one I/O call per method; everything around
that call that does no I/O lives here, written once: the constructor's
argument checks, ``TableAsync``'s attributes (each reads and writes the
wrapped table's own, so code that logs or inspects a table keeps working),
the filter sent for a bucket, a read's plan, the result of
``read_rows_sharded``, and the bookkeeping of ``bulk_mutate_rows``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry
from google.cloud.bigtable.data.exceptions import (
    FailedQueryShardError,
    ShardedReadRowsExceptionGroup,
)
from google.cloud.bigtable.data.mutations import Mutation
from google.cloud.bigtable.data.read_modify_write_rules import ReadModifyWriteRule
from google.cloud.bigtable.data.read_rows_query import RowRange
from google.cloud.bigtable.data.row import Row
from google.cloud.bigtable.data.row_filters import RowFilter

from ._contracts import AttemptTimeout, Retryable, TableDefaults, Timeout
from ._engine.budget import DEFAULT_MAX_CONCURRENT_SUBSCANS, ReadBudget
from ._guard.record import family_of
from ._read.plan import ReadPlan, plan_reads, rewrite_filter
from ._read.query import as_query, check_filter, is_reversed
from ._read.settings import ReadSettings
from ._read.stats import CallStats, StatsHook, report
from ._read.timeouts import Timeouts, check_timeouts, resolve_timeouts
from ._scheme.cutoff import CutoffPolicy
from ._scheme.hot import HotLayout
from ._scheme.layout import Layout, samples_in_range
from ._scheme.salt import SaltScheme, to_key
from ._write import physical_keys

__all__ = [
    "DEFAULT_MAX_CONCURRENT_SUBSCANS",
    "SHARDED_CONCURRENCY",
    "Query",
    "TableAttributes",
    "bulk_prepare",
    "bulk_report",
    "check_arguments",
    "check_row_key",
    "filter_for",
    "plan_for",
    "read_for",
    "read_timeouts",
    "samples_for",
    "sharded_refused",
    "sharded_result",
    "use_client_internals",
]

#: The client's own cap for read_rows_sharded, kept so behaviour matches.
SHARDED_CONCURRENCY: Final = 10

Query = ReadRowsQuery | Mapping[str, Any]


def check_arguments(
    table: object,
    scheme: object,
    cutoff: object,
    budget: object,
    max_concurrent_subscans: int,
) -> None:
    """Refuse the constructor arguments of a salted table that cannot work.

    Raises:
        TypeError: ``table`` is None, or ``scheme``/``cutoff``/``budget`` of the wrong type.
        ValueError: ``max_concurrent_subscans`` below 1.
    """
    if table is None:
        raise TypeError("table must be a Bigtable table (client.get_table(...)), got None")
    if isinstance(scheme, Layout):
        if cutoff is not None:
            raise TypeError("give the cutoff inside the Layout, or a SaltScheme and cutoff=")
    elif not isinstance(scheme, SaltScheme):
        raise TypeError(f"scheme must be a SaltScheme or a Layout, got {type(scheme).__name__}")
    if cutoff is not None and not isinstance(cutoff, CutoffPolicy):
        raise TypeError(f"cutoff must be a CutoffPolicy, got {type(cutoff).__name__}")
    if budget is not None and not isinstance(budget, ReadBudget):
        raise TypeError(f"budget must be a ReadBudget, got {type(budget).__name__}")
    if max_concurrent_subscans < 1:
        raise ValueError(f"max_concurrent_subscans must be >= 1, got {max_concurrent_subscans}")


#: The environment variable operators set to ``off`` to keep saltedtable off the
#: client's private internals (see :func:`use_client_internals`).
CLIENT_INTERNALS_ENV: Final = "SALTEDTABLE_CLIENT_INTERNALS"
_ON: Final = frozenset({"on", "1", "true", "yes"})
_OFF: Final = frozenset({"off", "0", "false", "no"})


def use_client_internals(explicit: bool | None) -> bool:
    """Whether a table being made may use the client's private internals.

    ``explicit`` (the table's ``client_internals`` argument) wins; None reads
    :data:`CLIENT_INTERNALS_ENV` now (unset or empty: on).

    Raises:
        TypeError: ``explicit`` is neither a bool nor None.
        ValueError: The environment variable holds something other than
            on/off (1/0, true/false, yes/no).
    """
    if explicit is not None:
        if not isinstance(explicit, bool):
            raise TypeError(
                f"client_internals must be True, False or None, got {type(explicit).__name__}"
            )
        return explicit
    value = os.environ.get(CLIENT_INTERNALS_ENV, "").strip().lower()
    if not value or value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(
        f"{CLIENT_INTERNALS_ENV}={os.environ[CLIENT_INTERNALS_ENV]!r} is not a switch: "
        "set it to off (or on), or unset it"
    )


def check_row_key(row_key: object) -> None:
    """Refuse a missing row key as the client does."""
    if row_key is None:
        raise ValueError("row_key must be string or bytes")


def read_for(
    query: Query,
    layout: Layout,
    budget: ReadBudget,
    *,
    ordered: bool,
    slots: int,
    hot: HotLayout | None = None,
) -> tuple[ReadPlan, ReadSettings]:
    """What a logical query reads (its plan) and how (its settings), decided once.

    The one request over every bucket is never tried on a cutoff layout (its
    rows are checked one by one, per side): the only place that gate is set.
    """
    reverse = is_reversed(query)
    plan = plan_reads(as_query(query, reversed_ok=True), layout, reverse=reverse, hot=hot)
    # (Nor on a reversed read: its one request's rows would come bucket after
    # bucket backwards, which the one request's bookkeeping does not expect.)
    settings = plan.settings(
        budget, ordered=ordered, slots=slots, one_request=layout.cutoff is None and not reverse
    )
    return plan, settings


def plan_for(
    query: Query,
    layout: Layout,
    budget: ReadBudget,
    *,
    ordered: bool,
    slots: int,
    hot: HotLayout | None = None,
) -> ReadPlan:
    """:func:`read_for`'s plan with its settings attached, for ``explain()``."""
    plan, settings = read_for(query, layout, budget, ordered=ordered, slots=slots, hot=hot)
    return dataclasses.replace(plan, how=settings)


def read_timeouts(
    table: TableDefaults,
    operation_timeout: Timeout,
    attempt_timeout: AttemptTimeout,
    retryable_errors: Retryable,
) -> Timeouts:
    """A read's timeouts as the client resolves them (the table's read defaults)."""
    operation, attempt = resolve_timeouts(table, operation_timeout, attempt_timeout, "read_rows")
    return Timeouts(operation, attempt, retryable_errors)


def samples_for(
    layout: Layout, samples: list[tuple[bytes, int]], row_range: RowRange | None
) -> list[tuple[bytes, int]]:
    """The physical table's samples as logical keys, only those in ``row_range`` if given."""
    logical = layout.logical_samples(samples)
    if row_range is None:
        return logical
    return samples_in_range(logical, row_range.start_key, row_range.end_key)


def filter_for(
    layout: Layout,
    bucket: int | None,
    row_filter: RowFilter | None,
    *,
    checked: bool = False,
    physical: bytes = b"",
    key: bytes = b"",
) -> RowFilter | None:
    """The filter to send for a row in ``bucket`` (legacy rows need no rewrite).

    ``checked``: the caller ran :func:`check_filter` already (building the
    filter's protobuf is most of a point write's own calls: once is enough).
    ``physical`` and ``key``: the row's keys, which give its prefix on a
    layout with epochs (where a bucket number alone does not).
    """
    if not checked:
        check_filter(row_filter)
    if bucket is None:
        return row_filter
    if layout.epochs is not None:
        return rewrite_filter(row_filter, physical[: len(physical) - len(key)])
    return rewrite_filter(row_filter, layout.scheme.prefix(bucket))


def sharded_refused(
    sharded_query: Sequence[Query], error: Exception
) -> ShardedReadRowsExceptionGroup:
    """A ``read_rows_sharded`` that failed as a whole: every shard failed with ``error``."""
    failed = [
        FailedQueryShardError(i, query, error)  # type: ignore[arg-type]
        for i, query in enumerate(sharded_query)
    ]
    return ShardedReadRowsExceptionGroup(failed, [], len(sharded_query))


def sharded_result(
    sharded_query: Sequence[Query], results: Sequence[list[Row] | Exception]
) -> list[Row]:
    """The rows of every shard in query order, or the client's group if any shard failed.

    Raises:
        ShardedReadRowsExceptionGroup: One ``FailedQueryShardError`` per failed
            shard, with the rows of the shards that succeeded.
    """
    failed = [
        FailedQueryShardError(i, sharded_query[i], r)  # type: ignore[arg-type]
        for i, r in enumerate(results)
        if isinstance(r, Exception)
    ]
    ok = [row for r in results if not isinstance(r, Exception) for row in r]
    if failed:
        raise ShardedReadRowsExceptionGroup(failed, ok, len(sharded_query))
    return ok


@final
@dataclass(frozen=True, slots=True)
class RowWrite:
    """A single-row write, checked and placed before anything is sent.

    The prepare step of ``mutate_row``, ``check_and_mutate_row`` and
    ``read_modify_write_row`` (``bulk_mutate_rows`` has :func:`bulk_prepare`):
    the table then settles its guard for :attr:`family` within the call's
    timeout, and sends to :attr:`physical`.
    """

    #: The caller's (logical) key.
    key: bytes
    #: Its bucket (None: a legacy-side row of a cutoff layout).
    bucket: int | None
    #: The key sent to Bigtable.
    physical: bytes
    #: The first column family the write names: where the guard stores the
    #: layout record if the table has none yet (None: no family named).
    family: str | None


#: What a single-row write changes: mutations, or read-modify-write rules.
Changes = Mutation | ReadModifyWriteRule | Sequence[Mutation | ReadModifyWriteRule] | None


def prepare_row_write(
    layout: Layout,
    row_key: str | bytes,
    *changes: Changes,
    operation_timeout: Timeout,
    attempt_timeout: AttemptTimeout = None,
) -> RowWrite:
    """Check a single-row write and place it: nothing is sent if this raises.

    Args:
        layout: The table's layout.
        row_key: The logical key.
        *changes: The write's mutations or rules (a conditional write's true
            and false cases: the first family either names counts).
        operation_timeout: As the caller gave it (checked).
        attempt_timeout: As the caller gave it (checked; None: the operation's).

    Raises:
        ValueError: A timeout is not a positive number (or the table default).
        RowKeyError: The key cannot be stored (see :meth:`Layout.locate`).
    """
    check_timeouts(operation_timeout, attempt_timeout)
    # (The locator takes str keys too; one call places a plain key.)
    bucket, physical = layout.locator()(row_key)
    key = row_key if type(row_key) is bytes else to_key(row_key)
    family = None
    for change in changes:
        family = None if change is None else family_of(change)
        if family is not None:
            break
    return RowWrite(key, bucket, physical, family)


def bulk_prepare(
    layout: Layout,
    entries: Iterable[RowMutationEntry],
    operation_timeout: Timeout,
    attempt_timeout: AttemptTimeout,
    stats: CallStats | None,
    hook: StatsHook | None,
) -> tuple[list[RowMutationEntry], list[bytes], CallStats | None]:
    """Check a ``bulk_mutate_rows`` call before anything is sent.

    Returns:
        The logical entries as a list, their physical keys, and the call's
        statistics (created when a hook needs them).
    """
    if stats is None and hook is not None:
        stats = CallStats()
    check_timeouts(operation_timeout, attempt_timeout)
    logical = entries if isinstance(entries, list) else list(entries)  # any iterable
    return logical, physical_keys(layout, logical, stats), stats


def bulk_report(
    stats: CallStats | None, rows: int, error: BaseException | None, hook: StatsHook | None
) -> None:
    """End a ``bulk_mutate_rows`` call's statistics (if any) and report them."""
    if stats is not None:
        stats.operation = "bulk_mutate_rows"
        stats.rows = rows
        report(stats, error, hook)


def _passthrough(name: str, doc: str) -> Any:
    """A property that reads and writes the wrapped table's attribute of the same name."""

    def get(self: Any) -> Any:
        return getattr(self._table, name)

    def set_(self: Any, value: Any) -> None:
        setattr(self._table, name, value)

    return property(get, set_, doc=doc)


class TableAttributes:
    """The public attributes of ``TableAsync``/``Table``, passed through to the wrapped table."""

    client = _passthrough("client", "The data client of the wrapped table.")
    instance_id = _passthrough("instance_id", "The instance id.")
    table_id = _passthrough("table_id", "The table id.")
    instance_name = _passthrough("instance_name", "The instance's full resource name.")
    table_name = _passthrough("table_name", "The table's full resource name.")
    app_profile_id = _passthrough("app_profile_id", "The app profile requests use, or None.")
    default_operation_timeout = _passthrough(
        "default_operation_timeout", "Default operation timeout of point operations (s)."
    )
    default_attempt_timeout = _passthrough(
        "default_attempt_timeout", "Default attempt timeout of point operations (s)."
    )
    default_read_rows_operation_timeout = _passthrough(
        "default_read_rows_operation_timeout", "Default operation timeout of reads (s)."
    )
    default_read_rows_attempt_timeout = _passthrough(
        "default_read_rows_attempt_timeout", "Default attempt timeout of read requests (s)."
    )
    default_mutate_rows_operation_timeout = _passthrough(
        "default_mutate_rows_operation_timeout", "Default operation timeout of bulk writes (s)."
    )
    default_mutate_rows_attempt_timeout = _passthrough(
        "default_mutate_rows_attempt_timeout", "Default attempt timeout of bulk writes (s)."
    )
    default_read_rows_retryable_errors = _passthrough(
        "default_read_rows_retryable_errors", "Errors reads retry by default."
    )
    default_mutate_rows_retryable_errors = _passthrough(
        "default_mutate_rows_retryable_errors", "Errors bulk writes retry by default."
    )
    default_retryable_errors = _passthrough(
        "default_retryable_errors", "Errors point operations retry by default."
    )
