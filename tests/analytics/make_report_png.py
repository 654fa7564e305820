"""Regenerate docs/report.png from a real run: `.venv/bin/python -m tests.analytics.make_report_png [WORK_DIR]`.

A broker with ten delay levels (1 s .. 1 m) takes 40 messages per level at 20 msg/s (levels 1-5 on
Orders, 6-10 on Payments), 100 timers due 12 s after sending and 300 plain sends (Audit); two consumers
read Orders and Payments from the moment every send is stored. The broker is stopped (which
flushes the exports), the Spark report is built from them, and headless Chromium renders the whole page
1400 px wide into docs/report.png. Takes about two minutes.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from analytics.report import build_report
from tests.helpers import chromium
from tests.helpers.broker import BrokerProcess
from tests.helpers.checks import present

REPO = Path(__file__).resolve().parents[2]
LEVELS = "1s 2s 3s 5s 8s 10s 15s 20s 30s 1m"
PAGE_WIDTH = 1400


def _cli(ns: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "client.cli", *args[:1], "-n", ns, *args[1:]], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"{p.args!r}: {err[-2000:]}"


def record_run(work_dir: Path) -> Path:
    """Run the traffic above against a real broker; the export directory it leaves."""
    broker = BrokerProcess(work_dir / "broker", config={
        "messageDelayLevel": LEVELS, "metricsExportIntervalMs": 1000, "mappedFileSizeCommitLog": 32 * 1024 * 1024})
    broker.start()
    try:
        ns = broker.namesrv
        sends = [_cli(ns, "produce", "-t", "Orders" if level <= 5 else "Payments", "--count", "40", "--rate", "20",
                      "--delay-level", str(level), "--body", f"L{level}-{{i}}") for level in range(1, 11)]
        sends.append(_cli(ns, "produce", "-t", "Orders", "--count", "100", "--rate", "20", "--delay", "12s",
                          "--body", "T-{i}"))
        sends.append(_cli(ns, "produce", "-t", "Audit", "--count", "300", "--rate", "20", "--body", "A-{i}"))
        _wait(sends)
        # the consumers come up once every send is stored: what they find waiting shows as lag
        consumers = [_cli(ns, "consume", "-g", group, "-t", topic, "--from-where", "first", "--max", str(n),
                          "--idle-timeout", "120") for group, topic, n in (("shop", "Orders", 300), ("pay", "Payments", 200))]
        _wait(consumers)
    finally:
        assert broker.stop() == 0
    return broker.store / "export"


def main(argv: list[str]) -> int:
    browser = present(chromium.CHROMIUM, "chromium")
    with tempfile.TemporaryDirectory(prefix="delaymq-report-") as tmp:
        work = Path(argv[0]) if argv else Path(tmp)
        export = record_run(work)
        result = build_report(str(export), str(work / "report"))
        page = Path(result.html_path)
        layout = chromium.measure(browser, page, PAGE_WIDTH)
        assert layout.scrollWidth <= PAGE_WIDTH, layout.scrollWidth
        chromium.screenshot(browser, page, REPO / "docs" / "report.png", PAGE_WIDTH, layout.scrollHeight)
        print(f"docs/report.png: {PAGE_WIDTH}x{layout.scrollHeight}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
