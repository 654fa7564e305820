"""SQL92 subscriptions through delaymq's own 4.x client and the `delaymq consume --sql` command, against a broker
subprocess with enablePropertyFilter=true: one topic feeds a tag group and two SQL92 groups, with immediate,
delay-level and timer messages (a scheduled message is filtered on delivery like any other)."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from client import Message, Producer, PullConsumer, PushConsumer
from client._wire import MQClientError
from tests.client.conftest import Collector, uniq
from tests.helpers.broker import REPO_ROOT

pytestmark = pytest.mark.process

# body: (tags, properties, how it is sent)
MESSAGES: dict[str, tuple[str, dict[str, str], dict[str, int]]] = {
    "now-app-big": ("TagA", {"channel": "app", "amount": "500"}, {}),
    "now-web-big": ("TagB", {"channel": "web", "amount": "500"}, {}),
    "lvl-app": ("TagA", {"channel": "app", "amount": "5"}, {"delay_level": 1}),
    "lvl-web": ("TagB", {"channel": "web", "amount": "900"}, {"delay_level": 1}),
    "tmr-app": ("TagB", {"channel": "app", "amount": "300"}, {"delay_ms": 1500}),
    "tmr-web": ("TagA", {"channel": "web", "amount": "1"}, {"delay_ms": 1500}),
}
END = ("TagA", {"channel": "app", "final": "yes"})  # sent last, after every delivery: matches all three groups
APP_SQL = "channel = 'app'"
BIG_SQL = "(amount BETWEEN 100 AND 1000 AND TAGS <> 'TagA') OR final IS NOT NULL"


async def consume_cli(namesrv: str, topic: str, group: str, sql: str, n: int) -> list[dict[str, object]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "client.cli", "consume", "-n", namesrv, "-t", topic, "-g", group, "--sql", sql,
        "--from-where", "first", "--max", str(n), "--output", "json", "--idle-timeout", "30",
        cwd=REPO_ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return [json.loads(line) for line in out.decode().splitlines()]


async def test_one_topic_feeds_a_tag_group_and_two_sql_groups_with_scheduled_messages(broker_factory) -> None:
    broker = broker_factory({"enablePropertyFilter": "true"})
    topic = uniq("SqlMix")
    async with Producer(uniq("PG"), broker.namesrv) as p:
        mq = (await p.send(Message(topic, b"create"))).queue  # every later message goes to this queue
        for body, (tags, props, when) in MESSAGES.items():
            msg = Message(topic, body.encode(), tags=tags, properties=props,
                          delay_level=when.get("delay_level", 0), delay_ms=when.get("delay_ms"))
            r = await p.send(msg, queue=mq)
            assert r.status.name == "SEND_OK"
        async with PullConsumer(uniq("PC"), broker.namesrv) as pc:
            await pc.fetch_queues(topic)
            async with asyncio.timeout(30):  # until the four scheduled messages are delivered to the queue
                while await pc.max_offset(mq) < 1 + len(MESSAGES):
                    await asyncio.sleep(0.05)
        await p.send(Message(topic, b"end", tags=END[0], properties=END[1]), queue=mq)

    expected = {
        "tag": {"now-app-big", "lvl-app", "tmr-web", "end"},
        "app": {"now-app-big", "lvl-app", "tmr-app", "end"},
        "big": {"now-web-big", "lvl-web", "tmr-app", "end"},
    }
    tag_col, app_col = Collector(), Collector()
    tag_c = PushConsumer(uniq("CGTag"), broker.namesrv, listener=tag_col, consume_from="first")
    tag_c.subscribe(topic, "TagA")
    app_c = PushConsumer(uniq("CGApp"), broker.namesrv, listener=app_col, consume_from="first")
    app_c.subscribe(topic, APP_SQL, "SQL92")
    async with tag_c, app_c:
        big = await consume_cli(broker.namesrv, topic, uniq("CGBig"), BIG_SQL, 4)
        await tag_col.wait_for(4, 30)
        await app_col.wait_for(4, 30)
    assert {m.body.decode() for m in tag_col.messages} == expected["tag"]
    assert {m.body.decode() for m in app_col.messages} == expected["app"]
    assert {str(m["body"]) for m in big} == expected["big"]
    assert all(m.properties.get("channel") == "app" for m in app_col.messages)


async def test_consumer_start_refuses_a_bad_expression_and_a_broker_without_the_filter(broker_factory) -> None:
    on, off = broker_factory({"enablePropertyFilter": "true"}), broker_factory()
    for broker, code, text in ((on, 23, "column 10"), (off, 1, "does not support consumer to filter message by SQL92")):
        topic = uniq("SqlBad")
        async with Producer(uniq("PG"), broker.namesrv) as p:
            await p.send(Message(topic, b"x"))
        c = PushConsumer(uniq("CGBad"), broker.namesrv, listener=Collector(), consume_from="first")
        c.subscribe(topic, "amount > 'x'" if broker is on else "amount > 1", "SQL92")
        try:
            await c.start()
            raise AssertionError("start() took a subscription the broker refuses")
        except MQClientError as e:
            assert e.code == code and text in str(e), str(e)
        assert c.group not in c.instance.consumers
