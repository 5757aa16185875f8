"""``advise --table`` and ``inspect`` on salted tables of the emulator: logical keys, summaries."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import Iterator

import pytest
from google.cloud.bigtable.data import BigtableDataClient, RowMutationEntry, SetCell

from saltedtable import CutoffPolicy, SaltedTable, SaltScheme, epoch_field
from saltedtable._create import create_salted_table
from saltedtable._guard.families import RECORD_FAMILY
from saltedtable.advise.input import read_table
from saltedtable.testing import INSTANCE, PROJECT, Emulator, delete_table
from tests.cli_helpers import run

pytestmark = pytest.mark.emulator
WHERE = ("--project", PROJECT, "--instance", INSTANCE)
CUTOFF = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
BEFORE_MS, AFTER_MS = 1_700_000_000_000, 1_710_000_000_000


@pytest.fixture
def table_id(emulator: Emulator) -> Iterator[str]:
    """A table id no test uses; the table is deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    yield name
    delete_table(emulator.address, name, missing_ok=True)


def write(table_id: str, scheme: SaltScheme, keys: list[bytes], **options: object) -> None:
    """Write ``keys`` through the sync salted table, each cell stamped with the key's time."""
    with BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable.from_client(client, INSTANCE, table_id, scheme, **options)  # type: ignore[arg-type]
        table.bulk_mutate_rows(
            [
                RowMutationEntry(k, SetCell("cf", b"q", b"v", timestamp_micros=int(k[:13]) * 1000))
                for k in keys
            ]
        )


def write_raw(table_id: str, keys: list[bytes]) -> None:
    """Write ``keys`` unsalted, as the legacy rows of a table migrated with a cutoff."""
    with BigtableDataClient(project=PROJECT) as client:
        table = client.get_table(INSTANCE, table_id)
        table.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", b"v")) for k in keys])


def read_keys(table_id: str) -> set[bytes]:
    """The logical keys ``advise --table`` reads from the table (Python API)."""
    sample = asyncio.run(
        read_table(
            project=PROJECT, instance=INSTANCE, table=table_id, limit=10_000, operation_timeout=30
        )
    )
    return {a.key for a in sample.accesses}


def test_advise_table_on_a_salted_table_judges_its_logical_keys(
    table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 16-bucket table of timestamp-first keys: advise reads the record, unsalts every key,
    leaves the record row out, says which record it used, and sees the keys rise with time."""
    assert run(capsys, "create", table_id, *WHERE, "-n", "16")[0] == 0
    keys = [b"%d#user%03d" % (AFTER_MS + i * 1000, i % 997) for i in range(1_200)]
    write(table_id, SaltScheme(16), keys)
    assert read_keys(table_id) == set(keys)

    code, out, err = run(capsys, "advise", "--table", table_id, *WHERE, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["input"]["lines"] == len(keys)  # the record row is not a line
    assert report["input"]["layout_record"]["flags"] == "-n 16"
    assert report["input"]["layout_record"]["family"] == RECORD_FAMILY
    assert report["input"]["left_out"] == {"record_rows": 1, "outside_layout": 0, "hidden": 0}
    # Logical keys: the unsalted layout's hottest tablet holds keys without a salt prefix.
    assert report["layouts"][0]["hottest"]["first_key"].startswith("1710")
    assert "monotonic-keys" in {f["code"] for f in report["findings"]}
    assert report["recommended"] != 1

    code, out, err = run(capsys, "advise", "--table", table_id, *WHERE)
    assert code == 0, err
    assert out.startswith(f"sample: table {table_id}: 1,200 lines")
    assert (
        "  logical keys, unsalted with the table's layout record (family 'saltedtable': -n 16); "
        "left out: 1 record row\n"
    ) in out
    assert "no salting" not in out


def test_advise_table_on_a_cutoff_table_keeps_legacy_keys_and_unsalts_the_rest(
    table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table migrated with a cutoff: legacy rows are read as they are, salted rows unsalted,
    and the report names the record by the flags that reproduce it."""
    layout = ("-n", "8", "--cutoff", CUTOFF.isoformat(), "--time", "epoch:ms:0:13")
    assert run(capsys, "create", table_id, *WHERE, *layout)[0] == 0
    legacy = [b"%d#old%03d" % (BEFORE_MS + i * 1000, i) for i in range(300)]
    new = [b"%d#new%03d" % (AFTER_MS + i * 1000, i) for i in range(300)]
    write_raw(table_id, legacy)
    policy = CutoffPolicy(CUTOFF, epoch_field("ms", index=0, digits=13))
    write(table_id, SaltScheme(8), new, cutoff=policy)
    assert read_keys(table_id) == set(legacy + new)

    code, out, err = run(capsys, "advise", "--table", table_id, *WHERE, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["input"]["lines"] == 600
    assert report["input"]["layout_record"]["flags"] == (
        "-n 8 --cutoff 2024-01-01T00:00:00+00:00 --time epoch:ms:0:13"
    )
    assert report["input"]["left_out"]["record_rows"] == 1


def read_ms(key: bytes) -> int:
    """A custom time reader: epoch milliseconds before the first '#' (the record names it)."""
    return int(key.split(b"#")[0]) * 1000


def test_inspect_rebuilds_a_cutoff_layout_from_its_record_and_shows_its_flags(
    table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cutoff record with a ready-made time reader: inspect prints its flags, checks where
    keys belong without being given the scheme (an unsalted row after the cutoff is a problem),
    and a refusal names the flags that would agree."""
    layout = ("-n", "8", "--cutoff", CUTOFF.isoformat(), "--time", "epoch:ms:1:13")
    assert run(capsys, "create", table_id, *WHERE, *layout)[0] == 0
    write_raw(table_id, [b"user1#%d" % BEFORE_MS])
    code, out, err = run(capsys, "inspect", table_id, *WHERE)
    assert code == 0, out
    assert "  as flags: -n 8 --cutoff 2024-01-01T00:00:00+00:00 --time epoch:ms:1:13\n" in out
    assert "layout: SaltScheme(buckets=8, hash='crc32'), CutoffPolicy(" in out
    assert "give the scheme options" not in out
    code, out, err = run(capsys, "inspect", table_id, *WHERE, "--json")
    assert json.loads(out)["record_flags"] == (
        "-n 8 --cutoff 2024-01-01T00:00:00+00:00 --time epoch:ms:1:13"
    )
    write_raw(table_id, [b"user2#%d" % AFTER_MS])  # unsalted, but after the cutoff
    code, out, err = run(capsys, "inspect", table_id, *WHERE)
    assert code == 1
    assert "PROBLEM: 1 sampled key(s) do not fit the layout" in out
    code, _, err = run(capsys, "guard", table_id, *WHERE, "-n", "8", "--cutoff", CUTOFF.isoformat())
    assert code == 1
    assert err.rstrip().endswith(
        "give the stored scheme: -n 8 --cutoff 2024-01-01T00:00:00+00:00 --time epoch:ms:1:13"
    )


def test_inspect_names_a_custom_time_reader_it_cannot_rebuild(
    emulator: Emulator, table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record whose time reader is the application's own function: shown by its name, and the
    note asks for the scheme options to check where keys belong."""
    create_salted_table(
        PROJECT,
        INSTANCE,
        table_id,
        SaltScheme(4),
        cutoff=CutoffPolicy(CUTOFF, read_ms),
        emulator_host=emulator.address,
    )
    code, out, _ = run(capsys, "inspect", table_id, *WHERE)
    assert code == 0, out
    name = f"{read_ms.__module__}.read_ms"
    flags = f"-n 4 --cutoff 2024-01-01T00:00:00+00:00 (no flag gives the time reader {name})"
    assert f"  as flags: {flags}\n" in out
    assert (
        "note: the record names a custom key part or time reader: give the scheme options to "
        f"check where keys belong: {flags}"
    ) in out


def test_inspect_summarises_many_buckets_with_progress(
    table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """N = 256: the text report summarises the buckets (largest, smallest, histogram) instead of
    256 lines, --progress shows the key sampling on stderr, --all-buckets lists every bucket."""
    assert run(capsys, "create", table_id, *WHERE, "-n", "256")[0] == 0
    keys = [b"%d#user%05d" % (AFTER_MS + i, i) for i in range(3_000)]
    write(table_id, SaltScheme(256), keys)
    code, out, err = run(capsys, "inspect", table_id, *WHERE, "--progress")
    assert code == 0, out
    assert "buckets: 256, about " in out
    assert "  largest 10:\n    bucket " in out
    assert "  smallest: bucket " in out
    assert "  every bucket: --all-buckets (or --json)" in out
    assert sum(line.startswith("  bucket ") for line in out.splitlines()) == 0
    spans = [line for line in out.splitlines() if line.startswith("    ~")]
    assert sum(int(line.split(":")[1].split()[0].replace(",", "")) for line in spans) == 256
    assert "sampling keys [" in err
    assert err.rstrip().endswith("100%")
    code, out, err = run(capsys, "inspect", table_id, *WHERE, "--all-buckets")
    assert code == 0, out
    assert sum(line.startswith("  bucket ") for line in out.splitlines()) == 256
    assert "largest" not in out
    assert err == ""  # no progress unless asked (stderr is not a terminal here)
