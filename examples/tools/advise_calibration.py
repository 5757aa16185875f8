"""How well do the advisor's corrected max/means and 95% intervals hold the truth?

For each reference workload of ``advise_demo.py``, this draws several samples
(different generator seeds), runs the advisor on each with the windows fixed,
and compares every layout's corrected max/mean and interval with the "truth":
the corrected max/mean of one sample ten times larger, whose own noise is about
a third as large. It prints, per workload and N, the truth, the mean measured
and corrected values, and how many intervals held the truth.

    python examples/tools/advise_calibration.py            # a few minutes
    python examples/tools/advise_calibration.py --samples 4 --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator

import advise_demo as demo  # next to this script, so on its path

from saltedtable.advise import Access, advise

Rows = Callable[[int, int], Iterator[tuple[str, int, float]]]

#: name, rows(lines, seed), lines per sample, windows, tablets
WORKLOADS: list[tuple[str, Rows, int, int, int]] = [
    ("tenants", lambda n, s: demo.tenant_lines(n, seed=s), 60_000, 16, 32),
    ("busy-tenant", lambda n, s: demo.tenant_lines(n, factor=5, seed=s), 60_000, 8, 32),
    ("article", lambda n, s: demo.article_lines(n, seed=s), 20_000, 1, 5),
    ("uniform", lambda n, s: demo.uniform_lines(n, seed=s), 20_000, 1, 32),
    ("hot-key", lambda n, s: demo.hot_key_lines(n, seed=s), 20_000, 1, 32),
]
CANDIDATES = (1, 2, 4, 8, 16, 32)


def accesses(rows: Iterator[tuple[str, int, float]]) -> list[Access]:
    """Demo rows as accesses."""
    return [Access(key.encode(), float(count), moment) for key, count, moment in rows]


def main() -> None:
    """Run the comparison and print one line per workload and N."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=10, help="samples per workload")
    parser.add_argument("--quick", action="store_true", help="truth from 4x, not 10x, the lines")
    parser.add_argument("--only", action="append", help="run only this workload (repeatable)")
    args = parser.parse_args()
    scale = 4 if args.quick else 10
    print(f"{'workload':<12} {'N':>3} {'truth':>6} {'measured':>8} {'corrected':>9} {'held':>6}")
    for name, rows, lines, windows, tablets in WORKLOADS:
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        options = {"windows": windows, "tablets": tablets, "candidates": CANDIDATES}
        truth = advise(accesses(rows(lines * scale, 1000)), **options)
        runs = [advise(accesses(rows(lines, seed)), **options) for seed in range(args.samples)]
        for n in CANDIDATES:
            true = truth.simulation(n).corrected
            sims = [run.simulation(n) for run in runs]
            measured = sum(s.max_mean for s in sims) / len(sims)
            corrected = sum(s.corrected for s in sims) / len(sims)
            held = sum(s.low <= true <= s.high for s in sims)
            print(
                f"{name:<12} {n:>3} {true:>6.2f} {measured:>8.2f} {corrected:>9.2f} "
                f"{held:>3}/{len(sims):<2}"
            )
        print(f"# {name}: {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
