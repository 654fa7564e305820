"""Typed extraction of request custom headers (extFields) with RocketMQ's error texts.

A `HeaderSpec` lists fields as (name, kind, required, v2_short_name). `spec.parse(ext, v2)` returns
a `Header` whose attributes are the typed values (None when absent). Empty strings count as absent.
A missing required field raises `HeaderError("the custom field <name> is null")`; an unparsable
number raises `HeaderError` naming the field. Processors answer both with code 1 SYSTEM_ERROR.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

STR, INT, LONG, BOOL = "str", "int", "long", "bool"
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class HeaderError(ValueError):
    """A request header the broker cannot use; answered with SYSTEM_ERROR and this message as remark."""


class Header:
    """Attribute bag for parsed fields (one per request; attributes are the spec's field names)."""

    def __repr__(self) -> str:
        return f"Header({self.__dict__!r})"

    if TYPE_CHECKING:
        # the fields are the HeaderSpec's names, set by `parse`; to the type checker they are Any (a
        # typed record per spec is the next step)
        def __getattr__(self, name: str) -> Any: ...


class HeaderSpec:
    __slots__ = ("fields", "_plan", "_plan_v2")

    def __init__(self, *fields: tuple[Any, ...]) -> None:
        # (name, kind, required[, short])
        kinds = {STR: STR, INT: INT, LONG: LONG, BOOL: BOOL}  # canonical objects: parse compares with `is`
        self.fields = tuple((f[0], kinds.get(f[1], f[1]), f[2], f[3] if len(f) > 3 else None) for f in fields)
        # (ext key to read, name, kind, required) for the long and the V2 short names
        self._plan = tuple((name, name, kind, req) for name, kind, req, _ in self.fields)
        self._plan_v2 = tuple((short or name, name, kind, req) for name, kind, req, short in self.fields)

    def parse(self, ext: Mapping[str, str] | None, v2: bool = False) -> Header:
        get = (ext or {}).get
        h = Header()
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


def parse_send(ext: Mapping[str, str] | None, v2: bool) -> Header:
    """`SEND_MESSAGE.parse(ext, v2)` (the same Header, or the same HeaderError), straight-line for the
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
    hdr = Header()
    hdr.__dict__ = {"producerGroup": group, "topic": topic, "defaultTopic": default_topic,
                    "defaultTopicQueueNums": qnums, "queueId": qid, "sysFlag": sflag, "bornTimestamp": born,
                    "flag": mflag, "properties": props or None, "reconsumeTimes": times,
                    "unitMode": _SEND_BOOLS[unit_mode], "maxReconsumeTimes": max_times, "batch": _SEND_BOOLS[batch]}
    return hdr


_SEND_BOOLS = {None: None, "": None, "false": False, "true": True}
_SMALL_INTS = {str(v): v for v in range(-1, 1025)}


def parse_pull(ext: Mapping[str, str] | None) -> Header:
    """`PULL_MESSAGE.parse(ext)` (the same Header, or the same HeaderError), straight-line for the
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
    hdr = Header()
    hdr.__dict__ = {"consumerGroup": g, "topic": t, "queueId": q, "queueOffset": o, "maxMsgNums": n, "sysFlag": f,
                    "commitOffset": c, "suspendTimeoutMillis": s, "subscription": sub or None, "subVersion": v,
                    "expressionType": e or None}
    return hdr


# ---- the specs used by the processors ---------------------------------------------------------

SEND_MESSAGE = HeaderSpec(
    ("producerGroup", STR, True, "a"),
    ("topic", STR, True, "b"),
    ("defaultTopic", STR, True, "c"),
    ("defaultTopicQueueNums", INT, True, "d"),
    ("queueId", INT, True, "e"),
    ("sysFlag", INT, True, "f"),
    ("bornTimestamp", LONG, True, "g"),
    ("flag", INT, True, "h"),
    ("properties", STR, False, "i"),
    ("reconsumeTimes", INT, False, "j"),
    ("unitMode", BOOL, False, "k"),
    ("maxReconsumeTimes", INT, False, "l"),
    ("batch", BOOL, False, "m"),
)

PULL_MESSAGE = HeaderSpec(
    ("consumerGroup", STR, True),
    ("topic", STR, True),
    ("queueId", INT, True),
    ("queueOffset", LONG, True),
    ("maxMsgNums", INT, True),
    ("sysFlag", INT, True),
    ("commitOffset", LONG, True),
    ("suspendTimeoutMillis", LONG, True),
    ("subscription", STR, False),
    ("subVersion", LONG, True),
    ("expressionType", STR, False),
)

GROUP_TOPIC_QUEUE = HeaderSpec(("consumerGroup", STR, True), ("topic", STR, True), ("queueId", INT, True))
UPDATE_CONSUMER_OFFSET = HeaderSpec(
    ("consumerGroup", STR, True), ("topic", STR, True), ("queueId", INT, True), ("commitOffset", LONG, True))
TOPIC_QUEUE = HeaderSpec(("topic", STR, True), ("queueId", INT, True))
SEARCH_OFFSET = HeaderSpec(("topic", STR, True), ("queueId", INT, True), ("timestamp", LONG, True))
UNREGISTER_CLIENT = HeaderSpec(
    ("clientID", STR, True), ("producerGroup", STR, False), ("consumerGroup", STR, False))
CONSUMER_GROUP = HeaderSpec(("consumerGroup", STR, True))
VIEW_MESSAGE = HeaderSpec(("offset", LONG, True))
QUERY_MESSAGE = HeaderSpec(
    ("topic", STR, True), ("key", STR, True), ("maxNum", INT, True),
    ("beginTimestamp", LONG, True), ("endTimestamp", LONG, True))
CREATE_TOPIC = HeaderSpec(
    ("topic", STR, True), ("defaultTopic", STR, True), ("readQueueNums", INT, True),
    ("writeQueueNums", INT, True), ("perm", INT, True), ("topicFilterType", STR, True),
    ("topicSysFlag", INT, False), ("order", BOOL, True))
ROUTE = HeaderSpec(("topic", STR, True), ("acceptStandardJsonOnly", BOOL, False))
KV_CONFIG = HeaderSpec(("namespace", STR, True), ("key", STR, True))

# ---- name server (server/cluster/namesrv) ------------------------------------------------------
REGISTER_BROKER = HeaderSpec(
    ("brokerName", STR, True), ("brokerAddr", STR, True), ("clusterName", STR, True),
    ("haServerAddr", STR, False), ("brokerId", LONG, True), ("compressed", BOOL, False),
    ("bodyCrc32", INT, False))
BROKER_IDENTITY = HeaderSpec(  # UNREGISTER_BROKER, QUERY_DATA_VERSION
    ("brokerName", STR, True), ("brokerAddr", STR, True), ("clusterName", STR, True), ("brokerId", LONG, True))
BROKER_NAME = HeaderSpec(("brokerName", STR, True))  # WIPE_/ADD_WRITE_PERM_OF_BROKER
PUT_KV_CONFIG = HeaderSpec(("namespace", STR, True), ("key", STR, True), ("value", STR, False))
KV_NAMESPACE = HeaderSpec(("namespace", STR, True))
DELETE_TOPIC_IN_NAMESRV = HeaderSpec(("topic", STR, True), ("clusterName", STR, False))
TOPICS_BY_CLUSTER = HeaderSpec(("cluster", STR, True))
