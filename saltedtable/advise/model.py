"""Hotspot advisor: how would a range-partitioned store spread this load, salted or not?

Pure code, no I/O: :func:`advise` takes a sample of accesses (key, count, time)
and returns an :class:`Advice` value; the CLI reads the input, prints the
advice and draws the heat map.

The model, for the unsalted layout and for each candidate bucket count N:

* **Storage.** The sample's distinct keys, in the layout's physical order
  (logical keys unsalted, ``scheme.salt_key(key)`` salted), are cut into T
  contiguous tablets that hold the same number of keys. Bigtable splits
  tablets by size, so with rows of similar size this is the layout a table
  settles into.
* **Load.** Each line adds its count to the tablet holding its key, in the
  time window of its time (or of its position in the sample): a heat map of T
  rows by W columns, as in Bigtable's Key Visualizer.
* **Score.** ``max/mean``: in each window the hottest tablet's load over the
  mean tablet's load, averaged over the windows weighted by their load
  (``T * sum(max of each window) / total load``). 1.0 is a perfect spread; a
  hot tablet at 9x the mean is a node doing 9x its share of the work.

A sample is noisy, and the hottest of T noisy tablets is hot partly by chance:
:mod:`~saltedtable.advise.noise` gives each layout's max/mean a correction and
a 95% interval, and the max/mean a perfectly uniform workload sampled the same
way would show (the noise floor). A layout *meets* the target when its whole
interval is at or below it, or when its measured max/mean is within the noise
floor (indistinguishable from uniform). The recommendation is the smallest
candidate that meets the target, because each bucket costs every scan one more
sub-scan. When the key as a whole rises with time, a layout must also meet the
target at the ends where new keys are written (:attr:`Simulation.write_end_level`),
and N = 1 is never recommended: one tablet takes every new row.

Time matters: keys such as ``tenant#timestamp`` are spread evenly over the
tablets in storage, but at any moment every write of a tenant goes to the end
of its range. Salting splits that end into N ends. Windows are chosen from the
data: the coarsest that still show the unsalted hot spot, so that each cell
holds as many accesses as possible (less noise) without averaging a moving hot
spot away.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeVar, final

from .._scheme.cutoff import CutoffPolicy
from .._scheme.hot import propose_split
from .._scheme.layout import Layout
from .._scheme.salt import SaltScheme, format_key
from .noise import CONFIDENCE, NoiseFloor, estimate, uniform_floor
from .noise import count_unit as _count_unit

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SCAN_LIMIT",
    "DEFAULT_TABLETS",
    "DEFAULT_TARGET",
    "MAX_WINDOWS",
    "MIN_CELL_EVENTS",
    "Access",
    "Advice",
    "CountUnitChoice",
    "Finding",
    "HotSpot",
    "Simulation",
    "TimeAxis",
    "Verdict",
    "WindowChoice",
    "advise",
    "format_key",
]

DEFAULT_CANDIDATES: Final = (1, 2, 4, 8, 16, 32, 64)
#: A table of a few hundred GB on a handful of nodes has tens of tablets.
DEFAULT_TABLETS: Final = 32
DEFAULT_TARGET: Final = 1.5
DEFAULT_SCAN_LIMIT: Final = 100
#: Resamples behind each interval: the interval's ends move by about 0.01 with the seed.
DEFAULT_RESAMPLES: Final = 200
#: Automatic windows keep at least this many accesses per tablet per window: below
#: that, a single tablet a little above the rest is hard to tell from chance (see
#: docs/advise.md, "How far the correction can be trusted").
MIN_CELL_EVENTS: Final = 32
#: Automatic windows are 1, 2, 4, ... up to this many equal spans of time.
MAX_WINDOWS: Final = 64
#: The coarsest windows whose unsalted max/mean (less its noise floor) reaches this
#: share of the best window count's are chosen: coarser windows would average a
#: moving hot spot away, finer ones only add noise.
_KEEP_SIGNAL: Final = 0.9
#: ... give or take this much, so that noise between window counts does not decide.
_SIGNAL_SLACK: Final = 0.05
#: Each window is cut in this many parts, to measure max/mean with windows shifted by a part.
_PHASES: Final = 4
_Z95: Final = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
#: Keys are "monotonic" when this much of each time slice lies above the slice before.
_MONOTONIC_SHARE: Final = 0.8
#: Keys led by a number are checked on their own when they are this share of the lines.
_MONOTONIC_MIN_SHARE: Final = 0.2
_MONOTONIC_CHUNKS: Final = 20
_MONOTONIC_CODES: Final = frozenset({"monotonic-keys", "monotonic-within-prefix"})
#: Keys with the most common load: at this share the load per tablet is the key count.
_SAME_LOAD: Final = 0.99
#: Warn when this share of the keys were seen once and the keys never seen may be as many.
_UNSEEN_SHARE: Final = 0.25
#: A hot spot whose load is this much in one bucket is one no N can split.
_ONE_BUCKET: Final = 0.9

TimeAxis = Literal["time", "order", "none"]
Severity = Literal["warning", "note"]
#: How a layout compares with the target: ``uniform`` (measured within the noise
#: floor), ``meets`` (whole interval at or below the target), ``above`` (whole
#: interval above), ``unclear`` (the interval straddles the target).
Verdict = Literal["uniform", "meets", "above", "unclear"]
#: ``auto``: chosen from the data; ``given``: the caller's; ``single``: no time axis.
WindowChoice = Literal["auto", "given", "single"]
#: ``auto``: from the counts (see :func:`~saltedtable.advise.noise.count_unit`); ``given``.
CountUnitChoice = Literal["auto", "given"]


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


_T = TypeVar("_T", bound=_Ordered)


@final
@dataclass(frozen=True, slots=True)
class Access:
    """One line of a key sample or access log: a logical key, its load, and when."""

    key: bytes
    count: float = 1.0
    time: float | None = None


@final
@dataclass(frozen=True, slots=True)
class HotSpot:
    """The hottest cell of a heat map: one tablet in one time window."""

    tablet: int
    window: int
    first_key: bytes
    last_key: bytes
    ratio: float
    share: float


@final
@dataclass(frozen=True, slots=True)
class Simulation:
    """One simulated layout: unsalted (``buckets == 1``) or salted with N buckets."""

    buckets: int
    #: max/mean as measured on the sample.
    max_mean: float
    #: max/mean less the estimated sampling noise (never below 1).
    corrected: float
    #: 95% interval of the true max/mean, around ``corrected``.
    low: float
    high: float
    verdict: Verdict
    hottest: HotSpot
    #: ``loads[window][tablet]``
    loads: tuple[tuple[float, ...], ...]
    #: Physical key of the first row of each tablet.
    tablet_first_keys: tuple[bytes, ...]
    sub_scans: int
    naive_limit_rows: int
    paged_limit_rows: int
    #: max/mean at one moment when every key that rises with time is written at the
    #: end of its range (see :func:`advise`); None when no keys rise with time.
    write_end_level: float | None = None

    @property
    def meets_target(self) -> bool:
        """True when the layout meets the target (verdict ``uniform`` or ``meets``)."""
        return self.verdict in ("uniform", "meets")


@final
@dataclass(frozen=True, slots=True)
class Finding:
    """Something the numbers alone do not say: a warning or a note, with a stable code."""

    code: str
    severity: Severity
    message: str


@final
@dataclass(frozen=True, slots=True)
class Advice:
    """What :func:`advise` found: the simulations, the recommendation and the findings."""

    lines: int
    #: Lines of count 0: keys listed for storage only.
    storage_lines: int
    distinct_keys: int
    total_load: float
    time_axis: TimeAxis
    #: W + 1 window edges, in time units (or line positions for ``time_axis="order"``).
    window_edges: tuple[float, ...]
    window_choice: WindowChoice
    tablets: int
    target: float
    scan_limit: int
    simulations: tuple[Simulation, ...]
    recommended: int | None
    #: The shard count the unsalted skew suggests: ceil(:attr:`rule_of_thumb_ratio`),
    #: or 1 when the unsalted layout meets the target.
    rule_of_thumb: int
    #: The unsalted layout's corrected max/mean to one decimal.
    rule_of_thumb_ratio: float
    #: The load one access stands for (see :func:`~saltedtable.advise.noise.count_unit`).
    count_unit: float
    #: Whether :attr:`count_unit` was given or read from the counts.
    count_unit_choice: CountUnitChoice
    #: total_load / count_unit: how many accesses the sample counts as.
    events: float
    #: Expected max/mean of a perfectly uniform workload sampled like this one.
    noise_floor: float
    #: Its 95th percentile: layouts measured at or below are indistinguishable from uniform.
    noise_floor_high: float
    resamples: int
    seed: int
    #: The max/mean salting converges to at best: per window, the tablet of the
    #: hottest single key holds that key and a fair share of the rest,
    #: ``1 + (T - 1) * key share`` (weighted over the windows by their load).
    hot_key_floor: float
    #: The keys with the largest share of the load, largest first.
    top_keys: tuple[tuple[bytes, float], ...]
    findings: tuple[Finding, ...]

    @property
    def windows(self) -> int:
        """Number of time windows (heat-map columns)."""
        return len(self.window_edges) - 1

    def simulation(self, buckets: int) -> Simulation:
        """Return the simulation of ``buckets`` (1: unsalted).

        Raises:
            KeyError: That bucket count was not simulated.
        """
        for sim in self.simulations:
            if sim.buckets == buckets:
                return sim
        raise KeyError(buckets)


def advise(
    accesses: Sequence[Access],
    *,
    candidates: Sequence[int] = DEFAULT_CANDIDATES,
    tablets: int = DEFAULT_TABLETS,
    target: float = DEFAULT_TARGET,
    windows: int | None = None,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
    scheme_for: Callable[[int], SaltScheme] = SaltScheme,
    cutoff: CutoffPolicy | None = None,
    ordered: bool = False,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    count_unit: float | None = None,
    show_key: Callable[[bytes], str] = format_key,
    progress: Callable[[int, int], None] | None = None,
) -> Advice:
    """Simulate the load per tablet unsalted and salted with each candidate N; recommend N.

    Args:
        accesses: The sample. Either every access has a time or none has; without
            times, the position in the sample is the time axis unless the keys
            are sorted (a key dump, not a log), which gives a single window.
        candidates: Bucket counts to try; 1 (unsalted) is always simulated.
        tablets: T, the number of equal-size tablets the key space is cut into.
        target: The max/mean to reach (> 1).
        windows: Time windows W; None chooses them from the data: the coarsest
            of 1, 2, 4, ... :data:`MAX_WINDOWS` equal spans that still show the
            unsalted hot spot, with at least :data:`MIN_CELL_EVENTS` accesses
            per tablet per window.
        scan_limit: Row limit of the scan whose read cost is reported.
        scheme_for: Builds the scheme for N buckets (hash and key part).
        cutoff: A forward-only migration's cutoff: keys whose time is before it
            stay unsalted in every salted layout (where the table keeps them).
        ordered: Without times, use the sample order as the time axis even if
            the keys are sorted.
        resamples: Resamples behind each interval (>= 20).
        seed: Random seed of the resampling: the same sample, arguments and
            seed always give the same advice.
        count_unit: The load of one access: a line of count ``c`` is ``c /
            count_unit`` accesses, which sets the sampling noise. None: the
            common count when every positive count is the same (a 1-in-U
            sample), else 1 (counts are numbers of accesses).
        show_key: How messages show a key.
        progress: Called as ``progress(done, total)`` after each layout.

    Returns:
        The simulations in ascending N, the recommended N (None when no
        candidate meets the target) and the findings.

    Raises:
        ValueError: Bad arguments, an empty sample, or times on some accesses only.
        SaltSchemeError: ``scheme_for`` rejects a candidate.
        RowKeyError: A key the scheme cannot salt.
        CutoffError: With ``cutoff``, a key whose time cannot be read.
    """
    _check_arguments(
        accesses,
        tablets=tablets,
        target=target,
        windows=windows,
        scan_limit=scan_limit,
        count_unit=count_unit,
        resamples=resamples,
        candidates=candidates,
    )
    findings: list[Finding] = []
    sample = _Sample.of(
        accesses,
        tablets=tablets,
        target=target,
        windows=windows,
        ordered=ordered,
        count_unit=count_unit,
        findings=findings,
    )
    todo = sorted(set(candidates) | {1})
    # The scheme of the largest candidate: which keys salting can split at all.
    widest = scheme_for(todo[-1]) if todo[-1] > 1 else None
    rising: list[Finding] = []
    ends = _find_monotonic(accesses, sample.axis, sample.positions, widest, show_key, rising)
    sims = _simulate_candidates(
        sample,
        todo,
        scheme_for,
        cutoff,
        ends,
        scan_limit=scan_limit,
        target=target,
        resamples=resamples,
        seed=seed,
        progress=progress,
    )
    key_window = sample.key_window_load()
    # The tablet of each window's hottest key holds that key and, at best, a fair share
    # of the rest: salting cannot take max/mean below that (linear in the share, so the
    # windows' weighted mean is the level of their summed shares).
    window_max: dict[int, float] = {}
    for (_, w), load in key_window.items():
        window_max[w] = max(window_max.get(w, 0.0), load)
    hot_key_floor = _key_tablet_level(
        math.fsum(window_max.values()) / sample.total, len(sample.keys), sample.t_count
    )
    top = sorted(range(len(sample.keys)), key=lambda i: -sample.key_load[i])[:3]
    top_keys = tuple((sample.keys[i], sample.key_load[i] / sample.total) for i in top)

    unsalted = sims[0]
    ratio = round(_settled(unsalted.corrected), 1)
    # No shards when the unsalted layout already meets the target (or is like uniform).
    rule = 1 if unsalted.meets_target else max(1, math.ceil(ratio))
    recommended = _recommend(sims, target)
    _diagnose(
        sample,
        sims,
        rising=rising,
        widest=widest,
        key_window=key_window,
        top_keys=top_keys,
        hot_key_floor=hot_key_floor,
        rule=rule,
        recommended=recommended,
        target=target,
        show_key=show_key,
        findings=findings,
    )
    return Advice(
        lines=len(accesses),
        storage_lines=len(accesses) - sample.loaded,
        distinct_keys=len(sample.keys),
        total_load=sample.total,
        time_axis=sample.axis,
        window_edges=sample.edges,
        window_choice=sample.choice,
        tablets=sample.t_count,
        target=target,
        scan_limit=scan_limit,
        simulations=tuple(sims),
        recommended=recommended,
        rule_of_thumb=rule,
        rule_of_thumb_ratio=ratio,
        count_unit=sample.unit,
        count_unit_choice="auto" if count_unit is None else "given",
        events=sample.events,
        noise_floor=sample.floor.mean,
        noise_floor_high=sample.floor.high,
        resamples=resamples,
        seed=seed,
        hot_key_floor=hot_key_floor,
        top_keys=top_keys,
        findings=tuple(findings),
    )


# -- stages of advise() ----------------------------------------------------------


def _check_arguments(
    accesses: Sequence[Access],
    *,
    tablets: int,
    target: float,
    windows: int | None,
    scan_limit: int,
    count_unit: float | None,
    resamples: int,
    candidates: Sequence[int],
) -> None:
    """Refuse bad arguments and samples (each :class:`ValueError` names the value)."""
    if not accesses:
        raise ValueError("the sample is empty")
    if tablets < 1:
        raise ValueError(f"tablets must be >= 1, got {tablets}")
    if not target > 1.0:
        raise ValueError(f"target must be > 1 (max/mean is never below 1), got {target}")
    if windows is not None and windows < 1:
        raise ValueError(f"windows must be >= 1, got {windows}")
    if scan_limit < 1:
        raise ValueError(f"scan_limit must be >= 1, got {scan_limit}")
    if count_unit is not None and not (count_unit > 0 and math.isfinite(count_unit)):
        raise ValueError(f"count_unit must be a finite number > 0, got {count_unit}")
    if resamples < 20:
        raise ValueError(f"resamples must be >= 20, got {resamples}")
    if any(n < 1 for n in candidates):
        raise ValueError(f"candidates must be >= 1, got {list(candidates)}")
    for a in accesses:
        if not a.key:
            raise ValueError("row keys must not be empty")
        if not (a.count >= 0 and math.isfinite(a.count)):
            raise ValueError(f"counts must be finite and >= 0, got {a.count} for {a.key!r}")
    # Count-0 lines list keys for storage only; they need no time.
    loaded = [a for a in accesses if a.count > 0]
    timed = sum(a.time is not None for a in loaded)
    if 0 < timed < len(loaded):
        raise ValueError("either every access has a time or none has (count-0 lines may omit it)")
    if math.fsum(a.count for a in accesses) <= 0:
        raise ValueError("the sample carries no load (every count is 0)")


@final
@dataclass(frozen=True, slots=True)
class _Sample:
    """The sample aggregated once: keys, tablets, windows and load per (key, window part).

    Every simulated layout re-buckets :attr:`cells`; the findings read the rest.
    """

    #: The accesses as given (findings look at their order and times).
    accesses: Sequence[Access]
    #: Accesses with a positive count.
    loaded: int
    total: float
    axis: TimeAxis
    positions: Sequence[float]
    #: Distinct keys, sorted.
    keys: list[bytes]
    t_count: int
    sizes: list[int]
    unit: float
    events: float
    choice: WindowChoice
    w_count: int
    edges: tuple[float, ...]
    #: Each window is cut in this many parts, so that shifted windows can be summed too.
    phases: int
    #: Load per (key index, window part).
    cells: dict[tuple[int, int], float]
    key_load: list[float]
    window_load: list[float]
    floor: NoiseFloor

    @classmethod
    def of(
        cls,
        accesses: Sequence[Access],
        *,
        tablets: int,
        target: float,
        windows: int | None,
        ordered: bool,
        count_unit: float | None,
        findings: list[Finding],
    ) -> _Sample:
        """Aggregate a checked sample; notes about its time axis go to ``findings``."""
        loaded = sum(a.count > 0 for a in accesses)
        total = math.fsum(a.count for a in accesses)
        axis, positions = _time_axis(accesses, ordered, findings)
        keys = sorted({a.key for a in accesses})
        t_count = min(tablets, len(keys))
        sizes = _tablet_sizes(len(keys), t_count)
        _find_few_keys(len(keys), tablets, sizes, target, findings)
        index = {k: i for i, k in enumerate(keys)}
        key_of = [index[a.key] for a in accesses]
        unit = count_unit if count_unit is not None else _count_unit([a.count for a in accesses])

        choice: WindowChoice
        if axis == "none" or max(positions) == min(positions):
            choice, w_count = "single", 1
        elif windows is not None:
            choice, w_count = "given", windows
        else:
            choice = "auto"
            w_count = _choose_windows(accesses, positions, key_of, sizes, total, unit)
        edges = _windows(positions, w_count)[0]
        if axis == "order" and not ordered and w_count > 1:
            findings.append(
                Finding(
                    "order-as-time",
                    "note",
                    f"no time column: the line order is the time axis, cut into {w_count} "
                    f"windows of about {loaded / w_count:,.0f} lines; if the lines are not "
                    "in arrival order, pass --windows 1 (or --ordered to confirm that they are)",
                )
            )
        phases = _PHASES if w_count > 1 else 1
        part_of = _windows(positions, w_count * phases)[1]
        cells: dict[tuple[int, int], float] = {}
        key_load = [0.0] * len(keys)
        window_load = [0.0] * w_count
        for a, i, part in zip(accesses, key_of, part_of, strict=True):
            cells[i, part] = cells.get((i, part), 0.0) + a.count
            key_load[i] += a.count
            window_load[part // phases] += a.count
        floor = uniform_floor([_settled(load / unit) for load in window_load], t_count, sizes)
        return cls(
            accesses=accesses,
            loaded=loaded,
            total=total,
            axis=axis,
            positions=positions,
            keys=keys,
            t_count=t_count,
            sizes=sizes,
            unit=unit,
            events=total / unit,
            choice=choice,
            w_count=w_count,
            edges=edges,
            phases=phases,
            cells=cells,
            key_load=key_load,
            window_load=window_load,
            floor=floor,
        )

    def key_window_load(self) -> dict[tuple[int, int], float]:
        """Load per (key index, window)."""
        out: dict[tuple[int, int], float] = {}
        phases = self.phases
        for (i, part), load in self.cells.items():
            out[i, part // phases] = out.get((i, part // phases), 0.0) + load
        return out


def _simulate_candidates(
    sample: _Sample,
    todo: Sequence[int],
    scheme_for: Callable[[int], SaltScheme],
    cutoff: CutoffPolicy | None,
    ends: _WriteEnds | None,
    *,
    scan_limit: int,
    target: float,
    resamples: int,
    seed: int,
    progress: Callable[[int, int], None] | None,
) -> list[Simulation]:
    """Simulate every bucket count of ``todo`` (ascending, 1 first: unsalted)."""
    sims: list[Simulation] = []
    for done, n in enumerate(todo, 1):
        scheme: SaltScheme | None = None
        if n == 1:
            physical, sub_scans = sample.keys, 1
        else:
            scheme = scheme_for(n)
            if cutoff is None:
                physical = [scheme.salt_key(k) for k in sample.keys]
            else:  # legacy keys stay where they are, unsalted
                place = Layout(scheme, cutoff).locate
                physical = [place(k)[1] for k in sample.keys]
            # hash="java" has 2N-1 prefixes, and a scan reads every one of them.
            sub_scans = len(scheme.prefixes)
        sim = _simulate(
            n,
            sub_scans,
            physical,
            sample.cells,
            sample.w_count,
            sample.phases,
            sample.t_count,
            sample.total,
            scan_limit,
            unit=sample.unit,
            target=target,
            floor_high=sample.floor.high,
            resamples=resamples,
            seed=seed,
        )
        if ends is not None:
            level = ends.level(scheme, sample.keys, sample.t_count)
            sim = dataclasses.replace(sim, write_end_level=level)
        sims.append(sim)
        if progress is not None:
            progress(done, len(todo))
    return sims


def _recommend(sims: Sequence[Simulation], target: float) -> int | None:
    """The smallest N that meets the target as measured and where new keys are written.

    A measure averaged over time windows cannot see that every new key of a
    key space that rises with time goes to its end: when keys rise (the
    ``monotonic-keys`` warning, which sets :attr:`Simulation.write_end_level`),
    a layout must also keep that level at or below the target, and N = 1 never
    qualifies, whatever the measure says: one tablet takes every new row.
    """
    for sim in sims:
        if not sim.meets_target:
            continue
        if sim.write_end_level is not None and sim.buckets == 1:
            continue
        if sim.write_end_level is not None and not _at_most(sim.write_end_level, target):
            continue
        return sim.buckets
    return None


def _diagnose(
    sample: _Sample,
    sims: list[Simulation],
    *,
    rising: Sequence[Finding],
    widest: SaltScheme | None,
    key_window: dict[tuple[int, int], float],
    top_keys: tuple[tuple[bytes, float], ...],
    hot_key_floor: float,
    rule: int,
    recommended: int | None,
    target: float,
    show_key: Callable[[bytes], str],
    findings: list[Finding],
) -> None:
    """Add what the numbers alone do not say to ``findings`` (``rising``: the monotonic ones)."""
    accesses, keys, t_count = sample.accesses, sample.keys, sample.t_count
    widest_n = max((sim.buckets for sim in sims), default=1)
    _find_hot_key(top_keys, len(keys), t_count, target, show_key, findings, widest_n, len(accesses))
    findings.extend(rising)
    if sample.w_count == 1:
        _find_no_load(
            sample.key_load,
            sample.unit,
            storage=any(a.count == 0 for a in accesses),
            findings=findings,
        )
    if sample.choice == "auto" and sample.w_count == 1:
        _find_one_window(sample.loaded, sample.events, t_count, findings)
    # Chance alone, without the rounding of whole keys into tablets (few-keys says that):
    # only this part shrinks with a larger sample.
    chance = uniform_floor([_settled(load / sample.unit) for load in sample.window_load], t_count)
    _find_small_sample(
        chance.high,
        sample.loaded,
        sample.events,
        sample.unit,
        sample.w_count,
        t_count,
        target,
        findings,
    )
    _find_inconclusive(sims, recommended, target, sample.loaded, findings)
    _find_wide_hot_range(sims[0], keys, rule, recommended, show_key, findings)
    if recommended is None:
        # Salted layouts that meet the target as measured: only the ends stopped them.
        blocked = [s for s in sims if s.meets_target and s.buckets > 1]
        if blocked and rising:
            best_end = min(blocked, key=lambda s: s.write_end_level or 0.0)
            why = (
                f"keys that rise with time keep the tablets at their ends at "
                f"{best_end.write_end_level or 0.0:.2f} or more (N={best_end.buckets}; see "
                f"{rising[0].code}): try larger --candidates, or lead the key with a field "
                "that does not grow"
            )
        elif not _at_most(hot_key_floor, target):
            why = f"single keys keep max/mean near {hot_key_floor:.2f} whatever N is (see hot-key)"
        elif not _at_most(chance.high, target):
            why = "the sample is too small to tell (see small-sample)"
        elif stuck := _one_bucket_share(sims[0], keys, key_window, widest, show_key):
            why = stuck
        else:
            why = "try larger --candidates or a key part that spreads the load"
        best = min(sims, key=lambda s: s.corrected)
        findings.append(
            Finding(
                "target-unreachable",
                "warning",
                f"no candidate brings max/mean to {target:g} or below (best: N={best.buckets} "
                f"at {best.corrected:.2f}, {_percent(CONFIDENCE)} interval {best.low:.2f}-"
                f"{best.high:.2f}); {why}",
            )
        )


# -- simulation ----------------------------------------------------------------


def _simulate(
    buckets: int,
    sub_scans: int,
    physical: Sequence[bytes],
    cells: dict[tuple[int, int], float],
    w_count: int,
    phases: int,
    t_count: int,
    total: float,
    scan_limit: int,
    *,
    unit: float,
    target: float,
    floor_high: float,
    resamples: int,
    seed: int,
) -> Simulation:
    d = len(physical)
    order = sorted(range(d), key=physical.__getitem__)
    tablet_of = [0] * d
    for rank, i in enumerate(order):
        tablet_of[i] = rank * t_count // d
    parts = [[0.0] * t_count for _ in range(w_count * phases)]
    for (i, part), load in cells.items():
        parts[part][tablet_of[i]] += load
    loads = [_sum_rows(parts[w * phases : (w + 1) * phases], t_count) for w in range(w_count)]
    max_sum = 0.0
    hot_w, hot_t, hot_load = 0, 0, -1.0
    for w, row in enumerate(loads):
        t = max(range(t_count), key=row.__getitem__)
        max_sum += row[t]
        if row[t] > hot_load:
            hot_w, hot_t, hot_load = w, t, row[t]
    window_total = math.fsum(loads[hot_w])
    # Tablet t holds the ranks r with r * T // d == t: from ceil(t * d / T).
    first_rank = [-(-t * d // t_count) for t in range(t_count)]
    last_rank = (first_rank[hot_t + 1] if hot_t + 1 < t_count else d) - 1
    hottest = HotSpot(
        tablet=hot_t,
        window=hot_w,
        first_key=physical[order[first_rank[hot_t]]],
        last_key=physical[order[last_rank]],
        ratio=hot_load * t_count / window_total if window_total else 0.0,
        share=hot_load / window_total if window_total else 0.0,
    )
    max_mean = t_count * max_sum / total
    # The seed depends on N only, so adding a candidate does not move the others.
    est = estimate(
        [[_settled(load / unit) for load in row] for row in loads if any(row)],
        t_count,
        resamples,
        seed * 1_000_003 + buckets,
    )
    # A moving hot spot crosses tablets at moments that fall differently into windows
    # shifted by a part: that spread is uncertainty too (about 0 for a standing one).
    spread = _Z95 * _shifted_spread(parts, phases, t_count)
    low = max(1.0, est.corrected - math.hypot(est.corrected - est.low, spread))
    high = est.corrected + math.hypot(est.high - est.corrected, spread)
    verdict: Verdict
    if _at_most(max_mean, floor_high):
        verdict = "uniform"
    elif _at_most(high, target):
        verdict = "meets"
    elif not _at_most(low, target):
        verdict = "above"
    else:
        verdict = "unclear"
    return Simulation(
        buckets=buckets,
        max_mean=max_mean,
        corrected=est.corrected,
        low=low,
        high=high,
        verdict=verdict,
        hottest=hottest,
        loads=tuple(tuple(row) for row in loads),
        tablet_first_keys=tuple(physical[order[r]] for r in first_rank),
        sub_scans=sub_scans,
        naive_limit_rows=sub_scans * scan_limit,
        # saltedtable asks each bucket for its share first (FanOut's first page).
        paged_limit_rows=sub_scans * math.ceil(scan_limit / sub_scans),
    )


def _time_axis(
    accesses: Sequence[Access], ordered: bool, findings: list[Finding]
) -> tuple[TimeAxis, list[float]]:
    """Pick the time axis and return each access's position on it.

    Count-0 lines (storage only) carry no load: they take the first position of
    the axis, so they neither stretch it nor count as lines of a log.
    """
    loaded = [a for a in accesses if a.count > 0]
    if loaded[0].time is not None:
        start = min(a.time for a in loaded if a.time is not None)
        return "time", [a.time if a.count > 0 and a.time is not None else start for a in accesses]
    positions, seen = [], 0
    for a in accesses:
        positions.append(float(seen if a.count > 0 else 0))
        seen += a.count > 0
    if ordered:
        return "order", positions
    # One line per key with counts that differ: totals (an export sorted by count, say),
    # whose line order says nothing about time.
    if len({a.key for a in loaded}) == len(loaded) and len({a.count for a in loaded}) > 1:
        why, what = "each key has one line, with counts that differ", "per-key totals"
    elif all(loaded[i].key <= loaded[i + 1].key for i in range(len(loaded) - 1)):
        why, what = "the lines are sorted by key", "a key dump"
    else:
        return "order", positions
    findings.append(
        Finding(
            "no-time",
            "note",
            f"no time column and {why}: read as {what} (one time window); if the lines are in "
            "arrival order, pass --ordered",
        )
    )
    return "none", positions


def _windows(positions: Sequence[float], w_count: int) -> tuple[tuple[float, ...], list[int]]:
    """Equal spans of time (Key Visualizer's columns); return the edges and each line's window."""
    lo, hi = min(positions), max(positions)
    if w_count == 1 or hi == lo:
        return (lo, hi), [0] * len(positions)
    span = (hi - lo) / w_count
    edges = (*(lo + span * w for w in range(w_count)), hi)
    return edges, [min(w_count - 1, int((p - lo) / span)) for p in positions]


def _choose_windows(
    accesses: Sequence[Access],
    positions: Sequence[float],
    key_of: Sequence[int],
    sizes: Sequence[int],
    total: float,
    unit: float,
) -> int:
    """The coarsest of 1, 2, 4, ... windows that still show the unsalted hot spot.

    Finer windows resolve a hot spot that moves (the end of a ``tenant#time``
    range) but put fewer accesses in each cell, so chance adds more to every
    max/mean. For each window count the unsalted max/mean less its noise floor
    is the signal; the coarsest count within reach of the best signal wins. The
    counts nest (each window of W is two of 2W), so one pass at the finest
    count gives them all.
    """
    t_count, distinct = len(sizes), sum(sizes)
    per_tablet = total / unit / t_count
    finest = 1
    while finest * 2 <= MAX_WINDOWS and _at_most(MIN_CELL_EVENTS, per_tablet / (finest * 2)):
        finest *= 2
    if finest == 1:
        return 1
    fine_of = _windows(positions, finest)[1]
    fine = [[0.0] * t_count for _ in range(finest)]
    for a, i, w in zip(accesses, key_of, fine_of, strict=True):
        fine[w][i * t_count // distinct] += a.count
    signals: dict[int, float] = {}
    w_count = finest
    while w_count >= 1:
        step = finest // w_count
        rows = [
            [math.fsum(fine[f][t] for f in range(w * step, (w + 1) * step)) for t in range(t_count)]
            for w in range(w_count)
        ]
        floor = uniform_floor([_settled(math.fsum(row) / unit) for row in rows], t_count, sizes)
        measured = t_count * math.fsum(max(row) for row in rows) / total
        # A key dump of distinct keys splits evenly, below the floor: count it as 1.
        signals[w_count] = max(1.0, measured - (floor.mean - 1.0))
        w_count //= 2
    best = max(signals.values())
    enough = best - (1.0 - _KEEP_SIGNAL) * (best - 1.0) - _SIGNAL_SLACK
    return min(w for w, signal in signals.items() if _at_most(enough, signal))


def _tablet_sizes(distinct: int, t_count: int) -> list[int]:
    """Keys in each tablet when ``distinct`` sorted keys are cut into ``t_count`` equal ones."""
    edges = [-(-t * distinct // t_count) for t in range(t_count + 1)]  # ceil(t * D / T)
    return [b - a for a, b in itertools.pairwise(edges)]


def _sum_rows(rows: Sequence[Sequence[float]], width: int) -> list[float]:
    return [math.fsum(row[t] for row in rows) for t in range(width)]


def _shifted_spread(parts: Sequence[Sequence[float]], phases: int, t_count: int) -> float:
    """Standard deviation of max/mean over windows shifted by 0, 1, ... phases-1 parts.

    Shifted windows leave a part of a window at each end; only the whole windows count.
    """
    if phases == 1:
        return 0.0
    values = []
    for shift in range(phases):
        top = load = 0.0
        for start in range(shift, len(parts) - phases + 1, phases):
            row = _sum_rows(parts[start : start + phases], t_count)
            top += max(row)
            load += math.fsum(row)
        if load > 0:
            values.append(t_count * top / load)
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def _settled(value: float) -> float:
    """``value`` to 9 decimals: the last bits of float arithmetic never decide anything.

    Scaling every count by a constant changes sums in their last bits; comparing
    settled values keeps every verdict the same.
    """
    return round(value, 9)


def _at_most(a: float, b: float) -> bool:
    """``a <= b``, compared at 9 decimals (see :func:`_settled`)."""
    return _settled(a) <= _settled(b)


def _round_up(value: float) -> int:
    """``value`` rounded up to two significant digits (a sample size to suggest)."""
    if value <= 0 or not math.isfinite(value):
        return 0
    magnitude = 10 ** max(0, math.floor(math.log10(value)) - 1)
    return int(math.ceil(value / magnitude) * magnitude)


def _percent(share: float) -> str:
    return f"{share:.0%}"


# -- findings --------------------------------------------------------------------


def _find_few_keys(
    distinct: int, tablets: int, sizes: Sequence[int], target: float, findings: list[Finding]
) -> None:
    """Warn when whole keys are too coarse for the tablets: fewer keys, or uneven tablets."""
    if len(sizes) < tablets:
        findings.append(
            Finding(
                "few-keys",
                "warning",
                f"only {distinct} distinct keys: simulated {len(sizes)} tablets instead of "
                f"{tablets}; a sample this small says little about a real table",
            )
        )
        return
    rounding = max(sizes) * len(sizes) / distinct
    # Whole keys alone take half the way to the target: worth saying why.
    if _at_most(rounding, 1.0 + (target - 1.0) / 2):
        return
    findings.append(
        Finding(
            "few-keys",
            "warning",
            f"only {distinct} distinct keys on {tablets} tablets: tablets hold {min(sizes)} or "
            f"{max(sizes)} keys, so a load spread evenly over the keys shows max/mean "
            f"{rounding:.2f} from that rounding alone (the noise floor includes it), and no N "
            "changes it; a sample this small says little about a real table",
        )
    )


def _find_one_window(lines: int, events: float, t_count: int, findings: list[Finding]) -> None:
    """Warn when keys rise with time but the sample allowed only one automatic window."""
    if not {f.code for f in findings} & _MONOTONIC_CODES:
        return
    # Enough accesses for 8 windows of MIN_CELL_EVENTS a tablet.
    needed = 8 * MIN_CELL_EVENTS * t_count * lines / events
    findings.append(
        Finding(
            "one-window",
            "warning",
            f"the keys rise with time, so the hot spot moves, but at about "
            f"{events / t_count:,.0f} accesses a tablet the sample is too small to cut into "
            f"windows of {MIN_CELL_EVENTS} a tablet: one window averages the moving end "
            "away, and every max/mean above understates it. Try --windows 4 (noisier), or "
            f"a sample of about {_round_up(needed):,} lines",
        )
    )


def _find_small_sample(
    chance_high: float,
    lines: int,
    events: float,
    unit: float,
    w_count: int,
    t_count: int,
    target: float,
    findings: list[Finding],
) -> None:
    """Warn when chance alone could take a uniform workload's max/mean above the target."""
    if _at_most(chance_high, target):
        return
    # Noise shrinks as 1/sqrt(events): how many lines bring the floor to the target.
    needed = lines * ((chance_high - 1.0) / (target - 1.0)) ** 2
    weighted = f" (counts read in units of {unit:g})" if unit != 1.0 else ""
    findings.append(
        Finding(
            "small-sample",
            "warning",
            f"the sample counts as {events:,.0f} accesses{weighted}, about "
            f"{events / (w_count * t_count):,.0f} per tablet per window ({t_count} tablets x "
            f"{w_count} window{'s' * (w_count != 1)}): a perfectly uniform workload sampled "
            f"like this shows max/mean up to {chance_high:.2f} by chance, above the target "
            f"{target:g}, so the sample cannot show which N meets it; use about "
            f"{_round_up(needed):,} lines, or fewer --tablets or --windows",
        )
    )


def _find_inconclusive(
    sims: Sequence[Simulation],
    recommended: int | None,
    target: float,
    lines: int,
    findings: list[Finding],
) -> None:
    """Say when the sample cannot tell whether a candidate below the recommendation would do."""
    below = [s for s in sims if recommended is None or s.buckets < recommended]
    unclear = [s for s in below if s.verdict == "unclear"]
    if not unclear:
        return
    closest = unclear[-1]
    after = (
        f"N={recommended}"
        if recommended is not None
        else "the larger candidates (none of which meets it either)"
    )
    half = max(closest.high - closest.corrected, closest.corrected - closest.low)
    gap = abs(closest.corrected - target)
    if gap > 1e-9:
        more = f"about {_round_up(lines * (half / gap) ** 2):,} lines would tell"
    else:
        more = "its max/mean sits on the target, so only a much larger sample would tell"
    findings.append(
        Finding(
            "inconclusive",
            "note",
            f"N={closest.buckets} might also meet the target: its max/mean, "
            f"{closest.corrected:.2f} ({_percent(CONFIDENCE)} interval {closest.low:.2f}-"
            f"{closest.high:.2f}), straddles {target:g}. The sample is too small to separate "
            f"N={closest.buckets} from {after}; {more}",
        )
    )


def _find_no_load(
    key_load: Sequence[float], unit: float, *, storage: bool, findings: list[Finding]
) -> None:
    """In one window, say when the tablets' loads can only follow their key counts.

    Tablets are cut from the sample's keys, to hold equal numbers of them. When
    every key carries the same load (a key dump, a log of keys seen once) the
    tablets' loads are equal by construction. When most keys were seen once or
    twice, many more were never seen, and tablets cut from the keys seen follow
    the sampled load: a hot range looks as wide in storage as its share of the
    accesses.
    """
    loads = Counter(_settled(load / unit) for load in key_load)
    distinct = len(key_load)
    common, count = loads.most_common(1)[0]
    if count >= _SAME_LOAD * distinct:
        findings.append(
            Finding(
                "no-load-info",
                "warning",
                f"every key carries the same load ({common:g} access{'es' * (common != 1)}) in "
                "one time window: tablets are cut to hold equal numbers of keys, so every "
                "layout measures max/mean near 1 by construction. The sample shows storage, "
                "not where the load falls; give accesses with times (or --windows W for a log "
                "in arrival order) or per-key access counts",
            )
        )
        return
    if storage:
        return  # count-0 lines list the keys the sample did not see
    once, twice = loads.get(1.0, 0), loads.get(2.0, 0)
    # Chao1: a lower-bound estimate of the keys never seen, from those seen once and twice.
    # It assumes many rarely seen keys, so a few stray ones in an export do not count.
    unseen = once * (once - 1) / (2 * (twice + 1))
    if min(once, unseen) < _UNSEEN_SHARE * distinct:
        return
    findings.append(
        Finding(
            "unseen-keys",
            "warning",
            f"{once:,} of the {distinct:,} keys appear once and {twice:,} twice: by the Chao1 "
            f"estimate about {unseen:,.0f} or more keys exist that the sample never saw. "
            "Tablets are cut from the keys seen, so keys too cold to be sampled are missing "
            "from storage, and the layout may look more even than the table's. List every key "
            "as a key,0 line next to the accesses, or give per-key counts of all keys",
        )
    )


def _find_wide_hot_range(
    unsalted: Simulation,
    keys: Sequence[bytes],
    rule: int,
    recommended: int | None,
    show_key: Callable[[bytes], str],
    findings: list[Finding],
) -> None:
    """Explain a recommendation far above the rule of thumb by a hot range wider than a tablet.

    Salting with N hands each bucket a 1/N slice of every range, in key order, so
    a hot range k tablets wide still fills whole tablets in each bucket until N
    nears k: the load per tablet falls only then. The rule of thumb assumes k = 1.
    """
    if recommended is None or rule < 2 or recommended < 2 * rule:
        return
    hot = unsalted.hottest
    row = unsalted.loads[hot.window]
    first = last = hot.tablet
    # The hot range: the tablets around the hottest that carry at least half its load.
    while first > 0 and row[first - 1] >= row[hot.tablet] / 2:
        first -= 1
    while last + 1 < len(row) and row[last + 1] >= row[hot.tablet] / 2:
        last += 1
    span = last - first + 1
    if span < 2:
        return
    d, t_count = len(keys), len(row)
    start = keys[-(-first * d // t_count)]  # ceil: the first key of tablet ``first``
    end = keys[-(-(last + 1) * d // t_count) - 1]  # the last key of tablet ``last``
    findings.append(
        Finding(
            "wide-hot-range",
            "note",
            f"N = {recommended} is far above the rule of thumb (N ~ {rule}) because the hot "
            f"range spans about {span} of the {t_count} tablets (from {show_key(start)} to "
            f"{show_key(end)}): salting gives each bucket a slice of that range that "
            f"still fills whole tablets until N is near {span}, and only then does the load "
            "per tablet fall. The rule of thumb assumes the hot range is one tablet; if your "
            "table has fewer, larger tablets, pass --tablets to match",
        )
    )


def _key_tablet_level(share: float, distinct: int, t_count: int) -> float:
    """max/mean of the tablet holding a key with ``share`` of the load, the rest spread evenly.

    The tablet holds the key and D/T - 1 of the other D - 1 keys, each with an
    equal part of the rest: ``T * share + (D - T) / (D - 1) * (1 - share)``. That
    is 1 for a key with its fair share 1/D, and about ``1 + (T - 1) * share``
    when keys far outnumber tablets.
    """
    if distinct <= 1 or t_count <= 1:
        return 1.0
    return t_count * share + (distinct - t_count) / (distinct - 1) * (1.0 - share)


def _find_hot_key(
    top_keys: Sequence[tuple[bytes, float]],
    distinct: int,
    t_count: int,
    target: float,
    show_key: Callable[[bytes], str],
    findings: list[Finding],
    buckets: int = 1,
    accesses: int = 0,
) -> None:
    key, share = top_keys[0]
    level = _key_tablet_level(share, distinct, t_count)
    if _at_most(level, target):
        return
    text = (
        f"one key, {show_key(key)}, carries {share:.0%} of the load: the tablet holding "
        f"it gets about {level:.1f}x the mean (the key and a fair share of the rest) for "
        "every N, because salting puts a whole key (or key part) in one bucket. "
    )
    proposal = None
    if buckets >= 2 and target > 1:
        # The share's 95% interval (a binomial proportion over the sampled accesses): its
        # high end gives the K to be safe with, as N's interval does for N.
        spread = 1.96 * math.sqrt(share * (1 - share) / accesses) if accesses else 0.0
        proposal = propose_split(
            "row",
            key,
            share,
            buckets=buckets,
            tablets=t_count,
            distinct=distinct,
            target=target,
            share_high=min(1.0, share + spread),
        )
    if proposal is not None:
        reach = "brings its tablet to" if proposal.meets else "gets its tablet only down to"
        high = (
            f"; K={proposal.k_high} for the high end of the share's 95% interval "
            f"({min(1.0, share + spread):.0%})"
            if proposal.k_high != proposal.k
            else ""
        )
        text += (
            f"Split it over K={proposal.k} sub-rows, which {reach} about "
            f"{proposal.level:.2f}x the mean{high}: `{proposal.command}` (a key part: "
            "--part VALUE; see docs/hot-keys.md). Or batch or aggregate its writes, or keep "
            "it in a table of its own"
        )
    else:
        text += (
            "Spread that key: split it (saltedtable split, docs/hot-keys.md), batch or "
            "aggregate its writes, or keep it in a table of its own"
        )
    findings.append(Finding("hot-key", "warning", text))


def _one_bucket_share(
    unsalted: Simulation,
    keys: Sequence[bytes],
    key_window: dict[tuple[int, int], float],
    scheme: SaltScheme | None,
    show_key: Callable[[bytes], str],
) -> str | None:
    """Why no N helps when the hottest unsalted tablet's load all hashes to one bucket, or None.

    A key part (a tenant's rows under ``fields(1)``) sends every key of one part
    to one bucket: a hot spot made of one part stays whole whatever N is.
    """
    if scheme is None:
        return None
    hot = unsalted.hottest
    d, t_count = len(keys), len(unsalted.tablet_first_keys)
    ranks = range(-(-hot.tablet * d // t_count), -(-(hot.tablet + 1) * d // t_count))
    loads = {i: key_window.get((i, hot.window), 0.0) for i in ranks}
    cell = math.fsum(loads.values())
    if cell <= 0:
        return None
    per_bucket: dict[int, float] = {}
    for i, load in loads.items():
        bucket = scheme.bucket_of(keys[i])
        per_bucket[bucket] = per_bucket.get(bucket, 0.0) + load
    bucket, load = max(per_bucket.items(), key=lambda item: item[1])
    if load < _ONE_BUCKET * cell:
        return None
    busiest = max((i for i in loads if scheme.bucket_of(keys[i]) == bucket), key=loads.__getitem__)
    part = scheme.hashed_part(keys[busiest])
    what = "key" if part == keys[busiest] else "key part"
    return (
        f"{load / cell:.0%} of the hottest unsalted tablet's load hashes to one bucket "
        f"({what} {show_key(part)}), so no N splits it: hash a part of the key that varies "
        "within that load"
    )


def _leading_field(key: bytes) -> bytes:
    """The key up to its first byte that is not a letter or digit (``tenant7`` of ``tenant7#1``)."""
    for i, b in enumerate(key):
        if not (0x30 <= b <= 0x39 or 0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A):
            return key[:i]
    return key


def _leading_number(key: bytes) -> int | None:
    end = 0
    while end < len(key) and 0x30 <= key[end] <= 0x39:
        end += 1
    return int(key[:end]) if end else None


def _rising_share(values: Sequence[_T]) -> float | None:
    """Share of consecutive changes that go up (None: fewer than 3 changes)."""
    ups = downs = 0
    for a, b in itertools.pairwise(values):
        if a < b:
            ups += 1
        elif b < a:
            downs += 1
    return None if ups + downs < 3 else ups / (ups + downs)


def _overtaking_share(values: Sequence[_T], chunks: int) -> float:
    """How far later slices of ``values`` lie above earlier ones (1.0: strictly rising).

    For each pair of consecutive slices, the share of the later slice above the
    earlier slice's 90th percentile, averaged. Rising keys score near 1 even
    when concurrent lines are out of order; ``tenant#time`` keys score low even
    if one tenant dominates, because the other tenants lie on both sides.
    """
    n = len(values)
    slices = [sorted(values[c * n // chunks : (c + 1) * n // chunks]) for c in range(chunks)]
    shares = []
    for before, after in itertools.pairwise(slices):
        p90 = before[len(before) * 9 // 10]
        above = len(after) - bisect.bisect_right(after, p90)
        shares.append(above / len(after))
    return sum(shares) / len(shares)


@final
@dataclass(frozen=True, slots=True)
class _WriteEnds:
    """Where keys that rise with time (``monotonic-keys``) are written at any one moment.

    The rising lines (every line, or those led by a number) write their next row
    just after their newest key, in each bucket their keys hash to: the end of
    each bucket's slice. The other lines add their load where their keys are
    stored.

    Only for keys that rise as a whole: their ends sit at bucket boundaries,
    whatever the tablets. The ends of ``tenant#time`` fields lie anywhere in a
    tablet, so a moment's picture of them would turn on where the model happens
    to cut tablets; the time windows measure those.
    """

    #: The rising key written last, the rising lines' load and their distinct keys.
    newest: bytes
    load: float
    members: frozenset[bytes]
    #: Load of the other lines, per key.
    other: dict[bytes, float]
    total: float

    def level(self, scheme: SaltScheme | None, keys: Sequence[bytes], t_count: int) -> float:
        """max/mean when each group takes its load at its ends (``scheme`` None: unsalted).

        The key space is cut into ``t_count`` equal tablets; each bucket holds an
        equal slice of it (what the hash gives a large table, and what a table
        split at every bucket prefix keeps), and within its slice the logical
        keys in the order of ``keys`` (the sample's distinct keys, sorted). So
        the ends of N <= T buckets never share a tablet, whatever the sample's
        small counts per bucket say.
        """
        d = len(keys)
        tablets = [0.0] * t_count
        if scheme is None:
            slots: dict[int, int] = {}
            n = 1
        else:
            order = sorted(scheme.bucket_ids, key=scheme.prefix)
            slots = {bucket: i for i, bucket in enumerate(order)}
            n = len(order)

        def add(slot: int, rank: float, load: float) -> None:
            # ``rank`` keys of the slice lie before the point: its tablet is the one
            # whose range (start, end] holds it, so a bucket's end stays in its tablet.
            where = (slot + rank / d) * t_count / n
            tablets[min(t_count - 1, max(0, math.ceil(where) - 1))] += load

        for key, load in self.other.items():
            slot = 0 if scheme is None else slots[scheme.bucket_of(key)]
            add(slot, bisect.bisect_left(keys, key) + 0.5, load)
        end = bisect.bisect_right(keys, self.newest)
        if scheme is None:
            add(0, end, self.load)
        else:
            # A key part that keeps the rising keys in one bucket keeps their end there;
            # else the hash sends new keys to every bucket alike.
            spread = set(slots)
            seen = {scheme.bucket_of(k) for k in itertools.islice(self.members, 64)}
            if len(seen) == 1 and {scheme.bucket_of(k) for k in self.members} == seen:
                spread = seen
            for bucket in spread:
                add(slots[bucket], end, self.load / len(spread))
        return t_count * max(tablets) / self.total if self.total else 0.0


def _write_ends(accesses: Sequence[Access], rising: Sequence[int]) -> _WriteEnds:
    """The write ends of the lines ``rising`` (indices of lines whose keys rise with time).

    The newest key is that of the last line in time: for unpadded sequence
    numbers (``10-x`` sorts before ``9-x``) that is where new keys go, not the
    largest key.
    """
    inside = set(rising)
    members = frozenset(accesses[i].key for i in rising)
    other: dict[bytes, float] = {}
    for i, a in enumerate(accesses):
        if i not in inside and a.count > 0:
            other[a.key] = other.get(a.key, 0.0) + a.count
    return _WriteEnds(
        newest=accesses[rising[-1]].key,
        load=math.fsum(accesses[i].count for i in rising),
        members=members,
        other=other,
        total=math.fsum(a.count for a in accesses),
    )


def _find_monotonic(
    accesses: Sequence[Access],
    axis: TimeAxis,
    positions: Sequence[float],
    scheme: SaltScheme | None,
    show_key: Callable[[bytes], str],
    findings: list[Finding],
) -> _WriteEnds | None:
    """Warn when keys rise with time, as a whole or within each leading field.

    Returns:
        Where the keys are written when they rise as a whole (``monotonic-keys``), else None.
    """
    # Count-0 lines are storage, not writes: they say nothing about time.
    lines = [i for i, a in enumerate(accesses) if a.count > 0]
    if axis == "none" or len(lines) < 4 * _MONOTONIC_CHUNKS:
        return None
    in_time = sorted(lines, key=positions.__getitem__)
    by_time = [accesses[i].key for i in in_time]
    # Slices of time, not neighbours: concurrent lines in one second come in any
    # order, but the keys of later seconds are still larger.
    rising = _overtaking_share(by_time, _MONOTONIC_CHUNKS)
    first, last, what = by_time[0], by_time[-1], "key"
    group = in_time
    if rising < _MONOTONIC_SHARE:
        # Keys led by a number (epoch times, sequences, ISO dates), even when
        # they are only part of the traffic: compare them as numbers (unpadded
        # sequences do not sort as bytes) and as bytes (2024-05-01T...).
        group = [i for i in in_time if accesses[i].key[:1].isdigit()]
        led = [accesses[i].key for i in group]
        if len(led) >= max(4 * _MONOTONIC_CHUNKS, _MONOTONIC_MIN_SHARE * len(by_time)):
            numbers = [n for k in led if (n := _leading_number(k)) is not None]
            rising = max(
                _overtaking_share(numbers, _MONOTONIC_CHUNKS),
                _overtaking_share(led, _MONOTONIC_CHUNKS),
            )
            led_share = len(led) / len(by_time)
            first, last = led[0], led[-1]
            what = "leading number"
            if led_share < 0.9:
                what += f" (of {led_share:.0%} of the lines)"
    if rising >= _MONOTONIC_SHARE:
        findings.append(
            Finding(
                "monotonic-keys",
                "warning",
                f"the {what} rises with time ({show_key(first)} ... "
                f"{show_key(last)}): new rows go to the end of the key space, so one "
                "tablet takes those writes whatever its size. Salting with N "
                "gives N ends (about T/N hot tablets of T); better, lead the key with a "
                "field that does not grow (tenant, user, a hash) and put the time after it",
            )
        )
        return _write_ends(accesses, group)  # in time order
    # Within each leading field (tenant#timestamp): each field's writes go to
    # its own end of range; a busy field makes that end a hot tablet.
    groups: dict[bytes, list[bytes]] = {}
    for key in by_time:
        groups.setdefault(_leading_field(key), []).append(key)
    if len(groups) < 2:
        return None
    rising_lines = 0
    example = b""
    for field, keys in groups.items():
        share = _rising_share(keys) if len(keys) >= 8 else None
        if share is not None and share >= _MONOTONIC_SHARE:
            rising_lines += len(keys)
            if not example or len(keys) > len(groups[example]):
                example = field
    if rising_lines >= 0.5 * len(by_time):
        shown = show_key(example)
        if scheme is not None and len({scheme.bucket_of(k) for k in groups[example]}) == 1:
            # A key part that is the field itself keeps a field's rows in one bucket.
            salting = (
                f"with this key part, {shown}'s rows hash to one bucket, so salting does not "
                "split that end: hash a part that includes what follows the field"
            )
        else:
            salting = "salting splits each end into N"
        findings.append(
            Finding(
                "monotonic-within-prefix",
                "note",
                f"within each leading field (e.g. {shown}) keys rise with time: each field's "
                "new rows land at the end of its own range, so the busiest field's end is a "
                f"hot tablet; {salting}",
            )
        )
    return None
