"""Helpers for the Beam tests: run a pipeline in-process and collect what it outputs."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
from google.cloud.bigtable.data.row import Row

from saltedtable.beam import counters, run_pipeline

#: Outputs by sink name. The in-process runner calls ``_append`` by reference (this
#: module is importable), so elements land here.
_SINKS: dict[str, list[Any]] = {}

Snapshot = list[tuple[bytes, tuple[tuple[str, bytes, int, bytes], ...]]]


_COUNTS: dict[str, int] = {}


def count_element(name: str) -> int:
    """Count one more element under ``name`` (in this process); return the new count."""
    _COUNTS[name] = _COUNTS.get(name, 0) + 1
    return _COUNTS[name]


def _append(element: Any, sink: str) -> None:
    _SINKS[sink].append(element)


def run_collect(build: Callable[[beam.Pipeline], Any]) -> tuple[list[Any], dict[str, int]]:
    """Run ``build(pipeline)`` locally; return what its returned PCollection held, and counters."""
    sink = uuid.uuid4().hex
    _SINKS[sink] = []

    def wrapped(p: beam.Pipeline) -> None:
        out = build(p)
        if out is not None:
            _ = out | "Collect" >> beam.Map(_append, sink)

    result = run_pipeline(wrapped)
    return _SINKS.pop(sink), counters(result)


def snapshot(rows: Iterable[Row]) -> Snapshot:
    """Rows as sortable data: key, then every cell (family, qualifier, timestamp, value)."""
    out = []
    for row in rows:
        assert all(c.row_key == row.row_key for c in row.cells), row.row_key
        cells = tuple(
            sorted((c.family, c.qualifier, c.timestamp_micros, c.value) for c in row.cells)
        )
        out.append((row.row_key, cells))
    return sorted(out)
