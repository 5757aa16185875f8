"""The advisor's noise model: the uniform floor, the count unit, resampled intervals."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable.advise.noise import (
    count_unit,
    estimate,
    normal_max_moments,
    poisson_max_moments,
    uniform_floor,
)


def poisson(rng: random.Random, mean: float) -> float:
    """One Poisson draw (Knuth's method; means here are small enough)."""
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return float(k)


def uniform_max_means(per_window: int, windows: int, tablets: int, runs: int) -> list[float]:
    """max/mean of ``runs`` seeded uniform workloads: every access on a random tablet."""
    rng = random.Random(11)
    out = []
    for _ in range(runs):
        top = 0
        for _ in range(windows):
            cells = [0] * tablets
            for _ in range(per_window):
                cells[rng.randrange(tablets)] += 1
            top += max(cells)
        out.append(tablets * top / (per_window * windows))
    return sorted(out)


@pytest.mark.parametrize(
    ("per_window", "windows", "tablets"),
    [(1_000, 8, 32), (5_000, 1, 32), (400, 4, 8), (2_000, 1, 5)],
)
def test_uniform_floor_matches_simulated_uniform_workloads(
    per_window: int, windows: int, tablets: int
) -> None:
    """The analytic floor is the mean max/mean of simulated uniform workloads, and its high
    end is at or just above their 95th percentile."""
    simulated = uniform_max_means(per_window, windows, tablets, 200)
    floor = uniform_floor([float(per_window)] * windows, tablets)
    assert floor.mean == pytest.approx(sum(simulated) / len(simulated), abs=0.01)
    q95 = simulated[int(0.95 * len(simulated))]
    assert q95 - 0.01 <= floor.high <= q95 + 0.1 * (q95 - 1.0) + 0.01


def tablet_sizes(keys: int, tablets: int) -> list[int]:
    """Keys per tablet when ``keys`` sorted keys are cut into ``tablets`` of equal key count."""
    return [sum(1 for r in range(keys) if r * tablets // keys == t) for t in range(tablets)]


def uniform_key_max_means(
    per_window: int, windows: int, keys: int, tablets: int, runs: int
) -> list[float]:
    """max/mean of ``runs`` seeded workloads spread evenly over ``keys`` keys (not tablets)."""
    rng = random.Random(1_000)
    tablet_of = [r * tablets // keys for r in range(keys)]
    out = []
    for _ in range(runs):
        top = 0
        for _ in range(windows):
            cells = [0] * tablets
            for _ in range(per_window):
                cells[tablet_of[rng.randrange(keys)]] += 1
            top += max(cells)
        out.append(tablets * top / (per_window * windows))
    return sorted(out)


@pytest.mark.parametrize(
    ("per_window", "windows", "keys", "tablets", "runs"),
    [
        (2_000, 1, 40, 32, 200),  # Poisson means of 62 and 125
        (500, 4, 100, 32, 400),  # 15 and 20
        (8_000, 1, 1_000, 32, 100),  # 248 and 256: the normal approximation
        (300, 2, 9, 4, 400),
    ],
)
def test_uniform_floor_counts_the_key_count_rounding(
    per_window: int, windows: int, keys: int, tablets: int, runs: int
) -> None:
    """Keys that do not divide evenly into tablets (40 keys: 8 tablets of 2, 24 of 1) load the
    larger tablets more even when every key is equally busy: the floor given the tablets' key
    counts matches simulated workloads spread evenly over the keys."""
    simulated = uniform_key_max_means(per_window, windows, keys, tablets, runs)
    floor = uniform_floor([float(per_window)] * windows, tablets, tablet_sizes(keys, tablets))
    assert floor.mean == pytest.approx(sum(simulated) / len(simulated), abs=0.012)
    # The high end is a 95th percentile: between the simulations' 92nd and 98th.
    count = len(simulated)
    assert simulated[int(0.92 * count)] - 0.01 <= floor.high <= simulated[int(0.98 * count)] + 0.01
    assert floor.mean > uniform_floor([float(per_window)] * windows, tablets).mean


def test_uniform_floor_shrinks_with_more_accesses() -> None:
    """Four times the accesses halve the floor's distance from 1 (noise ~ 1/sqrt(n))."""
    small = uniform_floor([1_000.0] * 4, 16)
    large = uniform_floor([4_000.0] * 4, 16)
    assert (large.mean - 1.0) == pytest.approx((small.mean - 1.0) / 2, rel=0.05)
    assert uniform_floor([10.0], 1) == uniform_floor([], 8)  # one tablet or nothing: exactly 1


def test_poisson_max_matches_enumeration_and_normal_limit() -> None:
    """Small means: moments of the maximum as enumerated; large means: the normal limit."""
    mean, variance, q95 = poisson_max_moments(3.0, 2)
    pmf = [math.exp(-3.0) * 3.0**k / math.factorial(k) for k in range(60)]
    exact = sum(max(a, b) * pmf[a] * pmf[b] for a in range(60) for b in range(60))
    assert mean == pytest.approx(exact, rel=1e-9)
    assert variance > 0
    assert q95 in (5.0, 6.0, 7.0)
    e32, v32 = normal_max_moments(32)
    assert e32 == pytest.approx(2.0697, abs=1e-3)  # tabulated expected maximum of 32 normals
    big_mean, big_var, _ = poisson_max_moments(10_000.0, 32)
    assert big_mean == pytest.approx(10_000 + e32 * 100)
    assert big_var == pytest.approx(v32 * 10_000)


def test_count_unit_is_the_common_count_or_1() -> None:
    """Every line carrying the same count U (a 1-in-U sample): U; any other counts are
    accesses (unit 1), however large or small; zeros (storage lines) are ignored."""
    assert count_unit([1.0] * 10) == 1.0
    assert count_unit([100.0] * 10 + [0.0]) == 100.0
    assert count_unit([0.001] + [5.0] * 199) == 1.0
    assert count_unit([500.0, 20_000.0] * 5) == 1.0
    with pytest.raises(ValueError, match="no positive count"):
        count_unit([0.0])


@settings(max_examples=50, deadline=None)
@given(st.floats(0.01, 1e6), st.integers(1, 50), st.lists(st.floats(0.01, 1e6), min_size=1))
def test_count_unit_is_1_unless_every_count_is_equal(
    count: float, lines: int, others: list[float]
) -> None:
    """``lines`` equal counts give that count; add any different count and the unit is 1."""
    assert count_unit([count] * lines) == count
    if any(other != count for other in others):
        assert count_unit([count] * lines + others) == 1.0


def heat_map(means: list[list[float]], seed: int) -> list[list[float]]:
    """One Poisson sample of a heat map of expected events."""
    rng = random.Random(seed)
    return [[poisson(rng, m) for m in row] for row in means]


def max_mean(means: list[list[float]]) -> float:
    """The true max/mean of expected events."""
    tablets = len(means[0])
    return tablets * sum(max(row) for row in means) / sum(map(sum, means))


def test_uniform_heat_map_is_corrected_to_about_one() -> None:
    """A uniform heat map measures well above 1 by chance; corrected it is about 1, and the
    interval contains 1."""
    means = [[60.0] * 32 for _ in range(8)]
    result = estimate(heat_map(means, 1), 32, 200, seed=0)
    assert result.observed > 1.2
    assert result.corrected == pytest.approx(1.0, abs=0.05)
    assert result.low == 1.0
    assert result.low <= result.corrected <= result.high


def test_dominant_cell_is_left_alone() -> None:
    """One tablet at 10x: nothing to correct, and the interval is around the measured value."""
    means = [[600.0] + [60.0] * 31 for _ in range(8)]
    result = estimate(heat_map(means, 2), 32, 200, seed=0)
    assert result.corrected == pytest.approx(result.observed, abs=0.05)
    assert result.low < result.observed < result.high


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("4 tablets at 1.3x", [156.0] * 4 + [120.0] * 28),
        ("half at 1.4x, half at 0.6x", [168.0] * 16 + [72.0] * 16),
        ("one at 2x", [240.0] + [120.0] * 31),
    ],
)
def test_intervals_cover_the_truth_in_most_seeded_samples(name: str, row: list[float]) -> None:
    """Over 20 seeded samples of a layout near the target (120 accesses a tablet a window),
    the corrected value is within 0.05 of the truth on average and the 95% interval holds the
    truth in at least 16."""
    means = [list(row) for _ in range(8)]
    truth = max_mean(means)
    results = [estimate(heat_map(means, seed), 32, 100, seed=seed) for seed in range(20)]
    average = sum(r.corrected for r in results) / len(results)
    assert average == pytest.approx(truth, abs=0.05), name
    covered = sum(r.low <= truth <= r.high for r in results)
    assert covered >= 16, (name, covered)


def test_estimate_is_deterministic_per_seed() -> None:
    """The same heat map and seed give the same estimate."""
    cells = heat_map([[50.0] * 8 for _ in range(4)], 3)
    assert estimate(cells, 8, 50, seed=7) == estimate(cells, 8, 50, seed=7)
