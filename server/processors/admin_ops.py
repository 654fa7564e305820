"""The rest of what mqadmin 4.9.7 sends to one broker (AdminBrokerProcessor / the name server in RocketMQ):

UPDATE_BROKER_CONFIG (25), GET_PRODUCER_CONNECTION_LIST (204), DELETE_TOPIC_IN_BROKER (215),
DELETE_TOPIC_IN_NAMESRV (216), INVOKE_BROKER_TO_RESET_OFFSET (222, pushes RESET_CONSUMER_CLIENT_OFFSET
220 to the group's online consumers), GET_CONSUMER_RUNNING_INFO (307, relayed to the client),
CONSUME_MESSAGE_DIRECTLY (309, the stored message relayed to the client),
VIEW_BROKER_STATS_DATA (315), GET_BROKER_CONSUME_STATS (317), GET_NAMESRV_CONFIG (319),
QUERY_CONSUME_QUEUE (321). Bodies: codec.admin_bodies.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec import admin_bodies as AB
from codec.bodies import MessageQueue
from codec.codes import RequestCode as RC
from codec.codes import ResponseCode as RS
from codec.command import RemotingCommand
from codec.consume_queue_unit import UNIT, UNIT_SIZE
from codec.errors import CodecError
from codec.fastjson import dumps
from codec.msgid import decode_offset_msg_id
from remoting.dispatch import Response
from remoting.errors import RemotingError
from server import headers as H
from server.config import parse_properties
from server.header_spec import Header, HeaderSpec, Long
from server.observability.broker_stats import GROUP_GET_NUMS
from server.processors import Peer, Registrar, error, guarded, ok, peer_of
from server.processors.admin_stats import _subscription_json, store_time_at
from server.topics import is_system_topic, topic_error

if TYPE_CHECKING:
    from server.client_manager import ClientManager
    from server.config import BrokerConfig
    from server.observability.broker_stats import BrokerStats
    from server.offsets_table import ConsumerOffsetManager
    from server.topics import TopicManager
    from storage.message_store import MessageStore
    from storage.subscription_group import SubscriptionGroupTable

log = structlog.get_logger(__name__)

class ProducerConnectionHeader(Header):
    producerGroup: str
    topic: str | None


class ResetOffsetHeader(Header):
    topic: str
    group: str
    timestamp: Long
    isForce: bool | None


class RunningInfoHeader(Header):
    consumerGroup: str
    clientId: str
    jstackEnable: bool | None


class ConsumeDirectlyHeader(Header):
    consumerGroup: str
    clientId: str
    msgId: str
    brokerName: str | None


class StatsDataHeader(Header):
    statsName: str
    statsKey: str


class BrokerConsumeStatsHeader(Header):
    isOrder: bool | None


class QueryConsumeQueueHeader(Header):
    topic: str
    queueId: int
    index: Long
    count: int
    consumerGroup: str | None


PRODUCER_CONN = HeaderSpec(ProducerConnectionHeader)
DELETE_TOPIC = H.DELETE_TOPIC_IN_NAMESRV  # DeleteTopicRequestHeader: the same two fields
RESET_OFFSET = HeaderSpec(ResetOffsetHeader)
RUNNING_INFO = HeaderSpec(RunningInfoHeader)
CONSUME_DIRECTLY = HeaderSpec(ConsumeDirectlyHeader)
STATS_DATA = HeaderSpec(StatsDataHeader)
BROKER_CONSUME = HeaderSpec(BrokerConsumeStatsHeader)
QUERY_CQ = HeaderSpec(QueryConsumeQueueHeader)

# broker.conf keys an operator may not change at run time: RocketMQ's black list (paths), plus what
# only takes effect at start here (listeners, identity, file layout)
RESTART_ONLY_KEYS = frozenset({
    "storePathRootDir", "listenPort", "listenHost", "brokerName", "brokerClusterName", "brokerIP1", "brokerId",
    "mappedFileSizeCommitLog", "maxHashSlotNum", "maxIndexNum", "messageDelayLevel", "aclFile", "tlsEnable",
    "tlsServerCertPath", "tlsServerKeyPath", "tlsServerMode", "metricsPort", "metricsHost", "flushDiskType",
    "timerWheelEnable", "timerPrecisionMs", "brokerConfigPath", "rocketmqHome", "kvConfigPath",
})
RELAY_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class AdminOpsDeps:
    """What the rest of mqadmin's requests use (built by server.processor_wiring)."""

    config: BrokerConfig  # UPDATE_BROKER_CONFIG changes it in place
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupTable
    offsets: ConsumerOffsetManager
    clients: ClientManager
    stats: BrokerStats  # VIEW_BROKER_STATS_DATA, consume TPS
    delete_topic: Callable[[str], bool]  # DELETE_TOPIC_IN_BROKER: config, offsets, queues, stats


def register(server: Registrar, deps: AdminOpsDeps) -> None:
    store, cfg = deps.store, deps.config

    @guarded
    def update_broker_config(conn: Peer, cmd: RemotingCommand) -> Response:
        body = cmd.body_bytes()
        try:
            props = parse_properties(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            return error(cmd, RS.SYSTEM_ERROR, f"string2Properties error: {e}")
        blocked = sorted(k for k in props if k in RESTART_ONLY_KEYS)
        if blocked:
            return error(cmd, RS.NO_PERMISSION, f"Can not update config in black list: {', '.join(blocked)} "
                                                "(takes effect only at start; edit broker.conf and restart)")
        known = type(cfg).key_map()
        unknown = sorted(k for k in props if k not in known)
        if unknown:
            return error(cmd, RS.SYSTEM_ERROR, f"unknown broker config key: {', '.join(unknown)}")
        try:
            trial = type(cfg).from_mapping(cfg.to_properties(), source="updateBrokerConfig")
            trial.apply(props, source="updateBrokerConfig")
        except ValueError as e:
            return error(cmd, RS.SYSTEM_ERROR, str(e))
        cfg.apply(props, source="updateBrokerConfig")
        ip, port = peer_of(conn)
        log.info("admin.broker_config_updated", remote=f"{ip}:{port}", changed=props)
        return ok(cmd)

    @guarded
    def namesrv_config(conn: Peer, cmd: RemotingCommand) -> Response:
        body = "".join(f"{k}={v}\n" for k, v in sorted(cfg.to_properties().items())).encode()
        return ok(cmd, body=body)

    @guarded
    def producer_connections(conn: Peer, cmd: RemotingCommand) -> Response:
        h = PRODUCER_CONN.parse(cmd.ext_fields)
        chans = deps.clients.producers.get(h.producerGroup)
        if not chans:
            return error(cmd, RS.SYSTEM_ERROR, f"the producer group[{h.producerGroup}] not exist")
        conns = []
        for ch in chans.values():
            ip, port = peer_of(ch.conn)
            conns.append(AB.Connection(ch.client_id, f"{ip}:{port}", str(ch.language), int(ch.version)))
        return ok(cmd, body=AB.encode_producer_connection(conns))

    @guarded
    def delete_topic(conn: Peer, cmd: RemotingCommand) -> Response:
        h = DELETE_TOPIC.parse(cmd.ext_fields)
        problem = topic_error(h.topic)
        if problem:
            return error(cmd, RS.SYSTEM_ERROR, problem)
        if is_system_topic(h.topic):
            return error(cmd, RS.SYSTEM_ERROR, f"The topic[{h.topic}] is conflict with system topic.")
        existed = deps.delete_topic(h.topic)
        ip, port = peer_of(conn)
        log.info("admin.topic_deleted", topic=h.topic, existed=existed, remote=f"{ip}:{port}")
        return ok(cmd)

    @guarded
    def delete_topic_in_namesrv(conn: Peer, cmd: RemotingCommand) -> Response:
        # routes come from this process's own topic table: DELETE_TOPIC_IN_BROKER already removed it
        DELETE_TOPIC.parse(cmd.ext_fields)
        return ok(cmd)

    @guarded
    def reset_offset(conn: Peer, cmd: RemotingCommand) -> Response:
        h = RESET_OFFSET.parse(cmd.ext_fields)
        tc = deps.topics.get(h.topic)
        if tc is None:
            return error(cmd, RS.SYSTEM_ERROR,
                         f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}")
        offsets: dict[MessageQueue, int] = {}
        for qid in range(tc.write_queue_nums):
            # a queue the group never committed counts as 0 (RocketMQ refuses the whole reset instead)
            current = max(0, deps.offsets.query(h.group, h.topic, qid))
            if h.timestamp == -1:
                target = max(0, store.max_offset(h.topic, qid))
            else:
                target = max(0, store.search_offset_by_timestamp(h.topic, qid, h.timestamp))
            offsets[MessageQueue(h.topic, cfg.broker_name, qid)] = \
                target if (h.isForce or target < current) else current
        info = deps.clients.consumer_group(h.group)
        if info is None or not info.channels:
            return error(cmd, RS.CONSUMER_NOT_ONLINE, f"Consumer not online, so can not reset offset, "
                                                      f"Group: {h.group} Topic: {h.topic} Timestamp: {h.timestamp}")
        fields = {"topic": h.topic, "group": h.group, "timestamp": str(h.timestamp),
                  "isForce": "true" if h.isForce else "false"}
        java_body = AB.encode_reset_offset(offsets)
        c_body = None
        for ch in list(info.channels.values()):
            body = java_body
            if str(ch.language).upper() in ("CPP", "1"):
                if c_body is None:
                    c_body = AB.encode_reset_offset_for_c(offsets)
                body = c_body
            push = RemotingCommand.request(int(RC.RESET_CONSUMER_CLIENT_OFFSET), dict(fields), body)
            try:
                ch.conn.invoke_oneway(push)
            except Exception as e:  # a closing channel: the others still get it
                log.info("admin.reset_offset_push_failed", group=h.group, client_id=ch.client_id, error=repr(e))
        for mq, off in offsets.items():  # the broker's table too: a client that ignores 220 still moves
            deps.offsets.commit(h.group, h.topic, mq.queue_id, off)
        ip, port = peer_of(conn)
        log.info("admin.offset_reset", group=h.group, topic=h.topic, timestamp=h.timestamp, force=bool(h.isForce),
                 consumers=len(info.channels), remote=f"{ip}:{port}")
        return ok(cmd, body=java_body)

    async def relay_to_consumer(cmd: RemotingCommand, group: str, client_id: str,
                                relay: RemotingCommand) -> RemotingCommand | None:
        """Relay a request to one online consumer (a remoting connection, or a gRPC client's
        TelemetryChannel) and answer with its response."""
        info = deps.clients.consumer_group(group)
        ch = next((c for c in (info.channels.values() if info else ()) if c.client_id == client_id), None)
        if ch is None:
            return error(cmd, RS.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        try:
            answer = await ch.conn.invoke(relay, RELAY_TIMEOUT_S)
        except TimeoutError as e:
            return error(cmd, RS.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {e}")
        except (RemotingError, OSError) as e:
            return error(cmd, RS.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {e!r}")
        return cmd.response(code=answer.code, remark=answer.remark, ext_fields=dict(answer.ext_fields or {}),
                            body=answer.body)

    @guarded
    async def consumer_running_info(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        h = RUNNING_INFO.parse(cmd.ext_fields)
        relay = RemotingCommand.request(int(RC.GET_CONSUMER_RUNNING_INFO), dict(cmd.ext_fields or {}),
                                        cmd.body or b"")
        return await relay_to_consumer(cmd, h.consumerGroup, h.clientId, relay)

    @guarded
    async def consume_message_directly(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        h = CONSUME_DIRECTLY.parse(cmd.ext_fields)
        try:
            offset = decode_offset_msg_id(h.msgId)[2]
            rec = store.read_record(offset)
        except (CodecError, ValueError, IndexError, OSError):
            rec = None
        if not rec:
            return error(cmd, RS.SYSTEM_ERROR, f"can not find message by the msgId {h.msgId}")
        relay = RemotingCommand.request(int(RC.CONSUME_MESSAGE_DIRECTLY), dict(cmd.ext_fields or {}), bytes(rec))
        return await relay_to_consumer(cmd, h.consumerGroup, h.clientId, relay)

    @guarded
    def stats_data(conn: Peer, cmd: RemotingCommand) -> Response:
        h = STATS_DATA.parse(cmd.ext_fields)
        d = deps.stats.stats_data(h.statsName, h.statsKey, int(time.time() * 1000))
        if d is None:
            return error(cmd, RS.SYSTEM_ERROR, f"The stats <{h.statsName}> <{h.statsKey}> not exist")
        return ok(cmd, body=dumps(d))

    @guarded
    def broker_consume_stats(conn: Peer, cmd: RemotingCommand) -> Response:
        h = BROKER_CONSUME.parse(cmd.ext_fields)
        now = int(time.time() * 1000)
        groups = sorted(set(deps.groups.table) | {k.partition("@")[2] for k in deps.offsets.table})
        out, total = [], 0
        for group in groups:
            stats = []
            for topic in sorted(deps.offsets.topics_of(group)):
                tc = deps.topics.get(topic)
                if tc is None or (h.isOrder and not tc.order):
                    continue
                info = deps.clients.consumer_group(group)
                if info is not None and info.subscriptions and topic not in info.subscriptions:
                    continue
                rows = []
                for qid in range(tc.write_queue_nums):
                    hi = max(0, store.max_offset(topic, qid))
                    consumed = max(0, deps.offsets.query(group, topic, qid))
                    rows.append(AB.OffsetWrapper(MessageQueue(topic, cfg.broker_name, qid), hi, consumed, consumed,
                                                 store_time_at(store, topic, qid, consumed - 1)))
                    total += max(0, hi - consumed)
                tps = deps.stats.minute_tps(GROUP_GET_NUMS, f"{topic}@{group}", now)
                stats.append(AB.encode_consume_stats(rows, tps))
            out.append((group, stats))
        return ok(cmd, body=AB.encode_consume_stats_list(cfg.broker_addr, out, total))

    @guarded
    def query_consume_queue(conn: Peer, cmd: RemotingCommand) -> Response:
        h = QUERY_CQ.parse(cmd.ext_fields)
        lo, hi = store.min_offset(h.topic, h.queueId), store.max_offset(h.topic, h.queueId)
        if store.consume_queue(h.topic, h.queueId) is None:
            return error(cmd, RS.SYSTEM_ERROR, f"{h.queueId}@{h.topic} is not exist!")
        sub, filter_data = None, None
        if h.consumerGroup:
            s = deps.clients.find_subscription(h.consumerGroup, h.topic)
            if s is None:
                filter_data = f"{h.consumerGroup}@{h.topic} is not online!"
            else:
                sub = _subscription_json(s)
        count = max(0, min(h.count, 1000))
        raw = store.read_units(h.topic, h.queueId, h.index, count) if lo <= h.index < hi and count else None
        if not raw:
            resp = ok(cmd, body=AB.encode_query_consume_queue(lo, hi, [], sub, filter_data))
            if resp is not None:  # None: a oneway request
                resp.remark = f"Index {h.index} of {h.queueId}@{h.topic} is not exist!"
            return resp
        units = [AB.ConsumeQueueData(*u) for u in UNIT.iter_unpack(raw[:len(raw) - len(raw) % UNIT_SIZE])]
        return ok(cmd, body=AB.encode_query_consume_queue(lo, hi, units, sub, filter_data))

    for code, fn in ((RC.UPDATE_BROKER_CONFIG, update_broker_config),
                     (RC.GET_PRODUCER_CONNECTION_LIST, producer_connections),
                     (RC.DELETE_TOPIC_IN_BROKER, delete_topic), (RC.DELETE_TOPIC_IN_NAMESRV, delete_topic_in_namesrv),
                     (RC.INVOKE_BROKER_TO_RESET_OFFSET, reset_offset),
                     (RC.GET_CONSUMER_RUNNING_INFO, consumer_running_info),
                     (RC.CONSUME_MESSAGE_DIRECTLY, consume_message_directly),
                     (RC.VIEW_BROKER_STATS_DATA, stats_data), (RC.GET_BROKER_CONSUME_STATS, broker_consume_stats),
                     (RC.GET_NAMESRV_CONFIG, namesrv_config), (RC.QUERY_CONSUME_QUEUE, query_consume_queue)):
        server.register(int(code), fn)

