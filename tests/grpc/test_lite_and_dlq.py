"""Raw gRPC stubs (server/grpc/v2) against a broker subprocess: the automatic move to %DLQ%<group>
after the group's max delivery attempts (retryMaxTimes set by the remoting request mqadmin's
updateSubGroup sends), and the 5.x lite/pull consumer RPCs UpdateOffset / GetOffset / QueryOffset /
PullMessage, whose offsets are the same table 4.x consumers commit to."""

from __future__ import annotations

import json
import time

import pytest

from codec.codes import RequestCode
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from tests.grpc.conftest import uniq
from tests.grpc.raw import RawClient
from tests.helpers import wire

pytestmark = [pytest.mark.interop]


def set_retry_max_times(broker, group: str, retries: int) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), the request `mqadmin updateSubGroup -r` sends."""
    body = json.dumps({"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
                       "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": retries,
                       "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                       "notifyConsumerIdsChangedEnable": True}).encode()
    reply = wire.invoke(broker.addr, int(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP), {}, body)
    assert reply.code == 0, reply.remark


async def settings_answer(c: RawClient, group: str, topic: str) -> pb.Settings:
    """Open a Telemetry stream as a SimpleConsumer of `group` and return the server's settings answer."""
    s = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    s.subscription.group.name = group
    s.subscription.subscriptions.add(topic=pb.Resource(name=topic),
                                     expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    call = c.stub.Telemetry(metadata=(("x-mq-client-id", uniq("raw-client")),), timeout=10)
    await call.write(spb.TelemetryCommand(settings=s))
    reply = await call.read()
    await call.done_writing()
    call.cancel()
    assert isinstance(reply, spb.TelemetryCommand), reply  # not grpc.aio.EOF: the endpoint answered
    assert reply.status.code == pb.OK
    return reply.settings


async def test_unacked_message_moves_to_dlq_after_the_groups_max_attempts(gbroker):
    topic, group = uniq("TDq"), uniq("GDq")
    set_retry_max_times(gbroker, group, 2)  # 3 delivery attempts, then %DLQ%<group>
    c = RawClient(gbroker.grpc_addr)
    try:
        settings = await settings_answer(c, group, topic)
        assert settings.backoff_policy.max_attempts == 3  # what the 5.x client is told
        sent = await c.send(topic, b"poison")
        assert sent.status.code == pb.OK
        attempts: list[int] = []
        deadline = time.monotonic() + 30
        while len(attempts) < 3 and time.monotonic() < deadline:
            code, msgs = await c.receive(group, topic, invisible_s=1, poll_s=3)  # never acked
            attempts += [m.system_properties.delivery_attempt for m in msgs]
            assert all(m.body == b"poison" for m in msgs)
        assert attempts == [1, 2, 3]
        # the third delivery's invisible time runs out: it is not delivered a fourth time...
        code, msgs = await c.receive(group, topic, invisible_s=1, poll_s=3)
        assert code == pb.MESSAGE_NOT_FOUND and msgs == []
        # ...but is in the group's dead-letter queue, the same message (id) as sent
        code, dead = await c.receive(uniq("GDlqReader"), "%DLQ%" + group, poll_s=5)
        assert [m.body for m in dead] == [b"poison"]
        assert dead[0].system_properties.message_id == sent.entries[0].message_id
    finally:
        await c.close()


async def _pull(c: RawClient, group: str, topic: str, qid: int, offset: int, batch: int = 32,
                poll_s: float = 0.5) -> tuple[int | None, list[pb.Message], int | None]:
    req = spb.PullMessageRequest(group=pb.Resource(name=group), offset=offset, batch_size=batch,
                                 message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=qid),
                                 filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
    code, msgs, nxt = None, [], None
    async for r in c.stub.PullMessage(req, timeout=poll_s + 5):
        kind = r.WhichOneof("content")
        if kind == "status":
            code = r.status.code
        elif kind == "message":
            msgs.append(r.message)
        elif kind == "next_offset":
            nxt = r.next_offset
    return code, msgs, nxt


def _mq(topic: str, qid: int) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=qid)


async def test_offset_rpcs_and_pull_message_share_the_4x_offset_table(gbroker):
    topic, group = uniq("TLite"), uniq("GLite")
    gbroker.create_topic(topic, 1)
    c = RawClient(gbroker.grpc_addr)
    try:
        t0 = int(time.time() * 1000)
        for i in range(5):
            assert (await c.send(topic, f"m{i}".encode())).status.code == pb.OK
        q = lambda policy, **kw: c.stub.QueryOffset(spb.QueryOffsetRequest(  # noqa: E731
            message_queue=_mq(topic, 0), query_offset_policy=policy, **kw), timeout=10)
        assert (await q(pb.BEGINNING)).offset == 0
        assert (await q(pb.END)).offset == 5
        before = (await q(pb.TIMESTAMP, timestamp={"seconds": t0 // 1000 - 5})).offset
        assert before == 0

        # a group with no committed offset
        r = await c.stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=_mq(topic, 0)),
                                   timeout=10)
        assert r.status.code == pb.OFFSET_NOT_FOUND
        u = await c.stub.UpdateOffset(spb.UpdateOffsetRequest(group=pb.Resource(name=group),
                                                              message_queue=_mq(topic, 0), offset=2), timeout=10)
        assert u.status.code == pb.OK
        r = await c.stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=_mq(topic, 0)),
                                   timeout=10)
        assert (r.status.code, r.offset) == (pb.OK, 2)
        # the same table a 4.x consumer reads (QUERY_CONSUMER_OFFSET over remoting)
        assert wire.consumer_offset(gbroker.addr, group, topic, 0) == 2
        u = await c.stub.UpdateOffset(spb.UpdateOffsetRequest(group=pb.Resource(name=group),
                                                              message_queue=_mq(topic, 0), offset=-1), timeout=10)
        assert u.status.code == pb.ILLEGAL_OFFSET

        code, msgs, nxt = await _pull(c, group, topic, 0, 2)
        assert code == pb.OK and nxt == 5
        assert [m.body for m in msgs] == [b"m2", b"m3", b"m4"]
        assert [m.system_properties.queue_offset for m in msgs] == [2, 3, 4]
        code, msgs, nxt = await _pull(c, group, topic, 0, 3, batch=1)
        assert (code, [m.body for m in msgs], nxt) == (pb.OK, [b"m3"], 4)
        # caught up: nothing after a short long-poll; far past the end: an illegal offset
        code, msgs, nxt = await _pull(c, group, topic, 0, 5, poll_s=0.3)
        assert (code, msgs, nxt) == (pb.MESSAGE_NOT_FOUND, [], 5)
        code, msgs, _ = await _pull(c, group, topic, 0, 1000)
        assert code == pb.ILLEGAL_OFFSET and msgs == []
        code, _, _ = await _pull(c, group, topic, 0, -3)
        assert code == pb.ILLEGAL_OFFSET
        # an unknown queue of a known topic is refused with a status, not a broken stream
        code, _, _ = await _pull(c, group, topic, 7, 0)
        assert code not in (None, pb.OK)
    finally:
        await c.close()


async def test_pull_message_long_polls_until_a_send_arrives(gbroker):
    """A PullMessage with nothing to read is parked (the broker counts it in GET_BROKER_RUNTIME_INFO's
    grpcLongPollParked) and answered by the next put: with a 60 s long poll, an answer within the 30 s
    bound can only come from the wake-up."""
    import asyncio
    topic, group = uniq("TLite"), uniq("GLite")
    gbroker.create_topic(topic, 1)
    c = RawClient(gbroker.grpc_addr)
    loop = asyncio.get_running_loop()
    try:
        assert (await c.send(topic, b"first")).status.code == pb.OK
        assert await loop.run_in_executor(None, parked_polls, gbroker.addr) == 0
        pull = asyncio.ensure_future(_pull(c, group, topic, 0, 1, poll_s=60))
        deadline = loop.time() + 30  # a hang guard
        while await loop.run_in_executor(None, parked_polls, gbroker.addr) != 1:
            assert not pull.done(), pull.result()
            assert loop.time() < deadline, "the pull was never parked"
            await asyncio.sleep(0.05)  # polling interval of the runtime-info query, not a synchronisation
        assert (await c.send(topic, b"second")).status.code == pb.OK
        code, msgs, nxt = await asyncio.wait_for(pull, 30)  # < the 60 s long poll: woken by the put
        assert (code, [m.body for m in msgs], nxt) == (pb.OK, [b"second"], 2)
        assert await loop.run_in_executor(None, parked_polls, gbroker.addr) == 0
    finally:
        await c.close()


def parked_polls(addr: str) -> int:
    """The broker's count of parked gRPC long polls (GET_BROKER_RUNTIME_INFO's grpcLongPollParked)."""
    reply = wire.invoke(addr, int(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert reply.code == 0, reply.remark
    return int(json.loads(reply.body)["table"]["grpcLongPollParked"])


async def test_sync_lite_subscription_is_answered_not_implemented_in_its_status(gbroker):
    """RocketMQ 5.4's lite topics are not served: the RPC answers like every other one, with the proto's
    NOT_IMPLEMENTED in the response status (not a bare gRPC UNIMPLEMENTED error)."""
    c = RawClient(gbroker.grpc_addr)
    try:
        req = spb.SyncLiteSubscriptionRequest(topic=pb.Resource(name=uniq("TLite")),
                                              group=pb.Resource(name=uniq("GLite")), lite_topic_set=["a"])
        reply = await c.stub.SyncLiteSubscription(req, timeout=10)
        assert reply.status.code == pb.NOT_IMPLEMENTED and "lite" in reply.status.message
    finally:
        await c.close()
