"""PushConsumer: subscriptions, heartbeats, rebalance and one ProcessQueue per assigned queue."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from codec.properties import MessageConst

from . import _wire as w
from .instance import ClientInstance, ConsumerDataJson
from .message import ORIGIN_MESSAGE_ID, RETRY_TOPIC, Message, MessageExt, MessageQueue
from .offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from .process_queue import ConsumeStatus, ProcessQueue
from .producer import Producer
from .rebalance import allocate_averagely, consumer_ids, lock_batch, query_offset, unlock_batch
from .subscription import Subscription

log = structlog.get_logger(__name__)

CLUSTERING, BROADCASTING = "CLUSTERING", "BROADCASTING"
_FROM = {"last": "CONSUME_FROM_LAST_OFFSET", "first": "CONSUME_FROM_FIRST_OFFSET",
         "timestamp": "CONSUME_FROM_TIMESTAMP"}

__all__ = ["PushConsumer", "ConsumeStatus", "Subscription", "CLUSTERING", "BROADCASTING"]


Listener = Callable[[MessageExt], object]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds (periodic chores that can also be woken early)."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
        return True
    except TimeoutError:
        return False


class PushConsumer:
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, listener: Listener | None = None,
                 message_model: str = CLUSTERING, consume_from: str = "last", consume_timestamp_ms: int = 0,
                 orderly: bool = False, pull_batch_size: int = 32, consume_concurrency: int = 20,
                 max_reconsume_times: int = 16, suspend_timeout: float = 15.0,
                 offset_store_path: str | Path | None = None, rebalance_interval: float = 20.0,
                 persist_interval: float = 5.0, instance_name: str | None = None, timeout: float = 3.0) -> None:
        if message_model not in (CLUSTERING, BROADCASTING):
            raise ValueError(f"message model must be {CLUSTERING} or {BROADCASTING}")
        if consume_from not in _FROM:
            raise ValueError(f"consume_from must be one of {sorted(_FROM)}")
        self.group = group
        self.listener = listener
        self.message_model = message_model
        self.clustering = message_model == CLUSTERING
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms or int((time.time() - 1800) * 1000)
        self.orderly = orderly
        self.pull_batch_size = pull_batch_size
        self.max_reconsume_times = max_reconsume_times
        self.suspend_timeout = suspend_timeout
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.instance = ClientInstance(namesrv, instance_name, timeout)
        self.offset_store: OffsetStore = (RemoteOffsetStore(self.instance, group) if self.clustering
                                          else LocalOffsetStore(offset_store_path))
        self.subscriptions: dict[str, Subscription] = {}
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.consume_sem = asyncio.Semaphore(consume_concurrency)
        self._rebalance_event = asyncio.Event()
        self._lock_event = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._fallback: Producer | None = None
        self._started = False
        self.rebalanced = asyncio.Event()  # set after every completed rebalance

    # -- configuration -----------------------------------------------------------------------
    def subscribe(self, topic: str, expr: str = "*", expression_type: str = "TAG") -> None:
        """`expr` is a TAG expression, or with expression_type="SQL92" a property filter the broker evaluates
        (the broker must run with enablePropertyFilter=true; start() asks it, as Java's client does)."""
        self.subscriptions[topic] = Subscription.parse(topic, expr, expression_type)
        if self._started:
            self.rebalance_now()

    def register_listener(self, listener: Listener) -> None:
        self.listener = listener

    @property
    def retry_topic(self) -> str:
        return w.RETRY_PREFIX + self.group

    def heartbeat_data(self) -> ConsumerDataJson:
        return {"consumeFromWhere": _FROM[self.consume_from], "consumeType": "CONSUME_PASSIVELY",
                "groupName": self.group, "messageModel": self.message_model, "unitMode": False,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()]}

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def start(self) -> None:
        if self.listener is None:
            raise ValueError("register a message listener before start()")
        if not self.subscriptions:
            raise ValueError("subscribe to at least one topic before start()")
        if self.clustering and self.retry_topic not in self.subscriptions:
            self.subscriptions[self.retry_topic] = Subscription.parse(self.retry_topic, "*")
        self.instance.consumers[self.group] = self
        for topic in self.subscriptions:
            route = await self.instance.fetch_route(topic)
            if route is None and not topic.startswith(w.RETRY_PREFIX):
                raise w.MQClientError(w.TOPIC_NOT_EXIST, f"topic {topic} does not exist", "subscribe")
        try:
            await self._check_client_config()
        except BaseException:
            self.instance.consumers.pop(self.group, None)
            await self.instance.close()
            raise
        await self.instance.send_heartbeat()
        self._started = True
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._rebalance_loop(), name="rebalance"))
        if self.orderly and self.clustering:
            self._tasks.append(loop.create_task(self._lock_loop(), name="lock"))
        self.instance.start_periodic(30.0, self.instance.send_heartbeat, "consumer-heartbeat")
        self.instance.start_periodic(30.0, self.instance.refresh_routes, "consumer-route-refresh")
        self.instance.start_periodic(self.persist_interval, self.offset_store.persist, "persist-offsets")
        await self.rebalance()

    async def _check_client_config(self) -> None:
        """checkClientToBroker: every broker of a non-TAG subscription's topic must take its expression."""
        for topic, sub in self.subscriptions.items():
            if sub.expression_type == "TAG":
                continue
            route = await self.instance.route(topic)
            body = w.dumps({"clientId": self.instance.client_id, "group": self.group,
                            "subscriptionData": sub.to_json()})
            for name in sorted(route.brokers if route else ()):
                resp = await self.instance.invoke_broker(name, w.request(w.CHECK_CLIENT_CONFIG, {}, body))
                if resp.code != w.SUCCESS:
                    raise w.MQClientError(resp.code, f"check client in broker error, maybe because you use "
                                                     f"{sub.expression_type} filter: {resp.remark}", "subscribe")

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        self._tasks.clear()
        pqs = list(self.process_queues.values())
        await asyncio.gather(*(pq.stop() for pq in pqs))
        with contextlib.suppress(Exception):
            await self.offset_store.persist(oneway=False)
        if self.orderly and self.clustering:
            await self._unlock([pq.mq for pq in pqs])
        self.process_queues.clear()
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister(consumer_group=self.group)
        if self._fallback is not None:
            await self._fallback.shutdown()
        await self.instance.close()

    # -- rebalance ---------------------------------------------------------------------------
    def rebalance_now(self) -> None:
        self._rebalance_event.set()

    def request_lock(self) -> None:
        self._lock_event.set()

    async def _rebalance_loop(self) -> None:
        while True:
            await wait_event(self._rebalance_event, self.rebalance_interval)
            self._rebalance_event.clear()
            try:
                await self.rebalance()
            except Exception as e:  # logged and counted; the next interval (or event) tries again
                self.instance.task_failed("rebalance", e, group=self.group)

    async def rebalance(self) -> None:
        async with self._rebalance_lock:
            wanted: dict[MessageQueue, Subscription] = {}
            for topic, sub in list(self.subscriptions.items()):
                try:
                    route = await self.instance.route(topic)
                    mqs = route.subscribe_queues() if route is not None else []
                    if mqs and self.clustering:
                        cids = await consumer_ids(self.instance, self.group, mqs[0].broker_name)
                        mqs = allocate_averagely(self.instance.client_id, mqs, cids)
                except (TimeoutError, w.MQClientError) as e:  # keep what we have for this topic
                    log.warning("rebalance of topic failed", group=self.group, topic=topic, error=str(e))
                    mqs = [mq for mq in self.process_queues if mq.topic == topic]
                for mq in mqs:
                    wanted[mq] = sub
            await self._apply(wanted)
        self.rebalanced.set()

    async def _apply(self, wanted: dict[MessageQueue, Subscription]) -> None:
        removed = [pq for mq, pq in self.process_queues.items() if mq not in wanted]
        for pq in removed:
            await pq.stop()
            del self.process_queues[pq.mq]
            if self.clustering:
                await self.offset_store.persist([pq.mq], oneway=False)
            self.offset_store.remove(pq.mq)
        if removed and self.orderly and self.clustering:
            await self._unlock([pq.mq for pq in removed])
        added = [mq for mq in sorted(wanted) if mq not in self.process_queues]
        locked: set[MessageQueue] = set()
        if added and self.orderly and self.clustering:
            locked = await self._lock(added)
        for mq in added:
            if self.orderly and self.clustering and mq not in locked:
                continue  # another client still holds it; retried on the next rebalance
            offset = await self._start_offset(mq)
            pq = ProcessQueue(self, mq, wanted[mq], offset)
            pq.set_locked(mq in locked)
            self.offset_store.update(mq, offset)
            self.process_queues[mq] = pq
            pq.start()
            log.info("queue assigned", group=self.group, topic=mq.topic, queue_id=mq.queue_id, offset=offset)

    async def _start_offset(self, mq: MessageQueue) -> int:
        """Stored offset, else the consume-from-where rule (remoting-protocol.md §8.4)."""
        off = await self.offset_store.read(mq)
        if off >= 0:
            return off
        retry = mq.topic.startswith(w.RETRY_PREFIX)
        if self.consume_from == "first" or (self.consume_from == "last" and retry):
            return 0
        if self.consume_from == "last" or retry:
            return await query_offset(self.instance, w.GET_MAX_OFFSET, mq)
        return await query_offset(self.instance, w.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                  timestamp=self.consume_timestamp_ms)

    # -- orderly locks -----------------------------------------------------------------------
    async def _lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        ok: set[MessageQueue] = set()
        for broker, qs in by_broker.items():
            try:
                ok |= await lock_batch(self.instance, self.group, broker, qs)
            except (TimeoutError, w.MQClientError) as e:
                log.warning("lock failed", broker=broker, error=str(e))
        return ok

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, qs in by_broker.items():
            with contextlib.suppress(w.MQClientError, asyncio.TimeoutError, OSError):
                await unlock_batch(self.instance, self.group, broker, qs)

    async def _lock_loop(self) -> None:
        while True:
            await wait_event(self._lock_event, 20.0)
            self._lock_event.clear()
            try:
                await self._lock_round()
            except Exception as e:  # an orderly consumer whose lock loop died would stop consuming
                n = self.instance.task_failed("lock", e, group=self.group)
                await asyncio.sleep(min(10.0, 0.1 * 2 ** min(n, 7)))  # back off, then try again
                self._lock_event.set()

    async def _lock_round(self) -> None:
        pqs = dict(self.process_queues)
        ok = await self._lock(list(pqs))
        for mq, pq in pqs.items():
            pq.set_locked(mq in ok)
        if len(ok) < len(pqs):
            await asyncio.sleep(1.0)  # do not hammer the broker while another client holds a queue
            if any(not pq.locked for pq in self.process_queues.values()):
                self._lock_event.set()

    # -- consumption helpers -----------------------------------------------------------------
    async def invoke_listener(self, msg: MessageExt) -> object:
        if self.listener is None:
            raise RuntimeError(f"consumer {self.group}: no listener registered")
        r = self.listener(msg)
        if inspect.isawaitable(r):
            r = await r
        return r

    async def send_back(self, msg: MessageExt) -> None:
        """CONSUMER_SEND_MSG_BACK (delayLevel 0: the broker picks 3 + reconsumeTimes); fallback: re-send."""
        if not self.clustering:
            log.warning("broadcast consume failed, dropping", msg_id=msg.msg_id)
            return
        cmd = w.request(w.CONSUMER_SEND_MSG_BACK, {
            "offset": msg.commitlog_offset, "group": self.group, "delayLevel": 0,
            "originMsgId": msg.msg_id, "originTopic": msg.topic, "unitMode": "false",
            "maxReconsumeTimes": self.max_reconsume_times, "bname": msg.broker_name})
        try:
            resp = await self.instance.invoke_broker(msg.broker_name, cmd)
            if resp.code == w.SUCCESS:
                return
            log.warning("send back refused, re-sending to retry topic", code=resp.code, remark=resp.remark)
        except (TimeoutError, w.MQClientError) as e:
            log.warning("send back failed, re-sending to retry topic", error=str(e))
        await self._resend_to_retry(msg)

    async def _resend_to_retry(self, msg: MessageExt) -> None:
        fallback = self._fallback
        if fallback is None:
            fallback = self._fallback = Producer(w.CLIENT_INNER_PRODUCER, ";".join(self.instance.namesrv_addrs))
            await fallback.start()
        props = dict(msg.properties)
        props.setdefault(RETRY_TOPIC, msg.topic)
        props.setdefault(ORIGIN_MESSAGE_ID, msg.msg_id)
        # the count goes on (the producer moves these two into the send header), so a message whose
        # send-back keeps failing still reaches the DLQ after max_reconsume_times (as the Java client)
        props[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[MessageConst.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        props.pop(MessageConst.TRAN_MSG, None)
        for k in (MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET):
            props.pop(k, None)
        retry = Message(self.retry_topic, msg.body, flag=msg.flag, properties=props,
                        delay_level=min(3 + msg.reconsume_times, 18))
        await fallback.send(retry)
