"""What each request touches: THE table of resource and action per remoting request code and per gRPC
MessagingService method (ACL 2.0 vocabulary), and how a request's names are read from it.

Kinds: topic, group, cluster. Actions: PUB, SUB, CREATE, UPDATE, DELETE, GET, LIST (RocketMQ 5.3's ACL
2.0). A `Rule` lists the grants a request needs; `admin=True` marks Apache's Permission.ADMIN_CODE rows
(admin=true is required whatever the resources). Each `Grant.source` says where the name comes from:
  a header field            ("consumerGroup")
  "@send"                   the target topic of a send (V1 / V2 header), CREATE too when it does not exist
  "@record:<field>"         the topic of the stored record at the CommitLog offset in <field>
                            (its REAL_TOPIC when it is a half message)
  "@lock"                   a LOCK/UNLOCK_BATCH_MQ body: its consumerGroup (group) / its queues' topics
  "@heartbeat"              a HEART_BEAT body: each consumer group (group) / each subscribed topic
  "@checkclient"            a CHECK_CLIENT_CONFIG body: its group
  "@batchack"               a BATCH_ACK_MESSAGE body: each ack's consumerGroup (group) / topic (topic)
  "-"                       nothing named (cluster rows; and rows that need only a signed account)
A topic named %RETRY%<g> or %DLQ%<g> is group <g>'s: it is checked as that group (`topic_or_group`).
How the grants map onto a plain_acl.yml account is `server.security.acl` (the module docstring there).

`OPEN_CODES` need no account at all (a route lookup; Apache's name server checks nothing and clients
resolve routes before they sign anything else).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from codec.bodies import decode_lock_batch_request, parse_heartbeat
from codec.buffers import Body
from codec.codes import DLQ_PREFIX, RETRY_PREFIX, RequestCode, SendMessageRequestHeaderV2
from codec.pop_receipt import decode_batch_ack


class Kind(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"


class Action(StrEnum):
    PUB = "PUB"
    SUB = "SUB"
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    GET = "GET"
    LIST = "LIST"


@dataclass(frozen=True, slots=True)
class Grant:
    kind: Kind
    action: Action
    source: str = "-"
    optional: bool = False  # the name may be absent (then nothing is needed for it)


@dataclass(frozen=True, slots=True)
class Rule:
    grants: tuple[Grant, ...]
    admin: bool = False  # Apache's Permission.ADMIN_CODE: admin=true whatever the resources


@dataclass(frozen=True, slots=True)
class Need:
    """One resolved requirement: `action` on `kind` `name` ("" for the cluster)."""

    kind: Kind
    action: Action
    name: str = ""


T, G, C = Kind.TOPIC, Kind.GROUP, Kind.CLUSTER
PUB, SUB, CREATE, UPDATE, DELETE, GET, LIST = (Action.PUB, Action.SUB, Action.CREATE, Action.UPDATE,
                                               Action.DELETE, Action.GET, Action.LIST)
RC = RequestCode


def _r(*grants: Grant, admin: bool = False) -> Rule:
    return Rule(grants, admin)


def _cluster(action: Action, admin: bool = False) -> Rule:
    return Rule((Grant(C, action),), admin)


SEND = _r(Grant(T, PUB, "@send"))
GROUP_TOPIC_GET = _r(Grant(G, GET, "consumerGroup"), Grant(T, SUB, "topic"))

REMOTING: Mapping[int, Rule] = {
    # ---- messages ---------------------------------------------------------------------------------------
    RC.SEND_MESSAGE: SEND, RC.SEND_MESSAGE_V2: SEND, RC.SEND_BATCH_MESSAGE: SEND,
    RC.SEND_REPLY_MESSAGE: SEND, RC.SEND_REPLY_MESSAGE_V2: SEND,
    RC.PULL_MESSAGE: _r(Grant(T, SUB, "topic"), Grant(G, SUB, "consumerGroup")),
    # pop consumption (server/processors/pop.py): the topic and the group, as PULL_MESSAGE
    **{code: _r(Grant(T, SUB, "topic"), Grant(G, SUB, "consumerGroup"))
       for code in (RC.POP_MESSAGE, RC.ACK_MESSAGE, RC.CHANGE_MESSAGE_INVISIBLETIME, RC.PEEK_MESSAGE,
                    RC.NOTIFICATION, RC.POLLING_INFO)},
    RC.GET_TOPIC_CONFIG: _r(Grant(T, GET, "topic")),
    RC.GET_SUBSCRIPTIONGROUP_CONFIG: _r(Grant(G, GET, "group")),
    RC.BATCH_ACK_MESSAGE: _r(Grant(T, SUB, "@batchack"), Grant(G, SUB, "@batchack")),
    RC.QUERY_MESSAGE: _r(Grant(T, SUB, "topic")),
    RC.VIEW_MESSAGE_BY_ID: _r(Grant(T, SUB, "@record:offset")),
    RC.CONSUMER_SEND_MSG_BACK: _r(Grant(G, SUB, "group"), Grant(T, SUB, "@record:offset")),
    RC.END_TRANSACTION: _r(Grant(T, PUB, "@record:commitLogOffset")),
    # with a topic: SUB on it (the page holds that topic's messages only); without one the page lists every
    # tenant's pending messages: cluster LIST (admin)
    RC.DELAYMQ_QUERY_SCHEDULED: _r(Grant(T, SUB, "topic", optional=True)),
    RC.DELAYMQ_CANCEL_SCHEDULED: _r(Grant(T, DELETE), admin=True),
    # ---- offsets and queue positions -------------------------------------------------------------------
    RC.QUERY_CONSUMER_OFFSET: GROUP_TOPIC_GET,
    RC.UPDATE_CONSUMER_OFFSET: _r(Grant(G, UPDATE, "consumerGroup"), Grant(T, SUB, "topic")),
    RC.SEARCH_OFFSET_BY_TIMESTAMP: _r(Grant(T, GET, "topic")),
    RC.GET_MAX_OFFSET: _r(Grant(T, GET, "topic")),
    RC.GET_MIN_OFFSET: _r(Grant(T, GET, "topic")),
    RC.GET_EARLIEST_MSG_STORETIME: _r(Grant(T, GET, "topic")),
    RC.GET_TOPIC_STATS_INFO: _r(Grant(T, GET, "topic")),
    RC.QUERY_CONSUME_QUEUE: _r(Grant(T, SUB, "topic"), Grant(G, GET, "consumerGroup", optional=True)),
    RC.QUERY_CONSUME_TIME_SPAN: _r(Grant(G, GET, "group"), Grant(T, SUB, "topic")),
    RC.CLONE_GROUP_OFFSET: _r(Grant(G, GET, "srcGroup"), Grant(G, UPDATE, "destGroup"), Grant(T, SUB, "topic")),
    # ---- clients of a group ----------------------------------------------------------------------------
    RC.HEART_BEAT: _r(Grant(G, SUB, "@heartbeat"), Grant(T, SUB, "@heartbeat")),
    RC.UNREGISTER_CLIENT: _r(Grant(G, SUB, "consumerGroup", optional=True)),
    RC.CHECK_CLIENT_CONFIG: _r(Grant(G, SUB, "@checkclient")),
    RC.GET_CONSUMER_LIST_BY_GROUP: _r(Grant(G, GET, "consumerGroup")),
    RC.NOTIFY_CONSUMER_IDS_CHANGED: _r(Grant(G, GET, "consumerGroup")),
    RC.LOCK_BATCH_MQ: _r(Grant(G, SUB, "@lock"), Grant(T, SUB, "@lock")),
    RC.UNLOCK_BATCH_MQ: _r(Grant(G, SUB, "@lock"), Grant(T, SUB, "@lock")),
    RC.GET_CONSUMER_CONNECTION_LIST: _r(Grant(G, GET, "consumerGroup")),
    RC.GET_PRODUCER_CONNECTION_LIST: _r(Grant(G, GET, "producerGroup")),
    RC.GET_CONSUME_STATS: _r(Grant(G, GET, "consumerGroup"), Grant(T, GET, "topic", optional=True)),
    RC.SUSPEND_CONSUMER: _r(Grant(G, UPDATE, "consumerGroup")),
    RC.RESUME_CONSUMER: _r(Grant(G, UPDATE, "consumerGroup")),
    RC.ADJUST_CONSUMER_THREAD_POOL: _r(Grant(G, UPDATE, "consumerGroup")),
    RC.RESET_CONSUMER_OFFSET_IN_CONSUMER: _r(Grant(G, UPDATE, "group"), Grant(T, SUB, "topic")),
    RC.RESET_CONSUMER_OFFSET_IN_BROKER: _r(Grant(G, UPDATE, "group"), Grant(T, SUB, "topic")),
    RC.RESET_CONSUMER_CLIENT_OFFSET: _r(Grant(G, UPDATE, "group"), Grant(T, SUB, "topic")),
    RC.INVOKE_BROKER_TO_RESET_OFFSET: _r(Grant(G, UPDATE, "group"), Grant(T, SUB, "topic")),
    RC.GET_CONSUMER_STATUS_FROM_CLIENT: _r(Grant(G, GET, "group"), Grant(T, SUB, "topic")),
    RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: _r(Grant(G, GET, "group"), Grant(T, SUB, "topic")),
    RC.GET_CONSUMER_RUNNING_INFO: _r(Grant(G, GET, "consumerGroup")),
    RC.CONSUME_MESSAGE_DIRECTLY: _r(Grant(G, UPDATE, "consumerGroup")),
    # ---- topic and group definitions (Apache's admin codes) --------------------------------------------
    RC.UPDATE_AND_CREATE_TOPIC: _r(Grant(T, CREATE, "topic"), admin=True),
    RC.DELETE_TOPIC_IN_BROKER: _r(Grant(T, DELETE, "topic"), admin=True),
    RC.DELETE_TOPIC_IN_NAMESRV: _r(Grant(T, DELETE, "topic"), admin=True),
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _r(Grant(G, CREATE), admin=True),
    RC.DELETE_SUBSCRIPTIONGROUP: _r(Grant(G, DELETE, "groupName"), admin=True),
    # ---- routes (name server role) ---------------------------------------------------------------------
    RC.GET_ROUTEINFO_BY_TOPIC: _r(Grant(T, GET, "topic")),  # in OPEN_CODES
    RC.REGISTER_BROKER: _cluster(UPDATE), RC.UNREGISTER_BROKER: _cluster(UPDATE),
    RC.QUERY_DATA_VERSION: _cluster(GET),
    RC.PUT_KV_CONFIG: _cluster(UPDATE), RC.DELETE_KV_CONFIG: _cluster(DELETE), RC.GET_KV_CONFIG: _cluster(GET),
    RC.GET_KV_CONFIG_BY_VALUE: _cluster(GET), RC.GET_KVLIST_BY_NAMESPACE: _cluster(LIST),
    RC.GET_BROKER_CLUSTER_INFO: _cluster(GET), RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _cluster(LIST),
    RC.GET_TOPICS_BY_CLUSTER: _cluster(LIST), RC.GET_SYSTEM_TOPIC_LIST_FROM_NS: _cluster(LIST),
    RC.GET_UNIT_TOPIC_LIST: _cluster(LIST), RC.GET_HAS_UNIT_SUB_TOPIC_LIST: _cluster(LIST),
    RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: _cluster(LIST),
    RC.WIPE_WRITE_PERM_OF_BROKER: _cluster(UPDATE), RC.ADD_WRITE_PERM_OF_BROKER: _cluster(UPDATE),
    RC.UPDATE_NAMESRV_CONFIG: _cluster(UPDATE), RC.GET_NAMESRV_CONFIG: _cluster(GET),
    # ---- all-tenant metadata and broker operations -----------------------------------------------------
    RC.GET_ALL_TOPIC_CONFIG: _cluster(LIST), RC.GET_ALL_CONSUMER_OFFSET: _cluster(LIST),
    RC.GET_ALL_DELAY_OFFSET: _cluster(LIST), RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _cluster(LIST),
    RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: _cluster(LIST), RC.GET_BROKER_CONSUME_STATS: _cluster(LIST),
    RC.QUERY_TOPIC_CONSUME_BY_WHO: _cluster(LIST), RC.WHO_CONSUME_THE_MESSAGE: _cluster(GET),
    RC.QUERY_BROKER_OFFSET: _cluster(GET), RC.GET_BROKER_RUNTIME_INFO: _cluster(GET),
    RC.VIEW_BROKER_STATS_DATA: _cluster(GET), RC.QUERY_CORRECTION_OFFSET: _cluster(GET),
    RC.GET_CLIENT_CONFIG: _cluster(GET), RC.GET_TIMER_CHECK_POINT: _cluster(GET), RC.GET_TIMER_METRICS: _cluster(GET),
    RC.GET_SCHEDULER_PROGRESS: _cluster(GET), RC.GET_HA_EPOCH: _cluster(GET), RC.EXCHANGE_BROKER_HA_INFO: _cluster(GET),
    RC.GET_BROKER_CONFIG: _cluster(GET, admin=True), RC.UPDATE_BROKER_CONFIG: _cluster(UPDATE, admin=True),
    RC.PROMOTE_BROKER: _cluster(UPDATE, admin=True), RC.HAND_OVER_MASTER: _cluster(UPDATE, admin=True),
    # controller mode (RIP-44): the controller's own protocol; a broker serves only the role change the
    # controller orders (and the epoch cache mqadmin reads): operators and controllers, never tenants
    RC.NOTIFY_BROKER_ROLE_CHANGED: _cluster(UPDATE, admin=True), RC.GET_BROKER_EPOCH_CACHE: _cluster(GET),
    RC.BROKER_HEARTBEAT: _cluster(UPDATE), RC.CONTROLLER_REGISTER_BROKER: _cluster(UPDATE),
    RC.CONTROLLER_GET_NEXT_BROKER_ID: _cluster(UPDATE), RC.CONTROLLER_APPLY_BROKER_ID: _cluster(UPDATE),
    RC.CONTROLLER_ALTER_SYNC_STATE_SET: _cluster(UPDATE), RC.CONTROLLER_ELECT_MASTER: _cluster(UPDATE, admin=True),
    RC.CONTROLLER_GET_REPLICA_INFO: _cluster(GET), RC.CONTROLLER_GET_METADATA_INFO: _cluster(GET),
    RC.CONTROLLER_GET_SYNC_STATE_DATA: _cluster(GET), RC.GET_CONTROLLER_CONFIG: _cluster(GET, admin=True),
    RC.UPDATE_CONTROLLER_CONFIG: _cluster(UPDATE, admin=True), RC.CLEAN_BROKER_DATA: _cluster(DELETE, admin=True),
    RC.TRIGGER_DELETE_FILES: _cluster(DELETE), RC.CLEAN_EXPIRED_CONSUMEQUEUE: _cluster(DELETE),
    RC.CLEAN_UNUSED_TOPIC: _cluster(DELETE),
    RC.REGISTER_FILTER_SERVER: _cluster(UPDATE), RC.REGISTER_MESSAGE_FILTER_CLASS: _cluster(UPDATE),
    RC.RESUME_CHECK_HALF_MESSAGE: _cluster(UPDATE),
    # broker -> client calls: a client never sends them to a broker
    RC.CHECK_TRANSACTION_STATE: _cluster(UPDATE), RC.PUSH_REPLY_MESSAGE_TO_CLIENT: _cluster(UPDATE),
}

OPEN_CODES = frozenset({int(RC.GET_ROUTEINFO_BY_TOPIC)})

ADMIN_CODES = frozenset(int(code) for code, rule in REMOTING.items() if rule.admin)

# gRPC MessagingService: the request attribute named by `source` is given by the service (`names`)
GRPC: Mapping[str, Rule] = {
    "QueryRoute": _r(Grant(T, GET, "topic"), Grant(T, CREATE, "topic:absent")),
    "Heartbeat": _r(Grant(G, SUB, "group", optional=True)),
    "Telemetry": _r(),  # a signed account: the settings it carries name no resource the stream acts on
    "NotifyClientTermination": _r(Grant(G, SUB, "group", optional=True)),
    "SendMessage": _r(Grant(T, PUB, "topic"), Grant(T, CREATE, "topic:absent")),
    "EndTransaction": _r(Grant(T, PUB, "topic")),
    "RecallMessage": _r(Grant(T, PUB, "topic")),
    "QueryAssignment": _r(Grant(T, SUB, "topic"), Grant(G, SUB, "group")),
    "ReceiveMessage": _r(Grant(T, SUB, "topic"), Grant(G, SUB, "group")),
    "PullMessage": _r(Grant(T, SUB, "topic"), Grant(G, SUB, "group")),
    "AckMessage": _r(Grant(T, SUB, "topic"), Grant(G, SUB, "group")),
    "ChangeInvisibleDuration": _r(Grant(T, SUB, "topic"), Grant(G, SUB, "group")),
    "ForwardMessageToDeadLetterQueue": _r(Grant(T, SUB, "topic"), Grant(G, SUB, "group")),
    "SyncLiteSubscription": _r(Grant(T, SUB, "topic"), Grant(G, SUB, "group")),
    "UpdateOffset": _r(Grant(G, UPDATE, "group"), Grant(T, SUB, "topic")),
    "GetOffset": _r(Grant(G, GET, "group"), Grant(T, SUB, "topic")),
    "QueryOffset": _r(Grant(T, GET, "topic")),
}


# ---- resolving a rule against one request ---------------------------------------------------------------
def topic_or_group(action: Action, topic: str) -> Need:
    """A topic need; %RETRY%<g> and %DLQ%<g> are group <g>'s (its permission, not the sender's)."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return Need(G, SUB, topic[len(prefix):])
    return Need(T, action, topic)


@dataclass(frozen=True, slots=True)
class Lookups:
    """What the broker tells the resolver: the topic of the record at a CommitLog offset (None: no record;
    a half message's REAL_TOPIC) and whether a topic exists (a send to one that does not creates it)."""

    record_topic: Callable[[int], str | None] = field(default=lambda offset: None)
    topic_exists: Callable[[str], bool] = field(default=lambda topic: True)


def _json_body(body: Body) -> bytes:
    if isinstance(body, list | tuple):
        return b"".join(bytes(p) for p in body)
    return bytes(body or b"")


def _send_topic(code: int, ext: Mapping[str, str]) -> str:
    if code in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE, RC.SEND_REPLY_MESSAGE_V2) \
            and SendMessageRequestHeaderV2.topic in ext:
        return ext.get(SendMessageRequestHeaderV2.topic) or ""
    return ext.get("topic") or ""


def _names(source: str, kind: Kind, code: int, ext: Mapping[str, str], body: Body,
           lookups: Lookups) -> list[str] | None:
    """The names a grant's source gives (None: the source is special and resolved elsewhere)."""
    if source == "-":
        return [""]
    if source.startswith("@record:"):
        raw = ext.get(source[len("@record:"):]) or ""
        try:
            offset = int(raw)
        except ValueError:
            raise ValueError(f"bad {source[len('@record:'):]} {raw!r}") from None
        found = lookups.record_topic(offset) if offset >= 0 else None
        return [found] if found is not None else []  # no record there: the processor answers, nothing is shown
    if source == "@lock":
        req = decode_lock_batch_request(_json_body(body))
        if kind is G:
            return [req.consumer_group]
        return sorted({mq.topic for mq in req.mq_set})
    if source == "@heartbeat":
        hb_raw = _json_body(body)
        if not hb_raw:
            return []
        consumers = parse_heartbeat(hb_raw).consumers
        if kind is G:
            return [c.group_name for c in consumers]
        return sorted({s.topic for c in consumers for s in c.subscriptions if s.topic})
    if source == "@batchack":
        acks = decode_batch_ack(_json_body(body))[1]
        return sorted({a.consumer_group if kind is G else a.topic for a in acks})
    if source == "@checkclient":
        try:
            data = json.loads(_json_body(body) or b"{}")
        except ValueError:
            raise ValueError("the body is not JSON") from None
        group = data.get("group") if isinstance(data, dict) else None
        return [str(group or "")]
    if source == "@send":
        return None
    return [ext.get(source) or ""]


def remoting_needs(code: int, ext: Mapping[str, str], body: Body, lookups: Lookups) -> list[Need]:
    """The needs of one remoting request (ValueError: its resources cannot be told, e.g. a bad body)."""
    rule = REMOTING.get(code)
    if rule is None:
        return [Need(C, UPDATE)]  # an undeclared code (table_is_total guards this): operators only
    out: list[Need] = []
    for g in rule.grants:
        if g.source == "@send":
            topic = _send_topic(code, ext)
            out.append(topic_or_group(PUB, topic))
            if not topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) and not lookups.topic_exists(topic):
                out.append(Need(T, CREATE, topic))  # auto-create (from TBW102 or any default topic)
            continue
        names = _names(g.source, g.kind, code, ext, body, lookups)
        assert names is not None
        if code == RC.DELAYMQ_QUERY_SCHEDULED and not names[0]:
            out.append(Need(C, LIST))
            continue
        for name in names:
            if not name and g.optional:
                continue
            out.append(topic_or_group(g.action, name) if g.kind is T else Need(g.kind, g.action, name))
    return out


def grpc_needs(method: str, names: Mapping[str, str], lookups: Lookups) -> list[Need]:
    """The needs of one gRPC call; `names` gives "topic" / "group" from the request."""
    rule = GRPC.get(method)
    if rule is None:
        return [Need(C, UPDATE)]
    out: list[Need] = []
    for g in rule.grants:
        if g.source == "topic:absent":
            topic = names.get("topic") or ""
            if topic and not topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) and not lookups.topic_exists(topic):
                out.append(Need(T, CREATE, topic))
            continue
        name = names.get(g.source) or ""
        if not name and (g.optional or g.kind is not C):
            continue  # an empty name: the service answers ILLEGAL_TOPIC / ILLEGAL_CONSUMER_GROUP itself
        out.append(topic_or_group(g.action, name) if g.kind is T else Need(g.kind, g.action, name))
    return out
