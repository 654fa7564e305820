"""The in-broker `MessagingBackend` (server.grpc.backend): the broker's own store, pop engine and send path.

Sends go through the remoting send path itself (`server.processors.send.SendProcessor`): a 5.x message becomes
the SEND_MESSAGE request a 4.x producer would make, so topic checks, auto-creation, size limits, transactions,
delay levels and the timer wheel are the same code for both protocols. Pop consumption is `server.pop`'s
(shared with the remoting pop processors); a 5.x session registers with the broker's ClientManager
(`BrokerSessions`), so mqadmin sees it and transaction checks reach it.
"""

from __future__ import annotations

import time
from typing import Any

from codec.codes import DEFAULT_TOPIC, RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.msgid import decode_offset_msg_id
from codec.properties import MessageConst as K
from codec.properties import properties_to_string
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
    accepted_types,
)
from server.grpc.deps import GrpcDeps
from server.grpc.status import Code, GrpcError, remoting_error
from server.grpc.telemetry import (
    CONSUME_POP,
    ClientSessions,
    ConsumerPolicy,
    TelemetryChannel,
    subscription_data,
    transaction_id,
)
from server.grpc.v2 import definition_pb2 as pb
from server.headers import SendMessageHeader
from server.pop.model import MessageFilter, SqlFilter, TagFilter
from server.pop.service import PopService
from server.processors.send import SendProcessor
from server.processors.send_run import SendAnswer
from server.subscription_filter import unsupported_remark
from server.topic_attributes import MESSAGE_TYPE
from server.transactions import COMMIT, ROLLBACK
from storage.store_types import GetStatus
from storage.topic_config import TopicConfig

DEFAULT_RETRIES = 16
MAX_CONNECTIONS = 4096  # peers whose SendConnection (the send path's born-host cache) is kept


def send_command(topic: str, qid: int, m: Outgoing, default_queue_nums: int) -> RemotingCommand:
    """The SEND_MESSAGE request a 4.x producer would make of a 5.x message: what a recall sends, and the
    reference `send_header` agrees with."""
    ext = {"producerGroup": topic, "topic": topic, "defaultTopic": DEFAULT_TOPIC,
           "defaultTopicQueueNums": str(default_queue_nums), "queueId": str(qid), "sysFlag": str(m.sys_flag),
           "bornTimestamp": str(m.born_ms), "flag": "0", "properties": properties_to_string(m.props),
           "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, m.body)


def send_header(topic: str, qid: int, m: Outgoing, default_queue_nums: int) -> SendMessageHeader:
    """The SendMessageHeader of a 5.x message's send, built directly for SendMessage's hot path (no header
    text written and parsed back): what `parse_send` reads from the extFields of `send_command`, the
    reference (tests/grpc/test_send_header_fast.py holds them equal)."""
    h = SendMessageHeader()
    h.__dict__ = {"producerGroup": topic, "topic": topic, "defaultTopic": DEFAULT_TOPIC,
                  "defaultTopicQueueNums": default_queue_nums, "queueId": qid, "sysFlag": m.sys_flag,
                  "bornTimestamp": m.born_ms, "flag": 0, "properties": properties_to_string(m.props) or None,
                  "reconsumeTimes": 0, "unitMode": False, "maxReconsumeTimes": None, "batch": False}
    return h


async def _answered(results: list[SendAnswer]) -> list[RemotingCommand | None]:
    """The send path's answers, each awaited when it is one (SYNC_FLUSH: answered once the group commit
    covers it)."""
    out: list[RemotingCommand | None] = []
    for resp in results:
        if resp is not None and not isinstance(resp, RemotingCommand):
            resp = await resp
        out.append(resp)
    return out


class SendConnection:
    """What the remoting send path reads of a connection (server.processors.send_common.SendConn): the peer
    (born host) and per-connection attrs."""

    __slots__ = ("remote_addr", "attrs")

    def __init__(self, peer: tuple[str, int]) -> None:
        self.remote_addr = peer
        self.attrs: dict[str, Any] = {}


class BrokerSessions:
    """5.x sessions as channels of the broker's ClientManager: a producer of each topic it publishes (Apache's
    proxy uses the topic as the transactional producer group), a consumer (CONSUME_POP) of its group."""

    def __init__(self, deps: GrpcDeps) -> None:
        self.clients = deps.clients

    def register(self, chan: TelemetryChannel, settings: pb.Settings, language: str) -> None:
        kind = settings.WhichOneof("pub_sub")
        if kind == "publishing":
            for topic in settings.publishing.topics:
                self.clients.register_producer(topic.name, chan, chan.client_id, language)
        elif kind == "subscription" and settings.subscription.group.name:
            group = settings.subscription.group.name
            mine = {e.topic.name: subscription_data(e) for e in settings.subscription.subscriptions}
            # in a group with 4.x members, keep what their heartbeats registered (e.g. %RETRY%<group>,
            # the consume type): a registration replaces the group's subscription table
            info = self.clients.consumer_group(group)
            if info is not None and any(c is not chan for c in info.channels):
                keep = [sub for topic, sub in info.subscriptions.items() if topic not in mine]
                consume_type, model, where = info.consume_type, info.message_model, info.consume_from_where
            else:
                keep, consume_type, model, where = [], CONSUME_POP, "CLUSTERING", "CONSUME_FROM_LAST_OFFSET"
            self.clients.register_consumer(
                group, chan, chan.client_id, language or "OTHER", consume_type=consume_type,
                message_model=model, consume_from_where=where, subscriptions=keep + list(mine.values()))

    def closed(self, chan: TelemetryChannel) -> None:
        self.clients.channel_closed(chan, reason="telemetry ended")


class LocalBackend:
    def __init__(self, deps: GrpcDeps, pop: PopService) -> None:
        self.deps = deps
        self.pop = pop
        self.sender = SendProcessor(deps.send)
        self._conns: dict[tuple[str, int], SendConnection] = {}  # per peer: the send path caches its born host
        self.sessions: ClientSessions = BrokerSessions(deps)
        self.max_message_size = deps.config.max_message_size
        self.delay_levels = deps.levels
        self.timer_enabled = deps.timer_enabled
        self.topic_message_type_check = deps.config.enable_topic_message_type_check
        self.store_host: tuple[str, int] | None = deps.store_host
        self.broker_name = deps.config.broker_name

    async def consumer_policy(self, group: str, topic: str) -> ConsumerPolicy:
        gcfg = self.deps.groups.find(group) if group else None
        retries = gcfg.retry_max_times if gcfg is not None else DEFAULT_RETRIES
        return ConsumerPolicy(retries, bool(self.pop.is_fifo(group)) if group else False, list(self.deps.levels[2:]))

    # ---- topics --------------------------------------------------------------------------
    def _topic_config(self, topic: str, create: bool = False) -> TopicConfig:
        topics = self.deps.topics
        tcfg = topics.get(topic)
        if tcfg is None and create:
            tcfg = topics.create_in_send(topic, DEFAULT_TOPIC, self.deps.config.default_topic_queue_nums)
        if tcfg is None:
            raise GrpcError(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return tcfg

    def _accepted_types(self, topic: str) -> tuple[MessageType, ...]:
        """Every type, unless the topic's message.type attribute names one (as Apache's proxy routes)."""
        return accepted_types(self.deps.attributes.get(topic).get(MESSAGE_TYPE, ""))

    async def message_types(self, topic: str) -> tuple[MessageType, ...]:
        return self._accepted_types(topic)

    def _queue_of(self, topic: str, qid: int) -> None:
        tcfg = self._topic_config(topic)
        if not 0 <= qid < max(tcfg.read_queue_nums, tcfg.write_queue_nums):
            raise GrpcError(Code.BAD_REQUEST, f"topic {topic} has no queue {qid}")

    async def route(self, topic: str) -> TopicRoute:
        tcfg = self._topic_config(topic, create=True)
        queues = [RouteQueue(self.broker_name, qid, qid < tcfg.read_queue_nums and tcfg.readable,
                             qid < tcfg.write_queue_nums and tcfg.writeable)
                  for qid in range(max(tcfg.read_queue_nums, tcfg.write_queue_nums))]
        return TopicRoute(queues, self._accepted_types(topic))

    async def assignment(self, topic: str, group: str) -> tuple[list[str], tuple[MessageType, ...]]:
        self.pop.group_config(group)
        if not self._topic_config(topic).readable:
            raise GrpcError(Code.FORBIDDEN, f"topic {topic} is not readable")
        return [self.broker_name], self._accepted_types(topic)

    # ---- producing -----------------------------------------------------------------------
    def _send_command(self, topic: str, qid: int, m: Outgoing) -> RemotingCommand:
        return send_command(topic, qid, m, self.deps.config.default_topic_queue_nums)

    def _connection(self, peer: tuple[str, int]) -> SendConnection:
        conn = self._conns.get(peer)
        if conn is None:
            if len(self._conns) >= MAX_CONNECTIONS:
                self._conns.clear()
            conn = self._conns[peer] = SendConnection(peer)
        return conn

    async def _run(self, peer: tuple[str, int], cmds: list[RemotingCommand]) -> list[RemotingCommand | None]:
        """Requests as a run of their own (a recall's marker)."""
        return await _answered(self.sender.batch(self._connection(peer), cmds))

    async def send(self, topic: str, batch: list[Outgoing], peer: tuple[str, int]) -> list[Sent]:
        tcfg = self.deps.topics.get(topic)
        queue_nums = self.deps.config.default_topic_queue_nums
        cmds, headers = [], []
        for m in batch:
            qid = -1
            group = m.props.get(convert.SHARDING_KEY)
            if group and tcfg is not None and tcfg.write_queue_nums > 0:  # FIFO: one queue per message group
                qid = abs(java_hash(group)) % tcfg.write_queue_nums
            # the header the send path would parse from `send_command`'s extFields, built directly
            headers.append(send_header(topic, qid, m, queue_nums))
            cmds.append(RemotingCommand(code=RequestCode.SEND_MESSAGE, body=m.body))
        out: list[Sent] = []
        for m, resp in zip(batch, self.sender.batch_parsed(self._connection(peer), cmds, headers), strict=True):
            if resp is not None and not isinstance(resp, RemotingCommand):
                resp = await resp  # SYNC_FLUSH: answered once the group commit covers it
            if resp is None or resp.code != ResponseCode.SUCCESS:
                out.append(Sent(resp.code if resp else ResponseCode.SYSTEM_ERROR,
                                (resp.remark or "") if resp else "no response"))
                continue
            ext = resp.ext_fields
            qoff = int(ext.get("queueOffset", 0))
            tx = transaction_id(ext.get("msgId", ""), qoff) if m.props.get(K.TRAN_MSG) == "true" else ""
            out.append(Sent(ResponseCode.SUCCESS, "", self.broker_name, qoff, tx))
        return out

    async def end_transaction(self, topic: str, transaction_id: str, message_id: str, commit: bool) -> None:
        msg_id, _, table = transaction_id.rpartition("-")
        try:
            _host, _port, phys = decode_offset_msg_id(msg_id)
            table_offset = int(table)
        except (ValueError, TypeError):
            raise GrpcError(Code.INVALID_TRANSACTION_ID,
                            f"transaction id {transaction_id!r} is not one of this broker's") from None
        code, remark = await self.deps.transactions.end(topic, table_offset, phys, COMMIT if commit else ROLLBACK)
        if code != ResponseCode.SUCCESS:
            raise remoting_error(code, remark)

    async def recall(self, topic: str, broker_name: str, deliver_ms: int, message_id: str,
                     peer: tuple[str, int]) -> None:
        props = convert.recall_properties(topic, deliver_ms, message_id)
        [resp] = await self._run(peer, [self._send_command(topic, 0, Outgoing(props, 0, b"0", int(time.time() * 1000)))])
        if resp is None or resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code if resp else ResponseCode.SYSTEM_ERROR, resp.remark if resp else "no response")

    # ---- consuming -----------------------------------------------------------------------
    def _filter(self, group: str, topic: str, accept: Filter) -> MessageFilter:
        """TAG, or SQL92 when enablePropertyFilter is on (a bad one: its position)."""
        if not accept.sql:
            return TagFilter(accept.expression)
        filters = self.deps.filters
        if not filters.enabled:
            raise GrpcError(Code.ILLEGAL_FILTER_EXPRESSION, unsupported_remark(SQL92))
        sel = filters.selector(group, topic, 0, SQL92, accept.expression)
        if isinstance(sel, str):
            raise GrpcError(Code.ILLEGAL_FILTER_EXPRESSION, sel)
        return SqlFilter(sel)

    async def receive(self, group: str, topic: str, broker_name: str, batch: int, invisible_ms: int,
                      accept: Filter, deadline: float) -> list[Received]:
        # like Apache's proxy, a receive pops from all the broker's readable queues of the topic: the
        # queue a simple consumer names is only its pick of a broker from the route
        deliveries = await self.pop.receive(group, topic, -1, batch, invisible_ms,
                                            self._filter(group, topic, accept), deadline)
        host = self.deps.store_host
        return [Received(d.rec, d.handle, d.attempt, d.invisible_ms, host) for d in deliveries]

    async def ack(self, group: str, topic: str, handle: str) -> None:
        self.pop.group_config(group)
        self.pop.ack(group, topic, handle)

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        self.pop.group_config(group)
        return self.pop.change_invisible(group, topic, handle, invisible_ms)

    async def forward_to_dlq(self, group: str, topic: str, handle: str, message_id: str, max_attempts: int) -> None:
        self.pop.group_config(group)
        await self.pop.forward_to_dlq(group, topic, handle)

    # ---- offsets / pull ------------------------------------------------------------------
    async def update_offset(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int) -> None:
        self._queue_of(topic, queue_id)
        self.deps.offsets.commit(group, topic, queue_id, offset)

    async def get_offset(self, group: str, topic: str, broker_name: str, queue_id: int) -> int:
        self._queue_of(topic, queue_id)
        off = self.deps.offsets.query(group, topic, queue_id)
        if off < 0:
            raise GrpcError(Code.OFFSET_NOT_FOUND, f"group {group} has no offset for {topic}:{queue_id}")
        return off

    async def query_offset(self, topic: str, broker_name: str, queue_id: int, policy: int, at_ms: int) -> int:
        self._queue_of(topic, queue_id)
        store = self.deps.store
        if policy == pb.BEGINNING:
            return store.min_offset(topic, queue_id)
        if policy == pb.END:
            return store.max_offset(topic, queue_id)
        return store.search_offset_by_timestamp(topic, queue_id, at_ms)

    async def pull(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int, batch: int,
                   accept: Filter, deadline: float) -> Pulled:
        self.pop.group_config(group)
        self._queue_of(topic, queue_id)
        recs, next_offset, get_status = await self.pop.pull(topic, queue_id, offset, batch,
                                                            self._filter(group, topic, accept), deadline)
        bad = get_status.name if not recs and get_status in (GetStatus.OFFSET_TOO_SMALL,
                                                              GetStatus.OFFSET_OVERFLOW_BADLY) else ""
        return Pulled(recs, next_offset, self.deps.store_host, bad)

