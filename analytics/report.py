"""Run the jobs, write Parquet tables, draw PNG charts and one self-contained HTML report."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import structlog  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402

from analytics import jobs  # noqa: E402

log = structlog.get_logger(__name__)

# one collected row of an aggregate table (pyspark Row.asDict(): column name -> value)
Row = dict[str, Any]
# a series name ("level-3", "timer", "group/topic") -> its legend label
Label = Callable[[str], str]


@dataclass
class ReportResult:
    out_dir: str
    html_path: str
    tables: dict[str, str] = field(default_factory=dict)
    charts: dict[str, str] = field(default_factory=dict)
    lateness: list[Row] = field(default_factory=list)
    client_traces: list[Row] = field(default_factory=list)
    rows: dict[str, list[Row]] = field(default_factory=dict)  # every table as collected (small aggregates)


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


MAX_SERIES = 8  # lines per panel; more series are drawn as small multiples (one panel per 8)
# 8 colours that stay apart for common colour-vision deficiencies (Okabe & Ito), then line styles
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


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


def series_label(name: str, delays: dict[int, int]) -> str:
    """"level-3" -> "L3 · 10s" (the broker's delay table at export time), "timer" -> "timers"."""
    if name.startswith("level-") and name[6:].isdigit():
        lv = int(name[6:])
        return f"L{lv} · {fmt_delay(delays[lv])}" if lv in delays else f"L{lv}"
    return "timers" if name == "timer" else name


def _panels(names: list[str]) -> list[list[str]]:
    return [names[i:i + MAX_SERIES] for i in range(0, len(names), MAX_SERIES)] or [[]]


def _with_gaps(pts: list[tuple[int, float]], step_ms: int) -> tuple[list[dt.datetime], list[float]]:
    """x, y with a NaN wherever a bucket is missing, so lines are not drawn across gaps."""
    xs: list[dt.datetime] = []
    ys: list[float] = []
    prev: int | None = None
    for t, v in sorted(pts):
        if prev is not None and t - prev > step_ms:
            xs.append(_ts(prev + step_ms))
            ys.append(float("nan"))
        xs.append(_ts(t))
        ys.append(v)
        prev = t
    return xs, ys


def _line_chart(title: str, ylabel: str, series: dict[str, list[tuple[int, float]]], step_ms: int,
                label: Label = lambda name: name) -> bytes:
    names = sorted(series, key=series_order)
    panels = _panels(names)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.6 * len(panels)), squeeze=False, sharex=True)
    for ax, group in zip(axes[:, 0], panels, strict=True):
        if not group:
            ax.text(0.5, 0.5, "no data in the exports", ha="center", va="center", transform=ax.transAxes)
        for i, name in enumerate(group):
            xs, ys = _with_gaps(series[name], step_ms)
            ax.plot(xs, ys, marker=".", markersize=3, color=PALETTE[i % len(PALETTE)], label=label(name))
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if group:
            ax.legend(fontsize=8, ncol=4, loc="upper left")
    axes[0, 0].set_title(title + (f" ({len(panels)} panels of up to {MAX_SERIES})" if len(panels) > 1 else ""))
    fig.autofmt_xdate()
    return _png(fig)


def _cdf_chart(title: str, rows: list[Row], label: Label) -> bytes:
    by: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        by[r["series"]].append((int(r["pct"]), float(r["latenessMs"])))
    names = sorted(by, key=series_order)
    panels = _panels(names)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.6 * len(panels)), squeeze=False)
    for ax, group in zip(axes[:, 0], panels, strict=True):
        if not group:
            ax.text(0.5, 0.5, "no delivered scheduled messages", ha="center", va="center", transform=ax.transAxes)
        for i, name in enumerate(group):
            pts = sorted(by[name])
            ax.step([v for _, v in pts], [p / 100 for p, _ in pts], where="post", color=PALETTE[i % len(PALETTE)],
                    label=label(name))
        ax.set_xlabel("lateness (ms, delivered store time - due time)")
        ax.set_ylabel("fraction delivered")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        if group:
            ax.legend(fontsize=8, loc="lower right")
    axes[0, 0].set_title(title)
    return _png(fig)


def _bar_chart(title: str, rows: list[Row], label: Label) -> bytes:
    rows = sorted(rows, key=lambda r: series_order(r["series"]))
    fig, ax = plt.subplots(figsize=(9, 4))
    if not rows:
        ax.text(0.5, 0.5, "no delivered scheduled messages", ha="center", va="center", transform=ax.transAxes)
    names = [label(r["series"]) for r in rows]
    x = range(len(rows))
    width = 0.27
    for i, key in enumerate(("p50", "p90", "p99")):
        ax.bar([p + (i - 1) * width for p in x], [r[key] for r in rows], width, label=key, color=PALETTE[i])
    ax.set_xticks(list(x), names, rotation=45, ha="right")
    ax.set_ylabel("lateness (ms)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    if rows:
        ax.legend()
    return _png(fig)


def _rows(df: DataFrame) -> list[Row]:
    return [r.asDict() for r in df.collect()]


def _group(rows: list[Row], key: Callable[[Row], str], value: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        v = r.get(value)
        if v is not None:
            out[key(r)].append((r["bucket"], float(v)))
    return out


def _table_html(rows: list[Row], columns: list[str]) -> str:
    if not rows:
        return "<p><em>no rows</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def build_report(input_dir: str, out_dir: str, master: str = "local[*]", bucket_seconds: int | None = None,
                 progress: Callable[[str], None] | None = None) -> ReportResult:
    """Read the exports under input_dir, write Parquet tables, charts and report.html to out_dir."""
    step = progress or (lambda msg: log.info("analytics.step", step=msg))
    os.makedirs(out_dir, exist_ok=True)
    step("starting Spark")
    spark = jobs.spark_session(master)
    try:
        step("reading exports")
        inputs = jobs.load_inputs(spark, input_dir)
        lo, hi = jobs.time_span(inputs)
        if not lo and not inputs.rmq_trace.take(1):
            raise ValueError(f"no readable records in the exports under {input_dir}")
        bucket_ms = bucket_seconds * 1000 if bucket_seconds else jobs.choose_bucket_ms(hi - lo)
        step(f"aggregating (bucket {bucket_ms // 1000}s)")
        late_overall, late_time = jobs.lateness(inputs.traces, bucket_ms)
        delays = jobs.delay_table(inputs)
        tables = {
            "lateness_by_series": late_overall,
            "lateness_over_time": late_time,
            "lateness_cdf": jobs.lateness_cdf(inputs.traces),
            "throughput_by_topic": jobs.throughput(inputs, bucket_ms),
            "deliveries_by_topic": jobs.deliveries(inputs.traces, bucket_ms),
            "backlog": jobs.backlog(inputs, bucket_ms),
            "consumer_lag": jobs.consumer_lag(inputs, bucket_ms),
            "client_traces": jobs.client_traces(inputs),
        }
        result = ReportResult(out_dir=out_dir, html_path=os.path.join(out_dir, "report.html"))
        collected: dict[str, list[Row]] = {}
        for name, df in tables.items():
            step(f"writing table {name}")
            path = os.path.join(out_dir, "tables", name)
            df.write.mode("overwrite").parquet(path)
            result.tables[name] = path
            collected[name] = _rows(df)
    finally:
        spark.stop()

    step("drawing charts")

    def label(name: str) -> str:
        return series_label(name, delays)

    result.lateness = sorted(collected["lateness_by_series"], key=lambda r: series_order(r["series"]))
    for r in result.lateness:
        r["name"] = label(r["series"])
    result.client_traces = collected["client_traces"]
    result.rows = collected
    per = f"{bucket_ms // 1000}s"
    charts = {
        "lateness_percentiles": _bar_chart("Delivery lateness by delay level / timer", result.lateness, label),
        "lateness_cdf": _cdf_chart("Lateness distribution (CDF) per delay level and timers",
                                   collected["lateness_cdf"], label),
        "lateness_p99_over_time": _line_chart(
            "Lateness p99 over time", "ms", _group(collected["lateness_over_time"], lambda r: r["series"], "p99"),
            bucket_ms, label),
        "throughput": _line_chart(
            "Messages arriving per topic (sends + scheduled deliveries)", "msg/s",
            _group(collected["throughput_by_topic"], lambda r: r["topic"], "ratePerSec"), bucket_ms),
        "deliveries": _line_chart(
            "Scheduled deliveries per topic", f"messages per {per}",
            _group(collected["deliveries_by_topic"], lambda r: r["topic"], "delivered"), bucket_ms),
        "backlog": _line_chart("Pending scheduled messages", "messages",
                               _group(collected["backlog"], lambda r: r["series"], "max"), bucket_ms, label),
        "consumer_lag": _line_chart(
            "Consumer lag", "messages",
            _group(collected["consumer_lag"], lambda r: f"{r['group']}/{r['topic']}", "max"), bucket_ms),
    }
    os.makedirs(os.path.join(out_dir, "charts"), exist_ok=True)
    for name, png in charts.items():
        path = os.path.join(out_dir, "charts", f"{name}.png")
        with open(path, "wb") as out:
            out.write(png)
        result.charts[name] = path

    step("writing report.html")
    sections = [
        ("How late each level delivered", "lateness_percentiles",
         _table_html(result.lateness, ["name", "count", "p50", "p90", "p99", "max"])),
        ("Lateness distribution", "lateness_cdf", ""),
        ("Lateness over time", "lateness_p99_over_time", ""),
        ("Messages arriving per topic", "throughput", ""),
        ("Scheduled deliveries per topic", "deliveries", ""),
        ("Pending backlog", "backlog", ""),
        ("Consumer lag", "consumer_lag", ""),
    ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>delaymq delivery report</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}img{max-width:100%}</style></head><body>",
        "<h1>delaymq delivery report</h1>",
        f"<p>Input: {html.escape(input_dir)} &middot; bucket {bucket_ms // 1000}s &middot; "
        f"span {_ts(lo).isoformat() if lo else '-'} to {_ts(hi).isoformat() if hi else '-'}</p>",
    ]
    for title, chart, extra in sections:
        b64 = base64.b64encode(charts[chart]).decode()
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{chart}' src='data:image/png;base64,{b64}'/>{extra}")
    parts.append("<h2>Client message traces (RMQ_SYS_TRACE_TOPIC)</h2>")
    parts.append(_table_html(collected["client_traces"], ["traceType", "topic", "group", "count", "success", "costP50", "costP99"]))
    parts.append("</body></html>")
    with open(result.html_path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return result
