"""Choosing N: simulate how a range-partitioned store spreads a workload, salted or not.

``saltedtable advise`` on the command line; from Python::

    from saltedtable.advise import Access, advise

    advice = advise([Access(b"tenant007#1700000000000", 1.0, 1700000000.0), ...])
    advice.recommended

Modules: :mod:`~saltedtable.advise.model` (the pure simulation and
recommendation), :mod:`~saltedtable.advise.noise` (the noise floor, corrections
and intervals), :mod:`~saltedtable.advise.input` (CSV/NDJSON readers, table
sampling, progress), :mod:`~saltedtable.advise.report` (text and JSON reports),
:mod:`~saltedtable.advise.heatmap` (the heat map; needs matplotlib).
"""

from __future__ import annotations

from .._scheme.salt import format_key
from .model import (
    DEFAULT_CANDIDATES,
    DEFAULT_RESAMPLES,
    DEFAULT_SCAN_LIMIT,
    DEFAULT_TABLETS,
    DEFAULT_TARGET,
    Access,
    Advice,
    CountUnitChoice,
    Finding,
    HotSpot,
    Simulation,
    TimeAxis,
    Verdict,
    WindowChoice,
    advise,
)

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SCAN_LIMIT",
    "DEFAULT_TABLETS",
    "DEFAULT_TARGET",
    "Access",
    "Advice",
    "CountUnitChoice",
    "Finding",
    "HotSpot",
    "Simulation",
    "TimeAxis",
    "Verdict",
    "WindowChoice",
    "advise",
    "format_key",
]
