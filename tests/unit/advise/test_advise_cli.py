"""``saltedtable advise`` through ``main([...])``: reports, plots, exit codes, one-line errors."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from saltedtable.advise import model
from tests.cli_helpers import assert_one_line_error, run, set_stdin

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


# -- advise: the report --------------------------------------------------------------------


def test_advise_skewed_workload_report(capsys: pytest.CaptureFixture[str], skewed: Path) -> None:
    """The text report shows the noise floor, corrected values with intervals and verdicts,
    names the hot tenant's range and recommends an N that meets the target."""
    code, out, err = run(capsys, "advise", str(skewed))
    assert code == 0
    assert err == ""  # stderr is not a terminal: no progress bar
    assert "20,000 lines" in out
    assert "(chosen from the data)" in out
    assert "noise: a perfectly uniform workload sampled like this shows max/mean" in out
    assert "corrected  95% interval  verdict" in out
    assert "hottest tablet, unsalted: tenant007#" in out
    assert "rule of thumb: N ~ " in out
    assert "corrected) rounded up" in out
    assert "recommended: N = " in out
    assert "<- recommended" in out
    assert "note [monotonic-within-prefix]" in out


def test_advise_seed_and_resamples(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    """--seed and --resamples reach the model and the report; the same seed repeats itself."""
    argv = ("advise", "--json", "--candidates", "4", "--resamples", "50", "--seed", "3")
    _, first, _ = run(capsys, *argv, str(small))
    _, again, _ = run(capsys, *argv, str(small))
    assert first == again
    assert json.loads(first)["model"]["resamples"] == 50
    assert json.loads(first)["model"]["seed"] == 3


def test_advise_json_schema(capsys: pytest.CaptureFixture[str], skewed: Path) -> None:
    """--json prints one JSON document with the documented keys and types (schema 3)."""
    code, out, _ = run(capsys, "advise", "--json", "--candidates", "1,4,16,32", str(skewed))
    assert code == 0
    report = json.loads(out)
    assert report["schema"] == 3
    assert set(report) == {
        "schema",
        "input",
        "model",
        "noise",
        "layouts",
        "rule_of_thumb",
        "rule_of_thumb_ratio",
        "recommended",
        "hot_key_floor",
        "top_keys",
        "findings",
        "plot",
    }
    assert set(report["input"]) == {
        "source",
        "format",
        "lines",
        "storage_lines",
        "distinct_keys",
        "total_load",
        "count_unit",
        "events",
        "time_axis",
        "windows",
        "window_edges",
        "keys_as",
        "layout_record",
        "left_out",
    }
    assert (report["input"]["layout_record"], report["input"]["left_out"]) == (None, None)
    assert report["input"]["lines"] == 20_000
    assert report["input"]["storage_lines"] == 0
    assert report["input"]["format"] == "csv"
    assert report["input"]["time_axis"] == "time"
    assert report["input"]["count_unit"] == 1.0
    assert report["input"]["events"] == 20_000
    assert len(report["input"]["window_edges"]) == report["input"]["windows"] + 1
    assert report["model"] == {
        "tablets": 32,
        "target": 1.5,
        "scan_limit": 100,
        "hash": "crc32",
        "key_part": None,
        "windows": "auto",
        "count_unit": "auto",
        "resamples": 200,
        "seed": 0,
        "confidence": 0.95,
    }
    assert set(report["noise"]) == {"floor", "floor_high"}
    assert 1.0 <= report["noise"]["floor"] <= report["noise"]["floor_high"]
    assert [layout["buckets"] for layout in report["layouts"]] == [1, 4, 16, 32]
    for layout in report["layouts"]:
        assert set(layout) == {
            "buckets",
            "max_mean",
            "corrected",
            "interval",
            "verdict",
            "meets_target",
            "sub_scans",
            "naive_limit_rows",
            "paged_limit_rows",
            "write_end_level",
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
        low, high = layout["interval"]
        assert 1.0 <= low <= layout["corrected"] <= high
        assert layout["verdict"] in ("uniform", "meets", "above", "unclear")
        assert layout["meets_target"] == (layout["verdict"] in ("uniform", "meets"))
    unsalted = report["layouts"][0]
    assert unsalted["hottest"]["first_key"].startswith("tenant007#")
    assert report["rule_of_thumb"] == math.ceil(report["rule_of_thumb_ratio"])
    best = next(x for x in report["layouts"] if x["buckets"] == report["recommended"])
    assert best["meets_target"]
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
    assert "recommended: none of the candidates meets" in out


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


def test_advise_count_unit_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--count-unit U reads each count as count / U accesses, and the JSON says it was given."""
    rows = [f"user{i:04d},{100 + i % 3}" for i in range(1_000)]
    set_stdin(monkeypatch, "\n".join(rows).encode())
    code, out, _ = run(capsys, "advise", "--json", "--candidates", "2", "--count-unit", "100", "-")
    assert code == 0
    report = json.loads(out)
    assert report["input"]["count_unit"] == 100.0
    assert report["input"]["events"] == pytest.approx(1_009.99, abs=0.01)
    assert report["model"]["count_unit"] == "given"


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
        (["advise", "-", "--count-unit", "0"], "--count-unit: must be a number > 0"),
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


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("key,count\na,1\nb,x\n", "line 3: count 'x' is not a number"),
        ('"a,1\n', "line 1: malformed CSV: unexpected end of data"),
        ("a,0\nb,0\n", "the sample carries no load"),
    ],
)
def test_advise_malformed_csv_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str
) -> None:
    """A malformed CSV row or a sample without load: exit 1, one line naming the file."""
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, out, err = run(capsys, "advise", str(path))
    assert code == 1
    assert out == ""
    assert_one_line_error(err, str(path), needle)


def test_advise_malformed_ndjson_on_stdin_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A malformed NDJSON line on stdin: exit 1, one line naming stdin and the line."""
    set_stdin(monkeypatch, b'{"key": "a"}\nnot json\n')
    code, out, err = run(capsys, "advise", "-")
    assert code == 1
    assert out == ""
    assert_one_line_error(err, "stdin", "line 2: not JSON")


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


def test_advise_plot_without_matplotlib_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, small: Path
) -> None:
    """--plot without matplotlib installed is a usage error with the install hint."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = run(capsys, "advise", "--plot", "x.png", str(small))
    assert code == 2
    assert_one_line_error(err, "pip install 'matplotlib>=3.8'")


def test_advise_plot_unwritable_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path
) -> None:
    """A heat map path in a missing directory is exit 1 with one line."""
    target = tmp_path / "missing" / "heat.png"
    code, _, err = run(capsys, "advise", "--candidates", "4", "--plot", str(target), str(small))
    assert code == 1
    assert_one_line_error(err, "cannot write")


# -- the command's cost and defaults ----------------------------------------------------------


def test_key_command_imports_neither_the_advisor_nor_the_client() -> None:
    """`saltedtable key` imports neither the advisor, matplotlib nor the Bigtable client."""
    code = (
        "import sys\n"
        "from saltedtable._cli.main import main\n"
        "assert main(['key', '-n', '4', 'user1']) == 0\n"
        "prefixes = ('saltedtable.advise', 'matplotlib', 'google.cloud.bigtable', 'grpc',\n"
        "            'importlib.metadata')\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(prefixes))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_importing_the_package_does_not_import_the_client() -> None:
    """`import saltedtable` stays cheap; the tables load the client on first use."""
    code = (
        "import sys, saltedtable\n"
        "assert not [m for m in sys.modules if m.startswith(('google.cloud.bigtable', 'grpc'))]\n"
        "saltedtable.SaltedTableAsync\n"
        "assert 'google.cloud.bigtable.data' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_help_states_the_models_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """advise --help spells out the defaults the model applies (the parser does not import it)."""
    _, out, _ = run(capsys, "advise", "--help")
    text = " ".join(out.split())
    assert f"(default {','.join(map(str, model.DEFAULT_CANDIDATES))})" in text
    assert f"(default {model.DEFAULT_TABLETS})" in text
    assert f"(default {model.DEFAULT_TARGET})" in text
    assert f"(default {model.DEFAULT_SCAN_LIMIT})" in text
    assert f"(default {model.DEFAULT_RESAMPLES})" in text
    assert f"at least {model.MIN_CELL_EVENTS} accesses" in text
    assert f"1, 2, 4 .. {model.MAX_WINDOWS}" in text
