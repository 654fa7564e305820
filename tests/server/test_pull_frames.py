"""The pull processor's encoded answers are the very bytes its maintained reference
(server.processors.pull_reference: cmd.response + encode_frame) writes for the same store lookup: JSON and ROCKETMQ requests, every status, tag filters, held pulls."""

import asyncio

from codec.codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from codec.command import RemotingCommand
from codec.frame import decode_frame, encode_frame_bytes
from server.broker import BrokerController
from server.processor_wiring import pull_deps
from server.processors.pull import PullProcessor
from server.processors.pull_reference import pull_answer
from tests.helpers.checks import present
from tests.server.helpers import LoopbackPeer, pull_ext, send
from tests.server.raw import RawClient


def request(ser, opaque, **kw) -> RemotingCommand:
    cmd = RemotingCommand.request(11, pull_ext(**kw))
    cmd.opaque, cmd.serialize_type = opaque, ser
    return decode_frame(encode_frame_bytes(cmd)[4:])  # as the connection hands it over


async def test_answers_equal_the_reference(broker_ctl: BrokerController, client: RawClient):
    for i in range(6):
        r = await send(client, "Frames", f"m{i}".encode() * (i + 1), tags="TagA" if i % 2 else "TagB", qid=1)
        assert r.code == 0
    from codec.tags import java_hash

    pp = PullProcessor(pull_deps(broker_ctl))
    cases = [(0, 32, "*", None), (2, 3, "*", None), (5, 1, "*", None), (6, 4, "*", None), (9, 4, "*", None),
             (0, 32, "TagA", {java_hash("TagA")}), (4, 1, "TagB || TagZ", {java_hash("TagB"), java_hash("TagZ")}),
             (0, 4, "TagZ", {java_hash("TagZ")})]
    for ser in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        for n, (offset, max_nums, sub, codes) in enumerate(cases):
            for topic, qid in (("Frames", 1), ("Frames", 0), ("NoQueueHere", 0)):
                cmd = request(ser, 1000 + n, group="GF", topic=topic, qid=qid, offset=offset, sub=sub,
                              max_nums=max_nums)
                got = pp(LoopbackPeer(), cmd)
                if topic == "NoQueueHere":  # an error answer stays a RemotingCommand
                    assert isinstance(got, RemotingCommand) and got.code == 17
                    continue
                assert type(got) is list
                want = pull_answer(present(broker_ctl.store), cmd, topic, qid, offset, max_nums, codes)
                assert b"".join(got) == want, (ser, n, qid)


async def test_held_pull_answer_equals_the_reference(broker_ctl: BrokerController, client: RawClient):
    await send(client, "HeldFrames", b"seed", qid=0)
    pp = PullProcessor(pull_deps(broker_ctl))
    for ser in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        offset = present(broker_ctl.store).max_offset("HeldFrames", 0)
        cmd = request(ser, 77, group="GH", topic="HeldFrames", qid=0, offset=offset, suspend_ms=60_000)
        held = pp(LoopbackPeer(), cmd)
        assert asyncio.iscoroutine(held)
        task = asyncio.ensure_future(held)
        await asyncio.sleep(0)
        assert broker_ctl.pull_hold.held_count == 1
        assert (await send(client, "HeldFrames", b"wake", qid=0)).code == 0
        got = await asyncio.wait_for(task, 30)  # < the 60 s suspend: answered by the send's wake-up
        assert b"".join(got) == pull_answer(present(broker_ctl.store), cmd, "HeldFrames", 0, offset, 32, None)
        assert decode_frame(b"".join(got)[4:]).remark == "FOUND"
