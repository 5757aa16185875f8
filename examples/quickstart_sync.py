"""saltedtable quickstart, sync flavour: the same steps on BigtableDataClient's Table.

Run it against the local emulator with ``make demo`` (after the async quickstart), or
against Cloud Bigtable with the same environment variables as examples/quickstart.py.
Web frameworks and batch scripts that use the sync client wrap their ``Table`` the
same way: ``SaltedTable(client.get_table(...), scheme)``.
"""

from __future__ import annotations

import os
import warnings
from contextlib import closing

from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowMutationEntry, SetCell

from saltedtable import SaltedTable, SaltScheme

PROJECT = os.environ.get("SALTEDTABLE_PROJECT", "test-project")
INSTANCE = os.environ.get("SALTEDTABLE_INSTANCE", "test-instance")
TABLE = os.environ.get("SALTEDTABLE_TABLE", "quickstart")

if os.environ.get("BIGTABLE_EMULATOR_HOST"):
    # The client warns that it talks to an emulator; that is the point here.
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)


def main() -> None:
    scheme = SaltScheme(buckets=8)  # the scheme the table was written with
    with BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable.from_client(client, INSTANCE, TABLE, scheme)

        # 1. Writes take logical keys, as with the async table.
        table.bulk_mutate_rows(
            [
                RowMutationEntry(f"user4#{1700000000 + t}", SetCell("cf", "event", b"view"))
                for t in range(5)
            ]
        )

        # 2. A point read computes the salt and reads one row.
        row = table.read_row(b"user4#1700000002")
        assert row is not None
        print(f"sync point read: {row.row_key!r} -> {row.cells[0].value!r}")

        # 3. A scan fans out to every bucket (in worker threads) and merges in key order;
        #    closing() stops every sub-scan if the loop leaves early.
        print("sync scan, limit 4:")
        with closing(table.read_rows_stream(ReadRowsQuery(limit=4))) as rows:
            for row in rows:
                print(f"  {row.row_key!r}")
        table.close()


if __name__ == "__main__":
    main()
