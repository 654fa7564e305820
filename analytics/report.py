"""Run the jobs, write Parquet tables, draw PNG charts and one self-contained HTML report."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import os
from collections import defaultdict
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import structlog  # noqa: E402

from analytics import jobs  # noqa: E402

log = structlog.get_logger(__name__)


@dataclass
class ReportResult:
    out_dir: str
    html_path: str
    tables: dict[str, str] = field(default_factory=dict)
    charts: dict[str, str] = field(default_factory=dict)
    lateness: list[dict] = field(default_factory=list)
    client_traces: list[dict] = field(default_factory=list)


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _line_chart(title: str, ylabel: str, series: dict[str, list[tuple[int, float]]]) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 4))
    if not series:
        ax.text(0.5, 0.5, "no data in the exports", ha="center", va="center", transform=ax.transAxes)
    for name in sorted(series):
        pts = sorted(series[name])
        ax.plot([_ts(t) for t, _ in pts], [v for _, v in pts], marker=".", label=name)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=8, ncol=3)
    fig.autofmt_xdate()
    return _png(fig)


def _bar_chart(title: str, rows: list[dict]) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 4))
    if not rows:
        ax.text(0.5, 0.5, "no delivered scheduled messages", ha="center", va="center", transform=ax.transAxes)
    names = [r["series"] for r in rows]
    x = range(len(rows))
    width = 0.27
    for i, key in enumerate(("p50", "p90", "p99")):
        ax.bar([p + (i - 1) * width for p in x], [r[key] for r in rows], width, label=key)
    ax.set_xticks(list(x), names, rotation=45, ha="right")
    ax.set_ylabel("lateness (ms)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    if rows:
        ax.legend()
    return _png(fig)


def _rows(df) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def _group(rows: list[dict], key, value: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        v = r.get(value)
        if v is not None:
            out[key(r)].append((r["bucket"], float(v)))
    return out


def _table_html(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "<p><em>no rows</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def build_report(input_dir: str, out_dir: str, master: str = "local[*]", bucket_seconds: int | None = None,
                 progress=None) -> ReportResult:
    """Read the exports under input_dir, write Parquet tables, charts and report.html to out_dir."""
    step = progress or (lambda msg: log.info("analytics.step", step=msg))
    os.makedirs(out_dir, exist_ok=True)
    step("starting Spark")
    spark = jobs.spark_session(master)
    try:
        step("reading exports")
        inputs = jobs.load_inputs(spark, input_dir)
        lo, hi = jobs.time_span(inputs)
        bucket_ms = bucket_seconds * 1000 if bucket_seconds else jobs.choose_bucket_ms(hi - lo)
        step(f"aggregating (bucket {bucket_ms // 1000}s)")
        late_overall, late_time = jobs.lateness(inputs.traces, bucket_ms)
        tables = {
            "lateness_by_series": late_overall,
            "lateness_over_time": late_time,
            "throughput_by_topic": jobs.throughput(inputs, bucket_ms),
            "deliveries_by_topic": jobs.deliveries(inputs.traces, bucket_ms),
            "backlog": jobs.backlog(inputs, bucket_ms),
            "consumer_lag": jobs.consumer_lag(inputs, bucket_ms),
            "client_traces": jobs.client_traces(inputs),
        }
        result = ReportResult(out_dir=out_dir, html_path=os.path.join(out_dir, "report.html"))
        collected: dict[str, list[dict]] = {}
        for name, df in tables.items():
            step(f"writing table {name}")
            path = os.path.join(out_dir, "tables", name)
            df.write.mode("overwrite").parquet(path)
            result.tables[name] = path
            collected[name] = _rows(df)
    finally:
        spark.stop()

    step("drawing charts")
    result.lateness = collected["lateness_by_series"]
    result.client_traces = collected["client_traces"]
    charts = {
        "lateness_percentiles": _bar_chart("Delivery lateness by delay level / timer", result.lateness),
        "lateness_p99_over_time": _line_chart(
            "Lateness p99 over time", "ms", _group(collected["lateness_over_time"], lambda r: r["series"], "p99")
        ),
        "throughput": _line_chart(
            "Messages stored per topic", "msg/s",
            _group(collected["throughput_by_topic"], lambda r: r["topic"], "ratePerSec"),
        ),
        "deliveries": _line_chart(
            "Scheduled deliveries per topic", f"messages per {bucket_ms // 1000}s",
            _group(collected["deliveries_by_topic"], lambda r: r["topic"], "delivered"),
        ),
        "backlog": _line_chart("Pending scheduled messages", "messages", _group(collected["backlog"], lambda r: r["series"], "max")),
        "consumer_lag": _line_chart(
            "Consumer lag", "messages", _group(collected["consumer_lag"], lambda r: f"{r['group']}/{r['topic']}", "max")
        ),
    }
    os.makedirs(os.path.join(out_dir, "charts"), exist_ok=True)
    for name, png in charts.items():
        path = os.path.join(out_dir, "charts", f"{name}.png")
        with open(path, "wb") as f:
            f.write(png)
        result.charts[name] = path

    step("writing report.html")
    sections = [
        ("How late each level delivered", "lateness_percentiles",
         _table_html(result.lateness, ["series", "count", "p50", "p90", "p99", "max"])),
        ("Lateness over time", "lateness_p99_over_time", ""),
        ("Throughput per topic", "throughput", ""),
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
