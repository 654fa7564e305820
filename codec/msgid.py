"""Message ids: the broker's offset msgId and the client-style UNIQ_KEY."""

from __future__ import annotations

import ipaddress
import itertools
import os
import random
import struct
import time
from datetime import datetime
from functools import lru_cache

from codec.errors import CodecError

_OFF4 = struct.Struct(">4siq")
_OFF6 = struct.Struct(">16siq")
_PORT = struct.Struct(">i")
_I64 = struct.Struct(">q")


@lru_cache(maxsize=256)
def _host_hex(ip: str, port: int) -> str:
    """Upper-case hex of storeHostIP ‖ storePort (a broker has one or two: cached)."""
    addr = ipaddress.ip_address(ip)
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return (addr.packed + _PORT.pack(port)).hex().upper()


def offset_msg_id(ip: str, port: int, phys_offset: int) -> str:
    """hex(storeHostIP ‖ storePort ‖ commitlogOffset): 32 hex chars for IPv4, 56 for IPv6."""
    if phys_offset < 0:
        return _host_hex(ip, port) + _I64.pack(phys_offset).hex().upper()
    return f"{_host_hex(ip, port)}{phys_offset:016X}"


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(ip, port, commitlog offset); the length of the id says IPv4 (32) or IPv6 (56)."""
    if not isinstance(msg_id, str) or len(msg_id) not in (32, 56):
        raise CodecError(f"offset msgId must have 32 or 56 hex chars: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise CodecError(f"offset msgId is not hex: {msg_id!r}") from None
    if len(raw) == 16:
        ip, port, off = _OFF4.unpack(raw)
    elif len(raw) == 28:
        ip, port, off = _OFF6.unpack(raw)
    else:
        raise CodecError(f"offset msgId has {len(msg_id)} chars, expected 32 or 56")
    return str(ipaddress.ip_address(ip)), port, off


def is_offset_msg_id(msg_id: str) -> bool:
    """True if `msg_id` reads as an offset msgId with a real port (1..65535). A UNIQ_KEY has the same
    length (32 hex chars) but its bytes 4..8 are the producer's pid and a hash, which as a port are far
    above 65535 (pid > 0), so the two id forms tell themselves apart."""
    try:
        _ip, port, off = decode_offset_msg_id(msg_id)
    except CodecError:
        return False
    return 0 < port <= 0xFFFF and off >= 0


_month = [0.0, 0.0]  # [start of this month, start of next month] as epoch seconds (local time)
_TAIL = struct.Struct(">iH")


def _month_start(now: float) -> float:
    if not (_month[0] <= now < _month[1]):
        d = datetime.fromtimestamp(now)
        start = datetime(d.year, d.month, 1)
        nxt = datetime(d.year + (d.month == 12), d.month % 12 + 1, 1)
        _month[0], _month[1] = start.timestamp(), nxt.timestamp()
    return _month[0]


class UniqIdGenerator:
    """UNIQ_KEYs in MessageClientIDSetter's layout: ip(4) pid(2) hash(4) msSinceMonthStart(4) counter(2).

    The broker makes one with its brokerIP1 (ids it assigns name the broker's host, as a Java
    broker's do); a client uses the module's default one.
    """

    __slots__ = ("_fix", "_counter")

    def __init__(self, ip: str = "127.0.0.1") -> None:
        addr = ipaddress.ip_address(ip)
        v4 = addr if isinstance(addr, ipaddress.IPv4Address) else (addr.ipv4_mapped or ipaddress.IPv4Address("127.0.0.1"))
        self._fix = struct.pack(">4shi", v4.packed, os.getpid() & 0x7FFF, random.getrandbits(31))
        self._counter = itertools.count(random.randrange(1 << 16))

    def new(self) -> str:
        now = time.time()
        ms = int((now - _month_start(now)) * 1000) & 0x7FFFFFFF
        return (self._fix + _TAIL.pack(ms, next(self._counter) & 0xFFFF)).hex().upper()


_default = UniqIdGenerator()


def new_uniq_id() -> str:
    """A UNIQ_KEY from this process's default generator (127.0.0.1: what a client without a known IP uses)."""
    return _default.new()
