"""The advisor's reports: text for people, JSON (versioned) for machines.

Both are pure: they take an :class:`~saltedtable.advise.Advice` and what the
command knows about its input, and return text or a JSON-ready ``dict``.
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._scheme.salt import format_key
from .model import Advice, Simulation
from .noise import CONFIDENCE

if TYPE_CHECKING:
    import datetime as dt

    from .._guard.record import LayoutRecord
    from .input import TableSample

__all__ = [
    "JSON_SCHEMA",
    "epoch_scale",
    "epochs_advice",
    "json_report",
    "needs_time_reader",
    "resalt_command",
    "text_report",
    "window_command",
]

#: Bump when a key of ``advise --json`` changes meaning or disappears (history in
#: docs/advise.md).
JSON_SCHEMA: Final = 3
_LEVEL: Final = f"{CONFIDENCE:.0%}"

_EPOCH_UNITS: Final = ((1e9, 1e10, 1.0), (1e12, 1e13, 1e3), (1e15, 1e16, 1e6), (1e18, 1e19, 1e9))


def epoch_scale(values: Sequence[float]) -> float | None:
    """Divisor to epoch seconds when every value looks like an epoch time, else None.

    Epoch seconds, milliseconds, microseconds and nanoseconds of the years
    2001-2286 are recognised by their magnitude.
    """
    lo, hi = min(values), max(values)
    for low, high, scale in _EPOCH_UNITS:
        if low <= lo and hi < high:
            return scale
    return None


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.3g} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def _axis_text(advice: Advice, time_source: str) -> str:
    w = advice.windows
    chosen = " (chosen from the data)" if advice.window_choice == "auto" else ""
    if advice.time_axis == "none":
        return "no time axis (one window)"
    if advice.time_axis == "order":
        return f"sample order in {w} window{'s' * (w != 1)}{chosen}"
    edges = advice.window_edges
    scale = epoch_scale(edges)
    span = (edges[-1] - edges[0]) / w
    each = _duration(span / scale) if scale else f"{span:.4g}"
    return f"time from the {time_source} in {w} window{'s' * (w != 1)} of {each}{chosen}"


def _interval(sim: Simulation) -> str:
    return f"{sim.low:.2f}-{sim.high:.2f}"


def _counts_text(advice: Advice) -> str:
    """How the counts were read as accesses (nothing when every line is one access of 1)."""
    unit = advice.count_unit
    if advice.count_unit_choice == "given":
        how = f"count unit {unit:g}, as given"
    elif unit != 1.0:
        how = f"every count is {unit:g}: read as one access a line"
    elif advice.total_load != advice.lines - advice.storage_lines:
        how = "each count is that many accesses"
    else:
        return ""
    return f"{advice.events:,.0f} accesses ({how}); "


def _noise_text(advice: Advice) -> str:
    return (
        f"a perfectly uniform workload sampled like this shows max/mean "
        f"{advice.noise_floor:.2f} (up to {advice.noise_floor_high:.2f}); corrected values "
        f"and {_LEVEL} intervals from {advice.resamples} resamples (seed {advice.seed})"
    )


def _why_it_meets(sim: Simulation, advice: Advice) -> str:
    if sim.verdict == "uniform":
        return (
            f"indistinguishable from uniform (max/mean {sim.max_mean:.2f}, within the noise "
            f"floor's {advice.noise_floor_high:.2f})"
        )
    return f"max/mean {sim.corrected:.2f}, {_LEVEL} interval {_interval(sim)}"


def text_report(
    advice: Advice,
    *,
    source: str,
    time_source: str,
    hash_name: str,
    key_part: str | None,
    show_key: Callable[[bytes], str] = format_key,
    keys: str | None = None,
) -> str:
    """The report for people, as printed by ``saltedtable advise``.

    Args:
        advice: What :func:`~saltedtable.advise.advise` returned.
        source: The input, as the first line names it.
        time_source: Where the times came from (``time column``, ``cell timestamps``).
        hash_name: The hash the layouts were salted with.
        key_part: The ``--key-part`` spec, if any.
        show_key: How keys are shown.
        keys: How a table's keys were read (:meth:`~saltedtable.advise.input.TableSample.describe`),
            shown under the sample line.

    Returns:
        The report, lines separated by ``\\n``, ending with a newline.
    """
    out: list[str] = []
    limit = advice.scan_limit
    storage = (
        f" ({advice.storage_lines:,} of count 0: storage only)" if advice.storage_lines else ""
    )
    out.append(
        f"sample: {source}: {advice.lines:,} lines{storage}, "
        f"{advice.distinct_keys:,} distinct keys, load {advice.total_load:,.6g}; "
        f"{_axis_text(advice, time_source)}"
    )
    if keys is not None:
        out.append(f"  {keys}")
    part = f", key part {key_part}" if key_part else ""
    out.append(
        f"model: {advice.tablets} tablets of equal key count; hash {hash_name}{part}; "
        f"target max/mean <= {advice.target:g}"
    )
    out.append(f"noise: {_counts_text(advice)}{_noise_text(advice)}")
    out.append("")
    # The keys rise with time: a column for the max/mean at the ends where they are written.
    ends = advice.simulations[0].write_end_level is not None
    head = f"{'ends':>6}  " if ends else ""
    out.append(
        f"{'N':>5}  {'max/mean':>8}  {'corrected':>9}  {_LEVEL + ' interval':>12}  "
        f"{'verdict':<8}  {head}{'sub-scans':>9}  rows read by a limit-{limit} scan"
    )
    blank = f"{'':>6}  " if ends else ""
    out.append(
        f"{'':>5}  {'':>8}  {'':>9}  {'':>12}  {'':<8}  {blank}{'':>9}  {'naive':>8}  saltedtable"
    )
    for sim in advice.simulations:
        mark = "  <- recommended" if sim.buckets == advice.recommended else ""
        level = f"{sim.write_end_level:>6.2f}  " if sim.write_end_level is not None else ""
        out.append(
            f"{sim.buckets:>5}  {sim.max_mean:>8.2f}  {sim.corrected:>9.2f}  "
            f"{_interval(sim):>12}  {sim.verdict:<8}  {level}{sim.sub_scans:>9}  "
            f"{sim.naive_limit_rows:>8,}  {sim.paged_limit_rows:>11,}{mark}"
        )
    if ends:
        out.append(
            "ends: max/mean at one moment, when the keys that rise with time are written at "
            "the end of each bucket (see monotonic-keys)"
        )
    out.append("")
    unsalted = advice.simulations[0]
    hot = unsalted.hottest
    out.append(
        f"hottest tablet, unsalted: {_clip(show_key(hot.first_key), 40)} .. "
        f"{_clip(show_key(hot.last_key), 40)}"
    )
    out.append(
        f"  at its peak {hot.ratio:.1f}x the mean tablet, in window {hot.window + 1} of "
        f"{advice.windows} ({hot.share:.0%} of that window's load)"
    )
    # A measure that meets the target says nothing of the end where rising keys go.
    at_end = (
        f"; but its end, where the keys that rise with time are written, takes "
        f"{unsalted.write_end_level:.2f}x the mean tablet"
        if unsalted.write_end_level is not None
        else ""
    )
    if unsalted.verdict == "uniform":
        out.append(
            f"rule of thumb: N ~ {advice.rule_of_thumb}: the unsalted layout is "
            f"indistinguishable from uniform{at_end}"
        )
    elif unsalted.meets_target:
        out.append(
            f"rule of thumb: N ~ {advice.rule_of_thumb}: the unsalted layout already meets "
            f"max/mean <= {advice.target:g} ({unsalted.corrected:.2f}, corrected){at_end}"
        )
    else:
        out.append(
            f"rule of thumb: N ~ {advice.rule_of_thumb}, the unsalted max/mean "
            f"({advice.rule_of_thumb_ratio:.1f}, corrected) rounded up"
        )
    if advice.recommended is None:
        out.append(f"recommended: none of the candidates meets max/mean <= {advice.target:g}")
    else:
        best = advice.simulation(advice.recommended)
        if best.buckets == 1:  # never with keys that rise with time (see advise())
            out.append(f"recommended: N = 1, no salting: {_why_it_meets(best, advice)}")
        else:
            at_ends = (
                ""
                if best.write_end_level is None
                else ", also at the ends where the keys that rise with time are written "
                f"({best.write_end_level:.2f})"
            )
            out.append(
                f"recommended: N = {best.buckets}, the smallest candidate that meets "
                f"max/mean <= {advice.target:g}{at_ends}: {_why_it_meets(best, advice)}"
            )
            out.append(
                f"  cost: every scan becomes {best.sub_scans} sub-scans; a limit-{limit} read "
                f"fetches about {best.paged_limit_rows:,} rows"
            )
            out.append(f"  ({best.naive_limit_rows:,} if each bucket were read to the limit)")
    for finding in advice.findings:
        out.append("")
        out.append(
            textwrap.fill(
                finding.message,
                width=100,
                initial_indent=f"{finding.severity} [{finding.code}]: ",
                subsequent_indent="  ",
            )
        )
    return "\n".join(out) + "\n"


def json_report(
    advice: Advice,
    *,
    source: str,
    fmt: str,
    hash_name: str,
    key_part: str | None,
    keys_as_hex: bool = False,
    plot: str | None = None,
    table: TableSample | None = None,
) -> dict[str, Any]:
    """The report for machines: a JSON-ready ``dict`` with ``"schema": JSON_SCHEMA``.

    The keys and their history are documented in docs/advise.md.

    Args:
        advice: What :func:`~saltedtable.advise.advise` returned.
        source: The input (a path, ``stdin`` or ``table ID``).
        fmt: How it was read: ``csv``, ``ndjson`` or ``table``.
        hash_name: The hash the layouts were salted with.
        key_part: The ``--key-part`` spec, if any.
        keys_as_hex: Show keys as hex instead of escaped text.
        plot: The heat map written, if any.
        table: How a sampled table's rows were read (``input.layout_record``,
            ``input.left_out``; null for a file).
    """
    show = bytes.hex if keys_as_hex else format_key
    return {
        "schema": JSON_SCHEMA,
        "input": {
            "source": source,
            "format": fmt,
            "lines": advice.lines,
            "storage_lines": advice.storage_lines,
            "distinct_keys": advice.distinct_keys,
            "total_load": advice.total_load,
            "count_unit": advice.count_unit,
            "events": round(advice.events, 6),
            "time_axis": advice.time_axis,
            "windows": advice.windows,
            "window_edges": [round(edge, 6) for edge in advice.window_edges],
            "keys_as": "hex" if keys_as_hex else "text",
            "layout_record": None
            if table is None or table.record is None
            else {
                "family": table.record_family,
                "record": table.record.as_dict(),
                "flags": str(table.record.cli_flags()),
            },
            "left_out": None
            if table is None
            else {
                "record_rows": table.record_rows,
                "outside_layout": table.outside,
                "hidden": table.hidden,
            },
        },
        "model": {
            "tablets": advice.tablets,
            "target": advice.target,
            "scan_limit": advice.scan_limit,
            "hash": hash_name,
            "key_part": key_part,
            "windows": advice.window_choice,
            "count_unit": advice.count_unit_choice,
            "resamples": advice.resamples,
            "seed": advice.seed,
            "confidence": CONFIDENCE,
        },
        "noise": {
            "floor": round(advice.noise_floor, 4),
            "floor_high": round(advice.noise_floor_high, 4),
        },
        "layouts": [
            {
                "buckets": sim.buckets,
                "max_mean": round(sim.max_mean, 4),
                "corrected": round(sim.corrected, 4),
                "interval": [round(sim.low, 4), round(sim.high, 4)],
                "verdict": sim.verdict,
                "meets_target": sim.meets_target,
                "sub_scans": sim.sub_scans,
                "naive_limit_rows": sim.naive_limit_rows,
                "paged_limit_rows": sim.paged_limit_rows,
                "write_end_level": None
                if sim.write_end_level is None
                else round(sim.write_end_level, 4),
                "hottest": {
                    "tablet": sim.hottest.tablet,
                    "window": sim.hottest.window,
                    "first_key": show(sim.hottest.first_key),
                    "last_key": show(sim.hottest.last_key),
                    "ratio": round(sim.hottest.ratio, 4),
                    "share": round(sim.hottest.share, 4),
                },
            }
            for sim in advice.simulations
        ],
        "rule_of_thumb": advice.rule_of_thumb,
        "rule_of_thumb_ratio": advice.rule_of_thumb_ratio,
        "recommended": advice.recommended,
        "hot_key_floor": round(advice.hot_key_floor, 4),
        "top_keys": [{"key": show(k), "share": round(s, 6)} for k, s in advice.top_keys],
        "findings": [
            {"code": f.code, "severity": f.severity, "message": f.message} for f in advice.findings
        ],
        "plot": plot,
    }


# -- a live table's epochs ------------------------------------------------------------

#: The lead a record without one gets with its first epoch (``_guard.resalt.DEFAULT_MIN_LEAD``).
_DEFAULT_LEAD: Final = 120.0


def resalt_command(
    record: LayoutRecord,
    buckets: int,
    *,
    table: str,
    instance: str,
    project: str,
    now: dt.datetime,
) -> str:
    """The ``saltedtable resalt`` line that appends an epoch of ``buckets`` to this table.

    It keeps the newest epoch's hash, separator and marker, and starts the
    epoch at the first UTC midnight at least the record's minimum lead from
    ``now``. A table without epochs and without a cutoff needs the reader of
    the time in its keys: ``--time READER`` is left for the operator to fill in.
    """
    import datetime as dt

    lead = _DEFAULT_LEAD
    if record.epochs is not None and record.epochs.min_lead_s is not None:
        lead = record.epochs.min_lead_s
    earliest = now + dt.timedelta(seconds=lead)
    start = dt.datetime.combine(earliest.date(), dt.time(), dt.UTC)
    if start < earliest:
        start += dt.timedelta(days=1)
    parts = [f"saltedtable resalt {table}", f"--instance {instance}", f"--project {project}"]
    parts.append(f"-n {buckets}")
    if record.hash not in (None, "crc32"):
        parts.append(f"--hash {record.hash}")
    if record.separator not in (None, b"-"):
        parts.append(f"--separator {shlex.quote(record.separator.decode(errors='replace'))}")
    if record.marker:
        parts.append(f"--marker {shlex.quote(record.marker.decode(errors='replace'))}")
    parts.append(f"--at {start.isoformat()}")
    if needs_time_reader(record):
        parts.append("--time READER")
    return " ".join(parts)


def needs_time_reader(record: LayoutRecord) -> bool:
    """Whether the table has no key-time reader yet (one scheme: no epochs, no cutoff)."""
    return record.epochs is None and record.cutoff is None


def window_command(buckets: int, *, table: str, instance: str, project: str) -> str:
    """The ``saltedtable window open`` line that changes N for keys without a time."""
    return f"saltedtable window open {table} --instance {instance} --project {project} -n {buckets}"


def epochs_advice(
    record: LayoutRecord | None,
    recommended: int | None,
    *,
    table: str,
    instance: str,
    project: str,
    now: dt.datetime,
) -> list[str]:
    """The report's lines on a live table's epochs, and the command that changes N.

    Empty without a record. The command is printed when the recommended N
    differs from the newest epoch's (the record's top-level scheme).
    """
    if record is None:
        return []
    lines: list[str] = []
    if record.epochs is not None:
        lead = record.epochs.min_lead_s
        shown = "" if lead is None else f" (minimum lead {lead:g} s)"
        lines.append(f"epochs{shown}:")
        for i, epoch in enumerate(record.epochs.epochs):
            start = "-inf" if epoch.start is None else epoch.start
            what = "unsalted" if epoch.buckets is None else f"N = {epoch.buckets}"
            lines.append(f"  epoch {i} from {start}: {what}")
    else:
        lines.append(
            f"epochs: one, N = {record.buckets}" + (" (after a cutoff)" if record.cutoff else "")
        )
    if recommended is not None and recommended != record.buckets:
        command = resalt_command(
            record, recommended, table=table, instance=instance, project=project, now=now
        )
        if not needs_time_reader(record):
            lines.append(
                f"the newest epoch has N = {record.buckets}; to change it to {recommended} "
                f"for keys from a future time on:\n  {command}"
            )
        else:
            window = window_command(recommended, table=table, instance=instance, project=project)
            lines.append(
                f"the table has N = {record.buckets}; to change it to {recommended}: if its "
                "keys carry no time (users, devices), open a dual-layout window:\n"
                f"  {window}\nif they carry a time, append an epoch from a future time on "
                f"(READER: where the time is, e.g. epoch:ms:1):\n  {command}"
            )
    return lines
