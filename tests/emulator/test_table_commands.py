"""`saltedtable create`, `guard` and `inspect` on the emulator, through main([...])."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, RowMutationEntry, SetCell

from saltedtable import SCHEME_ROW_KEY, SaltedTableAsync, SaltScheme
from saltedtable._guard.families import RECORD_FAMILY
from saltedtable.testing import INSTANCE, PROJECT, Emulator, create_table, delete_table, list_tables
from tests.cli_helpers import assert_one_line_error, run

pytestmark = pytest.mark.emulator
WHERE = ("--project", PROJECT, "--instance", INSTANCE)


@pytest.fixture
def table_id(emulator: Emulator) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:12]}"
    yield name
    delete_table(emulator.address, name, missing_ok=True)


async def fill(client: BigtableDataClientAsync, table_id: str, scheme: SaltScheme, n: int) -> None:
    table = SaltedTableAsync.from_client(client, INSTANCE, table_id, scheme)
    entries = [RowMutationEntry(f"user{i:05d}", SetCell("cf", b"q", b"v" * 100)) for i in range(n)]
    await table.bulk_mutate_rows(entries)


async def test_create_then_inspect_shows_the_record_families_buckets_and_no_problem(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    bigtable_data_client: BigtableDataClientAsync,
) -> None:
    code, out, err = run(
        capsys, "create", table_id, *WHERE, "-n", "4", "--family", "cf", "--family",
        "ts:max_age=7d|max_versions=2",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert f"created {table_id}: 4 split points" in out
    await fill(bigtable_data_client, table_id, SaltScheme(4), 400)
    code, out, err = run(capsys, "inspect", table_id, *WHERE, "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["record"]["buckets"] == 4
    assert report["record_family"] == RECORD_FAMILY
    families = {f["name"]: f["gc_rule"] for f in report["families"]}
    assert families == {"cf": "none", "ts": "(max_age=7d or max_versions=2)", RECORD_FAMILY: "none"}
    assert sorted(report["bucket_bytes"]) == ["0", "1", "2", "3"]
    assert sum(report["bucket_bytes"].values()) > 0
    assert report["skew"] >= 1.0
    assert report["stray_keys"] == []
    assert report["problems"] == []
    code, out, _ = run(capsys, "inspect", table_id, *WHERE)
    assert code == 0
    assert "no problems found" in out
    assert f"record: in family {RECORD_FAMILY!r}" in out


def test_create_refuses_an_existing_table_in_one_line(
    emulator: Emulator, table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "create", table_id, *WHERE, "-n", "4")[0] == 0
    code, _, err = run(capsys, "create", table_id, *WHERE, "-n", "4")
    assert code == 1
    assert_one_line_error(err, "already exists", "--if-not-exists")
    code, out, _ = run(capsys, "create", table_id, *WHERE, "-n", "4", "--if-not-exists")
    assert code == 0
    assert "agrees" in out
    code, _, err = run(capsys, "create", table_id, *WHERE, "-n", "8", "--if-not-exists")
    assert code == 1
    assert_one_line_error(err, "buckets: stored 4, now 8")


def test_create_if_not_exists_names_the_fix_for_a_table_without_record_or_family(
    emulator: Emulator, table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create_table(emulator.address, table_id, ["cf"])
    code, _, err = run(capsys, "create", table_id, *WHERE, "-n", "4", "--if-not-exists")
    assert code == 1
    assert_one_line_error(err, table_id, f"saltedtable guard {table_id} ", "--add-family")
    code, _, _ = run(capsys, "guard", table_id, *WHERE, "-n", "4", "--add-family")
    assert code == 0
    code, out, _ = run(capsys, "create", table_id, *WHERE, "-n", "4", "--if-not-exists")
    assert code == 0
    assert f"family {RECORD_FAMILY!r}" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--family", "bad name"), "not a valid Bigtable family id"),
        (("--family", "cf:max_age=soon"), "max_age needs"),
        (("--family", f"{RECORD_FAMILY}:max_age=1d"), "must keep its latest version"),
        (("--family", "cf:agg=median"), "aggregate 'median'"),
        (("--hash", "md5"), "unknown hash"),
        (("--hex", "--split", "zz"), "--split 'zz' is not hex"),
        (("--split", ""), "--split: an empty key"),
        (("--family", "cf:max_age=99999999999999d"), "from 1s to 315576000000s"),
        (("--family", "cf:max_versions=2147483648"), "from 1 to 2147483647"),
    ],
)
def test_create_usage_errors_exit_2_and_create_nothing(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    needle: str,
) -> None:
    code, _, err = run(capsys, "create", table_id, *WHERE, "-n", "4", *args)
    assert code == 2
    assert_one_line_error(err, needle)
    assert table_id not in list_tables(emulator.address)


def test_create_hex_split_keys_reach_the_admin_api_decoded(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--hex --split 7a7a splits at b"zz", not at the text "7a7a" (the request is recorded)."""
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient

    requests: list[object] = []
    original = BigtableTableAdminClient.create_table

    def recording(self: BigtableTableAdminClient, *args: object, **kwargs: object) -> object:
        requests.append(kwargs["request"])
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(BigtableTableAdminClient, "create_table", recording)
    code, out, err = run(capsys, "create", table_id, *WHERE, "-n", "4", "--cutoff",
                         "2024-01-01T00:00:00+00:00", "--hex", "--split", "7a7a",
                         "--split", "00ff")  # fmt: skip
    assert (code, err) == (0, "")
    assert f"created {table_id}: 7 split points" in out
    (request,) = requests
    keys = [split.key for split in request.initial_splits]  # type: ignore[attr-defined]
    assert keys == sorted([*SaltScheme(4).prefixes, b"3.", b"zz", b"\x00\xff"])
    assert table_id in list_tables(emulator.address)


def test_create_takes_the_largest_gc_values(
    emulator: Emulator, table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """max_age up to 315,576,000,000s (a Duration's limit) and max_versions up to 2**31 - 1."""
    families = ("--family", "cf:max_age=315576000000s", "--family", "v:max_versions=2147483647")
    code, _, err = run(capsys, "create", table_id, *WHERE, "-n", "4", *families)
    assert (code, err) == (0, "")
    code, out, _ = run(capsys, "inspect", table_id, *WHERE, "--json")
    families = {f["name"]: f["gc_rule"] for f in json.loads(out)["families"]}
    assert families["cf"] == "max_age=3652500d"
    assert families["v"] == "max_versions=2147483647"


def test_inspect_of_an_unknown_table_names_it(
    emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "inspect", "no-such-table", *WHERE)
    assert code == 1
    assert_one_line_error(err, "not found", "'no-such-table'")


def test_inspect_without_project_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SALTEDTABLE_PROJECT", raising=False)
    code, _, err = run(capsys, "inspect", "t", "--instance", INSTANCE)
    assert code == 2
    assert_one_line_error(err, "--project")


async def test_guard_add_family_moves_a_record_out_of_a_ttl_family_and_inspect_agrees(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    bigtable_data_client: BigtableDataClientAsync,
) -> None:
    """An old record in a max-age family: inspect says so (exit 1); guard --add-family fixes it."""
    from google.cloud.bigtable_admin_v2 import types

    from saltedtable._admin import admin_client
    from saltedtable._guard.families import parse_family
    from saltedtable._guard.record import encode_layout

    with admin_client(emulator_host=emulator.address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent=f"projects/{PROJECT}/instances/{INSTANCE}",
                table_id=table_id,
                table=types.Table(column_families=dict([parse_family("cf:max_age=30d")])),
            )
        )
    from saltedtable import describe_layout

    raw = bigtable_data_client.get_table(INSTANCE, table_id)
    await raw.mutate_row(
        SCHEME_ROW_KEY, SetCell("cf", b"scheme", encode_layout(describe_layout(SaltScheme(4))))
    )
    await fill(bigtable_data_client, table_id, SaltScheme(4), 50)
    code, out, _ = run(capsys, "inspect", table_id, *WHERE)
    assert code == 1
    assert (
        "PROBLEM: the layout record is at risk: its column family 'cf' has the GC rule "
        "max_age=30d" in out
    )
    assert "--add-family" in out
    # Checking it with guard (or create --if-not-exists) says the same, and exits 1.
    code, out, _ = run(capsys, "guard", table_id, *WHERE, "-n", "4")
    assert code == 1
    assert "the layout record is at risk: its column family 'cf'" in out
    code, out, _ = run(capsys, "create", table_id, *WHERE, "-n", "4", "--if-not-exists")
    assert code == 1
    assert "at risk" in out
    assert "--add-family" in out
    code, out, err = run(capsys, "guard", table_id, *WHERE, "-n", "4", "--add-family")
    assert (code, err) == (0, "")
    assert f"the layout record agrees; moved it to family {RECORD_FAMILY!r}" in out
    code, out, _ = run(capsys, "inspect", table_id, *WHERE)
    assert code == 0, out
    code, _, err = run(capsys, "guard", table_id, *WHERE, "-n", "8")
    assert code == 1
    assert_one_line_error(err, "buckets: stored 4, now 8")
    assert f"the layout record of {table_id!r} differs" in err
    code, _, err = run(capsys, "inspect", "bad/id", *WHERE)
    assert code == 2  # a usage error, found before any request
    assert "not a valid Bigtable table id" in err


def test_guard_reports_a_table_without_record_and_refuses_a_ttl_family(
    emulator: Emulator, table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create_table(emulator.address, table_id, ["cf"])
    code, out, _ = run(capsys, "guard", table_id, *WHERE, "-n", "4")
    assert code == 1
    assert "no layout record" in out
    code, out, _ = run(capsys, "inspect", table_id, *WHERE)
    assert code == 1
    assert "PROBLEM: no layout record" in out
    code, _, err = run(capsys, "guard", table_id, *WHERE, "-n", "4", "--family", "nope")
    assert code == 1
    assert_one_line_error(err, "no column family 'nope'")
    code, out, _ = run(capsys, "guard", table_id, *WHERE, "-n", "4", "--family", "cf")
    assert code == 0
    assert "in family 'cf'" in out


async def test_guard_add_family_says_what_it_did_when_the_record_cannot_be_stored(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    bigtable_data_client: BigtableDataClientAsync,
) -> None:
    """A record that differs refuses --add-family before the family is added."""
    create_table(emulator.address, table_id, ["cf"])
    await SaltedTableAsync.open(
        bigtable_data_client.get_table(INSTANCE, table_id), SaltScheme(8), family="cf"
    )
    code, out, err = run(capsys, "guard", table_id, *WHERE, "-n", "4", "--add-family")
    assert (code, out) == (1, "")
    assert_one_line_error(err, "buckets: stored 8, now 4")
    assert RECORD_FAMILY not in schema_of(emulator.address, table_id)


def test_create_in_an_unknown_instance_names_the_instance_and_project(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The emulator creates tables in any instance: Cloud Bigtable's NotFound is injected."""
    from google.api_core.exceptions import NotFound
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient

    def no_instance(*args: object, **kwargs: object) -> None:
        raise NotFound("Instance projects/test-project/instances/nope not found.")

    monkeypatch.setattr(BigtableTableAdminClient, "create_table", no_instance)
    code, _, err = run(capsys, "create", table_id, "--project", PROJECT, "--instance", "nope",
                       "-n", "4")  # fmt: skip
    assert code == 1
    assert_one_line_error(err, "not found: instance 'nope'", f"of project {PROJECT!r}")
    assert "table" not in err.split("error: ", 1)[1].split("(")[0]


# -- nothing stores a record it has not checked against the rows -------------------------------


async def written_without_record(
    client: BigtableDataClientAsync, table_id: str, scheme: SaltScheme, n: int = 200
) -> None:
    """Rows salted by ``scheme`` as another tool writes them: no layout record."""
    table = SaltedTableAsync.from_client(client, INSTANCE, table_id, scheme, guard=False)
    entries = [RowMutationEntry(f"user{i:05d}", SetCell("cf", b"q", b"v")) for i in range(n)]
    await table.bulk_mutate_rows(entries)


async def stored_record(client: BigtableDataClientAsync, table_id: str) -> object:
    from saltedtable._guard.record import record_of_row

    return record_of_row(await client.get_table(INSTANCE, table_id).read_row(SCHEME_ROW_KEY))


def schema_of(address: str, table_id: str) -> dict[str, object]:
    """The column families of ``table_id`` in the suite's instance."""
    from saltedtable._admin import admin_client, read_schema, table_path

    with admin_client(emulator_host=address) as admin:
        return dict(read_schema(admin, table_path(PROJECT, INSTANCE, table_id)))


async def test_guard_add_family_refuses_to_store_a_layout_the_rows_do_not_fit(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    bigtable_data_client: BigtableDataClientAsync,
) -> None:
    """N=4 rows, no record: guard -n 8 --add-family exits 1 storing nothing; -n 4 stores."""
    from saltedtable import describe_layout

    create_table(emulator.address, table_id, ["cf"])
    await written_without_record(bigtable_data_client, table_id, SaltScheme(4))
    code, out, err = run(capsys, "guard", table_id, *WHERE, "-n", "8", "--add-family")
    assert code == 1
    assert "agrees" not in out
    assert "added the column family" not in out
    assert_one_line_error(err, "was not stored, and no family was added", "do not fit the layout")
    assert await stored_record(bigtable_data_client, table_id) is None
    assert RECORD_FAMILY not in schema_of(emulator.address, table_id)  # checked before changing
    code, _, err = run(capsys, "guard", table_id, *WHERE, "-n", "8", "--family", "cf")
    assert code == 1
    assert_one_line_error(err, "was not stored", "do not fit the layout")
    assert await stored_record(bigtable_data_client, table_id) is None
    code, out, err = run(capsys, "guard", table_id, *WHERE, "-n", "4", "--add-family")
    assert (code, err) == (0, "")
    assert f"stored the layout record in family {RECORD_FAMILY!r} (there was none; " in out
    assert "sampled rows fit it)" in out
    assert "agrees" not in out
    assert await stored_record(bigtable_data_client, table_id) == describe_layout(SaltScheme(4))
    code, out, err = run(capsys, "guard", table_id, *WHERE, "-n", "4")
    assert (code, err) == (0, "")
    assert f"the layout record agrees, in family {RECORD_FAMILY!r}" in out
    # The correct reader still opens.
    await SaltedTableAsync.open(bigtable_data_client.get_table(INSTANCE, table_id), SaltScheme(4))


async def test_create_if_not_exists_refuses_to_store_a_layout_the_rows_do_not_fit(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    bigtable_data_client: BigtableDataClientAsync,
) -> None:
    """create --if-not-exists over N=4 rows: -n 8 exits 1 storing nothing; -n 4 says stored."""
    create_table(emulator.address, table_id, ["cf", RECORD_FAMILY])
    await written_without_record(bigtable_data_client, table_id, SaltScheme(4))
    code, out, err = run(capsys, "create", table_id, *WHERE, "-n", "8", "--if-not-exists")
    assert code == 1
    assert "agrees" not in out
    assert_one_line_error(err, "was not stored", "do not fit the layout")
    assert await stored_record(bigtable_data_client, table_id) is None
    code, out, err = run(capsys, "create", table_id, *WHERE, "-n", "4", "--if-not-exists")
    assert (code, err) == (0, "")
    assert f"{table_id} exists; stored the layout record in family {RECORD_FAMILY!r}" in out
    code, out, _ = run(capsys, "create", table_id, *WHERE, "-n", "4", "--if-not-exists")
    assert code == 0
    assert f"{table_id} exists; the layout record agrees, in family {RECORD_FAMILY!r}" in out


def test_guard_stores_a_record_on_an_empty_table_saying_it_holds_no_rows(
    emulator: Emulator, table_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty table gets its record: "stored", with nothing sampled."""
    create_table(emulator.address, table_id, ["cf"])
    code, out, err = run(capsys, "guard", table_id, *WHERE, "-n", "8", "--add-family")
    assert (code, err) == (0, "")
    assert "stored the layout record" in out
    assert "the table holds no rows" in out


async def test_guard_override_replaces_the_record_only_when_the_rows_fit(
    emulator: Emulator,
    table_id: str,
    capsys: pytest.CaptureFixture[str],
    bigtable_data_client: BigtableDataClientAsync,
) -> None:
    """--override before the rewrite: exit 1, the record stays; after it: replaced."""
    from google.cloud.bigtable.data.mutations import DeleteAllFromRow

    from saltedtable import describe_layout

    assert run(capsys, "create", table_id, *WHERE, "-n", "4")[0] == 0
    await fill(bigtable_data_client, table_id, SaltScheme(4), 200)
    code, _, err = run(capsys, "guard", table_id, *WHERE, "-n", "8")
    assert code == 1
    assert_one_line_error(err, "buckets: stored 4, now 8")
    code, out, err = run(capsys, "guard", table_id, *WHERE, "-n", "8", "--override")
    assert code == 1
    assert_one_line_error(err, "was not replaced", "do not fit the layout")
    assert await stored_record(bigtable_data_client, table_id) == describe_layout(SaltScheme(4))
    # The deliberate rewrite, then the override.
    raw = bigtable_data_client.get_table(INSTANCE, table_id)
    await raw.bulk_mutate_rows(
        [
            RowMutationEntry(SaltScheme(4).salt_key(f"user{i:05d}"), DeleteAllFromRow())
            for i in range(200)
        ]
    )
    await written_without_record(bigtable_data_client, table_id, SaltScheme(8))
    code, out, _ = run(capsys, "guard", table_id, *WHERE, "-n", "8", "--override")
    assert code == 0
    assert f"replaced the layout record, in family {RECORD_FAMILY!r} (200 sampled rows" in out
    assert await stored_record(bigtable_data_client, table_id) == describe_layout(SaltScheme(8))
    code, _, err = run(capsys, "guard", table_id, *WHERE, "-n", "4")
    assert code == 1
    assert_one_line_error(err, "buckets: stored 8, now 4")
