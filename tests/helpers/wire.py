"""A deliberately tiny, blocking RocketMQ remoting client for test set-up and probes.

It is independent of our own codec/remoting packages on purpose: interop tests must not rely on
the code under test to prepare their fixtures (a codec bug would otherwise hide behind itself).
It speaks only the JSON header (serialize type 0), which every broker must accept.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

_LEN = struct.Struct(">ii")
_opaques = itertools.count(1)

# Request codes used by the helpers (facts from the RocketMQ 4.x protocol).
UPDATE_AND_CREATE_TOPIC = 17
GET_MAX_OFFSET = 30
QUERY_CONSUMER_OFFSET = 14
GET_CONSUMER_LIST_BY_GROUP = 38
GET_ROUTEINFO_BY_TOPIC = 105


@dataclass
class Reply:
    code: int
    remark: str | None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class WireError(AssertionError):
    """The broker answered something a RocketMQ client could not use."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise WireError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def invoke(addr: str, code: int, ext: Mapping[str, object] | None = None, body: bytes = b"",
           timeout: float = 5.0) -> Reply:
    """Send one request on a fresh connection and return the response with the same opaque."""
    host, port = addr.rsplit(":", 1)
    opaque = next(_opaques)
    header = json.dumps({
        "code": code, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 0,
        "extFields": {k: str(v) for k, v in (ext or {}).items()}, "serializeTypeCurrentRPC": "JSON",
    }).encode()
    frame = _LEN.pack(4 + len(header) + len(body), len(header)) + header + body
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(frame)
        while True:
            total, hdr_word = _LEN.unpack(_recv_exact(sock, 8))
            ser_type, hdr_len = hdr_word >> 24 & 0xFF, hdr_word & 0xFFFFFF
            if ser_type != 0:
                raise WireError(f"code {code}: response in serialize type {ser_type}, request was JSON (0)")
            hdr = json.loads(_recv_exact(sock, hdr_len))
            payload = _recv_exact(sock, total - 4 - hdr_len)
            if hdr.get("opaque") == opaque and hdr.get("flag", 0) & 1:
                ext_fields = hdr.get("extFields") or {}
                bad = {k: v for k, v in ext_fields.items() if not isinstance(v, str)}
                if bad:
                    raise WireError(f"code {code}: non-string response extFields {bad} (C++ ignores them)")
                return Reply(hdr["code"], hdr.get("remark"), ext_fields, payload)


def create_topic(addr: str, topic: str, queues: int = 4, perm: int = 6, order: bool = False) -> None:
    reply = invoke(addr, UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
        "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": str(order).lower(),
    })
    if reply.code != 0:
        raise WireError(f"UPDATE_AND_CREATE_TOPIC({topic}) answered {reply.code}: {reply.remark}")


def consumer_ids(addr: str, group: str) -> list[str]:
    """Client ids the broker has registered for a consumer group ([] when none is live)."""
    reply = invoke(addr, GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if reply.code != 0 or not reply.body:
        return []
    return list(json.loads(reply.body).get("consumerIdList") or [])


def consumer_offset(addr: str, group: str, topic: str, queue_id: int) -> int | None:
    reply = invoke(addr, QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id})
    return int(reply.ext["offset"]) if reply.code == 0 else None


def max_offset(addr: str, topic: str, queue_id: int) -> int:
    reply = invoke(addr, GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    if reply.code != 0:
        raise WireError(f"GET_MAX_OFFSET({topic}, {queue_id}) answered {reply.code}: {reply.remark}")
    return int(reply.ext["offset"])
