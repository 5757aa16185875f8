"""The advisor's input: CSV and NDJSON samples, a live table's keys, and progress on stderr.

Everything here turns outside data into :class:`~saltedtable.advise.Access`
values, or says in one line which line of which input is wrong.
"""

from __future__ import annotations

import binascii
import csv
import dataclasses
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Literal, final

from .._connection import connection_failure
from .._exceptions import InputError, LayoutError, MissingInputError, SaltSchemeError
from .._guard.record import LayoutRecord, newest_record_cell, record_of_row
from .._scheme.flags import rebuild_cutoff
from .._scheme.layout import Layout
from .._scheme.salt import MAX_ROW_KEY_BYTES, SCHEME_ROW_KEY, SaltScheme
from .model import Access

__all__ = [
    "InputError",
    "MissingInputError",
    "Progress",
    "TableSample",
    "logical_sample",
    "parse_count",
    "parse_time",
    "plan_sample",
    "progress_stream",
    "read_file",
    "read_table",
    "sample_table",
]

Format = Literal["auto", "csv", "ndjson"]


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


def progress_stream(force: bool) -> IO[str] | None:
    """Where progress goes: stderr when it is a terminal or ``force`` is set, else nowhere."""
    if force or sys.stderr.isatty():
        return sys.stderr
    return None


# -- parsing fields --------------------------------------------------------------------


def parse_time(text: str) -> float:
    """A number, or an ISO 8601 date (naive dates are UTC) as epoch seconds.

    Raises:
        ValueError: Neither, or not finite.
    """
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


def parse_count(text: str) -> float:
    """A finite count >= 0.

    Raises:
        ValueError: Not a number, negative or not finite.
    """
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
        if count == 0 and not timed:
            pass  # a key listed for storage only needs no time
        elif self._first_timed is None:
            self._first_timed = (line, timed)
        elif self._first_timed[1] != timed:
            first_line, first_timed = self._first_timed
            raise ValueError(
                f"{'has a time' if timed else 'has no time'}, but line {first_line} "
                f"{'has one' if first_timed else 'has none'}: give every line a time or none"
            )
        self.accesses.append(Access(key, count, moment))


# -- files ---------------------------------------------------------------------------


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
            raise InputError(f"line {reader.line_num}: malformed CSV: {exc}") from None
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
            count = parse_count(cells["count"]) if cells.get("count") else 1.0
            moment = parse_time(cells["time"]) if cells.get("time") else None
            sample.add(line, row[columns["key"]], count, moment)
        except ValueError as exc:
            raise InputError(f"line {line}: {exc}") from None


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
                moment = parse_time(str(moment))
            sample.add(line, key, parse_count(str(count)), moment)
        except ValueError as exc:
            raise InputError(f"line {line}: {exc}") from None


def _decoded_lines(stream: IO[bytes], progress: Progress) -> Iterator[str]:
    done = 0
    for raw in stream:
        done += len(raw)
        progress.update(done)
        # surrogateescape: any byte string survives as a key, UTF-8 or not.
        yield raw.decode("utf-8", "surrogateescape")
    progress.close(done)


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest


def read_file(
    path: str, *, fmt: Format = "auto", as_hex: bool = False, progress: IO[str] | None = None
) -> tuple[list[Access], str]:
    """Read a sample from a CSV or NDJSON file (``-``: stdin).

    Args:
        path: The file, or ``-`` for stdin.
        fmt: ``csv``, ``ndjson`` or ``auto`` (NDJSON when the first line that
            is not blank starts with ``{``).
        as_hex: Keys are hex.
        progress: Where to draw a progress bar (None: nowhere).

    Returns:
        The accesses in file order, and the format read (``csv`` or ``ndjson``).

    Raises:
        MissingInputError: The file does not exist.
        InputError: It cannot be read, a line is malformed, or it holds no keys;
            the message names the input and the line.
    """
    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            stream: IO[bytes] = sys.stdin.buffer
            total = None
        else:
            stream = open(path, "rb")  # noqa: SIM115 - closed below
            total = os.fstat(stream.fileno()).st_size
    except FileNotFoundError:
        raise MissingInputError(f"no such file: {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    bar = Progress(f"reading {name}", total, progress)
    sample = _Sample(as_hex)
    try:
        lines = _decoded_lines(stream, bar)
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
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if not sample.accesses:
        raise InputError(f"{name}: no keys in the input")
    return sample.accesses, fmt


# -- a live table ---------------------------------------------------------------------


def plan_sample(
    samples: Sequence[tuple[bytes, int]], limit: int
) -> list[tuple[bytes | None, bytes | None, int]]:
    """Split a sample of ``limit`` rows over a table's tablets, in proportion to their size.

    Args:
        samples: What ``TableAsync.sample_row_keys()`` returns: ``(key, offset)``
            in key order, ``offset`` the bytes stored before ``key``; a last
            entry with an empty key gives the table's size.
        limit: Rows to read in all.

    Returns:
        ``(start, end, rows)``: contiguous ranges (start inclusive, end
        exclusive, None for unbounded) that cover the whole table, each with
        the rows to read from it; they add up to ``limit``. Ranges too small
        for one row are merged into the next.
    """
    bounds = [(key, offset) for key, offset in samples if key]
    total = next((offset for key, offset in samples if not key), None)
    sizes, previous = [], 0
    for _, offset in bounds:
        sizes.append(max(0, offset - previous))
        previous = offset
    if total is not None and total >= previous:
        last = float(total - previous)
    else:  # no end marker: assume the last range is an average one
        last = previous / len(bounds) if bounds else 0.0
    grand = sum(sizes) + last
    if grand <= 0:
        return [(None, None, limit)]
    out: list[tuple[bytes | None, bytes | None, int]] = []
    start: bytes | None = None
    cumulative, given = 0.0, 0
    for (key, _), size in zip(bounds, sizes, strict=True):
        cumulative += size
        rows = round(limit * cumulative / grand) - given
        if rows > 0:
            out.append((start, key, rows))
            start, given = key, given + rows
    if limit > given:
        out.append((start, None, limit - given))
    elif out:
        first, _, rows = out[-1]
        out[-1] = (first, None, rows)
    return out


@final
@dataclass(frozen=True, slots=True)
class TableSample:
    """A table's sampled rows as the advisor reads them: logical keys, and how they were read."""

    #: One access per row kept, under its logical key.
    accesses: list[Access]
    #: The table's layout record, which the keys were unsalted with (None: none stored).
    record: LayoutRecord | None = None
    #: The column family holding the record.
    record_family: str | None = None
    #: Rows read, the ones left out included.
    rows: int = 0
    #: Rows left out: saltedtable's reserved row (the layout record).
    record_rows: int = 0
    #: Rows left out: outside every salt prefix of a record without a cutoff (not its data).
    outside: int = 0
    #: Rows left out: rows every reader hides (copies of legacy rows during a backfill).
    hidden: int = 0

    def describe(self) -> str:
        """One line for the report: which record turned the keys logical, and what was left out."""
        left = [
            f"{count:,} {one if count == 1 else many}"
            for count, one, many in (
                (self.record_rows, "record row", "record rows"),
                (self.outside, "row outside its layout", "rows outside its layout"),
                (self.hidden, "row readers hide", "rows readers hide"),
            )
            if count
        ]
        out = f"; left out: {', '.join(left)}" if left else ""
        if self.record is None:
            return f"keys as stored: the table has no layout record{out}"
        return (
            f"logical keys, unsalted with the table's layout record (family "
            f"{self.record_family!r}: {self.record.cli_flags()}){out}"
        )


def logical_sample(
    rows: Iterable[Access], record: LayoutRecord | None, record_family: str | None = None
) -> TableSample:
    """Turn rows read from a table (physical keys) into accesses of logical keys (pure).

    The reserved layout row is left out. With a record, a key in a salt bucket
    loses its prefix; with the record's cutoff, a key outside every bucket is a
    legacy key, kept as it is, and rows every reader hides (known when the
    record's time reader is a ready-made one) are left out; without a cutoff,
    such a key is not this layout's data and is left out. The prefix is taken
    off without checking the key's hash (``saltedtable inspect`` checks that),
    so a custom key part the record only names does not matter here.
    """
    if record is not None and record.epochs is not None:
        return _epochs_sample(rows, record, record_family)
    accesses: list[Access] = []
    read = record_rows = outside = hidden = 0
    layout: Layout | None = None
    prefixes: dict[bytes, int] = {}
    if record is not None:
        scheme = SaltScheme(
            record.buckets,
            hash=record.hash or "crc32",
            separator=b"-" if record.separator is None else record.separator,
            marker=record.marker or b"",
        )
        cutoff = rebuild_cutoff(None if record.cutoff is None else record.cutoff.as_dict())
        layout = Layout(scheme, cutoff)
        prefixes = {scheme.prefix(b): b for b in scheme.bucket_ids}
    # Salt prefixes never start one another: at most one length matches a key.
    lengths = sorted({len(p) for p in prefixes})
    for row in rows:
        read += 1
        if row.key.startswith(SCHEME_ROW_KEY):
            record_rows += 1
            continue
        if layout is None or record is None:
            accesses.append(row)
            continue
        bucket = next((prefixes[row.key[:n]] for n in lengths if row.key[:n] in prefixes), None)
        if bucket is not None and len(row.key) > len(layout.scheme.prefix(bucket)):
            logical = row.key[len(layout.scheme.prefix(bucket)) :]
        elif record.cutoff is not None and bucket is None:
            logical = row.key  # a legacy row, written before the cutoff
        else:
            outside += 1
            continue
        if layout.hidden_reason(bucket, logical) is not None:
            hidden += 1
            continue
        accesses.append(Access(logical, row.count, row.time))
    return TableSample(accesses, record, record_family, read, record_rows, outside, hidden)


def _epochs_sample(
    rows: Iterable[Access], record: LayoutRecord, record_family: str | None
) -> TableSample:
    """:func:`logical_sample` of a table with epochs: every epoch's prefixes are its data.

    A key loses the prefix of whichever epoch has it; rows the attribution rule
    hides (a key whose time selects another epoch) are left out when the
    record's key parts and reader can be rebuilt, otherwise kept.
    """
    from .._guard.from_record import epochs_of_record

    assert record.epochs is not None
    try:
        epochs = epochs_of_record(record.epochs)
    except (LayoutError, SaltSchemeError):
        epochs = None  # a custom key part or reader: the prefixes still tell the keys
    prefixes: set[bytes] = set()
    for found in record.epochs.epochs:
        if found.buckets is not None:
            scheme = SaltScheme(
                found.buckets,
                hash=found.hash or "crc32",
                separator=b"-" if found.separator is None else found.separator,
                marker=found.marker or b"",
            )
            prefixes.update(scheme.prefixes)
    legacy = record.epochs.epochs[0].buckets is None
    lengths = sorted({len(p) for p in prefixes})
    accesses: list[Access] = []
    read = record_rows = outside = hidden = 0
    for row in rows:
        read += 1
        if row.key.startswith(SCHEME_ROW_KEY):
            record_rows += 1
            continue
        prefix = next((row.key[:n] for n in lengths if row.key[:n] in prefixes), None)
        if (prefix is None and not legacy) or (prefix is not None and len(row.key) == len(prefix)):
            outside += 1
            continue
        if epochs is not None and epochs.owner(row.key) is None:
            hidden += 1
            continue
        logical = row.key if prefix is None else row.key[len(prefix) :]
        accesses.append(Access(logical, row.count, row.time))
    return TableSample(accesses, record, record_family, read, record_rows, outside, hidden)


async def read_table(
    *,
    project: str,
    instance: str,
    table: str,
    limit: int,
    operation_timeout: float,
    progress: IO[str] | None = None,
) -> TableSample:
    """Read up to ``limit`` rows spread over a table, as logical keys with their newest time.

    Key-only reads: no values cross the wire, one cell per row for its
    timestamp. The rows are spread over the table's tablets in proportion to
    their size (:func:`plan_sample`), because the first ``limit`` rows would
    only show the start of the key space. The table's layout record, if it
    has one, is read first, and the keys are judged as the table's readers
    see them (:func:`logical_sample`).

    Args:
        project: Google Cloud project.
        instance: Bigtable instance.
        table: Table ID.
        limit: Rows to read in all (the record row, if met, among them).
        operation_timeout: Timeout of each Bigtable call, in seconds.
        progress: Where to draw a progress bar (None: nowhere).

    Returns:
        One access per row kept (count 1; time in epoch seconds, or None for
        every row when some row has no cell), and what was left out.

    Raises:
        InputError: The table cannot be read, holds a record that is not one,
            or has no rows besides the ones left out.
    """
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError
    from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, RowRange
    from google.cloud.bigtable.data.row_filters import (
        CellsRowLimitFilter,
        RowFilterChain,
        StripValueTransformerFilter,
    )

    key_only = RowFilterChain([StripValueTransformerFilter(True), CellsRowLimitFilter(1)])
    bar = Progress(f"sampling {table}", limit, progress)
    rows: list[Access] = []
    where = f"table {table!r} (project {project!r}, instance {instance!r})"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
            client = BigtableDataClientAsync(project=project)
        async with client, client.get_table(instance, table) as handle:
            reserved = await handle.read_row(SCHEME_ROW_KEY, operation_timeout=operation_timeout)
            cell = newest_record_cell(reserved)
            record = record_of_row(reserved)
            samples = await handle.sample_row_keys(operation_timeout=operation_timeout)
            for start, end, count in plan_sample(samples, limit):
                query = ReadRowsQuery(
                    row_ranges=RowRange(start, end), limit=count, row_filter=key_only
                )
                stream = await handle.read_rows_stream(query, operation_timeout=operation_timeout)
                async for row in stream:
                    stamps = [c.timestamp_micros for c in row.cells]
                    moment = max(stamps) / 1e6 if stamps else None
                    rows.append(Access(row.row_key, 1.0, moment))
                    bar.update(len(rows))
    except (GoogleAPIError, GoogleAuthError) as exc:
        why = connection_failure(exc, timeout=operation_timeout, environ=os.environ)
        raise InputError(f"cannot sample {where}: {why or _one_line(exc)}") from None
    except LayoutError as exc:
        raise InputError(f"{where}: {_one_line(exc)}") from None
    finally:
        bar.close(len(rows))
    sample = logical_sample(rows, record, None if cell is None else cell.family)
    if not sample.accesses:
        left = "" if sample.rows == len(sample.accesses) else " besides the ones left out"
        raise InputError(f"{where} has no rows{left}")
    if any(a.time is None for a in sample.accesses):
        untimed = [Access(a.key, a.count) for a in sample.accesses]
        sample = dataclasses.replace(sample, accesses=untimed)
    return sample


async def sample_table(
    *,
    project: str,
    instance: str,
    table: str,
    limit: int,
    operation_timeout: float,
    progress: IO[str] | None = None,
) -> list[Access]:
    """The accesses of :func:`read_table`: logical keys, the record row left out.

    Raises:
        InputError: The table cannot be read, or has no rows.
    """
    sample = await read_table(
        project=project,
        instance=instance,
        table=table,
        limit=limit,
        operation_timeout=operation_timeout,
        progress=progress,
    )
    return sample.accesses


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."
