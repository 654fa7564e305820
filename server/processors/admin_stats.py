"""Operator requests (what mqadmin and the dashboard send; AdminBrokerProcessor in RocketMQ):
GET_ALL_TOPIC_CONFIG (21), GET_BROKER_CONFIG (26), GET_ALL_CONSUMER_OFFSET (43), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_TOPIC_STATS_INFO (202), GET_CONSUMER_CONNECTION_LIST
(203), DELETE_SUBSCRIPTIONGROUP (207), GET_CONSUME_STATS (208),
QUERY_TOPIC_CONSUME_BY_WHO (300). Bodies: codec.admin_bodies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from codec import admin_bodies as AB
from codec.bodies import MessageQueue, SubscriptionData
from codec.codes import RequestCode as RC
from codec.codes import ResponseCode as RS
from codec.command import RemotingCommand
from codec.consume_queue_unit import UNIT_HEAD
from codec.errors import CodecError
from codec.fastjson import dumps, loads_lenient
from codec.record import read_store_timestamp
from remoting.dispatch import Response
from server import headers as H
from server.header_spec import Header, HeaderSpec
from server.processors import Peer, Registrar, committed, error, guarded, ok, peer_of, request_body
from storage.subscription_group import SubscriptionGroupConfig

if TYPE_CHECKING:
    from server.client_manager import ClientManager
    from server.client_manager import SubscriptionData as RuntimeSubscription
    from server.config import BrokerConfig
    from server.offsets_table import ConsumerOffsetManager
    from server.topics import TopicManager
    from storage.message_store import MessageStore
    from storage.meta_store import MetaStore
    from storage.subscription_group import SubscriptionGroupTable

log = structlog.get_logger(__name__)

class TopicHeader(Header):
    topic: str


class ConsumeStatsHeader(Header):
    consumerGroup: str
    topic: str | None


class DeleteGroupHeader(Header):
    groupName: str
    cleanOffset: bool | None


TOPIC = HeaderSpec(TopicHeader)
CONSUME_STATS = HeaderSpec(ConsumeStatsHeader)
CONSUMER_GROUP = H.CONSUMER_GROUP
DELETE_GROUP = HeaderSpec(DeleteGroupHeader)



@dataclass(frozen=True, slots=True)
class AdminStatsDeps:
    """What the mqadmin / dashboard table requests use (built by server.processor_wiring)."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupTable
    offsets: ConsumerOffsetManager
    clients: ClientManager
    meta: MetaStore  # changes answer once committed
    boot_ms: int  # the data version's timestamp


def store_time_at(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    """STORETIMESTAMP of the message at a ConsumeQueue offset, 0 if it is gone or never existed."""
    if offset < 0:
        return 0
    units = store.read_units(topic, queue_id, offset, 1)
    if not units:
        return 0
    phys, size = UNIT_HEAD.unpack_from(units, 0)
    raw = store.read_record(phys, size)
    return read_store_timestamp(raw) if raw is not None and len(raw) >= size else 0


def _subscription_json(sub: RuntimeSubscription) -> dict[str, Any]:
    return SubscriptionData(topic=sub.topic, sub_string=sub.sub_string, tags_set=list(sub.tags),
                            code_set=sorted(sub.code_set), sub_version=sub.sub_version,
                            expression_type=sub.expression_type).to_json()


def register(server: Registrar, deps: AdminStatsDeps) -> None:
    store, cfg = deps.store, deps.config
    name = cfg.broker_name

    def version() -> dict[str, Any]:
        return AB.data_version(0, deps.boot_ms)

    @guarded
    def topic_stats(conn: Peer, cmd: RemotingCommand) -> Response:
        h = TOPIC.parse(cmd.ext_fields)
        tc = deps.topics.get(h.topic)
        if tc is None:
            return error(cmd, RS.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        rows = []
        for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            lo, hi = max(0, store.min_offset(h.topic, qid)), max(0, store.max_offset(h.topic, qid))
            ts = store_time_at(store, h.topic, qid, hi - 1) if hi > 0 else 0
            rows.append(AB.TopicOffset(MessageQueue(h.topic, name, qid), lo, hi, ts))
        return ok(cmd, body=AB.encode_topic_stats(rows))

    @guarded
    def consume_stats(conn: Peer, cmd: RemotingCommand) -> Response:
        h = CONSUME_STATS.parse(cmd.ext_fields)
        topics = [h.topic] if h.topic else sorted(deps.offsets.topics_of(h.consumerGroup))
        rows = []
        for topic in topics:
            tc = deps.topics.get(topic)
            if tc is None:
                continue
            for qid in range(tc.read_queue_nums):
                hi = max(0, store.max_offset(topic, qid))
                consumed = max(0, deps.offsets.query(h.consumerGroup, topic, qid))
                rows.append(AB.OffsetWrapper(MessageQueue(topic, name, qid), hi, consumed, consumed,
                                             store_time_at(store, topic, qid, consumed - 1)))
        return ok(cmd, body=AB.encode_consume_stats(rows))

    @guarded
    def consumer_connections(conn: Peer, cmd: RemotingCommand) -> Response:
        h = CONSUMER_GROUP.parse(cmd.ext_fields)
        info = deps.clients.consumer_group(h.consumerGroup)
        if info is None or not info.channels:
            return error(cmd, RS.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumerGroup}] not online")
        conns = []
        for ch in info.channels.values():
            ip, port = peer_of(ch.conn)
            conns.append(AB.Connection(ch.client_id, f"{ip}:{port}", str(ch.language), int(ch.version)))
        subs = {t: _subscription_json(s) for t, s in info.subscriptions.items()}
        return ok(cmd, body=AB.encode_consumer_connection(AB.ConsumerConnection(
            conns, subs, info.consume_type, info.message_model, info.consume_from_where)))

    @guarded
    def topic_consumed_by(conn: Peer, cmd: RemotingCommand) -> Response:
        h = TOPIC.parse(cmd.ext_fields)
        groups = set(deps.offsets.groups_of(h.topic))
        groups.update(g for g in list(deps.clients.consumers) if deps.clients.find_subscription(g, h.topic))
        return ok(cmd, body=AB.encode_group_list(groups))

    @guarded
    async def all_topic_config(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        return ok(cmd, body=await deps.topics.table.wrapper_body())  # remembered per data version

    @guarded
    def broker_config(conn: Peer, cmd: RemotingCommand) -> Response:
        body = "".join(f"{k}={v}\n" for k, v in sorted(cfg.public_properties().items())).encode()
        return ok(cmd, {"version": dumps(version()).decode()}, body=body)

    @guarded
    async def all_subscription_groups(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        return ok(cmd, body=await deps.groups.wrapper_body())

    @guarded
    async def all_consumer_offsets(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        return ok(cmd, body=await deps.offsets.wrapper_body())

    @guarded
    def update_subscription_group(conn: Peer, cmd: RemotingCommand) -> Response:
        try:
            d = loads_lenient(request_body(cmd))
            if not isinstance(d, dict) or not d.get("groupName"):
                raise CodecError("groupName is missing")
            group = SubscriptionGroupConfig.from_json(str(d["groupName"]), d)
        except (CodecError, TypeError, ValueError) as e:  # HeaderError is a ValueError
            return error(cmd, RS.SYSTEM_ERROR, f"bad SubscriptionGroupConfig body: {e}")
        deps.groups.put(group)
        log.info("admin.subscription_group_updated", group=group.group_name)
        return committed(deps.meta, cmd)

    @guarded
    def delete_subscription_group(conn: Peer, cmd: RemotingCommand) -> Response:
        h = DELETE_GROUP.parse(cmd.ext_fields)
        deps.groups.delete(h.groupName)
        if h.cleanOffset:
            deps.offsets.remove_group(h.groupName)
        log.info("admin.subscription_group_deleted", group=h.groupName, clean_offset=bool(h.cleanOffset))
        return committed(deps.meta, cmd)

    for code, fn in ((RC.GET_ALL_TOPIC_CONFIG, all_topic_config), (RC.GET_BROKER_CONFIG, broker_config),
                     (RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, update_subscription_group),
                     (RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, all_subscription_groups),
                     (RC.GET_ALL_CONSUMER_OFFSET, all_consumer_offsets),
                     (RC.GET_TOPIC_STATS_INFO, topic_stats), (RC.GET_CONSUMER_CONNECTION_LIST, consumer_connections),
                     (RC.DELETE_SUBSCRIPTIONGROUP, delete_subscription_group), (RC.GET_CONSUME_STATS, consume_stats),
                     (RC.QUERY_TOPIC_CONSUME_BY_WHO, topic_consumed_by)):
        server.register(int(code), fn)
