"""Pop state survives kill -9: an ack is never undone, an unacked message comes back with
delivery_attempt + 1 after its invisible time; ForwardMessageToDeadLetterQueue puts it in %DLQ%<group>."""

from __future__ import annotations

import time

import pytest

from server.grpc.v2 import definition_pb2 as pb
from server.pop.state import JOURNAL, PopStore
from tests.grpc.conftest import grpc_broker, uniq
from tests.grpc.raw import RawClient


@pytest.mark.process
async def test_ack_and_inflight_survive_kill_9(broker_factory, broker_stack):
    b = grpc_broker(broker_factory, stack=broker_stack)
    topic, group = uniq("TK"), uniq("GK")
    c = RawClient(b.grpc_addr)
    try:
        for i in range(3):
            assert (await c.send(topic, f"m{i}".encode())).status.code == pb.OK
        t_pop = time.time()
        code, msgs = await c.receive(group, topic, invisible_s=3)
        assert code == pb.OK and sorted(m.body for m in msgs) == [b"m0", b"m1", b"m2"]
        acked = next(m for m in msgs if m.body == b"m1")
        assert (await c.ack(group, topic, acked)).status.code == pb.OK
    finally:
        await c.close()
    b.kill()
    b.start()
    c = RawClient(b.grpc_addr)
    try:
        # the two come back when their own invisible times pass (popped from two queues, those may
        # differ by a millisecond), so one receive may hand out only the first
        again: list = []
        deadline = time.monotonic() + 30
        while len(again) < 2 and time.monotonic() < deadline:
            code, got = await c.receive(group, topic, invisible_s=30, poll_s=8)
            again += got
        now = time.time()
        assert sorted(m.body for m in again) == [b"m0", b"m2"]  # the acked one never comes back
        assert {m.system_properties.delivery_attempt for m in again} == {2}
        assert now - t_pop >= 3  # not before the invisible time
        assert (await c.ack(group, topic, *again)).status.code == pb.OK
        # the old receipt handle of the acked message is stale
        stale = await c.ack(group, topic, acked)
        assert stale.status.code == pb.INVALID_RECEIPT_HANDLE
    finally:
        await c.close()
    b.kill()
    b.start()
    c = RawClient(b.grpc_addr)
    try:
        code, none = await c.receive(group, topic, poll_s=1.5)
        assert code == pb.MESSAGE_NOT_FOUND and none == []
    finally:
        await c.close()


@pytest.mark.process
async def test_forward_to_dead_letter_queue(broker_factory):
    from server.grpc.v2 import service_pb2 as spb
    topic, group = uniq("TD"), uniq("GD")
    b = grpc_broker(broker_factory)
    c = RawClient(b.grpc_addr)
    try:
        assert (await c.send(topic, b"poison")).status.code == pb.OK
        code, msgs = await c.receive(group, topic, invisible_s=30, poll_s=4)
        assert [m.body for m in msgs] == [b"poison"]
        sp = msgs[0].system_properties
        r = await c.stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=sp.receipt_handle,
            message_id=sp.message_id, delivery_attempt=1, max_delivery_attempts=1), timeout=10)
        assert r.status.code == pb.OK
        code, dead = await c.receive(uniq("GDLQ"), "%DLQ%" + group, poll_s=5)
        assert [m.body for m in dead] == [b"poison"]
        assert (await c.ack(group, topic, msgs[0])).status.code == pb.INVALID_RECEIPT_HANDLE  # done already
    finally:
        await c.close()


def test_torn_journal_tail_is_cut_and_the_rest_kept(tmp_path):
    s = PopStore(str(tmp_path))
    s.load()
    key = ("g", "t", 0)
    s.queue(key, lambda: 0)
    s.pop(key, 2, 10**13, [(0, s.next_seq(), 1), (1, s.next_seq(), 1)])
    assert s.ack(key, 0, 1)
    s.close()
    with open(tmp_path / "grpc" / JOURNAL, "ab") as f:
        f.write(b"\x30\x00\x00\x00garbage")  # a torn record
    s2 = PopStore(str(tmp_path))
    s2.load()
    assert s2.cut_bytes == 11
    assert list(s2.queues[key].inflight) == [1] and s2.queues[key].next_offset == 2
    assert s2.seq == 2
    s2.compact()
    assert s2.ack(key, 1, 2)
    s2.close()
    s3 = PopStore(str(tmp_path))
    s3.load()
    assert s3.queues[key].inflight == {} and s3.queues[key].commit_offset() == 2


pytestmark = [pytest.mark.slow]
