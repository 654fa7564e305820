"""A tiny raw-socket peer for the remoting tests, written from remoting-protocol.md §1-§3.

It frames and parses by hand (struct + json) on purpose, so the tests check our bytes against the
spec instead of against our own codec. Frames are read in order from a plain asyncio stream.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_PREFIX = struct.Struct(">ii")
_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


@dataclass
class Frame:
    ser_type: int  # top byte of the second int: 0 JSON, 1 ROCKETMQ
    code: int
    opaque: int
    flag: int
    remark: str | None
    ext: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""


def json_frame(code: int, opaque: int, flag: int = 0, ext: dict[str, Any] | None = None, body: bytes = b"",
               remark: str | None = None) -> bytes:
    hdr: dict[str, Any] = {"code": code, "flag": flag, "language": "JAVA", "opaque": opaque, "version": 409}
    if ext:
        hdr["extFields"] = ext
    if remark is not None:
        hdr["remark"] = remark
    h = json.dumps(hdr).encode()
    return _PREFIX.pack(4 + len(h) + len(body), len(h)) + h + body


def rocketmq_frame(code: int, opaque: int, flag: int = 0, ext: dict[str, str] | None = None,
                   body: bytes = b"") -> bytes:
    h = bytearray(_FIXED.pack(code, 0, 409, opaque, flag))
    h += _I32.pack(0)  # no remark
    area = bytearray()
    for k, v in (ext or {}).items():
        kb, vb = k.encode(), v.encode()
        area += _I16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
    h += _I32.pack(len(area)) + area
    return _PREFIX.pack(4 + len(h) + len(body), (1 << 24) | len(h)) + bytes(h) + body


def parse(ser: int, header: bytes, body: bytes) -> Frame:
    if ser == 0:
        d = json.loads(header)
        return Frame(0, d["code"], d["opaque"], d.get("flag", 0), d.get("remark"), d.get("extFields") or {}, body)
    assert ser == 1, f"unknown serialize type {ser}"
    code, _lang, _ver, opaque, flag = _FIXED.unpack_from(header, 0)
    pos = _FIXED.size
    (rlen,) = _I32.unpack_from(header, pos)
    pos += 4
    remark = header[pos:pos + rlen].decode() if rlen else None
    pos += rlen
    (elen,) = _I32.unpack_from(header, pos)
    pos += 4
    end, ext = pos + elen, {}
    while pos < end:
        (kl,) = _I16.unpack_from(header, pos)
        k = header[pos + 2:pos + 2 + kl].decode()
        pos += 2 + kl
        (vl,) = _I32.unpack_from(header, pos)
        ext[k] = header[pos + 4:pos + 4 + vl].decode()
        pos += 4 + vl
    return Frame(1, code, opaque, flag, remark, ext, body)


class RawPeer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1", rcvbuf: int | None = None,
                      source: str | None = None) -> RawPeer:
        """Connect; `rcvbuf` shrinks SO_RCVBUF before connecting (turns off loopback autotuning);
        `source` binds the client's address first (any 127.x.y.z is this host on Linux loopback)."""
        if rcvbuf is None:
            r, w = await asyncio.open_connection(host, port, local_addr=(source, 0) if source else None)
            return cls(r, w)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
        r, w = await asyncio.open_connection(sock=sock, limit=rcvbuf)
        return cls(r, w)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def read_frame(self, timeout: float = 5.0) -> Frame:
        async def read() -> Frame:
            total, word = _PREFIX.unpack(await self.reader.readexactly(8))
            hlen = word & 0xFFFFFF
            header = await self.reader.readexactly(hlen)
            body = await self.reader.readexactly(total - 4 - hlen)
            return parse(word >> 24 & 0xFF, header, body)

        return await asyncio.wait_for(read(), timeout)

    async def request(self, code: int, opaque: int, ext: dict[str, Any] | None = None, timeout: float = 5.0) -> Frame:
        self.send(json_frame(code, opaque, 0, ext))
        return await self.read_frame(timeout)

    async def wait_eof(self, timeout: float = 5.0) -> bytes:
        """Read until the server closes; returns whatever arrived before EOF."""
        return await asyncio.wait_for(self.reader.read(-1), timeout)

    def close(self) -> None:
        self.writer.close()


async def wait_for_condition(pred: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    """Wait (bounded) until `pred()` holds; for states that have no event of their own."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)
