"""Sampling noise: what chance alone does to max/mean, and how sure a measured max/mean is.

Pure code. A sample is read as *events*: a line of count ``c`` stands for
``c / u`` accesses, ``u`` being the sample's count unit (see
:func:`count_unit`; the caller may give it), so a heat-map cell holding ``m`` events varies by about
``sqrt(m)`` from sample to sample (Poisson). Two consequences:

* **The noise floor.** Even a perfectly uniform workload shows a max/mean above
  1, because the hottest of T noisy tablets is hot by chance.
  :func:`uniform_floor` computes what a uniform workload with the same events
  per window and the same tablets shows: its mean and its 95th percentile.
* **Intervals and the correction.** :func:`estimate` resamples the heat map
  (each cell redrawn as Poisson events around what was seen, with a fixed
  seed) and reads the spread of the resampled max/mean as the uncertainty of
  the measured one. The maximum of noisy cells is biased upwards, and
  resampling adds that bias a second time: where the hottest cells are about
  equal, the resampled max/mean overshoots the measured one by
  ``(sqrt(2) - 1)`` times the measured one's own bias. Scaling the overshoot by
  :data:`CORRECTION` removes the bias there (a uniform layout comes back to
  about 1.0), and removes nothing where one cell is far above the rest (no
  bias there).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist
from typing import Final, final

__all__ = [
    "CONFIDENCE",
    "CORRECTION",
    "CORRECTION_DOUBT",
    "Estimate",
    "NoiseFloor",
    "count_unit",
    "estimate",
    "grouped_max_moments",
    "normal_max_moments",
    "poisson_max_moments",
    "uniform_floor",
]

#: Two-sided level of the intervals, and the one-sided level of the noise floor's high end.
CONFIDENCE: Final = 0.95
#: Resampling doubles the noise variance of each cell: bias(sqrt(2) sigma) - bias(sigma)
#: = (sqrt(2) - 1) bias(sigma) for equal cells, so the bias is 1 / (sqrt(2) - 1) times
#: the overshoot of the resampled mean.
CORRECTION: Final = 1.0 / (math.sqrt(2.0) - 1.0)
#: The interval allows for the correction being off by this share of itself (in
#: quadrature with the resampled spread); docs/advise.md shows the coverage it gives.
CORRECTION_DOUBT: Final = 0.5
#: Above this many events a cell is normal enough (Poisson skewness 1/sqrt(m) < 0.07).
_NORMAL_FROM: Final = 200.0
#: Cells further than this many standard deviations below a window's top cell never
#: become its maximum in a resample; leaving them out keeps resampling cheap.
_PRUNE_SD: Final = 6.0
#: Below this mean a cell is drawn as an exact Poisson count.
_EXACT_BELOW: Final = 30.0
_Z_HIGH: Final = NormalDist().inv_cdf(CONFIDENCE)


def count_unit(counts: Sequence[float]) -> float:
    """The load one access stands for: the common count when every positive count is equal, else 1.

    A line whose count is ``c`` reads as ``c / unit`` accesses. Counts that
    differ are numbers of accesses (a per-key export: ``key,42`` is 42
    accesses, however large or small the counts run). Counts that are all the
    same value ``U`` are a 1-in-U sample whose lines each carry ``U``: one
    access a line. Zeros (keys listed for storage only) are ignored. When the
    counts are something else (bytes, costs), the caller gives the unit.

    Raises:
        ValueError: No positive count.
    """
    positive = {c for c in counts if c > 0}
    if not positive:
        raise ValueError("no positive count")
    return positive.pop() if len(positive) == 1 else 1.0


@cache
def normal_max_moments(tablets: int) -> tuple[float, float]:
    """Mean and variance of the maximum of ``tablets`` independent standard normals."""
    if tablets == 1:
        return 0.0, 1.0
    step = 0.004
    mean = square = 0.0
    for i in range(-2500, 2501):
        x = i * step
        cdf = 0.5 * math.erfc(-x / math.sqrt(2.0))
        density = tablets * math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        density *= cdf ** (tablets - 1)
        mean += x * density * step
        square += x * x * density * step
    return mean, square - mean * mean


def poisson_max_moments(mean: float, tablets: int) -> tuple[float, float, float]:
    """Mean, variance and 95th percentile of the maximum of ``tablets`` iid Poisson counts.

    Exact for small means; from the normal approximation above a few hundred.
    """
    return grouped_max_moments([(mean, tablets)])


def grouped_max_moments(groups: Sequence[tuple[float, int]]) -> tuple[float, float, float]:
    """Mean, variance and 95th percentile of the maximum of independent Poisson counts.

    Args:
        groups: ``(mean, how many)``: that many counts of that mean each.

    Exact for small means; from the normal approximation when every mean is
    above a few hundred.
    """
    groups = [(m, n) for m, n in groups if m > 0 and n > 0]
    if not groups:
        return 0.0, 0.0, 0.0
    if min(m for m, _ in groups) > _NORMAL_FROM:
        return _normal_max_moments(groups)
    high = max(m for m, _ in groups)
    top = math.ceil(high + 14.0 * math.sqrt(high) + 20.0)
    logs = [(math.log(m), m, n) for m, n in groups]
    cdfs = [0.0] * len(groups)
    first = square = 0.0
    q95: float | None = None
    for k in range(top + 1):
        below = 1.0  # P(max <= k)
        for g, (log_mean, mean, count) in enumerate(logs):
            cdfs[g] += math.exp(k * log_mean - mean - math.lgamma(k + 1))
            below *= min(1.0, cdfs[g]) ** count
        first += 1.0 - below
        square += (2 * k + 1) * (1.0 - below)
        if q95 is None and below >= CONFIDENCE:
            q95 = float(k)
    return first, square - first * first, float(top) if q95 is None else q95


def _normal_max_moments(groups: Sequence[tuple[float, int]]) -> tuple[float, float, float]:
    """:func:`grouped_max_moments` for large means, each count normal with its Poisson variance."""
    if len(groups) == 1:
        mean, tablets = groups[0]
        e, v = normal_max_moments(tablets)
        sd = math.sqrt(mean)
        z = NormalDist().inv_cdf(CONFIDENCE ** (1.0 / tablets))
        return mean + e * sd, v * mean, mean + z * sd
    # The group of the largest mean holds the maximum within 8 of its standard deviations.
    high = max(m for m, _ in groups)
    sd = math.sqrt(high)
    start, steps = high - 8.0 * sd, 1600
    step = 16.0 * sd / steps
    normal = NormalDist()
    above = second = 0.0  # integrals of P(max > x) and 2 (x - start) P(max > x)
    q95: float | None = None
    for i in range(steps):
        x = start + (i + 0.5) * step
        below = 1.0
        for mean, count in groups:
            below *= normal.cdf((x - mean) / math.sqrt(mean)) ** count
        above += (1.0 - below) * step
        second += 2.0 * (x - start) * (1.0 - below) * step
        if q95 is None and below >= CONFIDENCE:
            q95 = x
    return start + above, second - above * above, start + 16.0 * sd if q95 is None else q95


@final
@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """The max/mean a perfectly uniform workload shows when sampled like this one."""

    #: Its expected value.
    mean: float
    #: Its 95th percentile: a layout measured at or below this is indistinguishable
    #: from uniform.
    high: float


def uniform_floor(
    window_events: Sequence[float], tablets: int, tablet_keys: Sequence[int] | None = None
) -> NoiseFloor:
    """The noise floor of max/mean for these events per window over ``tablets`` tablets.

    A uniform workload loads every key equally, so each tablet gets a share of
    each window's events in proportion to the keys it holds, and the events
    fall on the tablets at random (Poisson); max/mean is ``T * sum(max per
    window) / events``. Tablets of equal key count hold the same share; when the
    keys do not divide evenly (40 keys on 32 tablets: 8 hold 2, 24 hold 1), the
    larger tablets carry more by that rounding alone, and the floor includes it.

    Args:
        window_events: Events (load / count unit) in each time window.
        tablets: T.
        tablet_keys: Keys in each of the T tablets (None: equal).
    """
    total = math.fsum(window_events)
    if total <= 0 or tablets <= 1:
        return NoiseFloor(1.0, 1.0)
    if tablet_keys is None:
        shares = [(1.0 / tablets, tablets)]
    else:
        if len(tablet_keys) != tablets or min(tablet_keys) < 1:
            raise ValueError(f"tablet_keys must be {tablets} counts >= 1, got {tablet_keys!r}")
        keys = sum(tablet_keys)
        shares = [(k / keys, n) for k, n in sorted(Counter(tablet_keys).items())]
    means, variances, highs = [], [], []
    for events in window_events:
        if events > 0:
            mean, variance, high = grouped_max_moments([(events * s, n) for s, n in shares])
            means.append(mean)
            variances.append(variance)
            highs.append(high)
    floor = tablets * math.fsum(means) / total
    if len(means) == 1:
        high = tablets * highs[0] / total
    else:
        high = floor + _Z_HIGH * tablets * math.sqrt(math.fsum(variances)) / total
    return NoiseFloor(max(1.0, floor), max(1.0, floor, high))


@final
@dataclass(frozen=True, slots=True)
class Estimate:
    """A measured max/mean with its noise-corrected value and interval."""

    #: max/mean as measured on the sample (biased upwards by noise).
    observed: float
    #: The measured value less the estimated noise bias (never below 1).
    corrected: float
    #: The 95% interval around ``corrected``.
    low: float
    high: float
    #: Mean of the resampled max/means.
    resampled: float


def _draw(rng: random.Random, mean: float, root: float, exp_neg: float) -> float:
    """One Poisson count of ``mean`` (normal approximation for large means)."""
    if mean <= 0:
        return 0.0
    if mean < _EXACT_BELOW:
        k = 0
        p = rng.random()
        while p > exp_neg:
            k += 1
            p *= rng.random()
        return float(k)
    return max(0.0, mean + root * rng.gauss(0.0, 1.0))


def estimate(
    events: Sequence[Sequence[float]], tablets: int, resamples: int, seed: int
) -> Estimate:
    """Resample a heat map and return its max/mean, corrected for noise, with an interval.

    Args:
        events: ``events[window][tablet]``: load / count unit.
        tablets: T (the length of each window's row).
        resamples: How many times to redraw the heat map.
        seed: The random seed (the same seed gives the same result).

    Returns:
        The observed max/mean, the corrected one, and the 95% interval around
        the corrected one: the resampled spread, reflected (a resampled
        distribution that leans upward moves the interval down, as in the basic
        bootstrap), widened by :data:`CORRECTION_DOUBT` of the correction.
    """
    total = math.fsum(math.fsum(row) for row in events)
    observed = tablets * math.fsum(max(row) for row in events if row) / total
    # Per window: the cells that can be its maximum, and the load of the rest.
    windows: list[tuple[list[tuple[float, float, float]], tuple[float, float, float]]] = []
    for row in events:
        if not row:
            continue
        top = max(m - _PRUNE_SD * math.sqrt(m) for m in row)
        kept = [m for m in row if m + _PRUNE_SD * math.sqrt(m) + _PRUNE_SD >= top]
        rest = math.fsum(row) - math.fsum(kept)
        # Rounding leftovers are no load: drawing them would shift the random stream.
        rest = rest if rest > 1e-9 * max(1.0, top) else 0.0
        windows.append(
            (
                [(m, math.sqrt(m), math.exp(-m)) for m in kept],
                (rest, math.sqrt(rest), math.exp(-rest)),
            )
        )
    rng = random.Random(seed)
    draws: list[float] = []
    for _ in range(resamples):
        top_sum = grand = 0.0
        for kept_cells, (rest, rest_root, rest_exp) in windows:
            hottest = window = 0.0
            for m, root, exp_neg in kept_cells:
                x = _draw(rng, m, root, exp_neg)
                window += x
                if x > hottest:
                    hottest = x
            top_sum += hottest
            grand += window + _draw(rng, rest, rest_root, rest_exp)
        draws.append(tablets * top_sum / grand if grand > 0 else observed)
    draws.sort()
    resampled = math.fsum(draws) / len(draws)
    tail = (1.0 - CONFIDENCE) / 2.0
    q_low = draws[int(tail * (len(draws) - 1))]
    q_high = draws[math.ceil((1.0 - tail) * (len(draws) - 1))]
    corrected = max(1.0, observed - CORRECTION * (resampled - observed))
    # The correction is an estimate too: the interval allows for a share of it.
    doubt = CORRECTION_DOUBT * (observed - corrected)
    low = max(1.0, corrected - math.hypot(q_high - resampled, doubt))
    high = max(low, corrected + math.hypot(resampled - q_low, doubt))
    return Estimate(observed, corrected, low, high, resampled)
