"""CONSUMER_SEND_MSG_BACK (36) through an in-process broker over raw frames (scheduled-messages.md §3)."""

from __future__ import annotations

import pytest

from server.processors.consumer_send_back import goes_to_dlq, retry_level
from storage.subscription_group import SubscriptionGroupConfig
from tests.server.conftest import make_broker  # noqa: F401  (fixture)
from tests.server.helpers import pull, send
from tests.server.raw import RawClient, decode_records

SEND_BACK = 36
LEVELS = "100ms 150ms 200ms 250ms 300ms 350ms"


def test_default_retry_schedule_and_dlq_rule():
    assert [retry_level(0, r) for r in range(16)] == list(range(3, 19))
    assert retry_level(2, 7) == 2  # a requested level wins
    assert not goes_to_dlq(15, 16, 0) and goes_to_dlq(16, 16, 0) and goes_to_dlq(0, 16, -1)


async def _setup(make_broker, **cfg):  # noqa: F811
    b = await make_broker(message_delay_level=LEVELS, **cfg)
    c = await RawClient.connect(b.config.broker_addr)
    r = await send(c, "SB", b"payload", tags="TagA", keys="k1", qid=0)
    assert r.code == 0, r.remark
    [orig] = decode_records((await pull(c, "G", "SB", 0, 0)).body)
    return b, c, r.ext["msgId"], orig


def _back(phys: int, group: str = "G", level: int = 0, **extra) -> dict:
    ext = {"offset": str(phys), "group": group, "delayLevel": str(level), "originMsgId": "", "unitMode": "false"}
    ext.update({k: str(v) for k, v in extra.items()})
    return ext


async def test_retry_goes_through_schedule_queue_then_retry_topic(make_broker):  # noqa: F811
    b, c, msg_id, orig = await _setup(make_broker)
    try:
        r = await c.invoke(SEND_BACK, _back(orig["phys"]))
        assert r.code == 0, r.remark
        assert b.store.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1  # level 3 = 3 + reconsumeTimes 0
        got = await pull(c, "G", "%RETRY%G", 0, 0, suspend_ms=5000, timeout=8)
        [m] = decode_records(got.body)
        assert m["topic"] == "%RETRY%G" and m["body"] == b"payload" and m["reconsume"] == 1
        p = m["props"]
        assert p["RETRY_TOPIC"] == "SB" and p["ORIGIN_MESSAGE_ID"] == msg_id and p["DELAY"] == "3"
        assert p["REAL_TOPIC"] == "%RETRY%G" and p["TAGS"] == "TagA"
        assert p["UNIQ_KEY"] == orig["props"]["UNIQ_KEY"]
        assert m["store_ts"] >= orig["store_ts"] + 200
        assert m["born_ts"] == orig["born_ts"]
        # second failure: level 4, first RETRY_TOPIC / ORIGIN_MESSAGE_ID kept
        r = await c.invoke(SEND_BACK, _back(m["phys"]))
        assert r.code == 0, r.remark
        got = await pull(c, "G", "%RETRY%G", 0, 1, suspend_ms=5000, timeout=8)
        [m2] = decode_records(got.body)
        assert m2["reconsume"] == 2 and m2["props"]["DELAY"] == "4"
        assert m2["props"]["RETRY_TOPIC"] == "SB" and m2["props"]["ORIGIN_MESSAGE_ID"] == msg_id
    finally:
        await c.close()


@pytest.mark.parametrize("how", ["max_reached", "negative_level"])
async def test_dead_letter_queue(make_broker, how):  # noqa: F811
    b, c, msg_id, orig = await _setup(make_broker)
    try:
        if how == "max_reached":
            r = await c.invoke(SEND_BACK, _back(orig["phys"], maxReconsumeTimes=0), version=409)
        else:
            r = await c.invoke(SEND_BACK, _back(orig["phys"], level=-1))
        assert r.code == 0, r.remark
        got = await pull(c, "G", "%DLQ%G", 0, 0)
        [m] = decode_records(got.body)
        assert m["topic"] == "%DLQ%G" and m["queue_id"] == 0 and m["props"]["DELAY"] == "0"
        assert m["reconsume"] == 1 and m["props"]["ORIGIN_MESSAGE_ID"] == msg_id
        assert b.topics.get("%DLQ%G").queue_nums == 1
        assert b.store.max_offset("%RETRY%G", 0) == 0
    finally:
        await c.close()


async def test_max_reconsume_header_ignored_before_v3_4_9(make_broker):  # noqa: F811
    b, c, _, orig = await _setup(make_broker)
    try:
        r = await c.invoke(SEND_BACK, _back(orig["phys"], maxReconsumeTimes=0), version=100)
        assert r.code == 0
        assert b.store.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1  # retried, not dead-lettered
    finally:
        await c.close()


async def test_errors_and_drop(make_broker):  # noqa: F811
    b, c, _, orig = await _setup(make_broker)
    b.groups.auto_create = False
    try:
        r = await c.invoke(SEND_BACK, _back(orig["phys"], group="nobody"))
        assert r.code == 26 and "nobody" in r.remark
        b.groups.table["G0"] = SubscriptionGroupConfig("G0", retry_queue_nums=0)
        r = await c.invoke(SEND_BACK, _back(orig["phys"], group="G0"))
        assert r.code == 0 and b.topics.get("%RETRY%G0") is None  # dropped
        b.groups.table["G1"] = SubscriptionGroupConfig("G1")
        r = await c.invoke(SEND_BACK, _back(10**12, group="G1"))
        assert r.code == 1 and r.remark == f"look message by offset failed, {10**12}"
        r = await c.invoke(SEND_BACK, {"group": "G1", "delayLevel": "0"})
        assert r.code == 1 and "offset" in r.remark
    finally:
        await c.close()
