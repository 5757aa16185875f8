"""`saltedtable read`, `lookup`, `count` and `key --table` on the emulator, through main([...]).

Three layouts, each made by `saltedtable create` (which stores the record) and
filled through the salted table: a plain salted table, a marker table, and a
cutoff table with keys before and after the cutoff. The commands must answer
on logical keys what the table's own reads answer, and never show or count the
record row.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, RowMutationEntry, SetCell

from saltedtable import SCHEME_ROW_KEY, SaltedTable, named_key_part
from saltedtable._cli.row_output import row_text, text_bytes
from saltedtable._guard.from_record import layout_of_record
from saltedtable._guard.record import record_of_row
from saltedtable.testing import INSTANCE, PROJECT, Emulator, create_table, delete_table
from tests.cli_helpers import assert_one_line_error, run

WHERE = ("--project", PROJECT, "--instance", INSTANCE)
MAY_1 = 1_714_564_800_000_000
BINARY = b'\x00\x01\xff\n"caf\xc3\xa9'
CUTOFF = ("--cutoff", "2024-01-01T00:00:00+00:00", "--time", "epoch:ms:1:13")
#: Sensor keys: a time in milliseconds after '#'; the first two before the cutoff.
SENSOR_KEYS = [
    "sensor0#1600000000000",
    "sensor1#1700000000000",
    "sensor1#1704067200000",
    "sensor1#1704067300000",
    "sensor2#1704067200000",
    "sensor2#1710000000000",
]


@pytest.fixture
def table_id(emulator: Emulator) -> Iterator[str]:
    name = f"r-{uuid.uuid4().hex[:12]}"
    yield name
    delete_table(emulator.address, name, missing_ok=True)


@pytest.fixture
def client(emulator: Emulator) -> Iterator[BigtableDataClient]:
    with BigtableDataClient(project=PROJECT) as made:
        yield made


def salted(client: BigtableDataClient, table_id: str) -> SaltedTable:
    """The table, opened with the layout its record describes (as the commands do)."""
    raw = client.get_table(INSTANCE, table_id)
    layout = layout_of_record(record_of_row(raw.read_row(SCHEME_ROW_KEY)))  # type: ignore[arg-type]
    return SaltedTable(raw, layout.scheme, cutoff=layout.cutoff)


def fill(client: BigtableDataClient, table_id: str, keys: list[str]) -> None:
    """Two cells a row: cf:q the key's text, cf:bin bytes that are not UTF-8."""
    salted(client, table_id).bulk_mutate_rows(
        [
            RowMutationEntry(
                key,
                [
                    SetCell("cf", b"q", f"v-{key}".encode(), timestamp_micros=MAY_1),
                    SetCell(
                        "cf", b"bin", BINARY, timestamp_micros=MAY_1 + 1000
                    ),  # Bigtable: milliseconds
                ],
            )
            for key in keys
        ]
    )


def create(capsys: pytest.CaptureFixture[str], table_id: str, *options: str) -> None:
    code, _, err = run(capsys, "create", table_id, *WHERE, *options)
    assert (code, err) == (0, "")


def shown_keys(text: str) -> list[str]:
    """The row keys of cbt-style output: each line after a line of dashes."""
    lines = text.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line == "-" * 40]


# -- a salted table ----------------------------------------------------------------------------

USERS = [f"user{i:03d}" for i in range(40)]


@pytest.fixture
def users(
    capsys: pytest.CaptureFixture[str], client: BigtableDataClient, table_id: str
) -> SaltedTable:
    create(capsys, table_id, "-n", "4")
    fill(client, table_id, USERS)
    return salted(client, table_id)


def test_read_prints_what_the_table_reads_as_cbt_does(
    capsys: pytest.CaptureFixture[str], users: SaltedTable, table_id: str
) -> None:
    """Every row in logical key order, each as row_text prints the table's own row."""
    code, out, err = run(capsys, "read", table_id, *WHERE)
    assert (code, err) == (0, "")
    assert out == "".join(row_text(row) for row in users.read_rows(ReadRowsQuery()))
    assert shown_keys(out) == USERS
    assert f'    "v-{USERS[0]}"\n' in out
    assert '    "\\x00\\x01\\xff\\n\\"café"\n' in out


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--prefix", "user01"), USERS[10:20]),
        (("--start", "user005", "--end", "user008"), USERS[5:8]),
        (("--start", "user037",), USERS[37:]),
        (("--end", "user002"), USERS[:2]),
        (("--count", "3"), USERS[:3]),
        (("--prefix", "user02", "--count", "2"), USERS[20:22]),
        (("--prefix", "nobody"), []),
    ],
)  # fmt: skip
def test_read_ranges_and_count_are_logical(
    capsys: pytest.CaptureFixture[str],
    users: SaltedTable,
    table_id: str,
    options: tuple[str, ...],
    expected: list[str],
) -> None:
    """--prefix, --start/--end and --count select logical keys, in logical order."""
    code, out, _ = run(capsys, "read", table_id, *WHERE, *options)
    assert code == 0
    assert shown_keys(out) == expected


def test_read_json_round_trips_keys_and_bytes(
    capsys: pytest.CaptureFixture[str], users: SaltedTable, table_id: str
) -> None:
    """--json: one object per row; every key and value decodes back to the bytes written."""
    code, out, _ = run(capsys, "read", table_id, *WHERE, "--json", "--prefix", "user00")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [text_bytes(row["key"]) for row in rows] == [k.encode() for k in USERS[:10]]
    for row in rows:
        cells = {(c["family"], text_bytes(c["qualifier"])): c for c in row["cells"]}
        assert text_bytes(cells["cf", b"bin"]["value"]) == BINARY
        assert text_bytes(cells["cf", b"q"]["value"]) == b"v-" + text_bytes(row["key"])
        assert cells["cf", b"q"]["timestamp_micros"] == MAY_1


def test_read_sends_the_app_profile(
    capsys: pytest.CaptureFixture[str], users: SaltedTable, table_id: str
) -> None:
    """--app-profile goes with the requests (the emulator accepts any profile)."""
    code, out, _ = run(capsys, "read", table_id, *WHERE, "--app-profile", "batch", "--count", "2")
    assert (code, shown_keys(out)) == (0, USERS[:2])


def test_read_hex_takes_and_shows_hex_keys(
    capsys: pytest.CaptureFixture[str], users: SaltedTable, table_id: str
) -> None:
    """--hex: the prefix is given as hex and the keys are shown as hex."""
    code, out, _ = run(capsys, "read", table_id, *WHERE, "--hex", "--prefix", b"user03".hex())
    assert code == 0
    assert shown_keys(out) == [key.encode().hex() for key in USERS[30:40]]


def test_count_counts_logical_rows_not_the_record(
    capsys: pytest.CaptureFixture[str],
    users: SaltedTable,
    table_id: str,
    client: BigtableDataClient,
) -> None:
    """count: every row but the record row (which the table does hold), or a range's."""
    raw = client.get_table(INSTANCE, table_id)
    assert raw.read_row(SCHEME_ROW_KEY) is not None
    assert len(raw.read_rows(ReadRowsQuery())) == len(USERS) + 1
    assert run(capsys, "count", table_id, *WHERE) == (0, f"{len(USERS)}\n", "")
    assert run(capsys, "count", table_id, *WHERE, "--prefix", "user01") == (0, "10\n", "")
    code, out, _ = run(capsys, "count", table_id, *WHERE, "--json", "--start", "user035")
    assert (code, json.loads(out)) == (0, {"count": 5})


def test_lookup_reads_one_logical_key_or_exits_1(
    capsys: pytest.CaptureFixture[str], users: SaltedTable, table_id: str
) -> None:
    """lookup prints the row as read does; a missing key is one line and exit 1."""
    code, out, _ = run(capsys, "lookup", table_id, "user007", *WHERE)
    assert code == 0
    assert out == row_text(users.read_row("user007"))  # type: ignore[arg-type]
    code, out, _ = run(capsys, "lookup", table_id, "user007", *WHERE, "--json")
    assert (code, json.loads(out)["key"]) == (0, "user007")
    code, out, err = run(capsys, "lookup", table_id, "user999", *WHERE)
    assert (code, out) == (1, "")
    assert_one_line_error(err, "no row user999", repr(table_id))


def test_key_table_takes_the_scheme_from_the_record(
    capsys: pytest.CaptureFixture[str], users: SaltedTable, table_id: str
) -> None:
    """key --table prints what key -n 4 prints, without N typed by hand."""
    code, out, _ = run(capsys, "key", "--table", table_id, *WHERE, "user001", "user002")
    assert (code, out) == (0, run(capsys, "key", "-n", "4", "user001", "user002")[1])
    physical = out.splitlines()[0].split("\t")[2]
    code, out, _ = run(capsys, "key", "--table", table_id, *WHERE, "--unsalt", physical)
    assert (code, out.split("\t")[2]) == (0, "user001\n")


# -- a marker table and a cutoff table -------------------------------------------------------


def test_a_marker_table_reads_and_keys_with_its_marker(
    capsys: pytest.CaptureFixture[str], client: BigtableDataClient, table_id: str
) -> None:
    """The marker comes from the record: key --table shows it, read and count find the rows."""
    create(capsys, table_id, "-n", "8", "--marker", "~", "--hash", "farmhash")
    fill(client, table_id, USERS[:12])
    code, out, _ = run(capsys, "key", "--table", table_id, *WHERE, "user001")
    expected = run(capsys, "key", "-n", "8", "--marker", "~", "--hash", "farmhash", "user001")[1]
    assert (code, out) == (0, expected)
    assert out.split("\t")[2].startswith("~")
    code, out, _ = run(capsys, "read", table_id, *WHERE)
    assert (code, shown_keys(out)) == (0, USERS[:12])
    assert run(capsys, "count", table_id, *WHERE) == (0, "12\n", "")


def test_a_cutoff_table_reads_keys_before_and_after_the_cutoff(
    capsys: pytest.CaptureFixture[str], client: BigtableDataClient, table_id: str
) -> None:
    """Legacy rows stay unsalted, later rows are salted; the commands show one logical table."""
    create(capsys, table_id, "-n", "4", "--marker", "~", "--key-part", "fields:1", *CUTOFF)
    fill(client, table_id, SENSOR_KEYS)
    raw_keys = [row.row_key for row in client.get_table(INSTANCE, table_id).read_rows({})]
    assert b"sensor1#1700000000000" in raw_keys  # a legacy row, where it was written
    assert b"sensor2#1710000000000" not in raw_keys  # salted: under a ~N- prefix
    code, out, _ = run(capsys, "read", table_id, *WHERE)
    assert (code, shown_keys(out)) == (0, SENSOR_KEYS)
    code, out, _ = run(capsys, "read", table_id, *WHERE, "--prefix", "sensor1#")
    assert shown_keys(out) == SENSOR_KEYS[1:4]
    code, out, _ = run(
        capsys, "read", table_id, *WHERE, "--start", "sensor1#1700000000000",
        "--end", "sensor2#1704067200001",
    )  # fmt: skip
    assert shown_keys(out) == SENSOR_KEYS[1:5]
    assert run(capsys, "count", table_id, *WHERE) == (0, f"{len(SENSOR_KEYS)}\n", "")
    for key in (SENSOR_KEYS[1], SENSOR_KEYS[5]):
        code, out, _ = run(capsys, "lookup", table_id, key, *WHERE)
        assert (code, shown_keys(out)) == (0, [key])
    code, out, _ = run(capsys, "key", "--table", table_id, *WHERE, *SENSOR_KEYS[1:3])
    assert code == 0
    old, new = out.splitlines()
    assert old == f"{SENSOR_KEYS[1]}\tlegacy\t{SENSOR_KEYS[1]}"
    assert new.startswith(f"{SENSOR_KEYS[2]}\tbucket ")
    assert new.split("\t")[2].startswith("~")
    options = ("-n", "4", "--marker", "~", "--key-part", "fields:1", *CUTOFF)
    assert out == run(capsys, "key", *options, *SENSOR_KEYS[1:3])[1]


# -- tables the commands refuse ------------------------------------------------------------------


def test_a_table_without_a_record_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], emulator: Emulator, table_id: str
) -> None:
    """No record, no scheme: exit 1 and the command that stores one."""
    create_table(emulator.address, table_id, ["cf"])
    for command in (("read", table_id), ("count", table_id), ("lookup", table_id, "k")):
        code, out, err = run(capsys, *command, *WHERE)
        assert (code, out) == (1, "")
        assert_one_line_error(err, "has no layout record", f"saltedtable guard {table_id}")


def test_an_unknown_table_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], emulator: Emulator
) -> None:
    """A table that does not exist: exit 1, one line naming it."""
    code, _, err = run(capsys, "read", "no-such-table", *WHERE)
    assert code == 1
    assert_one_line_error(err, "not found", "'no-such-table'")


def test_a_custom_key_part_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
    emulator: Emulator,
    client: BigtableDataClient,
    table_id: str,
) -> None:
    """A record naming a custom key part: only Python can read the table; exit 1 saying so."""
    from saltedtable import SaltScheme

    create_table(emulator.address, table_id, ["cf"])
    scheme = SaltScheme(4, key_part=named_key_part("tenant/v1", lambda key: key[:4]))
    SaltedTable(client.get_table(INSTANCE, table_id), scheme).guard_scheme(family="cf")
    code, _, err = run(capsys, "read", table_id, *WHERE)
    assert code == 1
    assert_one_line_error(err, "'name:tenant/v1'", "from Python")
