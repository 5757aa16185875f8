"""Where Beam starts to pay: ReadSaltedRows with 1, 2 and 4 local workers vs the async scan.

Loads ``--rows`` rows (100-byte values) into a 16-bucket salted table on the
official emulator, then reads the whole table, in every round and in rotating
order (the emulator slows down over a long run, so the variants alternate):

* ``async``: one process, ``SaltedTableAsync.read_rows`` (the merged scan, in
  key order);
* ``async-unordered``: the same with ``ordered=False``, rows in arrival order
  as Beam gives them: the like-for-like baseline;
* ``beam-N``: ``ReadSaltedRows`` on Beam's local runner with N worker
  processes (``--direct_running_mode=multi_processing``), from pipeline start
  to end (worker start-up, planning and sampling included).

It prints rows/s (the median over the rounds) and each variant's ratio to
``async`` and to ``async-unordered`` measured in the same run, and writes them
as JSON::

    python examples/tools/beam_bench.py [--rows 200000] [--rounds 3] [--json PATH]

Needs Apache Beam, the ``beam`` extra (``make bench-beam`` runs it in ``.venv-beam``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.combiners import Count
from google.cloud.bigtable.data import (
    BigtableDataClientAsync,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)

from saltedtable import SaltedTableAsync, SaltScheme
from saltedtable.beam import BigtableTarget, ReadSaltedRows, counters, run_pipeline
from saltedtable.testing import EMULATOR_HOST_ENV, INSTANCE, PROJECT, create_table, start_emulator

warnings.filterwarnings("ignore", "Connecting to Bigtable emulator")
SCHEME = SaltScheme(16)
TABLE = "beam-bench"
WORKERS = (1, 2, 4)


async def load(rows: int) -> None:
    """Write ``rows`` rows through the salted table."""
    async with BigtableDataClientAsync(project=PROJECT) as client:
        table = SaltedTableAsync(client.get_table(INSTANCE, TABLE), SCHEME)
        async with table.mutations_batcher(flush_interval=None) as batcher:
            for i in range(rows):
                key = b"user%06d#%d" % (i // 10, i % 10)
                await batcher.append(RowMutationEntry(key, SetCell("cf", b"v", b"x" * 100, 1000)))


async def async_scan(ordered: bool) -> int:
    """Rows of one full scan (in key order or not) through a fresh client."""
    async with BigtableDataClientAsync(project=PROJECT) as client:
        table = SaltedTableAsync(client.get_table(INSTANCE, TABLE), SCHEME)
        return len(await table.read_rows(ReadRowsQuery(), ordered=ordered))


def beam_scan(workers: int) -> int:
    """Rows read by ReadSaltedRows with ``workers`` local worker processes."""
    options = PipelineOptions(
        [
            f"--direct_num_workers={workers}",
            "--direct_running_mode=multi_processing",
            "--default_sdk_harness_log_level=WARNING",
        ]
    )
    read = ReadSaltedRows(BigtableTarget(PROJECT, INSTANCE, TABLE), SCHEME, split_bytes=1024 * 1024)
    result = run_pipeline(lambda p: p | read | Count.Globally(), options)
    return sum(v for name, v in counters(result).items() if name.startswith("rows_read."))


def measure(variant: str, rows: int) -> float:
    """Seconds one read of the whole table took (checked to return every row)."""
    started = time.perf_counter()
    if variant.startswith("async"):
        got = asyncio.run(async_scan(ordered=variant == "async"))
    else:
        got = beam_scan(int(variant[5:]))
    took = time.perf_counter() - started
    if got != rows:
        raise SystemExit(f"{variant} read {got} rows, expected {rows}")
    return took


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="where to write the results")
    args = parser.parse_args()
    emulator = start_emulator()
    os.environ[EMULATOR_HOST_ENV] = emulator.address
    try:
        create_table(emulator.address, TABLE, ["cf"])
        started = time.perf_counter()
        asyncio.run(load(args.rows))
        print(f"loaded {args.rows:,} rows in {time.perf_counter() - started:.1f}s")
        variants = ["async", "async-unordered", *(f"beam-{w}" for w in WORKERS)]
        seconds: dict[str, list[float]] = {v: [] for v in variants}
        for round_ in range(args.rounds):
            order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
            for variant in order:
                seconds[variant].append(measure(variant, args.rows))
                took = seconds[variant][-1]
                print(f"  round {round_ + 1} {variant:>15}: {took:.2f}s", flush=True)
    finally:
        emulator.stop()
    base = statistics.median(seconds["async"])
    unordered = statistics.median(seconds["async-unordered"])
    results: dict[str, Any] = {
        "rows": args.rows,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "beam": beam.__version__,
        "variants": {},
    }
    print(f"\n{'variant':>15} {'median s':>9} {'rows/s':>10} {'vs async':>9} {'vs unordered':>13}")
    for variant in variants:
        median = statistics.median(seconds[variant])
        rate = args.rows / median
        ratio, ratio_unordered = base / median, unordered / median
        results["variants"][variant] = {
            "seconds": seconds[variant],
            "rows_per_s": rate,
            "vs_async": ratio,
            "vs_async_unordered": ratio_unordered,
        }
        print(
            f"{variant:>15} {median:>9.2f} {rate:>10,.0f} {ratio:>8.2f}x {ratio_unordered:>12.2f}x"
        )
    path = args.json or Path("bench-results") / f"beam-bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
