"""delaymq-proxy's coalesced sends (server.proxy.coalesce) against a real broker: what they store and answer
is what one RemotingClient.invoke per send (the reference path, sendCoalesce=false) stores and answers;
a tick's sends go out as one flight; while sends keep coming a flight waits out the linger unless it is
full; a caller that gives up while its send waits has it dropped unsent; a broker that cannot be reached
fails the callers with the client's error."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.properties import MessageConst as K
from codec.record import iter_records
from remoting.client import RemotingClient
from remoting.errors import ConnectionClosedError
from server.proxy.brokers import RemoteBrokers
from server.proxy.coalesce import SendCoalescer
from tests.helpers import wire
from tests.helpers.broker import BrokerProcess, pick_port_pair

pytestmark = pytest.mark.process

QUEUES = 4
N = 200  # sends per path, all issued in one loop tick


def _props(topic: str, i: int, kind: str) -> dict[str, str]:
    return {K.UNIQ_KEY: f"C0A8000100002A9F0000{kind}{i:08d}", K.KEYS: f"{kind}-{i}", K.TAGS: kind,
            K.WAIT: "true"}


async def _send_all(brokers: RemoteBrokers, addr: str, topic: str, kind: str) -> list[tuple[int, int, str]]:
    """N sends at once, message i to queue i % QUEUES: (queue id, queue offset, msgId) of each answer."""
    async def one(i: int) -> tuple[int, int, str]:
        resp = await brokers.send(addr, topic, i % QUEUES, _props(topic, i, kind), 0, f"{kind}-body-{i}".encode(),
                                  1_700_000_000_000 + i)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert int(resp.ext_fields["queueId"]) == i % QUEUES
        return i % QUEUES, int(resp.ext_fields["queueOffset"]), resp.ext_fields["msgId"]
    return list(await asyncio.gather(*(one(i) for i in range(N))))


async def _stored(brokers: RemoteBrokers, addr: str, topic: str) -> list[tuple[int, int, bytes, str, str]]:
    """Every stored message of `topic`: (queue id, queue offset, body, KEYS, TAGS), in queue order."""
    out = []
    for qid in range(QUEUES):
        offset = 0
        while offset < wire.max_offset(addr, topic, qid):
            resp = await brokers.pull(addr, "coalesce_check", topic, qid, offset, 32, "TAG", "*", 0)
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
            for rec in iter_records(resp.body_bytes()):
                out.append((rec.queue_id, rec.queue_offset, rec.body, rec.properties.get(K.KEYS, ""),
                            rec.properties.get(K.TAGS, "")))
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


async def test_coalesced_sends_store_and_answer_as_one_invoke_per_send(broker: BrokerProcess) -> None:
    fast_topic, ref_topic = "CoalesceFast", "CoalesceRef"
    for t in (fast_topic, ref_topic):
        broker.create_topic(t, QUEUES)
    client = RemotingClient()
    sends = SendCoalescer(client, max_frames=64, linger_ms=0)
    fast, ref = RemoteBrokers(client, sends=sends), RemoteBrokers(client)
    try:
        got_fast = await _send_all(fast, broker.addr, fast_topic, "m")
        got_ref = await _send_all(ref, broker.addr, ref_topic, "m")
        # a tick's 200 sends went out in flights of at most 64, not one write each
        assert sends.requests_sent == N
        assert sends.flights_sent == -(-N // 64)
        # the answers: the same queue offsets per message (queues filled in the order sent), distinct msgIds
        assert [q[:2] for q in got_fast] == [q[:2] for q in got_ref]
        assert len({m for _, _, m in got_fast}) == N
        # the stores: the same messages at the same queue offsets, properties and bodies intact
        stored_fast, stored_ref = await _stored(fast, broker.addr, fast_topic), await _stored(ref, broker.addr, ref_topic)
        assert len(stored_fast) == N
        assert stored_fast == stored_ref
    finally:
        client.close()


async def test_under_load_a_flight_waits_out_the_linger_unless_it_is_full(broker: BrokerProcess) -> None:
    topic = "CoalesceLinger"
    broker.create_topic(topic, QUEUES)
    client = RemotingClient()
    sends = SendCoalescer(client, max_frames=4, linger_ms=600_000)  # a linger no test run waits out
    brokers = RemoteBrokers(client, sends=sends)
    try:
        # an idle lane: a burst of 8 goes at once, in two full flights (8 are out at once: the lane's peak)
        burst = await asyncio.gather(*(_send_one(brokers, broker.addr, topic, i) for i in range(8)))
        assert all(a.code == ResponseCode.SUCCESS for a in burst)
        assert (sends.flights_sent, sends.requests_sent) == (2, 8)
        # within the linger, fewer out than the peak: sends wait ...
        held = asyncio.ensure_future(_send_one(brokers, broker.addr, topic, 8))
        dropped = asyncio.ensure_future(_send_one(brokers, broker.addr, topic, 9))
        for _ in range(5):
            await asyncio.sleep(0)  # loop ticks, not time: nothing is due before the linger
        lane = sends.lanes[broker.addr]
        assert len(lane.queued) == 2 and lane.timer is not None and not held.done()
        # ... a caller that gives up has its send dropped unsent ...
        dropped.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await dropped
        # ... and a full flight (max_frames waiting) goes without waiting for the linger
        more = [asyncio.ensure_future(_send_one(brokers, broker.addr, topic, i)) for i in range(10, 13)]
        answers = await asyncio.gather(held, *more)
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        assert (sends.flights_sent, sends.requests_sent) == (3, 12)  # the cancelled one never went
        assert sum(wire.max_offset(broker.addr, topic, q) for q in range(QUEUES)) == 12
        assert lane.outstanding == 0
    finally:
        sends.cancel_all()
        client.close()


async def test_a_producer_sending_one_message_at_a_time_is_never_held(broker: BrokerProcess) -> None:
    topic = "CoalesceOneByOne"
    broker.create_topic(topic, QUEUES)
    client = RemotingClient()
    sends = SendCoalescer(client, linger_ms=600_000)  # held even once, a send would outlast the test
    brokers = RemoteBrokers(client, sends=sends)
    try:
        for i in range(20):
            answer = await asyncio.wait_for(_send_one(brokers, broker.addr, topic, i), 30)
            assert answer.code == ResponseCode.SUCCESS
        assert (sends.flights_sent, sends.requests_sent) == (20, 20)
    finally:
        sends.cancel_all()
        client.close()


async def test_a_broker_that_cannot_be_reached_fails_every_caller_of_the_flight() -> None:
    client = RemotingClient(connect_timeout=2.0)
    sends = SendCoalescer(client, linger_ms=0)
    addr = f"127.0.0.1:{pick_port_pair()}"  # nothing listens there
    try:
        outcomes = await asyncio.gather(*(sends.invoke(addr, _cmd(i), 3.0) for i in range(3)), return_exceptions=True)
        assert all(isinstance(o, ConnectionClosedError) for o in outcomes), outcomes
        assert not sends.lanes[addr].queued and not sends.lanes[addr].flights
    finally:
        client.close()


async def _send_one(brokers: RemoteBrokers, addr: str, topic: str, i: int) -> RemotingCommand:
    return await brokers.send(addr, topic, i % QUEUES, _props(topic, i, "l"), 0, b"linger", 1_700_000_000_000)


def _cmd(i: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "T", "e": str(i)}, b"x")


async def test_a_fault_past_the_dial_fails_the_flights_callers_instead_of_leaving_them_waiting(
        broker: BrokerProcess) -> None:
    """A request the connection cannot write (here a body that is not bytes) raises inside the
    flight's task, after the dial: the flight logs it and every caller still waiting gets the error, none
    waits forever (the flight's task is the only thing that would answer them)."""
    client = RemotingClient(connect_timeout=5.0)
    sends = SendCoalescer(client, linger_ms=0)
    try:
        bad = _cmd(0)
        bad.body = 12345  # type: ignore[assignment]  # not bytes: the frame cannot be written
        outcomes = await asyncio.wait_for(asyncio.gather(
            sends.invoke(broker.addr, bad, 30.0), sends.invoke(broker.addr, _cmd(1), 30.0),
            return_exceptions=True), 10)
        assert isinstance(outcomes[0], Exception) and not isinstance(outcomes[0], RemotingCommand), outcomes
        assert all(isinstance(o, (Exception, RemotingCommand)) for o in outcomes), outcomes
        assert not sends.lanes[broker.addr].queued and not sends.lanes[broker.addr].flights
    finally:
        client.close()
