"""Remoting frames: `int32 totalLen | int32 (serType << 24 | headerLen) | header | body`.

`FrameDecoder` is incremental: feed it any chunking of the byte stream. It refuses a frame whose
length prefix is over the limit before buffering it, so a hostile peer cannot make it allocate, and
(with `max_header`) a frame whose header-length word is over the header limit as soon as that word
arrives, before the header is buffered or parsed: headers are parsed before any ACL check, so
their size is what an unauthenticated peer can make the broker work on.
"""

from __future__ import annotations

import struct

from codec.buffers import BytesLike
from codec.codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from codec.command import (
    RemotingCommand,
    decode_json_header,
    decode_rocketmq_header,
    encode_header,
)
from codec.errors import CodecError

MAX_FRAME = 16 * 1024 * 1024  # Java's LengthFieldBasedFrameDecoder maxFrameLength
# the broker's default header limit (broker.conf maxHeaderSize): a send's properties are at most
# 32,767 characters (RocketMQ's limit), JSON-escaped at most 6 bytes each, plus the other fields
MAX_HEADER = 256 * 1024
NO_HEADER_LIMIT = 0xFFFFFF  # what the 24-bit header-length field can say
# [int32 length of what follows][int32 serialize type << 24 | header length]: every frame starts so
FRAME_PREFIX = struct.Struct(">ii")
_PREFIX = FRAME_PREFIX
_PREFIX_U = struct.Struct(">iI")  # the decoder's view: the serialize-type byte unsigned
_I32 = struct.Struct(">i")
# FrameDecoder.feed's work budget counts each frame's header bytes plus this (a frame's fixed cost:
# its command object, its body copy), so a run of tiny frames is bounded too
FRAME_COST = 256
_NO_BUDGET = 1 << 62  # FrameDecoder._frames without a budget: one compare per frame either way


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


def encode_frame(cmd: RemotingCommand) -> list[BytesLike]:
    """Frame pieces for `transport.writelines`; body slices are passed through uncopied."""
    header = encode_header(cmd)
    hlen = len(header)
    if hlen > 0xFFFFFF:
        raise CodecError(f"header of {hlen} bytes does not fit the 24-bit header length")
    body = cmd.body
    if isinstance(body, list | tuple):
        parts = [p for p in body if len(p)]
        body_len = sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts)
    elif isinstance(body, memoryview):
        body_len = body.nbytes
        parts = [body] if body_len else []
    else:
        body_len = len(body)
        parts = [body] if body_len else []
    ser = SERIALIZE_ROCKETMQ if cmd.serialize_type == SERIALIZE_ROCKETMQ else SERIALIZE_JSON
    return [_PREFIX.pack(4 + hlen + body_len, (ser << 24) | hlen), header, *parts]


def encode_frame_bytes(cmd: RemotingCommand) -> bytes:
    return b"".join(encode_frame(cmd))


class FrameDecoder:
    """Feed bytes, get whole commands. Raises CodecError on a malformed or oversized frame;
    after an error the stream is unusable (every later feed raises too): close the connection.

    The length prefix is checked as soon as its 4 bytes arrive, so at most `max_frame` bytes of a
    frame are ever buffered. The buffer is one bytearray plus a read offset, compacted only when
    the consumed prefix dominates it (no re-copy of a growing buffer per chunk)."""

    __slots__ = ("max_frame", "max_header", "_buf", "_pos", "_failed", "unpinned", "cost", "more")

    def __init__(self, max_frame: int = MAX_FRAME, max_header: int = NO_HEADER_LIMIT) -> None:
        self.max_frame = max_frame
        self.max_header = max_header
        self._buf = bytearray()
        self._pos = 0
        self._failed: str | None = None
        self.unpinned = 0
        self.cost = 0  # the last feed's work: header bytes decoded + FRAME_COST per frame
        self.more = False  # the last feed stopped at its budget: whole frames may wait (feed(b"") for them)

    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def _fail(self, why: str) -> CodecError:
        self._failed = why
        self._buf = bytearray()  # a fresh object: a memoryview held by a traceback cannot pin it
        self._pos = 0
        return CodecError(why)

    def _frames(self, mv: memoryview, pos: int, out: list[RemotingCommand], budget: int = -1) -> int:
        """Decode every whole frame of mv from pos into out; returns where the first partial one starts.

        `decode_frame` inlined (it stays the reference: tests/codec/test_frame.py feeds both): the two
        prefix words in one unpack, which gives the header-length limit check for free, and a header
        of either serialize type that fits its frame decoded without a frame view or a call; anything
        else goes through decode_frame, which names what is wrong.

        `budget` (>= 0): stop before a frame once the header bytes decoded (+ FRAME_COST each) reach it;
        the first frame is always decoded (progress); `self.more` says it stopped there."""
        end = len(mv)
        cost = 0
        if budget < 0:
            budget = _NO_BUDGET
        first, frame_cost = pos, FRAME_COST
        max_frame, max_header = self.max_frame, self.max_header
        prefix = _PREFIX_U.unpack_from
        while end - pos >= 4:
            if end - pos < 8:  # the length word only (a whole frame is at least 8 bytes)
                (length,) = _I32.unpack_from(mv, pos)
                if length < 4 or length + 4 > max_frame:
                    raise self._fail(f"frame length {length} outside [4, {max_frame - 4}]")
                break
            length, word = prefix(mv, pos)
            if length < 4 or length + 4 > max_frame:
                raise self._fail(f"frame length {length} outside [4, {max_frame - 4}]")
            hlen = word & 0xFFFFFF
            if hlen > max_header:
                raise self._fail(f"header length {hlen} over the limit {max_header}")
            if end - pos - 4 < length:
                break
            cost += hlen + frame_cost
            if cost > budget and pos != first:  # over the budget, and not the first frame (progress)
                cost -= hlen + frame_cost
                self.more = True
                break
            start = pos + 4
            pos = start + length
            hs = start + 4
            he = hs + hlen
            ser = word >> 24
            try:
                if he <= pos and ser == SERIALIZE_ROCKETMQ:
                    cmd = decode_rocketmq_header(mv[hs:he])
                elif he <= pos and ser == SERIALIZE_JSON:
                    cmd = decode_json_header(mv[hs:he])
                else:
                    out.append(decode_frame(mv[start:pos]))
                    continue
                if he < pos:
                    cmd.body = bytes(mv[he:pos])
                out.append(cmd)
            except CodecError as e:
                raise self._fail(str(e)) from None
        self.cost = cost
        return pos

    def feed(self, data: bytes | bytearray | memoryview, budget: int = -1) -> list[RemotingCommand]:
        """The whole frames of what was buffered plus `data`, as commands. With `budget` >= 0 the work is
        bounded per call, not only in size: decoding stops before the frame that would take the header
        bytes decoded (+ FRAME_COST per frame) past it (at least one frame is decoded); `more` is then
        True and `feed(b"", ...)` decodes the next share of what is buffered. `cost` is this call's."""
        if self._failed is not None:
            raise CodecError(f"decoder failed earlier: {self._failed}")
        self.more = False
        self.cost = 0
        buf = self._buf
        out: list[RemotingCommand] = []
        if not buf and len(data) >= 4:
            # fast path: nothing buffered, decode whole frames straight from the caller's chunk
            mv = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
            pos = self._frames(mv, 0, out, budget)
            if pos < len(mv):
                try:
                    self._buf += mv[pos:]
                except BufferError:
                    self.unpinned += 1
                    self._buf = bytearray(mv[pos:])
            self._pos = 0
            return out
        try:
            buf += data
        except BufferError:  # a view of the buffer is still alive (see _unpin): continue in a copy
            buf = self._unpin(buf, self._pos)
            buf += data
        end = len(buf)
        with memoryview(buf) as mv:  # released before the buffer is resized below
            pos = self._frames(mv, self._pos, out, budget)
        try:
            if pos == end:
                buf.clear()
                pos = 0
            elif pos > 65536 and pos * 2 > end:
                del buf[:pos]
                pos = 0
        except BufferError:
            self._unpin(buf, pos)
            pos = 0
        self._pos = pos
        return out

    def buffer(self, data: bytes | bytearray | memoryview) -> None:
        """Keep `data` for a later `feed` without decoding anything now (the caller's budget is spent)."""
        if self._failed is not None:
            raise CodecError(f"decoder failed earlier: {self._failed}")
        try:
            self._buf += data
        except BufferError:
            self._unpin(self._buf, self._pos)
            self._buf += data

    def _unpin(self, buf: bytearray, pos: int) -> bytearray:
        """Replace the buffer by a copy of its unconsumed part when it cannot be resized because a
        memoryview of it is still alive somewhere (garbage not yet collected, observed under heavy
        pipelining): resizing would raise BufferError and cost the connection. The old buffer lives on
        until that view goes. Counted in `unpinned`."""
        self.unpinned += 1
        self._buf = bytearray(buf[pos:])  # slicing a bytearray copies: no new view
        self._pos = 0
        return self._buf
