"""Write sample workloads for ``saltedtable advise`` to chew on.

The default, ``tenants``, is the worked example of docs/advise.md: one hour of
writes from 50 tenants, keyed ``tenant#epoch-ms`` (the tenant, then the write
time), where tenant007 writes 40 times as often as each of the others. In
storage the keys spread evenly, but every write of a tenant lands at the end of
its own range, so tenant007's end is one very hot tablet.

The other workloads are the ones the advisor's tests and docs measure:

* ``busy-tenant``: the same, with tenant007 writing 5 times as often.
* ``article``: five key ranges A..E of 1,000 keys each, read and written at
  5,000, 200,000, 5,000, 5,000 and 5,000 accesses a minute (the hottest range
  at about 4.5x the mean, so "about 5 shards"); model it with ``--tablets 5``,
  one tablet per range, as the ranges were measured.
* ``uniform``: random keys from a million users, evenly over the hour.
* ``hot-key``: 10,000 users evenly, plus one key, ``celebrity``, with a tenth of
  all accesses.
* ``timestamp-first``: writes keyed ``epoch-ms#user`` (the time first), evenly
  over the hour: every new row goes to the end of the key space.

``--weighted`` writes one ``key,count`` line per distinct key instead (the
accesses summed per key, no time): a weighted sample, as a counter export gives.
``--storage`` (``article`` only) first lists every key of the five ranges as a
``key,0`` line: storage without load, so that the tablets are cut from the
table's keys rather than from the keys the accesses happened to touch.

    python examples/advise_demo.py skewed.csv          # 60,000 lines (or: --lines N)
    saltedtable advise skewed.csv --plot heatmap.png
    python examples/advise_demo.py --workload article article.csv
    saltedtable advise article.csv --tablets 5
    python examples/advise_demo.py --workload article --storage --lines 2000 log.csv
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO

START_MS = 1_700_000_000_000
HOUR_MS = 3_600_000
#: Accesses a minute of the article's five key ranges A..E.
ARTICLE_RATES = (5_000, 200_000, 5_000, 5_000, 5_000)
ARTICLE_KEYS_PER_RANGE = 1_000

Line = tuple[str, int, float]
"""One access: key, count, time in epoch seconds."""


def tenant_lines(
    lines: int, *, tenants: int = 50, factor: float = 40, seed: int = 7
) -> Iterator[Line]:
    """``tenant#epoch-ms`` writes in time order; tenant007 writes ``factor`` x as often."""
    rnd = random.Random(seed)
    weights = [factor if t == 7 else 1 for t in range(tenants)]
    for ms in sorted(rnd.randrange(HOUR_MS) for _ in range(lines)):
        tenant = rnd.choices(range(tenants), weights)[0]
        yield f"tenant{tenant:03d}#{START_MS + ms}", 1, (START_MS + ms) / 1000


def article_lines(lines: int, *, seed: int = 4) -> Iterator[Line]:
    """Accesses to five ranges of equal size at the article's rates, evenly over an hour."""
    rnd = random.Random(seed)
    groups = "ABCDE"
    for ms in sorted(rnd.randrange(HOUR_MS) for _ in range(lines)):
        group = rnd.choices(groups, ARTICLE_RATES)[0]
        user = rnd.randrange(ARTICLE_KEYS_PER_RANGE)
        yield f"{group}#user{user:04d}", 1, (START_MS + ms) / 1000


def uniform_lines(lines: int, *, seed: int = 9) -> Iterator[Line]:
    """Accesses to random users out of a million, evenly over an hour."""
    rnd = random.Random(seed)
    for ms in sorted(rnd.randrange(HOUR_MS) for _ in range(lines)):
        yield f"user{rnd.randrange(1_000_000):06d}", 1, (START_MS + ms) / 1000


def hot_key_lines(lines: int, *, seed: int = 5) -> Iterator[Line]:
    """10,000 users evenly, and ``celebrity`` taking a tenth of the accesses."""
    rnd = random.Random(seed)
    for ms in sorted(rnd.randrange(HOUR_MS) for _ in range(lines)):
        key = "celebrity" if rnd.random() < 0.1 else f"user{rnd.randrange(10_000):05d}"
        yield key, 1, (START_MS + ms) / 1000


def timestamp_first_lines(lines: int, *, seed: int = 3) -> Iterator[Line]:
    """Writes keyed ``epoch-ms#user``, evenly over an hour: the keys rise with time."""
    rnd = random.Random(seed)
    for ms in sorted(rnd.randrange(HOUR_MS) for _ in range(lines)):
        yield f"{START_MS + ms}#user{rnd.randrange(1_000):03d}", 1, (START_MS + ms) / 1000


WORKLOADS: dict[str, tuple[Callable[[int], Iterator[Line]], int]] = {
    "tenants": (tenant_lines, 60_000),
    "busy-tenant": (lambda n: tenant_lines(n, factor=5), 60_000),
    "article": (article_lines, 20_000),
    "uniform": (uniform_lines, 20_000),
    "hot-key": (hot_key_lines, 20_000),
    "timestamp-first": (timestamp_first_lines, 20_000),
}


def article_keys() -> list[str]:
    """Every key of the article's five ranges, in key order: the table's storage."""
    return [
        f"{group}#user{user:04d}" for group in "ABCDE" for user in range(ARTICLE_KEYS_PER_RANGE)
    ]


def per_key(rows: Iterator[Line]) -> list[tuple[str, int]]:
    """Sum the counts per key, in key order (a weighted sample without times)."""
    totals: dict[str, int] = {}
    for key, count, _ in rows:
        totals[key] = totals.get(key, 0) + count
    return sorted(totals.items())


def write_rows(
    out: TextIO, rows: Iterator[Line], *, weighted: bool = False, storage: Sequence[str] = ()
) -> None:
    """Write ``key,count,time`` lines (time in epoch seconds), or ``key,count`` per key.

    ``storage`` keys come first as ``key,0`` lines: listed for storage, no load, no time.
    """
    if weighted:
        out.write("key,count\n")
        for key in storage:
            out.write(f"{key},0\n")
        for key, count in per_key(rows):
            out.write(f"{key},{count}\n")
        return
    out.write("key,count,time\n")
    for key in storage:
        out.write(f"{key},0,\n")
    for key, count, moment in rows:
        out.write(f"{key},{count},{moment:.3f}\n")


def write_log(
    out: TextIO, lines: int, *, tenants: int = 50, factor: float = 40, seed: int = 7
) -> None:
    """Write the tenants workload: ``lines`` CSV rows ``key,count,time`` in time order."""
    write_rows(out, tenant_lines(lines, tenants=tenants, factor=factor, seed=seed))


def main() -> None:
    """Parse the arguments and write the workload to a file or stdout."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", nargs="?", default="-", help="output CSV (default: stdout)")
    parser.add_argument(
        "--workload", choices=sorted(WORKLOADS), default="tenants", help="which workload"
    )
    parser.add_argument("--lines", type=int, help="accesses to write (default: per workload)")
    parser.add_argument(
        "--weighted", action="store_true", help="one key,count line per distinct key"
    )
    parser.add_argument(
        "--storage", action="store_true", help="list every key as a key,0 line first (article)"
    )
    args = parser.parse_args()
    if args.storage and args.workload != "article":
        parser.error("--storage needs --workload article (the other key spaces have no list)")
    make, default_lines = WORKLOADS[args.workload]
    rows = make(args.lines or default_lines)
    storage = article_keys() if args.storage else []
    if args.path == "-":
        write_rows(sys.stdout, rows, weighted=args.weighted, storage=storage)
    else:
        with open(args.path, "w") as out:
            write_rows(out, rows, weighted=args.weighted, storage=storage)


if __name__ == "__main__":
    main()
