"""Scheduled deliveries count as puts on their real topic, as RocketMQ's store statistics do
(issue 12 item 8): per-topic throughput on /metrics includes delay-level and timer deliveries."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers.broker import pick_port_pair
from tests.server.helpers import send
from tests.server.raw import RawClient
from tests.server.test_quarantine import metric, scrape, wait_for


def put_count(text: str, topic: str) -> int:
    return int(metric(text, "rocketmq_messages_in_total", topic=topic) or 0)


@pytest.mark.parametrize("async_deliver", [False, True], ids=["sync", "async"])
async def test_delay_and_timer_deliveries_count_as_puts_of_their_topic(make_broker, async_deliver):
    b = await make_broker(message_delay_level="200ms 1s", timer_precision_ms=100, metrics_port=pick_port_pair(),
                          enable_schedule_async_deliver=async_deliver)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        for i, topic in enumerate(("Counted", "Counted2", "Counted")):  # one level's run to two topics
            assert (await send(c, topic, b"d%d" % i, qid=0, DELAY="1")).code == 0
        for i in range(2):
            assert (await send(c, "Counted", b"t%d" % i, qid=0, TIMER_DELAY_MS="300")).code == 0
        assert (await send(c, "Counted", b"now", qid=0)).code == 0
        await wait_for(c, "Counted", 5)
        await wait_for(c, "Counted2", 1)
        deadline = time.monotonic() + 30
        while put_count(text := await scrape(b.metrics_http.port), "Counted") < 5:
            assert time.monotonic() < deadline, text
            await asyncio.sleep(0.02)  # poll interval: the count is re-read
        assert put_count(text, "Counted") == 5  # 1 plain send + 2 delay-level + 2 timer deliveries
        assert put_count(text, "Counted2") == 1
        assert put_count(text, "SCHEDULE_TOPIC_XXXX") == 3 and put_count(text, "rmq_sys_wheel_timer") == 2
        assert int(b.runtime_info()["msgPutTotalTodayNow"]) == 11
    finally:
        await c.close()
