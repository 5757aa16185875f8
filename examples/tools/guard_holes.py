"""The guard holes of issue 24, shown on the emulator: each prints what happens now.

    .venv/bin/python examples/tools/guard_holes.py

To see the holes as they were, run the same file from a checkout of an older commit
(`git worktree add /tmp/before 82cfc96 && cd /tmp/before && make install`, then
`.venv/bin/python /path/to/this/file`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import uuid
import warnings

import saltedtable
from saltedtable import (
    SCHEME_ROW_KEY,
    CutoffPolicy,
    SaltedTableAsync,
    SaltScheme,
    epoch_field,
    testing,
)

warnings.simplefilter("ignore")
logging.basicConfig(level=logging.WARNING, format="    log: %(message).150s")
print("saltedtable from", os.path.dirname(saltedtable.__file__))


def table_with(address: str, specs: dict[str, object]) -> str:
    from google.cloud.bigtable_admin_v2 import types

    from saltedtable.testing import _admin_client

    name = f"t-{uuid.uuid4().hex[:8]}"
    with _admin_client(address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{testing.PROJECT}/instances/{testing.INSTANCE}",
                table_id=name,
                table=types.Table(column_families=specs),
            )
        )
    return name


async def main(address: str) -> None:
    import datetime as _dt

    from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, SetCell
    from google.cloud.bigtable.data.mutations import AddToCell, DeleteAllFromRow
    from google.cloud.bigtable_admin_v2 import types

    client = BigtableDataClientAsync(project=testing.PROJECT)

    async def record_families(t: str) -> list[str]:
        row = await client.get_table(testing.INSTANCE, t).read_row(SCHEME_ROW_KEY)
        return [] if row is None else [c.family for c in row.cells]

    print("1. GC: a write to a family with a 1 s max-age rule")
    ttl = types.ColumnFamily(gc_rule=types.GcRule(max_age=_dt.timedelta(seconds=1)))
    t = table_with(address, {"ts": ttl})
    st = SaltedTableAsync.from_client(client, testing.INSTANCE, t, SaltScheme(4))
    await st.mutate_row(b"sensor1", SetCell("ts", b"t", b"20"))
    print("   record stored in families:", await record_families(t))

    print("2. Aggregates: AddToCell to a new table with only an aggregate family")
    agg = types.ColumnFamily(
        value_type=types.Type(
            aggregate_type=types.Type.Aggregate(
                input_type=types.Type(int64_type=types.Type.Int64()),
                sum=types.Type.Aggregate.Sum(),
            )
        )
    )
    t = table_with(address, {"counts": agg})
    st = SaltedTableAsync.from_client(client, testing.INSTANCE, t, SaltScheme(4))
    await st.mutate_row(b"page", AddToCell("counts", b"n", 5, 0))
    print("   record (a SetCell) stored in families:", await record_families(t))

    print("3. Tables without a record: require_record=True")
    t = table_with(address, {"cf": types.ColumnFamily()})
    try:
        st = SaltedTableAsync.from_client(
            client, testing.INSTANCE, t, SaltScheme(4), require_record=True
        )
        await st.read_row(b"a")
        print("   read without complaint")
    except Exception as exc:
        print("   ", type(exc).__name__, str(exc)[:140])

    print("4. Long-lived objects: the record moves to `deleting` under a running cutoff scan")
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field(digits=10))
    at = int(cutoff.cutoff.timestamp())
    t = table_with(address, {"cf": types.ColumnFamily()})
    raw = client.get_table(testing.INSTANCE, t)
    from google.cloud.bigtable.data import RowMutationEntry

    await raw.bulk_mutate_rows(
        [
            RowMutationEntry(b"s%d#%010d" % (i, at - 100 + i), SetCell("cf", b"q", b"v"))
            for i in range(30)
        ]
    )
    await SaltedTableAsync.open(raw, SaltScheme(4), cutoff=cutoff, family="cf")
    kwargs = {"record_refresh": 1e-9} if hasattr(saltedtable, "RECORD_FAMILY") else {}
    reader = SaltedTableAsync(raw, SaltScheme(4), cutoff=cutoff, **kwargs)
    from saltedtable._guard.migration import migration_record
    from saltedtable._guard.record import encode_layout

    deleting = encode_layout(migration_record(SaltScheme(4), cutoff, "deleting"))
    seen = 0
    try:
        async for _ in await reader.read_rows_stream(ReadRowsQuery()):
            seen += 1
            if seen == 5:
                await raw.mutate_row(
                    SCHEME_ROW_KEY, [DeleteAllFromRow(), SetCell("cf", b"scheme", deleting)]
                )
        print(f"   the scan read on: {seen} rows")
    except Exception as exc:
        print(f"   stopped after {seen} rows:", type(exc).__name__, str(exc).splitlines()[1][:80])

    print("5. Custom key parts: two different lambdas")
    try:
        a = saltedtable.describe_layout(SaltScheme(4, key_part=lambda k: k[:2]))
        b = saltedtable.describe_layout(SaltScheme(4, key_part=lambda k: k[:3]))
        print("   records equal:", a == b, a.key_part)
    except Exception as exc:
        print("   ", type(exc).__name__, str(exc)[:120])

    print("6. Views: the row prefixes of a view of b'tenant1#'")
    helper = getattr(saltedtable, "view_row_prefixes", None)
    print("   ", helper(SaltScheme(4), b"tenant1#") if helper else "no helper")

    print("7. create / inspect commands")
    from saltedtable._cli.main import main as cli

    name = f"t-{uuid.uuid4().hex[:8]}"
    where = ["--project", testing.PROJECT, "--instance", testing.INSTANCE]
    code = cli(["create", name, *where, "-n", "4"])
    print("   create exit", code)
    if code == 0:
        print("   inspect exit", cli(["inspect", name, *where]))
    await client.close()


emulator = testing.start_emulator()
os.environ[testing.EMULATOR_HOST_ENV] = emulator.address
try:
    asyncio.run(main(emulator.address))
finally:
    emulator.stop()
