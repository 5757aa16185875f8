"""Optional OpenTelemetry export of saltedtable's per-call statistics.

``opentelemetry-api`` is imported only when :func:`stats_hook` is called (the
Bigtable client already depends on it, but saltedtable does not require it)::

    from saltedtable import SaltedTableAsync
    from saltedtable.otel import stats_hook

    table = SaltedTableAsync(raw_table, scheme, stats_hook=stats_hook())

Instruments (all with the attribute ``saltedtable.operation``; per-bucket ones
also with ``saltedtable.bucket``, ``"legacy"`` for the unsalted side):

* ``saltedtable.call.duration`` (histogram, s)
* ``saltedtable.call.skew`` (histogram): busiest bucket / mean
* ``saltedtable.bucket.rows`` and ``saltedtable.bucket.bytes`` (counters)
* ``saltedtable.bucket.retries`` (counter)
* ``saltedtable.call.errors`` (counter)
"""

from __future__ import annotations

from typing import Any

from ._stats import CallStats, StatsHook

__all__ = ["stats_hook"]


def stats_hook(meter: Any = None, *, chain: StatsHook | None = None) -> StatsHook:
    """Return a stats hook that records every call on OpenTelemetry instruments.

    Args:
        meter: An OpenTelemetry ``Meter``; by default
            ``opentelemetry.metrics.get_meter("saltedtable")``.
        chain: Another hook to call after recording (for example your own logger).

    Raises:
        ImportError: ``opentelemetry-api`` is not installed.
    """
    if meter is None:
        from opentelemetry import metrics

        meter = metrics.get_meter("saltedtable")
    duration = meter.create_histogram("saltedtable.call.duration", unit="s")
    skew = meter.create_histogram("saltedtable.call.skew", unit="1")
    rows = meter.create_counter("saltedtable.bucket.rows", unit="{row}")
    size = meter.create_counter("saltedtable.bucket.bytes", unit="By")
    retries = meter.create_counter("saltedtable.bucket.retries", unit="{retry}")
    errors = meter.create_counter("saltedtable.call.errors", unit="{call}")

    def record(stats: CallStats) -> None:
        call = {"saltedtable.operation": stats.operation}
        if stats.elapsed is not None:
            duration.record(stats.elapsed, call)
        skew.record(stats.skew, call)
        if stats.error is not None:
            errors.add(1, {**call, "saltedtable.error": type(stats.error).__name__})
        for bucket, b in stats.buckets.items():
            labels = {**call, "saltedtable.bucket": "legacy" if bucket is None else str(bucket)}
            rows.add(b.rows, labels)
            size.add(b.bytes, labels)
            if b.retries:
                retries.add(b.retries, labels)
        if chain is not None:
            chain(stats)

    return record
