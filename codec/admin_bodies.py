"""Bodies of the operator requests mqadmin and dashboards send (RocketMQ's remoting.protocol.admin
and .body classes): TopicStatsTable (GET_TOPIC_STATS_INFO), ConsumeStats (GET_CONSUME_STATS),
ConsumerConnection (GET_CONSUMER_CONNECTION_LIST), GroupList (QUERY_TOPIC_CONSUME_BY_WHO), and the
TopicConfigSerializeWrapper / SubscriptionGroupWrapper tables.

TopicStatsTable and ConsumeStats are Map<MessageQueue, ...> in Java, which fastjson writes with
JSON-object keys: `{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}}`. That is
what Java tools parse, so it is what we write; `codec.fastjson.loads_lenient` reads it back.
Fields appear in fastjson's order (sorted by name).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from codec.bodies import MessageQueue
from codec.errors import CodecError
from codec.fastjson import JsonBody, as_int, as_list, as_obj, as_str, dumps, loads_lenient

_q = json.JSONEncoder(ensure_ascii=False).encode  # a JSON string literal


def _mq_key(topic: str, broker_name: str, queue_id: int) -> str:
    return f'{{"brokerName":{_q(broker_name)},"queueId":{int(queue_id)},"topic":{_q(topic)}}}'


def _parse_mq_key(key: str) -> MessageQueue:
    try:
        d = json.loads(key)
    except ValueError:
        raise CodecError(f"offsetTable key is not a MessageQueue: {key[:80]!r}") from None
    d = as_obj(d, "MessageQueue")
    return MessageQueue(as_str(d.get("topic"), "topic"), as_str(d.get("brokerName"), "brokerName"),
                        as_int(d.get("queueId"), "queueId"))


def _float(v: Any) -> float:
    try:
        return float(v or 0.0)
    except (TypeError, ValueError):
        raise CodecError(f"not a number: {v!r}") from None


# ------------------------------------------------------------------------ Map<MessageQueue, row>

class _MQRow(Protocol):
    @property
    def mq(self) -> MessageQueue: ...


_Row = TypeVar("_Row", bound=_MQRow)


def _encode_mq_table(rows: Iterable[_MQRow], fields: tuple[tuple[str, str], ...]) -> str:
    """`{mqKey:{"jsonName":value,...},...}` with fields given in fastjson (name) order."""
    return "{" + ",".join(
        _mq_key(r.mq.topic, r.mq.broker_name, r.mq.queue_id) + ":{"
        + ",".join(f'"{name}":{int(getattr(r, attr))}' for name, attr in fields) + "}" for r in rows) + "}"


def _decode_mq_table(d: dict[str, Any], cls: type[_Row], fields: tuple[tuple[str, str], ...]) -> list[_Row]:
    out: list[_Row] = []
    factory: Callable[..., _Row] = cls  # the row dataclass's own constructor
    for k, v in as_obj(d.get("offsetTable") or {}, "offsetTable").items():
        v = as_obj(v, cls.__name__)
        out.append(factory(_parse_mq_key(k), **{attr: as_int(v.get(name), name) for name, attr in fields}))
    out.sort(key=lambda o: (o.mq.topic, o.mq.broker_name, o.mq.queue_id))
    return out


# ------------------------------------------------------------------------ TopicStatsTable

@dataclass(slots=True, frozen=True)
class TopicOffset:
    mq: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int


_TOPIC_OFFSET = (("lastUpdateTimestamp", "last_update_timestamp"), ("maxOffset", "max_offset"),
                 ("minOffset", "min_offset"))


def encode_topic_stats(offsets: Iterable[TopicOffset], topic_put_tps: float = 0.0) -> bytes:
    table = _encode_mq_table(offsets, _TOPIC_OFFSET)
    return f'{{"offsetTable":{table},"topicPutTps":{float(topic_put_tps)!r}}}'.encode()


def decode_topic_stats(body: JsonBody) -> tuple[list[TopicOffset], float]:
    d = as_obj(loads_lenient(body), "TopicStatsTable")
    return _decode_mq_table(d, TopicOffset, _TOPIC_OFFSET), _float(d.get("topicPutTps"))


# ------------------------------------------------------------------------ ConsumeStats

@dataclass(slots=True, frozen=True)
class OffsetWrapper:
    mq: MessageQueue
    broker_offset: int
    consumer_offset: int
    pull_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


_OFFSET_WRAPPER = (("brokerOffset", "broker_offset"), ("consumerOffset", "consumer_offset"),
                   ("lastTimestamp", "last_timestamp"), ("pullOffset", "pull_offset"))


def encode_consume_stats(offsets: Iterable[OffsetWrapper], consume_tps: float = 0.0) -> bytes:
    return f'{{"consumeTps":{float(consume_tps)!r},"offsetTable":{_encode_mq_table(offsets, _OFFSET_WRAPPER)}}}'.encode()


def decode_consume_stats(body: JsonBody) -> tuple[list[OffsetWrapper], float]:
    d = as_obj(loads_lenient(body), "ConsumeStats")
    return _decode_mq_table(d, OffsetWrapper, _OFFSET_WRAPPER), _float(d.get("consumeTps"))


# ------------------------------------------------------------------------ ConsumerConnection

@dataclass(slots=True, frozen=True)
class Connection:
    client_id: str
    client_addr: str
    language: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"clientAddr": self.client_addr, "clientId": self.client_id, "language": self.language,
                "version": self.version}


@dataclass(slots=True)
class ConsumerConnection:
    connections: list[Connection]
    subscriptions: dict[str, dict[str, Any]]  # topic -> SubscriptionData JSON
    consume_type: str
    message_model: str
    consume_from_where: str


def encode_consumer_connection(cc: ConsumerConnection) -> bytes:
    return dumps({"connectionSet": [c.to_json() for c in cc.connections],
                  "consumeFromWhere": cc.consume_from_where, "consumeType": cc.consume_type,
                  "messageModel": cc.message_model, "subscriptionTable": cc.subscriptions})


def decode_consumer_connection(body: JsonBody) -> ConsumerConnection:
    d = as_obj(loads_lenient(body), "ConsumerConnection")
    conns = [Connection(as_str(c.get("clientId"), "clientId"), as_str(c.get("clientAddr"), "clientAddr"),
                        as_str(c.get("language"), "language"), as_int(c.get("version"), "version"))
             for c in (as_obj(x, "Connection") for x in as_list(d, "connectionSet"))]
    subs = as_obj(d.get("subscriptionTable") or {}, "subscriptionTable")
    return ConsumerConnection(sorted(conns, key=lambda c: c.client_id), dict(subs),
                              as_str(d.get("consumeType"), "consumeType"),
                              as_str(d.get("messageModel"), "messageModel"),
                              as_str(d.get("consumeFromWhere"), "consumeFromWhere"))


# ------------------------------------------------------------------------ lists and tables

def encode_group_list(groups: Iterable[str]) -> bytes:
    return dumps({"groupList": sorted(set(groups))})


def decode_group_list(body: JsonBody) -> list[str]:
    return sorted(as_str(g, "group") for g in as_list(as_obj(loads_lenient(body), "GroupList"), "groupList"))


def data_version(counter: int, timestamp_ms: int) -> dict[str, int]:
    return {"counter": int(counter), "stateVersion": 0, "timestamp": int(timestamp_ms)}


def encode_topic_config_wrapper(table: Mapping[str, dict[str, Any]], version: dict[str, int]) -> bytes:
    """TopicConfigSerializeWrapper: topicConfigTable (name -> TopicConfig JSON) and dataVersion."""
    return dumps({"dataVersion": version, "topicConfigTable": dict(table)})


def encode_subscription_group_wrapper(table: Mapping[str, dict[str, Any]], version: dict[str, int]) -> bytes:
    """SubscriptionGroupWrapper: subscriptionGroupTable (name -> SubscriptionGroupConfig JSON)."""
    return dumps({"dataVersion": version, "forbiddenTable": {}, "subscriptionGroupTable": dict(table)})


def decode_table(body: JsonBody, key: str) -> dict[str, dict[str, Any]]:
    """The name -> config map of a *Wrapper body (`topicConfigTable` or `subscriptionGroupTable`)."""
    t = as_obj(loads_lenient(body), "wrapper").get(key) or {}
    return {str(k): as_obj(v, key) for k, v in as_obj(t, key).items()}


# ------------------------------------------------------------------------ operator tools (issue 15)

def encode_producer_connection(connections: Iterable[Connection]) -> bytes:
    """ProducerConnection (GET_PRODUCER_CONNECTION_LIST): {"connectionSet":[Connection...]}."""
    return dumps({"connectionSet": [c.to_json() for c in connections]})


def decode_producer_connection(body: JsonBody) -> list[Connection]:
    d = as_obj(loads_lenient(body), "ProducerConnection")
    return sorted((Connection(as_str(c.get("clientId"), "clientId"), as_str(c.get("clientAddr"), "clientAddr"),
                              as_str(c.get("language"), "language"), as_int(c.get("version"), "version"))
                   for c in (as_obj(x, "Connection") for x in as_list(d, "connectionSet"))),
                  key=lambda c: c.client_id)


def encode_consume_stats_list(broker_addr: str, groups: Iterable[tuple[str, list[bytes]]], total_diff: int) -> bytes:
    """ConsumeStatsList (GET_BROKER_CONSUME_STATS): `consumeStatsList` is a list of one-entry maps
    group -> [ConsumeStats], each ConsumeStats already encoded by `encode_consume_stats`."""
    items = ",".join("{" + _q(g) + ":[" + ",".join(s.decode() for s in stats) + "]}" for g, stats in groups)
    return (f'{{"brokerAddr":{_q(broker_addr)},"consumeStatsList":[{items}],"totalDiff":{int(total_diff)}}}'
            ).encode()


def decode_consume_stats_list(body: JsonBody) -> dict[str, list[tuple[list[OffsetWrapper], float]]]:
    d = as_obj(loads_lenient(body), "ConsumeStatsList")
    out: dict[str, list[tuple[list[OffsetWrapper], float]]] = {}
    for one in as_list(d, "consumeStatsList"):
        for group, stats in as_obj(one, "consumeStatsList entry").items():
            out[str(group)] = [(_decode_mq_table(as_obj(s, "ConsumeStats"), OffsetWrapper, _OFFSET_WRAPPER),
                                _float(as_obj(s, "ConsumeStats").get("consumeTps")))
                               for s in (stats or [])]
    return out


def encode_reset_offset(offsets: Mapping[MessageQueue, int]) -> bytes:
    """ResetOffsetBody: {"offsetTable":{MessageQueue:offset}} (fastjson object keys; Java clients, mqadmin)."""
    rows = sorted(offsets.items(), key=lambda kv: (kv[0].topic, kv[0].broker_name, kv[0].queue_id))
    table = ",".join(_mq_key(mq.topic, mq.broker_name, mq.queue_id) + f":{int(off)}" for mq, off in rows)
    return ('{"offsetTable":{' + table + "}}").encode()


def encode_reset_offset_for_c(offsets: Mapping[MessageQueue, int]) -> bytes:
    """ResetOffsetBodyForC: {"offsetTable":[{brokerName, offset, queueId, topic}]} (the C++ client's form)."""
    rows = sorted(offsets.items(), key=lambda kv: (kv[0].topic, kv[0].broker_name, kv[0].queue_id))
    return dumps({"offsetTable": [{"brokerName": mq.broker_name, "offset": int(off), "queueId": mq.queue_id,
                                   "topic": mq.topic} for mq, off in rows]})


def decode_reset_offset(body: JsonBody) -> dict[MessageQueue, int]:
    d = as_obj(loads_lenient(body), "ResetOffsetBody")
    table = d.get("offsetTable") or {}
    if isinstance(table, list):
        return {MessageQueue(as_str(r.get("topic"), "topic"), as_str(r.get("brokerName"), "brokerName"),
                             as_int(r.get("queueId"), "queueId")): as_int(r.get("offset"), "offset")
                for r in (as_obj(x, "MessageQueueForC") for x in table)}
    return {_parse_mq_key(k) if isinstance(k, str) else MessageQueue("", "", 0): as_int(v, "offset")
            for k, v in as_obj(table, "offsetTable").items()}


@dataclass(slots=True, frozen=True)
class ConsumeQueueData:
    physic_offset: int
    physic_size: int
    tags_code: int

    def to_json(self) -> dict[str, Any]:
        return {"eval": False, "physicOffset": self.physic_offset, "physicSize": self.physic_size,
                "tagsCode": self.tags_code}


def encode_query_consume_queue(min_index: int, max_index: int, units: Iterable[ConsumeQueueData],
                               subscription: dict[str, Any] | None, filter_data: str | None) -> bytes:
    """QueryConsumeQueueResponseBody (QUERY_CONSUME_QUEUE)."""
    d: dict[str, Any] = {"maxQueueIndex": int(max_index), "minQueueIndex": int(min_index),
                         "queueData": [u.to_json() for u in units]}
    if subscription is not None:
        d["subscriptionData"] = subscription
    if filter_data is not None:
        d["filterData"] = filter_data
    return dumps(d)
