"""saltedtable: salted row keys for Google Cloud Bigtable behind a drop-in async table."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._cutoff import (
    CutoffPolicy,
    TimestampReader,
    big_endian_int,
    epoch_field,
    iso8601_field,
    reversed_epoch_field,
)
from ._exceptions import (
    BucketReadError,
    CutoffError,
    EmulatorError,
    EmulatorNotFoundError,
    LayoutError,
    QueryPlanError,
    RowKeyError,
    SaltedTableError,
    SaltSchemeError,
)
from ._guard import SCHEME_ROW_KEY, SchemeMismatchError, describe_layout
from ._layout import Layout
from ._plan import ReadPlan, SubQuery, plan_reads, rewrite_filter
from ._ranges import KeyRange
from ._salt import HASHES, MAX_BUCKETS, KeyPart, SaltScheme, before_last, fields, prefix_end
from ._stats import BucketStats, CallStats, StatsHook
from ._table import SaltedMutationsBatcher, SaltedTableAsync, TableLike

try:
    __version__ = version("saltedtable")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = [
    "HASHES",
    "MAX_BUCKETS",
    "SCHEME_ROW_KEY",
    "BucketReadError",
    "BucketStats",
    "CallStats",
    "CutoffError",
    "CutoffPolicy",
    "EmulatorError",
    "EmulatorNotFoundError",
    "KeyPart",
    "KeyRange",
    "Layout",
    "LayoutError",
    "QueryPlanError",
    "ReadPlan",
    "RowKeyError",
    "SaltScheme",
    "SaltSchemeError",
    "SaltedMutationsBatcher",
    "SaltedTableAsync",
    "SaltedTableError",
    "SchemeMismatchError",
    "StatsHook",
    "SubQuery",
    "TableLike",
    "TimestampReader",
    "__version__",
    "before_last",
    "big_endian_int",
    "describe_layout",
    "epoch_field",
    "fields",
    "iso8601_field",
    "plan_reads",
    "prefix_end",
    "reversed_epoch_field",
    "rewrite_filter",
]
