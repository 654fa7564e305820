"""The `delaymq` command end to end: real subprocesses against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.client.conftest import uniq
from tests.helpers.broker import REPO_ROOT

pytestmark = pytest.mark.process


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_produce_consume_status_progress_and_view(broker, topic):
    n = broker.namesrv
    p = cli("produce", "-n", n, "-t", topic, "--count", "25", "--body", "hi {i}", "--tags", "TagA",
            "--keys", "key{i}", "--output", "json", "--progress")
    assert p.returncode == 0, p.stderr
    sent = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(sent) == 25 and all(s["status"] == "SEND_OK" for s in sent)
    assert "sent 25 of 25" in p.stderr and "msg/s" in p.stderr

    st = cli("topic", "status", "-n", n, "-t", topic, "--output", "json")
    assert st.returncode == 0, st.stderr
    queues = json.loads(st.stdout)
    assert len(queues) == 4 and sum(q["maxOffset"] - q["minOffset"] for q in queues) == 25

    group = uniq("CLIG")
    c = cli("consume", "-n", n, "-t", topic, "-g", group, "--from-where", "first", "--max", "25",
            "--output", "json", "--idle-timeout", "20")
    assert c.returncode == 0, c.stderr
    got = [json.loads(line) for line in c.stdout.splitlines()]
    assert sorted(g["body"] for g in got) == sorted(f"hi {i}" for i in range(25))
    assert {g["msgId"] for g in got} == {s["msgId"] for s in sent}
    assert all(g["tags"] == "TagA" for g in got)

    gp = cli("group", "progress", "-n", n, "-g", group, "-t", topic, "--output", "json")
    assert gp.returncode == 0, gp.stderr
    prog = json.loads(gp.stdout)
    assert prog["totalLag"] == 0
    assert sum(q["consumerOffset"] for q in prog["queues"] if q["topic"] == topic) == 25
    assert all(q["lastTimestamp"] > 0 for q in prog["queues"] if q["topic"] == topic and q["consumerOffset"])
    # without -t the broker reports every topic the group committed offsets for (GET_CONSUME_STATS)
    auto = json.loads(cli("group", "progress", "-n", n, "-g", group, "--output", "json").stdout)
    assert {q["topic"] for q in auto["queues"]} >= {topic} and auto["totalLag"] == 0
    table = cli("topic", "status", "-n", n, "-t", topic)
    assert table.returncode == 0 and "#Last Updated" in table.stdout

    v = cli("message", "view", "-n", n, "--id", sent[3]["offsetMsgId"], "--output", "json")
    assert v.returncode == 0, v.stderr
    assert json.loads(v.stdout)["body"] == "hi 3"
    k = cli("message", "view", "-n", n, "--key", "key7", "-t", topic, "--output", "json")
    assert k.returncode == 0, k.stderr
    [found] = [json.loads(line) for line in k.stdout.splitlines()]
    assert found["body"] == "hi 7" and found["msgId"] == sent[7]["msgId"]


def test_topic_create_and_list(broker):
    name = uniq("CliTopic")
    c = cli("topic", "create", "-n", broker.namesrv, "-t", name, "-r", "3", "-w", "3")
    assert c.returncode == 0, c.stderr
    st = cli("topic", "status", "-n", broker.namesrv, "-t", name, "--output", "json")
    assert st.returncode == 0 and len(json.loads(st.stdout)) == 3
    ls = cli("topic", "list", "-n", broker.namesrv)
    assert ls.returncode == 0, ls.stderr
    assert name in ls.stdout.split()


def test_unknown_topic_is_one_clear_line(broker):
    r = cli("topic", "status", "-n", broker.namesrv, "-t", uniq("Nope"))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not exist" in lines[0], r.stderr


@pytest.mark.parametrize("args", [["produce", "-t", "T"], ["topic", "list"], ["consume", "-t", "T", "--max", "1"]])
def test_unreachable_broker_is_one_clear_line(args):
    # port 1 on localhost: nothing listens there, the connection is refused at once
    r = cli(*args, "-n", "127.0.0.1:1", "--timeout", "2", timeout=30)
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("delaymq: error:") and "127.0.0.1:1" in lines[0], r.stderr


def test_bad_arguments_exit_2_with_one_line():
    r = cli("produce", "-t", "T", "--delay", "soon")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad duration" in lines[0]


def test_scheduled_levels_show_pending_delay_messages(broker, topic):
    p = cli("produce", "-n", broker.namesrv, "-t", topic, "--count", "3", "--delay-level", "18")
    assert p.returncode == 0, p.stderr
    r = cli("scheduled", "levels", "-n", broker.namesrv, "--output", "json")
    assert r.returncode == 0, r.stderr
    rows = {row["level"]: row for row in json.loads(r.stdout)}
    assert rows[18]["pending"] == 3 and rows[18]["maxOffset"] == 3
    t = cli("scheduled", "timers", "-n", broker.namesrv)
    assert t.returncode == 0, t.stderr


def test_scheduled_cancel_by_offset_msg_id(broker, topic):
    p = cli("produce", "-n", broker.namesrv, "-t", topic, "--delay", "1h", "--output", "json")
    assert p.returncode == 0, p.stderr
    [sent] = [json.loads(line) for line in p.stdout.splitlines()]
    c = cli("scheduled", "cancel", "-n", broker.namesrv, "--id", sent["offsetMsgId"])
    assert c.returncode == 0, c.stderr
    assert c.stdout.startswith(f"cancelled: timer message {sent['msgId']} ")  # the offset id led to its UNIQ_KEY


def _timer_stats(broker) -> dict:
    r = cli("scheduled", "timers", "-n", broker.namesrv, "--output", "json")
    assert r.returncode == 0, r.stderr
    [table] = json.loads(r.stdout).values()
    return table


def test_a_cancel_that_changes_nothing_says_so_and_counts_stay_true(broker, topic):
    """Issue 12 item 8: cancelling twice, or cancelling an unknown timer, stores nothing, says so,
    and timerCongestNum (delaymq_timer_pending) never goes below the timers really pending."""
    p = cli("produce", "-n", broker.namesrv, "-t", topic, "--delay", "1h", "--count", "2", "--output", "json")
    assert p.returncode == 0, p.stderr
    first, _second = [json.loads(line) for line in p.stdout.splitlines()]
    assert _timer_stats(broker)["timerCongestNum"] == "2"
    c = cli("scheduled", "cancel", "-n", broker.namesrv, "--id", first["offsetMsgId"])
    assert c.returncode == 0 and c.stdout.startswith("cancelled:"), c.stdout + c.stderr
    assert _timer_stats(broker)["timerCongestNum"] == "1"
    again = cli("scheduled", "cancel", "-n", broker.namesrv, "--id", first["offsetMsgId"])
    assert again.stdout.startswith("already cancelled:"), again.stdout + again.stderr
    deliver_at = str(int(time.time() * 1000) + 1800_000)
    unknown = cli("scheduled", "cancel", "-n", broker.namesrv, "-t", topic, "--uniq-key", "NO-SUCH-TIMER",
                  "--deliver-at", deliver_at)
    assert unknown.returncode == 1 and "not cancelled" in unknown.stdout and "no pending timer" in unknown.stdout, \
        unknown.stdout + unknown.stderr
    assert _timer_stats(broker)["timerCongestNum"] == "1"
    broker.restart()
    assert _timer_stats(broker)["timerCongestNum"] == "1"  # the wheel file's counts, recovered
    # after a restart the wheel itself still knows: a marker for the same timer changes nothing
    again = cli("scheduled", "cancel", "-n", broker.namesrv, "--id", first["offsetMsgId"])
    assert again.stdout.startswith("already cancelled:"), again.stdout + again.stderr
    assert _timer_stats(broker)["timerCongestNum"] == "1"


def test_group_connections_lists_a_live_consumer(broker, topic):
    group = uniq("ConnG")
    off = cli("group", "connections", "-n", broker.namesrv, "-g", group)
    assert off.returncode == 1 and "not online" in off.stderr
    consumer = subprocess.Popen([sys.executable, "-m", "client.cli", "consume", "-n", broker.namesrv, "-t", topic,
                                 "-g", group, "--idle-timeout", "60", "--max", "1000000"], cwd=REPO_ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:  # each round is a real GET_CONSUMER_CONNECTION_LIST; the heartbeat lands at start-up
            r = cli("group", "connections", "-n", broker.namesrv, "-g", group, "--output", "json")
            if r.returncode == 0 or time.monotonic() > deadline:
                break
        assert r.returncode == 0, r.stderr
        [cc] = json.loads(r.stdout)
        assert cc["messageModel"] == "CLUSTERING" and topic in cc["subscriptions"]
        [conn] = cc["connections"]
        assert conn["clientAddr"].startswith("127.0.0.1:") and conn["language"] == "PYTHON"
    finally:
        consumer.terminate()
        consumer.wait(30)


def test_produce_transactional_commit_and_rollback(broker, topic):
    n = broker.namesrv
    c = cli("produce", "-n", n, "-t", topic, "--count", "3", "--transaction", "commit", "--output", "json")
    assert c.returncode == 0, c.stderr
    r = cli("produce", "-n", n, "-t", topic, "--count", "2", "--transaction", "rollback", "--output", "json")
    assert r.returncode == 0, r.stderr
    got = cli("consume", "-n", n, "-t", topic, "-g", uniq("TxCli"), "--from-where", "first", "--max", "3",
              "--output", "json", "--idle-timeout", "20")
    assert got.returncode == 0, got.stderr
    committed = {json.loads(line)["msgId"] for line in c.stdout.splitlines()}
    assert {json.loads(line)["msgId"] for line in got.stdout.splitlines()} == committed
    status = json.loads(cli("topic", "status", "-n", n, "-t", topic, "--output", "json").stdout)
    assert sum(q["maxOffset"] for q in status) == 3  # the rolled-back halves never reached the topic
