"""examples/tools/benchmark.py runs end to end on the emulator, writing every section (untimed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saltedtable.testing import EMULATOR_HOST_ENV, Emulator, delete_table, list_tables

BENCHMARK = Path(__file__).resolve().parents[2] / "examples" / "tools" / "benchmark.py"

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
    "cpu",
    "rounds",
    "sweep",
    "memory",
)
#: Tiny sizes for the sections of issue 16.
ISSUE_16_SIZES = (
    "--sweep-buckets",
    "1,4",
    "--sweep-rows",
    "400",
    "--sweep-runs",
    "1",
    "--sweep-rounds",
    "1",
    "--rounds-buckets",
    "4",
    "--rounds-limits",
    "1,10",
    "--rounds-rows",
    "300",
    "--rounds-queries",
    "3",
    "--delay-ms",
    "20",
    "--cpu-ops",
    "10",
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
        "2000",
        # The fewest operations that still give every ratio and interval something to pair.
        "--point-ops",
        "10",
        "--bulk-rows",
        "200",
        "--prefix-ops",
        "4",
        "--limit-ops",
        "2",
        *ISSUE_16_SIZES,
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
        assert {"rows_sent", "bound", "naive", "raw", "salted", "latency_ratio"} <= set(limit)
    assert {"confined", "latency_ratio", "confined_latency"} <= set(report["prefix_scan"])

    cpu = report["cpu"]
    assert cpu["variants"]["salted_fan_out"]["requests"] == 16
    assert all(v["cpu_ms_per_call"] > 0 for v in cpu["variants"].values())
    assert set(cpu["in_memory"]["cpu_us_per_call"]) >= {"raw_1_request", "salted_confined"}
    rounds = report["rounds"]["by_buckets"]["4"]
    for key in ("limits", "limits_random"):
        assert set(rounds[key]) == {"1", "10"}
        for limit, r in rounds[key].items():
            assert r["queries"] == 3
            assert r["waves"]["median"] >= 1  # every scan made at least one round of requests
            assert r["rows_bound"] == 2 * int(limit) + 2 * 4
    assert set(rounds["prefix"]) == {"one_request", "fan_out", "confined", "raw"}
    assert rounds["prefix"]["confined"]["requests"]["max"] == 1
    assert rounds["prefix"]["one_request"]["requests"]["max"] == 1  # the whole prefix
    assert rounds["prefix"]["fan_out"]["requests"]["max"] == 4
    assert set(rounds["prefix_limit"]) == {"1", "10", "100"}
    assert rounds["prefix_limit"]["10"]["one_request_tried"] >= 1  # the first read tries
    sweep = report["sweep"]["by_buckets"]
    assert set(sweep) == {"1", "4"}
    for n, r in sweep.items():
        assert r["scan"]["salted_ordered"]["requests"] >= int(n)
        assert r["scan"]["raw_subscans"]["requests"] == int(n)
        assert r["scan"]["raw_subscans_paged"]["requests"] >= int(n)
        assert r["scan"]["ratio_vs_paged"] > 0
        assert r["memory"]["large"]["rows"] == 400
        assert r["memory"]["small"]["rows"] == 200
        assert r["memory"]["difference_mb"] is not None
    assert {"large", "small", "difference_mb"} <= set(report["memory"])
    peaks = report["memory"]["peaks_mb"]
    assert len(peaks["large"]) == len(peaks["small"]) == 2
    assert report["memory"]["large"]["peak_rss_mb"] == min(peaks["large"])  # median of 2: lower
    assert {"keys_per_s", "bare_crc32_keys_per_s"} <= set(report["salt"])
    # One PASS/FAIL verdict per target; which way it goes is not the test's business.
    # point, full scans, small-scan latency, rows sent, memory, salt; rounds; sweep
    assert len(report["targets"]) == 6 + 2 + 2 + 3 * 2 + 1 + 1 + 2 * 2 * 3 + 2 * 3
    assert all(isinstance(t["passed"], bool) for t in report["targets"])
    assert "targets pass" in done.stdout


@pytest.mark.timeout(180)
def test_kept_tables_are_reused_by_the_next_run(emulator: Emulator, tmp_path: Path) -> None:
    """--keep-tables leaves the loaded tables; a second run with the prefix reuses them."""
    prefix = "bench-reuse"
    tables_before = set(list_tables(emulator.address))
    env = {**os.environ, EMULATOR_HOST_ENV: emulator.address}
    reports = []
    for run in range(2):
        out = tmp_path / f"run{run}.json"
        command = [
            sys.executable,
            str(BENCHMARK),
            "--only",
            "sweep",
            "--keep-tables",
            "--table-prefix",
            prefix,
            *ISSUE_16_SIZES,
            "--json",
            str(out),
        ]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=150)
        assert done.returncode == 0, done.stdout + done.stderr
        reports.append(json.loads(out.read_text()))
    try:
        kept = set(list_tables(emulator.address)) - tables_before
        assert kept == {f"{prefix}-sweep1", f"{prefix}-sweep4", f"{prefix}-loaded"}
        first, second = (r["sweep"]["by_buckets"]["4"]["load"] for r in reports)
        assert first["rows"] == second["rows"] == 400
        assert "seconds" in first
        assert second == {"rows": 400, "reused": True}
        assert reports[1]["errors"] == []  # the reused table holds the right rows
        assert reports[1]["point"] == {"skipped": True}
    finally:
        for table_id in set(list_tables(emulator.address)) - tables_before:
            delete_table(emulator.address, table_id)


ENGINE_BENCH = BENCHMARK.with_name("engine_bench.py")


@pytest.mark.timeout(180)
def test_engine_bench_writes_section_runs(emulator: Emulator, tmp_path: Path) -> None:
    """A tiny ``engine_bench.py --sections writes``: every ratio, both flavours, no table left."""
    tables_before = set(list_tables(emulator.address))
    out = tmp_path / "writes.json"
    command = [
        sys.executable,
        str(ENGINE_BENCH),
        "--sections",
        "writes",
        "--write-rounds",
        "2",
        "--write-bulk-rows",
        "40",
        "60",
        "--write-appends",
        "30",
        "--write-point-ops",
        "2",
        "--write-live",
        "500",
        "--out",
        str(out),
    ]
    env = {**os.environ, EMULATOR_HOST_ENV: emulator.address}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(list_tables(emulator.address)) == tables_before
    writes = json.loads(out.read_text())["writes"]
    ops = ("batcher_30", "bulk_40", "bulk_60", "mutate_row", "check_and_mutate_row")
    assert set(writes["ratios"]) == {f"{f}/{op}" for f in ("async", "sync") for op in ops}
    for ratios in writes["ratios"].values():
        assert ratios["salted"]["n"] == ratios["salted_guard"]["n"] == 2
        assert ratios["salted"]["median"] > 0
    live_ops = ("batcher_30", "bulk_40", "bulk_60")
    assert set(writes["ratios_with_live_entries"]) == {
        f"{f}/{op}" for f in ("async", "sync") for op in live_ops
    }
    assert writes["tracked_objects_with_live_entries"] > 500
    for flavour in ("async", "sync"):
        above = writes["calls"][flavour]["salted_guard_above_raw"]
        assert set(above) == {
            "batcher_per_append",
            "bulk_per_entry",
            "mutate_row_per_call",
            "check_and_mutate_row_per_call",
        }
