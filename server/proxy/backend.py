"""The proxy's `MessagingBackend` (server.grpc.backend): brokers found through the name server, reached over
4.x remoting (`brokers.RemoteBrokers`); the gRPC face is server.grpc.service.MessagingService, the same as the
broker's own endpoint.

Routes come from the name server (`routes.NameServerRoutes`) and name the proxy's endpoints (the service's
business); a send goes to one queue of the route (a FIFO message group's by hash, so every proxy picks the
same; else round robin), a receive pops from the broker the client picked. Pop state lives in the brokers:
a receipt handle is the broker's extraInfo plus the message's CommitLog offset (as Apache's proxy builds
it), valid through any proxy. A transaction id is the half message's offset msgId (which names the broker
that stored it) and its half-queue offset, so any proxy can end it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence

from codec.codes import RequestCode, ResponseCode
from codec.errors import CodecError
from codec.fastjson import as_bool
from codec.msgid import decode_offset_msg_id
from codec.pop_receipt import SEP, ExtraInfo, parse_extra_info
from codec.properties import MessageConst as K
from codec.record import iter_records
from codec.sql92 import EXPRESSION_TYPE as SQL92
from codec.tags import java_hash
from server.grpc import convert
from server.grpc.backend import (
    Filter,
    MessageType,
    Outgoing,
    Pulled,
    Received,
    RouteQueue,
    Sent,
    TopicRoute,
)
from server.grpc.status import Code, GrpcError, from_remoting, remoting_error
from server.grpc.telemetry import ClientSessions, ConsumerPolicy, transaction_id
from server.grpc.v2 import definition_pb2 as pb
from server.proxy.brokers import RemoteBrokers
from server.proxy.config import ProxyConfig
from server.proxy.metadata import BrokerMetadata
from server.proxy.routes import PERM_READ, PERM_WRITE, CachedRoute, NameServerRoutes
from server.proxy.sessions import ProxySessions

CONSUMER_RETRIES = 16
NOT_FOUND_CODES = (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND, ResponseCode.NO_MESSAGE)


def encode_receipt(pop_ck: str, commitlog_offset: int) -> str:
    """The receipt handle a client gets: the broker's extraInfo (8 fields) and the message's CommitLog offset."""
    info = parse_extra_info(pop_ck)
    if info.queue_offset is None:
        info = ExtraInfo(info.ck_queue_offset, info.pop_time, info.invisible_time, info.revive_qid, info.topic_mark,
                         info.broker_name, info.queue_id, info.ck_queue_offset)
    return f"{info.encode()}{SEP}{commitlog_offset}"


def decode_receipt(handle: str) -> tuple[ExtraInfo, int]:
    """(the broker's extraInfo, the CommitLog offset; -1 when the handle has none)."""
    try:
        info = parse_extra_info(handle)
        parts = handle.split(SEP)
        return info, int(parts[8]) if len(parts) > 8 else -1
    except ValueError as e:
        raise GrpcError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle is not one of delaymq-proxy's: {e}") from None


def _pop_refusal(code: int, remark: str | None) -> GrpcError:
    """A broker's refusal of an ACK / CHANGE: NO_MESSAGE means the receipt names no live delivery."""
    if code == ResponseCode.NO_MESSAGE:
        return GrpcError(Code.INVALID_RECEIPT_HANDLE, remark or "the receipt handle names no live delivery")
    return remoting_error(code, remark)


class RemoteBackend:
    def __init__(self, cfg: ProxyConfig, routes: NameServerRoutes, brokers: RemoteBrokers,
                 sessions: ProxySessions, metadata: BrokerMetadata) -> None:
        self.cfg = cfg
        self.metadata = metadata
        self.routes = routes
        self.brokers = brokers
        self.sessions: ClientSessions = sessions
        self.max_message_size = cfg.max_message_size
        self.delay_levels: Sequence[int] = cfg.delay_levels_ms()
        self.timer_enabled = cfg.timer_wheel_enable
        self.topic_message_type_check = cfg.enable_topic_message_type_check
        self.store_host: tuple[str, int] | None = None  # a record names the broker that stored it
        self._round = itertools.count()

    async def consumer_policy(self, group: str, topic: str) -> ConsumerPolicy:
        """The group's retryMaxTimes and consumeMessageOrderly as its brokers have them (defaults without)."""
        gcfg = await self.metadata.group(group, topic) if group else None
        retries, fifo = CONSUMER_RETRIES, False
        if gcfg is not None:
            raw = gcfg.get("retryMaxTimes")
            retries = raw if isinstance(raw, int) and raw >= 0 else CONSUMER_RETRIES
            fifo = as_bool(gcfg.get("consumeMessageOrderly"))
        return ConsumerPolicy(retries, fifo, list(self.delay_levels[2:]))

    async def _master(self, topic: str, broker_name: str) -> str:
        for fresh in (False, True):
            addr = (await self.routes.route(topic, fresh)).master(broker_name)
            if addr:
                return addr
        raise GrpcError(Code.INTERNAL_SERVER_ERROR, f"broker {broker_name} has no master in the route of {topic}")

    # ---- routes --------------------------------------------------------------------------
    async def message_types(self, topic: str) -> tuple[MessageType, ...]:
        hit = self.metadata.cached_accepts(topic)  # a send's usual case: no coroutine below this one
        return hit if hit is not None else await self.metadata.accepts(topic)

    async def route(self, topic: str) -> TopicRoute:
        route = await self.routes.route(topic)
        queues: list[RouteQueue] = []
        for qd in sorted(route.route.queue_datas, key=lambda q: q.broker_name):
            if not route.master(qd.broker_name):
                continue
            for qid in range(max(qd.read_queue_nums, qd.write_queue_nums)):
                queues.append(RouteQueue(qd.broker_name, qid, qid < qd.read_queue_nums and bool(qd.perm & PERM_READ),
                                         qid < qd.write_queue_nums and bool(qd.perm & PERM_WRITE)))
        return TopicRoute(queues, await self.metadata.accepts(topic))

    async def assignment(self, topic: str, group: str) -> tuple[list[str], tuple[MessageType, ...]]:
        return (await self.routes.route(topic)).readable_brokers(), await self.metadata.accepts(topic)

    # ---- producing -----------------------------------------------------------------------
    def _queue_for(self, route: CachedRoute, props: dict[str, str]) -> tuple[str, int]:
        """(broker name, queue id): a FIFO message group's one queue (its hash over the route's writable
        queues, so every proxy picks the same), else the next queue round robin."""
        queues = route.writable()
        if not queues:
            raise GrpcError(Code.FORBIDDEN, "the topic has no writable queue on any broker")
        group = props.get(convert.SHARDING_KEY)
        i = abs(java_hash(group)) % len(queues) if group else next(self._round) % len(queues)
        qd, qid = queues[i]
        return qd.broker_name, qid

    async def send(self, topic: str, batch: list[Outgoing], peer: tuple[str, int]) -> list[Sent]:
        route = self.routes.cached(topic) or await self.routes.route(topic)
        out: list[Sent] = []
        for m in batch:  # each message its own SEND_MESSAGE_V2 (coalesced per broker: server.proxy.coalesce)
            try:
                broker_name, qid = self._queue_for(route, m.props)
            except GrpcError as e:
                out.append(Sent(ResponseCode.NO_PERMISSION, e.message))
                continue
            addr = route.master(broker_name)
            assert addr is not None  # writable() keeps only brokers with a master
            resp = await self.brokers.send(addr, topic, qid, m.props, m.sys_flag, m.body, m.born_ms)
            if resp.code != ResponseCode.SUCCESS:
                out.append(Sent(resp.code, resp.remark or ""))
                continue
            ext = resp.ext_fields
            qoff = int(ext.get("queueOffset", 0))
            tx = transaction_id(ext.get("msgId", ""), qoff) if m.props.get(K.TRAN_MSG) == "true" else ""
            out.append(Sent(ResponseCode.SUCCESS, "", broker_name, qoff, tx))
        return out

    async def end_transaction(self, topic: str, transaction_id: str, message_id: str, commit: bool) -> None:
        """END_TRANSACTION to the broker that stored the half message: its offset msgId names it."""
        msg_id, _, table = transaction_id.rpartition("-")
        try:
            host, port, phys = decode_offset_msg_id(msg_id)
            table_offset = int(table)
        except (CodecError, ValueError):
            raise GrpcError(Code.INVALID_TRANSACTION_ID, f"transaction id {transaction_id!r} is not one of "
                                                         f"delaymq's") from None
        resp = await self.brokers.end_transaction(f"{host}:{port}", topic, table_offset, phys, commit, msg_id,
                                                  message_id)
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark)

    async def recall(self, topic: str, broker_name: str, deliver_ms: int, message_id: str,
                     peer: tuple[str, int]) -> None:
        """The recall marker (convert.recall_properties) sent to the broker that holds the timer."""
        addr = await self._master(topic, broker_name)
        resp = await self.brokers.send(addr, topic, 0, convert.recall_properties(topic, deliver_ms, message_id), 0,
                                       b"0", int(time.time() * 1000))
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark)

    # ---- consuming -----------------------------------------------------------------------
    async def receive(self, group: str, topic: str, broker_name: str, batch: int, invisible_ms: int,
                      accept: Filter, deadline: float) -> list[Received]:
        readable = (await self.routes.route(topic)).readable_brokers()
        if not readable:
            raise GrpcError(Code.FORBIDDEN, f"topic {topic} has no readable queue on any broker")
        if broker_name not in readable:  # a queue from an older route: any broker of the topic
            broker_name = readable[next(self._round) % len(readable)]
        addr = await self._master(topic, broker_name)
        poll_ms = int(max(0.0, deadline - asyncio.get_running_loop().time()) * 1000)
        popped = await self.brokers.pop(addr, broker_name, group, topic, batch, invisible_ms, poll_ms,
                                        SQL92 if accept.sql else "TAG", accept.expression,
                                        (await self.consumer_policy(group, topic)).fifo)
        if popped.code in NOT_FOUND_CODES:
            return []
        if popped.code != ResponseCode.SUCCESS:
            st = from_remoting(popped.code, popped.remark)
            raise GrpcError(st.code, st.message)
        return [Received(rec, encode_receipt(rec.properties.get(K.POP_CK, ""), rec.commitlog_offset),
                         rec.reconsume_times + 1, popped.invisible_ms, rec.store_host) for rec in popped.records]

    async def ack(self, group: str, topic: str, handle: str) -> None:
        receipt, _ = decode_receipt(handle)
        addr = await self._master(topic, receipt.broker_name)
        resp = await self.brokers.ack(addr, group, topic, receipt, receipt.encode())
        if resp.code != ResponseCode.SUCCESS:
            raise _pop_refusal(resp.code, resp.remark)

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        receipt, commitlog_offset = decode_receipt(handle)
        addr = await self._master(topic, receipt.broker_name)
        resp = await self.brokers.change_invisible(addr, group, topic, receipt, receipt.encode(), invisible_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise _pop_refusal(resp.code, resp.remark)
        ext = resp.ext_fields
        offset = receipt.queue_offset if receipt.queue_offset is not None else receipt.ck_queue_offset
        renewed = ExtraInfo(offset, int(ext.get("popTime", 0)), int(ext.get("invisibleTime", invisible_ms)),
                            int(ext.get("reviveQid", receipt.revive_qid)), receipt.topic_mark,
                            receipt.broker_name, receipt.queue_id, offset)
        return f"{renewed.encode()}{SEP}{commitlog_offset}" if commitlog_offset >= 0 else renewed.encode()

    async def forward_to_dlq(self, group: str, topic: str, handle: str, message_id: str, max_attempts: int) -> None:
        """As Apache's proxy: CONSUMER_SEND_MSG_BACK (delayLevel -1, the stored message by its CommitLog
        offset) to the broker that popped it, then ACK_MESSAGE of the delivery."""
        receipt, commitlog_offset = decode_receipt(handle)
        if commitlog_offset < 0:
            raise GrpcError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle carries no CommitLog offset")
        addr = await self._master(topic, receipt.broker_name)
        resp = await self.brokers.send_back(addr, group, commitlog_offset, message_id, topic, max(0, max_attempts - 1))
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark)
        acked = await self.brokers.ack(addr, group, topic, receipt, receipt.encode())
        if acked.code != ResponseCode.SUCCESS:
            raise _pop_refusal(acked.code, acked.remark)

    # ---- offsets / pull ------------------------------------------------------------------
    async def update_offset(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int) -> None:
        resp = await self.brokers.update_offset(await self._master(topic, broker_name), group, topic, queue_id, offset)
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark)

    async def get_offset(self, group: str, topic: str, broker_name: str, queue_id: int) -> int:
        resp = await self.brokers.query_offset(await self._master(topic, broker_name), group, topic, queue_id)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            raise GrpcError(Code.OFFSET_NOT_FOUND, f"group {group} has no offset for {topic}:{queue_id}")
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark)
        return int(resp.ext_fields.get("offset", -1))

    async def query_offset(self, topic: str, broker_name: str, queue_id: int, policy: int, at_ms: int) -> int:
        code = RequestCode.GET_MIN_OFFSET if policy == pb.BEGINNING else RequestCode.GET_MAX_OFFSET \
            if policy == pb.END else RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        resp = await self.brokers.queue_offset(await self._master(topic, broker_name), code, topic, queue_id, at_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark)
        return int(resp.ext_fields.get("offset", 0))

    async def pull(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int, batch: int,
                   accept: Filter, deadline: float) -> Pulled:
        addr = await self._master(topic, broker_name)
        suspend_ms = int(max(0.0, deadline - asyncio.get_running_loop().time()) * 1000)
        resp = await self.brokers.pull(addr, group, topic, queue_id, offset, batch, SQL92 if accept.sql else "TAG",
                                       accept.expression, suspend_ms)
        next_offset = int(resp.ext_fields.get("nextBeginOffset", offset))
        host = ("", 0)
        if resp.code == ResponseCode.SUCCESS:
            records = list(iter_records(resp.body_bytes())) if resp.body_len() else []
            return Pulled(records, next_offset, records[0].store_host if records else host)
        if resp.code == ResponseCode.PULL_OFFSET_MOVED:
            return Pulled([], next_offset, host, "OFFSET_MOVED")
        if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            return Pulled([], next_offset, host)
        raise remoting_error(resp.code, resp.remark)
