"""Apache Beam transforms for salted tables: parallel reads and writes, backfill and resalt.

Needs Apache Beam (the ``beam`` extra: ``pip install '.[beam]'`` from a checkout;
saltedtable is not on PyPI yet). The core package never imports Beam; this one
does on import.

* :class:`ReadSaltedRows`: rows with logical keys, read in parallel splits.
* :class:`WriteSaltedRows`: logical-key mutations, salted (or routed by a cutoff).
* :class:`BackfillLegacy`, :class:`DeleteLegacy` and the steps :func:`backfill`,
  :func:`verify_backfill`, :func:`cut_over`, :func:`delete_legacy`: finishing a
  forward-only migration.
* :func:`backfill_window`, :func:`verify_window`, :func:`retire_window`: the
  dual-layout window's backfill, its verify and its close, from the layout record.
* :func:`resalt`, :func:`verify_resalt`: another bucket count, hash or key part,
  into a new table.
* :func:`run_pipeline`, :func:`counters`: run a pipeline here or on Dataflow, and
  read its counters.

See ``docs/scaling-out.md``.
"""

from __future__ import annotations

try:
    import apache_beam  # noqa: F401  (every module here needs it)
except ModuleNotFoundError as exc:
    if (exc.name or "").partition(".")[0] != "apache_beam":
        raise
    raise ModuleNotFoundError(
        "saltedtable.beam needs Apache Beam, which is not installed: "
        "pip install 'apache-beam>=2.60' (saltedtable's beam extra)",
        name=exc.name,
    ) from exc

from .._exceptions import WriteFailedError
from .._public import publish
from ._io import (
    METRICS_NAMESPACE,
    BigtableTarget,
    FailedWrite,
    ReadSaltedRows,
    WriteSaltedRows,
    copy_entry,
    row_digest,
)
from ._migrate import (
    BackfillLegacy,
    Checksums,
    DeleteLegacy,
    MigrationReport,
    PruneOrphanCopies,
    backfill,
    counters,
    cut_over,
    delete_legacy,
    resalt,
    run_pipeline,
    verify_backfill,
    verify_resalt,
)
from ._window import backfill_window, retire_window, verify_window

__all__ = [
    "METRICS_NAMESPACE",
    "BackfillLegacy",
    "BigtableTarget",
    "Checksums",
    "DeleteLegacy",
    "FailedWrite",
    "MigrationReport",
    "PruneOrphanCopies",
    "ReadSaltedRows",
    "WriteFailedError",
    "WriteSaltedRows",
    "backfill",
    "backfill_window",
    "copy_entry",
    "counters",
    "cut_over",
    "delete_legacy",
    "resalt",
    "retire_window",
    "row_digest",
    "run_pipeline",
    "verify_backfill",
    "verify_resalt",
    "verify_window",
]

# Reprs, tracebacks and pickles name saltedtable.beam.ReadSaltedRows, not its private module.
publish(globals(), __all__, __name__)
