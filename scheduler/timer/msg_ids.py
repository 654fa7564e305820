"""Offset msgIds of stored timer records (what the "accepted" / "due" / "delivered" events carry)."""

from __future__ import annotations

import ipaddress
import struct

from codec.buffers import BytesLike
from codec.cache import BoundedCache
from codec.msgid import offset_msg_id
from codec.record import POS_SYS_FLAG, store_host_pos

_I32 = struct.Struct(">i")
# store host bytes (ip + port) -> the offset msgId's text before the 16 hex digits of the offset
_MSG_ID_PREFIXES: BoundedCache[bytes, str] = BoundedCache("timer.msg_id_prefix", 1024)


def msg_id_prefix(rec: BytesLike) -> str:
    """The store-host part of a record's offset msgId (all but the 16 hex digits of the offset)."""
    sf = _I32.unpack_from(rec, POS_SYS_FLAG)[0]
    p = store_host_pos(sf)
    n = 20 if sf & 0x20 else 8
    host = bytes(rec[p:p + n])
    prefix = _MSG_ID_PREFIXES.get(host)
    if prefix is None:
        ip = str(ipaddress.ip_address(host[:n - 4]))
        prefix = _MSG_ID_PREFIXES.remember(host, offset_msg_id(ip, _I32.unpack_from(host, n - 4)[0], 0)[:-16])
    return prefix


def msg_id(rec: BytesLike, phys_offset: int) -> str:
    """Offset msgId of a record (store host bytes of the record itself; host text cached)."""
    return msg_id_prefix(rec) + f"{phys_offset:016X}"
