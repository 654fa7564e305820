"""Typed extraction of request custom headers (extFields) with RocketMQ's error texts.

Each request header is a record class (a `Header` subclass) whose annotations ARE its layout: the field
names are Java's, `str` / `int` (a Java int, 32-bit) / `Long` (a Java long, 64-bit) / `bool` the kind, and
`X | None` an optional field (None when absent); a required field is never None. `HeaderSpec(Record)`
derives the parse plan from those annotations once, at import; `spec.parse(ext, v2)` returns a `Record`,
so processors see `h.queueId: int`, `h.topic: str`. Empty strings count as absent. A missing required
field raises `HeaderError("the custom field <name> is null")`; an unparsable or out-of-range number raises
`HeaderError` naming the field. Processors answer both with code 1 SYSTEM_ERROR.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, NewType, TypeVar

STR, INT, LONG, BOOL = "str", "int", "long", "bool"
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

Long = NewType("Long", int)
"""A header field that is a Java long (64-bit range); a plain `int` field is a Java int (32-bit)."""


class HeaderError(ValueError):
    """A request header the broker cannot use; answered with SYSTEM_ERROR and this message as remark."""


class Header:
    """A parsed request header; subclasses declare the fields (see the module docstring). The values live
    in the instance `__dict__`, filled by `HeaderSpec.parse` (or the straight-line `parse_send` /
    `parse_pull`) in declaration order."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__!r})"


H = TypeVar("H", bound=Header)

_KINDS: dict[object, str] = {str: STR, int: INT, Long: LONG, bool: BOOL}


def _layout(record: type[Header]) -> list[tuple[str, str, bool]]:
    """(name, kind, required) per annotated field of `record`, in declaration order."""
    out = []
    for name, tp in typing.get_type_hints(record).items():
        args = typing.get_args(tp)
        optional = (typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 2
                    and type(None) in args)
        base = next(a for a in args if a is not type(None)) if optional else tp
        kind = _KINDS.get(base)
        if kind is None:
            raise TypeError(f"{record.__name__}.{name}: a header field is str, int, Long or bool "
                            f"(or X | None), not {tp!r}")
        out.append((name, kind, not optional))
    return out


class HeaderSpec(Generic[H]):
    """The parser of one request header layout (`record`, a `Header` subclass). `v2_names`: the V2 short
    names in field order (SEND_MESSAGE_V2's a..m)."""

    __slots__ = ("record", "fields", "_plan", "_plan_v2")

    def __init__(self, record: type[H], v2_names: str | None = None) -> None:
        layout = _layout(record)
        if v2_names is not None and len(v2_names) != len(layout):
            raise TypeError(f"{record.__name__}: {len(v2_names)} V2 names for {len(layout)} fields")
        self.record = record
        # (name, kind, required, V2 short name or None); kind is one of the STR/INT/LONG/BOOL objects
        # (parse compares with `is`)
        self.fields = tuple((name, kind, req, v2_names[i] if v2_names else None)
                            for i, (name, kind, req) in enumerate(layout))
        # (ext key to read, name, kind, required) for the long and the V2 short names
        self._plan = tuple((name, name, kind, req) for name, kind, req, _ in self.fields)
        self._plan_v2 = tuple((short or name, name, kind, req) for name, kind, req, short in self.fields)

    def parse(self, ext: Mapping[str, str] | None, v2: bool = False) -> H:
        get = (ext or {}).get
        h = self.record()
        d = h.__dict__
        for key, name, kind, required in (self._plan_v2 if v2 else self._plan):
            raw = get(key)
            if raw is None or raw == "":
                if required:
                    raise HeaderError(f"the custom field <{name}> is null")
                d[name] = None
            elif type(raw) is str and kind is not BOOL:
                if kind is STR:
                    d[name] = raw
                    continue
                try:  # int() strips the same whitespace str.strip() does
                    v = int(raw)
                except ValueError:
                    v = None
                if v is not None and (_INT_MIN <= v <= _INT_MAX if kind is INT else _LONG_MIN <= v <= _LONG_MAX):
                    d[name] = v
                else:
                    d[name] = _convert(name, kind, raw)  # raises the error naming the field
            else:
                d[name] = _convert(name, kind, raw)
        return h


def _convert(name: str, kind: str, raw: object) -> object:
    if kind == STR:
        return raw if isinstance(raw, str) else str(raw)
    if kind == BOOL:
        if isinstance(raw, bool):
            return raw
        # Java's Boolean.parseBoolean accepts only "true"; the C++ 1.x client (PyPI rocketmq 0.4.x)
        # sends batch sends as code 10 with "batch":"1", so "1" counts as true too.
        return str(raw).strip().lower() in ("true", "1")
    s = str(raw).strip()
    try:
        v = int(s)
    except ValueError:
        raise HeaderError(f"the custom field <{name}> is not a valid {kind}: {s[:64]!r}") from None
    lo, hi = (_INT_MIN, _INT_MAX) if kind == INT else (_LONG_MIN, _LONG_MAX)
    if not lo <= v <= hi:
        raise HeaderError(f"the custom field <{name}> is out of {kind} range: {s[:64]!r}")
    return v


def get_int(ext: Mapping[str, str] | None, name: str, default: int) -> int:
    """Optional numeric field with a default (unparsable → HeaderError naming it)."""
    raw = (ext or {}).get(name)
    if raw is None or raw == "":
        return default
    return _convert(name, LONG, raw)  # type: ignore[return-value]


def parse_send(ext: Mapping[str, str] | None, v2: bool) -> SendMessageHeader:
    """`SEND_MESSAGE.parse(ext, v2)` (the same record, or the same HeaderError), straight-line for the
    usual send: V2 short names, the required fields non-empty strings, numbers in range, booleans
    "true"/"false" (RocketMQ's FastCodesHeader does the same for SEND_MESSAGE_V2). Anything else is
    left to the generic parse, which names the offending field."""
    if not v2 or not ext:
        return SEND_MESSAGE.parse(ext, v2)
    get = ext.get
    # SendMessageRequestHeaderV2: a..n are the Java field names' short forms
    group, topic, default_topic, default_qnums = get("a"), get("b"), get("c"), get("d")
    queue_id, sys_flag, born_ts, flag = get("e"), get("f"), get("g"), get("h")
    props, reconsume, unit_mode, max_reconsume, batch = get("i"), get("j"), get("k"), get("l"), get("m")
    try:
        if (not (group and topic and default_topic and default_qnums and queue_id and sys_flag and born_ts and flag)
                or not type(group) is type(topic) is type(default_topic) is type(default_qnums) is type(queue_id)
                is type(sys_flag) is type(born_ts) is type(flag) is str
                or (props is not None and type(props) is not str)
                or (reconsume is not None and type(reconsume) is not str)
                or (max_reconsume is not None and type(max_reconsume) is not str)
                or unit_mode not in _SEND_BOOLS or batch not in _SEND_BOOLS):
            return SEND_MESSAGE.parse(ext, v2)
        small = _SMALL_INTS  # the usual queue ids, flags, counts: a lookup instead of int()
        qnums = small[default_qnums] if default_qnums in small else int(default_qnums)
        qid = small[queue_id] if queue_id in small else int(queue_id)
        sflag = small[sys_flag] if sys_flag in small else int(sys_flag)
        mflag = small[flag] if flag in small else int(flag)
        born = int(born_ts)
        times = (small[reconsume] if reconsume in small else int(reconsume)) if reconsume else None
        max_times = (small[max_reconsume] if max_reconsume in small else int(max_reconsume)) if max_reconsume else None
    except (ValueError, TypeError):  # TypeError: an unhashable value in a hand-made ext
        return SEND_MESSAGE.parse(ext, v2)
    if (not (_INT_MIN <= qnums <= _INT_MAX and _INT_MIN <= qid <= _INT_MAX and _INT_MIN <= sflag <= _INT_MAX
             and _INT_MIN <= mflag <= _INT_MAX and _LONG_MIN <= born <= _LONG_MAX)
            or (times is not None and not _INT_MIN <= times <= _INT_MAX)
            or (max_times is not None and not _INT_MIN <= max_times <= _INT_MAX)):
        return SEND_MESSAGE.parse(ext, v2)
    hdr = SendMessageHeader()
    hdr.__dict__ = {"producerGroup": group, "topic": topic, "defaultTopic": default_topic,
                    "defaultTopicQueueNums": qnums, "queueId": qid, "sysFlag": sflag, "bornTimestamp": born,
                    "flag": mflag, "properties": props or None, "reconsumeTimes": times,
                    "unitMode": _SEND_BOOLS[unit_mode], "maxReconsumeTimes": max_times, "batch": _SEND_BOOLS[batch]}
    return hdr


_SEND_BOOLS = {None: None, "": None, "false": False, "true": True}
_SMALL_INTS = {str(v): v for v in range(-1, 1025)}


def parse_pull(ext: Mapping[str, str] | None) -> PullMessageHeader:
    """`PULL_MESSAGE.parse(ext)` (the same record, or the same HeaderError), straight-line for the
    usual pull: the required fields non-empty strings, numbers in range, the optional ones strings or
    absent. Anything else is left to the generic parse, which names the offending field."""
    if not ext:
        return PULL_MESSAGE.parse(ext)
    # Any: a hand-made ext may hold anything (checked below); numbers replace their strings in place
    get: Callable[[str], Any] = ext.get
    g, t, q, o, n = get("consumerGroup"), get("topic"), get("queueId"), get("queueOffset"), get("maxMsgNums")
    f, c, s, v = get("sysFlag"), get("commitOffset"), get("suspendTimeoutMillis"), get("subVersion")
    sub, e = get("subscription"), get("expressionType")
    try:
        if (not (g and t and q and o and n and f and c and s and v)
                or not type(g) is type(t) is type(q) is type(o) is type(n) is type(f) is type(c) is type(s)
                is type(v) is str
                or (sub is not None and type(sub) is not str) or (e is not None and type(e) is not str)):
            return PULL_MESSAGE.parse(ext)
        small = _SMALL_INTS  # queue ids, flags, batch sizes, often the offsets: a lookup instead of int()
        q = small[q] if q in small else int(q)
        n = small[n] if n in small else int(n)
        f = small[f] if f in small else int(f)
        o = small[o] if o in small else int(o)
        c = small[c] if c in small else int(c)
        s = small[s] if s in small else int(s)
        v = small[v] if v in small else int(v)
    except (ValueError, TypeError):  # TypeError: an unhashable value in a hand-made ext
        return PULL_MESSAGE.parse(ext)
    if not (_INT_MIN <= q <= _INT_MAX and _INT_MIN <= n <= _INT_MAX and _INT_MIN <= f <= _INT_MAX
            and _LONG_MIN <= o <= _LONG_MAX and _LONG_MIN <= c <= _LONG_MAX and _LONG_MIN <= s <= _LONG_MAX
            and _LONG_MIN <= v <= _LONG_MAX):
        return PULL_MESSAGE.parse(ext)
    hdr = PullMessageHeader()
    hdr.__dict__ = {"consumerGroup": g, "topic": t, "queueId": q, "queueOffset": o, "maxMsgNums": n, "sysFlag": f,
                    "commitOffset": c, "suspendTimeoutMillis": s, "subscription": sub or None, "subVersion": v,
                    "expressionType": e or None}
    return hdr


# ---- the headers the processors read (Java's XxxRequestHeader field names) -----------------------

class SendMessageHeader(Header):
    """SendMessageRequestHeader; V2 (SEND_MESSAGE_V2, batches) names the fields a..m in this order."""

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


SEND_MESSAGE = HeaderSpec(SendMessageHeader, v2_names="abcdefghijklm")


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
    """QueryConsumerOffsetRequestHeader."""

    consumerGroup: str
    topic: str
    queueId: int


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
