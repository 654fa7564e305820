"""A tiny asyncio RocketMQ remoting client for the server tests, independent of codec/remoting.

JSON headers only (serialize type 0), opaque matching, server-initiated requests collected in a
queue (NOTIFY_CONSUMER_IDS_CHANGED). Also a minimal stored-record decoder and batch encoder, written
from message-format.md, so tests check the broker's bytes against the spec rather than our codec.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, TypedDict

_LEN = struct.Struct(">ii")
_ids = itertools.count(1)


@dataclass
class Reply:
    code: int
    remark: str | None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    header: dict[str, Any] = field(default_factory=dict)


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.pending: dict[int, asyncio.Future[Reply]] = {}
        self.requests: asyncio.Queue[Reply] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, addr: str) -> RawClient:
        host, port = addr.rsplit(":", 1)
        r, w = await asyncio.open_connection(host, int(port))
        return cls(r, w)

    async def _read(self) -> None:
        try:
            while True:
                total, word = _LEN.unpack(await self.reader.readexactly(8))
                assert word >> 24 == 0, "response not in JSON serialize type"
                hlen = word & 0xFFFFFF
                hdr = json.loads(await self.reader.readexactly(hlen))
                body = await self.reader.readexactly(total - 4 - hlen)
                ext = hdr.get("extFields") or {}
                if hdr.get("flag", 0) & 1:
                    assert all(isinstance(v, str) for v in ext.values()), f"non-string extFields {ext}"
                    fut = self.pending.pop(hdr["opaque"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(Reply(hdr["code"], hdr.get("remark"), ext, body, hdr))
                else:
                    self.requests.put_nowait(Reply(hdr["code"], hdr.get("remark"), ext, body, hdr))
        except (asyncio.IncompleteReadError, ConnectionError):
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("closed"))

    def _send(self, code: int, ext: dict[str, Any] | None, body: bytes, flag: int, version: int, language: str,
              opaque: int) -> None:
        hdr = json.dumps({"code": code, "language": language, "version": version, "opaque": opaque,
                          "flag": flag, "extFields": ext or {}, "serializeTypeCurrentRPC": "JSON"}).encode()
        self.writer.write(_LEN.pack(4 + len(hdr) + len(body), len(hdr)) + hdr + body)

    async def invoke(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"", version: int = 409,
                     language: str = "JAVA", timeout: float = 10.0) -> Reply:
        opaque = next(_ids)
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.pending[opaque] = fut
        self._send(code, ext, body, 0, version, language, opaque)
        return await asyncio.wait_for(fut, timeout)

    def pipeline(self, requests: list[tuple[int, dict[str, Any], bytes, bool]]) -> list[asyncio.Future[Reply] | None]:
        """Write every (code, ext, body, oneway) request in ONE write (so they arrive together); a
        future per request, None for the oneway ones."""
        frames: list[bytes] = []
        futs: list[asyncio.Future[Reply] | None] = []
        for code, ext, body, oneway in requests:
            opaque = next(_ids)
            hdr = json.dumps({"code": code, "language": "JAVA", "version": 409, "opaque": opaque,
                              "flag": 2 if oneway else 0, "extFields": ext or {},
                              "serializeTypeCurrentRPC": "JSON"}).encode()
            frames.append(_LEN.pack(4 + len(hdr) + len(body), len(hdr)) + hdr + body)
            fut: asyncio.Future[Reply] | None = None
            if not oneway:
                fut = self.pending[opaque] = asyncio.get_running_loop().create_future()
            futs.append(fut)
        self.writer.write(b"".join(frames))
        return futs

    def oneway(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> None:
        self._send(code, ext, body, 2, 409, "JAVA", next(_ids))

    async def close(self) -> None:
        self.writer.close()
        self.task.cancel()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


# ---- message bytes -------------------------------------------------------------------------
def props(**kv: object) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in kv.items())


def parse_props(s: str) -> dict[str, str]:
    out = {}
    for part in s.split("\x02"):
        k, sep, v = part.partition("\x01")
        if sep and k and v:
            out[k] = v
    return out


class RawRecord(TypedDict):
    """A stored record as `decode_records` reads it (message-format.md's field order)."""

    topic: str
    queue_id: int
    flag: int
    queue_offset: int
    phys: int
    sys_flag: int
    born_ts: int
    store_ts: int
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    reconsume: int
    body: bytes
    props: dict[str, str]
    raw_props: str


def decode_records(buf: bytes) -> list[RawRecord]:
    out: list[RawRecord] = []
    pos = 0
    while pos < len(buf):
        total, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = struct.unpack_from(">iiiiiqqiq", buf, pos)
        assert magic == -626843481, hex(magic & 0xFFFFFFFF)
        p = pos + 48
        born_host = (".".join(str(b) for b in buf[p:p + 4]), struct.unpack_from(">i", buf, p + 4)[0])
        store_ts = struct.unpack_from(">q", buf, p + 8)[0]
        store_host = (".".join(str(b) for b in buf[p + 16:p + 20]), struct.unpack_from(">i", buf, p + 20)[0])
        reconsume, _prep = struct.unpack_from(">iq", buf, p + 24)
        p += 36
        blen = struct.unpack_from(">i", buf, p)[0]
        body = bytes(buf[p + 4:p + 4 + blen])
        p += 4 + blen
        tlen = buf[p]
        topic = bytes(buf[p + 1:p + 1 + tlen]).decode()
        p += 1 + tlen
        plen = struct.unpack_from(">h", buf, p)[0]
        prop_s = bytes(buf[p + 2:p + 2 + plen]).decode()
        p += 2 + plen
        assert p - pos == total, (p - pos, total)
        assert crc == zlib.crc32(body) & 0x7FFFFFFF
        out.append({"topic": topic, "queue_id": qid, "flag": flag, "queue_offset": qoff, "phys": phys,
                    "sys_flag": sysflag, "born_ts": born_ts, "store_ts": store_ts, "born_host": born_host,
                    "store_host": store_host, "reconsume": reconsume, "body": body,
                    "props": parse_props(prop_s), "raw_props": prop_s})
        pos += total
    return out


def encode_batch(items: list[tuple[bytes, str]], flag: int = 0) -> bytes:
    out = bytearray()
    for body, prop_s in items:
        p = prop_s.encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, flag, len(body)) + body
        out += struct.pack(">h", len(p)) + p
    return bytes(out)
