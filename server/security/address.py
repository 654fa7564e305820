"""Remote-address patterns of RocketMQ's plain ACL (whiteRemoteAddress, globalWhiteRemoteAddresses).

Forms (as RocketMQ's RemoteAddressStrategyFactory accepts them):
  ""                       matches nothing
  "*", "*.*.*.*"           matches everything (also "*:*:*:*:*:*:*:*")
  "192.168.0.{1,2}"        the listed last octets (IPv6: last group in braces)
  "192.168.0.1,10.0.0.3"   a comma-separated list of addresses
  "192.168.*.*", "192.168.1.1-100", "10.*"  range: the first `*` or `a-b` segment bounds the value there
  "192.168.0.1", "::1"     one address
A bad pattern raises ValueError naming it (the whole file is then refused, the old one kept).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

Matcher = Callable[[str], bool]


def _expand6(addr: str) -> str | None:
    try:
        ip = ipaddress.IPv6Address(addr)
    except ValueError:
        return None
    return ip.exploded.upper()


def _is_v4(addr: str) -> bool:
    try:
        ipaddress.IPv4Address(addr)
    except ValueError:
        return False
    return True


def _normalise(host: str) -> str:
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host


def _canon(addr: str) -> str:
    """Canonical form of one literal address (IPv4 as is, IPv6 fully expanded upper-case)."""
    if _is_v4(addr):
        return addr
    x = _expand6(addr)
    if x is None:
        raise ValueError(f"not an IP address: {addr!r}")
    return x


def _host_key(host: str) -> str:
    host = _normalise(host)
    if _is_v4(host):
        return host
    return _expand6(host) or host


def _range_v4(pattern: str) -> Matcher:
    parts = [p.strip() for p in pattern.split(".")]
    if not 1 <= len(parts) <= 4 or not parts[0].isdigit():
        raise ValueError(f"bad address range {pattern!r}")
    for index in range(1, len(parts)):
        seg = parts[index]
        if seg == "*":
            lo, hi = 0, 255
        elif "-" in seg:
            a, _, b = seg.partition("-")
            if not (a.isdigit() and b.isdigit()):
                raise ValueError(f"bad address range segment {seg!r} in {pattern!r}")
            lo, hi = int(a), int(b)
            if not (0 <= lo <= hi <= 255):
                raise ValueError(f"address range {seg!r} outside 0..255 in {pattern!r}")
        else:
            continue
        head = [p for p in parts[:index]]
        if not all(p.isdigit() and 0 <= int(p) <= 255 for p in head):
            raise ValueError(f"bad address prefix in {pattern!r}")
        tail = parts[index + 1:]
        if any(p != "*" for p in tail):
            raise ValueError(f"only '*' may follow a range segment in {pattern!r}")
        prefix = [int(p) for p in head]

        def match(host: str, prefix: list[int] = prefix, index: int = index, lo: int = lo, hi: int = hi) -> bool:
            host = _normalise(host)
            if not _is_v4(host):
                return False
            octets = [int(p) for p in host.split(".")]
            return octets[:index] == prefix and lo <= octets[index] <= hi
        return match
    raise ValueError(f"bad address range {pattern!r}")


def _range_v6(pattern: str) -> Matcher:
    groups = pattern.split(":")
    for index, seg in enumerate(groups):
        seg = seg.strip()
        if seg == "*":
            lo, hi = 0, 0xFFFF
        elif "-" in seg:
            a, _, b = seg.partition("-")
            lo, hi = int(a, 16), int(b, 16)
            if not (0 <= lo <= hi <= 0xFFFF):
                raise ValueError(f"IPv6 range {seg!r} outside 0..ffff in {pattern!r}")
        else:
            continue
        prefix = [int(g, 16) for g in groups[:index]]

        def match(host: str, prefix: list[int] = prefix, index: int = index, lo: int = lo, hi: int = hi) -> bool:
            x = _expand6(_normalise(host))
            if x is None:
                return False
            vals = [int(g, 16) for g in x.split(":")]
            return vals[:index] == prefix and lo <= vals[index] <= hi
        return match
    raise ValueError(f"bad IPv6 address range {pattern!r}")


def compile_pattern(pattern: str | None) -> Matcher:
    """A predicate `host -> bool` for one RocketMQ address pattern."""
    p = (pattern or "").strip()
    if not p:
        return lambda host: False
    if p in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda host: True
    if p.endswith("}"):
        head, brace, inner = p.rpartition("{")
        if not brace:
            raise ValueError(f"bad address set {p!r}")
        items = [s.strip() for s in inner[:-1].split(",") if s.strip()]
        if not items:
            raise ValueError(f"empty address set in {p!r}")
        allowed = frozenset(_canon(head + item) for item in items)
        return lambda host: _host_key(host) in allowed
    if "," in p:
        allowed = frozenset(_canon(s.strip()) for s in p.split(",") if s.strip())
        return lambda host: _host_key(host) in allowed
    if "*" in p or "-" in p:
        return _range_v6(p) if ":" in p else _range_v4(p)
    one = _canon(p)
    return lambda host: _host_key(host) == one
