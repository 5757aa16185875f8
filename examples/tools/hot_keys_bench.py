"""Write spread and read cost of a hot part and a hot row, before and after the split (issue 40).

Run: ``.venv/bin/python examples/tools/hot_keys_bench.py [--writes 20000] [--share 0.4]``.
It starts its own emulator unless ``BIGTABLE_EMULATOR_HOST`` is set, and prints one
JSON report.

Scheme ``SaltScheme(N, key_part=fields(1))`` (N=16 by default). Two workloads of
``--writes`` writes each, where one key takes ``--share`` of them:

* **part**: ``--share`` of the writes go to rows of part ``hot`` (fresh rows), the rest
  to rows of 1,000 other parts;
* **row**: ``--share`` of the writes are ``AddToCell`` to the row ``ctr#total``, the
  rest ``SetCell`` to 4,000 other rows.

Each workload runs twice on fresh tables: without hot lists, then split with the K that
``propose_split`` gives for the target (the advisor's model with T = N tablets, one per
bucket, and D the distinct keys written). Reported per run: the writes per bucket (and,
for the row, per sub-row), max/mean of the per-bucket counts against the advisor's
predicted level (``hot_key_floor`` before, the proposal's level after). Then the read
cost, in the same run: requests and physical rows of a prefix scan of the split part
against an unsplit part of the same size, and of a point read of the split row against
an unsplit row, with the median time of ``--rounds`` reads each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

from google.cloud.bigtable.data import BigtableDataClientAsync, RowMutationEntry
from google.cloud.bigtable.data.mutations import AddToCell, SetCell
from google.cloud.bigtable_admin_v2 import types

from saltedtable import CallStats, HotLayout, SaltedTableAsync, SaltScheme, fields
from saltedtable._admin import admin_client
from saltedtable._guard.families import parse_family
from saltedtable._scheme.hot import propose_split
from saltedtable.testing import (
    EMULATOR_HOST_ENV,
    INSTANCE,
    PROJECT,
    delete_table,
    emulator_env,
    start_emulator,
)

AGGREGATES = {"sm": "int64 sum"}


def _create(address: str, table_id: str) -> None:
    # A plain family and a sum family (create_table makes plain families only).
    with admin_client(emulator_host=address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{PROJECT}/instances/{INSTANCE}",
                table_id=table_id,
                table=types.Table(
                    column_families=dict(parse_family(s) for s in ("cf", "sm:agg=sum"))
                ),
            )
        )


class Counting:
    """The client's table, counting the physical rows written and the read requests."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.written: Counter[bytes] = Counter()
        self.reads = 0
        self.rows_read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    async def bulk_mutate_rows(self, entries: list[Any], **kwargs: Any) -> None:
        self.written.update(bytes(e.row_key) for e in entries)
        await self.raw.bulk_mutate_rows(entries, **kwargs)

    async def read_rows_stream(self, query: Any, **kwargs: Any) -> Any:
        self.reads += 1
        stream = await self.raw.read_rows_stream(query, **kwargs)

        async def counted() -> Any:
            async for row in stream:
                self.rows_read += 1
                yield row

        return counted()

    async def read_row(self, key: bytes, **kwargs: Any) -> Any:
        self.reads += 1
        row = await self.raw.read_row(key, **kwargs)
        self.rows_read += row is not None
        return row


def level(counts: Counter[int], n: int) -> float:
    """max/mean of the per-bucket counts (buckets without writes count as 0)."""
    values = [counts.get(b, 0) for b in range(n)]
    return max(values) / statistics.fmean(values)


def workload(kind: str, writes: int, share: float, seed: int) -> list[RowMutationEntry]:
    rng = random.Random(seed)
    out = []
    for i in range(writes):
        hot = rng.random() < share
        if kind == "part":
            part = b"hot" if hot else b"p%04d" % rng.randrange(1000)
            out.append(RowMutationEntry(part + b"#%06d" % i, SetCell("cf", b"v", b"x", 1000)))
        elif hot:
            out.append(RowMutationEntry(b"ctr#total", AddToCell("sm", b"n", 1, 0)))
        else:
            key = b"r%04d#k" % rng.randrange(4000)
            out.append(RowMutationEntry(key, SetCell("cf", b"v", b"x", 1000)))
    return out


async def one_run(
    client: BigtableDataClientAsync,
    address: str,
    kind: str,
    entries: list[RowMutationEntry],
    scheme: SaltScheme,
    hot: HotLayout | None,
) -> dict[str, Any]:
    table_id = f"hot-{uuid.uuid4().hex[:8]}"
    _create(address, table_id)
    try:
        raw = Counting(client.get_table(INSTANCE, table_id))
        table = SaltedTableAsync(raw, scheme, guard=False, hot=hot, aggregates=AGGREGATES)
        for i in range(0, len(entries), 500):
            await table.bulk_mutate_rows(entries[i : i + 500])
        per_bucket: Counter[int] = Counter()
        by_prefix = {p: b for b, p in zip(scheme.bucket_ids, scheme.prefixes, strict=True)}
        for key, count in raw.written.items():
            per_bucket[by_prefix[key[: key.index(b"-") + 1]]] += count
        out: dict[str, Any] = {
            "hot": None if hot is None else repr(hot),
            "writes_per_bucket": [per_bucket.get(b, 0) for b in range(scheme.buckets)],
            "max_over_mean": round(level(per_bucket, scheme.buckets), 3),
        }
        if kind == "row":
            subs = [(k, c) for k, c in raw.written.items() if k.endswith(b"ctr#total")]
            out["writes_per_sub_row"] = {k.decode(): c for k, c in sorted(subs)}
            row = await table.read_row(b"ctr#total")
            assert row is not None
            out["counter_reads"] = int.from_bytes(row.cells[0].value, "big", signed=True)
        out["_table"] = table
        out["_raw"] = raw
        out["_id"] = table_id
        return out
    except BaseException:
        delete_table(address, table_id, missing_ok=True)
        raise


async def read_cost(
    table: SaltedTableAsync, raw: Counting, what: str, key: bytes, rounds: int
) -> dict[str, Any]:
    """Requests, physical rows and median ms of a prefix scan or a point read."""
    times = []
    requests = rows = logical = 0
    for _ in range(rounds):
        raw.reads = raw.rows_read = 0
        start = time.perf_counter()
        if what == "scan":
            stats = CallStats()
            got = [r async for r in table.read_prefix(key, stats=stats)]
            logical = len(got)
        else:
            logical = int(await table.read_row(key) is not None)
        times.append(time.perf_counter() - start)
        requests, rows = raw.reads, raw.rows_read
    return {
        "requests": requests,
        "physical_rows": rows,
        "logical_rows": logical,
        "median_ms": round(statistics.median(times) * 1000, 2),
    }


async def run(args: argparse.Namespace, address: str) -> dict[str, Any]:
    scheme = SaltScheme(args.buckets, key_part=fields(1))
    report: dict[str, Any] = {"buckets": args.buckets, "writes": args.writes, "share": args.share}
    async with BigtableDataClientAsync(project=PROJECT) as client:
        for kind in ("part", "row"):
            entries = workload(kind, args.writes, args.share, args.seed)
            distinct = len({bytes(e.row_key) for e in entries})
            value = b"hot" if kind == "part" else b"ctr#total"
            proposal = propose_split(
                kind,  # type: ignore[arg-type]
                value,
                args.share,
                buckets=args.buckets,
                tablets=args.buckets,
                distinct=distinct,
                target=args.target,
                table="TABLE",
            )
            assert proposal is not None
            hot = (
                HotLayout(scheme, parts={value: proposal.k})
                if kind == "part"
                else HotLayout(scheme, rows={value: proposal.k})
            )
            before = await one_run(client, address, kind, entries, scheme, None)
            after = await one_run(client, address, kind, entries, scheme, hot)
            floor = propose_split(
                kind,  # type: ignore[arg-type]
                value,
                args.share,
                buckets=args.buckets,
                tablets=args.buckets,
                distinct=distinct,
                target=1e9,
            )
            del floor
            piece = proposal.level
            one = args.buckets * args.share + (distinct - args.buckets) / (distinct - 1) * (
                1 - args.share
            )
            section: dict[str, Any] = {
                "distinct_keys": distinct,
                "proposal": {
                    "k": proposal.k,
                    "level": round(piece, 3),
                    "command": proposal.command,
                },
                "predicted_max_over_mean": {"before": round(one, 3), "after": round(piece, 3)},
            }
            for name, res in (("before", before), ("after", after)):
                section[name] = {k: v for k, v in res.items() if not k.startswith("_")}
            # Read cost, in this run: the split key against an unsplit one of the same size.
            if kind == "part":
                same = Counter(bytes(e.row_key).split(b"#")[0] for e in entries)
                cold = max((p for p in same if p != b"hot"), key=lambda p: same[p])
                section["cold_part_rows"] = same[cold]
                section["read_cost"] = {
                    "split_part_prefix_scan": await read_cost(
                        after["_table"], after["_raw"], "scan", b"hot#", args.rounds
                    ),
                    "unsplit_part_prefix_scan": await read_cost(
                        before["_table"], before["_raw"], "scan", b"hot#", args.rounds
                    ),
                    "cold_part_prefix_scan": await read_cost(
                        after["_table"], after["_raw"], "scan", cold + b"#", args.rounds
                    ),
                }
            else:
                section["read_cost"] = {
                    "split_row_point_read": await read_cost(
                        after["_table"], after["_raw"], "point", b"ctr#total", args.rounds
                    ),
                    "unsplit_row_point_read": await read_cost(
                        before["_table"], before["_raw"], "point", b"ctr#total", args.rounds
                    ),
                }
            for res in (before, after):
                delete_table(address, res["_id"], missing_ok=True)
            report[kind] = section
    return report


@contextlib.contextmanager
def emulator() -> Iterator[str]:
    if os.environ.get(EMULATOR_HOST_ENV):
        yield os.environ[EMULATOR_HOST_ENV]
        return
    with start_emulator() as emu:
        os.environ.update(emulator_env(emu))
        yield emu.address


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--share", type=float, default=0.4)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--target", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=40)
    args = parser.parse_args()
    with emulator() as address:
        print(json.dumps(asyncio.run(run(args, address)), indent=2))


if __name__ == "__main__":
    main()
