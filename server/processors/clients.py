"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), LOCK/UNLOCK_BATCH_MQ (41/42).

Heartbeat bodies are parsed by codec.bodies.parse_heartbeat (Java names, C++ ordinals and string
subVersions, ali-ons numbers; absent arrays are empty; a malformed body gets SYSTEM_ERROR with a remark). Each consumer group gets its subscription group and its
`%RETRY%<group>` topic on first sight; membership changes notify the group (client_manager).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from codec.bodies import (
    MessageQueue,
    decode_lock_batch_request,
    encode_consumer_list,
    encode_lock_batch_response,
    parse_heartbeat,
)
from codec.bodies import SubscriptionData as BodySubscription
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from remoting.dispatch import Response
from server import headers as H
from server.client_manager import SubscriptionData
from server.header_spec import HeaderError
from server.processors import Peer, Registrar, error, guarded, ok, request_body
from server.topics import RETRY_PREFIX

if TYPE_CHECKING:
    from server.client_manager import ClientConn, ClientManager
    from server.rebalance_lock import RebalanceLockManager
    from server.topics import TopicManager
    from storage.subscription_group import SubscriptionGroupTable

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ClientsDeps:
    """What the client requests use (built by server.processor_wiring)."""

    clients: ClientManager
    groups: SubscriptionGroupTable
    topics: TopicManager  # a consumer group's %RETRY% topic on first sight
    locks: RebalanceLockManager  # orderly consumers' queue locks


# a parsed heartbeat: (client id, [(group, consumeType, messageModel, consumeFromWhere, subscriptions)],
# producer groups)
HeartbeatPlan = tuple[str, list[tuple[str, str, str, str, list[SubscriptionData]]], list[str]]


def _as_int(v: Any, default: int = 0) -> int:
    if v is None or v == "" or isinstance(v, bool):
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return int(float(v))
        except (TypeError, ValueError):
            return default


def runtime_subscription(sd: BodySubscription, java_hash: Callable[[str], int]) -> SubscriptionData | None:
    """The broker's matching form of a heartbeat subscription: trimmed tags (tagsSet, else the
    `||`-split expression) and their hash codes computed here rather than trusted from the client."""
    if not sd.topic:
        return None
    expr = sd.expression_type or "TAG"
    sub_string = (sd.sub_string or "*").strip()
    tags: tuple[str, ...] = ()
    if sub_string not in ("", "*"):
        tags = tuple(t.strip() for t in sd.tags_set if t.strip()) or tuple(
            t.strip() for t in sub_string.split("||") if t.strip())
    codes = frozenset(java_hash(t) for t in tags) if expr == "TAG" else frozenset()
    return SubscriptionData(sd.topic, sub_string if tags or expr != "TAG" else "*", tags, codes, sd.sub_version,
                            expr)


def _lock_request(cmd: RemotingCommand) -> tuple[str, str, list[tuple[str, str, int]]]:
    try:
        req = decode_lock_batch_request(request_body(cmd))
    except CodecError as e:
        raise HeaderError(f"bad lock batch body: {e}") from None
    return req.consumer_group, req.client_id, [(m.topic, m.broker_name, m.queue_id) for m in req.mq_set]


def register(server: Registrar, deps: ClientsDeps) -> None:
    from codec.tags import java_hash

    clients = deps.clients

    # the last heartbeat of each live connection, parsed: clients repeat the same body every 30 s, and
    # parsing one with 10,000 subscriptions costs ~100 ms of loop time (one entry per connection)
    last_heartbeat: weakref.WeakKeyDictionary[ClientConn, tuple[bytes, HeartbeatPlan]] = weakref.WeakKeyDictionary()

    def heartbeat_plan(body: bytes) -> HeartbeatPlan:
        hb = parse_heartbeat(body)
        consumers = [(cd.group_name, cd.consume_type, cd.message_model, cd.consume_from_where,
                      [s for s in (runtime_subscription(sd, java_hash) for sd in cd.subscriptions) if s])
                     for cd in hb.consumers if cd.group_name]
        return hb.client_id, consumers, [pd.group_name for pd in hb.producers if pd.group_name]

    @guarded
    def heart_beat(conn: ClientConn, cmd: RemotingCommand) -> Response:
        body = request_body(cmd)
        cached = last_heartbeat.get(conn)
        if cached is not None and cached[0] == body:
            plan = cached[1]
        else:
            try:
                plan = heartbeat_plan(body)
            except CodecError as e:
                return error(cmd, ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {e}")
            last_heartbeat[conn] = (body, plan)
        client_id, consumers, producers = plan
        language = str(cmd.language or "JAVA")
        version = _as_int(cmd.version)
        for group, consume_type, message_model, consume_from_where, subscriptions in consumers:
            gcfg = deps.groups.find(group)
            if gcfg is not None:
                deps.topics.create_in_send_back(RETRY_PREFIX + group, gcfg.retry_queue_nums, 6)
            clients.register_consumer(
                group, conn, client_id, language, version, consume_type=consume_type,
                message_model=message_model, consume_from_where=consume_from_where, subscriptions=subscriptions)
        for group in producers:
            clients.register_producer(group, conn, client_id, language, version)
        return ok(cmd)

    @guarded
    def unregister_client(conn: ClientConn, cmd: RemotingCommand) -> Response:
        h = H.UNREGISTER_CLIENT.parse(cmd.ext_fields)
        if h.producerGroup:
            clients.unregister_producer(h.producerGroup, conn, h.clientID)
        if h.consumerGroup:
            clients.unregister_consumer(h.consumerGroup, conn, h.clientID)
        return ok(cmd)

    @guarded
    def consumer_list(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.CONSUMER_GROUP.parse(cmd.ext_fields)
        ids = clients.consumer_ids(h.consumerGroup)
        if not ids:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumerGroup}")
        return ok(cmd, body=encode_consumer_list(ids))

    @guarded
    def lock_batch(conn: Peer, cmd: RemotingCommand) -> Response:
        group, client_id, mqs = _lock_request(cmd)
        locked = deps.locks.try_lock_batch(group, mqs, client_id)
        return ok(cmd, body=encode_lock_batch_response([MessageQueue(*m) for m in locked]))

    @guarded
    def unlock_batch(conn: Peer, cmd: RemotingCommand) -> Response:
        group, client_id, mqs = _lock_request(cmd)
        deps.locks.unlock_batch(group, mqs, client_id)
        return ok(cmd)

    server.register(RequestCode.HEART_BEAT, heart_beat)
    server.register(RequestCode.UNREGISTER_CLIENT, unregister_client)
    server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumer_list)
    server.register(RequestCode.LOCK_BATCH_MQ, lock_batch)
    server.register(RequestCode.UNLOCK_BATCH_MQ, unlock_batch)
