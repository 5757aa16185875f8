"""Key Visualizer-style heat maps of an :class:`~saltedtable.advise.Advice`.

matplotlib is optional (saltedtable's ``plot`` extra) and imported only
when a heat map is drawn. The figure is rendered with the Agg canvas directly,
so neither pyplot's global state nor a display is touched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from .._scheme.salt import format_key
from .model import Advice, Simulation

__all__ = ["render_heatmap"]

_KEY_LABEL_CHARS = 26
_Y_TICKS = 8
_X_TICKS = 6


def _relative(sim: Simulation, tablets: int) -> list[list[float]]:
    """``[tablet][window]``: each cell's load over the mean tablet's load in its window."""
    rows = [[0.0] * len(sim.loads) for _ in range(tablets)]
    for w, window in enumerate(sim.loads):
        total = sum(window)
        for t, load in enumerate(window):
            rows[t][w] = load * tablets / total if total else 0.0
    return rows


def _clip(text: str) -> str:
    return text if len(text) <= _KEY_LABEL_CHARS else text[: _KEY_LABEL_CHARS - 1] + "~"


def _ticks(count: int, wanted: int) -> list[int]:
    if count <= wanted:
        return list(range(count))
    step = (count - 1) / (wanted - 1)
    return sorted({round(i * step) for i in range(wanted)})


def _time_label(value: float, scale: float | None, span: float, width: float) -> str:
    """A window's start as a clock time, rounded to a unit that is small next to ``width``.

    Windows run from the first timestamp to the last, so their edges fall
    between round times (a log of one hour from 16:00:00.0 to 16:59:58.4 has
    its second quarter start at 16:14:59.6): rounding shows 16:15, not 16:14:59.
    """
    if scale is None:
        return f"{value:.6g}"
    seconds = value / scale
    # Minutes once a window is 5 minutes or more (rounding moves a label a tenth of it).
    unit, form = (60.0, "%H:%M") if width / scale >= 300 else (1.0, "%H:%M:%S")
    if span / scale >= 86400:
        unit, form = 60.0, "%Y-%m-%d\n%H:%M"
    moment = datetime.fromtimestamp(round(seconds / unit) * unit, tz=UTC)
    return moment.strftime(form)


def render_heatmap(
    advice: Advice,
    buckets: int,
    path: str,
    *,
    show_key: Callable[[bytes], str] = format_key,
    time_scale: float | None = None,
    title: str | None = None,
) -> None:
    """Write a PNG: the unsalted layout and the one salted with ``buckets``, side by side.

    Key space runs down the y axis (one row per tablet, labelled with its first
    key), time along the x axis, and colour is a tablet's load relative to the
    mean tablet in that window, on one scale for both panels: 1 is a fair share.

    Args:
        advice: What :func:`~saltedtable.advise.advise` returned.
        buckets: The salted layout to show (must have been simulated).
        path: Where to write the PNG.
        show_key: How tick labels show a key.
        time_scale: Divisor from the time axis to epoch seconds, to label the
            x axis with clock times (None: plain numbers).
        title: The figure's title.

    Raises:
        KeyError: ``buckets`` was not simulated.
        OSError: The file cannot be written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure

    t_count = advice.tablets
    panels = [advice.simulation(1), advice.simulation(buckets)]
    matrices = [_relative(sim, t_count) for sim in panels]
    vmax = max(2.0, *(max(max(row) for row in m) for m in matrices))

    fig = Figure(figsize=(11.0, 5.6), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    # A square-root scale keeps a fair share (1x) visible next to a 15x hot spot.
    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=vmax)
    image = None
    edges = advice.window_edges
    w_count = advice.windows
    for ax, sim, matrix in zip(axes, panels, matrices, strict=True):
        image = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap="inferno", norm=norm)
        name = "unsalted" if sim.buckets == 1 else f"salted, N = {sim.buckets}"
        ax.set_title(
            f"{name}: max/mean {sim.max_mean:.2f} ({sim.corrected:.2f} corrected)", fontsize=12
        )
        y_ticks = _ticks(t_count, _Y_TICKS)
        ax.set_yticks(y_ticks, [_clip(show_key(sim.tablet_first_keys[t])) for t in y_ticks])
        ax.tick_params(axis="y", labelsize=8)
        ax.set_ylabel(f"key space: {t_count} tablets (first key of each)", fontsize=9)
        ax.set_xticks(*_x_ticks(advice.time_axis, edges, w_count, time_scale))
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel(_x_label(advice.time_axis, time_scale), fontsize=9)
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes), shrink=0.9, pad=0.01)
        bar.set_label("load / mean tablet load in the window", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.savefig(path, format="png")


def _x_ticks(
    axis: str, edges: Sequence[float], w_count: int, time_scale: float | None
) -> tuple[list[int], list[str]]:
    ticks = _ticks(w_count, _X_TICKS)
    if axis == "none":
        return ticks, ["all" for _ in ticks]
    span = edges[-1] - edges[0]
    starts = [edges[w] for w in ticks]
    if axis == "order":
        return ticks, [f"{int(s) + 1:,}" for s in starts]
    return ticks, [_time_label(s, time_scale, span, span / w_count) for s in starts]


def _x_label(axis: str, time_scale: float | None) -> str:
    if axis == "order":
        return "sample order (line where each window starts)"
    if axis == "none":
        return "no time axis"
    return "time (UTC, start of each window)" if time_scale else "time (start of each window)"
