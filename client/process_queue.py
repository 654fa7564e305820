"""One assigned queue of a PushConsumer: the long-polling PULL_MESSAGE loop and message consumption."""

from __future__ import annotations

import asyncio
import enum
import time
from typing import Protocol

import structlog

from codec.command import RemotingCommand
from codec.tags import tags_match

from . import _wire as w
from .instance import ClientInstance
from .message import MAX_OFFSET, MIN_OFFSET, MessageExt, MessageQueue, decode_messages
from .offset_store import OffsetStore
from .subscription import Subscription

log = structlog.get_logger(__name__)

PULL_EXCEPTION_DELAY = 1.0  # Java pullTimeDelayMillsWhenException
ORDERLY_SUSPEND = 1.0  # Java suspendCurrentQueueTimeMillis
LOCK_MAX_LIVE = 30.0  # Java rebalance.lockMaxLiveTime on the client side


class ConsumeStatus(enum.Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RETRY = "RECONSUME_LATER"


def build_pull_request(group: str, mq: MessageQueue, sub: Subscription, offset: int, max_nums: int,
                       commit_offset: int, suspend_ms: int) -> RemotingCommand:
    sys_flag = w.PULL_SUSPEND | w.PULL_SUBSCRIPTION | (w.PULL_COMMIT_OFFSET if commit_offset > 0 else 0)
    return w.request(w.PULL_MESSAGE, {
        "consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "queueOffset": offset,
        "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": max(commit_offset, 0),
        "suspendTimeoutMillis": suspend_ms, "subscription": sub.expr, "subVersion": sub.version,
        "expressionType": sub.expression_type, "bname": mq.broker_name})


def filter_by_tags(msgs: list[MessageExt], sub: Subscription) -> list[MessageExt]:
    """The client's exact tag check after the broker's code check: a message with several `||`-joined tags
    (codec.tags) matches when one of them is subscribed."""
    if not sub.tags:
        return msgs
    return [m for m in msgs if tags_match(m.tags, sub.tags)]


class QueueOwner(Protocol):
    """What a process queue needs from the push consumer that owns it (PushConsumer is one)."""

    group: str
    instance: ClientInstance
    offset_store: OffsetStore
    clustering: bool
    orderly: bool
    pull_batch_size: int
    suspend_timeout: float
    max_reconsume_times: int
    consume_sem: asyncio.Semaphore

    def request_lock(self) -> None: ...

    async def invoke_listener(self, msg: MessageExt) -> object: ...

    async def send_back(self, msg: MessageExt) -> None: ...


class ProcessQueue:
    def __init__(self, consumer: QueueOwner, mq: MessageQueue, sub: Subscription, offset: int) -> None:
        self.consumer = consumer
        self.mq = mq
        self.sub = sub
        self.next_offset = offset
        self.dropped = False
        self.locked = False
        self.last_lock = 0.0
        self.lock_event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"pull-{self.mq}")

    async def stop(self) -> None:
        self.dropped = True
        self.lock_event.set()  # an orderly queue waiting for its lock must see the drop
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait([self.task], timeout=5.0)

    def set_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock = time.monotonic()
            self.lock_event.set()
        else:
            self.lock_event.clear()

    def lock_valid(self) -> bool:
        return self.locked and time.monotonic() - self.last_lock < LOCK_MAX_LIVE

    async def _run(self) -> None:
        c = self.consumer
        while not self.dropped:
            try:
                commit = c.offset_store.get(self.mq) if c.clustering else -1
                cmd = build_pull_request(c.group, self.mq, self.sub, self.next_offset, c.pull_batch_size,
                                         commit, int(c.suspend_timeout * 1000))
                resp = await c.instance.invoke_broker(self.mq.broker_name, cmd, c.suspend_timeout + 15.0)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # broker away, timeout: back off and pull again
                log.warning("pull failed", topic=self.mq.topic, queue_id=self.mq.queue_id, error=str(e))
                await asyncio.sleep(PULL_EXCEPTION_DELAY)
                continue
            ext = resp.ext_fields or {}
            nxt = int(ext.get("nextBeginOffset", self.next_offset))
            if resp.code == w.SUCCESS:
                msgs = decode_messages(resp.body, self.mq.broker_name)
                for m in msgs:
                    m.properties[MIN_OFFSET] = ext.get("minOffset", "0")
                    m.properties[MAX_OFFSET] = ext.get("maxOffset", "0")
                msgs = filter_by_tags(msgs, self.sub)
                if msgs:
                    await self._consume(msgs)
                if self.dropped:
                    return
                self.next_offset = nxt
                c.offset_store.update(self.mq, nxt, increase_only=True)
            elif resp.code in (w.PULL_NOT_FOUND, w.PULL_RETRY_IMMEDIATELY):
                self.next_offset = nxt
            elif resp.code == w.PULL_OFFSET_MOVED:
                log.warning("pull offset illegal, moving", topic=self.mq.topic, queue_id=self.mq.queue_id,
                            offset=self.next_offset, next=nxt)
                self.next_offset = nxt
                c.offset_store.update(self.mq, nxt)
            else:
                log.warning("pull refused", topic=self.mq.topic, queue_id=self.mq.queue_id, code=resp.code,
                            remark=resp.remark)
                await asyncio.sleep(PULL_EXCEPTION_DELAY)

    # -- consumption -------------------------------------------------------------------------
    async def _call(self, msg: MessageExt) -> ConsumeStatus:
        try:
            r = await self.consumer.invoke_listener(msg)
        except Exception as e:
            log.warning("listener raised", msg_id=msg.msg_id, error=repr(e))
            return ConsumeStatus.RETRY
        if r is None or r is True or r == ConsumeStatus.SUCCESS:
            return ConsumeStatus.SUCCESS
        return ConsumeStatus.RETRY

    async def _consume(self, msgs: list[MessageExt]) -> None:
        if self.consumer.orderly:
            await self._consume_orderly(msgs)
            return
        sem = self.consumer.consume_sem
        c = self.consumer
        finished = [False] * len(msgs)
        head = [0]  # msgs[:head] are all finished: the offset may move past them

        def advance() -> None:
            # like RocketMQ's ProcessQueue.removeMessage: the committed offset follows the oldest message
            # still in flight, message by message (a consumer stopped mid-batch commits what it finished)
            k = head[0]
            while k < len(msgs) and finished[k]:
                k += 1
            if k > head[0]:
                head[0] = k
                if c.clustering and not self.dropped:
                    c.offset_store.update(self.mq, msgs[k - 1].queue_offset + 1, increase_only=True)

        async def one(i: int, m: MessageExt) -> None:
            async with sem:
                status = await self._call(m)
            if status is ConsumeStatus.RETRY:
                await c.send_back(m)
            finished[i] = True
            advance()

        await asyncio.gather(*(one(i, m) for i, m in enumerate(msgs)))

    async def _consume_orderly(self, msgs: list[MessageExt]) -> None:
        c = self.consumer
        for m in msgs:
            attempts = 0
            while not self.dropped:
                if c.clustering and not self.lock_valid():
                    self.lock_event.clear()
                    c.request_lock()
                    await self.lock_event.wait()  # set by the next successful LOCK_BATCH_MQ
                    continue
                status = await self._call(m)
                if status is ConsumeStatus.SUCCESS:
                    break
                attempts += 1
                m.reconsume_times += 1
                if attempts > c.max_reconsume_times:
                    await c.send_back(m)  # give up locally: the broker routes it to retry / DLQ
                    break
                await asyncio.sleep(ORDERLY_SUSPEND)  # suspend the queue a moment, then the same message
            if self.dropped:
                return
