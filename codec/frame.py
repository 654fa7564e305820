"""Remoting frames: `int32 totalLen | int32 (serType << 24 | headerLen) | header | body`.

`FrameDecoder` is incremental: feed it any chunking of the byte stream. It refuses a frame whose
length prefix is over the limit before buffering it, so a hostile peer cannot make it allocate.
"""

from __future__ import annotations

import struct

from codec.codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from codec.command import (
    RemotingCommand,
    decode_json_header,
    decode_rocketmq_header,
    encode_header,
)
from codec.errors import CodecError

MAX_FRAME = 16 * 1024 * 1024  # Java's LengthFieldBasedFrameDecoder maxFrameLength
_PREFIX = struct.Struct(">ii")
_I32 = struct.Struct(">i")


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix."""
    mv = memoryview(frame)
    if len(mv) < 4:
        raise CodecError("frame shorter than its header-length word")
    (word,) = _I32.unpack_from(mv, 0)
    ser = (word >> 24) & 0xFF
    hlen = word & 0xFFFFFF
    if 4 + hlen > len(mv):
        raise CodecError(f"header length {hlen} exceeds frame length {len(mv) - 4}")
    header = mv[4:4 + hlen]
    if ser == SERIALIZE_JSON:
        cmd = decode_json_header(header)
    elif ser == SERIALIZE_ROCKETMQ:
        cmd = decode_rocketmq_header(header)
    else:
        raise CodecError(f"unknown serialize type {ser}")
    cmd.body = bytes(mv[4 + hlen:])
    return cmd


def encode_frame(cmd: RemotingCommand) -> list:
    """Frame pieces for `transport.writelines`; body slices are passed through uncopied."""
    header = encode_header(cmd)
    body = cmd.body
    parts = list(body) if isinstance(body, list | tuple) else ([body] if len(body) else [])
    body_len = sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts)
    ser = SERIALIZE_ROCKETMQ if cmd.serialize_type == SERIALIZE_ROCKETMQ else SERIALIZE_JSON
    prefix = _PREFIX.pack(4 + len(header) + body_len, (ser << 24) | len(header))
    return [prefix, header, *parts]


def encode_frame_bytes(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) if isinstance(p, memoryview) else p for p in encode_frame(cmd))


class FrameDecoder:
    """Feed bytes, get whole commands. Raises CodecError on a malformed or oversized frame;
    after an error the stream is unusable and the connection should be closed."""

    __slots__ = ("max_frame", "_buf", "_pos")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._pos = 0

    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buf = self._buf
        buf += data
        out: list[RemotingCommand] = []
        pos = self._pos
        end = len(buf)
        while end - pos >= 4:
            (length,) = _I32.unpack_from(buf, pos)
            if length < 4 or length + 4 > self.max_frame:
                self._buf = bytearray()
                self._pos = 0
                raise CodecError(f"frame length {length} outside [4, {self.max_frame - 4}]")
            if end - pos - 4 < length:
                break
            start = pos + 4
            pos = start + length
            out.append(decode_frame(memoryview(buf)[start:pos]))
        if pos == end:
            buf.clear()
            pos = 0
        elif pos > 65536 and pos * 2 > end:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return out
