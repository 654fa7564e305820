"""End to end for analysts: a real broker run produces exports, real Spark (local mode) aggregates them,
and the page is read the way a person reads it: laid out by headless Chromium at a 1400 px screen."""

import json
import math
import os
import re
import subprocess
import sys

import pytest

from analytics.charts import PanelFacts, has_data
from analytics.report import ReportResult, build_report
from tests.helpers import chromium

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DELAYMQ = [sys.executable, "-m", "client.cli"]
SCREEN_WIDTH = 1400
UNIT = re.compile(r"\(([^)]+)\)")  # "lateness (ms, log scale)" -> "ms, log scale"


def _cli(*args, timeout=120):
    return subprocess.run([*DELAYMQ, *args], capture_output=True, text=True, timeout=timeout)


def test_report_shows_how_late_each_level_and_the_timer_delivered(broker_factory, tmp_path):
    broker = broker_factory({"messageDelayLevel": "200ms 400ms 600ms 1s", "metricsExportIntervalMs": 200})
    ns = broker.namesrv
    for level, n in ((1, 20), (2, 15)):
        r = _cli("produce", "-n", ns, "-t", "Orders", "--count", str(n), "--delay-level", str(level),
                 "--body", f"L{level}-{{i}}")
        assert r.returncode == 0, r.stderr
    r = _cli("produce", "-n", ns, "-t", "Orders", "--count", "5", "--delay", "700ms", "--body", "T-{i}")
    assert r.returncode == 0, r.stderr
    r = _cli("consume", "-n", ns, "-g", "analysts", "-t", "Orders", "--from-where", "first", "--max", "40",
             "--output", "json", "--idle-timeout", "30")
    assert r.returncode == 0, r.stderr
    bodies = [json.loads(line)["body"] for line in r.stdout.splitlines() if line.strip()]
    assert len(bodies) == 40 and {b.split("-")[0] for b in bodies} == {"L1", "L2", "T"}
    # what a client with message tracing enabled sends (RocketMQ TraceDataEncoder text)
    pub = "\x01".join(["Pub", "1795000000000", "DefaultRegion", "PG", "Orders", "MID", "tag", "key",
                        "127.0.0.1:9876", "10", "3", "0", "OFFID", "true"]) + "\x02"
    r = _cli("produce", "-n", ns, "-t", "RMQ_SYS_TRACE_TOPIC", "--count", "2", "--body", pub)
    assert r.returncode == 0, r.stderr
    assert broker.stop() == 0  # flushes the exports

    export = broker.store / "export"
    for kind in ("metrics", "traces", "rmq_trace"):
        assert any(f.endswith(".msgpack") for f in os.listdir(export / kind)), kind

    out = tmp_path / "report"
    result = build_report(str(export), str(out))
    by_series = {r["series"]: r for r in result.lateness}
    assert by_series["level-1"]["count"] == 20
    assert by_series["level-2"]["count"] == 15
    assert by_series["timer"]["count"] == 5
    # levels in numeric order, named with their delay from the broker's table; timers last
    assert [r["name"] for r in result.lateness] == ["L1 · 200ms", "L2 · 400ms", "timers"]
    for row in by_series.values():
        assert 0 <= row["p50"] <= row["p99"] <= row["max"]  # delivered at or after due, never early
    [pubs] = [r for r in result.client_traces if r["traceType"] == "Pub"]
    assert (pubs["topic"], pubs["group"], pubs["count"], pubs["success"]) == ("Orders", "PG", 2, 2)
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(result.charts) and "L2 · 400ms" in html
    for name, path in result.tables.items():
        assert os.path.exists(os.path.join(path, "_SUCCESS")), name
    assert os.path.getsize(result.charts["lateness_percentiles"]) > 5000
    # every scheduled message counted once, on its real topic, when it arrived there
    thr = result.rows["throughput_by_topic"]
    per_topic: dict[str, float] = {}
    for r in thr:
        per_topic[r["topic"]] = per_topic.get(r["topic"], 0) + r["messages"]
    assert per_topic.get("Orders") == 40 and "SCHEDULE_TOPIC_XXXX" not in per_topic, per_topic
    cdf = result.rows["lateness_cdf"]
    assert {r["series"] for r in cdf} == {"level-1", "level-2", "timer"} and len(cdf) == 3 * 101

    check_charts_read_at_a_glance(result)
    check_page_in_chromium(result, tmp_path, forbidden_paths=[str(tmp_path), str(broker.store)])


def _panels(result: ReportResult) -> list[tuple[str, PanelFacts]]:
    return [(name, p) for name, panels in result.panels.items() for p in panels]


def check_charts_read_at_a_glance(result: ReportResult) -> None:
    """What each chart shows, read from the data it drew (not from pixels)."""
    s = {r["series"]: r for r in result.summary}
    # the summary block: per level and for timers, none early, every message fell due at some second
    assert [r["name"] for r in result.summary] == ["L1 · 200ms", "L2 · 400ms", "timers"]
    assert [s[k]["count"] for k in ("level-1", "level-2", "timer")] == [20, 15, 5]
    for r in result.summary:
        assert r["early"] == 0, r
        assert 0 <= r["p50"] <= r["p99"] <= r["max"], r
        assert 1 <= r["peakDuePerSec"] <= r["count"], r
    assert set(result.charts) | set(result.omitted) == {
        "lateness_percentiles", "lateness_cdf", "deliveries", "lateness_p99_over_time", "throughput", "backlog",
        "consumer_lag"}
    for chart in ("lateness_percentiles", "lateness_cdf", "deliveries", "throughput", "backlog"):
        assert chart in result.charts, (chart, result.omitted)  # these had traffic in this run
    traffic = {"L1 · 200ms", "L2 · 400ms", "timers"}
    for name, p in _panels(result):
        # no panel, and no line in one, without data: levels 3 and 4 had no traffic, the consumer left
        assert p.series and all(has_data([(0, y) for y in s.y]) for s in p.series), (name, p.title)
        if name in ("lateness_percentiles", "lateness_cdf", "deliveries", "lateness_p99_over_time", "backlog"):
            assert {s.label for s in p.series} <= traffic | {"p50", "p99", "max"}, (name, p.series)
        # units on every value axis; time axes say their zone
        value_label = p.xlabel if p.value_axis == "x" else p.ylabel
        assert UNIT.search(value_label), (name, value_label)
        if name not in ("lateness_percentiles", "lateness_cdf"):
            assert p.xlabel == "time (UTC)", (name, p.xlabel)
        assert not p.legend_overlaps_data, name  # legends sit outside the plot
        # no axis collapsed to 0: the drawn values reach well into the axis
        assert p.value_span[1] >= 0.3, (name, p.value_span)
    # one throughput unit: every rate is msg/s
    for name in ("deliveries", "throughput"):
        for p in result.panels[name]:
            assert UNIT.search(p.ylabel).group(1) == "msg/s", (name, p.ylabel)  # type: ignore[union-attr]
    # deliveries per level over time: the buckets add up to each level's count
    [deliveries] = result.panels["deliveries"]
    bucket_s = _bucket_s(result)
    assert {s.label: round(sum(y for y in s.y if math.isfinite(y)) * bucket_s) for s in deliveries.series} == {
        "L1 · 200ms": 20, "L2 · 400ms": 15, "timers": 5}
    # p50 and p99 both readable: on the lateness axes a p50 of 1 ms or more is not flattened onto the floor
    [bars] = result.panels["lateness_percentiles"]
    by_bar = {s.label: s for s in bars.series}
    assert bars.yscale in ("log", "symlog") and all(p.xscale in ("log", "symlog") for p in result.panels["lateness_cdf"])
    for v, f in zip(by_bar["p50"].y, by_bar["p50"].frac, strict=True):
        assert v < 1 or f >= 0.1, (v, f, bars.yscale)
    for p in result.panels["lateness_cdf"]:
        # the axis ends near the data (cut at p99.9), not at a far outlier that squeezes every line against 0
        assert p.value_span[1] >= 0.8, p.value_span
        for series in p.series:  # where p99 is well above p50, the two sit visibly apart on the axis
            at = {round(y * 100, 1): (x, f) for x, y, f in zip(series.x, series.y, series.frac, strict=True)}
            (p50, f50), (p99, f99) = at[50.0], at[99.0]
            if p99 >= 2 * max(p50, 1.0):
                assert f99 - f50 >= 0.08, (series.label, p50, p99, f50, f99, p.xscale)


def _bucket_s(result: ReportResult) -> float:
    rows = result.rows["deliveries_by_series"]
    return float(rows[0]["delivered"]) / float(rows[0]["ratePerSec"])


def check_page_in_chromium(result: ReportResult, tmp_path, forbidden_paths: list[str]) -> None:
    page = tmp_path / "report" / "report.html"
    text = page.read_text()
    for path in forbidden_paths:
        assert path not in text, path  # no path of the machine that made it
    if chromium.CHROMIUM is None:
        pytest.skip("no chromium (make setup installs Debian's chromium when apt-get can): page layout not checked")
    layout = chromium.measure(chromium.CHROMIUM, page, SCREEN_WIDTH)
    assert layout.innerWidth == SCREEN_WIDTH
    assert layout.scrollWidth <= SCREEN_WIDTH, layout.scrollWidth  # no horizontal scrolling
    # the summary block comes first and names every level, the timers and the early count
    assert layout.summary is not None
    for word in ("L1 · 200ms", "L2 · 400ms", "timers", "early (messages)", "peak due (msg/s)", "lateness p99 (ms)"):
        assert word in layout.summary["text"], word
    [summary] = [t for t in layout.tables if t["id"] == "summary-table"]
    assert summary["rows"] == 3 and summary["right"] <= SCREEN_WIDTH
    # units in every table header that holds a number
    for t in layout.tables:
        for h in t["headers"][1:]:
            assert UNIT.search(h) or h in ("topic", "group"), (t["id"], h)
    # one image per drawn chart, each decoded and shown whole on the screen
    assert sorted(i["alt"] for i in layout.images) == sorted(
        {"lateness_percentiles": "Lateness per delay level", "lateness_cdf": "Lateness distribution",
         "deliveries": "Deliveries per delay level over time", "lateness_p99_over_time": "Lateness p99 over time",
         "throughput": "Messages arriving per topic", "backlog": "Pending scheduled messages",
         "consumer_lag": "Consumer lag"}[c] for c in result.charts)
    for img in layout.images:
        assert img["naturalWidth"] > 0 and img["height"] > 50, img
        assert 0 <= img["left"] and img["right"] <= SCREEN_WIDTH, img
        assert img["width"] >= 0.8 * min(img["naturalWidth"], 600), img  # not shrunk unreadably
    png = tmp_path / "report.png"
    chromium.screenshot(chromium.CHROMIUM, page, png, SCREEN_WIDTH, layout.scrollHeight)
    assert int.from_bytes(png.read_bytes()[16:20], "big") == SCREEN_WIDTH


def test_report_cli_refuses_a_missing_input_with_one_line(tmp_path):
    r = _cli("analytics", "report", "--input", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "not found" in r.stderr
    (tmp_path / "empty" / "metrics").mkdir(parents=True)
    r = _cli("analytics", "report", "--input", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), timeout=60)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "no delaymq exports" in r.stderr
    assert not (tmp_path / "o" / "report.html").exists()
