"""Poison scheduled records are set aside in rmq_sys_SCHEDULE_QUARANTINE; the rest of their batch,
slot and level goes on (issue 12 item 3).

A broker on loopback (in-process, a real store and real services); every message is sent and read
back over the wire with the raw client. Each crafted record reaches the scheduler the way a client
can make it (properties at the limit, a client-sent TIMER_ROLL_TIMES, a body that is too large only
once delivered); the only record no client can send (an absurd TIMER_OUT_MS in the timer topic
itself) is written straight into the store, as a corrupt or foreign store would hold it.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from codec.codes import SCHEDULE_QUARANTINE_TOPIC, SCHEDULE_TOPIC, TIMER_TOPIC
from codec.record import MessageRecord, encode_record, read_properties_bytes
from storage.store_types import PutRequest
from tests.helpers.broker import pick_port_pair
from tests.helpers.checks import present
from tests.server.helpers import pull, send
from tests.server.raw import RawClient, RawRecord, decode_records

LONG_TOPIC = "QuarantineLongTopic_" + "x" * 100  # delivery grows a record by len(topic) - 19 bytes
PROPS_MAX = 32767
VIEW_MESSAGE_BY_ID = 33


def now_ms() -> int:
    return int(time.time() * 1000)


async def messages(c, topic: str, qid: int = 0) -> list[RawRecord]:
    out: list[RawRecord] = []
    while True:
        r = await pull(c, "QuarantineReader", topic, qid, len(out), max_nums=32)
        if r.code != 0:
            return out
        got = decode_records(r.body)
        if not got:
            return out
        out += got


async def wait_for(c, topic: str, n: int, timeout: float = 30.0) -> list[RawRecord]:
    """Poll the topic over the wire until it holds n messages (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await messages(c, topic)
        if len(got) >= n:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: {len(got)} of {n} messages within {timeout}s")
        await asyncio.sleep(0.02)  # a poll interval, not a synchronisation: the condition is re-checked


def stored_props_len(store, topic: str, qid: int, offset: int) -> int:
    units = store.read_units(topic, qid, offset, 1)
    phys = int.from_bytes(units[0:8], "big")
    size = int.from_bytes(units[8:12], "big")
    return len(read_properties_bytes(store.read_record(phys, size), 0))


def stored_size(store, topic: str, qid: int, offset: int) -> int:
    units = store.read_units(topic, qid, offset, 1)
    return int.from_bytes(units[8:12], "big")


def by_key(msgs: list[RawRecord]) -> dict[str, RawRecord]:
    return {m["props"]["UNIQ_KEY"]: m for m in msgs}


def assert_quarantined(q: list[RawRecord], key: str, stage: str, reason_part: str) -> RawRecord:
    [m] = [m for m in q if m["props"].get("UNIQ_KEY") == key]
    assert m["props"]["QUARANTINE_STAGE"] == stage
    assert reason_part in m["props"]["QUARANTINE_REASON"], m["props"]["QUARANTINE_REASON"]
    assert int(m["props"]["QUARANTINE_ORIGIN_OFFSET"]) >= 0
    return m


async def scrape(port: int) -> str:
    """GET /metrics from the in-process broker (asyncio streams: a blocking client would stall its loop)."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    data = await r.read()
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0] + b" "
    return body.decode()


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample of family `name` whose labels include `labels` (None: no such sample)."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] == name and all(w in head for w in want):
            return float(value)
    return None


async def assert_body_kept_at_origin(c, m: RawRecord, body: bytes) -> None:
    """A copy that would exceed maxMessageSize itself has no body; the original is found by its msgId."""
    assert m["body"] == b"" and m["props"]["QUARANTINE_BODY_DROPPED"] == str(len(body))
    origin = m["props"]["QUARANTINE_ORIGIN_MSG_ID"]
    v = await c.invoke(VIEW_MESSAGE_BY_ID, {"offset": str(int(origin[16:], 16))})
    assert v.code == 0
    [orig] = decode_records(v.body)
    assert orig["body"] == body and orig["phys"] == int(m["props"]["QUARANTINE_ORIGIN_OFFSET"])


async def test_timer_properties_at_the_limit_are_quarantined_and_the_slot_goes_on(make_broker):
    b = await make_broker(timer_precision_ms=100)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        # measure what the broker adds to a timer's properties, then pad one to just under the limit
        due = now_ms() + 1500
        base = {"TIMER_DELIVER_MS": str(due), "PAD": ""}
        r = await send(c, "QT", b"probe", qid=0, UNIQ_KEY="PROBE", properties=base)
        assert r.code == 0, r.remark
        overhead = stored_props_len(b.store, TIMER_TOPIC, 0, 0)
        pad = PROPS_MAX - 30 - overhead  # stored: 30 bytes under 32,767; dequeue adds ~62 more
        for key, p in (("GOOD1", ""), ("BAD", "p" * pad), ("GOOD2", "")):
            r = await send(c, "QT", key.encode(), qid=0, UNIQ_KEY=key, properties={**base, "PAD": p})
            assert r.code == 0, r.remark
        assert PROPS_MAX - 62 < stored_props_len(b.store, TIMER_TOPIC, 0, 2) <= PROPS_MAX  # the crafted one
        got = by_key(await wait_for(c, "QT", 3))
        assert set(got) == {"PROBE", "GOOD1", "GOOD2"}
        assert all(m["store_ts"] >= due for m in got.values())
        [q] = await wait_for(c, SCHEDULE_QUARANTINE_TOPIC, 1)
        m = assert_quarantined([q], "BAD", "timer_dequeue", "properties longer than 32767")
        # no room for the quarantine's properties: the body is the stored record, nothing of it lost
        assert m["props"]["QUARANTINE_BODY"] == "record" and m["props"]["REAL_TOPIC"] == "QT"
        [orig] = decode_records(m["body"])
        assert orig["body"] == b"BAD" and len(orig["props"]["PAD"]) == pad and orig["topic"] == TIMER_TOPIC
        # the read clock went past the slot: a later timer still comes
        r = await send(c, "QT", b"later", qid=0, UNIQ_KEY="LATER", TIMER_DELAY_MS="200")
        assert r.code == 0
        assert "LATER" in by_key(await wait_for(c, "QT", 4))
        assert b.timer_service.stats()["quarantined"]["timer_dequeue"] == 1
    finally:
        await c.close()


async def test_a_rolled_timer_with_a_non_numeric_roll_count_is_quarantined(make_broker):
    # a 4-slot (400 ms) roll window: a timer 1.5 s out is parked and rolled at least once
    b = await make_broker(timer_precision_ms=100, timer_roll_window_slot=4)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        due = now_ms() + 1500
        for key, extra in (("GOOD1", {}), ("BAD", {"TIMER_ROLL_TIMES": "abc"}), ("GOOD2", {})):
            r = await send(c, "RT", key.encode(), qid=0, UNIQ_KEY=key, TIMER_DELIVER_MS=str(due), properties=extra)
            assert r.code == 0, r.remark
        got = by_key(await wait_for(c, "RT", 2))
        assert set(got) == {"GOOD1", "GOOD2"} and all(m["store_ts"] >= due for m in got.values())
        [q] = await wait_for(c, SCHEDULE_QUARANTINE_TOPIC, 1)
        assert_quarantined([q], "BAD", "timer_dequeue", "abc")
    finally:
        await c.close()


@pytest.mark.parametrize("async_deliver", [False, True], ids=["sync", "async"])
async def test_a_delay_level_record_too_large_once_delivered_is_quarantined(make_broker, async_deliver):
    max_size = 8192
    b = await make_broker(max_message_size=max_size, message_delay_level="300ms 1s",
                          enable_schedule_async_deliver=async_deliver, metrics_port=pick_port_pair())
    c = await RawClient.connect(b.config.broker_addr)
    try:
        r = await send(c, LONG_TOPIC, b"p", qid=0, UNIQ_KEY="PROBE", DELAY="1")
        assert r.code == 0, r.remark
        head = stored_size(b.store, SCHEDULE_TOPIC, 0, 0) - 1  # the probe's record without its body
        body = b"B" * (max_size - 20 - head)  # stored 20 bytes under maxMessageSize, ~100 over once delivered
        for key, payload in (("GOOD1", b"g1"), ("BAD", body), ("GOOD2", b"g2")):
            r = await send(c, LONG_TOPIC, payload, qid=0, UNIQ_KEY=key, DELAY="1")
            assert r.code == 0, r.remark
        assert stored_size(b.store, SCHEDULE_TOPIC, 0, 2) <= max_size
        got = by_key(await wait_for(c, LONG_TOPIC, 3))
        assert set(got) == {"PROBE", "GOOD1", "GOOD2"}
        [q] = await wait_for(c, SCHEDULE_QUARANTINE_TOPIC, 1)
        m = assert_quarantined([q], "BAD", "level", "MESSAGE_ILLEGAL")
        assert m["props"]["REAL_TOPIC"] == LONG_TOPIC
        await assert_body_kept_at_origin(c, m, body)
        # the level is not stuck behind it
        r = await send(c, LONG_TOPIC, b"after", qid=0, UNIQ_KEY="AFTER", DELAY="1")
        assert r.code == 0
        assert "AFTER" in by_key(await wait_for(c, LONG_TOPIC, 4))
        assert b.delay_service.stats()["quarantined"]["level"] == 1
        text = await scrape(b.metrics_http.port)
        assert metric(text, "delaymq_schedule_quarantined_total", stage="level") == 1
        # every long-running task runs under the supervisor (its restart counter is exposed, 0 here)
        for task in ("delay-level-1", "timer-enqueue", "timer-dequeue-get", "timer-dequeue-put",
                     "storage-logics-flush", "metrics-exporter"):
            assert metric(text, "delaymq_task_restarts_total", task=task) == 0, task
    finally:
        await c.close()


async def test_a_timer_too_large_once_delivered_is_quarantined_not_dropped(make_broker):
    max_size = 8192
    b = await make_broker(max_message_size=max_size, timer_precision_ms=100)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        due = now_ms() + 1000
        r = await send(c, LONG_TOPIC, b"p", qid=0, UNIQ_KEY="PROBE", TIMER_DELIVER_MS=str(due))
        assert r.code == 0, r.remark
        head = stored_size(b.store, TIMER_TOPIC, 0, 0) - 1
        body = b"T" * (max_size - 20 - head)
        for key, payload in (("GOOD1", b"g1"), ("BAD", body), ("GOOD2", b"g2")):
            r = await send(c, LONG_TOPIC, payload, qid=0, UNIQ_KEY=key, TIMER_DELIVER_MS=str(due))
            assert r.code == 0, r.remark
        assert stored_size(b.store, TIMER_TOPIC, 0, 2) <= max_size
        got = by_key(await wait_for(c, LONG_TOPIC, 3))
        assert set(got) == {"PROBE", "GOOD1", "GOOD2"}
        [q] = await wait_for(c, SCHEDULE_QUARANTINE_TOPIC, 1)
        m = assert_quarantined([q], "BAD", "timer_dequeue", "MESSAGE_ILLEGAL")
        await assert_body_kept_at_origin(c, m, body)
    finally:
        await c.close()


async def test_timer_records_that_cannot_be_enqueued_are_quarantined_and_enqueue_goes_on(make_broker):
    b = await make_broker(timer_precision_ms=100)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        due = now_ms() + 800
        r = await send(c, "ET", b"g1", qid=0, UNIQ_KEY="GOOD1", TIMER_DELIVER_MS=str(due))
        assert r.code == 0
        host = b.store_host
        slot = str(due - due % 100)
        for key, props in (("ABSURD", {"TIMER_OUT_MS": "99999999999999999999", "REAL_TOPIC": "ET"}),
                           ("NAN", {"TIMER_OUT_MS": "soon", "REAL_TOPIC": "ET"}),
                           ("NOTOPIC", {"TIMER_OUT_MS": slot, "TIMER_DELIVER_MS": str(due)})):
            rec = MessageRecord(topic=TIMER_TOPIC, body=key.encode(), born_timestamp=now_ms(), born_host=host,
                                store_host=host, properties={**props, "REAL_QID": "0", "UNIQ_KEY": key})
            [res] = b.store.put([PutRequest(encode_record(rec), TIMER_TOPIC, 0)])
            assert res.ok
        r = await send(c, "ET", b"g2", qid=0, UNIQ_KEY="GOOD2", TIMER_DELIVER_MS=str(due))
        assert r.code == 0
        got = by_key(await wait_for(c, "ET", 2))
        assert set(got) == {"GOOD1", "GOOD2"} and all(m["store_ts"] >= due for m in got.values())
        q = await wait_for(c, SCHEDULE_QUARANTINE_TOPIC, 3)
        assert_quarantined(q, "ABSURD", "timer_enqueue", "out of range")
        assert_quarantined(q, "NAN", "timer_enqueue", "soon")
        assert_quarantined(q, "NOTOPIC", "timer_dequeue", "no REAL_TOPIC")  # enqueued, nowhere to deliver
        assert b.timer_service.stats()["quarantined"]["timer_enqueue"] == 2
    finally:
        await c.close()


async def test_clients_cannot_send_to_the_quarantine_topic(make_broker):
    b = await make_broker()
    c = await RawClient.connect(b.config.broker_addr)
    try:
        r = await send(c, SCHEDULE_QUARANTINE_TOPIC, b"x", qid=0)
        assert r.code == 16 and "forbidden" in (r.remark or "")  # NO_PERMISSION
    finally:
        await c.close()


async def test_schedule_records_that_cannot_be_converted_are_quarantined_and_the_level_goes_on(make_broker):
    """A schedule record whose REAL_TOPIC cannot be a topic (over 127 bytes) or that has none: no client
    can send one (the send validates the topic), so they are written straight into the store."""
    b = await make_broker(message_delay_level="300ms 1s")
    c = await RawClient.connect(b.config.broker_addr)
    try:
        assert (await send(c, "LT", b"g1", qid=0, UNIQ_KEY="GOOD1", DELAY="1")).code == 0
        host = b.store_host
        for key, props in (("LONG", {"REAL_TOPIC": "T" * 200, "REAL_QID": "0"}), ("NOTOPIC", {"REAL_QID": "0"})):
            rec = MessageRecord(topic=SCHEDULE_TOPIC, body=key.encode(), born_timestamp=now_ms(), born_host=host,
                                store_host=host, properties={"DELAY": "1", "UNIQ_KEY": key, **props})
            [res] = b.store.put([PutRequest(encode_record(rec), SCHEDULE_TOPIC, 0, deliver_delay_ms=300)])
            assert res.ok
        assert (await send(c, "LT", b"g2", qid=0, UNIQ_KEY="GOOD2", DELAY="1")).code == 0
        # absurd or non-numeric DELAY values a client can send: clamped to the last level / not scheduled
        assert (await send(c, "LT", b"a", qid=0, UNIQ_KEY="HUGE", DELAY="99999999999999999999")).code == 0
        assert (await send(c, "LT", b"n", qid=0, UNIQ_KEY="NAN", DELAY="soon")).code == 0
        got = by_key(await wait_for(c, "LT", 4))
        assert set(got) == {"GOOD1", "GOOD2", "HUGE", "NAN"} and got["HUGE"]["props"]["DELAY"] == "2"
        q = await wait_for(c, SCHEDULE_QUARANTINE_TOPIC, 2)
        assert_quarantined(q, "LONG", "level", "topic longer than 127")
        assert_quarantined(q, "NOTOPIC", "level", "no REAL_TOPIC")
        assert b.delay_service.stats()["levels"][1]["quarantined_total"] == 2
    finally:
        await c.close()


async def test_a_quarantine_put_refused_while_the_disk_is_full_is_retried_by_the_supervisor(make_broker):
    """The quarantine put itself fails (disk full: the store refuses every put): the putter raises, the
    supervisor logs, counts (on /metrics) and restarts it with back-off; once space is back the poison
    record is set aside once and the rest of its batch delivered once: nothing skipped, nothing twice."""
    b = await make_broker(timer_precision_ms=100, metrics_port=pick_port_pair())
    c = await RawClient.connect(b.config.broker_addr)
    try:
        due = now_ms() + 700
        base = {"TIMER_DELIVER_MS": str(due), "PAD": ""}
        assert (await send(c, "DF", b"g1", qid=0, UNIQ_KEY="GOOD1", properties=base)).code == 0
        overhead = stored_props_len(b.store, TIMER_TOPIC, 0, 0)
        pad = PROPS_MAX - 30 - overhead
        assert (await send(c, "DF", b"bad", qid=0, UNIQ_KEY="BAD", properties={**base, "PAD": "p" * pad})).code == 0
        assert (await send(c, "DF", b"g2", qid=0, UNIQ_KEY="GOOD2", properties=base)).code == 0
        await b.timer_service.wait_enqueued(3, 5)
        limit = b.store.config.disk_max_used_ratio
        b.store.config.disk_max_used_ratio = 0.0  # the disk counts as full: every put is refused
        sup = b.store.supervisor
        deadline = time.monotonic() + 30
        while sup.stats().get("timer-dequeue-put", 0) < 2:
            assert time.monotonic() < deadline, sup.stats()
            await asyncio.sleep(0.02)  # poll interval: the counter is re-read
        assert await messages(c, "DF") == [] and await messages(c, SCHEDULE_QUARANTINE_TOPIC) == []
        text = await scrape(b.metrics_http.port)
        assert present(metric(text, "delaymq_task_restarts_total", task="timer-dequeue-put"), "restarts sample") >= 2
        b.store.config.disk_max_used_ratio = limit
        got = await wait_for(c, "DF", 2)
        [q] = await wait_for(c, SCHEDULE_QUARANTINE_TOPIC, 1)
        assert sorted(m["props"]["UNIQ_KEY"] for m in got) == ["GOOD1", "GOOD2"]
        assert q["props"]["UNIQ_KEY"] == "BAD" or decode_records(q["body"])[0]["props"]["UNIQ_KEY"] == "BAD"
        assert all(m["store_ts"] >= due for m in got)
        deadline = time.monotonic() + 30
        while b.timer_service.commit_read_ms <= due:  # the slot is fully put: nothing more can come of it
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert len(await messages(c, "DF")) == 2 and len(await messages(c, SCHEDULE_QUARANTINE_TOPIC)) == 1
    finally:
        await c.close()
