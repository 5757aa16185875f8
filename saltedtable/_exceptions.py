"""Every exception saltedtable raises itself, in one tree.

saltedtable raises its own errors only for its own refusals: a bad key or
scheme, a read it cannot answer correctly, a table that contradicts the
layout. Everything that comes from Bigtable keeps the client's type
(``google.api_core.exceptions.DeadlineExceeded``, ``NotFound``, the data
client's ``MutationsExceptionGroup``, ...), so ``except`` clauses written
against ``TableAsync`` keep matching. When one sub-scan of a salted read
fails, its exception is raised as it is, with a note naming the bucket and
range, and a :class:`~saltedtable.SubScan` in ``exc.saltedtable_subscan``::

    SaltedTableError
    ├── SaltSchemeError (ValueError)        bad scheme configuration
    ├── RowKeyError (ValueError)            a key the scheme or Bigtable cannot take
    │   ├── RowKeyTypeError (TypeError)     a key that is neither bytes nor str
    │   └── UnsaltableKeyError              a key the scheme's hash cannot read
    ├── QueryPlanError (ValueError)         a read that cannot be answered correctly
    ├── SplitKeyError (ValueError)          what a split (hot) row cannot do
    ├── CutoffError (ValueError)            a bad cutoff policy, or a key time it cannot read
    ├── LayoutError                         the table's rows or record contradict the layout
    │   ├── SchemeMismatchError             the stored layout record differs
    │   ├── RecordMissingError              no record, and require_record=True
    │   └── WindowError                     refused while a resalt window is open
    │       └── WindowFilterError (QueryPlanError)  a filter the window cannot re-apply
    ├── WriteFailedError                    Beam writes that failed after the client's retries
    ├── EmulatorError (RuntimeError)        the local emulator harness (saltedtable.testing)
    │   └── EmulatorNotFoundError           cbtemulator is not installed
    └── CommandError                        the command line refused its input
        ├── UsageError                      bad arguments (exit status 2)
        └── DataError                       unreadable input data (exit status 1)
            └── InputError                  a sample the advisor cannot use
                └── MissingInputError       the sample file does not exist (also a UsageError)

The command-line errors (``CommandError`` and below) are public in
``saltedtable.advise`` (``InputError``, ``MissingInputError``) and through the exit
statuses of ``saltedtable``; ``WriteFailedError`` in ``saltedtable.beam``; the rest in
``saltedtable``.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

__all__ = [
    "CommandError",
    "CutoffError",
    "DataError",
    "EmulatorError",
    "EmulatorNotFoundError",
    "InputError",
    "LayoutError",
    "MissingInputError",
    "QueryPlanError",
    "RecordMissingError",
    "RowKeyError",
    "RowKeyTypeError",
    "SaltSchemeError",
    "SaltedTableError",
    "SchemeMismatchError",
    "SplitKeyError",
    "UnsaltableKeyError",
    "UsageError",
    "WindowError",
    "WindowFilterError",
    "WriteFailedError",
    "layout_differences",
]


class SaltedTableError(Exception):
    """Base for every error saltedtable raises itself."""


class SaltSchemeError(SaltedTableError, ValueError):
    """A salt scheme was configured with values that cannot work."""


class RowKeyError(SaltedTableError, ValueError):
    """A row key cannot be salted, unsalted or sent to Bigtable."""


class RowKeyTypeError(RowKeyError, TypeError):
    """A row key that is neither ``bytes`` nor ``str`` (the client raises ``TypeError``)."""


class UnsaltableKeyError(RowKeyError):
    """The scheme's hash cannot read this key (``hash="java"`` and a key that is not UTF-8).

    No row with such a key was ever written salted: point reads find nothing,
    and writes are refused.
    """


class QueryPlanError(SaltedTableError, ValueError):
    """A logical read cannot be turned into physical reads that mean the same."""


class SplitKeyError(SaltedTableError, ValueError):
    """An operation that cannot keep its meaning on a hot row split into sub-rows.

    A split row is K physical rows combined on read: single-row atomic
    operations (``check_and_mutate_row``, ``read_modify_write_row``), writes
    that cannot be combined (``MergeToCell``, HLL, ``SetCell`` in an aggregate
    family) and filters that judge a whole row or a cell's value are refused.
    The message names the row and its K.
    """


class CutoffError(SaltedTableError, ValueError):
    """A cutoff policy is misconfigured, or cannot place a key before or after the cutoff."""


class LayoutError(SaltedTableError):
    """The table contradicts the configured layout (scheme, cutoff).

    Raised before any row could be misread: by the guard on a table's first
    operation, or when a layout check finds rows that do not fit.
    """


def layout_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human-readable differences between two layout records (empty when they agree).

    What :class:`SchemeMismatchError` shows; migrations compare records with it too.

    The cutoff's ``at`` text is not compared, only the instant it names.
    """
    diffs = []
    for name in sorted(stored.keys() | current.keys()):
        if name == "version":
            continue
        a, b = stored.get(name), current.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            a = {k: v for k, v in a.items() if k != "at"}
            b = {k: v for k, v in b.items() if k != "at"}
        if a != b:
            diffs.append(f"{name}: stored {a!r}, now {b!r}")
    return diffs


class _Record(Protocol):
    """What the error shows of a layout record (``saltedtable._guard.record.LayoutRecord``)."""

    def as_dict(self) -> dict[str, Any]: ...

    def cli_flags(self) -> object:
        """The command-line flags of the layout (shown with ``str()``)."""
        ...


class SchemeMismatchError(LayoutError):
    """The table was written with a different layout than the one it is opened with.

    Attributes:
        stored: The layout record found in the table (a :class:`~saltedtable.LayoutRecord`).
        current: The layout record of the scheme it was opened with.
    """

    def __init__(self, stored: _Record, current: _Record) -> None:
        # Typed loosely: LayoutRecord lives above this floor (``saltedtable._guard.record``).
        self.stored: Any = stored
        self.current: Any = current
        a, b = stored.as_dict(), current.as_dict()
        lines = "\n".join(f"  {d}" for d in layout_differences(a, b))
        super().__init__(
            "this table was written with a different salt layout; reading it with the "
            f"new one would miss rows:\n{lines}\n"
            f"  stored:  {json.dumps(a, sort_keys=True)}\n"
            f"  current: {json.dumps(b, sort_keys=True)}\n"
            f"  stored, as command-line flags: {stored.cli_flags()}\n"
            "Open it with the stored scheme; after rewriting the data, replace the record "
            "with `saltedtable guard TABLE --override` and the new scheme's flags, or "
            "SaltedTableAsync.open(..., family=..., override_scheme=True)."
        )


class RecordMissingError(LayoutError):
    """The table has no layout record, and the table object requires one (``require_record=True``).

    Store one with ``saltedtable guard --family FAMILY`` (or ``guard_scheme(family=...)``),
    or create the table with ``saltedtable create``.
    """


class WindowError(LayoutError):
    """An operation refused while a dual-layout (resalt) window is open; names the window.

    During the window a logical row may have cells in both layouts: an atomic
    single-row operation (``check_and_mutate_row``, ``read_modify_write_row``)
    would see one of them only, and writes may not name the window's family.
    """


class WindowFilterError(WindowError, QueryPlanError):
    """A row filter the dual-layout window cannot re-apply to the union of a row's layouts.

    Row-level (cells per row), conditional, sampling, sink and label filters;
    the message names the window and the filter (its path in a chain or interleave).
    """


class WriteFailedError(SaltedTableError):
    """Writes of a Beam pipeline failed after the client's retries; names their logical keys.

    Attributes:
        failures: Every failed write (``row_key``: the logical key, ``error``: why).
    """

    def __init__(self, failures: list[Any]) -> None:
        self.failures = failures
        shown = "\n  ".join(f"{f.row_key!r}: {f.error}" for f in failures[:5])
        more = f"\n  (+{len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} salted write(s) failed:\n  {shown}{more}")


class EmulatorError(SaltedTableError, RuntimeError):
    """The local Bigtable emulator could not be started or used."""


class EmulatorNotFoundError(EmulatorError):
    """The ``cbtemulator`` binary could not be found."""


class CommandError(SaltedTableError):
    """The ``saltedtable`` command refused its input; the message is shown to the user.

    Args:
        *args: The message.
        exit_status: The process exit status, when not the class's own (see
            ``saltedtable._cli.commands``).
    """

    #: The process exit status.
    exit_status: int = 1

    def __init__(self, *args: object, exit_status: int | None = None) -> None:
        super().__init__(*args)
        if exit_status is not None:
            self.exit_status = exit_status


class UsageError(CommandError):
    """Bad command-line arguments."""

    exit_status = 2


class DataError(CommandError):
    """Input data that cannot be read (a bad line in a file, an unreachable table)."""


class InputError(DataError):
    """A sample the advisor cannot use: unreadable, malformed, or a table that cannot be read."""


class MissingInputError(InputError, UsageError):
    """The sample file does not exist (a usage problem rather than a data one: exit status 2)."""
