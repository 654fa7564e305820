"""Every port a broker listens on, named by the broker.conf key that sets it.

`broker_listeners(cfg)` lists them (remoting, its VIP channel, HA, gRPC, metrics); `BrokerConfig.validate`
refuses two of them on one port, `probe(listeners)` refuses a port another process holds before the store
is opened, and `bound(key, port)` turns a bind failure at start into the same `ListenError`. The console
scripts print a `ListenError` as one line naming the key and the port and exit 1.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Listener:
    key: str  # the broker.conf key that sets the port (the VIP channel: "listenPort-2")
    host: str
    port: int
    purpose: str


class ListenError(OSError):
    """A port that cannot be listened on; `key` names the broker.conf key that chose it."""

    def __init__(self, key: str, host: str, port: int, reason: str) -> None:
        super().__init__(f"{key}: cannot listen on {host}:{port}: {reason}")
        self.key = key
        self.port = port
        self.reason = reason


def clash(listeners: Iterable[Listener]) -> tuple[Listener, Listener] | None:
    """The first two listeners that would share a port, or None."""
    seen: dict[int, Listener] = {}
    for lst in listeners:
        if lst.port in seen:
            return seen[lst.port], lst
        seen[lst.port] = lst
    return None


def probe(listeners: Iterable[Listener], reuse_port: bool = False) -> None:
    """Bind each port the way the servers do (SO_REUSEADDR: a TIME_WAIT remnant is no clash; with `reuse_port`
    SO_REUSEPORT too, so a port other SO_REUSEPORT listeners of this user share is no clash either) and let it
    go; raise ListenError for the first one another process holds."""
    for lst in listeners:
        if lst.port == 0:
            continue
        family = socket.AF_INET6 if ":" in lst.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                s.bind((lst.host, lst.port))
            except OSError as e:
                raise ListenError(lst.key, lst.host, lst.port, e.strerror or str(e)) from None


@contextmanager
def bound(key: str, host: str, port: int) -> Iterator[None]:
    """Around a server's bind: its OSError (or grpc's RuntimeError) becomes a ListenError naming `key`."""
    try:
        yield
    except ListenError:
        raise
    except (OSError, RuntimeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ListenError(key, host, port, reason) from None
