"""The message properties string: `name\\x01value\\x02name\\x01value` (MessageDecoder rules)."""

from __future__ import annotations

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
    START_DELIVER_TIME = "__STARTDELIVERTIME"


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


def properties_to_string(props: dict[str, str] | None) -> str:
    """Java style: no trailing separator, entries with a None value skipped."""
    if not props:
        return ""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None
    )
