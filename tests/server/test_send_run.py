"""The send fast lane (a run of sends: parse_send, put_batch, responses encoded in one blob) gives the
same response bytes and the same stored records as its maintained reference,
server.processors.send_reference.send_one (HeaderSpec parse, one MessageStore.put per request,
cmd.response + encode_frame)."""

from __future__ import annotations

import dataclasses
import inspect
import random

import pytest

from codec.codes import RPC_ONEWAY, SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from codec.command import RemotingCommand
from codec.frame import FrameDecoder, encode_frame_bytes
from server.processor_wiring import send_deps
from server.processors.send import SendProcessor
from server.processors.send_common import PUT_STATUS_CODES
from server.processors.send_reference import send_one
from tests.server.helpers import SEND_MESSAGE, SEND_MESSAGE_V2, send_ext
from tests.server.raw import encode_batch, props

NOW = 1_700_000_000_000


class _Conn:
    remote_addr = ("127.0.0.1", 40000)
    peer = "127.0.0.1:40000"
    response_observer = None  # remoting.Connection: the broker's error-response hook (none here)

    def __init__(self):
        self.attrs = {}


def _runner(broker):
    """The send run the broker's dispatcher calls (`SendRunner.batch_framed`)."""
    return broker.remoting.server.dispatcher.batch_processors[SEND_MESSAGE_V2].__self__


def _frames(blob: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(blob):
        n = int.from_bytes(blob[pos:pos + 4], "big")
        out.append(blob[pos:pos + 4 + n])
        pos += 4 + n
    return out


_PROPS = [
    props(UNIQ_KEY="U1", WAIT="true", TAGS="TagA"),
    props(UNIQ_KEY="U2", KEYS="k1 k2", TAGS="x"),
    props(UNIQ_KEY="U3", DELAY="2", WAIT="false"),
    props(UNIQ_KEY="U4", DELAY="99"),
    props(UNIQ_KEY="U5", TRAN_MSG="false", TAGS="t"),
    "UNIQ_KEY\x01U6",
]
_KINDS = ["ok", "ok", "ok", "v1", "no_topic", "bad_qid", "qid_range", "batch", "oneway"]


def request(rnd: random.Random, opaque: int) -> RemotingCommand:
    kind = rnd.choice(_KINDS)
    ext = send_ext("Run", rnd.choice(_PROPS), qid=rnd.randint(0, 3), v2=kind != "v1")
    ext["g" if kind != "v1" else "bornTimestamp"] = "1700000000123"
    code, body, flag = (SEND_MESSAGE if kind == "v1" else SEND_MESSAGE_V2), rnd.randbytes(rnd.randint(0, 40)), 0
    if kind == "no_topic":
        del ext["b"]
    elif kind == "bad_qid":
        ext["e"] = "x1"
    elif kind == "qid_range":
        ext["e"] = "99"
    elif kind == "batch":
        ext["m"] = "true"
        body = encode_batch([(b"b0", props(UNIQ_KEY="B0")), (b"b1", props(UNIQ_KEY="B1"))])
    elif kind == "oneway":
        flag = RPC_ONEWAY
    return RemotingCommand(code, opaque=opaque, flag=flag, ext_fields=ext, body=body,
                           serialize_type=rnd.choice([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]))


async def _brokers(make_broker, tmp_path, tag, flush):
    out = []
    for side in "ab":
        b = await make_broker(store=tmp_path / f"{tag}{side}", message_delay_level="1s 2s 3s", flush_disk_type=flush)
        b.store.now_ms = lambda: NOW
        out.append(b)
    return out


async def _by_opaque(results) -> dict[int, bytes]:
    out = {}
    for r in results:
        if inspect.isawaitable(r):
            r = await r
        if r is None:
            continue
        for f in _frames(r if type(r) is bytes else encode_frame_bytes(r)):
            out[int.from_bytes(f[13:17], "big") if f[4] == SERIALIZE_ROCKETMQ
                else FrameDecoder().feed(f)[0].opaque] = f
    return out


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_a_run_equals_the_reference(make_broker, tmp_path, flush):
    rnd = random.Random(7)
    for n in range(8):
        a, b = await _brokers(make_broker, tmp_path, f"r{n}", flush)
        cmds = [request(rnd, i + 1) for i in range(rnd.randint(1, 24))]
        sa = _runner(a)
        # b's send parts with a's config: the same store host, so the same records and msgIds
        sb = SendProcessor(dataclasses.replace(send_deps(b), config=a.config))
        ca, cb = _Conn(), _Conn()
        out = sa.batch_framed(ca, cmds)
        assert sum(type(r) is bytes for r in out) <= 1
        assert all(r is None or type(r) is bytes or inspect.isawaitable(r) for r in out)
        if flush == "ASYNC_FLUSH":
            assert all(r is None or type(r) is bytes for r in out)
        refs = [send_one(sb, b.store, cb, c) for c in cmds]
        # what the sends stored, before anything awaits (the delay service may deliver meanwhile)
        ra = bytes(a.store.commitlog.queue.files[0].slice(0, a.store.commitlog_max_offset()))
        rb = bytes(b.store.commitlog.queue.files[0].slice(0, b.store.commitlog_max_offset()))
        assert ra == rb and len(ra) == b.store.commitlog_max_offset()
        for key in b.store.queues.queues:
            assert bytes(a.store.read_units(*key, 0, 64)) == bytes(b.store.read_units(*key, 0, 64)), key
        assert a.counters.put_total == a.store.put_ok_total == b.store.put_ok_total  # on_put counted every stored record
        got = await _by_opaque(out)
        want = await _by_opaque(refs)
        assert got == want
        assert sorted(got) == [c.opaque for c in cmds if not c.is_oneway]
        await a.shutdown()
        await b.shutdown()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@pytest.mark.parametrize("framed", [True, False])
async def test_runs_of_one_equal_the_reference(make_broker, tmp_path, flush, framed):
    """Every request a run of its own (a gRPC send, a sync producer's): SendRunner._put_one and the store's
    _put_one give the reference's answers and records, framed (the dispatcher) or not (the gRPC endpoint)."""
    rnd = random.Random(11)
    a, b = await _brokers(make_broker, tmp_path, "one", flush)
    cmds = [request(rnd, i + 1) for i in range(40)]
    sa = _runner(a)
    sb = SendProcessor(dataclasses.replace(send_deps(b), config=a.config))
    ca, cb = _Conn(), _Conn()
    out = [r for c in cmds for r in (sa.batch_framed(ca, [c]) if framed else sa.batch(ca, [c]))]
    refs = [send_one(sb, b.store, cb, c) for c in cmds]
    ra = bytes(a.store.commitlog.queue.files[0].slice(0, a.store.commitlog_max_offset()))
    rb = bytes(b.store.commitlog.queue.files[0].slice(0, b.store.commitlog_max_offset()))
    assert ra == rb and len(ra) == b.store.commitlog_max_offset()
    for key in b.store.queues.queues:
        assert bytes(a.store.read_units(*key, 0, 64)) == bytes(b.store.read_units(*key, 0, 64)), key
    assert a.counters.put_total == a.store.put_ok_total == b.store.put_ok_total
    got = await _by_opaque(out)
    assert got == await _by_opaque(refs)
    assert sorted(got) == [c.opaque for c in cmds if not c.is_oneway]
    await a.shutdown()
    await b.shutdown()


async def test_a_run_answers_in_request_order(make_broker, tmp_path):
    """Without SYNC_FLUSH waits the run's frames are in request order (errors included)."""
    a, _ = await _brokers(make_broker, tmp_path, "order", "ASYNC_FLUSH")
    rnd = random.Random(3)
    cmds = [request(rnd, i + 1) for i in range(40)]
    blob = b"".join(r for r in _runner(a).batch_framed(_Conn(), cmds) if r is not None)
    assert [c.opaque for c in FrameDecoder().feed(blob)] == [c.opaque for c in cmds if not c.is_oneway]


def test_every_put_status_has_a_response_code():
    from codec.codes import ResponseCode
    from storage.store_types import PutStatus

    assert set(PUT_STATUS_CODES) == set(PutStatus)
    assert all(isinstance(code, ResponseCode) for code in PUT_STATUS_CODES.values())
    assert PUT_STATUS_CODES[PutStatus.PUT_OK] == ResponseCode.SUCCESS


class _ObservedConn(_Conn):
    def __init__(self):
        super().__init__()
        self.observed: list[int] = []

    def response_observer(self, conn, cmd):  # type: ignore[override]
        self.observed.append(cmd.opaque)


async def test_a_sync_master_runs_one_answer_equals_the_per_request_reference():
    """SYNC_MASTER: the run's one LaterFrames answer (`answer_run_when_replicated`) is, frame for frame, what
    the per-request reference (`answer_when_replicated`) answers, for a replica status given at once, one
    that comes later, and one that is not OK; an error while waiting answers every send SYSTEM_ERROR."""
    import asyncio

    from codec.codes import ResponseCode
    from codec.send_response import SendResponseFrames
    from server.processors.send_common import SEND_EXT_EXTRA, answer_when_replicated
    from server.processors.send_common import send_ext as ok_ext
    from server.processors.send_run import WaitingSend, answer_run_when_replicated

    frames = SendResponseFrames("7F00000100002A9F", SEND_EXT_EXTRA)
    rnd = random.Random(11)
    loop = asyncio.get_running_loop()
    for status in [(ResponseCode.SUCCESS, None), (ResponseCode.FLUSH_SLAVE_TIMEOUT, "FLUSH_SLAVE_TIMEOUT"),
                   (ResponseCode.SLAVE_NOT_AVAILABLE, "SLAVE_NOT_AVAILABLE"), "later", "later-timeout"]:
        sends = [WaitingSend(RemotingCommand(SEND_MESSAGE_V2, opaque=i + 1, serialize_type=rnd.choice(
                    [SERIALIZE_JSON, SERIALIZE_ROCKETMQ])), rnd.randrange(1 << 40), rnd.randrange(16), rnd.randrange(1 << 30))
                 for i in range(rnd.randint(1, 30))]
        if isinstance(status, tuple):
            replica: object = status
        else:
            replica = loop.create_future()
            loop.call_soon(replica.set_result, (ResponseCode.SUCCESS, None) if status == "later"
                           else (ResponseCode.FLUSH_SLAVE_TIMEOUT, "FLUSH_SLAVE_TIMEOUT"))
        conn = _ObservedConn()
        got = await answer_run_when_replicated(conn, sends, None, replica, frames)  # type: ignore[arg-type]  # a stand-in Connection
        want = [encode_frame_bytes(await answer_when_replicated(
            s.cmd, None, replica, ok_ext(frames.msg_id(s.phys_offset), s.reply_queue_id, s.queue_offset)))  # type: ignore[arg-type]
            for s in sends]
        assert _frames(got) == want, status
        failed = status not in [(ResponseCode.SUCCESS, None), "later"]
        assert conn.observed == ([s.cmd.opaque for s in sends] if failed else [])  # the broker's error hook
    broken = loop.create_future()
    broken.set_exception(RuntimeError("lost"))
    sends = [WaitingSend(RemotingCommand(SEND_MESSAGE_V2, opaque=i + 1), 100 * i, 0, i) for i in range(3)]
    answers = FrameDecoder().feed(await answer_run_when_replicated(_Conn(), sends, None, broken, frames))  # type: ignore[arg-type]
    assert [(a.opaque, a.code, a.remark) for a in answers] == [
        (i + 1, ResponseCode.SYSTEM_ERROR, "RuntimeError: lost") for i in range(3)]
