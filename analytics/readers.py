"""Readers for the broker's exported files.

Pure functions (no Spark) so they run the same inside a Spark executor (`flatMap` over
`binaryFiles`) and in plain Python. Every reader tolerates a torn last record: rotating
export files may be read while the broker is still appending to them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack

# RocketMQ message-trace text (TraceDataEncoder): contexts end with FIELD_SPLITOR,
# fields inside a context are separated by CONTENT_SPLITOR.
CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"

TRACE_FIELDS = ("event", "kind", "level", "topic", "msgId", "uniqKey", "bornTs", "storeTs", "dueTs", "deliveredTs")
# one scheduled-message trace event, in TRACE_FIELDS order (the rows of analytics.jobs.TRACE_SCHEMA)
TraceRow = tuple[str, str, int, str, str, str, int, int, int, int]


def iter_msgpack_records(data: bytes) -> Iterator[Any]:
    """Yield every complete object in a msgpack stream; stop quietly at a torn or corrupt tail."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(data), 1 << 20))
    unpacker.feed(data)
    while True:
        try:
            obj = unpacker.unpack()
        except msgpack.OutOfData:
            return
        except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError, TypeError):
            return
        yield obj


def iter_msgpack_maps(data: bytes) -> Iterator[dict[str, Any]]:
    """The maps of a msgpack stream (anything else is skipped)."""
    for obj in iter_msgpack_records(data):
        if isinstance(obj, dict):
            yield obj


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


_TRACE_V2_LEN = 1 + len(TRACE_FIELDS)  # [2, event, kind, level, topic, msgId, uniqKey, bornTs, storeTs, dueTs, deliveredTs]


_TRACE_V3_LEN = 12  # [3, event, kind, level, msgIdPrefix, topics, offsets, uniqKeys, bornTs, storeTs, dueTs, deliveredTs]


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _v3_rows(m: list[Any]) -> Iterator[TraceRow]:
    """The events of one v3 record (a run, column by column): one row per offset. A record whose
    columns do not line up is skipped whole rather than read misaligned."""
    _, e, kind, level, prefix, topics, offsets, uniqs, born, store, due, delivered = m[:_TRACE_V3_LEN]
    cols = (topics, offsets, uniqs, born, store, due)
    if not all(isinstance(c, list) for c in cols):
        return
    n = len(offsets)
    per = delivered if isinstance(delivered, list) else [delivered] * n
    if any(len(c) != n for c in cols) or len(per) != n:
        return
    e, kind, level, prefix = str(e), str(kind), _int(level), _text(prefix)
    for t, o, u, b, s, d, x in zip(topics, offsets, uniqs, born, store, due, per, strict=True):
        yield (e, kind, level, str(t), f"{prefix}{_int(o):016X}", _text(u), _int(b), _int(s), _int(d), _int(x))


def trace_rows(data: bytes) -> Iterator[TraceRow]:
    """Scheduled-message trace events as tuples in TRACE_FIELDS order. Reads every format the broker
    has written: v3 runs `[3, event, kind, level, msgIdPrefix, topics, offsets, ...]` (one record per
    delivery batch), v2 arrays `[2, event, kind, ...]` and v1 maps `{"v":1,"event":...}`."""
    for m in iter_msgpack_records(data):
        if isinstance(m, list):
            if len(m) >= _TRACE_V3_LEN and m[0] == 3:
                yield from _v3_rows(m)
            elif len(m) >= _TRACE_V2_LEN and m[0] == 2:
                e, kind, level, topic, msg_id, uniq, born, store, due, delivered = m[1:_TRACE_V2_LEN]
                yield (str(e), str(kind), _int(level), str(topic), str(msg_id), str(uniq or ""),
                       _int(born), _int(store), _int(due), _int(delivered))
            continue
        if not isinstance(m, dict):
            continue
        yield (
            str(m.get("event", "")),
            str(m.get("kind", "")),
            _int(m.get("level", 0)),
            str(m.get("topic", "")),
            str(m.get("msgId", "")),
            str(m.get("uniqKey", "")),
            _int(m.get("bornTs")),
            _int(m.get("storeTs")),
            _int(m.get("dueTs")),
            _int(m.get("deliveredTs")),
        )


METRIC_FIELDS = ("ts", "name", "type", "topic", "level", "group", "value", "sum", "count")
# one metric sample, in METRIC_FIELDS order (the rows of analytics.jobs.METRIC_SCHEMA)
MetricRow = tuple[int, str, str, str, str, str, float, float, int]


def metric_rows(data: bytes) -> Iterator[MetricRow]:
    """Metric samples flattened to the labels the analytics use (topic, level, group)."""
    for m in iter_msgpack_maps(data):
        labels = m.get("labels") or {}
        if not isinstance(labels, dict):
            labels = {}
        try:
            value = float(m.get("value", 0.0))
        except (TypeError, ValueError):
            continue
        yield (
            _int(m.get("ts")),
            str(m.get("name", "")),
            str(m.get("type", "")),
            str(labels.get("topic", "")),
            str(labels.get("level", "")),
            str(labels.get("group", "")),
            value,
            float(m.get("sum", 0.0) or 0.0),
            _int(m.get("count", 0)),
        )


RMQ_TRACE_FIELDS = ("traceType", "timestamp", "group", "topic", "msgId", "keys", "costTime", "success", "storeTs")
# one client trace context, in RMQ_TRACE_FIELDS order (the rows of analytics.jobs.RMQ_TRACE_SCHEMA)
RmqTraceRow = tuple[str, int, str, str, str, str, int, bool, int]


def parse_trace_data(text: str, store_ts: int = 0) -> Iterator[RmqTraceRow]:
    """Parse RocketMQ TraceDataEncoder text into (type, ts, group, topic, msgId, keys, costMs, success, storeTs).

    Pub:       Pub,ts,region,group,topic,msgId,tags,keys,storeHost,bodyLen,cost,msgType[,offsetMsgId],success
    SubBefore: SubBefore,ts,region,group,requestId,msgId,retryTimes,keys
    SubAfter:  SubAfter,requestId,msgId,cost,success,keys[,contextCode[,ts]]
    Unknown or short contexts are skipped: the text comes from clients.
    """
    for ctx in text.split(FIELD_SPLITOR):
        if not ctx:
            continue
        f = ctx.split(CONTENT_SPLITOR)
        kind = f[0]
        if kind == "Pub" and len(f) >= 13:
            yield ("Pub", _int(f[1]), f[3], f[4], f[5], f[7], _int(f[10]), f[-1].lower() == "true", store_ts)
        elif kind == "SubBefore" and len(f) >= 8:
            yield ("SubBefore", _int(f[1]), f[3], "", f[5], f[7], 0, True, store_ts)
        elif kind == "SubAfter" and len(f) >= 6:
            ts = _int(f[7]) if len(f) >= 8 else store_ts
            yield ("SubAfter", ts, "", "", f[2], f[5], _int(f[3]), f[4].lower() == "true", store_ts)


def rmq_trace_rows(data: bytes) -> Iterator[RmqTraceRow]:
    """Records exported from RMQ_SYS_TRACE_TOPIC, expanded into one row per trace context."""
    for m in iter_msgpack_maps(data):
        body = m.get("body", "")
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        yield from parse_trace_data(str(body), _int(m.get("storeTs")))
