"""JSON request/response bodies (remoting-protocol.md §7): topic routes, heartbeats, consumer lists,
lock/unlock batches, KVTable and topic lists.

Emitting follows fastjson: compact, keys sorted, numbers where Java has numbers. Parsing is lenient
because three client families disagree (C++ sends enum ordinals, string subVersions and omits empty
arrays; fastjson may write `{0:"addr"}` with unquoted integer keys). Every parser raises only CodecError.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from codec.errors import CodecError
from codec.fastjson import JsonBody, as_bool, as_enum, as_int, as_list, as_obj, as_str, dumps
from codec.tags import java_hash

SUB_ALL = "*"
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")  # CONSUME_POP: a 5.x proxy's heartbeat
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                      "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                      "CONSUME_FROM_TIMESTAMP")

# ------------------------------------------------------------------------ topic route

@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": dict(self.broker_addrs), "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"brokerDatas": [b.to_json() for b in self.broker_datas],
                             "filterServerTable": dict(self.filter_server_table),
                             "queueDatas": [q.to_json() for q in self.queue_datas]}
        if self.order_topic_conf is not None:
            d["orderTopicConf"] = self.order_topic_conf
        return d


def encode_topic_route(route: TopicRouteData, quoted_keys: bool = True) -> bytes:
    """TopicRouteData JSON; `quoted_keys=False` writes brokerAddrs as fastjson does for old clients."""
    return dumps(route.to_json(), bare_int_keys=not quoted_keys)


def decode_topic_route(body: JsonBody) -> TopicRouteData:
    d = as_obj(body, "TopicRouteData")
    route = TopicRouteData(order_topic_conf=d.get("orderTopicConf") if isinstance(d.get("orderTopicConf"), str)
                           else None)
    for q in as_list(d, "queueDatas"):
        q = as_obj(q, "QueueData")
        route.queue_datas.append(QueueData(
            broker_name=as_str(q.get("brokerName"), "brokerName"),
            read_queue_nums=as_int(q.get("readQueueNums"), "readQueueNums"),
            write_queue_nums=as_int(q.get("writeQueueNums"), "writeQueueNums"),
            perm=as_int(q.get("perm"), "perm"), topic_sys_flag=as_int(q.get("topicSysFlag"), "topicSysFlag")))
    for b in as_list(d, "brokerDatas"):
        b = as_obj(b, "BrokerData")
        addrs = b.get("brokerAddrs") or {}
        if not isinstance(addrs, dict):
            raise CodecError("brokerAddrs is not an object")
        route.broker_datas.append(BrokerData(
            cluster=as_str(b.get("cluster"), "cluster"), broker_name=as_str(b.get("brokerName"), "brokerName"),
            broker_addrs={as_int(k, "brokerId"): as_str(v, "brokerAddr") for k, v in addrs.items()}))
    fst = d.get("filterServerTable")
    if isinstance(fst, dict):
        route.filter_server_table = {str(k): [str(x) for x in v] for k, v in fst.items() if isinstance(v, list)}
    return route


# ------------------------------------------------------------------------ heartbeat

@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @property
    def is_all(self) -> bool:
        return self.expression_type == "TAG" and (not self.sub_string or self.sub_string.strip() == SUB_ALL)

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": self.class_filter_mode, "codeSet": list(self.code_set),
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": list(self.tags_set), "topic": self.topic}


def build_subscription(topic: str, expression: str | None, sub_version: int = 0,
                       expression_type: str = "TAG") -> SubscriptionData:
    """FilterAPI.buildSubscriptionData: split a TAG expression on `||`, trim, hash each tag."""
    expr = (expression or "").strip()
    sub = SubscriptionData(topic=topic, sub_string=expr or SUB_ALL, sub_version=sub_version,
                           expression_type=expression_type or "TAG")
    if sub.expression_type != "TAG" or not expr or expr == SUB_ALL:
        sub.sub_string = expr or SUB_ALL
        return sub
    for tag in expr.split("||"):
        tag = tag.strip()
        if tag:
            sub.tags_set.append(tag)
            sub.code_set.append(java_hash(tag))
    return sub


@dataclass(slots=True)
class ConsumerData:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.consume_from_where, "consumeType": self.consume_type,
                "groupName": self.group_name, "messageModel": self.message_model,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions], "unitMode": self.unit_mode}


@dataclass(slots=True)
class ProducerData:
    group_name: str

    def to_json(self) -> dict[str, Any]:
        return {"groupName": self.group_name}


@dataclass(slots=True)
class HeartbeatData:
    client_id: str
    consumers: list[ConsumerData] = field(default_factory=list)
    producers: list[ProducerData] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"clientID": self.client_id, "consumerDataSet": [c.to_json() for c in self.consumers],
                "producerDataSet": [p.to_json() for p in self.producers]}


def _parse_subscription(s: Any) -> SubscriptionData:
    s = as_obj(s, "SubscriptionData")
    sub = SubscriptionData(
        topic=as_str(s.get("topic"), "topic"),
        sub_string=as_str(s.get("subString"), "subString", SUB_ALL),
        sub_version=as_int(s.get("subVersion"), "subVersion"),
        expression_type=as_str(s.get("expressionType"), "expressionType", "TAG") or "TAG",
        class_filter_mode=as_bool(s.get("classFilterMode")))
    sub.tags_set = [as_str(t, "tag") for t in as_list(s, "tagsSet")]
    codes = as_list(s, "codeSet")
    if codes:
        sub.code_set = [as_int(c, "code") for c in codes]
    elif sub.tags_set and sub.expression_type == "TAG":
        sub.code_set = [java_hash(t) for t in sub.tags_set]
    return sub


def parse_heartbeat(body: JsonBody) -> HeartbeatData:
    """HEART_BEAT body from Java (enum names), C++ (ordinals, string subVersion, missing arrays) or ali-ons."""
    d = as_obj(body, "HeartbeatData")
    hb = HeartbeatData(client_id=as_str(d.get("clientID"), "clientID"))
    for c in as_list(d, "consumerDataSet"):
        c = as_obj(c, "ConsumerData")
        hb.consumers.append(ConsumerData(
            group_name=as_str(c.get("groupName"), "groupName"),
            consume_type=as_enum(c.get("consumeType"), CONSUME_TYPES, "consumeType", "CONSUME_PASSIVELY"),
            message_model=as_enum(c.get("messageModel"), MESSAGE_MODELS, "messageModel", "CLUSTERING"),
            consume_from_where=as_enum(c.get("consumeFromWhere"), CONSUME_FROM_WHERE, "consumeFromWhere",
                                     "CONSUME_FROM_LAST_OFFSET"),
            subscriptions=[_parse_subscription(s) for s in as_list(c, "subscriptionDataSet")],
            unit_mode=as_bool(c.get("unitMode"))))
    for p in as_list(d, "producerDataSet"):
        p = as_obj(p, "ProducerData")
        hb.producers.append(ProducerData(group_name=as_str(p.get("groupName"), "groupName")))
    return hb


def encode_heartbeat(hb: HeartbeatData) -> bytes:
    return dumps(hb.to_json())


@dataclass(slots=True)
class CheckClientRequestBody:
    """CHECK_CLIENT_CONFIG's body: a consumer asks whether the broker takes one subscription (SQL92)."""

    client_id: str = ""
    group: str = ""
    subscription: SubscriptionData | None = None

    def to_json(self) -> dict[str, Any]:
        return {"clientId": self.client_id, "group": self.group,
                "subscriptionData": None if self.subscription is None else self.subscription.to_json()}


def parse_check_client_body(body: JsonBody) -> CheckClientRequestBody:
    d = as_obj(body, "CheckClientRequestBody")
    s = d.get("subscriptionData")
    return CheckClientRequestBody(client_id=as_str(d.get("clientId"), "clientId", ""),
                                  group=as_str(d.get("group"), "group", ""),
                                  subscription=None if s is None else _parse_subscription(s))


# ------------------------------------------------------------------------ small bodies

@dataclass(slots=True, frozen=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


def _parse_mq(v: Any) -> MessageQueue:
    v = as_obj(v, "MessageQueue")
    return MessageQueue(topic=as_str(v.get("topic"), "topic"), broker_name=as_str(v.get("brokerName"), "brokerName"),
                        queue_id=as_int(v.get("queueId"), "queueId"))


@dataclass(slots=True)
class LockBatchRequest:
    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = field(default_factory=list)
    only_this_broker: bool = False


def decode_lock_batch_request(body: JsonBody) -> LockBatchRequest:
    """LockBatchRequestBody / UnlockBatchRequestBody (same shape)."""
    d = as_obj(body, "LockBatchRequestBody")
    return LockBatchRequest(consumer_group=as_str(d.get("consumerGroup"), "consumerGroup"),
                            client_id=as_str(d.get("clientId"), "clientId"),
                            mq_set=[_parse_mq(m) for m in as_list(d, "mqSet")],
                            only_this_broker=as_bool(d.get("onlyThisBroker")))


def encode_lock_batch_request(req: LockBatchRequest) -> bytes:
    return dumps({"clientId": req.client_id, "consumerGroup": req.consumer_group,
                  "mqSet": [m.to_json() for m in req.mq_set], "onlyThisBroker": req.only_this_broker})


def encode_lock_batch_response(mqs: Iterable[MessageQueue]) -> bytes:
    return dumps({"lockOKMQSet": [m.to_json() for m in mqs]})


def decode_lock_batch_response(body: JsonBody) -> list[MessageQueue]:
    return [_parse_mq(m) for m in as_list(as_obj(body, "LockBatchResponseBody"), "lockOKMQSet")]


def encode_consumer_list(ids: Iterable[str]) -> bytes:
    return dumps({"consumerIdList": list(ids)})


def decode_consumer_list(body: JsonBody) -> list[str]:
    return [as_str(x, "consumerId") for x in as_list(as_obj(body, "GetConsumerListByGroupResponseBody"),
                                                 "consumerIdList")]


def encode_kv_table(table: dict[str, Any]) -> bytes:
    """KVTable: every value a string (Java HashMap<String,String>)."""
    return dumps({"table": {str(k): as_str(v, str(k)) for k, v in table.items()}})


def decode_kv_table(body: JsonBody) -> dict[str, str]:
    t = as_obj(body, "KVTable").get("table") or {}
    if not isinstance(t, dict):
        raise CodecError("KVTable.table is not an object")
    return {str(k): as_str(v, str(k)) for k, v in t.items()}


def encode_topic_list(topics: Iterable[str]) -> bytes:
    return dumps({"topicList": sorted(topics)})


def decode_topic_list(body: JsonBody) -> list[str]:
    return [as_str(x, "topic") for x in as_list(as_obj(body, "TopicList"), "topicList")]
