"""The command line through ``main([...])``: output, exit codes and one-line errors."""

from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from saltedtable import _cli, _emulator_cmd
from saltedtable._cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
START_MS = 1_700_000_000_000


def skewed_csv(path: Path, lines: int = 20_000) -> Path:
    """Write one hour of tenant#epoch-ms writes, tenant007 at 40x the others, as CSV."""
    rnd = random.Random(7)
    weights = [40 if t == 7 else 1 for t in range(50)]
    rows = ["key,count,time"]
    for ms in sorted(rnd.randrange(3_600_000) for _ in range(lines)):
        tenant = rnd.choices(range(50), weights)[0]
        rows.append(f"tenant{tenant:03d}#{START_MS + ms},1,{(START_MS + ms) / 1000:.3f}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def skewed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The skewed workload as a CSV file, written once for the module."""
    return skewed_csv(tmp_path_factory.mktemp("advise") / "skewed.csv")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small skewed CSV, for tests about the command rather than the numbers."""
    return skewed_csv(tmp_path_factory.mktemp("advise") / "small.csv", lines=2_000)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run main(argv); return (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *needles: str) -> None:
    """stderr is exactly one 'saltedtable ...: error: ...' line, mentioning every needle."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("saltedtable")
    assert ": error: " in lines[0]
    for needle in needles:
        assert needle in lines[0]


def set_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Replace stdin with ``data``."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


# -- every command ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["key"], ["explain"], ["advise"], ["emulator"]])
def test_help_everywhere(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """--help works for the program and every command and exits 0."""
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0
    assert out.startswith("usage: saltedtable")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the package version and exits 0."""
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith("saltedtable ")


def test_no_command_and_unknown_option_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """No command, or an unknown option: exit 2 with one line on stderr."""
    code, _, err = run(capsys)
    assert code == 2
    assert_one_line_error(err, "COMMAND")
    code, _, err = run(capsys, "key", "-n", "4", "--frobnicate", "x")
    assert code == 2
    assert_one_line_error(err, "--frobnicate")


# -- key --------------------------------------------------------------------------------


def test_key_salts_and_unsalts(capsys: pytest.CaptureFixture[str]) -> None:
    """key prints logical, bucket and physical; --unsalt goes back."""
    code, out, _ = run(capsys, "key", "-n", "16", "user123")
    assert (code, out) == (0, "user123\tbucket 7\t07-user123\n")
    code, out, _ = run(capsys, "key", "-n", "16", "--unsalt", "07-user123")
    assert (code, out) == (0, "07-user123\tbucket 7\tuser123\n")
    code, out, _ = run(capsys, "key", "-n", "4", "--hash", "java", "user-site-1")
    assert (code, out) == (0, "user-site-1\tbucket -3\t-3-user-site-1\n")


def test_key_hex(capsys: pytest.CaptureFixture[str]) -> None:
    """--hex takes and shows keys as hex."""
    code, out, _ = run(capsys, "key", "-n", "16", "--hex", b"user123".hex())
    assert code == 0
    assert out == f"{b'user123'.hex()}\tbucket 7\t{b'07-user123'.hex()}\n"


def test_key_rejected_by_the_scheme_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A physical key with the wrong prefix: the good keys still print, exit 1."""
    code, out, err = run(capsys, "key", "-n", "16", "--unsalt", "07-user123", "03-user123")
    assert code == 1
    assert out == "07-user123\tbucket 7\tuser123\n"
    assert "03-user123" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["key", "-n", "0", "x"], "--buckets"),
        (["key", "-n", "four", "x"], "'four' is not an integer"),
        (["key", "-n", "4", "--hash", "md5", "x"], "unknown hash 'md5'"),
        (["key", "-n", "5000", "x"], "4096"),
        (["key", "-n", "4", "--hex", "zz"], "is not hex"),
        (["key", "-n", "4", "--key-part", "words:2", "x"], "unknown --key-part"),
        (["key", "-n", "4", "--key-part", "fields:x", "x"], "integer K"),
        (["key", "-n", "4", "--separator", "1", "x"], "digit"),
    ],
)
def test_key_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """Bad numbers, unknown hashes, bad hex and bad key parts exit 2 with one line."""
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, needle)


# -- explain ---------------------------------------------------------------------------


def test_explain_prefix_confined_to_one_bucket(capsys: pytest.CaptureFixture[str]) -> None:
    """A prefix inside one hashed part is one sub-query."""
    code, out, _ = run(capsys, "explain", "-n", "4", "--key-part", "fields:1", "--prefix", "user1#")
    assert code == 0
    assert out.splitlines()[0] == "1 sub-query"
    assert "bucket 1" in out


def test_explain_range_fans_out(capsys: pytest.CaptureFixture[str]) -> None:
    """A logical range with a limit becomes one sub-query per bucket."""
    code, out, _ = run(capsys, "explain", "-n", "4", "--start", "a", "--end", "b", "--limit", "10")
    assert code == 0
    assert out.splitlines()[0].startswith("4 sub-queries")
    assert "limit 10" in out


def test_explain_bad_limit_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """--limit 0 is a usage error."""
    code, _, err = run(capsys, "explain", "-n", "4", "--prefix", "a", "--limit", "0")
    assert code == 2
    assert_one_line_error(err, "--limit")


# -- emulator ----------------------------------------------------------------------------


def test_emulator_passes_every_option_and_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """emulator parses --port, every --table and the command after -- for run_emulator."""
    seen: list[dict[str, Any]] = []

    def fake_run(**options: Any) -> int:
        seen.append(options)
        return 7

    monkeypatch.setattr(_emulator_cmd, "run_emulator", fake_run)
    argv = ["emulator", "--port", "8086", "--table", "t1:cf,meta", "--table", "t2"]
    code, _, _ = run(capsys, *argv, "--", "python", "-c", "pass", "--table", "x")
    assert code == 7
    assert seen == [
        {
            "port": 8086,
            "tables": [("t1", ("cf", "meta")), ("t2", ("cf",))],
            "command": ["python", "-c", "pass", "--table", "x"],
            "project": "test-project",
            "instance": "test-instance",
            "binary": None,
            "startup_timeout": 30.0,
        }
    ]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--port", "70000"], "--port"),
        (["--port", "not-a-number"], "--port"),
        (["--table", ":cf"], "--table"),
        (["--table", "t:,"], "--table"),
        (["--startup-timeout", "0"], "--startup-timeout"),
    ],
)
def test_emulator_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """A bad port, table spec or timeout is a one-line usage error, before anything starts."""
    code, _, err = run(capsys, "emulator", *argv)
    assert code == 2
    assert_one_line_error(err, needle)


# -- advise: the report --------------------------------------------------------------------


def test_advise_skewed_workload_report(capsys: pytest.CaptureFixture[str], skewed: Path) -> None:
    """The text report names the hot tenant's range and recommends an N under the target."""
    code, out, err = run(capsys, "advise", str(skewed))
    assert code == 0
    assert err == ""  # stderr is not a terminal: no progress bar
    assert "20,000 lines" in out
    assert "hottest range, unsalted: tenant007#" in out
    assert "recommended: N = " in out
    assert "<- recommended" in out
    assert "note [monotonic-within-prefix]" in out


def test_advise_json_schema(capsys: pytest.CaptureFixture[str], skewed: Path) -> None:
    """--json prints one JSON document with the documented keys and types."""
    code, out, _ = run(capsys, "advise", "--json", "--candidates", "1,4,16,32", str(skewed))
    assert code == 0
    report = json.loads(out)
    assert report["schema"] == 1
    assert set(report) == {
        "schema",
        "input",
        "model",
        "layouts",
        "rule_of_thumb",
        "recommended",
        "floor",
        "top_keys",
        "findings",
        "plot",
    }
    assert report["input"]["lines"] == 20_000
    assert report["input"]["format"] == "csv"
    assert report["input"]["time_axis"] == "time"
    assert len(report["input"]["window_edges"]) == report["input"]["windows"] + 1
    assert report["model"] == {
        "tablets": 32,
        "target": 1.5,
        "scan_limit": 100,
        "hash": "crc32",
        "key_part": None,
    }
    assert [layout["buckets"] for layout in report["layouts"]] == [1, 4, 16, 32]
    for layout in report["layouts"]:
        assert set(layout) == {
            "buckets",
            "max_mean",
            "meets_target",
            "sub_scans",
            "naive_limit_rows",
            "paged_limit_rows",
            "hottest",
        }
        assert set(layout["hottest"]) == {
            "tablet",
            "window",
            "first_key",
            "last_key",
            "ratio",
            "share",
        }
        assert layout["meets_target"] == (layout["max_mean"] <= 1.5)
    unsalted = report["layouts"][0]
    assert unsalted["hottest"]["first_key"].startswith("tenant007#")
    best = next(x for x in report["layouts"] if x["buckets"] == report["recommended"])
    assert best["max_mean"] <= 1.5
    assert all(set(f) == {"code", "severity", "message"} for f in report["findings"])
    assert report["plot"] is None


def test_advise_plot_writes_a_png(
    capsys: pytest.CaptureFixture[str], skewed: Path, tmp_path: Path
) -> None:
    """--plot writes a small PNG heat map and the report names it."""
    png = tmp_path / "heat.png"
    code, out, _ = run(capsys, "advise", "--json", "--plot", str(png), str(skewed))
    assert code == 0
    assert json.loads(out)["plot"] == str(png)
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert 10_000 < len(data) < 200_000


def test_advise_plot_of_chosen_buckets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path
) -> None:
    """--buckets N adds N to the table and draws it; the text report names the file."""
    png = tmp_path / "n8.png"
    code, out, _ = run(
        capsys, "advise", "--candidates", "2", "-n", "8", "--plot", str(png), str(small)
    )
    assert code == 0
    assert f"heat map: {png}" in out
    assert [line.split()[0] for line in out.splitlines() if line[:5].strip().isdigit()] == [
        "1",
        "2",
        "8",
    ]
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_advise_progress_on_request(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    """--progress draws the reading and simulating bars on stderr, not stdout."""
    code, out, err = run(capsys, "advise", "--progress", "--candidates", "4", str(small))
    assert code == 0
    assert "reading " in err
    assert "simulating" in err
    assert "100%" in err
    assert "reading" not in out


def test_advise_monotonic_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Timestamp-first keys in an NDJSON log get the monotonic-keys warning."""
    rnd = random.Random(2)
    path = tmp_path / "log.ndjson"
    with path.open("w") as f:
        for i in range(5_000):
            ms = START_MS + i * 100
            f.write(json.dumps({"key": f"{ms}#u{rnd.randrange(99)}", "time": ms / 1000}) + "\n")
    code, out, _ = run(capsys, "advise", "--tablets", "8", str(path))
    assert code == 0
    assert "warning [monotonic-keys]: the key rises with time (1700000000000#u" in out


def test_advise_hot_key_warning(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key with a third of the load: hot-key warning, no recommendation, still exit 0."""
    rows = [f"user{i:04d},1" for i in range(2_000)] + ["celebrity,1000"]
    set_stdin(monkeypatch, "\n".join(rows).encode())
    code, out, _ = run(capsys, "advise", "-")
    assert code == 0
    assert "warning [hot-key]: one key, celebrity, carries 33% of the load" in out
    assert "recommended: none of the candidates" in out


def test_advise_stdin_ndjson_hex_and_iso_times(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NDJSON from stdin with hex keys and ISO 8601 times; keys come back as hex."""
    lines = [
        json.dumps({"key": f"u{i % 50}#{i}".encode().hex(), "time": f"2024-05-01T10:{i % 60:02d}Z"})
        for i in range(500)
    ]
    set_stdin(monkeypatch, "\n".join(lines).encode())
    code, out, _ = run(capsys, "advise", "--hex", "--json", "--tablets", "4", "-")
    assert code == 0
    report = json.loads(out)
    assert report["input"]["format"] == "ndjson"
    assert report["input"]["time_axis"] == "time"
    assert report["input"]["keys_as"] == "hex"
    first = report["layouts"][0]["hottest"]["first_key"]
    assert bytes.fromhex(first).startswith(b"u")


def test_advise_csv_header_may_reorder_columns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A header names the columns in any order; blank lines are skipped."""
    path = tmp_path / "log.csv"
    path.write_text("time,key,count\n\n1,a,2\n2,b,1\n3,c,5\n")
    code, out, _ = run(capsys, "advise", "--json", "--tablets", "2", str(path))
    assert code == 0
    report = json.loads(out)
    assert report["input"]["lines"] == 3
    assert report["input"]["total_load"] == 8


def test_advise_unsorted_plain_key_list_uses_sample_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A headerless one-column list in arrival order: the line order is the time axis."""
    path = tmp_path / "keys.txt"
    path.write_text("".join(f"k{(i * 7919) % 1000}\n" for i in range(3_000)))
    code, out, _ = run(capsys, "advise", "--json", "--tablets", "4", str(path))
    assert code == 0
    assert json.loads(out)["input"]["time_axis"] == "order"


# -- advise: errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["advise"], "give a sample FILE"),
        (["advise", "x.csv", "--table", "t"], "give a sample FILE"),
        (["advise", "does-not-exist.csv"], "no such file: does-not-exist.csv"),
        (["advise", "-", "--tablets", "0"], "--tablets"),
        (["advise", "-", "--tablets", "many"], "'many' is not an integer"),
        (["advise", "-", "--target", "1"], "--target: must be a number > 1"),
        (["advise", "-", "--target", "nan"], "--target"),
        (["advise", "-", "--candidates", "1,x"], "--candidates"),
        (["advise", "-", "--candidates", ","], "at least one bucket count"),
        (["advise", "-", "--candidates", "8000"], "--candidates"),
        (["advise", "-", "--windows", "0"], "--windows"),
        (["advise", "-", "--limit", "-5"], "--limit"),
        (["advise", "-", "--sample-limit", "0"], "--sample-limit"),
        (["advise", "-", "--format", "xml"], "--format"),
        (["advise", "-", "--hash", "md5"], "unknown hash 'md5'"),
        (["advise", "-", "--hash", "phoenix", "--candidates", "512"], "256"),
        (["advise", "-", "--key-part", "bogus"], "unknown --key-part"),
    ],
)
def test_advise_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    needle: str,
) -> None:
    """Bad numbers, unknown hash, missing file, missing input: exit 2, one line, no output."""
    set_stdin(monkeypatch, b"a\nb\n")
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, needle)


def test_advise_table_needs_instance_and_project(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--table without --instance/--project (and no environment defaults) exits 2."""
    monkeypatch.delenv("SALTEDTABLE_PROJECT", raising=False)
    monkeypatch.delenv("SALTEDTABLE_INSTANCE", raising=False)
    code, _, err = run(capsys, "advise", "--table", "events")
    assert code == 2
    assert_one_line_error(err, "--project and --instance")


CSV_ERRORS = [
    ("key,count\na,1\nb,x\n", "line 3: count 'x' is not a number"),
    ("a,-1\n", "line 1: count '-1' must be a finite number >= 0"),
    ("a,inf\n", "line 1: count 'inf'"),
    ("a,1,5,6\n", "line 1: 4 fields; expected key,count,time"),
    ("a,1,5\nb,1\n", "line 2: has no time, but line 1 has one"),
    ("a,1\nb,1,7\n", "line 2: has a time, but line 1 has none"),
    ("a,1,yesterday\n", "line 1: time 'yesterday' is neither a number nor an ISO 8601 date"),
    ("key,cnt\na,1\n", "line 1: header 'key,cnt'"),
    (",1\n", "line 1: empty key"),
    ("", "no keys in the input"),
    ('"a,1\n', "line 1: malformed CSV: unexpected end of data"),
    ('"a"b,1\n', "line 1: malformed CSV"),
    ("a,0\nb,0\n", "the sample carries no load"),
]


@pytest.mark.parametrize(("text", "needle"), CSV_ERRORS)
def test_advise_malformed_csv_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str
) -> None:
    """A malformed CSV row: exit 1, one line naming the file and the line."""
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, out, err = run(capsys, "advise", str(path))
    assert code == 1
    assert out == ""
    assert_one_line_error(err, str(path), needle)


NDJSON_ERRORS = [
    ('{"key": "a"}\nnot json\n', "line 2: not JSON"),
    ('{"key": "a"}\n[1, 2]\n', "line 2: expected an object"),
    ('{"key": "a"}\n{"key": 1}\n', 'line 2: "key" must be a string'),
    ('{"key": "a"}\n{"count": 1}\n', 'line 2: "key" must be a string, got None'),
    ('{"key": "a", "count": "3"}\n', 'line 1: "count" must be a number'),
    ('{"key": "a", "count": true}\n', '"count" must be a number'),
    ('{"key": "a", "time": [1]}\n', '"time" must be a number or an ISO 8601 date'),
    ('{"key": "a", "time": "soon"}\n', "time 'soon' is neither"),
    ('{"key": ""}\n', "line 1: empty key"),
]


@pytest.mark.parametrize(("text", "needle"), NDJSON_ERRORS)
def test_advise_malformed_ndjson_exits_1(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    needle: str,
) -> None:
    """A malformed NDJSON line on stdin: exit 1, one line naming stdin and the line."""
    set_stdin(monkeypatch, text.encode())
    code, out, err = run(capsys, "advise", "-")
    assert code == 1
    assert out == ""
    assert_one_line_error(err, "stdin", needle)


def test_advise_bad_hex_key_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --hex, a key that is not hex is a data error on its line."""
    set_stdin(monkeypatch, b"6162\nxyz\n")
    code, _, err = run(capsys, "advise", "--hex", "-")
    assert code == 1
    assert_one_line_error(err, "line 2: key 'xyz' is not hex")


def test_advise_unreadable_input_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An input that exists but cannot be read (a directory) is exit 1."""
    code, _, err = run(capsys, "advise", str(tmp_path))
    assert code == 1
    assert_one_line_error(err, "cannot read")


def test_advise_key_too_long_once_salted_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A key that fits Bigtable unsalted but not with a salt prefix is a data error."""
    path = tmp_path / "long.csv"
    path.write_text("k" * 4095 + "\nshort\n")
    code, _, err = run(capsys, "advise", "--candidates", "16", str(path))
    assert code == 1
    assert_one_line_error(err, "4096")


def test_advise_too_long_key_rejected_on_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A key over Bigtable's 4 KiB limit is rejected with its line number."""
    path = tmp_path / "long.csv"
    path.write_text("short\n" + "k" * 5000 + "\n")
    code, _, err = run(capsys, "advise", str(path))
    assert code == 1
    assert_one_line_error(err, "line 2: key is 5000 bytes")


def test_advise_plot_without_matplotlib_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, small: Path
) -> None:
    """--plot without matplotlib installed is a usage error with the install hint."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = run(capsys, "advise", "--plot", "x.png", str(small))
    assert code == 2
    assert_one_line_error(err, "saltedtable[plot]")


def test_advise_plot_unwritable_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path
) -> None:
    """A heat map path in a missing directory is exit 1 with one line."""
    target = tmp_path / "missing" / "heat.png"
    code, _, err = run(capsys, "advise", "--candidates", "4", "--plot", str(target), str(small))
    assert code == 1
    assert_one_line_error(err, "cannot write")


def test_keyboard_interrupt_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C prints one line and exits 130, without a traceback."""

    def interrupted(_args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli, "_cmd_key", interrupted)
    code, _, err = run(capsys, "key", "-n", "4", "x")
    assert code == 130
    assert err.strip() == "saltedtable key: interrupted"


def test_closed_stdout_exits_141_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that leaves early (`| head`) ends the command with 141 and no traceback."""

    def closed(_args: Any) -> int:
        raise BrokenPipeError

    monkeypatch.setattr(_cli, "_cmd_key", closed)
    code, _, err = run(capsys, "key", "-n", "4", "x")
    assert code == 141
    assert err == ""


# -- explain with a time cutoff ------------------------------------------------------


CUT = "2024-01-01T00:00:00+00:00"


def test_explain_shows_the_cutoff_sides(capsys: pytest.CaptureFixture[str]) -> None:
    """Point keys go to their side; a range before the cutoff reads only the legacy side."""
    code, out, _ = run(
        capsys,
        "explain",
        "-n",
        "2",
        "--cutoff",
        CUT,
        "--key",
        "u#1800000000",
        "--key",
        "u#1500000000",
    )
    assert code == 0
    assert "legacy side (unsalted keys, before the cutoff): keys b'u#1500000000'" in out
    assert "keys b'1-u#1800000000'" in out
    code, out, _ = run(
        capsys,
        "explain",
        "-n",
        "4",
        "--cutoff",
        CUT,
        "--time",
        "epoch:s:1:10",
        "--start",
        "user1#1600000000",
        "--end",
        "user1#1700000000",
    )
    assert code == 0
    assert out.startswith("1 sub-query")
    assert "legacy" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cutoff", "2024-01-01"], "no UTC offset"),
        (["--cutoff", "yesterday"], "not an ISO-8601 time"),
        (["--cutoff", CUT, "--time", "bogus"], "use epoch:UNIT"),
        (["--cutoff", CUT, "--time", "epoch:fortnight"], "unit must be one of"),
        (["--time", "epoch:s"], "--time needs --cutoff"),
    ],
)
def test_explain_cutoff_usage_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """Bad cutoff options: exit 2 and one line naming the problem."""
    code, out, err = run(capsys, "explain", "-n", "4", "--prefix", "u", *args)
    assert code == 2
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1
