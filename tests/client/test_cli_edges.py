"""CLI edges (issue 29 item 4), through the real console entry points and a real broker: `scheduled levels`
and `scheduled timers` are tables whose lateness percentiles are the exact figures of the delivered
messages (not a histogram bucket's edge); invalid numbers are refused with one line; every entry point
has `--version` and states its defaults in `--help`."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from tests.client.conftest import uniq
from tests.helpers.broker import REPO_ROOT

ENTRY_POINTS = {"delaymq": "client.cli", "delaymq-broker": "server", "delaymq-namesrv": "server.cluster.namesrv"}


pytestmark = pytest.mark.process  # broker processes and the console entry points

def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, env=dict(os.environ))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run("client.cli", *args)


def nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def table(out: str) -> tuple[list[str], list[list[str]]]:
    """Header names and rows of a CLI table (columns split on runs of 2+ spaces)."""
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("(")]
    split = [re.split(r"\s{2,}", ln.strip()) for ln in lines]
    return split[0], split[1:]


def test_scheduled_tables_show_the_exact_lateness_of_what_was_delivered(broker_factory):
    b = broker_factory({"messageDelayLevel": "300ms 1h", "timerPrecisionMs": 100})
    topic, group = uniq("Edge"), uniq("GEdge")
    b.create_topic(topic, queues=2)
    assert cli("produce", "-n", b.namesrv, "-t", topic, "--count", "20", "--delay-level", "1").returncode == 0
    assert cli("produce", "-n", b.namesrv, "-t", topic, "--count", "12", "--delay", "400ms").returncode == 0
    got = cli("consume", "-n", b.namesrv, "-t", topic, "-g", group, "--from-where", "first", "--max", "32",
              "--output", "json", "--idle-timeout", "30")
    assert got.returncode == 0, got.stderr
    msgs = [json.loads(ln) for ln in got.stdout.splitlines()]
    assert len(msgs) == 32  # every message delivered: the broker's figures cover all of them

    levels = cli("scheduled", "levels", "-n", b.namesrv)
    assert levels.returncode == 0, levels.stderr
    header, rows = table(levels.stdout)
    assert header[:6] == ["#Broker", "#Level", "#Delay", "#Pending", "#Next Due", "#Delivered"]
    assert header[6:] == ["#Lateness p50 (ms)", "#Lateness p99 (ms)", "#Lateness max (ms)", "#Over last"]
    row = dict(zip(header, next(r for r in rows if r[1] == "1"), strict=True))
    assert row["#Delay"] == "300ms" and row["#Pending"] == "0" and row["#Delivered"] == "20"
    assert row["#Over last"] == "20" and "<=" not in levels.stdout  # exact figures, no bound marker
    # the exact figures of the 20 delivered level-1 messages: store time of the delivered copy minus its due
    # time, the first ms after the scheduled record's store time + 300 ms (the records still in
    # SCHEDULE_TOPIC_XXXX, same UNIQ_KEY)
    sched = cli("consume", "-n", b.namesrv, "-t", "SCHEDULE_TOPIC_XXXX", "-g", uniq("GSched"), "--from-where",
                "first", "--max", "20", "--output", "json", "--idle-timeout", "30")
    assert sched.returncode == 0, sched.stderr
    stored = {m["msgId"]: int(m["storeTimestamp"]) for m in map(json.loads, sched.stdout.splitlines())}
    late = [int(m["storeTimestamp"]) - (stored[m["msgId"]] + 300 + 1) for m in msgs if m["msgId"] in stored]
    assert len(late) == 20
    assert (int(row["#Lateness p50 (ms)"]), int(row["#Lateness p99 (ms)"]), int(row["#Lateness max (ms)"])) == \
        (nearest_rank(late, 0.5), nearest_rank(late, 0.99), max(late))

    timers = cli("scheduled", "timers", "-n", b.namesrv)
    assert timers.returncode == 0, timers.stderr
    theader, [trow] = table(timers.stdout)
    t = dict(zip(theader, trow, strict=True))
    assert t["#Pending"] == "0" and t["#Delivered"] == "12" and t["#Over last"] == "12"
    tp50, tp99, tmax = (int(t[f"#Lateness {k} (ms)"]) for k in ("p50", "p99", "max"))
    assert 0 <= tp50 <= tp99 <= tmax


@pytest.mark.parametrize("args", [["--rate", "-5"], ["--rate", "nan"], ["--timeout", "0"], ["--size", "-1"],
                                  ["--count", "0"]], ids=lambda a: " ".join(a))
def test_invalid_numbers_are_refused_with_one_line(args):
    r = cli("produce", "-t", "T", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and args[0] in lines[0], r.stderr


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_every_entry_point_has_version_and_states_its_defaults(name):
    v = run(ENTRY_POINTS[name], "--version")
    assert v.returncode == 0 and v.stdout.startswith(f"{name} "), (v.stdout, v.stderr)
    h = run(ENTRY_POINTS[name], *(["produce"] if name == "delaymq" else []), "--help")
    assert h.returncode == 0
    # each option's help (joined over its wrapped lines) states a default, -h/--version aside
    options: list[str] = []
    for ln in h.stdout.split("options:", 1)[1].splitlines():
        if ln.startswith("  -"):
            options.append(ln)
        elif options and ln.strip():
            options[-1] += " " + ln.strip()
    checked = [" ".join(o.split()) for o in options if not o.lstrip().startswith(("-h", "--version"))]
    if name == "delaymq":  # options with a value by default state it (-t has none: it is required)
        checked = [o for o in checked if o.startswith(("--count", "--rate", "--inflight", "-g", "-n", "--timeout"))]
        assert len(checked) == 6
    assert checked and all("default" in o for o in checked), h.stdout
    if name == "delaymq-broker":
        assert "(default: ~/store" in " ".join(h.stdout.split())
