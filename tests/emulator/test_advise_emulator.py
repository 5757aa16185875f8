"""``saltedtable advise --table`` against the official Bigtable emulator."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, RowMutationEntry, SetCell

from saltedtable._cli.main import main
from saltedtable.testing import INSTANCE, PROJECT, Emulator

MakeTable = Callable[..., str]
START_US = 1_700_000_000_000_000


def write_skewed_rows(table_id: str, rows: int) -> None:
    """Write tenant#epoch-ms rows, tenant007 ~40x the others, cells stamped at the key's time."""

    async def write() -> None:
        rnd = random.Random(11)
        weights = [40 if t == 7 else 1 for t in range(50)]
        entries = []
        for i in range(rows):
            tenant = rnd.choices(range(50), weights)[0]
            micros = START_US + i * 1_000_000
            entries.append(
                RowMutationEntry(
                    f"tenant{tenant:03d}#{micros // 1000}",
                    SetCell("cf", "payload", b"x" * 200, timestamp_micros=micros),
                )
            )
        client = BigtableDataClientAsync(project=PROJECT)
        async with client, client.get_table(INSTANCE, table_id) as table:
            await table.bulk_mutate_rows(entries)

    asyncio.run(write())


def test_advise_table_samples_keys_and_cell_times(
    emulator: Emulator, make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """--table reads keys and cell timestamps, spread over the table, and finds the hot tenant."""
    table_id = make_table()
    write_skewed_rows(table_id, 4_000)
    code = main(
        [
            "advise",
            "--table",
            table_id,
            "--instance",
            INSTANCE,
            "--project",
            PROJECT,
            "--sample-limit",
            "3000",
            "--tablets",
            "8",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["input"]["source"] == f"table {table_id}"
    assert report["input"]["format"] == "table"
    assert report["input"]["lines"] == 3000
    assert report["input"]["time_axis"] == "time"
    # The cell timestamps (seconds) span the ~4000 s the rows were written over.
    edges = report["input"]["window_edges"]
    assert 3000 < edges[-1] - edges[0] <= 4000
    unsalted = report["layouts"][0]
    assert unsalted["hottest"]["first_key"].startswith("tenant00")
    assert unsalted["max_mean"] > 2
    assert report["recommended"] is not None
    best = next(x for x in report["layouts"] if x["buckets"] == report["recommended"])
    assert best["meets_target"]
    assert best["interval"][1] <= 1.5 or best["verdict"] == "uniform"


def test_advise_table_text_report_with_progress(
    emulator: Emulator, make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text report names the table; --progress shows the sampling bar on stderr."""
    table_id = make_table()
    write_skewed_rows(table_id, 500)
    code = main(
        [
            "advise",
            "--table",
            table_id,
            "--instance",
            INSTANCE,
            "--project",
            PROJECT,
            "--tablets",
            "4",
            "--progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"sample: table {table_id}: 500 lines")
    assert "time from the cell timestamps" in out
    assert f"sampling {table_id}" in err


def test_advise_missing_table_exits_1(
    emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table that does not exist: exit 1, one line on stderr, no traceback."""
    code = main(
        ["advise", "--table", "no-such-table", "--instance", INSTANCE, "--project", PROJECT]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert "cannot sample table 'no-such-table'" in err
    assert "not found" in err


def test_advise_empty_table_exits_1(
    emulator: Emulator, make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table without rows is a data problem: exit 1."""
    table_id = make_table()
    code = main(["advise", "--table", table_id, "--instance", INSTANCE, "--project", PROJECT])
    _, err = capsys.readouterr()
    assert code == 1
    assert "has no rows" in err
