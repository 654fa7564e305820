"""Run the jobs, write Parquet tables, draw PNG charts and one self-contained HTML report."""

from __future__ import annotations

import base64
import datetime as dt
import html
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from pyspark.sql import DataFrame

from analytics import jobs
from analytics.charts import (
    Chart,
    PanelFacts,
    cdf_chart,
    fmt_delay,
    line_chart,
    percentile_bars,
    series_order,
)

log = structlog.get_logger(__name__)

# one collected row of an aggregate table (pyspark Row.asDict(): column name -> value)
Row = dict[str, Any]


@dataclass
class ReportResult:
    out_dir: str
    html_path: str
    tables: dict[str, str] = field(default_factory=dict)
    charts: dict[str, str] = field(default_factory=dict)
    lateness: list[Row] = field(default_factory=list)
    client_traces: list[Row] = field(default_factory=list)
    rows: dict[str, list[Row]] = field(default_factory=dict)  # every table as collected (small aggregates)
    # the summary block: per level and for timers count, p50/p99/max lateness, early count, peak due/s
    summary: list[Row] = field(default_factory=list)
    panels: dict[str, list[PanelFacts]] = field(default_factory=dict)  # what each drawn chart shows
    omitted: dict[str, str] = field(default_factory=dict)  # chart -> the line the page shows instead of it


def series_label(name: str, delays: dict[int, int]) -> str:
    """"level-3" -> "L3 · 10s" (the broker's delay table at export time), "timer" -> "timers"."""
    if name.startswith("level-") and name[6:].isdigit():
        lv = int(name[6:])
        return f"L{lv} · {fmt_delay(delays[lv])}" if lv in delays else f"L{lv}"
    return "timers" if name == "timer" else name


def _rows(df: DataFrame) -> list[Row]:
    return [r.asDict() for r in df.collect()]


def _group(rows: list[Row], key: Callable[[Row], str], value: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        v = r.get(value)
        if v is not None:
            out[key(r)].append((r["bucket"], float(v)))
    return out




def _hms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%H:%M:%S")


def _num(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}"
    return f"{int(v):,}"


@dataclass
class Column:
    """One column of an HTML table: its header (with the unit) and how a row's cell reads."""

    header: str
    cell: Callable[[Row], str]
    bad: Callable[[Row], bool] = lambda _r: False  # a cell to flag (an early delivery)


def _table_html(table_id: str, rows: list[Row], columns: list[Column]) -> str:
    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=bad' if c.bad(r) else ''}>{html.escape(c.cell(r))}</td>" for c in columns)
        + "</tr>" for r in rows)
    return f"<table id='{table_id}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def summary_rows(lateness: list[Row], peaks: list[Row], label: Callable[[str], str]) -> list[Row]:
    """Per delay level and for timers (in that order): count, lateness p50/p99/max, early count, peak due/s."""
    peak = {r["series"]: r for r in peaks}
    out = []
    for r in sorted(lateness, key=lambda r: series_order(r["series"])):
        p = peak.get(r["series"], {})
        out.append({"series": r["series"], "name": label(r["series"]), "count": r["count"], "p50": r["p50"],
                    "p99": r["p99"], "max": r["max"], "early": r["early"], "peakDuePerSec": p.get("peakDuePerSec")})
    return out


SUMMARY_COLUMNS = [
    Column("delay level / timers", lambda r: str(r["name"])),
    Column("delivered (messages)", lambda r: _num(r["count"])),
    Column("lateness p50 (ms)", lambda r: _num(r["p50"])),
    Column("lateness p99 (ms)", lambda r: _num(r["p99"])),
    Column("lateness max (ms)", lambda r: _num(r["max"])),
    Column("early (messages)", lambda r: _num(r["early"]), bad=lambda r: bool(r["early"])),
    Column("peak due (msg/s)", lambda r: _num(r["peakDuePerSec"])),
]
CLIENT_TRACE_COLUMNS = [
    Column("trace type", lambda r: str(r["traceType"])),
    Column("topic", lambda r: str(r["topic"] or "–")),
    Column("group", lambda r: str(r["group"] or "–")),
    Column("contexts (count)", lambda r: _num(r["count"])),
    Column("succeeded (count)", lambda r: _num(r["success"])),
    Column("cost p50 (ms)", lambda r: _num(r["costP50"])),
    Column("cost p99 (ms)", lambda r: _num(r["costP99"])),
]

STYLE = (
    "body{font-family:sans-serif;color:#222;max-width:1360px;margin:0 auto;padding:8px 16px;box-sizing:border-box}"
    "h1{font-size:22px;margin:4px 0}h2{font-size:16px;margin:14px 0 4px}p{margin:4px 0}"
    ".grid{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:8px 24px}"
    "figure{margin:0;min-width:0}figcaption{font-size:13px;color:#444}"
    "img{display:block;max-width:100%;height:auto}"
    "table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
    "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}td.bad{background:#fcc;font-weight:bold}"
    ".note{color:#555;font-size:13px}"
)


@dataclass
class Section:
    chart: str
    title: str
    caption: str
    empty: str  # the line shown instead of the chart when it has nothing to draw


SECTIONS = [
    Section("lateness_percentiles", "Lateness per delay level",
            "p50, p99 and max lateness on a log scale (0 at the bottom): a bar of 2 ms and one of 150 ms both read.",
            "no scheduled message was delivered"),
    Section("lateness_cdf", "Lateness distribution",
            "Share of messages delivered within x ms of their due time, up to p99.9 (the max is in the summary).",
            "no scheduled message was delivered"),
    Section("deliveries", "Deliveries per delay level over time",
            "Scheduled messages delivered into their real topic, per level and for timers.",
            "no scheduled message was delivered"),
    Section("lateness_p99_over_time", "Lateness p99 over time",
            "p99 lateness of the messages delivered in each time bucket, log scale.",
            "no scheduled message was delivered"),
    Section("throughput", "Messages arriving per topic",
            "Sends and scheduled deliveries as they arrived in each real topic (system topics left out).",
            "no message arrived in any topic"),
    Section("backlog", "Pending scheduled messages",
            "Messages waiting for their due time, per delay level and in the timer wheel (largest in each bucket).",
            "nothing was pending at any sample"),
    Section("consumer_lag", "Consumer lag",
            "Messages stored but not yet consumed, per consumer group and topic (largest in each bucket).",
            "no consumer group lagged at any sample"),
]


def _page(result: ReportResult, charts: dict[str, Chart], lo: int, hi: int, bucket_ms: int,
          client_traces: list[Row]) -> str:
    day = dt.datetime.fromtimestamp(lo / 1000, tz=dt.UTC).strftime("%Y-%m-%d") if lo else "–"
    delivered = sum(int(r["count"]) for r in result.summary)
    early = sum(int(r["early"]) for r in result.summary)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width'><title>delaymq delivery report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>delaymq delivery report</h1>",
        f"<p>Run of {day}, {_hms(lo) if lo else '–'} to {_hms(hi) if hi else '–'} UTC ({(hi - lo) / 1000:,.0f} s); "
        f"time buckets of {bucket_ms // 1000} s. Lateness is the time a scheduled message was stored in its real "
        "topic minus its due time, in milliseconds; negative would be early.</p>",
        "<section id='summary'><h2>Summary</h2>",
        f"<p>{delivered:,} scheduled messages delivered, <strong>{early:,} early</strong>.</p>",
        _table_html("summary-table", result.summary, SUMMARY_COLUMNS) if result.summary
        else "<p class='note'>No scheduled message was delivered in this run.</p>",
        "</section><div class='grid'>",
    ]
    for sec in SECTIONS:
        chart = charts.get(sec.chart)
        if chart is None:
            continue
        b64 = base64.b64encode(chart.png).decode()
        w, h = chart.size_px
        parts.append(f"<figure id='{sec.chart}'><h2>{html.escape(sec.title)}</h2>"
                     f"<img alt='{html.escape(sec.title)}' width='{w}' height='{h}' src='data:image/png;base64,{b64}'/>"
                     f"<figcaption>{html.escape(sec.caption)}</figcaption></figure>")
    parts.append("<figure id='client_traces'><h2>Client message traces (RMQ_SYS_TRACE_TOPIC)</h2>")
    parts.append(_table_html("client-traces-table", client_traces, CLIENT_TRACE_COLUMNS) if client_traces
                 else "<p class='note'>No client sent message traces.</p>")
    parts.append("</figure></div>")
    if result.omitted:
        parts.append("<p class='note'>Not drawn, having no data: " + "; ".join(
            f"{html.escape(next(s.title for s in SECTIONS if s.chart == c))} ({html.escape(why)})"
            for c, why in result.omitted.items()) + ".</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


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
            "peak_due": jobs.peak_due(inputs.traces),
            "throughput_by_topic": jobs.throughput(inputs, bucket_ms),
            "deliveries_by_series": jobs.deliveries(inputs.traces, bucket_ms),
            "backlog": jobs.backlog(inputs, bucket_ms),
            "consumer_lag": jobs.consumer_lag(inputs, bucket_ms),
            "client_traces": jobs.client_traces(inputs),
        }
        result = ReportResult(out_dir=out_dir, html_path=os.path.join(out_dir, "report.html"))
        collected: dict[str, list[Row]] = {}
        for name, df in tables.items():
            step(f"writing table {name}")
            path = os.path.join(out_dir, "tables", name)
            df = df.cache()  # written, then collected: computed once
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
    result.summary = summary_rows(result.lateness, collected["peak_due"], label)
    result.client_traces = collected["client_traces"]
    result.rows = collected
    cdf: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in collected["lateness_cdf"]:
        cdf[r["series"]].append((float(r["pct"]), float(r["latenessMs"])))
    span = (lo, hi)
    drawn = {
        "lateness_percentiles": percentile_bars("Lateness p50 / p99 / max per delay level and timers",
                                                result.lateness, label),
        "lateness_cdf": cdf_chart("Lateness CDF per delay level and timers (to p99.9)", cdf, label),
        "deliveries": line_chart("Scheduled deliveries per delay level", "deliveries (msg/s)",
                                 _group(collected["deliveries_by_series"], lambda r: r["series"], "ratePerSec"),
                                 bucket_ms, span, label, counts=True),
        "lateness_p99_over_time": line_chart(
            "Lateness p99 over time", "lateness p99 (ms, log scale)",
            _group(collected["lateness_over_time"], lambda r: r["series"], "p99"), bucket_ms, span, label,
            log_values=True),
        "throughput": line_chart("Messages arriving per topic", "arriving (msg/s)",
                                 _group(collected["throughput_by_topic"], lambda r: r["topic"], "ratePerSec"),
                                 bucket_ms, span, counts=True),
        "backlog": line_chart("Pending scheduled messages", "pending (messages)",
                              _group(collected["backlog"], lambda r: r["series"], "max"), bucket_ms, span, label),
        "consumer_lag": line_chart(
            "Consumer lag per group / topic", "lag (messages)",
            _group(collected["consumer_lag"], lambda r: f"{r['group']}/{r['topic']}", "max"), bucket_ms, span),
    }
    charts = {name: c for name, c in drawn.items() if c is not None}
    result.omitted = {sec.chart: sec.empty for sec in SECTIONS if drawn.get(sec.chart) is None}
    os.makedirs(os.path.join(out_dir, "charts"), exist_ok=True)
    for name, chart in charts.items():
        path = os.path.join(out_dir, "charts", f"{name}.png")
        with open(path, "wb") as out:
            out.write(chart.png)
        result.charts[name] = path
        result.panels[name] = chart.panels

    step("writing report.html")
    with open(result.html_path, "w", encoding="utf-8") as f:
        f.write(_page(result, charts, lo, hi, bucket_ms, result.client_traces))
    return result
