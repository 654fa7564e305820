"""RocketMQ plain-ACL permissions: bits, parsing, the check, and the resources each request needs.

Bits as in RocketMQ's Permission: DENY=1, ANY=2, PUB=4, SUB=8. Group permissions are kept under the
group's retry topic name (`%RETRY%<group>`), which is also how requests name the group they touch.
"""

from __future__ import annotations

from collections.abc import Callable

from codec.bodies import parse_heartbeat
from codec.buffers import Body
from codec.codes import RETRY_PREFIX, SCHEDULE_TOPIC, RequestCode, SendMessageRequestHeaderV2

DENY, ANY, PUB, SUB = 1, 2, 4, 8

# Codes that need admin=true (RocketMQ's Permission.ADMIN_CODE, plus GET_BROKER_CONFIG: the broker's
# whole configuration, file paths included, is for administrators only).
ADMIN_CODES = frozenset({
    int(RequestCode.UPDATE_AND_CREATE_TOPIC), int(RequestCode.UPDATE_BROKER_CONFIG),
    int(RequestCode.DELETE_TOPIC_IN_BROKER), int(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP),
    int(RequestCode.DELETE_SUBSCRIPTIONGROUP), int(RequestCode.GET_BROKER_CONFIG), int(RequestCode.PROMOTE_BROKER),
    int(RequestCode.DELAYMQ_CANCEL_SCHEDULED),  # ours: cancelling someone's scheduled message is an operator's act
})

# Name-server requests: RocketMQ 4.x's name server runs no ACL, so neither do we for these codes
# (clients resolve routes before anything else; the broker codes they then send are checked).
NAMESRV_CODES = frozenset({
    int(RequestCode.GET_ROUTEINFO_BY_TOPIC), int(RequestCode.GET_KV_CONFIG),
    int(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), int(RequestCode.GET_BROKER_CLUSTER_INFO),
})

_PERM_NAMES = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def parse_perm(text: object) -> int:
    """RocketMQ's parsePermFromString: unknown or missing → DENY."""
    if text is None:
        return DENY
    return _PERM_NAMES.get(str(text).strip(), DENY)


def perm_name(perm: int) -> str:
    if perm & ANY:
        return "PUB or SUB"
    names = [n for n, b in (("PUB", PUB), ("SUB", SUB)) if perm & b]
    return "|".join(names) or "DENY"


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str | None) -> str:
    return RETRY_PREFIX + (group or "")


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_PREFIX)


def describe(resource: str) -> str:
    if is_group_resource(resource):
        return f"group={resource[len(RETRY_PREFIX):]}"
    return f"topic={resource}"


def _body_bytes(body: Body) -> bytes:
    if isinstance(body, list | tuple):
        return b"".join(bytes(p) for p in body)
    return bytes(body or b"")


def _heartbeat_resources(body: Body, out: dict[str, int]) -> None:
    raw = _body_bytes(body)
    if not raw:
        return
    for consumer in parse_heartbeat(raw).consumers:  # CodecError (a ValueError) on a malformed body
        out[retry_topic(consumer.group_name)] = SUB
        for sub in consumer.subscriptions:
            if sub.topic:
                out[sub.topic] = out.get(sub.topic, 0) | SUB


def needed_resources(code: int, ext: dict[str, str], body: Body,
                     record_topic: Callable[[int], str | None] | None = None) -> dict[str, int]:
    """The resources (topic or %RETRY%group) and permission a request needs, as RocketMQ maps them.
    `record_topic(commitlog_offset) -> topic | None` names the topic of a stored record
    (VIEW_MESSAGE_BY_ID reads one by offset: it needs SUB on that record's topic)."""
    out: dict[str, int] = {}
    if code == RequestCode.SEND_MESSAGE or code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        v2 = code != RequestCode.SEND_MESSAGE
        # Java's PlainAccessValidator reads "group" (not producerGroup) from a V1 send: kept as it does
        topic = ext.get(SendMessageRequestHeaderV2.topic if v2 else "topic") or ""
        if topic.startswith(RETRY_PREFIX):
            out[retry_topic(ext.get(SendMessageRequestHeaderV2.producerGroup if v2 else "group"))] = SUB
        else:
            out[topic] = PUB
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        out[retry_topic(ext.get("group"))] = SUB
        out[ext.get("originTopic") or ""] = PUB
    elif code == RequestCode.PULL_MESSAGE:
        out[ext.get("topic") or ""] = SUB
        out[retry_topic(ext.get("consumerGroup"))] = SUB
    elif code == RequestCode.QUERY_MESSAGE:
        out[ext.get("topic") or ""] = SUB
    elif code == RequestCode.DELAYMQ_QUERY_SCHEDULED:  # ours: SUB on the topic listed, else on SCHEDULE_TOPIC_XXXX
        out[ext.get("topic") or SCHEDULE_TOPIC] = SUB
    elif code == RequestCode.HEART_BEAT:
        _heartbeat_resources(body, out)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        out[retry_topic(ext.get("consumerGroup"))] = SUB
    elif code == RequestCode.VIEW_MESSAGE_BY_ID:
        try:
            offset = int(ext.get("offset") or "")
        except ValueError:
            raise ValueError(f"bad offset {ext.get('offset')!r}") from None
        found = record_topic(offset) if record_topic is not None else None
        if found is not None:  # no record there: the processor answers "not found", nothing is shown
            out[found] = SUB
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        out[retry_topic(ext.get("consumerGroup"))] = SUB
        out[ext.get("topic") or ""] = SUB
    return out
