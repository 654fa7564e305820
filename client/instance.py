"""ClientInstance: one remoting client, the name server, topic routes and heartbeats.

Every Producer / PushConsumer / PullConsumer owns one instance (its own connections), so the broker
sees one channel per client id, like one Java MQClientInstance.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, Protocol, TypedDict

import structlog

from codec.command import RemotingCommand
from remoting.client import RemotingClient
from remoting.connection import Connection

from . import _wire as w
from .message import MessageQueue


class ConsumerDataJson(TypedDict):
    """One entry of a heartbeat's consumerDataSet (fastjson ConsumerData)."""

    consumeFromWhere: str
    consumeType: str  # CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
    groupName: str
    messageModel: str
    unitMode: bool
    subscriptionDataSet: list[dict[str, Any]]  # Subscription.to_json()


class QueueDataJson(TypedDict):
    """One entry of a route's queueDatas (fastjson QueueData); the counts and perm are read with defaults."""

    brokerName: str
    readQueueNums: NotRequired[int]
    writeQueueNums: NotRequired[int]
    perm: NotRequired[int]
    topicSysFlag: NotRequired[int]


class GroupMember(Protocol):
    """A consumer as the client instance sees it (client.consumer.PushConsumer, client.pull_consumer.PullConsumer)."""

    def heartbeat_data(self) -> ConsumerDataJson: ...

    def rebalance_now(self) -> None: ...

log = structlog.get_logger(__name__)

_instance_seq = itertools.count(1)


def local_ip() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip: str = s.getsockname()[0]  # (host, port) for AF_INET
            return ip
    except OSError:
        return "127.0.0.1"


@dataclass(slots=True)
class TopicRoute:
    topic: str
    brokers: dict[str, dict[int, str]]  # brokerName -> {brokerId: addr}
    queue_datas: list[QueueDataJson]
    raw: dict[str, Any] = field(default_factory=dict)  # the decoded TopicRouteData as it arrived

    @classmethod
    def parse(cls, topic: str, data: dict[str, Any]) -> TopicRoute:
        brokers: dict[str, dict[int, str]] = {}
        for bd in data.get("brokerDatas") or []:
            brokers[bd["brokerName"]] = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
        return cls(topic, brokers, list(data.get("queueDatas") or []), data)

    def master(self, broker_name: str) -> str | None:
        return self.brokers.get(broker_name, {}).get(0)

    def publish_queues(self, topic: str | None = None, limit: int | None = None) -> list[MessageQueue]:
        out: list[MessageQueue] = []
        for qd in sorted(self.queue_datas, key=lambda q: q["brokerName"]):
            if not int(qd.get("perm", 6)) & w.PERM_WRITE or self.master(qd["brokerName"]) is None:
                continue
            n = int(qd.get("writeQueueNums", 0))
            if limit is not None:
                n = min(n, limit)
            out.extend(MessageQueue(topic or self.topic, qd["brokerName"], i) for i in range(n))
        return out

    def subscribe_queues(self) -> list[MessageQueue]:
        out: list[MessageQueue] = []
        for qd in sorted(self.queue_datas, key=lambda q: q["brokerName"]):
            if int(qd.get("perm", 6)) & w.PERM_READ:
                out.extend(MessageQueue(self.topic, qd["brokerName"], i)
                           for i in range(int(qd.get("readQueueNums", 0))))
        return out


class ClientInstance:
    def __init__(self, namesrv: str, instance_name: str | None = None, timeout: float = 3.0) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        self.timeout = timeout
        self.client_id = f"{local_ip()}@{os.getpid()}#{instance_name or next(_instance_seq)}"
        self.remoting = RemotingClient()
        self.routes: dict[str, TopicRoute] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, GroupMember] = {}  # group -> its consumer
        self._tasks: list[asyncio.Task[None]] = []
        self.task_failures: dict[str, int] = {}  # background chore -> failures so far (task_failed)
        self._ns_index = 0
        self.remoting.register(w.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)

    # -- lifecycle ---------------------------------------------------------------------------
    def start_periodic(self, interval: float, fn: Callable[[], Awaitable[None]], name: str) -> None:
        async def run() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # a periodic chore must not die on one failure
                    self.task_failed(name, e)

        self._tasks.append(asyncio.get_running_loop().create_task(run(), name=name))

    def task_failed(self, name: str, exc: BaseException, **context: object) -> int:
        """Log (with traceback and context) and count one failure of background chore `name`; the chore
        goes on (its loop backs off by the count it gets back)."""
        n = self.task_failures[name] = self.task_failures.get(name, 0) + 1
        log.warning("client.task_failed", task=name, failures=n, error=repr(exc), exc_info=exc, **context)
        return n

    def _forget_task(self, t: asyncio.Task[None]) -> None:
        if t in self._tasks:
            self._tasks.remove(t)

    async def close(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        self._tasks.clear()
        self.remoting.close()

    # -- name server -------------------------------------------------------------------------
    async def invoke_namesrv(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        last: Exception | None = None
        for i in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[(self._ns_index + i) % len(self.namesrv_addrs)]
            try:
                resp = await self.remoting.invoke(addr, cmd, timeout or self.timeout)
                self._ns_index = (self._ns_index + i) % len(self.namesrv_addrs)
                return resp
            except (TimeoutError, OSError, ConnectionError) as e:
                last = e
        raise w.MQClientError(w.NO_CODE, f"name server {','.join(self.namesrv_addrs)} unreachable "
                                  f"({w.describe(last) if last else 'no address'})")

    async def fetch_route(self, topic: str) -> TopicRoute | None:
        """GET_ROUTEINFO_BY_TOPIC; None when the topic does not exist."""
        resp = await self.invoke_namesrv(w.request(w.GET_ROUTEINFO_BY_TOPIC,
                                                   {"topic": topic, "acceptStandardJsonOnly": "true"}))
        if resp.code == w.TOPIC_NOT_EXIST:
            return None
        w.check(resp, f"route of {topic}")
        route = TopicRoute.parse(topic, w.loads_lenient(resp.body_bytes()))
        self.routes[topic] = route
        new_broker = False
        for name, addrs in route.brokers.items():
            new_broker |= self.broker_addrs.get(name) != addrs
            self.broker_addrs[name] = dict(addrs)
        if new_broker and (self.producer_groups or self.consumers):
            # tell a newly learned broker who we are now rather than at the next 30 s tick
            task = asyncio.get_running_loop().create_task(self.send_heartbeat(), name="heartbeat-new-broker")
            self._tasks.append(task)
            task.add_done_callback(self._forget_task)
        return route

    async def route(self, topic: str) -> TopicRoute | None:
        r = self.routes.get(topic)
        return r if r is not None else await self.fetch_route(topic)

    async def refresh_routes(self) -> None:
        for topic in list(self.routes):
            try:
                await self.fetch_route(topic)
            except w.MQClientError as e:
                log.debug("route refresh failed", topic=topic, error=str(e))

    # -- brokers -----------------------------------------------------------------------------
    def master_addr(self, broker_name: str) -> str:
        addr = self.broker_addrs.get(broker_name, {}).get(0)
        if addr is None:
            raise w.MQClientError(w.NO_CODE, f"no master address for broker {broker_name}", "route")
        return addr

    async def invoke_addr(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        try:
            return await self.remoting.invoke(addr, cmd, timeout or self.timeout)
        except (OSError, ConnectionError) as e:
            raise w.MQClientError(w.NO_CODE, f"broker {addr} unreachable ({w.describe(e)})") from e

    async def invoke_broker(self, broker_name: str, cmd: RemotingCommand,
                            timeout: float | None = None) -> RemotingCommand:
        return await self.invoke_addr(self.master_addr(broker_name), cmd, timeout)

    async def oneway_broker(self, broker_name: str, cmd: RemotingCommand) -> None:
        await self.remoting.invoke_oneway(self.master_addr(broker_name), cmd)

    # -- heartbeat ---------------------------------------------------------------------------
    def heartbeat_body(self) -> bytes:
        producers = [{"groupName": g} for g in sorted(self.producer_groups | {w.CLIENT_INNER_PRODUCER})]
        consumers = [c.heartbeat_data() for c in self.consumers.values()]
        return w.dumps({"clientID": self.client_id, "consumerDataSet": consumers,
                        "producerDataSet": producers})

    async def send_heartbeat(self) -> None:
        body = self.heartbeat_body()
        for name, addrs in list(self.broker_addrs.items()):
            targets = addrs.values() if self.consumers else [a for i, a in addrs.items() if i == 0]
            for addr in targets:
                try:
                    resp = await self.invoke_addr(addr, w.request(w.HEART_BEAT, {}, body))
                    if resp.code != w.SUCCESS:
                        log.warning("heartbeat refused", broker=name, code=resp.code, remark=resp.remark)
                except (TimeoutError, w.MQClientError) as e:
                    log.warning("heartbeat failed", broker=name, error=str(e))

    async def unregister(self, producer_group: str = "", consumer_group: str = "") -> None:
        fields = {"clientID": self.client_id}
        if producer_group:
            fields["producerGroup"] = producer_group
        if consumer_group:
            fields["consumerGroup"] = consumer_group
        for addrs in list(self.broker_addrs.values()):
            addr = addrs.get(0)
            if addr is None:
                continue
            with contextlib.suppress(w.MQClientError, asyncio.TimeoutError, OSError):
                await self.invoke_addr(addr, w.request(w.UNREGISTER_CLIENT, fields), 1.0)

    # -- server-initiated requests -----------------------------------------------------------
    def _on_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        group = (cmd.ext_fields or {}).get("consumerGroup")
        consumer = self.consumers.get(group) if group else None
        log.info("consumer ids changed", group=group)
        if consumer is not None:
            consumer.rebalance_now()
        return None
