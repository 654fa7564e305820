"""The report's charts, each drawn once with matplotlib and described by the facts a reader checks.

A chart is a PNG plus one `PanelFacts` per panel: its labels and scales, the data it drew (in data
coordinates), where that data sits on the value axis as a fraction of the axis (so "every series is
one vertical line at 0" is a number, not a look at pixels) and whether the legend covers the plot.
A chart with nothing to show is not drawn at all (`None`): the page says so in a line instead.
"""

from __future__ import annotations

import datetime as dt
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, MultipleLocator  # noqa: E402

# a series name ("level-3", "timer", "Orders") -> its legend label
Label = Callable[[str], str]
# (bucket start ms, value) points of one series
Points = list[tuple[int, float]]

MAX_SERIES = 8  # lines per panel; more series are drawn as small multiples (one panel per 8)
# 8 colours that stay apart for common colour-vision deficiencies (Okabe & Ito)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
WIDTH_IN = 6.6  # the plot area's figure width; the legend goes to its right, outside the data
PANEL_HEIGHT_IN = 2.5
DPI = 100
TIME_LABEL = "time (UTC)"


@dataclass
class SeriesFacts:
    label: str
    x: list[float]  # as drawn: ms for lateness, days since the epoch (matplotlib's date numbers) for time
    y: list[float]
    # each point's place on the value axis as a fraction of it (0 = its start, 1 = its end; NaN for a gap)
    frac: list[float] = field(default_factory=list)


@dataclass
class PanelFacts:
    """One panel of a chart, as a reader sees it."""

    title: str
    xlabel: str
    ylabel: str
    xscale: str
    yscale: str
    value_axis: str  # "x" or "y": the axis carrying the measured values (x for a CDF)
    series: list[SeriesFacts] = field(default_factory=list)
    # the lowest and highest drawn value as a fraction of the value axis (0 = its start, 1 = its end)
    value_span: tuple[float, float] = (0.0, 0.0)
    legend_overlaps_data: bool = False


@dataclass
class Chart:
    png: bytes
    panels: list[PanelFacts]

    @property
    def size_px(self) -> tuple[int, int]:
        """(width, height) of the PNG, from its IHDR chunk."""
        return int.from_bytes(self.png[16:20], "big"), int.from_bytes(self.png[20:24], "big")


def fmt_delay(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms / 1000:g}s" if ms >= 1000 else f"{ms}ms"


def series_order(name: str) -> tuple[int, str]:
    """Delay levels in numeric order, then timers, then anything else by name."""
    if name.startswith("level-") and name[6:].isdigit():
        return int(name[6:]), name
    return (10_000 if name == "timer" else 20_000), name


def has_data(points: Sequence[tuple[int, float]]) -> bool:
    """A series worth a line: at least one finite, non-zero value."""
    return any(math.isfinite(v) and v != 0 for _, v in points)


DAY_MS = 86_400_000


def _day(ms: int) -> float:
    """Epoch ms as matplotlib's date number (days since 1970-01-01 UTC, its default epoch)."""
    return ms / DAY_MS


def _with_gaps(pts: Points, step_ms: int) -> tuple[list[float], list[float]]:
    """x, y with a NaN wherever a bucket is missing, so lines are not drawn across gaps."""
    xs: list[float] = []
    ys: list[float] = []
    prev: int | None = None
    for t, v in sorted(pts):
        if prev is not None and t - prev > step_ms:
            xs.append(_day(prev + step_ms))
            ys.append(float("nan"))
        xs.append(_day(t))
        ys.append(v)
        prev = t
    return xs, ys


def _zero_filled(pts: Points, step_ms: int, span_ms: tuple[int, int]) -> Points:
    """A count per bucket: a bucket with no row had none, so it reads 0 (not a gap) over the whole span."""
    have = dict(pts)
    first, last = span_ms[0] // step_ms * step_ms, span_ms[1] // step_ms * step_ms
    return [(t, have.get(t, 0.0)) for t in range(first, last + step_ms, step_ms)] + [
        (t, v) for t, v in pts if not first <= t <= last]


def _panels(names: list[str]) -> list[list[str]]:
    return [names[i:i + MAX_SERIES] for i in range(0, len(names), MAX_SERIES)]


def _log_ms(ax: Axes, axis: str) -> None:
    """A log scale that still shows 0 (symlog, linear below 1 ms) with plain millisecond ticks."""
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    if axis == "x":
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
        ax.xaxis.set_major_formatter(plain)
    else:
        ax.set_yscale("symlog", linthresh=1.0, linscale=0.5)
        ax.yaxis.set_major_formatter(plain)


TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21_600, 43_200, 86_400)


def _time_axis(ax: Axes, span_ms: tuple[int, int]) -> None:
    """x from the first to the last sample of the run, ticks at round wall-clock steps (at most 5, so the
    HH:MM:SS labels do not run into each other on a half-screen chart)."""
    lo, hi = span_ms[0], max(span_ms[1], span_ms[0] + 1000)
    step = next((s for s in TICK_STEPS_S if (hi - lo) / (s * 1000) <= 5), TICK_STEPS_S[-1])
    ax.set_xlim(_day(lo), _day(hi))
    ax.xaxis.set_major_locator(MultipleLocator(step * 1000 / DAY_MS))
    ax.xaxis.set_major_formatter(FuncFormatter(
        lambda v, _pos: dt.datetime.fromtimestamp(round(v * DAY_MS / 1000), tz=dt.UTC).strftime("%H:%M:%S")))


def _legend_outside(ax: Axes, n: int) -> None:
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              ncol=1 if n <= 8 else 2, frameon=False)


def _figure(panels: int, extra_height: float = 0.0) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN * panels + extra_height), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(panels, 1, i + 1) for i in range(panels)]
    return fig, axes


def _facts(ax: Axes, value_axis: str, series: list[SeriesFacts]) -> PanelFacts:
    """Read back what the panel shows once its limits are final (after a draw)."""
    to_axes = ax.transData + ax.transAxes.inverted()
    fracs: list[float] = []
    for s in series:
        s.frac = []
        for x, y in zip(s.x, s.y, strict=True):
            if math.isfinite(x) and math.isfinite(y):
                fx, fy = to_axes.transform((x, y))
                s.frac.append(float(fx if value_axis == "x" else fy))
                fracs.append(s.frac[-1])
            else:
                s.frac.append(float("nan"))
    legend = ax.get_legend()
    overlaps = bool(legend is not None and legend.get_window_extent().overlaps(ax.get_window_extent()))
    return PanelFacts(title=ax.get_title(), xlabel=ax.get_xlabel(), ylabel=ax.get_ylabel(), xscale=ax.get_xscale(),
                      yscale=ax.get_yscale(), value_axis=value_axis, series=series,
                      value_span=(min(fracs), max(fracs)) if fracs else (0.0, 0.0), legend_overlaps_data=overlaps)


def _finish(fig: Figure, drawn: list[tuple[Axes, list[SeriesFacts]]], value_axis: str) -> Chart:
    fig.tight_layout()
    fig.canvas.draw()  # limits and legend positions are final only after a draw
    panels = [_facts(ax, value_axis, facts) for ax, facts in drawn]
    return Chart(_png(fig), panels)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def line_chart(title: str, ylabel: str, series: dict[str, Points], step_ms: int, span_ms: tuple[int, int],
               label: Label = lambda name: name, log_values: bool = False, counts: bool = False) -> Chart | None:
    """Values over time, one line per series; series with no data are left out, and with none left no chart.
    Every time chart covers the same span (the whole run), so charts line up. A missing bucket is a gap
    in a sampled value (a gauge, a percentile) and 0 in a count or rate (`counts`)."""
    names = sorted((n for n, pts in series.items() if has_data(pts)), key=series_order)
    if not names:
        return None
    groups = _panels(names)
    fig, axes = _figure(len(groups))
    drawn: list[tuple[Axes, list[SeriesFacts]]] = []
    for ax, group in zip(axes, groups, strict=True):
        facts = []
        for i, name in enumerate(group):
            pts = _zero_filled(series[name], step_ms, span_ms) if counts else series[name]
            xs, ys = _with_gaps(pts, step_ms)
            ax.plot(xs, ys, marker=".", markersize=5, color=PALETTE[i % len(PALETTE)], label=label(name))
            facts.append(SeriesFacts(label(name), xs, ys))
        if log_values:
            _log_ms(ax, "y")
        else:
            ax.set_ylim(bottom=0)
        _time_axis(ax, span_ms)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        _legend_outside(ax, len(group))
        drawn.append((ax, facts))
    axes[-1].set_xlabel(TIME_LABEL)
    for ax in axes[:-1]:
        ax.set_xlabel(TIME_LABEL)
        ax.tick_params(labelbottom=False)
        ax.xaxis.label.set_visible(False)
    axes[0].set_title(title + (f" ({len(groups)} panels of up to {MAX_SERIES})" if len(groups) > 1 else ""),
                      fontsize=10)
    return _finish(fig, drawn, "y")


def cdf_chart(title: str, by_series: dict[str, list[tuple[float, float]]], label: Label) -> Chart | None:
    """The lateness distribution per series: (percentile 0..99.9, lateness ms) points on a log ms axis."""
    names = sorted((n for n, pts in by_series.items() if pts), key=series_order)
    if not names:
        return None
    groups = _panels(names)
    fig, axes = _figure(len(groups))
    drawn: list[tuple[Axes, list[SeriesFacts]]] = []
    for ax, group in zip(axes, groups, strict=True):
        facts = []
        for i, name in enumerate(group):
            pts = sorted(by_series[name])
            xs, ys = [v for _, v in pts], [p / 100 for p, _ in pts]
            ax.step(xs, ys, where="post", color=PALETTE[i % len(PALETTE)], label=label(name))
            facts.append(SeriesFacts(label(name), xs, ys))
        _log_ms(ax, "x")
        ax.set_xlim(left=0)
        ax.set_xlabel("lateness (ms, log scale)")
        ax.set_ylabel("delivered (fraction)")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        _legend_outside(ax, len(group))
        drawn.append((ax, facts))
    axes[0].set_title(title, fontsize=10)
    return _finish(fig, drawn, "x")


PERCENTILE_BARS = (("p50", "p50"), ("p99", "p99"), ("max", "max"))


def percentile_bars(title: str, rows: list[dict[str, object]], label: Label) -> Chart | None:
    """p50 / p99 / max lateness per series as grouped bars on a log ms axis (so 2 ms and 150 ms both read)."""
    rows = sorted(rows, key=lambda r: series_order(str(r["series"])))
    if not rows:
        return None
    fig, [ax] = _figure(1, extra_height=0.4)
    xs = list(range(len(rows)))
    width = 0.27
    facts = []
    for i, (key, name) in enumerate(PERCENTILE_BARS):
        pos = [x + (i - 1) * width for x in xs]
        vals = [float(str(r[key])) for r in rows]
        ax.bar(pos, vals, width, label=name, color=PALETTE[i])
        facts.append(SeriesFacts(name, [float(p) for p in pos], vals))
    ax.set_xticks(xs, [label(str(r["series"])) for r in rows], rotation=45, ha="right", fontsize=8)
    _log_ms(ax, "y")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("delay level / timers")
    ax.set_ylabel("lateness (ms, log scale)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    _legend_outside(ax, len(PERCENTILE_BARS))
    return _finish(fig, [(ax, facts)], "y")
