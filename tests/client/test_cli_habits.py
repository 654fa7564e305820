"""CLI habits (issue 15 item 5): NAMESRV_ADDR, --version, defaults in --help, exact --max commits, both id
forms, warnings for --deliver-at, errors for unknown groups/topics, the per-level table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.client.conftest import uniq
from tests.helpers.broker import REPO_ROOT

pytestmark = pytest.mark.process


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def test_version_help_defaults_and_namesrv_addr(broker):
    v = run("--version")
    assert v.returncode == 0 and v.stdout.startswith("delaymq ")
    h = run("produce", "--help", env={"NAMESRV_ADDR": broker.namesrv})
    assert f"(default: {broker.namesrv})" in h.stdout and "(default: delaymq-cli-producer)" in h.stdout
    for sub in (["produce"], ["consume"], ["scheduled", "list"], ["group", "progress"]):
        out = run(*sub, "--help").stdout
        options = [ln for ln in out.splitlines() if ln.startswith("  -")]
        assert options, out
    topic = uniq("Habit")
    p = run("produce", "-t", topic, "--count", "2", "--print-ids", env={"NAMESRV_ADDR": broker.namesrv})
    assert p.returncode == 0, p.stderr
    ids = [ln.split() for ln in p.stdout.splitlines()]
    assert len(ids) == 2 and all(len(u) == 32 and len(o) == 32 for u, o in ids)
    j = run("produce", "-n", broker.namesrv, "-t", topic, "--output", "json")
    assert set(json.loads(j.stdout)) >= {"msgId", "uniqKey", "offsetMsgId"}
    for form in ids[0]:  # UNIQ_KEY (with -t) and offset msgId both find the message
        m = run("message", "view", "-n", broker.namesrv, "--id", form, "-t", topic, "--output", "json")
        assert m.returncode == 0 and json.loads(m.stdout)["msgId"] == ids[0][0], m.stderr


def test_consume_max_commits_exactly_what_it_printed(broker):
    topic, group = uniq("Max"), uniq("GMax")
    assert run("produce", "-n", broker.namesrv, "-t", topic, "--count", "100").returncode == 0
    first = run("consume", "-n", broker.namesrv, "-t", topic, "-g", group, "--from-where", "first", "--max", "37",
                "--output", "json", "--idle-timeout", "20")
    got1 = [json.loads(ln)["msgId"] for ln in first.stdout.splitlines()]
    assert first.returncode == 0 and len(got1) == 37
    prog = json.loads(run("group", "progress", "-n", broker.namesrv, "-g", group, "-t", topic, "--output",
                          "json").stdout)
    assert sum(q["consumerOffset"] for q in prog["queues"] if q["topic"] == topic) == 37
    rest = run("consume", "-n", broker.namesrv, "-t", topic, "-g", group, "--max", "63", "--output", "json",
               "--idle-timeout", "20")
    got2 = [json.loads(ln)["msgId"] for ln in rest.stdout.splitlines()]
    assert len(got2) == 63 and not set(got1) & set(got2)


def test_unknown_group_or_topic_and_deliver_at_warnings(broker):
    g = run("group", "progress", "-n", broker.namesrv, "-g", uniq("Nobody"))
    assert g.returncode == 1 and "no committed offsets" in g.stderr and g.stderr.count("\n") == 1
    t = run("group", "progress", "-n", broker.namesrv, "-g", "x", "-t", uniq("NoTopic"))
    assert t.returncode == 1 and "does not exist" in t.stderr
    topic = uniq("Warn")
    secs = run("produce", "-n", broker.namesrv, "-t", topic, "--deliver-at", str(int(time.time()) + 60))
    assert "looks like epoch seconds" in secs.stderr
    past = run("produce", "-n", broker.namesrv, "-t", topic, "--deliver-at", str(int(time.time() * 1000) - 5000))
    assert past.returncode == 0 and "in the past" in past.stderr


def test_scheduled_levels_table(broker_factory):
    b = broker_factory({"messageDelayLevel": "200ms 1h"})
    topic = uniq("Lv")
    assert run("produce", "-n", b.namesrv, "-t", topic, "--count", "3", "--delay-level", "2").returncode == 0
    out = run("scheduled", "levels", "-n", b.namesrv).stdout
    header, *rows = out.splitlines()
    assert "#Delay" in header and "#Next Due" in header and "#Lateness p99 (ms)" in header
    row2 = next(r.split() for r in rows if r.split()[1] == "2")
    assert row2[2] == "1h" and row2[3] == "3" and row2[4].startswith("20")  # next due shown as a date-time
