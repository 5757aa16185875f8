"""Migration states of the layout record: finishing a forward-only migration safely.

Pure code. A table written with a time cutoff holds its older rows unsalted
(the legacy side). Finishing the migration copies them into the salted layout
(a backfill), moves every reader and writer to the fully salted layout, then
deletes the legacy rows. Readers of both layouts run side by side while
services are redeployed, so the stored layout record (see ``decisions``) says
which layouts may open the table at each step::

    cutoff      the record of (scheme, cutoff); only cutoff readers open
    backfill    + "migration": "backfill": copies of legacy rows may exist in
                the buckets; only cutoff readers open, and their scans leave the
                copies out (``Layout.salted_stray_reason``)
    cutover     + "migration": "cutover": every copy was verified; cutoff
                readers (reading the legacy rows) and fully salted readers
                (reading the copies) both open and see the same rows
    deleting    + "migration": "deleting": every service runs fully salted and
                the copies are the rows; the legacy rows are being deleted, so
                only fully salted readers open
    salted      the record of (scheme, no cutoff), written once the legacy rows
                are deleted; cutoff readers are refused from then on

Each step is a compare-and-swap of the record, so it happens once, in order.
The state names are defined once, in ``record``.
"""

from __future__ import annotations

import dataclasses

from .._scheme.cutoff import CutoffPolicy
from .._scheme.salt import SaltScheme
from .record import (
    BACKFILL,
    CUTOVER,
    DELETING,
    MIGRATION_KEY,
    MIGRATION_STATES,
    LayoutRecord,
    MigrationState,
    describe_layout,
    open_differences,
)

__all__ = [
    "BACKFILL",
    "CUTOVER",
    "DELETING",
    "MIGRATION_KEY",
    "MIGRATION_STATES",
    "MigrationState",
    "migration_record",
    "migration_state",
    "open_differences",
    "tolerates_copies",
    "tolerates_legacy_rows",
]


def migration_record(
    scheme: SaltScheme, cutoff: CutoffPolicy, state: MigrationState
) -> LayoutRecord:
    """The record of a cutoff layout whose legacy rows are being moved."""
    if state not in MIGRATION_STATES:
        names = ", ".join(repr(s) for s in MIGRATION_STATES)
        raise ValueError(f"a migration state is one of {names}, got {state!r}")
    return dataclasses.replace(describe_layout(scheme, cutoff), migration=state)


def migration_state(record: LayoutRecord | None) -> MigrationState | None:
    """The migration state a stored record is in (None: no migration in progress)."""
    if record is None:
        return None
    state = record.migration
    for known in MIGRATION_STATES:
        if state == known:
            return known
    return None


def tolerates_copies(stored: LayoutRecord | None) -> bool:
    """True when bucket rows from before the cutoff are expected (backfilled copies)."""
    return migration_state(stored) is not None


def tolerates_legacy_rows(stored: LayoutRecord | None) -> bool:
    """True when rows outside every salt prefix are expected by a fully salted reader."""
    return migration_state(stored) in (CUTOVER, DELETING)
