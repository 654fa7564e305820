"""The message properties string: `name\\x01value\\x02name\\x01value` (MessageDecoder rules)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import AnyStr, cast

from codec.cache import BoundedCache

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class MessageConst:
    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    UNIQ_KEY = "UNIQ_KEY"
    CLUSTER = "CLUSTER"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
    TIMER_DELAY_LEVEL = "TIMER_DELAY_LEVEL"
    START_DELIVER_TIME = "__STARTDELIVERTIME"
    DELAY_TIME_LEVEL = DELAY
    TRANSACTION_ID = "__transactionId__"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
    DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
    MSG_TYPE = "MSG_TYPE"
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    TTL = "TTL"
    POP_CK = "POP_CK"  # a popped message's receipt (codec.pop_receipt: Apache's extraInfo)
    FIRST_POP_TIME = "1ST_POP_TIME"  # when a message was first popped (an Apache broker's pop retry messages carry it)
    # delaymq: a quarantined scheduled record (rmq_sys_SCHEDULE_QUARANTINE): why, where it came from
    QUARANTINE_REASON = "QUARANTINE_REASON"
    QUARANTINE_STAGE = "QUARANTINE_STAGE"
    QUARANTINE_ORIGIN_OFFSET = "QUARANTINE_ORIGIN_OFFSET"
    QUARANTINE_ORIGIN_MSG_ID = "QUARANTINE_ORIGIN_MSG_ID"
    QUARANTINE_ORIGIN_TOPIC = "QUARANTINE_ORIGIN_TOPIC"
    QUARANTINE_BODY_DROPPED = "QUARANTINE_BODY_DROPPED"
    QUARANTINE_BODY = "QUARANTINE_BODY"  # "record": the body is the whole stored record
    ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    INSTANCE_ID = "INSTANCE_ID"
    BUYER_ID = "BUYER_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    EXTEND_UNIQ_INFO = "EXTEND_UNIQ_INFO"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    SHARDING_KEY = "__SHARDINGKEY"
    KEY_SEPARATOR = " "


def parse_properties(data: str | bytes | bytearray | memoryview | None) -> dict[str, str]:
    """Java's string2messageProperties: keep segments >= 3 chars whose first \\x01 is inside."""
    if not data:
        return {}
    if not isinstance(data, str):
        data = bytes(data).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for item in data.split(PROPERTY_SEPARATOR):
        if len(item) < 3:
            continue
        i = item.find(NAME_VALUE_SEPARATOR)
        if 0 < i < len(item) - 1:
            out[item[:i]] = item[i + 1:]
    return out


def index_keys(keys: AnyStr | None, uniq: AnyStr | None) -> tuple[AnyStr, ...]:
    """A message's index keys: KEYS split on single spaces (empty parts dropped), then UNIQ_KEY if
    any. str or bytes alike (the broker indexes both)."""
    if not keys:
        return (uniq,) if uniq else ()
    ks: list[AnyStr] = [k for k in keys.split(b" " if isinstance(keys, bytes) else " ") if k]
    if uniq:
        ks.append(uniq)
    return tuple(ks)


def properties_to_string(props: Mapping[str, str | None] | None) -> str:
    """Java style: no trailing separator, entries with a None value skipped."""
    if not props:
        return ""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None
    )


def property_token(name: AnyStr) -> AnyStr:
    """The search token of property `name`: `\\x02name\\x01`. Searched in properties text that
    starts with a separator (see `value_span`), it can only match at a key boundary, since no key or
    value contains \\x01 or \\x02."""
    if isinstance(name, bytes):
        return b"\x02" + name + b"\x01"
    return "\x02" + name + "\x01"


def value_span(text: AnyStr, token: AnyStr, start: int = 0) -> tuple[int, int] | None:
    """(start, end) of the value of the first segment `token` (`property_token(name)`) at or after
    `start` in `text`, properties WITH A LEADING SEPARATOR (`b"\\x02" + stored properties`); None when
    absent. The one way every rewriter finds a property value (bytes or str): the value is
    `text[s:e]`; the next segment, if any, starts at e."""
    i = text.find(token, start)
    if i < 0:
        return None
    s = i + len(token)
    e = text.find(token[:1], s)  # the token starts with the segment separator
    return s, (len(text) if e < 0 else e)


def token_value(text: bytes, token: bytes) -> bytes | None:
    """`text[s:e]` of `value_span(text, token)`, or None: the same two searches without the tuple, for
    bytes (the delivery hot path's lookup; tests/codec/test_properties.py checks they agree)."""
    i = text.find(token)
    if i < 0:
        return None
    i += len(token)
    e = text.find(2, i)  # PROPERTY_SEPARATOR's byte
    return text[i:] if e < 0 else text[i:e]


class _FullPath(Exception):
    """The properties string needs the dict path (a key repeats, or a value is empty)."""


def _one_value(text: str, token: str) -> str | None:
    """Value of the segment starting with `token` ("\\x02KEY\\x01") in `text` (which starts and ends with
    \\x02); None if absent. A repeated key or an empty value raises _FullPath."""
    span = value_span(text, token)
    if span is None:
        return None
    start, end = span
    if end == start or text.find(token, end) >= 0:
        raise _FullPath
    return text[start:end]


# (stored properties string, WAIT, TAGS or None, index keys, DELAY or None): a plain send's broker edits
SentRewrite = tuple[str, bool, str | None, tuple[str, ...], str | None]
# the cache's per-shape entry: (stored head, stored tail, wait, tags, index keys without UNIQ_KEY, delay)
_Template = tuple[str, str, bool, str | None, tuple[str, ...], str | None]
_ShapeKey = tuple[str, str, str, tuple[str, ...]]


def rewrite_sent_properties(text: str, cluster: str, new_uniq_key: Callable[[], str],
                            full_path_marks: tuple[str, ...]) -> SentRewrite | None:
    """What a broker does to a plain send's properties, on the string (no dict): drop WAIT, append
    CLUSTER, and UNIQ_KEY (from `new_uniq_key()`) when the client sent none.

    Returns (stored properties string, wait, TAGS or None, index keys: KEYS split on spaces, then
    UNIQ_KEY, DELAY or None), the same as `parse_properties` + edits + `properties_to_string` would give (the very
    same string unless a key the client sent repeats; it parses to the same map either way); or None
    when the dict path must decide: `text` contains one of `full_path_marks` (the caller's keys that
    need more than this, e.g. "DELAY\\x01"), or CLUSTER, an empty segment, a repeated key or an
    empty value of one of the keys read here."""
    for mark in full_path_marks:
        if mark in text:
            return None
    if "CLUSTER\x01" in text:
        return None
    t = f"\x02{text}" if text.endswith(PROPERTY_SEPARATOR) else f"\x02{text}\x02" if text else "\x02"
    if text == PROPERTY_SEPARATOR or "\x02\x02" in t or "\x02\x01" in t or "\x01\x02" in t or t.count("\x01") != t.count("\x02") - 1:
        return None  # a segment parse_properties would drop (empty, no key, no value) or split otherwise
    try:
        wait = True
        i = t.find("\x02WAIT\x01")
        if i >= 0:
            w = _one_value(t, "\x02WAIT\x01") or ""  # found at i: never None
            wait = w.lower() != "false"
            t = t[:i] + t[i + 6 + len(w):]
        tags = _one_value(t, "\x02TAGS\x01") if "TAGS\x01" in t else None
        keys = _one_value(t, "\x02KEYS\x01") if "KEYS\x01" in t else None
        uniq = _one_value(t, "\x02UNIQ_KEY\x01")
        delay = _one_value(t, "\x02DELAY\x01") if "DELAY\x01" in t else None
    except _FullPath:
        return None
    stored = f"{t[1:]}CLUSTER\x01{cluster}" if len(t) > 1 else f"CLUSTER\x01{cluster}"
    if uniq is None:
        uniq = new_uniq_key()
        stored = f"{stored}\x02UNIQ_KEY\x01{uniq}"
    return stored, wait, tags, index_keys(keys, uniq), delay


# (properties after the broker's edits, WAIT): what `parse_sent_properties` gives, unpacked at once by its
# callers (a plain tuple: a NamedTuple's construction is ~0.25 µs of the send's full path)
SentProperties = tuple[dict[str, str], bool]


def parse_sent_properties(text: str, cluster: str, new_uniq_key: Callable[[], str]) -> SentProperties:
    """What a broker does to a sent message's properties, on the dict: the one declaration of those edits.

    Parse, drop WAIT (returned: false only when sent as "false"), set CLUSTER, and set UNIQ_KEY (from
    `new_uniq_key()`) when the client sent none or an empty one. The send processor's full path (retry/DLQ routing, transactions, the put hooks) continues
    from this dict; `rewrite_sent_properties_reference` serialises it, and the string fast path
    (`rewrite_sent_properties`) is checked against that (tests/codec/test_sent_properties.py)."""
    props = parse_properties(text)
    wait = props.pop("WAIT", "true").lower() != "false"
    props["CLUSTER"] = cluster
    if not props.get("UNIQ_KEY"):
        props["UNIQ_KEY"] = new_uniq_key()
    return props, wait


def rewrite_sent_properties_reference(text: str, cluster: str, new_uniq_key: Callable[[], str]) -> SentRewrite:
    """The slow reference of `rewrite_sent_properties` (nothing hot calls it): `parse_sent_properties`, the
    dict path the send processor's full path takes, serialised, with what the fast path reads of it. Where
    the fast path does not decline, both give the same map (and the same string unless a key repeats);
    tests/codec/test_sent_properties.py checks it."""
    props, wait = parse_sent_properties(text, cluster, new_uniq_key)
    keys = [k for k in (props.get("KEYS") or "").split(" ") if k] + [props["UNIQ_KEY"]]
    return properties_to_string(props), wait, props.get("TAGS"), tuple(keys), props.get("DELAY")


# rewrite_sent_properties_cached: (text before the UNIQ_KEY value, text after it, cluster, marks) ->
# the rewrite of that text with a placeholder value, split where the value goes
_PLACEHOLDER = "\x00"
_REWRITES: BoundedCache[_ShapeKey, _Template | object | None] = BoundedCache("send.properties_shape", 1024)
_UNSEEN, _SEEN_ONCE = object(), object()


def rewrite_sent_properties_cached(text: str, cluster: str, new_uniq_key: Callable[[], str],
                                   full_path_marks: tuple[str, ...]) -> SentRewrite | None:
    """`rewrite_sent_properties`, the same result for every input, remembered per producer shape.

    A client's properties strings differ mostly in the UNIQ_KEY value (the rest is the same TAGS,
    WAIT, KEYS... message after message). The rewrite of `head + "UNIQ_KEY\\x01" + value + tail`
    is kept per (head, tail, cluster, marks), computed with a placeholder value ("\\x00") the second
    time a shape is seen (a shape seen once, KEYS unique per message, costs one dict entry). That
    is the same as computing it on the text whenever the value is non-empty and holds no \\x00,
    \\x01 or \\x02 (so it neither ends a token nor splits a segment: every check and find of the
    rewrite sees the same text around it), no mark (checked on the whole text here) contains
    \\x00, and head, tail and cluster hold no \\x00 (the placeholder is found once in the result).
    Anything else is passed to `rewrite_sent_properties`."""
    i = text.find("UNIQ_KEY\x01")
    if i < 0 or (i and text[i - 1] != PROPERTY_SEPARATOR):
        return rewrite_sent_properties(text, cluster, new_uniq_key, full_path_marks)
    start = i + 9
    end = text.find(PROPERTY_SEPARATOR, start)
    if end < 0:
        end = len(text)
    value = text[start:end]
    if not value or "\x01" in value or _PLACEHOLDER in value:
        return rewrite_sent_properties(text, cluster, new_uniq_key, full_path_marks)
    for mark in full_path_marks:
        if mark in text:
            return None
    key: _ShapeKey = (text[:start], text[end:], cluster, full_path_marks)
    try:
        tmpl = _REWRITES.get(key, _UNSEEN)
    except TypeError:  # unhashable marks
        return rewrite_sent_properties(text, cluster, new_uniq_key, full_path_marks)
    if tmpl is _UNSEEN:  # a shape seen once (KEYS unique per message...) costs one dict entry only
        _REWRITES.remember(key, _SEEN_ONCE)
        return rewrite_sent_properties(text, cluster, new_uniq_key, full_path_marks)
    if tmpl is _SEEN_ONCE:
        tmpl = _template(key)
    if tmpl is None:
        return None
    if tmpl is False:
        return rewrite_sent_properties(text, cluster, new_uniq_key, full_path_marks)
    head, tail, wait, tags, keys, delay = cast(_Template, tmpl)
    return f"{head}{value}{tail}", wait, tags, (*keys, value), delay


def _template(key: _ShapeKey) -> _Template | bool | None:
    """The cache entry for `key`: None (the rewrite declines), False (do not use the cache: a \\x00
    elsewhere) or (stored head, stored tail, wait, tags, index keys without UNIQ_KEY, delay)."""
    head, tail, cluster, marks = key
    tmpl: _Template | bool | None
    if _PLACEHOLDER in head or _PLACEHOLDER in tail or _PLACEHOLDER in cluster or any(_PLACEHOLDER in m for m in marks):
        tmpl = False
    else:
        res = rewrite_sent_properties(f"{head}{_PLACEHOLDER}{tail}", cluster, _no_new_key, marks)
        if res is None:
            tmpl = None
        else:
            stored, wait, tags, keys, delay = res
            parts = stored.split(_PLACEHOLDER)
            tmpl = (parts[0], parts[1], wait, tags, keys[:-1], delay) if len(parts) == 2 else False
    _REWRITES.remember(key, tmpl)
    return tmpl


def _no_new_key() -> str:
    raise AssertionError("the template text has a UNIQ_KEY")
