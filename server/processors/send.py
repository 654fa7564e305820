"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The batch path is chosen by the header's `batch`/`m` flag, not by the request code (C++ sends
batches as 310 with m=true). Checks run in RocketMQ's order (remoting-protocol.md §8.1); the put
hooks (delay level, then timer) rewrite the record before it is encoded and stored. Every
response carries msgId/queueId/queueOffset/MSG_REGION/TRACE_ON (the C++ client reads the send
header without a null check; `send_common.send_ext`).

Three parts, composed by `SendProcessor`:
- `SendPreparer`: one request -> a `PreparedSend` (checked, routed, encoded) or its error response;
- `BatchMessageSend`: a batch-message request (`m`/`batch`), stored and answered on its own;
- `send_run.SendRunner`: a run of pipelined requests -> one put_batch -> one response buffer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import structlog

from codec import msgid
from codec.batch import decode_batch
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.msgid import UniqIdGenerator
from codec.properties import (
    MessageConst,
    SentRewrite,
    parse_properties,
    parse_sent_properties,
    properties_to_string,
    rewrite_sent_properties_cached,
)
from codec.record import MessageRecord, encode_message_bytes, encode_record
from codec.tags import MULTI_TAG, tags_hash
from scheduler.delay_levels import ON_DICT, transform_delay_properties
from server.processors import Registrar, guarded, peer_of
from server.processors.send_common import (
    MULTI_TAGS_FLAG,
    PROPS_MAX,
    PUT_OK,
    PUT_STATUS_CODES,
    TRANSACTION_COMMIT,
    TRANSACTION_MASK,
    V3_4_9,
    PreparedSend,
    SendConn,
    SendDeps,
    answer_when_flushed,
    answer_when_replicated,
    body_bytes,
    fail,
    int_or_zero,
    new_prepared,
    ok,
    put_fail_remark,
    send_ext,
)
from server.processors.send_run import FramedAnswer, SendAnswer, SendRunner
from server.topics import DLQ_PREFIX, NOT_ALLOWED_SEND, RETRY_PREFIX, topic_error
from server.transactions import is_half, to_half
from server.wiring import put_request

# property names, bound once for the per-message path (codec.properties.MessageConst)
_CLUSTER = MessageConst.CLUSTER
_DELAY = MessageConst.DELAY
_REAL_QID = MessageConst.REAL_QID
_REAL_TOPIC = MessageConst.REAL_TOPIC
_TRAN_MSG = MessageConst.TRAN_MSG
_WAIT = MessageConst.WAIT

if TYPE_CHECKING:
    from remoting.connection import Connection
    from server.cluster.ha.service import ReplicaAck
    from server.headers import SendMessageHeader
    from server.topics import TopicConfig
    from storage.store_types import PutRequest, PutResult

log = structlog.get_logger(__name__)


# these need the dict path (DELAY is read by the plain path itself; REAL_* would be overwritten in place)
PLAIN_SEND_EXCLUDES = ("TIMER_", _TRAN_MSG, _REAL_TOPIC, _REAL_QID)


class SendPreparer:
    """One send request -> a `PreparedSend` ready for the store, or the (error) response: RocketMQ's
    checks, retry/DLQ routing, transactions (half), the put hooks, the record's encoding."""

    def __init__(self, deps: SendDeps) -> None:
        self.deps = deps
        self.cfg = deps.config
        host, _, port = deps.config.broker_addr.rpartition(":")
        self.store_host = (host, int(port))
        # UNIQ_KEYs the broker assigns (a producer that sent none) carry brokerIP1, as a Java broker's do
        self._new_uniq_id = UniqIdGenerator(deps.config.broker_ip1).new
        self._valid_topics: set[str] = set()

    # ---- checks shared by single and batch ------------------------------------------------
    def check(self, cmd: RemotingCommand, h: SendMessageHeader,
               batch: bool) -> tuple[TopicConfig, int] | RemotingCommand | None:
        """(topic_config, queue_id) or a ready error response (None for a oneway request)."""
        topic = h.topic
        if batch and len(topic) > 127:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, f"message topic length too long {len(topic)}")
        problem = self._topic_error(topic)
        if problem:
            return fail(cmd, ResponseCode.SYSTEM_ERROR, problem)
        if topic in NOT_ALLOWED_SEND:
            return fail(cmd, ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        topics = self.deps.topics
        tcfg = topics.get(topic)
        if tcfg is None:
            sys_flag = 1 if h.unitMode else 0
            tcfg = topics.create_in_send(topic, h.defaultTopic, h.defaultTopicQueueNums, sys_flag)
            if tcfg is None and topic.startswith(RETRY_PREFIX):
                tcfg = topics.create_in_send_back(topic, 1, 6, sys_flag)
            if tcfg is None:
                return fail(cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tcfg.writeable:
            return fail(cmd, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        qid = h.queueId
        if qid >= tcfg.queue_nums:
            return fail(cmd, ResponseCode.SYSTEM_ERROR, f"request queueId[{qid}] is illegal, topic:[{topic}] "
                                            f"queueNums:[{tcfg.queue_nums}] Producer:[{h.producerGroup}]")
        if qid < 0:  # a random queue, as Apache's randomQueueId (one C call, not randrange's Python loop)
            qid = random.getrandbits(31) % max(1, tcfg.write_queue_nums)
        return tcfg, qid

    def born_host(self, conn: SendConn) -> tuple[str, int]:
        attrs = conn.attrs
        host = attrs.get("_send_born_host")
        if host is None:
            host = attrs["_send_born_host"] = peer_of(conn)
        return host

    def _topic_error(self, topic: str) -> str | None:
        if topic in self._valid_topics:
            return None
        problem = topic_error(topic)
        if problem is None and len(self._valid_topics) < 65536:
            self._valid_topics.add(topic)
        return problem

    # ---- single messages (a run of them: send_run.SendRunner) -----------------------------
    def prepare(self, conn: SendConn, cmd: RemotingCommand,
                        h: SendMessageHeader) -> PreparedSend | RemotingCommand | None:
        """The prepared send ready for the store, or the (error) response (None for a oneway request)."""
        checked = self.check(cmd, h, batch=False)
        if not isinstance(checked, tuple):
            return checked
        tcfg, qid = checked
        body = body_bytes(cmd.body)
        if len(body) > self.cfg.max_message_size:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, f"message body size exceeded, {len(body)} > "
                                               f"{self.cfg.max_message_size}", qid)
        reconsume = h.reconsumeTimes or 0
        if not h.topic.startswith(RETRY_PREFIX):
            plain = rewrite_sent_properties_cached(h.properties or "", self.cfg.broker_cluster_name,
                                                   self._new_uniq_id, PLAIN_SEND_EXCLUDES)
            if plain is not None:  # no timer, no transaction: the timer hook has nothing to do
                return self._prepare_plain(conn, cmd, h, tcfg, qid, body, reconsume, plain)
        return self._prepare_full(conn, cmd, h, tcfg, qid, body, reconsume)

    def _prepare_plain(self, conn: SendConn, cmd: RemotingCommand, h: SendMessageHeader, tcfg: TopicConfig,
                       qid: int, body: bytes, reconsume: int,
                       plain: SentRewrite) -> PreparedSend | RemotingCommand | None:
        """A send without timer or transaction keys, on the properties string. A DELAY level > 0 is
        scheduled by scheduler.delay_levels.transform_delay_properties (SCHEDULE_TOPIC_XXXX queue L-1,
        tagsCode = deliver time); a level above the highest (clamped, which edits DELAY) takes the dict
        path."""
        stored, wait, tags, keys, delay = plain
        topic, store_qid, deliver_delay = h.topic, qid, -1
        if delay is not None:
            delayed = transform_delay_properties(stored, delay, topic, qid, h.sysFlag, self.deps.levels)
            if delayed is ON_DICT:
                return self._prepare_full(conn, cmd, h, tcfg, qid, body, reconsume)
            if delayed is not None:
                stored, topic, store_qid, deliver_delay = delayed
        props_bytes = stored.encode("utf-8", "replace")
        if len(props_bytes) > PROPS_MAX:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, f"message properties size exceeded {PROPS_MAX}", qid)
        sys_flag = h.sysFlag | MULTI_TAGS_FLAG if tcfg.topic_filter_type == MULTI_TAG else h.sysFlag
        raw = encode_message_bytes(topic, body, store_qid, h.flag, sys_flag, h.bornTimestamp, self.born_host(conn),
                                   self.store_host, reconsume, props_bytes)
        return new_prepared(PreparedSend, (raw, topic, store_qid, tags_hash(tags) if tags else 0, keys, deliver_delay,
                                           qid, wait))

    def _prepare_full(self, conn: SendConn, cmd: RemotingCommand, h: SendMessageHeader, tcfg: TopicConfig,
                      qid: int, body: bytes, reconsume: int) -> PreparedSend | RemotingCommand | None:
        """Properties as a dict (codec.properties.parse_sent_properties: the broker's edits, declared once):
        retry/DLQ routing, transactions (half), the put hooks (delay, timer)."""
        props, wait = parse_sent_properties(h.properties or "", self.cfg.broker_cluster_name, self._new_uniq_id)
        topic, reply_qid = h.topic, qid
        if topic.startswith(RETRY_PREFIX):
            rerouted = self._retry_or_dlq(cmd, h, props, reconsume)
            if not isinstance(rerouted, tuple):
                return rerouted
            topic, qid = rerouted
            if topic.startswith(DLQ_PREFIX):
                reply_qid = qid
        sys_flag = h.sysFlag
        if tcfg.topic_filter_type == MULTI_TAG:
            sys_flag |= MULTI_TAGS_FLAG
        rec = MessageRecord(
            topic=topic, body=body, queue_id=qid, flag=h.flag, sys_flag=sys_flag,
            born_timestamp=h.bornTimestamp, born_host=self.born_host(conn), store_host=self.store_host,
            reconsume_times=reconsume, properties=props)
        deliver_delay = -1
        if is_half(props, reconsume):  # transactional: parked in the half topic until END_TRANSACTION
            to_half(rec)
        elif sys_flag & TRANSACTION_MASK in (0, TRANSACTION_COMMIT):
            hooked = self.deps.hooks.apply(rec)
            if isinstance(hooked, tuple):  # (code, remark): a put hook rejected the message
                return fail(cmd, hooked[0], hooked[1], reply_qid)
            deliver_delay = hooked
        props_bytes = properties_to_string(rec.properties).encode("utf-8", "replace")
        if len(props_bytes) > PROPS_MAX:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, f"message properties size exceeded {PROPS_MAX}", reply_qid)
        raw = encode_record(rec, properties_bytes=props_bytes)
        req = put_request(raw, rec.topic, rec.queue_id, rec.properties, deliver_delay)
        return PreparedSend(raw, req.topic, req.queue_id, req.tags_code, req.keys, deliver_delay, reply_qid, wait)

    def _retry_or_dlq(self, cmd: RemotingCommand, h: SendMessageHeader, props: dict[str, str],
                      reconsume: int) -> tuple[str, int] | RemotingCommand | None:
        """(store topic, queue id) of a send to a retry topic: the retry queue, or the group's DLQ once
        reconsumed maxReconsumeTimes times; an error response when the group does not exist."""
        group = h.topic[len(RETRY_PREFIX):]
        gcfg = self.deps.groups.find(group)
        if gcfg is None:
            return fail(cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        max_times = gcfg.retry_max_times
        if (cmd.version or 0) >= V3_4_9 and h.maxReconsumeTimes is not None:
            max_times = h.maxReconsumeTimes
        if reconsume < max_times:
            return h.topic, h.queueId if h.queueId >= 0 else 0
        dlq = DLQ_PREFIX + group
        self.deps.topics.create_in_send_back(dlq, 1, 6)
        props[_DELAY] = "0"
        log.info("send.to_dlq", group=group, reconsume_times=reconsume, max=max_times)
        return dlq, 0



class BatchMessageSend:
    """A batch-message request (the header's `batch`/`m` flag): checked by the preparer, its items
    stored with one `MessageStore.put`, answered with every msgId (or the first failure)."""

    def __init__(self, deps: SendDeps, preparer: SendPreparer, msg_id_prefix: str) -> None:
        self.deps = deps
        self.cfg = deps.config
        self.preparer = preparer
        self._msg_id_prefix = msg_id_prefix

    def __call__(self, conn: SendConn, cmd: RemotingCommand, h: SendMessageHeader) -> SendAnswer:
        checked = self.preparer.check(cmd, h, batch=True)
        if not isinstance(checked, tuple):
            return checked
        tcfg, qid = checked
        if h.topic.startswith(RETRY_PREFIX):
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group " + h.topic, qid)
        batch_props = parse_properties(h.properties or "")
        if (h.sysFlag & TRANSACTION_MASK) != 0 or batch_props.get(_TRAN_MSG, "").lower() == "true":
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, "batch message does not support transaction", qid)
        if int_or_zero(batch_props.get(_DELAY)) > 0:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, "batch message does not support delay message", qid)
        body = body_bytes(cmd.body)
        if len(body) > self.cfg.max_message_size:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, f"message body size exceeded, {len(body)} > "
                                               f"{self.cfg.max_message_size}", qid)
        try:
            items = decode_batch(body)
        except ValueError as e:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}", qid)
        if not items:
            return fail(cmd, ResponseCode.MESSAGE_ILLEGAL, "empty batch", qid)
        wait = batch_props.get(_WAIT, "true").lower() != "false"
        batch_props[_CLUSTER] = self.cfg.broker_cluster_name
        tail = properties_to_string(batch_props)
        sys_flag = h.sysFlag | (MULTI_TAGS_FLAG if tcfg.topic_filter_type == MULTI_TAG else 0)
        born_host = self.preparer.born_host(conn)
        store_host = self.preparer.store_host
        reqs: list[PutRequest] = []
        for item in items:
            item_str = item.properties
            if item_str and not item_str.endswith("\x02"):
                item_str += "\x02"
            props_str = item_str + tail
            props = parse_properties(props_str)
            rec = MessageRecord(
                topic=h.topic, body=bytes(item.body), queue_id=qid, flag=item.flag, sys_flag=sys_flag,
                born_timestamp=h.bornTimestamp, born_host=born_host, store_host=store_host,
                reconsume_times=h.reconsumeTimes or 0, properties=props)
            raw = encode_record(rec, properties_bytes=props_str.encode())
            reqs.append(put_request(raw, h.topic, qid, props, -1))
        results = self.deps.store.put(reqs)
        return self._respond(cmd, results, qid, wait, [h.topic] * len(reqs))

    # ---- response -------------------------------------------------------------------------
    def _respond(self, cmd: RemotingCommand, results: list[PutResult], reply_qid: int, wait: bool,
                 topics: list[str]) -> SendAnswer:
        """The response to a batch-message send: every record stored, or the first failure."""
        first = results[0]
        for r in results:
            if r.status is not PUT_OK:
                return fail(cmd, PUT_STATUS_CODES[r.status], put_fail_remark(r.status, r.remark), reply_qid)
        prefix = self._msg_id_prefix
        msg_id = ",".join([f"{prefix}{r.phys_offset:016X}" for r in results])
        self.deps.on_put(topics, results)
        if cmd.is_oneway:
            return None
        ext = send_ext(msg_id, reply_qid, first.queue_offset)
        replica = self.deps.replica
        if replica.sync_master and wait:
            end = max(r.phys_offset + r.size for r in results)
            flushed = next((r.flushed for r in results if r.flushed is not None), None)
            gate = replica.gate(end)
            ack: ReplicaAck | Awaitable[ReplicaAck] = gate if isinstance(gate, tuple) else asyncio.ensure_future(gate)
            return answer_when_replicated(cmd, flushed if self.cfg.sync_flush else None, ack, ext)
        if self.cfg.sync_flush and wait:
            pending = [r.flushed for r in results if r.flushed is not None]
            if pending:
                return answer_when_flushed(cmd, pending, ext)
        return ok(cmd, ResponseCode.SUCCESS, None, ext)



class SendProcessor:
    """SEND_MESSAGE / V2 / SEND_BATCH_MESSAGE: the preparer, the batch-message send and the run,
    composed. `batch` / `batch_framed` are the run's (the gRPC endpoint and the dispatcher call them)."""

    def __init__(self, deps: SendDeps) -> None:
        self.deps = deps
        self.preparer = SendPreparer(deps)
        # an offset msgId is hex(store host ‖ port ‖ offset): the host part is the same for every message
        msg_id_prefix = msgid.offset_msg_id(*self.preparer.store_host, 0)[:-16]
        self.batch_message = BatchMessageSend(deps, self.preparer, msg_id_prefix)
        self.run = SendRunner(deps, self.preparer.prepare, self.batch_message, msg_id_prefix)

    def __call__(self, conn: SendConn, cmd: RemotingCommand) -> SendAnswer:
        """The response, or (SYNC_FLUSH with WAIT) a coroutine that answers once the group commit
        covers the records: the dispatcher runs a task only for those, the usual send needs none.
        A lone request is a run of one."""
        return self.run.batch(conn, [cmd])[0]

    def batch(self, conn: SendConn, cmds: list[RemotingCommand]) -> list[SendAnswer]:
        return self.run.batch(conn, cmds)

    def batch_parsed(self, conn: SendConn, cmds: list[RemotingCommand],
                     headers: list[SendMessageHeader]) -> list[SendAnswer]:
        return self.run.batch_parsed(conn, cmds, headers)

    def batch_framed(self, conn: Connection, cmds: list[RemotingCommand]) -> list[FramedAnswer]:
        return self.run.batch_framed(conn, cmds)


def register(server: Registrar, deps: SendDeps) -> None:
    sp = SendProcessor(deps)
    proc = guarded(sp.__call__)
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        # runs of sends from one read share one store put (remoting.dispatch)
        server.register(code, proc, batch=sp.run.batch_framed)
