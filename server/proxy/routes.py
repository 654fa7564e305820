"""Topic routes from the name server (GET_ROUTEINFO_BY_TOPIC), cached for `route_ttl_ms`, bounded."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from codec.bodies import QueueData, TopicRouteData, decode_topic_route
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from server.grpc.status import Code, GrpcError

MAX_CACHED_ROUTES = 4096
MASTER_ID = 0
PERM_WRITE, PERM_READ = 2, 4


@dataclass(frozen=True, slots=True)
class CachedRoute:
    route: TopicRouteData
    at: float  # loop time of the lookup
    # `writable_reference()` computed once: every send of the route's lifetime picks from it
    _writable: list[tuple[QueueData, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_writable", self.writable_reference())

    def master(self, broker_name: str) -> str | None:
        for b in self.route.broker_datas:
            if b.broker_name == broker_name:
                return b.broker_addrs.get(MASTER_ID)
        return None

    def writable(self) -> list[tuple[QueueData, int]]:
        """`writable_reference()` as computed when the route was cached (the caller must not change it)."""
        return self._writable

    def writable_reference(self) -> list[tuple[QueueData, int]]:
        """(queue data, queue id) of every writable queue whose broker has a master, in a stable order."""
        out: list[tuple[QueueData, int]] = []
        for q in sorted(self.route.queue_datas, key=lambda q: q.broker_name):
            if q.perm & PERM_WRITE and self.master(q.broker_name):
                out.extend((q, i) for i in range(q.write_queue_nums))
        return out

    def readable_brokers(self) -> list[str]:
        return sorted(q.broker_name for q in self.route.queue_datas
                      if q.perm & PERM_READ and q.read_queue_nums > 0 and self.master(q.broker_name))


class NameServerRoutes:
    def __init__(self, client: RemotingClient, namesrv_addrs: list[str], ttl_ms: int) -> None:
        self.client = client
        self.namesrv_addrs = namesrv_addrs
        self.ttl_s = ttl_ms / 1000
        self._cache: OrderedDict[str, CachedRoute] = OrderedDict()
        self._next = 0

    def cached(self, topic: str) -> CachedRoute | None:
        """The topic's route while it is fresh (what `route` answers without asking), else None."""
        hit = self._cache.get(topic)
        if hit is not None and asyncio.get_running_loop().time() - hit.at < self.ttl_s:
            return hit
        return None

    async def route(self, topic: str, fresh: bool = False) -> CachedRoute:
        """The topic's route; GrpcError TOPIC_NOT_FOUND when the name server knows none."""
        now = asyncio.get_running_loop().time()
        hit = self._cache.get(topic)
        if hit is not None and not fresh and now - hit.at < self.ttl_s:
            return hit
        resp = await self._ask(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            self._cache.pop(topic, None)
            raise GrpcError(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist (no route on the name server)")
        if resp.code != ResponseCode.SUCCESS:
            raise GrpcError(Code.INTERNAL_SERVER_ERROR, f"name server answered {resp.code}: {resp.remark}")
        try:
            route = decode_topic_route(resp.body_bytes())
        except CodecError as e:
            raise GrpcError(Code.INTERNAL_SERVER_ERROR, f"name server's route of {topic} is unreadable: {e}") from None
        cached = CachedRoute(route, now)
        self._cache[topic] = cached
        self._cache.move_to_end(topic)
        while len(self._cache) > MAX_CACHED_ROUTES:
            self._cache.popitem(last=False)
        return cached

    async def _ask(self, cmd: RemotingCommand) -> RemotingCommand:
        """The first name server that answers, starting after the last one that failed."""
        last: Exception | None = None
        for i in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[(self._next + i) % len(self.namesrv_addrs)]
            try:
                return await self.client.invoke(addr, cmd)
            except (OSError, RemotingError) as e:
                last = e
                self._next = (self._next + i + 1) % len(self.namesrv_addrs)
        raise GrpcError(Code.INTERNAL_SERVER_ERROR, f"no name server answered: {last!r}")
