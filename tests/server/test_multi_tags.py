"""Messages with several tags (codec/tags.py) through the 4.x remoting path of an in-process broker: TAGS joined
by `||`, the ConsumeQueue's tagsCode the OR of the tags' hashes (one tag: Apache's String.hashCode exactly); on a
MULTI_TAG topic a TAG pull ANDs each subscribed hash against it and the message's tags decide, so a message is
pulled by any one of its tags; a delay-level message keeps the form when delivered; on a SINGLE_TAG topic pulls
compare codes for equality as Apache does."""

from __future__ import annotations

from pathlib import Path

from codec.codes import RequestCode, ResponseCode
from codec.consume_queue_unit import UNIT as CQ_UNIT
from codec.filter_bitmap import file_name
from codec.tags import java_hash
from server.broker import BrokerController
from tests.server.helpers import pull, send, until
from tests.server.raw import RawClient, decode_records

MESSAGES = [(b"m0", "TagA||TagB"), (b"m1", "TagB"), (b"m2", "TagC || TagA"), (b"m3", "TagD"), (b"m4", "TagA")]


async def _create(c: RawClient, topic: str, filter_type: str) -> None:
    r = await c.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": filter_type, "topicSysFlag": "0", "order": "false"})
    assert r.code == ResponseCode.SUCCESS, r.remark


async def _pulled(c: RawClient, topic: str, sub: str) -> list[bytes]:
    r = await pull(c, "GM", topic, 0, 0, sub)
    return [m["body"] for m in decode_records(r.body)] if r.code == ResponseCode.SUCCESS else []


def _tags_codes(store: Path, topic: str) -> list[int]:
    data = (store / "consumequeue" / topic / "0" / file_name(0)).read_bytes()
    return [code for _, size, code in CQ_UNIT.iter_unpack(data) if size > 0]


async def test_a_message_with_several_tags_is_pulled_by_each_of_them(make_broker, tmp_path) -> None:
    store = tmp_path / "store"
    b: BrokerController = await make_broker(store=store, message_delay_level="300ms 1s")
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await _create(c, "TM", "MULTI_TAG")
        await _create(c, "TS", "SINGLE_TAG")
        for topic in ("TM", "TS"):
            for body, tags in MESSAGES:
                assert (await send(c, topic, body, tags=tags, qid=0)).code == ResponseCode.SUCCESS
        a, bb, cc, d = (java_hash(t) for t in ("TagA", "TagB", "TagC", "TagD"))
        expected_codes = [a | bb, bb, cc | a, d, a]
        assert _tags_codes(store, "TM") == _tags_codes(store, "TS") == expected_codes
        assert a == 2598919  # one tag: Apache's tagsCode (message-format.md §8)

        assert await _pulled(c, "TM", "TagA") == [b"m0", b"m2", b"m4"]
        assert await _pulled(c, "TM", "TagB") == [b"m0", b"m1"]
        assert await _pulled(c, "TM", "TagA || TagD") == [b"m0", b"m2", b"m3", b"m4"]
        assert await _pulled(c, "TM", "TagE") == []
        assert await _pulled(c, "TM", "*") == [m for m, _ in MESSAGES]
        # SINGLE_TAG: equality of codes, as Apache (a message with several tags matches none of them)
        assert await _pulled(c, "TS", "TagA") == [b"m4"]
        assert await _pulled(c, "TS", "TagA||TagB") == [b"m1", b"m4"]

        # a delay-level message with several tags keeps the form when the scheduler delivers it
        r = await send(c, "TM", b"late", tags="TagD||TagC", qid=0, DELAY="1")
        assert r.code == ResponseCode.SUCCESS
        await until(lambda: b.store is not None and b.store.max_offset("TM", 0) == 6, 10)
        assert _tags_codes(store, "TM")[5] == d | cc
        assert await _pulled(c, "TM", "TagC") == [b"m2", b"late"]
    finally:
        await c.close()
