"""PullConsumer: the application picks queues and offsets; the client pulls and commits offsets."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from codec.codes import ResponseCode

from . import _wire as w
from .consumer import CLUSTERING
from .instance import ClientInstance, ConsumerDataJson
from .message import MAX_OFFSET, MIN_OFFSET, MessageExt, MessageQueue, decode_messages
from .offset_store import RemoteOffsetStore
from .process_queue import build_pull_request, filter_by_tags
from .rebalance import query_offset
from .subscription import Subscription


class PullStatus(enum.Enum):
    """Java's PullStatus, each valued by the PULL_MESSAGE response code it stands for."""

    FOUND = ResponseCode.SUCCESS
    NO_NEW_MSG = ResponseCode.PULL_NOT_FOUND
    NO_MATCHED_MSG = ResponseCode.PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = ResponseCode.PULL_OFFSET_MOVED


# the PULL_MESSAGE answers that are a PullResult (anything else raises MQClientError)
_PULL_ANSWERS = frozenset(s.value for s in PullStatus)


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)


class PullConsumer:
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, instance_name: str | None = None,
                 timeout: float = 3.0) -> None:
        self.group = group
        self.instance = ClientInstance(namesrv, instance_name, timeout)
        self.offset_store = RemoteOffsetStore(self.instance, group)
        self.subscriptions: dict[str, Subscription] = {}
        self._started = False

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def heartbeat_data(self) -> ConsumerDataJson:
        return {"consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_ACTIVELY",
                "groupName": self.group, "messageModel": CLUSTERING, "unitMode": False,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()]}

    def rebalance_now(self) -> None:  # pull consumers choose their queues themselves
        pass

    async def start(self) -> None:
        self.instance.consumers[self.group] = self
        self.instance.start_periodic(30.0, self.instance.send_heartbeat, "pull-heartbeat")
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.offset_store.persist(oneway=False)
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister(consumer_group=self.group)
        await self.instance.close()

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise w.MQClientError(w.TOPIC_NOT_EXIST, f"topic {topic} does not exist", "route")
        if topic not in self.subscriptions:
            self.subscriptions[topic] = Subscription.parse(topic, "*")
            await self.instance.send_heartbeat()
        return route.subscribe_queues()

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expr: str = "*",
                   block_timeout: float = 0.0) -> PullResult:
        """PULL_MESSAGE at ``offset``; with ``block_timeout`` > 0 the broker holds the request
        (long polling) until a message arrives or the timeout passes."""
        if mq.broker_name not in self.instance.broker_addrs:
            await self.instance.fetch_route(mq.topic)
        sub = Subscription.parse(mq.topic, expr)
        cmd = build_pull_request(self.group, mq, sub, offset, max_nums, -1, int(block_timeout * 1000))
        if block_timeout <= 0:
            cmd.ext_fields["sysFlag"] = str(w.PULL_SUBSCRIPTION)
        resp = await self.instance.invoke_broker(mq.broker_name, cmd, block_timeout + self.instance.timeout)
        if resp.code not in _PULL_ANSWERS:
            raise w.MQClientError(resp.code, resp.remark, f"pull {mq.topic}/{mq.queue_id}")
        ext = resp.ext_fields or {}
        msgs: list[MessageExt] = []
        if resp.code == ResponseCode.SUCCESS:
            msgs = decode_messages(resp.body, mq.broker_name)
            for m in msgs:
                m.properties[MIN_OFFSET] = ext.get("minOffset", "0")
                m.properties[MAX_OFFSET] = ext.get("maxOffset", "0")
            msgs = filter_by_tags(msgs, sub)
        return PullResult(PullStatus(resp.code), int(ext.get("nextBeginOffset", offset)),
                          int(ext.get("minOffset", 0)), int(ext.get("maxOffset", 0)), msgs)

    # -- offsets -----------------------------------------------------------------------------
    async def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset on the broker, -1 if none."""
        return await self.offset_store.read(mq)

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        self.offset_store.update(mq, offset)

    async def commit(self) -> None:
        await self.offset_store.persist(oneway=False)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await query_offset(self.instance, w.GET_MAX_OFFSET, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await query_offset(self.instance, w.GET_MIN_OFFSET, mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await query_offset(self.instance, w.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp=timestamp_ms)
