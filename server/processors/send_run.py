"""A run of single-message sends: the pipelined SEND_MESSAGE / SEND_MESSAGE_V2 requests of one read,
stored with one put and answered per request (`SendRunner`, a part of `server.processors.send.SendProcessor`).

Each request is checked and encoded on its own (`SendPreparer.prepare`, given to the runner) into a
`send_common.PreparedSend` (record, store topic, store queue id, tagsCode, index keys, deliver delay ms,
reply queue id, wait). The run's records are laid back to back in ONE buffer (`send_put_run`: a `codec.put_run.PutRun`) and stored with
`MessageStore.put_batch` (one reserve, one copy, queue offsets returned; anything unusual goes through
`put` with the same statuses). A batch-message request in the run puts what came before it first, so
the store order is the request order. For the dispatcher (`batch_framed`) the run's responses are
encoded in one pass into one bytes object (`codec.send_response` for the SUCCESS ones); a SYNC_MASTER
run's sends that wait for the slaves are answered by ONE task (`answer_run_when_replicated`, a
`remoting.dispatch.LaterFrames`) that waits once and encodes their frames together, instead of a task
and a RemotingCommand per request (`send_common.answer_when_replicated`, the reference, which the
unframed path still uses).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, cast

import structlog

from codec.codes import RPC_ONEWAY, RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.frame import encode_frame_bytes
from codec.put_run import PutRun, put_run, put_run_one
from codec.send_response import SendResponseFrames
from remoting.dispatch import LaterFrames, error_text
from server.header_parsers import parse_send
from server.header_spec import HeaderError
from server.processors import peer_of
from server.processors.send_common import (
    PUT_OK,
    PUT_STATUS_CODES,
    SEND_EXT_EXTRA,
    PreparedSend,
    answer_when_flushed,
    answer_when_replicated,
    fail,
    ok,
    put_fail_remark,
    replicated_status,
    send_ext,
)

if TYPE_CHECKING:
    from remoting.connection import Connection
    from server.cluster.ha.service import ReplicaAck
    from server.headers import SendMessageHeader
    from server.processors.send_common import SendConn, SendDeps

log = structlog.get_logger(__name__)

# What a send request is answered with: the response, None (a oneway request), or (SYNC_FLUSH / SYNC_MASTER
# with WAIT) an awaitable of the response that the dispatcher runs as a task
SendAnswer: TypeAlias = RemotingCommand | Awaitable[RemotingCommand] | None
# a framed run's entry: a SendAnswer, the run's ready frames (bytes) or its SYNC_MASTER sends' LaterFrames
FramedAnswer: TypeAlias = SendAnswer | bytes | LaterFrames
# one request -> its prepared send or its (error) response (`send.SendPreparer.prepare`)
Prepare: TypeAlias = Callable[["SendConn", RemotingCommand, "SendMessageHeader"], "PreparedSend | RemotingCommand | None"]
# a batch-message request -> its answer (`send.BatchMessageSend`)
SendBatchMessage: TypeAlias = Callable[["SendConn", RemotingCommand, "SendMessageHeader"], SendAnswer]

def send_put_run(preps: list[PreparedSend]) -> PutRun:
    """Prepared sends as `MessageStore.put_batch` takes them (one `codec.put_run.put_run`)."""
    # the PreparedSend fields record, topic, queue_id, tags_code, keys, deliver_delay (in that order)
    recs, topics, qids, tcodes, keys, delays = list(zip(*preps, strict=True))[:6]
    return put_run(recs, list(zip(topics, qids, strict=True)), list(tcodes), list(keys), delays)


class WaitingSend(NamedTuple):
    """A stored send of a run whose answer waits for the slaves (SYNC_MASTER with WAIT)."""

    cmd: RemotingCommand
    phys_offset: int
    reply_queue_id: int
    queue_offset: int


async def answer_run_when_replicated(conn: Connection, sends: list[WaitingSend], flushed: asyncio.Future[bool] | None,
                                     replica: ReplicaAck | Awaitable[ReplicaAck], frames: SendResponseFrames) -> bytes:
    """SYNC_MASTER, a run's waiting sends: ONE wait (`replicated_status`), then their responses encoded
    together; each frame is what `answer_when_replicated` gives for its send (tests/server/test_send_run.py).
    An error while waiting answers each of them SYSTEM_ERROR (nothing of the run is left unanswered)."""
    try:
        code, remark = await replicated_status(flushed, replica)
    except Exception as e:
        code, remark = ResponseCode.SYSTEM_ERROR, error_text(e)
    if code == ResponseCode.SUCCESS:
        frame = frames.frame
        return b"".join([frame(s.cmd.opaque, s.cmd.serialize_type, s.phys_offset, s.reply_queue_id, s.queue_offset)
                         for s in sends])
    out = []
    for s in sends:
        r = ok(s.cmd, code, remark, send_ext(frames.msg_id(s.phys_offset), s.reply_queue_id, s.queue_offset))
        if conn.response_observer is not None:
            conn.response_observer(conn, r)
        out.append(encode_frame_bytes(r))
    return b"".join(out)


class SendRunner:
    """A run of pipelined send requests -> prepared sends -> one put_batch -> one response each
    (`batch_framed`: one response buffer for the run)."""

    def __init__(self, deps: SendDeps, prepare: Prepare, send_batch_message: SendBatchMessage,
                 msg_id_prefix: str) -> None:
        self.deps = deps
        self.cfg = deps.config
        self.prepare = prepare
        self.send_batch_message = send_batch_message
        self._frames = SendResponseFrames(msg_id_prefix, SEND_EXT_EXTRA)

    def batch(self, conn: SendConn, cmds: list[RemotingCommand]) -> list[SendAnswer]:
        """A run of send requests: one response (None for oneway, an awaitable for a SYNC_FLUSH wait)
        per request, in order."""
        return cast("list[SendAnswer]", self._run(conn, cmds, None))  # not framed: no bytes

    def batch_parsed(self, conn: SendConn, cmds: list[RemotingCommand],
                     headers: list[SendMessageHeader]) -> list[SendAnswer]:
        """`batch` for requests whose headers the caller already holds (the gRPC endpoint builds them from
        the proto message: no extFields to write and parse back); headers[i] is cmds[i]'s, and must be
        what `parse_send` gives for the extFields of the same send (tests/grpc/test_send_header_fast.py)."""
        if len(cmds) == 1:  # a gRPC send
            return [cast("SendAnswer", self._run_one(conn, cmds[0], None, headers[0]))]
        return cast("list[SendAnswer]", self._run(conn, cmds, None, headers))

    def batch_framed(self, conn: Connection, cmds: list[RemotingCommand]) -> list[FramedAnswer]:
        """`batch` for the dispatcher (`remoting.dispatch`): the run's ready responses are encoded in
        request order into ONE bytes object (at the first answered request's entry; every other entry
        None, an awaitable or the LaterFrames of the sends waiting for the slaves)."""
        out = self._run(conn, cmds, conn)
        pieces: list[bytes] = []
        first = -1
        for i, r in enumerate(out):
            if r is None:
                continue
            if type(r) is bytes:
                pieces.append(r)
            elif isinstance(r, RemotingCommand):
                if r.code and conn.response_observer is not None:
                    conn.response_observer(conn, r)
                pieces.append(encode_frame_bytes(r))
            else:
                continue  # an awaitable or a LaterFrames: the dispatcher runs it as a task
            out[i] = None
            if first < 0:
                first = i
        if pieces:
            out[first] = b"".join(pieces)
        return out

    def _run(self, conn: SendConn, cmds: list[RemotingCommand], framed: Connection | None,
             headers: list[SendMessageHeader] | None = None) -> list[FramedAnswer]:
        """`framed`: the dispatcher's connection (frames, LaterFrames); None: RemotingCommands and awaitables."""
        if len(cmds) == 1:
            return [self._run_one(conn, cmds[0], framed, headers[0] if headers is not None else None)]
        out: list[FramedAnswer] = [None] * len(cmds)
        idx: list[int] = []
        preps: list[PreparedSend] = []
        parse = parse_send
        prepare = self.prepare
        for i, cmd in enumerate(cmds):
            try:
                h = headers[i] if headers is not None else parse(cmd.ext_fields, cmd.code != RequestCode.SEND_MESSAGE)
                if h.batch:
                    self._put_run(cmds, out, idx, preps, framed)
                    out[i] = self.send_batch_message(conn, cmd, h)
                    continue
                prep = prepare(conn, cmd, h)
            except HeaderError as e:
                out[i] = fail(cmd, ResponseCode.SYSTEM_ERROR, str(e))
                continue
            except Exception as e:  # one bad request must not cost the others of the run
                ip, port = peer_of(conn)
                log.warning("send.failed", peer=f"{ip}:{port}", error=repr(e), exc_info=e)
                out[i] = fail(cmd, ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
                continue
            if isinstance(prep, tuple):
                idx.append(i)
                preps.append(prep)
            else:
                out[i] = prep
        self._put_run(cmds, out, idx, preps, framed)
        return out

    def _run_one(self, conn: SendConn, cmd: RemotingCommand, framed: Connection | None,
                 h: SendMessageHeader | None) -> FramedAnswer:
        """`_run` of ONE request (a gRPC send, a sync producer's), without the run's lists."""
        try:
            if h is None:
                h = parse_send(cmd.ext_fields, cmd.code != RequestCode.SEND_MESSAGE)
            if h.batch:
                return self.send_batch_message(conn, cmd, h)
            prep = self.prepare(conn, cmd, h)
        except HeaderError as e:
            return fail(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        except Exception as e:  # as in `_run`
            ip, port = peer_of(conn)
            log.warning("send.failed", peer=f"{ip}:{port}", error=repr(e), exc_info=e)
            return fail(cmd, ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if not isinstance(prep, tuple):
            return prep
        if self.deps.replica.sync_master:
            out: list[FramedAnswer] = [None]
            self._put_run([cmd], out, [0], [prep], framed)
            return out[0]
        return self._put_one(cmd, prep, framed)

    def _put_run(self, cmds: list[RemotingCommand], out: list[FramedAnswer], idx: list[int],
                 preps: list[PreparedSend], framed: Connection | None) -> None:
        """Store the prepared sends `preps` (of requests `idx`) with one put_batch; answer each."""
        if not preps:
            return
        if len(preps) == 1 and not self.deps.replica.sync_master:
            out[idx[0]] = self._put_one(cmds[idx[0]], preps[0], framed)
            idx.clear()
            preps.clear()
            return
        run = send_put_run(preps)
        res = self.deps.store.put_batch(run)
        phys, statuses, flushed = res.phys, res.statuses, res.flushed
        qoffs = res.queue_offsets or [-1] * len(preps)
        # no response waits for a flush unless SYNC_FLUSH (then only those with WAIT)
        sync = self.cfg.sync_flush and flushed is not None
        # framed: the run's one LaterFrames is the only one to await the wait, so it gets no task of its own
        replica = self.deps.replica.gate_for_run(run.starts, phys, statuses, shared=framed is None) \
            if self.deps.replica.sync_master and res.count else None
        frame = self._frames.frame
        waiting: list[WaitingSend] = []  # framed SYNC_MASTER sends: one LaterFrames for them all
        first_waiting = -1
        for j, i in enumerate(idx):
            prep = preps[j]
            reply_qid, wait = prep.reply_queue_id, prep.wait
            cmd = cmds[i]
            if statuses is not None and statuses[j] is not PUT_OK:
                out[i] = fail(cmd, PUT_STATUS_CODES[statuses[j]], put_fail_remark(statuses[j], res.remark), reply_qid)
            elif cmd.flag & RPC_ONEWAY:
                continue
            elif replica is not None and wait and framed is not None:  # SYNC_MASTER: answer once replicated
                if first_waiting < 0:
                    first_waiting = i
                waiting.append(WaitingSend(cmd, phys[j], reply_qid, qoffs[j]))
            elif replica is not None and wait:  # SYNC_MASTER: answer once a slave has the bytes
                out[i] = answer_when_replicated(cmd, flushed if sync else None, replica,
                                                self._ok_ext(phys[j], reply_qid, qoffs[j]))
            elif sync and wait and flushed is not None:
                out[i] = answer_when_flushed(cmd, [flushed], self._ok_ext(phys[j], reply_qid, qoffs[j]))
            elif framed is not None:
                out[i] = frame(cmd.opaque, cmd.serialize_type, phys[j], reply_qid, qoffs[j])
            else:
                out[i] = ok(cmd, ResponseCode.SUCCESS, None, self._ok_ext(phys[j], reply_qid, qoffs[j]))
        if waiting and framed is not None and replica is not None:
            out[first_waiting] = LaterFrames(answer_run_when_replicated(
                framed, waiting, flushed if sync else None, replica, self._frames), len(waiting))
        elif inspect.iscoroutine(replica):  # no send of the run waits (oneway, WAIT=false, failed puts)
            replica.close()
        if res.count:
            starts = run.starts
            sizes = list(map(int.__sub__, starts[1:], starts))
            topics = [d[0] for d in run.dests]
            if statuses is not None:
                kept = [j for j, s in enumerate(statuses) if s is PUT_OK]
                topics, sizes = [topics[j] for j in kept], [sizes[j] for j in kept]
            self.deps.on_put_sizes(topics, sizes)
        idx.clear()
        preps.clear()

    def _put_one(self, cmd: RemotingCommand, prep: PreparedSend, framed: Connection | None) -> FramedAnswer:
        """`_put_run` of ONE prepared send on a broker that is no SYNC_MASTER (a gRPC send, a sync
        producer's): the same put and the same answer, without the run's lists and per-run columns
        (tests/server/test_send_run.py checks both give the same answers and records)."""
        record, topic, queue_id, tags_code, keys, deliver_delay, reply_qid, wait = prep
        run = put_run_one(record, (topic, queue_id), tags_code, keys, deliver_delay)
        res = self.deps.store.put_batch(run)
        statuses = res.statuses
        if statuses is not None:
            return fail(cmd, PUT_STATUS_CODES[statuses[0]], put_fail_remark(statuses[0], res.remark), reply_qid)
        self.deps.on_put_sizes([topic], [len(run.buf)])
        if cmd.flag & RPC_ONEWAY:
            return None
        phys = res.phys[0]
        qoff = res.queue_offsets[0] if res.queue_offsets else -1
        flushed = res.flushed
        if flushed is not None and wait and self.cfg.sync_flush:
            return answer_when_flushed(cmd, [flushed], self._ok_ext(phys, reply_qid, qoff))
        if framed is not None:
            return self._frames.frame(cmd.opaque, cmd.serialize_type, phys, reply_qid, qoff)
        return ok(cmd, ResponseCode.SUCCESS, None, self._ok_ext(phys, reply_qid, qoff))

    def _ok_ext(self, phys_offset: int, reply_qid: int, queue_offset: int) -> dict[str, str]:
        return send_ext(self._frames.msg_id(phys_offset), reply_qid, queue_offset)
