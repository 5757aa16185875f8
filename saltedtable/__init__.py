"""saltedtable: salted row keys for Google Cloud Bigtable behind a drop-in table.

The pure parts (schemes, cutoff policies, layouts, budgets, exceptions) are
imported with the package. Names whose modules import the Bigtable client
(the tables, the planner, the guard) are imported on first use, so that
``import saltedtable`` and ``saltedtable key ...`` stay quick.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ._engine.budget import ReadBudget
from ._exceptions import (
    CutoffError,
    EmulatorError,
    EmulatorNotFoundError,
    LayoutError,
    QueryPlanError,
    RecordMissingError,
    RowKeyError,
    RowKeyTypeError,
    SaltedTableError,
    SaltSchemeError,
    SchemeMismatchError,
    SplitKeyError,
    UnsaltableKeyError,
    WindowError,
    WindowFilterError,
)
from ._guard.families import RECORD_FAMILY
from ._guard.record import CutoffRecord, LayoutRecord, describe_layout
from ._public import publish as _publish
from ._public import publish_one as _publish_one
from ._read.settings import ReadSettings
from ._read.stats import BucketStats, CallStats, OneRequestOutcome, OneRequestResult, StatsHook
from ._scheme.cutoff import (
    CutoffPolicy,
    TimestampReader,
    big_endian_int,
    epoch_field,
    iso8601_field,
    reversed_epoch_field,
)
from ._scheme.epochs import Epoch, Epochs
from ._scheme.hot import HotLayout
from ._scheme.layout import Layout
from ._scheme.named import NamedKeyPart, named_key_part
from ._scheme.ranges import KeyRange
from ._scheme.salt import (
    HASHES,
    MAX_BUCKETS,
    SCHEME_ROW_KEY,
    KeyPart,
    SaltScheme,
    before_last,
    fields,
    prefix_end,
)
from ._scheme.views import view_row_prefixes

if TYPE_CHECKING:
    from ._async.batcher import SaltedMutationsBatcherAsync
    from ._async.table import SaltedTableAsync
    from ._async.table_like import TableLikeAsync
    from ._create import CreateResult, create_salted_table
    from ._read.plan import ReadPlan, SubQuery, plan_reads, rewrite_filter
    from ._read.sources import SubScan
    from ._resalt import AppendResult, RepairResult, append_epoch, repair_epochs
    from ._scheme.window import BackfillProgress, Window
    from ._split import MoveProgress, finish_hot_move, split_hot_key
    from ._sync_autogen.batcher import SaltedMutationsBatcherSync
    from ._sync_autogen.table import SaltedTable
    from ._sync_autogen.table_like import SyncTableLike
    from ._window_ops import (
        WindowStep,
        backfill_resalt_window,
        close_resalt_window,
        open_resalt_window,
        resalt_window_status,
        verify_resalt_window,
    )

__version__: str
#: Public names whose modules import the Bigtable client, by module.
_LAZY: dict[str, str] = {
    "CreateResult": "._create",
    "create_salted_table": "._create",
    "AppendResult": "._resalt",
    "append_epoch": "._resalt",
    "RepairResult": "._resalt",
    "repair_epochs": "._resalt",
    "WindowStep": "._window_ops",
    "backfill_resalt_window": "._window_ops",
    "close_resalt_window": "._window_ops",
    "open_resalt_window": "._window_ops",
    "resalt_window_status": "._window_ops",
    "verify_resalt_window": "._window_ops",
    "ReadPlan": "._read.plan",
    "SubQuery": "._read.plan",
    "plan_reads": "._read.plan",
    "split_hot_key": "._split",
    "finish_hot_move": "._split",
    "MoveProgress": "._split",
    "rewrite_filter": "._read.plan",
    "SubScan": "._read.sources",
    "SaltedTable": "._sync_autogen.table",
    "SaltedMutationsBatcherSync": "._sync_autogen.batcher",
    "SyncTableLike": "._sync_autogen.table_like",
    "SaltedTableAsync": "._async.table",
    "TableLikeAsync": "._async.table_like",
    "SaltedMutationsBatcherAsync": "._async.batcher",
    "Window": "._scheme.window",
    "BackfillProgress": "._scheme.window",
}
#: Old public names that still work, with a DeprecationWarning, until 0.3.0: the new
#: name of each. (They follow python-bigtable: ``...Async`` names the async class; in
#: 0.3.0 the plain names name the sync ones, as ``MutationsBatcher`` does.)
_DEPRECATED: dict[str, str] = {
    "SaltedMutationsBatcher": "SaltedMutationsBatcherAsync",
    "TableLike": "TableLikeAsync",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    new = _DEPRECATED.get(name)
    if new is not None:
        warnings.warn(
            f"saltedtable.{name} is renamed saltedtable.{new} (the async class, as in "
            f"python-bigtable); from 0.3.0 on, {name} names the sync class instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(new)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'saltedtable' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    _publish_one(value, __name__)
    globals()[name] = value
    return value


def _version() -> str:
    # importlib.metadata costs more to import than the rest of the package.
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("saltedtable")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "HASHES",
    "MAX_BUCKETS",
    "RECORD_FAMILY",
    "SCHEME_ROW_KEY",
    "AppendResult",
    "BackfillProgress",
    "BucketStats",
    "CallStats",
    "CreateResult",
    "CutoffError",
    "CutoffPolicy",
    "CutoffRecord",
    "EmulatorError",
    "EmulatorNotFoundError",
    "Epoch",
    "Epochs",
    "HotLayout",
    "KeyPart",
    "KeyRange",
    "Layout",
    "LayoutError",
    "LayoutRecord",
    "MoveProgress",
    "NamedKeyPart",
    "OneRequestOutcome",
    "OneRequestResult",
    "QueryPlanError",
    "ReadBudget",
    "ReadPlan",
    "ReadSettings",
    "RecordMissingError",
    "RepairResult",
    "RowKeyError",
    "RowKeyTypeError",
    "SaltScheme",
    "SaltSchemeError",
    "SaltedMutationsBatcherAsync",
    "SaltedMutationsBatcherSync",
    "SaltedTable",
    "SaltedTableAsync",
    "SaltedTableError",
    "SchemeMismatchError",
    "SplitKeyError",
    "StatsHook",
    "SubQuery",
    "SubScan",
    "SyncTableLike",
    "TableLikeAsync",
    "TimestampReader",
    "UnsaltableKeyError",
    "Window",
    "WindowError",
    "WindowFilterError",
    "WindowStep",
    "__version__",
    "append_epoch",
    "backfill_resalt_window",
    "before_last",
    "big_endian_int",
    "close_resalt_window",
    "create_salted_table",
    "describe_layout",
    "epoch_field",
    "fields",
    "finish_hot_move",
    "iso8601_field",
    "named_key_part",
    "open_resalt_window",
    "plan_reads",
    "prefix_end",
    "repair_epochs",
    "resalt_window_status",
    "reversed_epoch_field",
    "rewrite_filter",
    "split_hot_key",
    "verify_resalt_window",
    "view_row_prefixes",
]

# Reprs, tracebacks and pickles name saltedtable.SaltScheme, not the private module
# that defines it (which may move); the lazy names get the same when __getattr__
# first loads them.
_publish(globals(), __all__, __name__)
