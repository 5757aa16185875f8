"""examples/benchmark.py runs end to end on the emulator and writes every section (no timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saltedtable.testing import EMULATOR_HOST_ENV, Emulator, list_tables

BENCHMARK = Path(__file__).resolve().parents[2] / "examples" / "benchmark.py"

SECTIONS = (
    "meta",
    "targets",
    "errors",
    "salt",
    "load",
    "point",
    "bulk_write",
    "full_scan",
    "prefix_scan",
    "limit_scan",
    "memory",
)


@pytest.mark.timeout(180)
def test_quick_benchmark_writes_every_section(emulator: Emulator, tmp_path: Path) -> None:
    """A tiny --quick run on the emulator exits 0, reports every section, drops its tables."""
    tables_before = set(list_tables(emulator.address))
    out = tmp_path / "bench.json"
    command = [
        sys.executable,
        str(BENCHMARK),
        "--quick",
        "--rows",
        "500",
        "--repeats",
        "1",
        "--memory-rows",
        "2000",
        "--memory-runs",
        "2",
        "--salt-keys",
        "10000",
        "--json",
        str(out),
    ]
    env = {**os.environ, EMULATOR_HOST_ENV: emulator.address}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(list_tables(emulator.address)) == tables_before

    report = json.loads(out.read_text())
    assert tuple(report) == SECTIONS
    assert report["errors"] == []
    assert report["meta"]["mode"] == "emulator"
    assert set(report["point"]) == {"read_row", "mutate_row", "check_and_mutate_row"}
    for modes in report["point"].values():
        assert set(modes) == {"sequential", "concurrent_32"}
        for result in modes.values():
            assert {"raw", "salted", "ratio", "chunk_pairs", "repeat_sums"} <= set(result)
            assert result["chunk_pairs"] > 0
    assert report["bulk_write"]["chunk_pairs"] > 0
    assert set(report["full_scan"]["ratios_ci95"]) == set(report["full_scan"]["ratios"])
    assert set(report["full_scan"]["variants"]) == {
        "raw_single",
        "raw_subscans_unordered",
        "raw_subscans_holding",
        "salted_ordered",
        "salted_unordered",
    }
    assert set(report["limit_scan"]) == {"1", "10", "100"}  # 1000 > 500 rows: skipped
    for limit in report["limit_scan"].values():
        assert {"rows_sent", "bound", "naive", "raw", "salted"} <= set(limit)
    assert {"large", "small", "difference_mb"} <= set(report["memory"])
    peaks = report["memory"]["peaks_mb"]
    assert len(peaks["large"]) == len(peaks["small"]) == 2
    assert report["memory"]["large"]["peak_rss_mb"] == min(peaks["large"])  # median of 2: lower
    assert {"keys_per_s", "bare_crc32_keys_per_s"} <= set(report["salt"])
    # One PASS/FAIL verdict per target; which way it goes is not the test's business.
    assert len(report["targets"]) == 6 + 2 + 3 * 2 + 1 + 1
    assert all(isinstance(t["passed"], bool) for t in report["targets"])
    assert "targets pass" in done.stdout
