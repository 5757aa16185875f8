"""Every parity scenario, as data: each public method of ``TableAsync`` (google-cloud-bigtable
2.50), each argument form it takes, each documented error path.

Both tables hold :data:`SEED` (fixed timestamps, so cells compare exactly) unless a
scenario says otherwise. Scenarios that write also compare both tables' rows afterwards.
The few documented differences carry a ``deliberate`` check instead of equality.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import grpc
from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable
from google.cloud.bigtable.data import ReadRowsQuery, RowMutationEntry, RowRange
from google.cloud.bigtable.data._helpers import TABLE_DEFAULT
from google.cloud.bigtable.data.mutations import (
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    SetCell,
)
from google.cloud.bigtable.data.read_modify_write_rules import AppendValueRule, IncrementRule
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
    LiteralValueFilter,
    PassAllFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
    StripValueTransformerFilter,
    TimestampRangeFilter,
    ValueBitmaskFilter,
    ValueRangeFilter,
    ValueRegexFilter,
)

from saltedtable import SaltScheme

from .model import (
    Append,
    Attr,
    Batch,
    BatcherClose,
    BatcherClosed,
    Call,
    Close,
    Contents,
    Observation,
    Pause,
    Scenario,
    SetAttr,
    Within,
)

# -- data ------------------------------------------------------------------------------


def put(key: bytes | str, *cells: tuple[str, bytes, bytes, int]) -> RowMutationEntry:
    """An entry setting ``(family, qualifier, value, timestamp)`` cells."""
    return RowMutationEntry(key, [SetCell(f, q, v, ts) for f, q, v, ts in cells])


COUNTER = (5).to_bytes(8, "big", signed=True)
NON_UTF8 = b"\xff\xfe\x00bin"

#: The rows both tables start with (timestamps in milliseconds, as Bigtable requires).
SEED: tuple[RowMutationEntry, ...] = (
    put(b"a", ("cf", b"q1", b"old", 1000), ("cf", b"q1", b"1", 2000), ("cg", b"q2", b"x", 1000)),
    put(b"b#1", ("cf", b"q1", b"b1", 1000)),
    put(b"b#2", ("cf", b"q1", b"b2", 1000), ("cf", b"q2", b"bb", 3000)),
    put(b"c", ("cg", b"q1", b"c", 1000)),
    *(put(b"k%02d" % i, ("cf", b"q", b"v%d" % i, 1000 * (i + 1))) for i in range(10)),
    put("ünï", ("cf", b"q", b"u", 1000)),
    put(NON_UTF8, ("cf", b"q", b"bin", 1000)),
    put(b"ctr", ("cf", b"n", COUNTER, 1000)),
)
#: The seed without keys that ``hash="java"`` cannot hash.
SEED_UTF8 = tuple(e for e in SEED if e.row_key != NON_UTF8)

SCHEME = SaltScheme(8)
JAVA = SaltScheme(8, hash="java")


#: Keys Bigtable itself refuses (empty or None, over 4 KiB) and keys that are neither str
#: nor bytes: a deliberate difference. saltedtable refuses them itself, before anything
#: is sent, with RowKeyError (a ValueError; RowKeyTypeError, also a TypeError, for the
#: wrong type). The plain table lets the server answer: Cloud Bigtable refuses with
#: InvalidArgument, while the emulator answers some (empty-key reads, over-long keys).
KEY_REFUSED = frozenset(
    {
        "read_rows/keys-empty",
        "read_rows/keys-over-4k",
        "read_rows_stream/keys-empty",
        "read_rows_stream/keys-over-4k",
        "read_row/key-empty",
        "read_row/key-empty-str",
        "read_row/key-over-4k",
        "row_exists/key-empty",
        "row_exists/key-empty-str",
        "row_exists/key-over-4k",
        "mutate_row/none-key",
        "mutate_row/empty-key",
        "mutate_row/key-over-4k",
        "bulk_mutate_rows/empty-key-entry",
        "mutations_batcher/empty-key-entry",
        "check_and_mutate_row/none-key",
        "read_modify_write_row/none-key",
    }
)


def scenario(id: str, *steps: Any, seed: bool = True, **options: Any) -> Scenario:
    """A scenario over :data:`SEED` (``seed=False``: empty tables)."""
    if id in KEY_REFUSED:
        options.setdefault("deliberate", key_refused)
        if id == "read_modify_write_row/none-key":
            # The emulator writes a row with an empty key, which the client cannot
            # read back afterwards: compare what was raised, not the tables.
            options["contents"] = False
    return Scenario(id, tuple(steps), seed=SEED if seed else (), **options)


def write(id: str, *steps: Any, seed: bool = True, **options: Any) -> Scenario:
    """A scenario that writes: both tables' rows are compared afterwards.

    (Not behind a slow proxy: a write whose deadline expired may still land, or not.)
    """
    contents = not options.get("latency")
    return scenario(id, *steps, seed=seed, contents=contents, **options)


# -- reads -----------------------------------------------------------------------------

QUERIES: dict[str, Any] = {
    "query-empty": ReadRowsQuery(),
    "keys-bytes": ReadRowsQuery(row_keys=[b"k03", b"a", b"k07"]),
    "keys-str": ReadRowsQuery(row_keys=["k03", "ünï"]),
    "key-single-str": ReadRowsQuery(row_keys="k05"),
    "keys-missing": ReadRowsQuery(row_keys=[b"nope", b"k01"]),
    "keys-duplicate": ReadRowsQuery(row_keys=[b"k01", b"k01"]),
    "keys-binary": ReadRowsQuery(row_keys=[NON_UTF8, b"c"]),
    "keys-empty": ReadRowsQuery(row_keys=[b"", b"k01"]),
    "keys-over-4k": ReadRowsQuery(row_keys=[b"x" * 5000, b"k01"]),
    "keys-4k-minus-2": ReadRowsQuery(row_keys=[b"x" * 4094, b"k01"]),
    "range-single": ReadRowsQuery(row_ranges=RowRange(b"b", b"k05")),
    "range-list": ReadRowsQuery(row_ranges=[RowRange(b"k06", b"k08"), RowRange(b"k02", b"k04")]),
    "range-overlapping": ReadRowsQuery(
        row_ranges=[RowRange(b"k01", b"k05"), RowRange(b"k03", b"k07")]
    ),
    "range-open-closed": ReadRowsQuery(
        row_ranges=RowRange(b"k02", b"k05", start_is_inclusive=False, end_is_inclusive=True)
    ),
    "range-str": ReadRowsQuery(row_ranges=RowRange("k02", "k04")),
    "range-no-start": ReadRowsQuery(row_ranges=RowRange(end_key=b"b#2")),
    "range-no-end": ReadRowsQuery(row_ranges=RowRange(start_key=b"k08")),
    "keys-and-ranges": ReadRowsQuery(row_keys=[b"a"], row_ranges=[RowRange(b"k08")]),
    "limit-1": ReadRowsQuery(limit=1),
    "limit-range": ReadRowsQuery(row_ranges=RowRange(b"k00"), limit=5),
    "limit-over": ReadRowsQuery(limit=1000),
    "limit-keys": ReadRowsQuery(row_keys=[b"k09", b"k01", b"a"], limit=2),
    "limit-filter-drops-rows": ReadRowsQuery(limit=2, row_filter=FamilyNameRegexFilter("cg")),
    "dict-empty": {},
    "dict-keys": {"rows": {"row_keys": [b"k01", b"a"]}},
    "dict-range-closed-open": {
        "rows": {"row_ranges": [{"start_key_closed": b"k02", "end_key_open": b"k05"}]}
    },
    "dict-range-open-closed": {
        "rows": {"row_ranges": [{"start_key_open": b"k02", "end_key_closed": b"k05"}]}
    },
    "dict-range-unbounded": {"rows": {"row_ranges": [{}]}},
    "dict-limit": {"rows_limit": 3},
    "dict-limit-range": {"rows": {"row_ranges": [{"start_key_closed": b"k05"}]}, "rows_limit": 2},
    "dict-filter-family": {"filter": {"family_name_regex_filter": "cg"}},
    "dict-filter-chain": {
        "filter": {
            "chain": {
                "filters": [
                    {"family_name_regex_filter": "cf"},
                    {"cells_per_column_limit_filter": 1},
                ]
            }
        }
    },
    "dict-filter-interleave": {
        "filter": {
            "interleave": {
                "filters": [
                    {"family_name_regex_filter": "cg"},
                    {"column_qualifier_regex_filter": b"q2"},
                ]
            }
        }
    },
    "dict-filter-condition": {
        "filter": {
            "condition": {
                "predicate_filter": {"family_name_regex_filter": "cg"},
                "true_filter": {"apply_label_transformer": "has-cg"},
                "false_filter": {"strip_value_transformer": True},
            }
        }
    },
    "dict-filter-row-key-regex": {"filter": {"row_key_regex_filter": b"k0[1-3]"}},
    "dict-filter-value-range": {
        "filter": {"value_range_filter": {"start_value_closed": b"v3", "end_value_open": b"v6"}}
    },
    "dict-filter-column-range": {
        "filter": {
            "column_range_filter": {
                "family_name": "cf",
                "start_qualifier_closed": b"q1",
                "end_qualifier_open": b"q2",
            }
        }
    },
    "dict-filter-timestamp-range": {
        "filter": {
            "timestamp_range_filter": {
                "start_timestamp_micros": 2000,
                "end_timestamp_micros": 5000,
            }
        }
    },
    "dict-filter-label": {"filter": {"apply_label_transformer": "lbl"}},
    "dict-filter-cells-per-row": {
        "filter": {
            "chain": {
                "filters": [
                    {"family_name_regex_filter": "cf"},
                    {"cells_per_row_limit_filter": 1},
                ]
            }
        }
    },
    "dict-filter-block-all": {"filter": {"block_all_filter": True}},
    "dict-str-key": {"rows": {"row_keys": ["k01"]}},
    # the client rejects these before sending anything; a salted table must too
    "dict-unknown-field": {"nope": 1},
    "dict-table-name": {"table_name": "projects/p/instances/i/tables/other"},
    "dict-app-profile": {"app_profile_id": "profile"},
    "dict-filter-empty-regex": {"filter": {"row_key_regex_filter": b""}},
    "not-a-query-str": "k01",
    "not-a-query-none": None,
    "not-a-query-list": [b"k01"],
    "non-filter-row-filter": ReadRowsQuery(row_filter="not a filter"),  # type: ignore[arg-type]
}

FILTERS: dict[str, Any] = {
    # (within one family: the emulator orders a row's families differently per table)
    "cells-row-limit": RowFilterChain([FamilyNameRegexFilter("cf"), CellsRowLimitFilter(1)]),
    "cells-row-offset": RowFilterChain([FamilyNameRegexFilter("cf"), CellsRowOffsetFilter(1)]),
    "cells-column-limit": CellsColumnLimitFilter(1),
    "family-regex": FamilyNameRegexFilter("cg"),
    "qualifier-regex": ColumnQualifierRegexFilter(b"q2"),
    "column-range": ColumnRangeFilter("cf", b"q1", b"q2"),
    "value-regex": ValueRegexFilter(b"b.*"),
    "value-range": ValueRangeFilter(b"v3", b"v6"),
    "literal-value": LiteralValueFilter(b"v5"),
    "timestamp-range": TimestampRangeFilter(
        dt.datetime.fromtimestamp(0.002, dt.UTC), dt.datetime.fromtimestamp(0.005, dt.UTC)
    ),
    "strip-value": StripValueTransformerFilter(True),
    "label": ApplyLabelFilter("lbl"),
    "pass-all": PassAllFilter(True),
    "block-all": BlockAllFilter(True),
    "chain": RowFilterChain([FamilyNameRegexFilter("cf"), CellsColumnLimitFilter(1)]),
    "union": RowFilterUnion([FamilyNameRegexFilter("cg"), ColumnQualifierRegexFilter(b"q2")]),
    "condition": ConditionalRowFilter(
        FamilyNameRegexFilter("cg"),
        true_filter=ApplyLabelFilter("has-cg"),
        false_filter=StripValueTransformerFilter(True),
    ),
    "row-key-regex": RowKeyRegexFilter(b"k0[2-4]"),
    "row-key-regex-str": RowKeyRegexFilter("b#.*"),
    "row-key-regex-in-chain": RowFilterChain(
        [RowKeyRegexFilter(b"k0[0-5]"), CellsColumnLimitFilter(1)]
    ),
    "row-key-regex-in-condition": ConditionalRowFilter(
        RowKeyRegexFilter(b"b#.*"), true_filter=ApplyLabelFilter("b"), false_filter=None
    ),
    "row-key-regex-empty": RowKeyRegexFilter(b""),
    "value-bitmask": ValueBitmaskFilter(b"\x01"),
}

#: Timeout and retry arguments of the read and point methods (``read_rows`` & co).
TIMEOUTS: dict[str, dict[str, Any]] = {
    "op-0": {"operation_timeout": 0},
    "op-negative": {"operation_timeout": -1},
    "op-none": {"operation_timeout": None},
    "attempt-0": {"attempt_timeout": 0},
    "attempt-negative": {"attempt_timeout": -5},
    "attempt-none": {"attempt_timeout": None},
    "explicit": {"operation_timeout": 30, "attempt_timeout": 10},
    "attempt-over-op": {"operation_timeout": 5, "attempt_timeout": 50},
    "table-default-enums": {
        "operation_timeout": TABLE_DEFAULT.DEFAULT,
        "attempt_timeout": TABLE_DEFAULT.MUTATE_ROWS,
        "retryable_errors": TABLE_DEFAULT.READ_ROWS,
    },
    "deadline": {"operation_timeout": 0.02},
    "attempt-deadline": {"operation_timeout": 0.2, "attempt_timeout": 0.02},
    "retry-empty": {"retryable_errors": []},
    "retry-types": {"retryable_errors": [DeadlineExceeded, ServiceUnavailable]},
    "retry-tuple": {"retryable_errors": (DeadlineExceeded,)},
    "retry-status-codes": {"retryable_errors": [grpc.StatusCode.UNAVAILABLE]},
    "retry-ints": {"retryable_errors": [4, 14]},
    "retry-bogus": {"retryable_errors": ["bogus"]},
}
#: The subset of :data:`TIMEOUTS` for methods that take only ``operation_timeout``.
OP_ONLY = ("op-0", "op-negative", "op-none", "explicit", "deadline")
#: Proxy latency (s) for the forms whose deadline must expire: far above their deadlines.
LATENCY = 0.08
SLOW = frozenset({"deadline", "attempt-deadline"})


def timeouts(
    names: Iterable[str] | None = None,
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(name, kwargs, scenario options)`` of the timeout forms ``names`` (default: all)."""
    for name in names if names is not None else TIMEOUTS:
        kwargs = dict(TIMEOUTS[name])
        if name == "explicit" and names is not None:
            kwargs.pop("attempt_timeout", None)
        yield name, kwargs, {"latency": LATENCY} if name in SLOW else {}


def read_scenarios() -> Iterator[Scenario]:
    """``read_rows`` and ``read_rows_stream``: every query form, filter and timeout form."""
    for method in ("read_rows", "read_rows_stream"):
        for name, query in QUERIES.items():
            if name in ("dict-unknown-field", "dict-table-name", "dict-app-profile"):
                continue  # read_scenario_refusals: shared with the sharded reads below
            yield scenario(f"{method}/{name}", Call(method, (query,)))
        for name, row_filter in FILTERS.items():
            query = ReadRowsQuery(row_filter=row_filter)
            yield scenario(f"{method}/filter-{name}", Call(method, (query,)))
        for name, kwargs, slow in timeouts():
            yield scenario(f"{method}/{name}", Call(method, (ReadRowsQuery(),), kwargs), **slow)
        for name in ("dict-unknown-field", "dict-table-name", "dict-app-profile"):
            yield scenario(f"{method}/{name}", Call(method, (QUERIES[name],)))
    for take in (1, 3):
        yield scenario(
            f"read_rows_stream/leave-after-{take}",
            Call("read_rows_stream", (ReadRowsQuery(),), take=take),
        )
    yield scenario(
        "read_rows_stream/leave-limited-after-1",
        Call("read_rows_stream", (ReadRowsQuery(limit=4),), take=1),
    )
    # reversed scans read backwards (documented): the plain table's client cannot
    for method in ("read_rows", "read_rows_stream"):
        yield scenario(
            f"{method}/dict-reversed",
            Call(method, ({"reversed": True, "rows_limit": 3},)),
            deliberate=reversed_reads_backwards,
        )


def point_read_scenarios() -> Iterator[Scenario]:
    """``read_row`` and ``row_exists``: keys, filters, refusals and timeouts."""
    keys: dict[str, Any] = {
        "bytes": b"k01",
        "str": "k01",
        "missing": b"nope",
        "unicode-str": "ünï",
        "binary": NON_UTF8,
        "none": None,
        "empty": b"",
        "empty-str": "",
        "int": 7,
        "over-4k": b"x" * 5000,
        "4k-minus-2": b"x" * 4094,
    }
    for method in ("read_row", "row_exists"):
        for name, key in keys.items():
            yield scenario(f"{method}/key-{name}", Call(method, (key,)))
        for name, kwargs, slow in timeouts():
            yield scenario(f"{method}/{name}", Call(method, (b"k01",), kwargs), **slow)
    filtered = {
        "family-hit": (b"a", FamilyNameRegexFilter("cg")),
        "family-miss": (b"b#1", FamilyNameRegexFilter("cg")),
        "label": (b"a", ApplyLabelFilter("lbl")),
        "chain": (b"a", RowFilterChain([FamilyNameRegexFilter("cf"), CellsColumnLimitFilter(1)])),
        "row-key-regex-hit": (b"k01", RowKeyRegexFilter(b"k0.")),
        "row-key-regex-miss": (b"k01", RowKeyRegexFilter(b"x.*")),
        "row-key-regex-empty": (b"k01", RowKeyRegexFilter(b"")),
        "block-all": (b"k01", BlockAllFilter(True)),
        "none": (b"k01", None),
        "not-a-filter": (b"k01", "not a filter"),
    }
    for name, (key, row_filter) in filtered.items():
        yield scenario(
            f"read_row/filter-{name}", Call("read_row", (key,), {"row_filter": row_filter})
        )


def sharded_scenarios() -> Iterator[Scenario]:
    """``read_rows_sharded``: shard forms, a failing shard, refusals and timeouts."""
    two = [
        ReadRowsQuery(row_keys=[b"k01", b"a"]),
        ReadRowsQuery(row_ranges=RowRange(b"k05", b"k08")),
    ]
    forms: dict[str, Any] = {
        "two": two,
        "tuple": tuple(two),
        "dicts": [{"rows": {"row_keys": [b"c"]}}, {}],
        "limits-and-filters": [
            ReadRowsQuery(row_keys=[b"k01", b"k03"], limit=1, row_filter=ApplyLabelFilter("one")),
            ReadRowsQuery(row_keys=[b"k02", b"k04"], row_filter=ApplyLabelFilter("two")),
        ],
        "twelve": [ReadRowsQuery(row_keys=[b"k%02d" % (i % 10)]) for i in range(12)],
        "one-failing": [
            ReadRowsQuery(row_keys=[b"k01"]),
            ReadRowsQuery(row_filter=RowKeyRegexFilter(b"")),
            ReadRowsQuery(row_keys=[b"k02"]),
        ],
        "one-not-a-query": [ReadRowsQuery(row_keys=[b"k01"]), "k02"],
        "one-dict-unknown-field": [ReadRowsQuery(row_keys=[b"k01"]), {"nope": 1}],
        "empty": [],
        "none": None,
    }
    for name, shards in forms.items():
        yield scenario(f"read_rows_sharded/{name}", Call("read_rows_sharded", (shards,)))
    for name, kwargs, slow in timeouts():
        yield scenario(
            f"read_rows_sharded/{name}", Call("read_rows_sharded", (two,), kwargs), **slow
        )
    yield scenario(
        "read_rows_sharded/dict-reversed",
        Call("read_rows_sharded", ([{"reversed": True}],)),
        deliberate=reversed_shard_reads_backwards,
    )


def sample_scenarios() -> Iterator[Scenario]:
    """``sample_row_keys``: shape only (the salted table's samples are estimates)."""
    yield scenario("sample_row_keys/default", Call("sample_row_keys"), samples=True)
    for name, kwargs, slow in timeouts(("op-0", "op-none", "attempt-0", "explicit", "deadline")):
        yield scenario(
            f"sample_row_keys/{name}", Call("sample_row_keys", (), kwargs), samples=True, **slow
        )
    yield scenario(
        "sample_row_keys/row-range",
        Call("sample_row_keys", (), {"row_range": RowRange(b"k02", b"k06")}),
        samples=True,
    )


# -- writes ----------------------------------------------------------------------------

CELL = SetCell("cf", b"new", b"value", 5000)
CELL_G = SetCell("cg", b"new", b"gvalue", 5000)
BAD_FAMILY = SetCell("nope", b"q", b"v", 5000)


def mutate_row_scenarios() -> Iterator[Scenario]:
    """``mutate_row``: mutation kinds, a single mutation or a list, keys, refusals."""
    forms: dict[str, tuple[Any, Any]] = {
        "single": (b"k01", CELL),
        "list": (b"k01", [CELL, CELL_G]),
        "str-key": ("ünï", CELL),
        "binary-key": (NON_UTF8, CELL),
        "new-row": (b"fresh", [CELL]),
        "delete-range-from-column": (b"a", DeleteRangeFromColumn("cf", b"q1", 1500, 2500)),
        "delete-family": (b"a", DeleteAllFromFamily("cf")),
        "delete-row": (b"a", DeleteAllFromRow()),
        "delete-row-missing": (b"nope", DeleteAllFromRow()),
        "empty-list": (b"k01", []),
        "none-mutations": (b"k01", None),
        "not-a-mutation": (b"k01", "nope"),
        "unknown-family": (b"k01", BAD_FAMILY),
        "none-key": (None, CELL),
        "empty-key": (b"", CELL),
        "int-key": (7, CELL),
        "key-over-4k": (b"x" * 5000, CELL),
        "key-4k-minus-prefix": (b"x" * 4094, CELL),
    }
    for name, (key, mutations) in forms.items():
        yield write(f"mutate_row/{name}", Call("mutate_row", (key, mutations)))
    yield write(
        "mutate_row/server-timestamp",
        Call("mutate_row", (b"k01", SetCell("cf", b"t", b"now", -1))),
        server_time=True,
    )
    # (documented) keys within a prefix's length of Bigtable's 4 KiB no longer fit salted
    yield write(
        "mutate_row/key-4095",
        Call("mutate_row", (b"x" * 4095, CELL)),
        deliberate=refused_at_call("saltedtable.RowKeyError"),
    )
    yield write("mutate_row/first-write", Call("mutate_row", (b"k01", CELL)), seed=False)
    yield write(
        "mutate_row/first-write-unknown-family",
        Call("mutate_row", (b"k01", BAD_FAMILY)),
        seed=False,
    )
    for name, kwargs, slow in timeouts():
        yield write(f"mutate_row/{name}", Call("mutate_row", (b"k02", CELL), kwargs), **slow)


def bulk_scenarios() -> Iterator[Scenario]:
    """``bulk_mutate_rows``: entries, failures naming the caller's entries, refusals."""
    good = [put(b"k01", ("cf", b"n", b"1", 5000)), put("ünï", ("cg", b"n", b"2", 5000))]
    forms: dict[str, list[Any]] = {
        "two": good,
        "one-unknown-family": [RowMutationEntry(b"k01", [BAD_FAMILY])],
        "second-of-three-fails": [
            put(b"k01", ("cf", b"n", b"1", 5000)),
            RowMutationEntry(b"k02", [BAD_FAMILY]),
            put(b"k03", ("cf", b"n", b"3", 5000)),
        ],
        "delete-rows": [
            RowMutationEntry(b"a", DeleteAllFromRow()),
            RowMutationEntry(b"c", DeleteAllFromRow()),
        ],
        "same-key-twice": [
            put(b"k05", ("cf", b"n", b"1", 5000)),
            put(b"k05", ("cf", b"m", b"2", 5000)),
        ],
        "empty": [],
        "not-entries": [CELL],  # a mutation where an entry belongs
    }
    for name, entries in forms.items():
        yield write(f"bulk_mutate_rows/{name}", Call("bulk_mutate_rows", (entries,)))
    yield write(
        "bulk_mutate_rows/first-write-unknown-family",
        Call("bulk_mutate_rows", ([RowMutationEntry(b"k01", [BAD_FAMILY])],)),
        seed=False,
        deliberate=record_first,
    )
    yield write(
        "bulk_mutate_rows/empty-key-entry",
        Call("bulk_mutate_rows", ([put(b"", ("cf", b"n", b"1", 5000)), *good],)),
    )
    yield write(
        "bulk_mutate_rows/first-write-second-fails",
        Call(
            "bulk_mutate_rows",
            ([put(b"k01", ("cf", b"n", b"1", 5000)), RowMutationEntry(b"k02", [BAD_FAMILY])],),
        ),
        seed=False,
    )
    for name, kwargs, slow in timeouts():
        yield write(f"bulk_mutate_rows/{name}", Call("bulk_mutate_rows", (good,), kwargs), **slow)


def check_and_mutate_scenarios() -> Iterator[Scenario]:
    """``check_and_mutate_row``: predicates (None, filters, row-key regexes), mutation forms."""
    true_m, false_m = (
        SetCell("cf", b"branch", b"true", 5000),
        SetCell("cf", b"branch", b"false", 5000),
    )
    forms: dict[str, tuple[Any, Any, dict[str, Any]]] = {
        "none-predicate-row-exists": (b"k01", None, {"true_case_mutations": true_m}),
        "none-predicate-missing-row": (b"nope", None, {"false_case_mutations": false_m}),
        "family-true": (b"a", FamilyNameRegexFilter("cg"), {"true_case_mutations": [true_m]}),
        "family-false": (
            b"b#1",
            FamilyNameRegexFilter("cg"),
            {"true_case_mutations": true_m, "false_case_mutations": [false_m, CELL_G]},
        ),
        "value-range": (b"k05", ValueRangeFilter(b"v3", b"v6"), {"true_case_mutations": true_m}),
        "row-key-regex-hit": (b"k01", RowKeyRegexFilter(b"k0.*"), {"true_case_mutations": true_m}),
        "row-key-regex-miss": (
            b"k01",
            RowKeyRegexFilter(b"x.*"),
            {"true_case_mutations": true_m, "false_case_mutations": false_m},
        ),
        "row-key-regex-empty": (b"k01", RowKeyRegexFilter(b""), {"false_case_mutations": false_m}),
        "str-key": ("ünï", None, {"true_case_mutations": true_m}),
        "not-a-filter": (b"k01", "nope", {"true_case_mutations": true_m}),
        "no-mutations": (b"k01", None, {}),
        "unknown-family": (b"k01", None, {"true_case_mutations": BAD_FAMILY}),
        "none-key": (None, None, {"true_case_mutations": true_m}),
    }
    for name, (key, predicate, kwargs) in forms.items():
        yield write(
            f"check_and_mutate_row/{name}", Call("check_and_mutate_row", (key, predicate), kwargs)
        )
    for name, kwargs, slow in timeouts(OP_ONLY):
        yield write(
            f"check_and_mutate_row/{name}",
            Call("check_and_mutate_row", (b"k01", None), {"true_case_mutations": true_m, **kwargs}),
            **slow,
        )
    yield write(
        "check_and_mutate_row/first-write",
        Call("check_and_mutate_row", (b"k01", None), {"false_case_mutations": false_m}),
        seed=False,
    )


def read_modify_write_scenarios() -> Iterator[Scenario]:
    """``read_modify_write_row``: rules, a rule or a list, keys, refusals."""
    forms: dict[str, tuple[Any, Any]] = {
        "increment": (b"ctr", IncrementRule("cf", b"n", 3)),
        "append": (b"k01", AppendValueRule("cf", b"q", b"!")),
        "list": (b"ctr", [IncrementRule("cf", b"n", 1), AppendValueRule("cf", b"s", "x")]),
        "new-row": (b"fresh", IncrementRule("cf", b"n")),
        "str-key": ("ünï", AppendValueRule("cf", b"q", b"+")),
        "empty-list": (b"ctr", []),
        "none-rules": (b"ctr", None),
        "unknown-family": (b"ctr", IncrementRule("nope", b"n")),
        "increment-not-8-bytes": (b"k01", IncrementRule("cf", b"q")),
        "none-key": (None, IncrementRule("cf", b"n")),
    }
    for name, (key, rules) in forms.items():
        yield write(
            f"read_modify_write_row/{name}",
            Call("read_modify_write_row", (key, rules)),
            server_time=True,
        )
    for name, kwargs, slow in timeouts(OP_ONLY):
        yield write(
            f"read_modify_write_row/{name}",
            Call("read_modify_write_row", (b"ctr", IncrementRule("cf", b"n")), kwargs),
            server_time=True,
            **slow,
        )


def batcher_scenarios() -> Iterator[Scenario]:
    """``mutations_batcher``: flushing by count, bytes and timer, close, context, refusals."""

    def entries() -> list[RowMutationEntry]:
        return [put(b"k%02d" % i, ("cf", b"batch", b"%d" % i, 5000)) for i in range(3)]

    e = entries()
    no_auto = {"flush_interval": None, "flush_limit_mutation_count": None}
    yield write(
        "mutations_batcher/context-manager",
        Batch({}, (Append(e[0]), Append(e[1]), Append(e[2]), BatcherClosed()), context=True),
    )
    e = entries()
    yield write(
        "mutations_batcher/close",
        Batch(
            no_auto, (Append(e[0]), Append(e[1]), BatcherClosed(), BatcherClose(), BatcherClosed())
        ),
    )
    e = entries()
    yield write(
        "mutations_batcher/flush-by-count",
        Batch(
            {"flush_interval": None, "flush_limit_mutation_count": 2},
            (
                Append(e[0]),
                Pause(0.2),
                Contents(),
                Append(e[1]),
                Pause(0.2),
                Contents(),
                BatcherClose(),
            ),
        ),
    )
    e = entries()
    yield write(
        "mutations_batcher/flush-by-bytes",
        Batch(
            {**no_auto, "flush_limit_bytes": e[0].size() + e[1].size() - 1},
            (
                Append(e[0]),
                Pause(0.2),
                Contents(),
                Append(e[1]),
                Pause(0.2),
                Contents(),
                BatcherClose(),
            ),
        ),
    )
    e = entries()
    yield write(
        "mutations_batcher/no-flush-until-close",
        Batch(
            {"flush_interval": 5, "flush_limit_mutation_count": 3, "flush_limit_bytes": 10**6},
            (Append(e[0]), Append(e[1]), Pause(0.2), Contents(), BatcherClose(), Contents()),
        ),
    )
    e = entries()
    yield write(
        "mutations_batcher/flush-by-timer",
        Batch(
            {"flush_interval": 0.2, "flush_limit_mutation_count": None},
            (Append(e[0]), Pause(0.05), Contents(), Pause(0.5), Contents()),
            context=True,
        ),
    )
    e = entries()
    yield write(
        "mutations_batcher/append-after-close",
        Batch(no_auto, (Append(e[0]), BatcherClose(), Append(e[1]), BatcherClosed())),
    )
    yield write(
        "mutations_batcher/append-a-mutation",
        Batch(no_auto, (Append(SetCell("cf", b"q", b"v", 5000)), BatcherClose())),
    )
    yield write(
        "mutations_batcher/append-not-an-entry",
        Batch(no_auto, (Append("k01"), BatcherClose())),
    )
    e = entries()
    bad = RowMutationEntry(b"k09", [BAD_FAMILY])
    yield write(
        "mutations_batcher/failed-entry-raised-on-close",
        Batch(no_auto, (Append(e[0]), Append(bad), Append(e[1]), BatcherClose())),
    )
    bad = RowMutationEntry(b"k09", [BAD_FAMILY])
    yield write(
        "mutations_batcher/failed-entry-raised-on-exit",
        Batch({}, (Append(bad),), context=True),
    )
    bad = RowMutationEntry(b"k09", [BAD_FAMILY])
    yield write(
        "mutations_batcher/first-write-unknown-family",
        Batch(no_auto, (Append(bad), BatcherClose())),
        seed=False,
        deliberate=record_first,
    )
    e = entries()
    yield write(
        "mutations_batcher/empty-key-entry",
        Batch(no_auto, (Append(put(b"", ("cf", b"n", b"1", 5000))), Append(e[0]), BatcherClose())),
    )
    e = entries()
    yield write(
        "mutations_batcher/failed-flush-then-append",
        Batch(
            {"flush_interval": None, "flush_limit_mutation_count": 1},
            (
                Append(RowMutationEntry(b"k08", [BAD_FAMILY])),
                Pause(0.2),
                Append(e[0]),
                BatcherClose(),
            ),
        ),
    )
    e = entries()
    yield write(
        "mutations_batcher/over-flow-control",
        Batch(
            {**no_auto, "flow_control_max_mutation_count": 1},
            (Append(RowMutationEntry(b"k01", [CELL, CELL_G])), BatcherClose()),
        ),
    )
    for name, kwargs in {
        "op-0": {"batch_operation_timeout": 0},
        "op-none": {"batch_operation_timeout": None},
        "attempt-0": {"batch_attempt_timeout": 0},
        "attempt-none": {"batch_attempt_timeout": None},
        "enums": {
            "batch_operation_timeout": TABLE_DEFAULT.DEFAULT,
            "batch_retryable_errors": TABLE_DEFAULT.READ_ROWS,
        },
        "retry-codes": {"batch_retryable_errors": [grpc.StatusCode.UNAVAILABLE, 4]},
        "flow-count-0": {"flow_control_max_mutation_count": 0},
        "flow-bytes-0": {"flow_control_max_bytes": 0},
        "deadline": {"batch_operation_timeout": 0.02},
    }.items():
        e = entries()
        yield write(
            f"mutations_batcher/{name}",
            Batch({**no_auto, **kwargs}, (Append(e[0]), BatcherClose())),
            latency=LATENCY if name == "deadline" else 0.0,
        )


# -- the table object ------------------------------------------------------------------

ATTRIBUTES = (
    "client",
    "instance_id",
    "table_id",
    "instance_name",
    "table_name",
    "app_profile_id",
    "default_operation_timeout",
    "default_attempt_timeout",
    "default_read_rows_operation_timeout",
    "default_read_rows_attempt_timeout",
    "default_mutate_rows_operation_timeout",
    "default_mutate_rows_attempt_timeout",
    "default_read_rows_retryable_errors",
    "default_mutate_rows_retryable_errors",
    "default_retryable_errors",
)

CUSTOM_TABLE: Mapping[str, Any] = {
    "app_profile_id": "profile-1",
    "default_read_rows_operation_timeout": 77,
    "default_read_rows_attempt_timeout": None,
    "default_mutate_rows_operation_timeout": 55,
    "default_mutate_rows_attempt_timeout": 11,
    "default_operation_timeout": 33,
    "default_attempt_timeout": 3,
    "default_read_rows_retryable_errors": [ServiceUnavailable],
    "default_mutate_rows_retryable_errors": (grpc.StatusCode.ABORTED,),
    "default_retryable_errors": [],
}


def table_scenarios() -> Iterator[Scenario]:
    """Public attributes, writable defaults, ``close`` and the async context manager."""
    attrs = tuple(Attr(name) for name in ATTRIBUTES)
    yield scenario("attributes/defaults", *attrs, seed=False)
    yield scenario("attributes/custom", *attrs, seed=False, table_kwargs=CUSTOM_TABLE)
    yield scenario(
        "attributes/set-default-read-timeout",
        SetAttr("default_read_rows_operation_timeout", 0.02),
        Attr("default_read_rows_operation_timeout"),
        Call("read_rows", (ReadRowsQuery(),)),
        Call("read_row", (b"k01",)),
        latency=LATENCY,
    )
    yield scenario(
        "attributes/set-default-timeout-invalid",
        SetAttr("default_operation_timeout", 0),
        Call("mutate_row", (b"k01", CELL)),
        Call("sample_row_keys"),
    )
    yield scenario(
        "attributes/set-default-attempt-none",
        SetAttr("default_read_rows_attempt_timeout", None),
        Call("read_row", (b"k01",)),
    )
    yield scenario(
        "attributes/set-default-retryable",
        SetAttr("default_read_rows_retryable_errors", [grpc.StatusCode.UNAVAILABLE]),
        Attr("default_read_rows_retryable_errors"),
        Call("read_rows", (ReadRowsQuery(row_keys=[b"k01"]),)),
    )
    yield scenario(
        "attributes/unknown",
        Attr("no_such_attribute"),
        Attr("authorized_view_name"),
        seed=False,
    )
    yield write(
        "close/then-use",
        Close(),
        Call("read_row", (b"k01",)),
        Call("mutate_row", (b"k02", CELL)),
        Close(),
    )
    yield write(
        "context-manager",
        Within((Call("read_row", (b"k01",)), Call("mutate_row", (b"k02", CELL)))),
        Call("read_row", (b"k02",)),
    )


def missing_table_scenarios() -> Iterator[Scenario]:
    """Every method on a table that does not exist (``NotFound`` where the client raises it)."""
    calls = {
        "read_rows": Call("read_rows", (ReadRowsQuery(),)),
        "read_rows_stream": Call("read_rows_stream", (ReadRowsQuery(),)),
        "read_rows-dict": Call("read_rows", ({},)),
        "read_row": Call("read_row", (b"k01",)),
        "row_exists": Call("row_exists", (b"k01",)),
        "read_rows_sharded": Call("read_rows_sharded", ([ReadRowsQuery(row_keys=[b"k01"])],)),
        "sample_row_keys": Call("sample_row_keys"),
        "mutate_row": Call("mutate_row", (b"k01", CELL)),
        "bulk_mutate_rows": Call("bulk_mutate_rows", ([put(b"k01", ("cf", b"q", b"v", 5000))],)),
        "check_and_mutate_row": Call(
            "check_and_mutate_row", (b"k01", None), {"true_case_mutations": CELL}
        ),
        "read_modify_write_row": Call("read_modify_write_row", (b"k01", IncrementRule("cf", b"n"))),
    }
    for name, call in calls.items():
        yield scenario(f"missing-table/{name}", call, seed=False, table="missing")
    yield scenario(
        "missing-table/mutations_batcher",
        Batch({}, (Append(put(b"k01", ("cf", b"q", b"v", 5000))),), context=True),
        seed=False,
        table="missing",
    )
    yield scenario(
        "missing-table/attributes", *(Attr(n) for n in ATTRIBUTES[1:5]), seed=False, table="missing"
    )


def java_scenarios() -> Iterator[Scenario]:
    """``hash="java"``: keys it cannot hash read as absent; writing one is refused (documented)."""

    def java(id: str, *steps: Any, **options: Any) -> Scenario:
        return Scenario(id, tuple(steps), seed=SEED_UTF8, scheme=JAVA, **options)

    yield java("java/read_row-non-utf8", Call("read_row", (NON_UTF8,)))
    yield java("java/row_exists-non-utf8", Call("row_exists", (NON_UTF8,)))
    yield java("java/read_row-utf8", Call("read_row", ("ünï",)))
    yield java(
        "java/read_rows-keys-non-utf8",
        Call("read_rows", (ReadRowsQuery(row_keys=[NON_UTF8, b"k01"]),)),
    )
    yield java("java/read_rows-all", Call("read_rows", (ReadRowsQuery(),)))
    yield java(
        "java/read_rows-range-over-non-utf8",
        Call("read_rows", (ReadRowsQuery(row_ranges=RowRange(b"\xfe", b"\xff\xff")),)),
    )
    refused = refused_at_call("saltedtable.UnsaltableKeyError")
    writes = {
        "mutate_row": Call("mutate_row", (NON_UTF8, CELL)),
        "bulk_mutate_rows": Call(
            "bulk_mutate_rows",
            ([put(b"k01", ("cf", b"n", b"1", 5000)), put(NON_UTF8, ("cf", b"n", b"1", 5000))],),
        ),
        "check_and_mutate_row": Call(
            "check_and_mutate_row", (NON_UTF8, None), {"false_case_mutations": CELL}
        ),
        "read_modify_write_row": Call(
            "read_modify_write_row", (NON_UTF8, IncrementRule("cf", b"n"))
        ),
    }
    for name, call in writes.items():
        yield java(f"java/{name}-non-utf8", call, contents=True, deliberate=refused)
    yield java(
        "java/mutations_batcher-non-utf8",
        Batch({}, (Append(put(NON_UTF8, ("cf", b"n", b"1", 5000))),), context=True),
        contents=True,
        deliberate=refused_at("append", "saltedtable.UnsaltableKeyError"),
    )


# -- documented differences ----------------------------------------------------------------


def refused_at(phase: str, error: str) -> Any:
    """The salted table refuses with ``error`` in ``phase`` and writes nothing; the plain
    table goes through."""

    def check(plain: list[Observation], salted: list[Observation]) -> None:
        raised = [o for o in salted if o[0] == "raised"]
        assert [(o[1], o[2][0]) for o in raised[:1]] == [(phase, error)], salted
        assert not [o for o in plain if o[0] == "raised"], plain
        initial = [o for o in salted if o[0] == "initial"]
        final = [o for o in salted if o[0] == "final"]
        assert [o[1:] for o in initial] == [o[1:] for o in final], "the refusal wrote rows"

    return check


def _rows_of(salted: list[Observation]) -> list[Any]:
    """The rows a read returned: its value (``read_rows``: ``("list", rows)``) or its
    streamed rows."""
    assert not [o for o in salted if o[0] == "raised"], salted
    [observation] = [o for o in salted if o[0] in ("ok", "rows")]
    value = observation[1]
    return list(value[1] if observation[0] == "ok" else value)


def _descending(rows: list[Any]) -> list[bytes]:
    keys = [row[1] for row in rows]  # ("Row", key, cells)
    assert keys == sorted(set(keys), reverse=True), keys
    return keys


def reversed_reads_backwards(plain: list[Observation], salted: list[Observation]) -> None:
    """The plain table's client cannot read backwards (``MethodNotImplemented``: 2.50
    never sends the reverse-scan feature header); the salted table sends it and reads
    the largest keys first, exactly ``rows_limit`` (3) of them."""
    assert {o[2][0] for o in plain if o[0] == "raised"} == {
        "google.api_core.exceptions.MethodNotImplemented"
    }, plain
    assert len(_descending(_rows_of(salted))) == 3


def reversed_shard_reads_backwards(plain: list[Observation], salted: list[Observation]) -> None:
    """A reversed shard reads its rows largest key first (the plain table's shard fails)."""
    assert len(_descending(_rows_of(salted))) > 3


def without_causes(observations: list[Observation]) -> list[Observation]:
    """Observations with the cause types inside error groups left out."""
    out = []
    for o in observations:
        if o[0] == "raised" and len(o[2]) == 3 and isinstance(o[2][1], list):
            name, failures, rest = o[2]
            o = (*o[:2], (name, [(i, ref) for i, ref, _ in failures], rest))
        out.append(o)
    return out


def record_first(plain: list[Observation], salted: list[Observation]) -> None:
    """The first write to a table without a layout record stores the record first, in the
    family the write names: an unknown family fails that store, so the write fails with
    the store's error, in the write's own shape (every entry failed, reported where the
    client reports it). The emulator answers the store (CheckAndMutateRow) and the write
    (MutateRows) with different codes, so only the causes' types differ."""
    assert without_causes(salted) == without_causes(plain)


def key_refused(plain: list[Observation], salted: list[Observation]) -> None:
    """saltedtable refuses a key Bigtable refuses (see :data:`KEY_REFUSED`) with its own
    ``RowKeyError``, and writes nothing the plain table did not; the plain table's answer is
    the server's (Cloud Bigtable refuses with InvalidArgument, the emulator is laxer)."""
    raised = [o for o in salted if o[0] == "raised"]
    assert raised, salted
    first = raised[0][2]
    names = {first[0], *(first[2] if len(first) == 3 and first[1] == "isa" else ())}
    assert "saltedtable.RowKeyError" in names, salted
    initial = {o[0]: o for o in salted}.get("initial")
    final = {o[0]: o for o in salted}.get("final")
    plain_final = {o[0]: o for o in plain}.get("final")
    if final is None or plain_final is None or (initial is not None and initial[1] == final[1]):
        return  # nothing written (a refused call writes nothing)
    # A batcher writes its other entries: every row is the plain table's.
    extra = [row for row in final[1] if row not in plain_final[1]]
    assert not extra, f"the salted table wrote what the plain one did not: {extra}"


def refused_at_call(error: str) -> Any:
    """The salted table refuses the call with ``error`` before anything is sent."""
    return refused_at("call", error)


SCENARIOS: tuple[Scenario, ...] = (
    *read_scenarios(),
    *point_read_scenarios(),
    *sharded_scenarios(),
    *sample_scenarios(),
    *mutate_row_scenarios(),
    *bulk_scenarios(),
    *check_and_mutate_scenarios(),
    *read_modify_write_scenarios(),
    *batcher_scenarios(),
    *table_scenarios(),
    *missing_table_scenarios(),
    *java_scenarios(),
)
