"""The batch send body (SEND_BATCH_MESSAGE, or V2 with m=true): items of
`TOTALSIZE MAGIC(0) BODYCRC(0) FLAG BODYLEN BODY PROPLEN(2) PROPERTIES`."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from codec.errors import CodecError

_ITEM = struct.Struct(">iiiii")  # total, magic, crc, flag, bodyLen
_I16 = struct.Struct(">h")
MAX_BATCH_ITEMS = 100_000


@dataclass(slots=True)
class BatchItem:
    flag: int
    body: bytes
    properties: str


def decode_batch(body: bytes | bytearray | memoryview) -> list[BatchItem]:
    mv = memoryview(body)
    n = len(mv)
    pos = 0
    items: list[BatchItem] = []
    while pos < n:
        if n - pos < _ITEM.size + 2:
            raise CodecError("batch item truncated")
        total, _magic, _crc, flag, blen = _ITEM.unpack_from(mv, pos)
        if total < _ITEM.size + 2 or pos + total > n or blen < 0 or _ITEM.size + blen + 2 > total:
            raise CodecError(f"batch item size {total} / body {blen} out of range")
        p = pos + _ITEM.size
        item_body = bytes(mv[p:p + blen])
        p += blen
        (plen,) = _I16.unpack_from(mv, p)
        p += 2
        if plen < 0 or p + plen != pos + total:
            raise CodecError("batch item properties length does not match its size")
        try:
            props = bytes(mv[p:p + plen]).decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError("batch item properties are not UTF-8") from None
        items.append(BatchItem(flag, item_body, props))
        if len(items) > MAX_BATCH_ITEMS:
            raise CodecError("too many items in one batch")
        pos += total
    return items


def encode_batch(items: list[BatchItem] | list[tuple[int, bytes, str]]) -> bytes:
    out = bytearray()
    for it in items:
        flag, body, props = (it.flag, it.body, it.properties) if isinstance(it, BatchItem) else it
        pb = props.encode("utf-8") if isinstance(props, str) else bytes(props)
        total = _ITEM.size + len(body) + 2 + len(pb)
        out += _ITEM.pack(total, 0, 0, flag, len(body))
        out += body
        out += _I16.pack(len(pb))
        out += pb
    return bytes(out)
