"""The ``saltedtable advise`` command's work: read a sample, simulate, report.

``saltedtable._cli.main`` parses the arguments into an :class:`AdviseRequest` and calls
:func:`run`; everything past parsing happens here, so the command line stays a
parser and a dispatcher.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Literal, final

from .._exceptions import DataError, SaltedTableError, SaltSchemeError, UsageError
from .._scheme.cutoff import CutoffPolicy
from .._scheme.salt import SaltScheme, format_key
from . import input as advise_input
from . import model, report

__all__ = ["AdviseRequest", "run"]


@final
@dataclass(frozen=True, slots=True)
class AdviseRequest:
    """Everything ``saltedtable advise`` was asked (see ``saltedtable advise --help``)."""

    #: How keys are salted for a bucket count (the command's scheme options).
    scheme_for: Callable[[int], SaltScheme]
    candidates: Sequence[int]
    #: A forward-only migration's cutoff: older keys stay unsalted (``--cutoff``).
    cutoff: CutoffPolicy | None = None
    input: str | None = None
    table: str | None = None
    project: str | None = None
    instance: str | None = None
    sample_limit: int = 100_000
    timeout: float = 60.0
    format: Literal["auto", "csv", "ndjson"] = "auto"
    hex: bool = False
    tablets: int | None = None
    target: float | None = None
    windows: int | None = None
    limit: int | None = None
    ordered: bool = False
    resamples: int | None = None
    seed: int = 0
    count_unit: float | None = None
    buckets: int | None = None
    plot: str | None = None
    json: bool = False
    hash_name: str = "crc32"
    key_part: str | None = None
    progress: bool = False


def run(request: AdviseRequest, out: IO[str] | None = None) -> int:
    """Read the sample, simulate every candidate N, print the report; return 0.

    Raises:
        UsageError: The request cannot run (a scheme a candidate cannot build,
            --plot without matplotlib, a missing input file).
        DataError: The sample cannot be read, or holds a key the scheme cannot salt.
    """
    out = sys.stdout if out is None else out
    for n in request.candidates:
        request.scheme_for(n)  # e.g. hash=phoenix with N > 256: a usage error before reading
    if request.plot:
        _check_plot_available()
    progress = advise_input.progress_stream(request.progress)
    table: advise_input.TableSample | None = None
    if request.table is not None:
        table = asyncio.run(
            advise_input.read_table(
                project=request.project or "",
                instance=request.instance or "",
                table=request.table,
                limit=request.sample_limit,
                operation_timeout=request.timeout,
                progress=progress,
            )
        )
        accesses = table.accesses
        source, fmt, time_source = f"table {request.table}", "table", "cell timestamps"
    else:
        assert request.input is not None
        accesses, fmt = advise_input.read_file(
            request.input, fmt=request.format, as_hex=request.hex, progress=progress
        )
        source = "stdin" if request.input == "-" else request.input
        time_source = "time column"

    show_key = bytes.hex if request.hex else format_key
    simulate = advise_input.Progress("simulating", len(set(request.candidates) | {1}), progress)
    try:
        advice = model.advise(
            accesses,
            candidates=request.candidates,
            tablets=request.tablets or model.DEFAULT_TABLETS,
            target=request.target or model.DEFAULT_TARGET,
            windows=request.windows,
            scan_limit=request.limit or model.DEFAULT_SCAN_LIMIT,
            scheme_for=request.scheme_for,
            cutoff=request.cutoff,
            ordered=request.ordered,
            resamples=request.resamples or model.DEFAULT_RESAMPLES,
            seed=request.seed,
            count_unit=request.count_unit,
            show_key=show_key,
            progress=lambda done, _total: simulate.update(done),
        )
    except SaltSchemeError:
        raise
    except SaltedTableError as exc:  # a key the scheme cannot salt
        raise DataError(str(exc)) from None
    except ValueError as exc:
        raise DataError(f"{source}: {exc}") from None
    finally:
        simulate.close(simulate.total or 0)

    plot_path: str | None = None
    if request.plot:
        from .heatmap import render_heatmap

        shown = request.buckets or advice.recommended or max(request.candidates)
        try:
            render_heatmap(
                advice,
                shown,
                request.plot,
                show_key=show_key,
                time_scale=report.epoch_scale(advice.window_edges)
                if advice.time_axis == "time"
                else None,
                title=f"saltedtable advise: {source}",
            )
        except OSError as exc:
            raise DataError(f"cannot write {request.plot}: {exc.strerror or exc}") from None
        plot_path = request.plot

    if request.json:
        document = report.json_report(
            advice,
            source=source,
            fmt=fmt,
            hash_name=request.hash_name,
            key_part=request.key_part,
            keys_as_hex=request.hex,
            plot=plot_path,
            table=table,
        )
        if table is not None:
            document["resalt"] = _resalt_json(request, table, advice)
        json.dump(document, out, indent=2)
        out.write("\n")
    else:
        out.write(
            report.text_report(
                advice,
                source=source,
                time_source=time_source,
                hash_name=request.hash_name,
                key_part=request.key_part,
                show_key=show_key,
                keys=None if table is None else table.describe(),
            )
        )
        if table is not None:
            lines = _epochs_lines(request, table, advice)
            if lines:
                out.write("\n" + "\n".join(lines) + "\n")
        if plot_path:
            out.write(f"\nheat map: {plot_path}\n")
    return 0


def _epochs_lines(
    request: AdviseRequest, table: advise_input.TableSample, advice: model.Advice
) -> list[str]:
    """What the report says of a table's epochs, and the ``resalt`` command if N should change."""
    import datetime as dt

    return report.epochs_advice(
        table.record,
        advice.recommended,
        table=request.table or "TABLE",
        instance=request.instance or "INSTANCE",
        project=request.project or "PROJECT",
        now=dt.datetime.now(dt.UTC),
    )


def _resalt_json(
    request: AdviseRequest, table: advise_input.TableSample, advice: model.Advice
) -> dict[str, object] | None:
    """The JSON report's ``resalt``: the newest epoch's N and the command that changes it."""
    import datetime as dt

    record = table.record
    if record is None:
        return None
    command = window = None
    where = {
        "table": request.table or "TABLE",
        "instance": request.instance or "INSTANCE",
        "project": request.project or "PROJECT",
    }
    if advice.recommended is not None and advice.recommended != record.buckets:
        command = report.resalt_command(
            record, advice.recommended, now=dt.datetime.now(dt.UTC), **where
        )
        if report.needs_time_reader(record):
            # Keys without a time cannot be routed by an epoch: the window changes N for them.
            window = report.window_command(advice.recommended, **where)
    return {"newest_buckets": record.buckets, "command": command, "window_command": window}


def _check_plot_available() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib: pip install 'matplotlib>=3.8' (saltedtable's plot extra)"
        ) from None
