"""Exceptions raised by saltedtable.

Every error saltedtable raises itself derives from :class:`SaltedTableError`.
Errors that come from Bigtable (``google.api_core.exceptions`` and the data
client's own exception groups) are passed through untouched, except where a
sub-scan of a fan-out fails: then the Bigtable error becomes the ``__cause__``
of a :class:`BucketReadError` that says which bucket and range failed::

    SaltedTableError
    ├── SaltSchemeError (ValueError)    bad scheme configuration
    ├── RowKeyError (ValueError)        a key the scheme or Bigtable cannot take
    ├── QueryPlanError (ValueError)     a read that cannot be answered correctly
    ├── CutoffError (ValueError)        a bad cutoff policy, or a key time it cannot read
    ├── LayoutError                     the table's rows do not fit the configured layout
    ├── BucketReadError                 one sub-scan of a fan-out failed
    └── EmulatorError (RuntimeError)    the local emulator harness (saltedtable.testing)
        └── EmulatorNotFoundError       cbtemulator is not installed
"""

from __future__ import annotations

from typing import Any


class SaltedTableError(Exception):
    """Base for every error saltedtable raises itself."""


class SaltSchemeError(SaltedTableError, ValueError):
    """A salt scheme was configured with values that cannot work."""


class RowKeyError(SaltedTableError, ValueError):
    """A row key cannot be salted, unsalted or sent to Bigtable."""


class QueryPlanError(SaltedTableError, ValueError):
    """A logical read cannot be turned into physical reads that mean the same."""


class CutoffError(SaltedTableError, ValueError):
    """A cutoff policy is misconfigured, or cannot place a key before or after the cutoff."""


class LayoutError(SaltedTableError):
    """Rows in the table contradict the configured layout (scheme, cutoff).

    Raised when a table is opened, before any row could be misread.
    """


class BucketReadError(SaltedTableError):
    """One sub-scan of a salted read failed; the whole read failed with it.

    Attributes:
        bucket: The salt bucket whose sub-scan failed (None: the legacy side).
        query: The physical sub-query that was being read.
    """

    def __init__(self, message: str, *, bucket: int | None, query: Any) -> None:
        super().__init__(message)
        self.bucket = bucket
        self.query = query


class EmulatorError(SaltedTableError, RuntimeError):
    """The local Bigtable emulator could not be started or used."""


class EmulatorNotFoundError(EmulatorError):
    """The ``cbtemulator`` binary could not be found."""
