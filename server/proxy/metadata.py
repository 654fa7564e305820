"""What the proxy reads of the brokers' metadata, as Apache's 5.x proxy in cluster mode does: a topic's
`message.type` attribute (GET_TOPIC_CONFIG: the message types its route accepts) and a consumer group's
retryMaxTimes and consumeMessageOrderly (GET_SUBSCRIPTIONGROUP_CONFIG: the settings a 5.x consumer is told),
each from a master broker of the topic's route, cached for the route's time to live, bounded."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from typing import Any

import structlog

from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from server.grpc.backend import MessageType, accepted_types
from server.grpc.status import GrpcError
from server.proxy.routes import MASTER_ID, NameServerRoutes
from server.topic_attributes import MESSAGE_TYPE

log = structlog.get_logger(__name__)

MAX_CACHED = 4096
REQUEST_TIMEOUT_S = 3.0


class BrokerMetadata:
    def __init__(self, client: RemotingClient, routes: NameServerRoutes, ttl_ms: int) -> None:
        self.client = client
        self.routes = routes
        self.ttl_s = ttl_ms / 1000
        self._topics: OrderedDict[str, tuple[float, tuple[MessageType, ...]]] = OrderedDict()
        self._groups: OrderedDict[str, tuple[float, dict[str, Any] | None]] = OrderedDict()

    async def _ask(self, topic: str, code: int, ext: dict[str, str]) -> dict[str, Any] | None:
        """The JSON body of the first master of `topic`'s route that has the answer; None when none has."""
        try:
            route = await self.routes.route(topic)
        except GrpcError:
            return None
        for b in sorted(route.route.broker_datas, key=lambda b: b.broker_name):
            addr = b.broker_addrs.get(MASTER_ID)
            if not addr:
                continue
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(code, ext), REQUEST_TIMEOUT_S)
            except (OSError, RemotingError) as e:
                log.info("proxy.metadata_unanswered", broker=addr, code=code, error=repr(e))
                continue
            if resp.code == ResponseCode.SUCCESS and resp.body_len():
                try:
                    body = json.loads(resp.body_bytes())
                except ValueError:
                    continue
                if isinstance(body, dict):
                    return body
        return None

    @staticmethod
    def _put(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > MAX_CACHED:
            cache.popitem(last=False)

    def cached_accepts(self, topic: str) -> tuple[MessageType, ...] | None:
        """`accepts` while its answer is fresh (no broker asked), else None."""
        hit = self._topics.get(topic)
        if hit is not None and asyncio.get_running_loop().time() - hit[0] < self.ttl_s:
            return hit[1]
        return None

    async def accepts(self, topic: str) -> tuple[MessageType, ...]:
        now = asyncio.get_running_loop().time()
        hit = self._topics.get(topic)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        body = await self._ask(topic, RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
        attrs = body.get("attributes") if body else None
        value = attrs.get(MESSAGE_TYPE, "") if isinstance(attrs, dict) else ""
        out = accepted_types(str(value))
        self._put(self._topics, topic, (now, out))
        return out

    async def group(self, group: str, topic: str) -> dict[str, Any] | None:
        """The group's SubscriptionGroupConfig JSON, asked of the brokers of `topic` (one it subscribes)."""
        now = asyncio.get_running_loop().time()
        hit = self._groups.get(group)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        body = await self._ask(topic, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group}) if topic else None
        self._put(self._groups, group, (now, body))
        return body
