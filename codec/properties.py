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


def properties_to_string(props: dict[str, str] | None) -> str:
    """Java style: no trailing separator, entries with a None value skipped."""
    if not props:
        return ""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None
    )
