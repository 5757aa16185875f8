"""Every scheme option on key, explain and advise; read, lookup and count's arguments.

Nothing here reaches Bigtable: the usage errors of read, lookup, count and
``key --table`` are found before any request (BIGTABLE_EMULATOR_HOST points at a
closed local port, so a request sent by mistake fails the test).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from saltedtable import SaltScheme, fields
from saltedtable._scheme.cutoff import CutoffPolicy, epoch_field
from saltedtable._scheme.layout import Layout
from saltedtable.advise import model
from tests.cli_helpers import assert_one_line_error, run

CUTOFF = ("--cutoff", "2024-01-01T00:00:00+00:00", "--time", "epoch:ms:1:13")
SENSOR = ("-n", "4", "--marker", "~", "--key-part", "fields:1", *CUTOFF)
OLD, NEW = "sensor1#1700000000000", "sensor1#1704067200000"


@pytest.fixture(autouse=True)
def _nothing_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", "127.0.0.1:9")
    monkeypatch.setenv("SALTEDTABLE_PROJECT", "p")
    monkeypatch.setenv("SALTEDTABLE_INSTANCE", "i")


# -- key --------------------------------------------------------------------------------------


def test_key_prints_a_pre_cutoff_key_as_legacy_and_a_later_one_salted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With --cutoff, a key before it stays where it is; one after gets the marker and bucket."""
    layout = Layout(
        SaltScheme(4, key_part=fields(1), marker=b"~"),
        CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field("ms", b"#", 1, 13)),
    )
    bucket, physical = layout.locate(NEW.encode())
    code, out, err = run(capsys, "key", *SENSOR, OLD, NEW)
    assert (code, err) == (0, "")
    assert out == f"{OLD}\tlegacy\t{OLD}\n{NEW}\tbucket {bucket}\t{physical.decode()}\n"
    code, out, _ = run(capsys, "key", *SENSOR, "--unsalt", OLD, physical.decode())
    assert (code, out) == (
        0,
        f"{OLD}\tlegacy\t{OLD}\n{physical.decode()}\tbucket {bucket}\t{NEW}\n",
    )


def test_key_takes_the_marker(capsys: pytest.CaptureFixture[str]) -> None:
    """--marker is written before the prefix, and --unsalt reads it back."""
    code, out, _ = run(capsys, "key", "-n", "16", "--marker", "~", "user123")
    assert (code, out) == (0, "user123\tbucket 7\t~07-user123\n")
    code, out, _ = run(capsys, "key", "-n", "16", "--marker", "~", "--unsalt", "~07-user123")
    assert (code, out) == (0, "~07-user123\tbucket 7\tuser123\n")


def test_key_with_a_cutoff_and_an_unreadable_time_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A key whose time cannot be read (--unreadable error): the others print, exit 1."""
    code, out, err = run(capsys, "key", *SENSOR, "no-time", OLD)
    assert code == 1
    assert out == f"{OLD}\tlegacy\t{OLD}\n"
    assert "cannot read a timestamp" in err
    code, out, _ = run(capsys, "key", *SENSOR, "--unreadable", "legacy", "no-time")
    assert (code, out) == (0, "no-time\tlegacy\tno-time\n")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["key", "x"], "give -n/--buckets N"),
        (["key", "--table", "t", "-n", "4", "x"], "leave out -n/--buckets"),
        (["key", "--table", "t", "--marker", "~", "--cutoff", "2024-01-01T00:00:00+00:00", "x"],
         "leave out --marker, --cutoff"),
        (["key", "--table", "t", "--hex", "zz"], "is not hex"),
        (["key", "--table", "bad/id", "x"], "not a valid Bigtable table id"),
        (["key", "--table", "t", "--timeout", "0", "x"], "--timeout"),
        (["key", "-n", "4", "--cutoff", "2024-01-01", "x"], "no UTC offset"),
        (["key", "-n", "4", "--time", "epoch:ms", "x"], "--time needs --cutoff"),
    ],
)  # fmt: skip
def test_key_usage_errors_exit_2_before_any_request(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """No scheme, scheme options beside --table, bad hex, ids and times: exit 2, one line."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert_one_line_error(err, needle)


# -- explain and advise ---------------------------------------------------------------------


def test_explain_takes_the_marker(capsys: pytest.CaptureFixture[str]) -> None:
    """explain's sub-queries carry the marker before each prefix."""
    code, out, _ = run(capsys, "explain", "-n", "2", "--marker", "~", "--prefix", "ab")
    assert code == 0
    assert "bucket 0 prefix b'~0-': range [b'~0-ab', b'~0-ac')" in out
    assert "bucket 1 prefix b'~1-': range [b'~1-ab', b'~1-ac')" in out


def _sample(path: Path, keys: list[str]) -> Path:
    path.write_text("".join(f"{key}\n" for key in keys))
    return path


def test_advise_takes_the_marker_and_the_cutoff(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """advise accepts --marker and --cutoff with --time (a bad one is a usage error)."""
    keys = [f"sensor{i % 7}#{1_700_000_000_000 + i * 1000}" for i in range(500)]
    sample = _sample(tmp_path / "keys.csv", keys)
    code, _, err = run(capsys, "advise", str(sample), "--candidates", "4", "--marker", "~", *CUTOFF)
    assert (code, err) == (0, "")
    code, _, err = run(capsys, "advise", str(sample), "--cutoff", "soon")
    assert code == 2
    assert_one_line_error(err, "--cutoff 'soon'")


def test_the_advisor_leaves_keys_before_the_cutoff_unsalted() -> None:
    """Keys before the cutoff keep their unsalted places in every layout; later ones are salted."""
    cutoff = CutoffPolicy(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), epoch_field("ms", b"#", 1, 13))
    old = [model.Access(f"s{i % 9}#{1_700_000_000_000 + i}".encode()) for i in range(400)]
    new = [model.Access(f"s{i % 9}#{1_704_067_200_000 + i}".encode()) for i in range(400)]

    def simulate(accesses: list[model.Access]) -> list[model.Simulation]:
        return model.advise(
            accesses, candidates=(4,), cutoff=cutoff, resamples=20, tablets=8, windows=1
        ).simulations

    unsalted, salted = simulate(old)
    assert salted.tablet_first_keys == unsalted.tablet_first_keys
    unsalted, salted = simulate(old + new)
    firsts = set(salted.tablet_first_keys)
    assert any(key[:1].isdigit() for key in firsts)  # salted keys: "0-s1#...", ...
    assert any(key.startswith(b"s") for key in firsts)  # legacy keys, where they were


# -- read, lookup, count ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["read", "t", "--prefix", "a", "--start", "b"], "--prefix or --start/--end"),
        (["read", "t", "--start", "b", "--end", "a"], "is not after --start"),
        (["read", "t", "--count", "0"], "--count"),
        (["read", "t", "--hex", "--prefix", "zz"], "--prefix 'zz' is not hex"),
        (["read", "bad/id"], "not a valid Bigtable table id"),
        (["read", "t", "--timeout", "-1"], "--timeout"),
        (["lookup", "t", ""], "the key is empty"),
        (["lookup", "t", "--hex", "0g"], "key '0g' is not hex"),
        (["count", "t", "--end", "b", "--prefix", "a"], "--prefix or --start/--end"),
    ],
)
def test_read_lookup_count_usage_errors_exit_2_before_any_request(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """Contradictory ranges, bad counts, hex and ids: exit 2, one line, nothing sent."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert_one_line_error(err, needle)


def test_read_without_project_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --project and no $SALTEDTABLE_PROJECT: exit 2 naming the option."""
    monkeypatch.delenv("SALTEDTABLE_PROJECT")
    code, _, err = run(capsys, "read", "t")
    assert code == 2
    assert_one_line_error(err, "--project")


@pytest.mark.parametrize("command", ["read", "lookup", "count"])
def test_help_of_the_read_commands(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """--help of read, lookup and count names the options they share."""
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    for option in ("--project", "--instance", "--app-profile", "--timeout", "--hex", "--json"):
        assert option in out


def test_a_key_without_a_readable_time_is_an_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A key the cutoff cannot place prints an ``error:`` line like every other refusal."""
    code, out, err = run(capsys, "key", *SENSOR, "sensor1#soon")
    assert (code, out) == (1, "")
    assert err.startswith("saltedtable key: error: cannot read a timestamp")
