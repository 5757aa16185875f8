"""Write a skewed access log for ``saltedtable advise`` to chew on.

One hour of writes from 50 tenants, keyed ``tenant#epoch-ms`` (the tenant, then
the write time): tenant007 writes 40 times as often as each of the others. In
storage the keys spread evenly, but every write of a tenant lands at the end of
its own range, so tenant007's end is one very hot tablet.

    python examples/advise_demo.py skewed.csv          # 60,000 lines (or: --lines N)
    saltedtable advise skewed.csv --plot heatmap.png
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import TextIO

START_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


def write_log(
    out: TextIO, lines: int, *, tenants: int = 50, factor: int = 40, seed: int = 7
) -> None:
    """Write ``lines`` CSV rows ``key,count,time`` in time order (time in epoch seconds)."""
    rnd = random.Random(seed)
    weights = [factor if t == 7 else 1 for t in range(tenants)]
    out.write("key,count,time\n")
    for ms in sorted(rnd.randrange(HOUR_MS) for _ in range(lines)):
        tenant = rnd.choices(range(tenants), weights)[0]
        out.write(f"tenant{tenant:03d}#{START_MS + ms},1,{(START_MS + ms) / 1000:.3f}\n")


def main() -> None:
    """Parse the arguments and write the log to a file or stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="-", help="output CSV (default: stdout)")
    parser.add_argument("--lines", type=int, default=60_000, help="rows to write")
    args = parser.parse_args()
    if args.path == "-":
        write_log(sys.stdout, args.lines)
    else:
        with open(args.path, "w") as out:
            write_log(out, args.lines)


if __name__ == "__main__":
    main()
