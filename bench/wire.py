"""A pipelining remoting client for the load generators (many requests in flight per connection).

Frames are built once with `codec.frame.encode_frame_bytes` (binary ROCKETMQ header, so fixed-width
fields sit at fixed offsets) and re-used: `FrameTemplate.render` copies the bytes and patches the
opaque plus any fixed-width placeholders (send time, deliver time). Responses are parsed with
`codec.frame.FrameDecoder` and routed by opaque to a callback.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Callable

from codec.codes import (
    DEFAULT_TOPIC,
    SERIALIZE_ROCKETMQ,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    create_send_message_request_header_v2,
)
from codec.command import RemotingCommand
from codec.frame import FrameDecoder, encode_frame_bytes

OPAQUE_POS = 4 + 4 + 5  # length word, serialize/header-length word, then code(2) language(1) version(2)
_I32 = struct.Struct(">i")
PLACEHOLDER_CHAR = "~"


class FrameTemplate:
    """Encoded request whose opaque and placeholder fields are patched per message."""

    def __init__(self, cmd: RemotingCommand, placeholders: dict[str, int] | None = None) -> None:
        cmd.opaque = 0x7EADBEEF
        cmd.serialize_type = SERIALIZE_ROCKETMQ
        self.frame = bytearray(encode_frame_bytes(cmd))
        assert _I32.unpack_from(self.frame, OPAQUE_POS)[0] == 0x7EADBEEF
        self.slots: dict[str, tuple[int, int]] = {}
        for name, width in (placeholders or {}).items():
            token = f"{PLACEHOLDER_CHAR}{name}".ljust(width, PLACEHOLDER_CHAR).encode()
            pos = self.frame.find(token)
            assert pos >= 0 and self.frame.find(token, pos + 1) < 0, name
            self.slots[name] = (pos, width)
        self.body_pos = len(self.frame) - len(cmd.body_bytes())

    @staticmethod
    def token(name: str, width: int) -> str:
        return f"{PLACEHOLDER_CHAR}{name}".ljust(width, PLACEHOLDER_CHAR)

    def render(self, opaque: int, body_prefix: bytes = b"", **values: int) -> bytearray:
        f = self.frame[:]
        _I32.pack_into(f, OPAQUE_POS, opaque)
        if body_prefix:
            f[self.body_pos:self.body_pos + len(body_prefix)] = body_prefix
        for name, v in values.items():
            pos, width = self.slots[name]
            f[pos:pos + width] = str(v).rjust(width, "0").encode()
        return f


class Conn(asyncio.Protocol):
    """One TCP connection; responses are dispatched by opaque to a callback or a future."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.waiters: dict[int, Callable[[RemotingCommand], None]] = {}
        self.opaques = itertools.count(1)
        self.closed = asyncio.get_running_loop().create_future()
        self.on_batch: Callable[[int], None] | None = None  # called after each data_received with #responses

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        for cb in list(self.waiters.values()):
            if isinstance(cb, asyncio.Future) and not cb.done():
                cb.set_exception(ConnectionError("connection lost"))
        self.waiters.clear()

    def data_received(self, data: bytes) -> None:
        cmds = self.decoder.feed(data)
        waiters = self.waiters
        for cmd in cmds:
            cb = waiters.pop(cmd.opaque, None)
            if cb is None:
                continue
            if isinstance(cb, asyncio.Future):
                if not cb.done():
                    cb.set_result(cmd)
            else:
                cb(cmd)
        if self.on_batch is not None and cmds:
            self.on_batch(len(cmds))

    def next_opaque(self) -> int:
        return next(self.opaques)

    def write(self, data) -> None:
        self.transport.write(data)

    async def invoke(self, cmd: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
        cmd.opaque = self.next_opaque()
        cmd.serialize_type = SERIALIZE_ROCKETMQ
        fut = asyncio.get_running_loop().create_future()
        self.waiters[cmd.opaque] = fut
        self.transport.write(encode_frame_bytes(cmd))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.waiters.pop(cmd.opaque, None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(addr: str) -> Conn:
    host, port = addr.rsplit(":", 1)
    _, proto = await asyncio.get_running_loop().create_connection(Conn, host, int(port))
    sock = proto.transport.get_extra_info("socket")
    if sock is not None:
        import socket
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return proto


# ---------------------------------------------------------------- request builders

def send_cmd(topic: str, body: bytes, queue_id: int, properties: str = "", born_ts: int | str = 0,
             group: str = "bench_pg") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, create_send_message_request_header_v2({
        "producerGroup": group, "topic": topic, "defaultTopic": DEFAULT_TOPIC, "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": born_ts, "flag": 0, "properties": properties,
        "reconsumeTimes": 0, "unitMode": "false", "maxReconsumeTimes": 16}), body)


def props_string(props: dict[str, str]) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items())


def pull_cmd(topic: str, queue_id: int, offset: int, max_nums: int = 32, suspend_ms: int = 0,
             group: str = "bench_cg") -> RemotingCommand:
    flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_ms else 0)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": max_nums, "sysFlag": flag, "commitOffset": 0, "suspendTimeoutMillis": suspend_ms,
        "subscription": "*", "subVersion": 0, "expressionType": "TAG"})


async def create_topic(conn: Conn, topic: str, queues: int) -> None:
    r = await conn.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": DEFAULT_TOPIC, "readQueueNums": queues, "writeQueueNums": queues,
        "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}))
    if r.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"create topic {topic}: {r.code} {r.remark}")


async def max_offset(conn: Conn, topic: str, queue_id: int) -> int:
    r = await conn.invoke(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id}))
    if r.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"GET_MAX_OFFSET {topic}/{queue_id}: {r.code} {r.remark}")
    return int(r.ext_fields["offset"])


async def total_max_offset(conn: Conn, topic: str, queues: int) -> int:
    offs = await asyncio.gather(*(max_offset(conn, topic, q) for q in range(queues)))
    return sum(offs)
