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
* ``saltedtable.read.one_request`` (counter): small reads' one request over
  every bucket, also with ``saltedtable.one_request.result``

With a ``tracer``, every call is also a span, ``saltedtable.<operation>``,
with the attributes of :func:`attributes`.
"""

from __future__ import annotations

import time
from typing import Any

from ._read.stats import CallStats, StatsHook, settings_dict

__all__ = ["attributes", "stats_hook"]

#: An OpenTelemetry attribute value (the types saltedtable gives).
_AttributeValue = str | bool | int | float


def attributes(stats: CallStats) -> dict[str, _AttributeValue]:
    """A call's statistics as flat OpenTelemetry attributes (what its span carries).

    ``saltedtable.operation``, ``.rows``, ``.requests``, ``.rounds``,
    ``.retries``, ``.skew``, ``.peak_buffered_rows``, ``.peak_buffered_bytes``,
    ``.stray_rows`` and ``.ended_early``; for reads, the
    :class:`~saltedtable.ReadSettings` as ``saltedtable.read.<field>`` (the
    budget as ``budget_rows`` and ``budget_bytes``) and, when the read
    considered one request over every bucket, the
    :class:`~saltedtable.OneRequestOutcome` as
    ``saltedtable.one_request.<field>``. A field that is None is left out
    (OpenTelemetry has no null), as is an empty ``error``.
    """
    out: dict[str, _AttributeValue] = {
        "saltedtable.operation": stats.operation,
        "saltedtable.rows": stats.rows,
        "saltedtable.requests": stats.requests,
        "saltedtable.rounds": stats.rounds,
        "saltedtable.retries": stats.retries,
        "saltedtable.skew": round(stats.skew, 3),
        "saltedtable.peak_buffered_rows": stats.peak_buffered_rows,
        "saltedtable.peak_buffered_bytes": stats.peak_buffered_bytes,
        "saltedtable.stray_rows": stats.stray_rows,
        "saltedtable.ended_early": stats.ended_early,
    }
    settings = stats.settings
    if settings is not None:
        read = settings_dict(settings)
        out.update({f"saltedtable.read.{k}": v for k, v in read.items() if v is not None})
    one = stats.one_request
    if one is not None:
        out.update(
            {
                "saltedtable.one_request.result": one.result,
                "saltedtable.one_request.asked": one.asked,
                "saltedtable.one_request.rows": one.rows,
                "saltedtable.one_request.bytes": one.bytes,
                "saltedtable.one_request.went_on": one.went_on,
            }
        )
        if one.error:
            out["saltedtable.one_request.error"] = one.error
    return out


def stats_hook(
    meter: Any = None, *, tracer: Any = None, chain: StatsHook | None = None
) -> StatsHook:
    """Return a stats hook that records every call on OpenTelemetry instruments.

    Args:
        meter: An OpenTelemetry ``Meter``; by default
            ``opentelemetry.metrics.get_meter("saltedtable")``.
        tracer: An OpenTelemetry ``Tracer``: each call also becomes a span
            named ``saltedtable.<operation>``, a child of the span current
            where the call ends, from the call's start to its end, with the
            attributes of :func:`attributes` and an error status if the call
            failed. None (the default): no spans.
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
    one_requests = meter.create_counter("saltedtable.read.one_request", unit="{read}")

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
        if stats.one_request is not None:
            one_requests.add(
                1, {**call, "saltedtable.one_request.result": stats.one_request.result}
            )
        if tracer is not None:
            _span(tracer, stats)
        if chain is not None:
            chain(stats)

    return record


def _span(tracer: Any, stats: CallStats) -> None:
    """Record the finished call as a span from its start to now."""
    from opentelemetry.trace import Status, StatusCode

    end = time.time_ns()
    start = end - int((stats.elapsed or 0.0) * 1e9)
    span = tracer.start_span(
        f"saltedtable.{stats.operation}", start_time=start, attributes=attributes(stats)
    )
    if stats.error is not None:
        span.record_exception(stats.error)
        span.set_status(Status(StatusCode.ERROR, type(stats.error).__name__))
    span.end(end_time=end)
