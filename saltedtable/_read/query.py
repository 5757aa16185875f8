"""Queries in every form ``TableAsync`` accepts, as one ``ReadRowsQuery``.

Pure code. The data client takes a :class:`ReadRowsQuery` or a dict of
``ReadRowsRequest`` fields (``{"rows": {...}, "filter": {...}, "rows_limit":
n}``); its own tests use both. The planner works on ``ReadRowsQuery`` and on
the client's :class:`RowFilter` objects (it rewrites row-key regexes), so a
dict query is turned into those here, filter tree included.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery, RowRange
from google.cloud.bigtable.data.row_filters import (
    ApplyLabelFilter,
    BlockAllFilter,
    CellsColumnLimitFilter,
    CellsRowLimitFilter,
    CellsRowOffsetFilter,
    ColumnQualifierRegexFilter,
    ColumnRangeFilter,
    ConditionalRowFilter,
    FamilyNameRegexFilter,
    PassAllFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    RowSampleFilter,
    SinkFilter,
    StripValueTransformerFilter,
    TimestampRangeFilter,
    ValueBitmaskFilter,
    ValueRangeFilter,
    ValueRegexFilter,
)
from google.cloud.bigtable_v2.types import ReadRowsRequest
from google.cloud.bigtable_v2.types import data as data_pb

from .._exceptions import QueryPlanError

__all__ = ["as_query", "check_filter", "filter_from_pb", "is_reversed", "reversed_request"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: Request fields a table adds to every request it sends.
_SET_BY_THE_TABLE = ("table_name", "app_profile_id")


def is_reversed(query: ReadRowsQuery | Mapping[str, Any]) -> bool:
    """Whether ``query`` asks for a reversed scan (a dict query's ``"reversed": True``).

    (``ReadRowsQuery`` has no such field in the client's 2.50 releases.)
    """
    return isinstance(query, Mapping) and bool(query.get("reversed"))


def reversed_request(query: ReadRowsQuery) -> dict[str, Any]:
    """``query`` as the dict query of a reversed read (``ReadRowsRequest`` fields).

    (The client's ``ReadRowsQuery`` cannot say ``reversed``; its dict form can.)
    """
    rows: dict[str, Any] = {}
    if query.row_keys:
        rows["row_keys"] = list(query.row_keys)
    if query.row_ranges:
        rows["row_ranges"] = [r._pb for r in query.row_ranges]
    out: dict[str, Any] = {"reversed": True}
    if rows:
        out["rows"] = rows
    if query.limit:
        out["rows_limit"] = query.limit
    if query.filter is not None:
        out["filter"] = query.filter._to_pb()
    return out


def as_query(
    query: ReadRowsQuery | Mapping[str, Any], *, reversed_ok: bool = False
) -> ReadRowsQuery:
    """The query as a :class:`ReadRowsQuery`, with its filter checked.

    A reversed dict query's direction is not part of the result (see
    :func:`is_reversed`); where the caller cannot read backwards
    (``reversed_ok`` False) it is refused.

    Raises:
        AttributeError: Neither a query nor a dict (as the client raises), or
            a ``row_filter`` that is not a filter.
        TypeError: A dict query names a field the table sets (as the client raises).
        QueryPlanError: A dict query asks for something salted tables cannot
            do (another table; a reversed scan where ``reversed_ok`` is False).
    """
    if isinstance(query, ReadRowsQuery):
        check_filter(query.filter)
        return query
    if not isinstance(query, Mapping):
        raise AttributeError(
            f"a read takes a ReadRowsQuery or a dict of ReadRowsRequest fields, "
            f"got {type(query).__name__}: {query!r}"
        )
    for name in _SET_BY_THE_TABLE:
        if name in query:
            # The client adds these to the request itself, so it cannot build one.
            raise TypeError(
                f"ReadRowsRequest() got multiple values for keyword argument {name!r}: "
                "the table sets it"
            )
    request = ReadRowsRequest(**query)
    if request.reversed and not reversed_ok:
        raise QueryPlanError(
            "this read cannot be reversed: read forwards and reverse the rows, or read "
            "backwards through SaltedTableAsync.read_rows({..., 'reversed': True})"
        )
    for name in ("authorized_view_name", "materialized_view_name"):
        if getattr(request, name):
            raise QueryPlanError(
                f"a dict query must not name {name}: the salted table reads its own table"
            )
    ranges = [_row_range(r) for r in request.rows.row_ranges]
    return ReadRowsQuery(
        row_keys=list(request.rows.row_keys),
        row_ranges=ranges,
        limit=request.rows_limit or None,
        row_filter=filter_from_pb(request.filter) if "filter" in request else None,
    )


def check_filter(row_filter: Any) -> None:
    """Fail where the client fails for a ``row_filter`` that is not a filter.

    The client builds the request's protobuf before anything is sent; a value
    without ``_to_pb`` fails there with ``AttributeError``.
    """
    if row_filter is not None:
        row_filter._to_pb()


def _row_range(pb: data_pb.RowRange) -> RowRange:
    start_closed = "start_key_closed" in pb
    start = pb.start_key_closed if start_closed else pb.start_key_open
    end_closed = "end_key_closed" in pb
    end = pb.end_key_closed if end_closed else pb.end_key_open
    return RowRange(
        start or None,
        end or None,
        start_is_inclusive=start_closed or not start,
        end_is_inclusive=end_closed,
    )


def filter_from_pb(pb: data_pb.RowFilter) -> RowFilter:
    """The client's :class:`RowFilter` object for a ``RowFilter`` protobuf.

    Raises:
        QueryPlanError: The protobuf sets no filter, or one this client version
            does not know.
    """
    kind = data_pb.RowFilter.pb(pb).WhichOneof("filter")
    if kind is None:
        raise QueryPlanError(f"the filter {pb!r} sets no filter")
    value = getattr(pb, kind)
    simple = _SIMPLE.get(kind)
    if simple is not None:
        made: RowFilter = simple(value)
        return made
    if kind == "chain":
        return RowFilterChain([filter_from_pb(f) for f in value.filters])
    if kind == "interleave":
        return RowFilterUnion([filter_from_pb(f) for f in value.filters])
    if kind == "condition":
        return ConditionalRowFilter(
            filter_from_pb(value.predicate_filter),
            filter_from_pb(value.true_filter) if "true_filter" in value else None,
            filter_from_pb(value.false_filter) if "false_filter" in value else None,
        )
    if kind == "timestamp_range_filter":
        return TimestampRangeFilter(
            _micros_time(value.start_timestamp_micros) if value.start_timestamp_micros else None,
            _micros_time(value.end_timestamp_micros) if value.end_timestamp_micros else None,
        )
    if kind == "column_range_filter":
        start_closed = "start_qualifier_closed" in value
        end_closed = "end_qualifier_closed" in value
        start = value.start_qualifier_closed if start_closed else value.start_qualifier_open
        end = value.end_qualifier_closed if end_closed else value.end_qualifier_open
        has_start = start_closed or "start_qualifier_open" in value
        has_end = end_closed or "end_qualifier_open" in value
        return ColumnRangeFilter(
            value.family_name,
            start if has_start else None,
            end if has_end else None,
            inclusive_start=start_closed if has_start else None,
            inclusive_end=end_closed if has_end else None,
        )
    if kind == "value_range_filter":
        start_closed = "start_value_closed" in value
        end_closed = "end_value_closed" in value
        has_start = start_closed or "start_value_open" in value
        has_end = end_closed or "end_value_open" in value
        return ValueRangeFilter(
            (value.start_value_closed if start_closed else value.start_value_open)
            if has_start
            else None,
            (value.end_value_closed if end_closed else value.end_value_open) if has_end else None,
            inclusive_start=start_closed if has_start else None,
            inclusive_end=end_closed if has_end else None,
        )
    if kind == "value_bitmask_filter":
        return ValueBitmaskFilter(value.mask)
    raise QueryPlanError(f"saltedtable does not know the filter kind {kind!r}")


def _micros_time(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


_SIMPLE: dict[str, Any] = {
    "sink": SinkFilter,
    "pass_all_filter": PassAllFilter,
    "block_all_filter": BlockAllFilter,
    "row_key_regex_filter": RowKeyRegexFilter,
    "row_sample_filter": RowSampleFilter,
    "family_name_regex_filter": FamilyNameRegexFilter,
    "column_qualifier_regex_filter": ColumnQualifierRegexFilter,
    "value_regex_filter": ValueRegexFilter,
    "cells_per_row_offset_filter": CellsRowOffsetFilter,
    "cells_per_row_limit_filter": CellsRowLimitFilter,
    "cells_per_column_limit_filter": CellsColumnLimitFilter,
    "strip_value_transformer": StripValueTransformerFilter,
    "apply_label_transformer": ApplyLabelFilter,
}
