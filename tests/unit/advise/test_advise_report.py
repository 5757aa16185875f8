"""The advisor's reports: the text for people and the versioned JSON for machines."""

from __future__ import annotations

import random

import pytest

from saltedtable.advise import Access, Advice, advise
from saltedtable.advise.heatmap import _x_ticks
from saltedtable.advise.report import JSON_SCHEMA, epoch_scale, json_report, text_report

FAST = {"candidates": (1, 2, 4), "resamples": 50}


def report(advice: Advice) -> str:
    """The text report of ``advice`` read from a file called sample.csv."""
    return text_report(
        advice, source="sample.csv", time_source="time column", hash_name="crc32", key_part=None
    )


def uniform(lines: int = 3_000) -> Advice:
    """Advice on random keys evenly over time."""
    rnd = random.Random(1)
    return advise(
        [Access(b"u%06d" % rnd.randrange(10**6), 1.0, float(i)) for i in range(lines)], **FAST
    )


def test_uniform_report_says_no_salting_and_why() -> None:
    """A uniform sample: rule of thumb 1 because the layout is like uniform, and N = 1."""
    text = report(uniform())
    assert "rule of thumb: N ~ 1: the unsalted layout is indistinguishable from uniform" in text
    assert "recommended: N = 1, no salting: indistinguishable from uniform" in text
    assert "noise: a perfectly uniform workload" in text
    assert "counts in units" not in text
    assert text.endswith("\n")


def test_each_layout_row_shows_measured_corrected_interval_and_verdict() -> None:
    """One row per N: N, measured, corrected, interval, verdict, sub-scans and rows read."""
    advice = uniform()
    rows = [line.split() for line in report(advice).splitlines() if line[:5].strip().isdigit()]
    assert [int(row[0]) for row in rows] == [1, 2, 4]
    for row, sim in zip(rows, advice.simulations, strict=True):
        assert row[1:5] == [
            f"{sim.max_mean:.2f}",
            f"{sim.corrected:.2f}",
            f"{sim.low:.2f}-{sim.high:.2f}",
            sim.verdict,
        ]


def test_weighted_sample_names_its_count_unit() -> None:
    """The noise line says how counts were read: a 1-in-U sample (every line carries U), per-key
    counts that are accesses, or the unit given."""
    sampled = [Access(b"k%04d" % i, 50.0) for i in range(500)]
    text = report(advise(sampled, **FAST))
    assert "noise: 500 accesses (every count is 50: read as one access a line);" in text
    counted = [Access(b"k%04d" % i, float(1 + i % 7)) for i in range(500)]
    text = report(advise(counted, **FAST))
    assert "noise: 1,994 accesses (each count is that many accesses);" in text
    text = report(advise(counted, count_unit=0.5, **FAST))
    assert "noise: 3,988 accesses (count unit 0.5, as given);" in text
    storage = [Access(b"k%04d" % i, 0.0) for i in range(500)]
    text = report(advise([*storage, Access(b"k0001"), Access(b"k0400")], **FAST))
    assert "sample: sample.csv: 502 lines (500 of count 0: storage only), 500 distinct keys" in text
    assert "accesses (" not in text  # two accesses of count 1: nothing to say about counts


def test_hot_key_report_recommends_nothing() -> None:
    """No candidate meets the target: the report says so and the warnings follow."""
    accesses = [Access(b"user%04d" % i) for i in range(2_000)] + [Access(b"celebrity", 1000.0)]
    text = report(advise(accesses, **FAST))
    assert "recommended: none of the candidates meets max/mean <= 1.5" in text
    assert "warning [hot-key]: one key, celebrity," in text
    assert "warning [target-unreachable]" in text


def test_json_report_mirrors_the_advice() -> None:
    """The JSON carries the schema version and each layout's figures, keys as hex on request."""
    advice = uniform()
    doc = json_report(
        advice, source="s", fmt="csv", hash_name="crc32", key_part=None, keys_as_hex=True
    )
    assert doc["schema"] == JSON_SCHEMA == 3
    assert doc["recommended"] == advice.recommended
    assert doc["noise"] == {
        "floor": round(advice.noise_floor, 4),
        "floor_high": round(advice.noise_floor_high, 4),
    }
    first = doc["layouts"][0]
    sim = advice.simulations[0]
    assert first["interval"] == [round(sim.low, 4), round(sim.high, 4)]
    assert bytes.fromhex(first["hottest"]["first_key"]) == sim.hottest.first_key


def rising(lines: int = 800) -> Advice:
    """Advice on timestamp-first keys in time order, too few for more than one window."""
    rnd = random.Random(1)
    ms, rows = 1_700_000_000_000, []
    for _ in range(lines):
        ms += rnd.randint(1, 100)
        rows.append(Access(f"{ms}#{rnd.randrange(1000)}".encode(), 1.0, ms / 1000))
    return advise(rows, candidates=(1, 2, 4, 8, 16, 32), resamples=50)


def test_keys_that_rise_are_never_headlined_no_salting() -> None:
    """Timestamp-first keys measured uniform in one window: the headline recommends the N whose
    ends meet the target, the table shows the ends column, the rule of thumb names the end."""
    text = report(rising())
    assert "no salting" not in text
    assert "warning [monotonic-keys]" in text
    assert (
        "recommended: N = 32, the smallest candidate that meets max/mean <= 1.5, also at the "
        "ends where the keys that rise with time are written (1.00)"
    ) in text
    assert "verdict     ends  sub-scans" in text
    assert "uniform    32.00          1" in text
    assert "but its end, where the keys that rise with time are written, takes 32.00x" in text


def test_json_report_gives_each_layouts_write_end_level() -> None:
    """--json: write_end_level per layout, null when no keys rise with time."""
    layouts = json_report(rising(), source="s", fmt="csv", hash_name="crc32", key_part=None)[
        "layouts"
    ]
    assert [layout["write_end_level"] for layout in layouts] == [32, 16, 8, 4, 2, 1]
    plain = json_report(uniform(), source="s", fmt="csv", hash_name="crc32", key_part=None)
    assert {layout["write_end_level"] for layout in plain["layouts"]} == {None}


@pytest.mark.parametrize(
    ("values", "scale"),
    [
        ([1.7e9, 1.7e9 + 3600], 1.0),
        ([1.7e12, 1.7e12 + 1], 1e3),
        ([1.7e15], 1e6),
        ([1.7e18], 1e9),
        ([0.0, 100.0], None),
    ],
)
def test_epoch_scale_recognises_epoch_units(values: list[float], scale: float | None) -> None:
    """Epoch seconds, ms, us and ns are recognised by magnitude; other numbers are not."""
    assert epoch_scale(values) == scale


def test_heat_map_time_labels_are_rounded_to_the_window() -> None:
    """Windows run from the first to the last timestamp (16:00:00.0 to 16:59:58.4 in four):
    the ticks read 16:00, 16:15, 16:30, 16:45, not 16:14:59; short windows keep seconds."""
    start = 1_710_000_000.0  # 2024-03-09 16:00:00 UTC
    quarters = [start + i * 3_598.4 / 4 for i in range(5)]
    assert _x_ticks("time", quarters, 4, 1.0) == (
        [0, 1, 2, 3],
        ["16:00", "16:15", "16:30", "16:45"],
    )
    minutes = [start + i * 59.6 for i in range(5)]
    assert _x_ticks("time", minutes, 4, 1.0)[1] == ["16:00:00", "16:01:00", "16:01:59", "16:02:59"]
    in_ms = [edge * 1_000 for edge in quarters]
    assert _x_ticks("time", in_ms, 4, 1_000.0)[1][1] == "16:15"


def test_the_resalt_advice_quotes_options_and_offers_a_window_for_keys_without_a_time() -> None:
    """A plain table (no key-time reader yet): the `window open` line for keys without a
    time, beside the `resalt ... --time READER` one; separator and marker shell-quoted."""
    import datetime as dt
    import shlex

    from saltedtable import SaltScheme
    from saltedtable._guard.record import describe_layout
    from saltedtable.advise.report import epochs_advice, resalt_command

    record = describe_layout(SaltScheme(8, separator=b"; ", marker=b"$x"))
    now = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    where = {"table": "t", "instance": "i", "project": "p"}
    command = resalt_command(record, 32, now=now, **where)
    argv = shlex.split(command)
    assert argv[argv.index("--separator") + 1] == "; "
    assert argv[argv.index("--marker") + 1] == "$x"
    text = "\n".join(epochs_advice(record, 32, now=now, **where))
    assert "saltedtable window open t --instance i --project p -n 32" in text
    assert command in text
