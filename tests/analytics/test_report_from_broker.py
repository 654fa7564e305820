"""End to end for analysts: a real broker run produces exports, real Spark (local mode) aggregates them."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from analytics.report import build_report
from tests.helpers.checks import present

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DELAYMQ = [sys.executable, "-m", "client.cli"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]


def screenshot(html_path, png_path, width: int = 1100, height: int = 3000) -> None:
    """Render the report in headless Chromium (Debian's `chromium`, installed by make setup) to a PNG."""
    r = subprocess.run([present(CHROMIUM, "chromium"), *CHROMIUM_FLAGS, f"--window-size={width},{height}", f"--screenshot={png_path}",
                        f"file://{html_path}"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HOME": str(os.path.dirname(png_path))})
    assert r.returncode == 0 and os.path.exists(png_path), r.stderr[-2000:]


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
    assert html.count("data:image/png;base64,") == 7 and "L2 · 400ms" in html
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

    if CHROMIUM is None:
        pytest.skip("no chromium (make setup installs Debian's chromium when apt-get can): screenshot not checked")
    png = tmp_path / "report.png"
    screenshot(out / "report.html", png)
    import matplotlib.image as mpimg  # noqa: PLC0415
    img = mpimg.imread(str(png))[..., :3]
    ink = (img.sum(axis=2) < 2.7).mean()  # share of pixels clearly darker than white
    colours = len({tuple(p) for p in (img[::7, ::7] * 255).astype(int).reshape(-1, 3).tolist()})
    assert ink > 0.02 and colours > 50, (ink, colours)


def test_report_cli_refuses_a_missing_input_with_one_line(tmp_path):
    r = _cli("analytics", "report", "--input", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "not found" in r.stderr
    (tmp_path / "empty" / "metrics").mkdir(parents=True)
    r = _cli("analytics", "report", "--input", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), timeout=60)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "no delaymq exports" in r.stderr
    assert not (tmp_path / "o" / "report.html").exists()
