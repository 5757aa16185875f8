"""saltedtable: salted row keys for Google Cloud Bigtable behind a drop-in async table."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._exceptions import (
    BucketReadError,
    EmulatorError,
    EmulatorNotFoundError,
    QueryPlanError,
    RowKeyError,
    SaltedTableError,
    SaltSchemeError,
)
from ._plan import KeyRange, ReadPlan, SubQuery, plan_reads, rewrite_filter
from ._salt import HASHES, MAX_BUCKETS, KeyPart, SaltScheme, before_last, fields, prefix_end
from ._table import SaltedMutationsBatcher, SaltedTableAsync, TableLike

try:
    __version__ = version("saltedtable")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = [
    "HASHES",
    "MAX_BUCKETS",
    "BucketReadError",
    "EmulatorError",
    "EmulatorNotFoundError",
    "KeyPart",
    "KeyRange",
    "QueryPlanError",
    "ReadPlan",
    "RowKeyError",
    "SaltScheme",
    "SaltSchemeError",
    "SaltedMutationsBatcher",
    "SaltedTableAsync",
    "SaltedTableError",
    "SubQuery",
    "TableLike",
    "__version__",
    "before_last",
    "fields",
    "plan_reads",
    "prefix_end",
    "rewrite_filter",
]
