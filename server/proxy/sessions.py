"""The proxy's 5.x sessions (server.grpc.backend.ClientSessions): which Telemetry streams publish which
topics, so a broker's CHECK_TRANSACTION_STATE for a half message (its producer group is the topic, as Apache's
proxy sends it) reaches a producer of that topic as RecoverOrphanedTransactionCommand."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from server.grpc.v2 import definition_pb2 as pb

if TYPE_CHECKING:
    from server.grpc.telemetry import TelemetryChannel


class ProxySessions:
    def __init__(self) -> None:
        self.producers: dict[str, dict[str, TelemetryChannel]] = {}  # producer group (topic) -> client id -> channel
        self.on_new_group: Callable[[], None] = lambda: None  # a group got its first producer

    def register(self, chan: TelemetryChannel, settings: pb.Settings, language: str) -> None:
        if settings.WhichOneof("pub_sub") == "publishing":
            for topic in settings.publishing.topics:
                if topic.name not in self.producers:
                    self.producers[topic.name] = {}
                    self.on_new_group()
                self.producers[topic.name][chan.client_id] = chan

    def closed(self, chan: TelemetryChannel) -> None:
        for group in [g for g, chans in self.producers.items() if chans.get(chan.client_id) is chan]:
            del self.producers[group][chan.client_id]
            if not self.producers[group]:
                del self.producers[group]

    def producer(self, group: str) -> TelemetryChannel | None:
        """An open session publishing `group`'s topic, None when there is none."""
        for chan in self.producers.get(group, {}).values():
            if not chan.closed:
                return chan
        return None

    def groups(self) -> list[str]:
        return list(self.producers)
