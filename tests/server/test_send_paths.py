"""The plain-send string path and the dict path store the same record (server.processors.send).

Each case goes over the wire to a real broker; the stored record is read back and compared with what
the dict path (codec.properties.rewrite_sent_properties_reference -> the delay-level put hook ->
properties_to_string) makes of the same send.
"""

import pytest

from codec.codes import SCHEDULE_TOPIC
from codec.msgid import decode_offset_msg_id
from codec.properties import parse_properties, properties_to_string, rewrite_sent_properties_reference
from codec.record import MessageRecord
from scheduler.delay_levels import transform_delay
from tests.helpers.checks import present
from tests.server.helpers import SEND_MESSAGE_V2, send_ext
from tests.server.raw import decode_records

UNIQ = "7F00000100002A9F0000000000000042"
LEVELS = "1s 2s 3s"


def expected(topic: str, qid: int, text: str, levels: list[int]):
    stored, *_ = rewrite_sent_properties_reference(text, "DefaultCluster", lambda: pytest.fail("no UNIQ_KEY sent"))
    rec = MessageRecord(topic=topic, queue_id=qid, properties=parse_properties(stored))
    delay = transform_delay(rec, levels)
    return rec.topic, rec.queue_id, properties_to_string(rec.properties), delay


CASES = {
    "plain": f"UNIQ_KEY\x01{UNIQ}\x02WAIT\x01true\x02TAGS\x01TagA\x02KEYS\x01k1 k2",
    "delay": f"UNIQ_KEY\x01{UNIQ}\x02DELAY\x012\x02WAIT\x01true\x02TAGS\x01TagA",
    "delay_zero": f"UNIQ_KEY\x01{UNIQ}\x02DELAY\x010\x02WAIT\x01false",
    "delay_clamped": f"UNIQ_KEY\x01{UNIQ}\x02DELAY\x0199",
    "delay_unparsable": f"UNIQ_KEY\x01{UNIQ}\x02DELAY\x01soon",
    "client_real_topic": f"UNIQ_KEY\x01{UNIQ}\x02DELAY\x011\x02REAL_TOPIC\x01Elsewhere",
    "trailing_separator": f"UNIQ_KEY\x01{UNIQ}\x02TAGS\x01t\x02",
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_stored_record_equals_the_dict_path(make_broker, case):
    from tests.server.raw import RawClient

    broker = await make_broker(message_delay_level=LEVELS)
    c = await RawClient.connect(broker.config.broker_addr)
    try:
        text = CASES[case]
        r = await c.invoke(SEND_MESSAGE_V2, send_ext("Paths", text, qid=1), b"body")
        assert r.code == 0, r.remark
        assert r.ext["queueId"] == "1"
        _ip, _port, phys = decode_offset_msg_id(r.ext["msgId"])
        [got] = decode_records(bytes(broker.store.read_record(phys)))
        topic, qid, props_s, delay = expected("Paths", 1, text, broker.levels)
        assert (got["topic"], got["queue_id"], got["raw_props"]) == (topic, qid, props_s)
        cq = broker.store.read_units(topic, qid, 0, 1)
        tags_code = int.from_bytes(bytes(cq[12:20]), "big", signed=True)
        if delay is not None:
            assert topic == SCHEDULE_TOPIC and tags_code == got["store_ts"] + delay
    finally:
        await c.close()


async def test_a_pipelined_run_is_answered_per_request_in_store_order(make_broker):
    """Requests that arrive in one read are handled as one run (one store put): each still gets its
    own response (errors included, none for oneway) and the store keeps the request order, also
    around a batch-message request in the middle of the run."""
    import asyncio

    from tests.server.raw import RawClient, encode_batch, props

    broker = await make_broker(message_delay_level=LEVELS)
    c = await RawClient.connect(broker.config.broker_addr)
    try:
        def one(i: int, **kw) -> tuple:
            return (SEND_MESSAGE_V2, send_ext("Run", props(UNIQ_KEY=f"U{i:031d}", WAIT="true"), qid=0, **kw),
                    f"m{i}".encode(), False)

        bad = one(3)
        del bad[1]["b"]  # no topic
        batch = (SEND_MESSAGE_V2, send_ext("Run", "", qid=0, batch=True),
                 encode_batch([(b"b0", props(UNIQ_KEY="B0")), (b"b1", props(UNIQ_KEY="B1"))]), False)
        oneway = (*one(6)[:3], True)
        reqs = [one(0), one(1), one(2), bad, batch, one(5), oneway, one(7)]
        futs = c.pipeline(reqs)
        replies = [await asyncio.wait_for(f, 30) if f is not None else None for f in futs]
        assert replies[6] is None
        answered = {i: present(r, f"reply {i}") for i, r in enumerate(replies) if i != 6}
        assert answered[3].code == 1 and "topic" in (answered[3].remark or "")
        for i in (0, 1, 2, 4, 5, 7):
            assert answered[i].code == 0, (i, answered[i].remark)
        # one more send after the oneway: once it is answered, the oneway is stored too
        tail = await c.invoke(*one(8)[:3])
        assert tail.code == 0
        stored = decode_records(b"".join(bytes(b) for b in broker.store.get_messages("Run", 0, 0, 32, None).buffers))
        assert [r["body"] for r in stored] == [b"m0", b"m1", b"m2", b"b0", b"b1", b"m5", b"m6", b"m7", b"m8"]
        assert [r["queue_offset"] for r in stored] == list(range(9))
        offsets = [int(answered[i].ext["queueOffset"]) for i in (0, 1, 2, 4, 5, 7)]
        assert offsets == [0, 1, 2, 3, 5, 7]
    finally:
        await c.close()
