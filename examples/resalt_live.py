"""Change the bucket count of a live table: append a layout epoch, forward only.

A walk-through on a table whose keys end with a time (``sensor1#1790000000000``,
epoch milliseconds), salted with 4 buckets:

1. a writer and a reader are open on the table (long-lived, as services are);
2. an epoch of 16 buckets is appended, starting a few seconds ahead (what
   ``saltedtable resalt TABLE -n 16 --at TIME`` does);
3. the writer keeps writing: it adopts the new epoch on its next read of the
   record, and keys from the start on land in the 16 buckets;
4. a key past the writer's horizon (its last read of the record plus the lead)
   is refused;
5. the reader, also opened before the append, reads every row back in order.

The lead here is 2 seconds so the walk-through takes seconds; a real table keeps
the default (120 s) or more.

Run it against the local emulator (starts it, creates the table, stops it)::

    saltedtable emulator --table live_events:cf,saltedtable -- python examples/resalt_live.py
"""

from __future__ import annotations

import datetime as dt
import os
import time
import warnings

from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, SetCell

from saltedtable import RowKeyError, SaltedTable, SaltScheme, append_epoch, epoch_field

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "live_events")
LEAD = 2.0  # seconds (the default is 120)
READER = epoch_field("ms", index=1, digits=13)

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)


def key(sensor: int, ms: int) -> bytes:
    return b"sensor%d#%013d" % (sensor, ms)


def now_ms() -> int:
    return int(time.time() * 1000)


def where(table: SaltedTable, row_key: bytes) -> str:
    """Which epoch and physical key a row key has in the table object's layout now."""
    epochs = table.layout.as_epochs()
    epoch, _, physical = epochs.locate(row_key)
    buckets = epochs.epochs[epoch].scheme.buckets  # type: ignore[union-attr]
    return f"epoch {epoch} (N={buckets}) {physical!r}"


def main() -> None:
    with BigtableDataClient(project=PROJECT) as client:
        # 1. Long-lived objects, opened before the change; they re-read the record within the lead.
        writer = SaltedTable.from_client(client, INSTANCE, TABLE, SaltScheme(4), record_refresh=1)
        reader = SaltedTable.from_client(client, INSTANCE, TABLE, SaltScheme(4), record_refresh=1)
        written = []
        for sensor in range(3):
            row_key = key(sensor, now_ms())
            writer.mutate_row(row_key, SetCell("cf", b"t", b"20.5"))
            written.append(row_key)
        print(f"1. 3 rows written with N=4, e.g. {where(writer, written[0])}")
        reader.read_rows(ReadRowsQuery(limit=1))

        # 2. Append an epoch of 16 buckets, a little more than the lead ahead.
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=LEAD + 1)
        result = append_epoch(
            client.get_table(INSTANCE, TABLE), SaltScheme(16), at, timestamp=READER, min_lead=LEAD
        )
        print(
            f"2. appended epoch 1: N=16 from {at.isoformat(timespec='seconds')} "
            f"(lead {result.appending.min_lead:g} s, {result.rows_checked} keys checked)"
        )

        # 3. The writer keeps going: before the start into N=4, from it into N=16.
        time.sleep(1.1)  # past its refresh: the next write reads the record and adopts it
        row_key = key(5, now_ms())
        writer.mutate_row(row_key, SetCell("cf", b"t", b"21.0"))
        written.append(row_key)
        print(f"3. the writer adopted {len(writer.layout.as_epochs())} epochs; before the start:")
        print(f"   {row_key!r} -> {where(writer, row_key)}")
        time.sleep(max(0.0, at.timestamp() - time.time() + 0.1))
        for sensor in range(3):
            row_key = key(sensor, now_ms())
            writer.mutate_row(row_key, SetCell("cf", b"t", b"22.0"))
            written.append(row_key)
        print(f"   from the start: {row_key!r} -> {where(writer, row_key)}")

        # 4. A scheduled key beyond the horizon is refused (write it later, when nearer).
        try:
            writer.mutate_row(key(9, now_ms() + 3_600_000), SetCell("cf", b"t", b"later"))
        except RowKeyError as exc:
            horizon = str(exc).split("horizon ", 1)[1].split(" ", 1)[0]
            print(f"4. refused a key an hour ahead: past the writer's horizon {horizon}")

        # 5. The reader, opened before the append, reads every row in key order.
        time.sleep(1.1)
        got = [row.row_key for row in reader.read_rows(ReadRowsQuery())]
        print(f"5. the reader read back {len(got)} of {len(written)} rows, in key order:")
        for row_key in got:
            print(f"   {row_key!r}  {where(reader, row_key)}")
        assert got == sorted(written), (got, written)


if __name__ == "__main__":
    main()
