"""Registered producer/consumer channels (from HEART_BEAT), per group.

Consumer groups map connections to client ids and hold the group's subscriptions (with subVersion),
message model and consume-from-where. Membership changes (a new channel joins, a client
unregisters, its connection closes, or it stays silent past the expiry) call `notify(conn, group)`
for every remaining consumer channel of that group (the broker turns that into a oneway
NOTIFY_CONSUMER_IDS_CHANGED).

Expiry is event-driven: one `loop.call_at` per connection at `last_heartbeat + timeout`; when it
fires it either evicts the connection or re-arms at the newer deadline (heartbeats never touch the
timer, so they stay O(1)). No periodic scan.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog

if TYPE_CHECKING:
    from codec.command import RemotingCommand

log = structlog.get_logger(__name__)


class ClientConn(Protocol):
    """A client's connection as the ClientManager keeps it and the broker talks through it: a remoting
    Connection, or a gRPC client's TelemetryChannel (server.grpc.telemetry)."""

    @property
    def remote_addr(self) -> tuple[str, int]: ...

    def invoke(self, cmd: RemotingCommand, timeout: float = ...) -> Awaitable[RemotingCommand]: ...

    def invoke_oneway(self, cmd: RemotingCommand) -> object: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags: tuple[str, ...] = ()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = "TAG"

    @property
    def match_all(self) -> bool:
        return self.sub_string in ("", "*")


@dataclass(slots=True)
class ClientChannel:
    conn: ClientConn
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update: float = 0.0


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[ClientConn, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]


def _peer(conn: ClientConn) -> str:
    ip, port = conn.remote_addr
    return f"{ip}:{port}"


class ClientManager:
    def __init__(self, notify: Callable[[ClientConn, str], None] | None = None,
                 expired_timeout_s: float = 120.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.notify = notify
        self.expired_timeout_s = expired_timeout_s
        self.clock = clock
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[ClientConn, ClientChannel]] = {}
        self._last_seen: dict[ClientConn, float] = {}      # conn -> last heartbeat (clock time)
        self._timers: dict[ClientConn, asyncio.TimerHandle] = {}
        # conn -> (client id, {"producer:<group>", "consumer:<group>"}) while connected: the disconnect
        # record names the client even after it unregistered its groups
        self._identity: dict[ClientConn, tuple[str, set[str]]] = {}

    # ---- consumers -----------------------------------------------------------------------
    def register_consumer(self, group: str, conn: ClientConn, client_id: str, language: str = "JAVA", version: int = 0,
                          consume_type: str = "CONSUME_PASSIVELY", message_model: str = "CLUSTERING",
                          consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
                          subscriptions: Iterable[SubscriptionData] = ()) -> bool:
        """Register/refresh one consumer channel. Returns True when the group's membership changed."""
        now = self.clock()
        info = self.consumers.get(group)
        if info is None:
            info = self.consumers[group] = ConsumerGroupInfo(group)
        info.consume_type, info.message_model = consume_type, message_model
        info.consume_from_where = consume_from_where
        ch = info.channels.get(conn)
        joined = ch is None or ch.client_id != client_id
        if ch is None:
            ch = info.channels[conn] = ClientChannel(conn, client_id, language, version, now)
        else:
            ch.client_id, ch.language, ch.version, ch.last_update = client_id, language, version, now
        self._update_subscriptions(info, subscriptions)
        self._seen(conn, now)
        self._identity.setdefault(conn, (client_id, set()))[1].add(f"consumer:{group}")
        if joined:
            log.info("client.connected", role="consumer", group=group, client_id=client_id, remote=_peer(conn),
                     language=language, version=version, consumers=len(info.channels))
            self._notify_group(group)
        return joined

    @staticmethod
    def _update_subscriptions(info: ConsumerGroupInfo, subs: Iterable[SubscriptionData]) -> None:
        new = {s.topic: s for s in subs}
        for topic, sub in new.items():
            old = info.subscriptions.get(topic)
            if old is None or old.sub_version < sub.sub_version or old.sub_string != sub.sub_string:
                info.subscriptions[topic] = sub
        # Java drops subscriptions a heartbeat no longer carries (updateSubscription)
        for topic in [t for t in info.subscriptions if t not in new]:
            del info.subscriptions[topic]

    def unregister_consumer(self, group: str, conn: ClientConn | None = None, client_id: str | None = None) -> bool:
        info = self.consumers.get(group)
        if info is None:
            return False
        victims = [c for c, ch in info.channels.items()
                   if (conn is not None and c is conn) or (client_id is not None and ch.client_id == client_id)]
        for c in victims:
            del info.channels[c]
        if not victims:
            return False
        log.info("client.consumer_unregistered", group=group, consumers=len(info.channels))
        if not info.channels:
            del self.consumers[group]
        else:
            self._notify_group(group)
        return True

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumers.get(group)
        return info.client_ids() if info else []

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.consumers.get(group)
        return info.subscriptions.get(topic) if info else None

    # ---- producers -----------------------------------------------------------------------
    def register_producer(self, group: str, conn: ClientConn, client_id: str, language: str = "JAVA",
                          version: int = 0) -> None:
        now = self.clock()
        chans = self.producers.setdefault(group, {})
        ch = chans.get(conn)
        if ch is None:
            chans[conn] = ClientChannel(conn, client_id, language, version, now)
            self._identity.setdefault(conn, (client_id, set()))[1].add(f"producer:{group}")
            log.info("client.connected", role="producer", group=group, client_id=client_id, remote=_peer(conn),
                     language=language, version=version)
        else:
            ch.last_update = now
        self._seen(conn, now)

    def unregister_producer(self, group: str, conn: ClientConn | None = None, client_id: str | None = None) -> None:
        chans = self.producers.get(group)
        if not chans:
            return
        for c in [c for c, ch in chans.items() if c is conn or (client_id and ch.client_id == client_id)]:
            del chans[c]
        if not chans:
            del self.producers[group]

    # ---- channel lifecycle ---------------------------------------------------------------
    def channel_closed(self, conn: ClientConn, reason: str = "closed") -> None:
        """Forget a connection everywhere; notify the consumer groups it belonged to."""
        t = self._timers.pop(conn, None)
        if t is not None:
            t.cancel()
        self._last_seen.pop(conn, None)
        remote = _peer(conn)
        logged: set[str] = set()
        for group in [g for g, info in self.consumers.items() if conn in info.channels]:
            info = self.consumers[group]
            ch = info.channels.pop(conn)
            logged.add(f"consumer:{group}")
            log.info("client.disconnected", role="consumer", group=group, client_id=ch.client_id, remote=remote,
                     reason=reason, consumers=len(info.channels))
            if not info.channels:
                del self.consumers[group]
            else:
                self._notify_group(group)
        for group in [g for g, chans in self.producers.items() if conn in chans]:
            ch = self.producers[group].pop(conn)
            logged.add(f"producer:{group}")
            log.info("client.disconnected", role="producer", group=group, client_id=ch.client_id, remote=remote,
                     reason=reason)
            if not self.producers[group]:
                del self.producers[group]
        ident = self._identity.pop(conn, None)
        if ident is not None:  # groups it unregistered before closing
            client_id, roles = ident
            for r in sorted(roles - logged):
                role, _, group = r.partition(":")
                log.info("client.disconnected", role=role, group=group, client_id=client_id, remote=remote,
                         reason=reason)
        elif not logged:  # never sent a heartbeat: an admin tool, a name-server lookup, a probe
            log.info("client.disconnected", role="other", remote=remote, reason=reason)

    def _seen(self, conn: ClientConn, now: float) -> None:
        self._last_seen[conn] = now
        if conn not in self._timers:
            self._arm(conn, now + self.expired_timeout_s)

    def _arm(self, conn: ClientConn, deadline: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit use): expiry is checked by expire_now()
            return
        delay = max(0.0, deadline - self.clock())
        self._timers[conn] = loop.call_at(loop.time() + delay, self._expiry_due, conn)

    def _expiry_due(self, conn: ClientConn) -> None:
        self._timers.pop(conn, None)
        last = self._last_seen.get(conn)
        if last is None:
            return
        deadline = last + self.expired_timeout_s
        if self.clock() >= deadline:
            log.warning("client.channel_expired", silent_s=round(self.clock() - last, 1))
            self.channel_closed(conn, reason="expired")
            try:
                conn.close()
            except Exception:  # closing an already broken transport
                pass
        else:
            self._arm(conn, deadline)

    def expire_now(self) -> None:
        for conn in list(self._last_seen):
            self._expiry_due(conn)

    def shutdown(self) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()

    def _notify_group(self, group: str) -> None:
        info = self.consumers.get(group)
        if info is None or self.notify is None:
            return
        for conn in list(info.channels):
            try:
                self.notify(conn, group)
            except Exception as e:  # a dead peer must not break registration
                log.debug("client.notify_failed", group=group, error=str(e))
