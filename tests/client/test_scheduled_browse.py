"""`delaymq scheduled list` / `scheduled cancel --id` end to end (real broker, real CLI subprocesses)."""

from __future__ import annotations

import json

import pytest

from tests.client.conftest import uniq
from tests.client.test_cli import cli
from tests.helpers import wire

pytestmark = pytest.mark.process

LEVELS = "1s 5s 3s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
QUERY_SCHEDULED = 3111


def produce(n: str, topic: str, *args: str) -> list[dict]:
    p = cli("produce", "-n", n, "-t", topic, "--output", "json", *args)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def listed(n: str, *args: str) -> list[dict]:
    p = cli("scheduled", "list", "-n", n, "--output", "json", *args)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_list_filters_pages_and_cancels(broker_factory):
    b = broker_factory({"messageDelayLevel": LEVELS})
    n, topic, other = b.namesrv, uniq("Sched"), uniq("Other")
    lv = produce(n, topic, "--count", "3", "--delay-level", "4", "--tags", "T4", "--keys", "lk{i}")
    tm = produce(n, topic, "--count", "3", "--delay", "600s", "--keys", "tk{i}")
    produce(n, other, "--count", "2", "--delay-level", "5")

    rows = listed(n, "-t", topic)
    assert [(r["kind"], r["level"], r["uniqKey"]) for r in rows[:3]] == [("level", 4, s["msgId"]) for s in lv]
    assert {(r["kind"], r["uniqKey"]) for r in rows[3:]} == {("timer", s["msgId"]) for s in tm} and len(rows) == 6
    assert all(r["topic"] == topic for r in rows)
    assert [r["tags"] for r in rows[:3]] == ["T4"] * 3 and rows[0]["keys"] == "lk0"
    assert all(30_000 <= r["dueMs"] - r["storeMs"] <= 30_001 for r in rows[:3])
    assert all(599_000 <= r["dueMs"] - r["storeMs"] <= 600_001 for r in rows[3:])
    assert len(listed(n)) == 8 and len(listed(n, "--timers")) == 3 and len(listed(n, "--level", "5")) == 2
    assert [r["uniqKey"] for r in listed(n, "--key", "tk1")] == [tm[1]["msgId"]]
    assert listed(n, "--due-before", str(rows[0]["dueMs"] + 1), "-t", topic)[0]["uniqKey"] == lv[0]["msgId"]
    assert len(listed(n, "--limit", "4", "-t", topic)) == 4

    # the request itself: one unit at a time, the cursor walks levels then timers without repeats
    seen, cursor = [], None
    for _ in range(20):
        ext = {"limit": "1", "topic": topic, **({"cursor": cursor} if cursor else {})}
        page = json.loads(bytes(wire.invoke(b.addr, QUERY_SCHEDULED, ext).body))
        seen += [r["uniqKey"] for r in page["rows"]]
        cursor = page["cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(s["msgId"] for s in lv + tm) and len(seen) == 6

    # cancel by UNIQ_KEY (a delay-level message) and by offset msgId (a timer)
    c = cli("scheduled", "cancel", "-n", n, "--id", lv[1]["msgId"], "--output", "json")
    assert c.returncode == 0 and json.loads(c.stdout)["status"] == "cancelled", c.stdout + c.stderr
    c = cli("scheduled", "cancel", "-n", n, "--id", tm[2]["offsetMsgId"])
    assert c.returncode == 0 and c.stdout.startswith("cancelled: timer"), c.stdout + c.stderr
    again = cli("scheduled", "cancel", "-n", n, "--id", lv[1]["msgId"])
    assert again.returncode == 0 and again.stdout.startswith("already cancelled"), again.stdout
    unknown = cli("scheduled", "cancel", "-n", n, "--id", "7F000001658C276EED69796B5A20FFFF")
    assert unknown.returncode == 1 and "no scheduled message with UNIQ_KEY" in unknown.stdout, unknown.stdout
    left = {r["uniqKey"] for r in listed(n, "-t", topic)}
    assert left == {s["msgId"] for s in lv + tm} - {lv[1]["msgId"], tm[2]["msgId"]}


def test_cancelled_messages_are_not_delivered(broker_factory):
    b = broker_factory({"messageDelayLevel": LEVELS})
    n, topic = b.namesrv, uniq("SchedDel")
    lv = produce(n, topic, "--count", "3", "--delay-level", "2", "--body", "level {i}")
    tm = produce(n, topic, "--count", "2", "--delay", "6s", "--body", "timer {i}")
    for victim in (lv[0]["msgId"], tm[1]["msgId"]):  # seconds before they are due (CLI start-up included)
        c = cli("scheduled", "cancel", "-n", n, "--id", victim)
        assert c.returncode == 0 and c.stdout.startswith("cancelled"), c.stdout + c.stderr
    # the three others arrive (the last of them is due after both cancelled ones): then nothing else came
    got = cli("consume", "-n", n, "-t", topic, "-g", uniq("G"), "--from-where", "first", "--max", "3",
              "--output", "json", "--idle-timeout", "30")
    assert got.returncode == 0, got.stderr
    bodies = sorted(json.loads(line)["body"] for line in got.stdout.splitlines())
    assert bodies == ["level 1", "level 2", "timer 0"]
    late = cli("consume", "-n", n, "-t", topic, "-g", uniq("G2"), "--from-where", "first", "--output", "json",
               "--idle-timeout", "2")
    assert sorted(json.loads(line)["body"] for line in late.stdout.splitlines()) == bodies
    done = cli("scheduled", "cancel", "-n", n, "--id", lv[2]["msgId"])
    assert done.returncode == 1 and "already delivered" in done.stdout, done.stdout
    info = json.loads(cli("scheduled", "levels", "-n", n, "--output", "json").stdout)
    assert next(r for r in info if r["level"] == 2)["delivered"] == 2
