"""The request headers the broker and the name server read: one record class per Java
XxxRequestHeader (field names Java's), each with its `HeaderSpec` (server/header_spec.py: how a
declaration is parsed, its error texts).

The hot paths' `parse_send` / `parse_pull` (server/header_parsers.py) are not a second copy of their
layouts: `make headers` (server/header_codegen.py) writes them from the SEND_MESSAGE / PULL_MESSAGE
declarations below, and anything but the usual shape falls back to `spec.parse`, the maintained reference.
"""

from __future__ import annotations

from codec.codes import SEND_MESSAGE_REQUEST_HEADER_V2
from server.header_spec import Header, HeaderSpec, Long

# ---- the headers the processors read (Java's XxxRequestHeader field names) -----------------------

class SendMessageHeader(Header):
    """SendMessageRequestHeader; V2 (SEND_MESSAGE_V2, batches) uses the one-letter names of
    codec.codes.SEND_MESSAGE_REQUEST_HEADER_V2 (the broker does not read n, bname)."""

    producerGroup: str
    topic: str
    defaultTopic: str
    defaultTopicQueueNums: int
    queueId: int
    sysFlag: int
    bornTimestamp: Long
    flag: int
    properties: str | None
    reconsumeTimes: int | None
    unitMode: bool | None
    maxReconsumeTimes: int | None
    batch: bool | None


SEND_MESSAGE = HeaderSpec(SendMessageHeader, v2_names=SEND_MESSAGE_REQUEST_HEADER_V2)


class PullMessageHeader(Header):
    consumerGroup: str
    topic: str
    queueId: int
    queueOffset: Long
    maxMsgNums: int
    sysFlag: int
    commitOffset: Long
    suspendTimeoutMillis: Long
    subscription: str | None
    subVersion: Long
    expressionType: str | None


PULL_MESSAGE = HeaderSpec(PullMessageHeader)


class GroupTopicQueueHeader(Header):
    """QueryConsumerOffsetRequestHeader (setZeroIfNotFound: 5.x's; false asks for QUERY_NOT_FOUND instead of
    the new-group offset 0, as Apache's proxy asks for its GetOffset)."""

    consumerGroup: str
    topic: str
    queueId: int
    setZeroIfNotFound: bool | None


GROUP_TOPIC_QUEUE = HeaderSpec(GroupTopicQueueHeader)


class UpdateConsumerOffsetHeader(Header):
    consumerGroup: str
    topic: str
    queueId: int
    commitOffset: Long


UPDATE_CONSUMER_OFFSET = HeaderSpec(UpdateConsumerOffsetHeader)


class TopicQueueHeader(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: str
    queueId: int


TOPIC_QUEUE = HeaderSpec(TopicQueueHeader)


class SearchOffsetHeader(Header):
    topic: str
    queueId: int
    timestamp: Long


SEARCH_OFFSET = HeaderSpec(SearchOffsetHeader)


class UnregisterClientHeader(Header):
    clientID: str
    producerGroup: str | None
    consumerGroup: str | None


UNREGISTER_CLIENT = HeaderSpec(UnregisterClientHeader)


class ConsumerGroupHeader(Header):
    consumerGroup: str


CONSUMER_GROUP = HeaderSpec(ConsumerGroupHeader)


class ViewMessageHeader(Header):
    offset: Long


VIEW_MESSAGE = HeaderSpec(ViewMessageHeader)


class QueryMessageHeader(Header):
    topic: str
    key: str
    maxNum: int
    beginTimestamp: Long
    endTimestamp: Long


QUERY_MESSAGE = HeaderSpec(QueryMessageHeader)


class CreateTopicHeader(Header):
    topic: str
    defaultTopic: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicFilterType: str
    topicSysFlag: int | None
    order: bool
    attributes: str | None  # RocketMQ 5: "+message.type=DELAY,-key" (server.topic_attributes)


CREATE_TOPIC = HeaderSpec(CreateTopicHeader)


class RouteHeader(Header):
    topic: str
    acceptStandardJsonOnly: bool | None


ROUTE = HeaderSpec(RouteHeader)


class KvConfigHeader(Header):
    namespace: str
    key: str


KV_CONFIG = HeaderSpec(KvConfigHeader)

# ---- name server (server/cluster/namesrv) ------------------------------------------------------


class RegisterBrokerHeader(Header):
    brokerName: str
    brokerAddr: str
    clusterName: str
    haServerAddr: str | None
    brokerId: Long
    compressed: bool | None
    bodyCrc32: int | None


REGISTER_BROKER = HeaderSpec(RegisterBrokerHeader)


class BrokerIdentityHeader(Header):
    """UNREGISTER_BROKER, QUERY_DATA_VERSION."""

    brokerName: str
    brokerAddr: str
    clusterName: str
    brokerId: Long


BROKER_IDENTITY = HeaderSpec(BrokerIdentityHeader)


class BrokerNameHeader(Header):
    """WIPE_/ADD_WRITE_PERM_OF_BROKER."""

    brokerName: str


BROKER_NAME = HeaderSpec(BrokerNameHeader)


class PutKvConfigHeader(Header):
    namespace: str
    key: str
    value: str | None


PUT_KV_CONFIG = HeaderSpec(PutKvConfigHeader)


class KvNamespaceHeader(Header):
    namespace: str


KV_NAMESPACE = HeaderSpec(KvNamespaceHeader)


class DeleteTopicInNamesrvHeader(Header):
    topic: str
    clusterName: str | None


DELETE_TOPIC_IN_NAMESRV = HeaderSpec(DeleteTopicInNamesrvHeader)


class TopicsByClusterHeader(Header):
    cluster: str


TOPICS_BY_CLUSTER = HeaderSpec(TopicsByClusterHeader)


# ---- pop consumption (RocketMQ 5.1.3's header classes; server/processors/pop.py) -----------------------
class PopMessageHeader(Header):
    consumerGroup: str
    topic: str
    queueId: int  # -1: any readable queue
    maxMsgNums: int
    invisibleTime: Long
    pollTime: Long
    bornTime: Long
    initMode: int  # codec.pop_receipt.ConsumeInitMode
    expType: str | None
    exp: str | None
    order: bool | None
    attemptId: str | None


POP_MESSAGE = HeaderSpec(PopMessageHeader)


class AckMessageHeader(Header):
    consumerGroup: str
    topic: str
    queueId: int
    extraInfo: str  # codec.pop_receipt
    offset: Long


ACK_MESSAGE = HeaderSpec(AckMessageHeader)


class ChangeInvisibleTimeHeader(Header):
    consumerGroup: str
    topic: str
    queueId: int
    extraInfo: str
    offset: Long
    invisibleTime: Long


CHANGE_INVISIBLE_TIME = HeaderSpec(ChangeInvisibleTimeHeader)


class PeekMessageHeader(Header):
    topic: str
    queueId: int
    maxMsgNums: int
    consumerGroup: str


PEEK_MESSAGE = HeaderSpec(PeekMessageHeader)


class NotificationHeader(Header):
    consumerGroup: str
    topic: str
    queueId: int
    pollTime: Long
    bornTime: Long
    order: bool | None
    attemptId: str | None


NOTIFICATION = HeaderSpec(NotificationHeader)


class PollingInfoHeader(Header):
    consumerGroup: str
    topic: str
    queueId: int


POLLING_INFO = HeaderSpec(PollingInfoHeader)


class TopicConfigHeader(Header):
    topic: str
    lo: bool | None  # logic queue mapping wanted (static topics; none here)


GET_TOPIC_CONFIG = HeaderSpec(TopicConfigHeader)


class SubscriptionGroupConfigHeader(Header):
    group: str


GET_SUBSCRIPTIONGROUP_CONFIG = HeaderSpec(SubscriptionGroupConfigHeader)
