"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), LOCK/UNLOCK_BATCH_MQ (41/42).

Heartbeat bodies are parsed leniently (Java names, C++ ordinals and string subVersions, ali-ons
numbers; absent arrays are empty). Each consumer group gets its subscription group and its
`%RETRY%<group>` topic on first sight; membership changes notify the group (client_manager).
"""

from __future__ import annotations

import structlog

from server import headers as H
from server.client_manager import CONSUME_FROM, CONSUME_TYPES, MESSAGE_MODELS, SubscriptionData, enum_name
from server.processors import error, guarded, json_body, ok, parse_json_body
from server.topics import RETRY_PREFIX

log = structlog.get_logger(__name__)

HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP = 34, 35, 38
LOCK_BATCH_MQ, UNLOCK_BATCH_MQ = 41, 42
SYSTEM_ERROR = 1


def _as_int(v, default: int = 0) -> int:
    if v is None or v == "" or isinstance(v, bool):
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return int(float(v))
        except (TypeError, ValueError):
            return default


def parse_subscriptions(items, java_hash) -> list[SubscriptionData]:
    subs = []
    for s in items or ():
        if not isinstance(s, dict) or not s.get("topic"):
            continue
        sub_string = str(s.get("subString") or "*").strip()
        expr = str(s.get("expressionType") or "TAG")
        if sub_string in ("", "*"):
            tags: tuple[str, ...] = ()
        elif s.get("tagsSet"):
            tags = tuple(str(t).strip() for t in s["tagsSet"] if str(t).strip())
        else:
            tags = tuple(t.strip() for t in sub_string.split("||") if t.strip())
        codes = frozenset(java_hash(t) for t in tags) if expr == "TAG" else frozenset()
        subs.append(SubscriptionData(str(s["topic"]), sub_string if tags or expr != "TAG" else "*", tags,
                                     codes, _as_int(s.get("subVersion")), expr))
    return subs


def _mqs(body) -> list[tuple[str, str, int]]:
    out = []
    for mq in body.get("mqSet") or ():
        if isinstance(mq, dict) and mq.get("topic") is not None:
            out.append((str(mq["topic"]), str(mq.get("brokerName") or ""), _as_int(mq.get("queueId"))))
    return out


def _mq_json(mq) -> dict:
    return {"brokerName": mq[1], "queueId": mq[2], "topic": mq[0]}


def register(server, broker) -> None:
    from codec.tags import java_hash

    clients = broker.clients

    @guarded
    def heart_beat(conn, cmd):
        data = parse_json_body(cmd)
        if not isinstance(data, dict):
            return error(cmd, SYSTEM_ERROR, "heartbeat body is not a JSON object")
        client_id = str(data.get("clientID") or "")
        language = str(cmd.language or "JAVA")
        version = _as_int(cmd.version)
        for cd in data.get("consumerDataSet") or ():
            if not isinstance(cd, dict) or not cd.get("groupName"):
                continue
            group = str(cd["groupName"])
            gcfg = broker.groups.find(group)
            if gcfg is not None:
                broker.topics.create_in_send_back(RETRY_PREFIX + group, gcfg.retry_queue_nums, 6)
            clients.register_consumer(
                group, conn, client_id, language, version,
                consume_type=enum_name(cd.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                message_model=enum_name(cd.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                consume_from_where=enum_name(cd.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"),
                subscriptions=parse_subscriptions(cd.get("subscriptionDataSet"), java_hash))
        for pd in data.get("producerDataSet") or ():
            if isinstance(pd, dict) and pd.get("groupName"):
                clients.register_producer(str(pd["groupName"]), conn, client_id, language, version)
        return ok(cmd)

    @guarded
    def unregister_client(conn, cmd):
        h = H.UNREGISTER_CLIENT.parse(cmd.ext_fields)
        if h.producerGroup:
            clients.unregister_producer(h.producerGroup, conn, h.clientID)
        if h.consumerGroup:
            clients.unregister_consumer(h.consumerGroup, conn, h.clientID)
        return ok(cmd)

    @guarded
    def consumer_list(conn, cmd):
        h = H.CONSUMER_GROUP.parse(cmd.ext_fields)
        ids = clients.consumer_ids(h.consumerGroup)
        if not ids:
            return error(cmd, SYSTEM_ERROR, f"no consumer for this group, {h.consumerGroup}")
        return ok(cmd, body=json_body({"consumerIdList": ids}))

    @guarded
    def lock_batch(conn, cmd):
        body = parse_json_body(cmd)
        group, client_id = str(body.get("consumerGroup") or ""), str(body.get("clientId") or "")
        locked = broker.locks.try_lock_batch(group, _mqs(body), client_id)
        return ok(cmd, body=json_body({"lockOKMQSet": [_mq_json(m) for m in locked]}))

    @guarded
    def unlock_batch(conn, cmd):
        body = parse_json_body(cmd)
        broker.locks.unlock_batch(str(body.get("consumerGroup") or ""), _mqs(body), str(body.get("clientId") or ""))
        return ok(cmd)

    server.register(HEART_BEAT, heart_beat)
    server.register(UNREGISTER_CLIENT, unregister_client)
    server.register(GET_CONSUMER_LIST_BY_GROUP, consumer_list)
    server.register(LOCK_BATCH_MQ, lock_batch)
    server.register(UNLOCK_BATCH_MQ, unlock_batch)
