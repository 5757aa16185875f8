"""The ``saltedtable`` command line.

Exit codes scripts can trust:

* 0: success (``advise`` succeeds even when it warns).
* 1: a data problem: a key or query the scheme rejects, an input file that
  cannot be read or has a malformed row, a table that cannot be sampled, a
  plot that cannot be written.
* 2: bad usage, found before any data is read: an unknown option, a bad
  number, an unknown hash, a missing input file, ``--plot`` without
  matplotlib.
* 130: interrupted (Ctrl-C); 141: stdout was closed early (``| head``).

Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import csv
import importlib
import io
import json
import math
import os
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import IO, Any, Final, NoReturn, final

from . import __version__
from ._advise import (
    DEFAULT_CANDIDATES,
    DEFAULT_SCAN_LIMIT,
    DEFAULT_TABLETS,
    DEFAULT_TARGET,
    Access,
    Advice,
    advise,
    format_key,
    plan_sample,
)
from ._cutoff import (
    CutoffPolicy,
    big_endian_int,
    epoch_field,
    iso8601_field,
    reversed_epoch_field,
)
from ._exceptions import CutoffError, DataError, SaltedTableError, SaltSchemeError, UsageError
from ._salt import (
    HASHES,
    MAX_BUCKETS,
    MAX_ROW_KEY_BYTES,
    SaltScheme,
    before_last,
    fields,
    prefix_end,
)

__all__ = ["format_key", "main"]

#: Bump when a key of ``advise --json`` changes meaning or disappears.
ADVISE_JSON_SCHEMA: Final = 1
DEFAULT_SAMPLE_LIMIT: Final = 100_000


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``saltedtable advise: error: ...``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- shared helpers ------------------------------------------------------------


def _parse_key(text: str, as_hex: bool) -> bytes:
    if not as_hex:
        return text.encode("utf-8", "surrogateescape")
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not hex: {exc}") from exc


def _key_part(spec: str | None) -> Callable[[bytes], bytes] | None:
    """Parse ``fields:K[:SEP]`` or ``before-last[:SEP]``."""
    if spec is None:
        return None
    name, _, rest = spec.partition(":")
    if name == "fields":
        count, _, sep = rest.partition(":")
        try:
            k = int(count)
        except ValueError:
            raise SaltSchemeError(
                f"--key-part fields:K needs an integer K, got {count!r}"
            ) from None
        return fields(k, sep.encode() if sep else b"#")
    if name == "before-last":
        return before_last(rest.encode() if rest else b"-")
    raise SaltSchemeError(f"unknown --key-part {spec!r}; use fields:K[:SEP] or before-last[:SEP]")


def _add_hash_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hash", default="crc32", help=f"one of {', '.join(HASHES)}")
    parser.add_argument(
        "--key-part",
        metavar="SPEC",
        help="hash part of the key: fields:K[:SEP] (first K fields, SEP default '#') "
        "or before-last[:SEP] (before the last SEP, default '-')",
    )
    parser.add_argument("--separator", default="-", help="separator after a decimal prefix")
    parser.add_argument("--hex", action="store_true", help="keys are given (and shown) as hex")


def _add_scheme_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n", "--buckets", type=_int_at_least(1), required=True, help="number of salt buckets N"
    )
    _add_hash_options(parser)


def _scheme_factory(args: argparse.Namespace) -> Callable[[int], SaltScheme]:
    key_part = _key_part(args.key_part)
    separator = args.separator.encode()

    def make(buckets: int) -> SaltScheme:
        return SaltScheme(buckets, hash=args.hash, key_part=key_part, separator=separator)

    make(1)  # an unknown hash or a bad separator is a usage error, before any data is read
    return make


def _scheme(args: argparse.Namespace) -> SaltScheme:
    return _scheme_factory(args)(args.buckets)


def _show(key: bytes, as_hex: bool) -> str:
    return key.hex() if as_hex else format_key(key)


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {value}")
        return value

    return parse


def _float_above(low: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (value > low and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be a number > {low:g}, got {text}")
        return value

    return parse


def _candidates(text: str) -> tuple[int, ...]:
    parse = _int_at_least(1, MAX_BUCKETS)
    try:
        values = tuple(parse(part.strip()) for part in text.split(",") if part.strip())
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"bucket counts: {exc}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one bucket count, e.g. 1,2,4,8")
    return tuple(sorted(set(values)))


# -- key, explain, emulator --------------------------------------------------------


def _cmd_key(args: argparse.Namespace) -> int:
    scheme = _scheme(args)
    status = 0
    for text in args.keys:
        key = _parse_key(text, args.hex)
        try:
            if args.unsalt:
                bucket, logical = scheme.split_key(key)
                print(f"{_show(key, args.hex)}\tbucket {bucket}\t{_show(logical, args.hex)}")
            else:
                bucket, physical = scheme.locate(key)
                print(f"{_show(key, args.hex)}\tbucket {bucket}\t{_show(physical, args.hex)}")
        except SaltedTableError as exc:
            print(f"saltedtable key: {exc}", file=sys.stderr)
            status = 1
    return status


def _cmd_explain(args: argparse.Namespace) -> int:
    from google.cloud.bigtable.data import ReadRowsQuery, RowRange

    from ._plan import plan_reads

    scheme = _scheme(args)
    keys: list[str | bytes] = [_parse_key(k, args.hex) for k in args.key or ()]
    ranges: list[RowRange] = []
    if args.prefix is not None:
        p = _parse_key(args.prefix, args.hex)
        ranges.append(RowRange(p or None, prefix_end(p) or None))
    if args.start is not None or args.end is not None:
        ranges.append(
            RowRange(
                _parse_key(args.start, args.hex) if args.start else None,
                _parse_key(args.end, args.hex) if args.end else None,
            )
        )
    query = ReadRowsQuery(row_keys=keys, row_ranges=ranges, limit=args.limit)
    print(plan_reads(query, scheme, _cutoff_policy(args)).explain())
    return 0


def _time_reader(spec: str, sep: bytes) -> Callable[[bytes], int]:
    """Parse ``epoch:UNIT[:INDEX[:DIGITS]]``, ``reversed:UNIT[:INDEX[:DIGITS]]``,
    ``iso[:INDEX]`` or ``be:OFFSET:WIDTH:UNIT``."""
    name, *parts = spec.split(":")
    try:
        nums = [int(p) for p in parts[1:]] if name in ("epoch", "reversed") else []
        if name in ("epoch", "reversed"):
            unit = parts[0] if parts else ("s" if name == "epoch" else "ms")
            index = nums[0] if nums else -1
            digits = nums[1] if len(nums) > 1 else None
            reader = epoch_field if name == "epoch" else reversed_epoch_field
            return reader(unit=unit, sep=sep, index=index, digits=digits)
        if name == "iso":
            return iso8601_field(sep=sep, index=int(parts[0]) if parts else -1)
        if name == "be" and len(parts) == 3:
            return big_endian_int(offset=int(parts[0]), width=int(parts[1]), unit=parts[2])
    except ValueError as exc:
        raise UsageError(f"--time {spec!r}: {exc}") from None
    raise UsageError(
        f"--time {spec!r}: use epoch:UNIT[:INDEX[:DIGITS]], reversed:UNIT[:INDEX[:DIGITS]], "
        "iso[:INDEX] or be:OFFSET:WIDTH:UNIT"
    )


def _cutoff_policy(args: argparse.Namespace) -> CutoffPolicy | None:
    if args.cutoff is None:
        if args.time is not None:
            raise UsageError("--time needs --cutoff")
        return None
    try:
        when = datetime.fromisoformat(args.cutoff)
    except ValueError:
        raise UsageError(f"--cutoff {args.cutoff!r} is not an ISO-8601 time") from None
    if when.tzinfo is None:
        raise UsageError(f"--cutoff {args.cutoff!r} has no UTC offset (add +00:00)")
    reader = _time_reader(args.time or "epoch:s", args.time_sep.encode())
    return CutoffPolicy(when, reader, unreadable=args.unreadable)


def _table_spec(spec: str) -> tuple[str, tuple[str, ...]]:
    """Parse ``ID`` or ``ID:FAMILY[,FAMILY...]`` (default family ``cf``)."""
    table_id, _, families = spec.partition(":")
    names = tuple(name for name in families.split(",") if name) if families else ("cf",)
    if not table_id or not names:
        raise argparse.ArgumentTypeError(f"expected ID or ID:FAMILY[,FAMILY...], got {spec!r}")
    return table_id, names


def _cmd_migrate(args: argparse.Namespace) -> int:
    try:
        beam_cli = importlib.import_module("saltedtable.beam._cli")
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "apache_beam":
            raise
        raise UsageError(
            "migrate runs on Apache Beam, which is not installed: pip install 'saltedtable[beam]'"
        ) from None
    code: int = beam_cli.main(args.argv)
    return code


def _cmd_emulator(args: argparse.Namespace) -> int:
    # Imported here: it loads the Bigtable admin client, which no other command needs.
    from ._emulator_cmd import run_emulator

    return run_emulator(
        port=args.port,
        tables=args.table,
        command=args.command,
        project=args.project,
        instance=args.instance,
        binary=args.binary,
        startup_timeout=args.startup_timeout,
    )


# -- advise: progress ------------------------------------------------------------------


@final
class Progress:
    """A one-line progress bar on a stream, redrawn at most ten times a second."""

    def __init__(self, label: str, total: int | None, stream: IO[str] | None) -> None:
        self.label = label
        self.total = total
        self.stream = stream
        self._last = 0.0
        self._shown = False

    def update(self, done: int, *, force: bool = False) -> None:
        """Show ``done`` units (of ``total``, when known)."""
        if self.stream is None:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        if self.total:
            frac = min(1.0, done / self.total)
            bar = "#" * int(frac * 30)
            text = f"{self.label} [{bar:<30}] {frac:4.0%}"
        else:
            text = f"{self.label} {done:,}"
        self.stream.write(f"\r{text}")
        self.stream.flush()
        self._shown = True

    def close(self, done: int) -> None:
        """Draw the final state and end the line."""
        if self.stream is None:
            return
        self.update(done, force=True)
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()


def _progress_stream(args: argparse.Namespace) -> IO[str] | None:
    if args.progress or sys.stderr.isatty():
        return sys.stderr
    return None


# -- advise: reading samples ---------------------------------------------------------

_EPOCH_UNITS: Final = ((1e9, 1e10, 1.0), (1e12, 1e13, 1e3), (1e15, 1e16, 1e6), (1e18, 1e19, 1e9))


def _parse_time(text: str) -> float:
    """A number, or an ISO 8601 date (naive dates are UTC) as epoch seconds."""
    try:
        value = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"time {text!r} is neither a number nor an ISO 8601 date") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    if not math.isfinite(value):
        raise ValueError(f"time {text!r} is not finite")
    return value


def _parse_count(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"count {text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"count {text!r} must be a finite number >= 0")
    return value


@final
class _Sample:
    """Accesses read so far, with the checks that need more than one line."""

    def __init__(self, as_hex: bool) -> None:
        self.as_hex = as_hex
        self.accesses: list[Access] = []
        self._first_timed: tuple[int, bool] | None = None

    def add(self, line: int, key_text: str, count: float, moment: float | None) -> None:
        if not key_text:
            raise ValueError("empty key")
        if self.as_hex:
            try:
                key = binascii.unhexlify(key_text)
            except (binascii.Error, ValueError):
                raise ValueError(f"key {key_text!r} is not hex") from None
            if not key:
                raise ValueError("empty key")
        else:
            key = key_text.encode("utf-8", "surrogateescape")
        if len(key) > MAX_ROW_KEY_BYTES:
            raise ValueError(f"key is {len(key)} bytes; Bigtable allows {MAX_ROW_KEY_BYTES}")
        timed = moment is not None
        if self._first_timed is None:
            self._first_timed = (line, timed)
        elif self._first_timed[1] != timed:
            first_line, first_timed = self._first_timed
            raise ValueError(
                f"{'has a time' if timed else 'has no time'}, but line {first_line} "
                f"{'has one' if first_timed else 'has none'}: give every line a time or none"
            )
        self.accesses.append(Access(key, count, moment))


def _csv_rows(sample: _Sample, lines: Iterable[str]) -> None:
    # strict: an unbalanced quote is an error, not a key that swallows the file.
    reader = csv.reader(lines, strict=True)
    columns: dict[str, int] | None = None
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"line {reader.line_num}: malformed CSV: {exc}") from None
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        try:
            if columns is None:
                names = [c.strip().lower() for c in row]
                if "key" in names:
                    unknown = [c for c in names if c not in ("key", "count", "time")]
                    if unknown or len(set(names)) != len(names):
                        raise ValueError(
                            f"header {','.join(row)!r}: columns are key, count and time"
                        )
                    columns = {name: i for i, name in enumerate(names)}
                    continue
                columns = {"key": 0, "count": 1, "time": 2}
            if len(row) > max(columns.values()) + 1:
                expected = ",".join(sorted(columns, key=columns.__getitem__))
                raise ValueError(f"{len(row)} fields; expected {expected}")
            cells = {name: row[i].strip() if i < len(row) else "" for name, i in columns.items()}
            count = _parse_count(cells["count"]) if cells.get("count") else 1.0
            moment = _parse_time(cells["time"]) if cells.get("time") else None
            sample.add(line, row[columns["key"]], count, moment)
        except ValueError as exc:
            raise DataError(f"line {line}: {exc}") from None


def _ndjson_rows(sample: _Sample, lines: Iterable[str]) -> None:
    for line, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(record, dict):
                raise ValueError(f'expected an object like {{"key": "..."}}, got {text.strip()!r}')
            key = record.get("key")
            if not isinstance(key, str):
                raise ValueError(f'"key" must be a string, got {key!r}')
            count = record.get("count", 1)
            if count is None:
                count = 1
            if isinstance(count, bool) or not isinstance(count, int | float):
                raise ValueError(f'"count" must be a number, got {count!r}')
            moment = record.get("time")
            if moment is not None:
                if isinstance(moment, bool) or not isinstance(moment, int | float | str):
                    raise ValueError(f'"time" must be a number or an ISO 8601 date, got {moment!r}')
                moment = _parse_time(str(moment))
            sample.add(line, key, _parse_count(str(count)), moment)
        except ValueError as exc:
            raise DataError(f"line {line}: {exc}") from None


def _decoded_lines(stream: IO[bytes], progress: Progress) -> Iterator[str]:
    done = 0
    for raw in stream:
        done += len(raw)
        progress.update(done)
        # surrogateescape: any byte string survives as a key, UTF-8 or not.
        yield raw.decode("utf-8", "surrogateescape")
    progress.close(done)


def _read_file(args: argparse.Namespace) -> tuple[list[Access], str]:
    """Read the accesses from ``args.input`` (``-``: stdin); return them and the format."""
    name = args.input
    stream_out = _progress_stream(args)
    try:
        if name == "-":
            stream: IO[bytes] = sys.stdin.buffer
            total = None
        else:
            stream = open(name, "rb")  # noqa: SIM115 - closed below
            total = os.fstat(stream.fileno()).st_size
    except FileNotFoundError:
        raise UsageError(f"no such file: {name}") from None
    except OSError as exc:
        raise DataError(f"cannot read {name}: {exc.strerror or exc}") from None
    progress = Progress(f"reading {'stdin' if name == '-' else name}", total, stream_out)
    sample = _Sample(args.hex)
    try:
        lines = _decoded_lines(stream, progress)
        fmt = args.format
        head: list[str] = []
        if fmt == "auto":
            for text in lines:
                head.append(text)
                if text.strip():
                    break
            fmt = "ndjson" if head and head[-1].lstrip().startswith("{") else "csv"
        rows = _chain(head, lines)
        if fmt == "csv":
            _csv_rows(sample, rows)
        else:
            _ndjson_rows(sample, rows)
    except DataError as exc:
        raise DataError(f"{'stdin' if name == '-' else name}: {exc}") from None
    except OSError as exc:
        raise DataError(f"cannot read {name}: {exc.strerror or exc}") from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if not sample.accesses:
        raise DataError(f"{'stdin' if name == '-' else name}: no keys in the input")
    return sample.accesses, fmt


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest


async def _sample_table(args: argparse.Namespace) -> list[Access]:
    """Read up to ``--sample-limit`` row keys (and their newest cell's time) from a table."""
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError
    from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, RowRange
    from google.cloud.bigtable.data.row_filters import (
        CellsRowLimitFilter,
        RowFilterChain,
        StripValueTransformerFilter,
    )

    # Key-only: no values cross the wire, one cell per row for its timestamp.
    key_only = RowFilterChain([StripValueTransformerFilter(True), CellsRowLimitFilter(1)])
    limit: int = args.sample_limit
    progress = Progress(f"sampling {args.table}", limit, _progress_stream(args))
    accesses: list[Access] = []
    where = f"table {args.table!r} (project {args.project!r}, instance {args.instance!r})"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
            client = BigtableDataClientAsync(project=args.project)
        async with client, client.get_table(args.instance, args.table) as table:
            samples = await table.sample_row_keys(operation_timeout=args.timeout)
            # Spread the sample over the tablets by size: the first `limit` rows
            # would only show the start of the key space.
            for start, end, rows in plan_sample(samples, limit):
                query = ReadRowsQuery(
                    row_ranges=RowRange(start, end), limit=rows, row_filter=key_only
                )
                stream = await table.read_rows_stream(query, operation_timeout=args.timeout)
                async for row in stream:
                    stamps = [cell.timestamp_micros for cell in row.cells]
                    moment = max(stamps) / 1e6 if stamps else None
                    accesses.append(Access(row.row_key, 1.0, moment))
                    progress.update(len(accesses))
    except (GoogleAPIError, GoogleAuthError) as exc:
        raise DataError(f"cannot sample {where}: {_one_line(exc)}") from None
    finally:
        progress.close(len(accesses))
    if not accesses:
        raise DataError(f"{where} has no rows")
    if any(a.time is None for a in accesses):
        accesses = [Access(a.key, a.count) for a in accesses]
    return accesses


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


# -- advise: output -------------------------------------------------------------------


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _epoch_scale(values: Sequence[float]) -> float | None:
    """Divisor to epoch seconds when every value looks like an epoch time, else None."""
    lo, hi = min(values), max(values)
    for low, high, scale in _EPOCH_UNITS:
        if low <= lo and hi < high:
            return scale
    return None


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.3g} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def _axis_text(advice: Advice, source: str) -> str:
    w = advice.windows
    if advice.time_axis == "none":
        return "no time axis (one window)"
    if advice.time_axis == "order":
        return f"sample order in {w} window{'s' * (w != 1)}"
    edges = advice.window_edges
    scale = _epoch_scale(edges)
    span = (edges[-1] - edges[0]) / w
    each = _duration(span / scale) if scale else f"{span:.4g}"
    return f"time from the {source} in {w} window{'s' * (w != 1)} of {each}"


def _print_report(advice: Advice, args: argparse.Namespace, source: str, time_source: str) -> None:
    show = bytes.hex if args.hex else format_key
    limit = advice.scan_limit
    print(
        f"sample: {source}: {advice.lines:,} lines, {advice.distinct_keys:,} distinct keys, "
        f"load {advice.total_load:,.6g}; {_axis_text(advice, time_source)}"
    )
    part = f", key part {args.key_part}" if args.key_part else ""
    print(
        f"model: {advice.tablets} tablets of equal key count; hash {args.hash}{part}; "
        f"target max/mean <= {advice.target:g}"
    )
    print()
    print(f"{'N':>5}  {'max/mean':>8}  {'sub-scans':>9}  rows read by a limit-{limit} scan")
    print(f"{'':>5}  {'':>8}  {'':>9}  {'naive':>8}  {'saltedtable':>11}")
    for sim in advice.simulations:
        mark = "  <- recommended" if sim.buckets == advice.recommended else ""
        print(
            f"{sim.buckets:>5}  {sim.max_mean:>8.2f}  {sim.sub_scans:>9}  "
            f"{sim.naive_limit_rows:>8,}  {sim.paged_limit_rows:>11,}{mark}"
        )
    print()
    hot = advice.simulations[0].hottest
    print(
        f"hottest range, unsalted: {_clip(show(hot.first_key), 40)} .. "
        f"{_clip(show(hot.last_key), 40)}"
    )
    print(
        f"  {hot.ratio:.1f}x the mean tablet in window {hot.window + 1} of {advice.windows} "
        f"({hot.share:.0%} of that window's load)"
    )
    print(f"starting point (hottest / mean, rounded up): N ~ {advice.rule_of_thumb}")
    if advice.recommended is None:
        print(f"recommended: none of the candidates reaches max/mean <= {advice.target:g}")
    else:
        best = advice.simulation(advice.recommended)
        if best.buckets == 1:
            print(
                f"recommended: N = 1, no salting: unsalted max/mean is already "
                f"{best.max_mean:.2f} <= {advice.target:g}"
            )
        else:
            print(
                f"recommended: N = {best.buckets}, the smallest candidate with max/mean <= "
                f"{advice.target:g} ({best.max_mean:.2f})"
            )
            print(
                f"  cost: every scan becomes {best.sub_scans} sub-scans; a limit-{limit} read "
                f"fetches about {best.paged_limit_rows:,} rows"
            )
            print(f"  ({best.naive_limit_rows:,} if each bucket were read to the limit)")
    for finding in advice.findings:
        print()
        print(
            textwrap.fill(
                finding.message,
                width=100,
                initial_indent=f"{finding.severity} [{finding.code}]: ",
                subsequent_indent="  ",
            )
        )


def _json_report(
    advice: Advice, args: argparse.Namespace, source: str, fmt: str, plot: str | None
) -> dict[str, Any]:
    show = bytes.hex if args.hex else format_key
    return {
        "schema": ADVISE_JSON_SCHEMA,
        "input": {
            "source": source,
            "format": fmt,
            "lines": advice.lines,
            "distinct_keys": advice.distinct_keys,
            "total_load": advice.total_load,
            "time_axis": advice.time_axis,
            "windows": advice.windows,
            "window_edges": [round(edge, 6) for edge in advice.window_edges],
            "keys_as": "hex" if args.hex else "text",
        },
        "model": {
            "tablets": advice.tablets,
            "target": advice.target,
            "scan_limit": advice.scan_limit,
            "hash": args.hash,
            "key_part": args.key_part,
        },
        "layouts": [
            {
                "buckets": sim.buckets,
                "max_mean": round(sim.max_mean, 4),
                "meets_target": sim.max_mean <= advice.target,
                "sub_scans": sim.sub_scans,
                "naive_limit_rows": sim.naive_limit_rows,
                "paged_limit_rows": sim.paged_limit_rows,
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
        "recommended": advice.recommended,
        "floor": round(advice.floor, 4),
        "top_keys": [{"key": show(k), "share": round(s, 6)} for k, s in advice.top_keys],
        "findings": [
            {"code": f.code, "severity": f.severity, "message": f.message} for f in advice.findings
        ],
        "plot": plot,
    }


# -- advise ------------------------------------------------------------------------------


def _check_plot_available() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib: pip install 'saltedtable[plot]' (or matplotlib)"
        ) from None


def _cmd_advise(args: argparse.Namespace) -> int:
    if (args.input is None) == (args.table is None):
        raise UsageError("give a sample FILE (or - for stdin), or --table to sample a table")
    if args.table is not None:
        args.project = args.project or os.environ.get("SALTEDTABLE_PROJECT")
        args.instance = args.instance or os.environ.get("SALTEDTABLE_INSTANCE")
        if not args.project or not args.instance:
            raise UsageError("--table needs --project and --instance")
    scheme_for = _scheme_factory(args)
    candidates = tuple(args.candidates)
    if args.buckets is not None:
        candidates += (args.buckets,)
    for n in candidates:
        scheme_for(n)  # e.g. hash=phoenix with N > 256: a usage error before reading
    if args.plot:
        _check_plot_available()

    if args.table is not None:
        accesses = asyncio.run(_sample_table(args))
        source, fmt, time_source = f"table {args.table}", "table", "cell timestamps"
    else:
        accesses, fmt = _read_file(args)
        source = "stdin" if args.input == "-" else args.input
        time_source = "time column"

    simulate = Progress("simulating", len(set(candidates) | {1}), _progress_stream(args))
    try:
        advice = advise(
            accesses,
            candidates=candidates,
            tablets=args.tablets,
            target=args.target,
            windows=args.windows,
            scan_limit=args.limit,
            scheme_for=scheme_for,
            ordered=args.ordered,
            show_key=bytes.hex if args.hex else format_key,
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
    if args.plot:
        from ._heatmap import render_heatmap

        shown = args.buckets or advice.recommended or max(candidates)
        try:
            render_heatmap(
                advice,
                shown,
                args.plot,
                show_key=bytes.hex if args.hex else format_key,
                time_scale=_epoch_scale(advice.window_edges)
                if advice.time_axis == "time"
                else None,
                title=f"saltedtable advise: {source}",
            )
        except OSError as exc:
            raise DataError(f"cannot write {args.plot}: {exc.strerror or exc}") from None
        plot_path = args.plot

    if args.json:
        json.dump(_json_report(advice, args, source, fmt, plot_path), sys.stdout, indent=2)
        print()
    else:
        _print_report(advice, args, source, time_source)
        if plot_path:
            print()
            print(f"heat map: {plot_path}")
    return 0


# -- the parser ------------------------------------------------------------------------------

_ADVISE_EPILOG: Final = """\
input: CSV with columns key[,count][,time] (a header line "key,count,time" is
optional and may reorder them) or NDJSON lines {"key": ..., "count": ..., "time": ...}.
count is the load of the line (default 1); time is a number (e.g. epoch seconds)
or an ISO 8601 date. Without times the line order is the time axis, unless the
keys are sorted (a key dump: one window).

model: the distinct keys, in their unsalted or salted order, are cut into
--tablets tablets of equal key count (Bigtable splits tablets by size); each
line adds its count to its tablet in its time window. max/mean is the hottest
tablet's load over the mean tablet's, per window, weighted by load. The
recommendation is the smallest candidate N with max/mean <= --target: every
scan of a salted table costs N sub-scans.

examples:
  saltedtable advise access-log.csv
  saltedtable advise --json --plot heat.png events.ndjson
  saltedtable advise --table events --instance my-instance --project my-project
"""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="saltedtable", description="Salted row keys for Google Cloud Bigtable.")
    parser.add_argument("--version", action="version", version=f"saltedtable {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    key = sub.add_parser(
        "key",
        help="logical -> physical key (or back with --unsalt)",
        description="Show the bucket and the physical key of logical keys (or the reverse).",
    )
    _add_scheme_options(key)
    key.add_argument("--unsalt", action="store_true", help="physical -> logical")
    key.add_argument("keys", nargs="+", metavar="KEY")
    key.set_defaults(func=_cmd_key)

    explain = sub.add_parser(
        "explain",
        help="the physical sub-queries of a logical read",
        description="Show the physical sub-queries a logical read turns into.",
    )
    _add_scheme_options(explain)
    explain.add_argument("--key", action="append", help="a point key (repeatable)")
    explain.add_argument("--prefix", help="a key prefix to scan")
    explain.add_argument("--start", help="range start (inclusive)")
    explain.add_argument("--end", help="range end (exclusive)")
    explain.add_argument("--limit", type=_int_at_least(1), help="row limit")
    explain.add_argument(
        "--cutoff",
        metavar="ISO",
        help="forward-only migration: keys with a time before this are unsalted "
        "(e.g. 2024-01-01T00:00:00+00:00)",
    )
    explain.add_argument(
        "--time",
        metavar="READER",
        help="where a key's time is: epoch:UNIT[:INDEX[:DIGITS]] (default epoch:s), "
        "reversed:UNIT[:INDEX[:DIGITS]], iso[:INDEX] or be:OFFSET:WIDTH:UNIT",
    )
    explain.add_argument("--time-sep", default="#", help="field separator for --time (#)")
    explain.add_argument(
        "--unreadable",
        choices=("error", "legacy", "salted"),
        default="error",
        help="where keys without a readable time go",
    )
    explain.set_defaults(func=_cmd_explain)

    adv = sub.add_parser(
        "advise",
        help="simulate hot tablets unsalted vs salted and recommend a bucket count",
        description="Simulate how a range-partitioned store spreads the load of a key sample\n"
        "or access log, unsalted and salted with each candidate bucket count N, and\n"
        "recommend the smallest N that meets the target.",
        epilog=_ADVISE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    adv.add_argument("input", nargs="?", metavar="FILE", help="CSV or NDJSON sample; - for stdin")
    adv.add_argument(
        "--format", choices=("auto", "csv", "ndjson"), default="auto", help="input format"
    )
    adv.add_argument("--table", metavar="ID", help="sample the keys of this Bigtable table")
    adv.add_argument("--instance", help="Bigtable instance (default: $SALTEDTABLE_INSTANCE)")
    adv.add_argument("--project", help="Google Cloud project (default: $SALTEDTABLE_PROJECT)")
    adv.add_argument(
        "--sample-limit",
        type=_int_at_least(1),
        default=DEFAULT_SAMPLE_LIMIT,
        metavar="ROWS",
        help=f"rows to sample with --table (default {DEFAULT_SAMPLE_LIMIT:,})",
    )
    adv.add_argument(
        "--timeout",
        type=_float_above(0),
        default=120.0,
        metavar="SECONDS",
        help="operation timeout of each Bigtable call with --table (default 120)",
    )
    adv.add_argument(
        "--candidates",
        type=_candidates,
        default=DEFAULT_CANDIDATES,
        metavar="N,N,...",
        help=f"bucket counts to simulate (default {','.join(map(str, DEFAULT_CANDIDATES))})",
    )
    adv.add_argument(
        "--tablets",
        type=_int_at_least(1, 100_000),
        default=DEFAULT_TABLETS,
        metavar="T",
        help=f"tablets the key space is split into (default {DEFAULT_TABLETS})",
    )
    adv.add_argument(
        "--target",
        type=_float_above(1),
        default=DEFAULT_TARGET,
        help=f"max/mean to reach (default {DEFAULT_TARGET})",
    )
    adv.add_argument(
        "--windows",
        type=_int_at_least(1, 10_000),
        metavar="W",
        help="time windows (default: about 64 lines per tablet per window, at most 60)",
    )
    adv.add_argument(
        "--ordered",
        action="store_true",
        help="without a time column, the lines are in arrival order even if sorted",
    )
    adv.add_argument(
        "--limit",
        type=_int_at_least(1),
        default=DEFAULT_SCAN_LIMIT,
        help=f"row limit of the scan whose read cost is shown (default {DEFAULT_SCAN_LIMIT})",
    )
    adv.add_argument(
        "-n",
        "--buckets",
        type=_int_at_least(1, MAX_BUCKETS),
        help="also simulate N and draw it in --plot (default: the recommended N)",
    )
    _add_hash_options(adv)
    adv.add_argument("--json", action="store_true", help="print the report as JSON")
    adv.add_argument("--plot", metavar="PNG", help="write a Key Visualizer-style heat map")
    adv.add_argument(
        "--progress", action="store_true", help="show progress on stderr even if not a terminal"
    )
    adv.set_defaults(func=_cmd_advise)

    # Apache Beam pipelines: parsed and run by saltedtable.beam, imported only here.
    migrate = sub.add_parser(
        "migrate",
        help="backfill, verify, cut over or resalt a table on Apache Beam (saltedtable[beam])",
        add_help=False,
    )
    migrate.add_argument("argv", nargs=argparse.REMAINDER)
    migrate.set_defaults(func=_cmd_migrate)

    emu = sub.add_parser(
        "emulator",
        help="run the Bigtable emulator, in the foreground or around a command",
        description="Run the official Bigtable emulator (cbtemulator) on 127.0.0.1. Without "
        "COMMAND it runs in the foreground until Ctrl-C and prints the export line for "
        "BIGTABLE_EMULATOR_HOST; with `-- COMMAND ARGS...` it runs COMMAND with "
        "BIGTABLE_EMULATOR_HOST set, then stops and exits with COMMAND's exit code.",
        usage="%(prog)s [--port N] [--table ID[:FAM1,FAM2]]... [-- COMMAND ARGS...]",
    )
    emu.add_argument(
        "--port",
        type=_int_at_least(1, 65535),
        metavar="N",
        help="port on 127.0.0.1 (default: a free one)",
    )
    emu.add_argument(
        "--table",
        action="append",
        type=_table_spec,
        default=[],
        metavar="ID[:FAM1,FAM2]",
        help="create this table (default family: cf); repeatable",
    )
    emu.add_argument("--project", default="test-project", help="default: test-project")
    emu.add_argument("--instance", default="test-instance", help="default: test-instance")
    emu.add_argument(
        "--binary",
        metavar="PATH",
        help="cbtemulator to run (default: $SALTEDTABLE_CBTEMULATOR, the Cloud SDK, PATH)",
    )
    emu.add_argument(
        "--startup-timeout",
        type=_float_above(0),
        default=30.0,
        metavar="SECONDS",
        help="seconds to wait for the emulator (default 30)",
    )
    emu.add_argument("command", nargs="*", metavar="-- COMMAND", help="run this, then stop")
    emu.set_defaults(func=_cmd_emulator)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 1 data problem, 2 usage)."""
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["migrate"]:  # everything after it, --help included, is the step's
            args = argparse.Namespace(command="migrate", func=_cmd_migrate, argv=argv[1:])
        else:
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 0
    prog = f"saltedtable {args.command}"
    try:
        code: int = args.func(args)
    except (argparse.ArgumentTypeError, UsageError, SaltSchemeError, CutoffError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except (DataError, SaltedTableError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `saltedtable advise ... | head`: the reader left; say nothing more.
        _silence_stdout()
        return 141
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
