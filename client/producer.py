"""Producer: route lookup (TBW102 fallback), queue selection, SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Self, TypedDict, Unpack

import structlog

from codec.batch import encode_batch
from codec.codes import ResponseCode, SendMessageRequestHeaderV2
from codec.msgid import decode_offset_msg_id, new_uniq_id
from codec.properties import MessageConst, properties_to_string

from . import _wire as w
from .instance import ClientInstance
from .message import (
    TIMER_DEL_UNIQKEY,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    UNIQ_KEY,
    Message,
    MessageExt,
    MessageQueue,
    SendResult,
    SendStatus,
    decode_messages,
)

log = structlog.get_logger(__name__)

# codes after which the Java producer tries another queue/broker
# the codes on which Java's DefaultMQProducerImpl retries another broker (MQClientAPIImpl's
# retryResponseCodes) and the four it reports as a SendStatus
_RETRYABLE = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
              ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT}
_SEND_OK: dict[int, SendStatus] = {ResponseCode.SUCCESS: SendStatus.SEND_OK, ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
            ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
            ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT}

QueueSelector = Callable[[list[MessageQueue], Message, object], MessageQueue]


class ProducerOptions(TypedDict, total=False):
    """The keyword options of ``Producer(...)`` (a TransactionProducer passes them on)."""

    send_timeout: float
    retry_times: int
    compress_over: int
    max_inflight: int
    instance_name: str | None


class SendOptions(TypedDict, total=False):
    """The keyword options of ``Producer.send`` (``send_async`` passes them on)."""

    queue: MessageQueue | None
    selector: QueueSelector | None
    arg: object
    timeout: float | None


def send_message_header_v2(group: str, topic: str, mq: MessageQueue, sys_flag: int, born_timestamp: int,
                           flag: int, properties: str, batch: bool, reconsume_times: int = 0,
                           max_reconsume_times: int | None = None) -> dict[str, str]:
    """The extFields of one SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE, as the Java 4.9.x producer
    (DefaultMQProducerImpl.sendKernelImpl) fills SendMessageRequestHeader, under codec's V2 letters and
    in its field order: every value a string, booleans "true"/"false", maxReconsumeTimes only when
    given (Java: a %RETRY% send whose message carries MAX_RECONSUME_TIMES, see `retry_counts`).
    Per message: the keys are codec's SendMessageRequestHeaderV2 attributes, no table walk."""
    v2 = SendMessageRequestHeaderV2
    h = {v2.producerGroup: group, v2.topic: topic, v2.defaultTopic: w.DEFAULT_TOPIC, v2.defaultTopicQueueNums: "4",
         v2.queueId: str(mq.queue_id), v2.sysFlag: str(sys_flag), v2.bornTimestamp: str(born_timestamp),
         v2.flag: str(flag), v2.properties: properties, v2.reconsumeTimes: str(reconsume_times),
         v2.unitMode: "false"}
    if max_reconsume_times is not None:
        h[v2.maxReconsumeTimes] = str(max_reconsume_times)
    h[v2.batch] = "true" if batch else "false"
    h[v2.bname] = mq.broker_name
    return h


def retry_counts(topic: str, props: Mapping[str, str]) -> tuple[int, int | None]:
    """reconsumeTimes and maxReconsumeTimes of a send's header: on a %RETRY% topic, from the message's
    RECONSUME_TIME / MAX_RECONSUME_TIMES properties (a consumer's fallback re-send carries its count on,
    so a message that keeps failing still reaches the DLQ); 0 and none elsewhere (sendKernelImpl)."""
    if not topic.startswith(w.RETRY_PREFIX):
        return 0, None
    reconsume = props.get(MessageConst.RECONSUME_TIME)
    max_times = props.get(MessageConst.MAX_RECONSUME_TIMES)
    return (int(reconsume) if reconsume else 0), (int(max_times) if max_times else None)


def select_by_hash(queues: list[MessageQueue], msg: Message, arg: object) -> MessageQueue:
    """Orderly-send selector: the same ``arg`` (e.g. an order id) always maps to the same queue."""
    key = arg if isinstance(arg, int) else sum(str(arg).encode()) * 31 + len(str(arg))
    return queues[abs(key) % len(queues)]


class Producer:
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, send_timeout: float = 3.0,
                 retry_times: int = 2, compress_over: int = 4096, max_inflight: int = 1024,
                 instance_name: str | None = None) -> None:
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.instance = ClientInstance(namesrv, instance_name, send_timeout)
        self._rr = itertools.count()
        self._publish: dict[str, list[MessageQueue]] = {}
        self._inflight: set[asyncio.Future[SendResult]] = set()
        self._sem = asyncio.Semaphore(max_inflight)
        self._started = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def start(self) -> None:
        if self._started:
            return
        self.instance.producer_groups.add(self.group)
        self.instance.start_periodic(30.0, self.instance.send_heartbeat, "producer-heartbeat")
        self.instance.start_periodic(30.0, self._refresh_routes, "producer-route-refresh")
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        await self.instance.unregister(producer_group=self.group)
        await self.instance.close()

    # -- routes and queues -------------------------------------------------------------------
    async def _refresh_routes(self) -> None:
        for topic in list(self._publish):
            await self._load_queues(topic)

    async def _load_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.fetch_route(topic)
        if route is not None:
            queues = route.publish_queues()
        else:  # unknown topic: borrow TBW102's route, at most 4 queues (Java defaultTopicQueueNums)
            default = await self.instance.fetch_route(w.DEFAULT_TOPIC)
            queues = default.publish_queues(topic=topic, limit=4) if default else []
        if not queues:
            raise w.MQClientError(w.TOPIC_NOT_EXIST, f"no route info for topic {topic}", "route")
        self._publish[topic] = queues
        return queues

    async def queues(self, topic: str) -> list[MessageQueue]:
        q = self._publish.get(topic)
        return q if q is not None else await self._load_queues(topic)

    # -- send --------------------------------------------------------------------------------
    def _prepare(self, msg: Message) -> tuple[bytes, int, dict[str, str]]:
        props = msg.build_properties()
        props.setdefault(UNIQ_KEY, new_uniq_id())
        props[MessageConst.WAIT] = "true"
        body, sys_flag = bytes(msg.body), 0
        if self.compress_over and len(body) > self.compress_over:
            body, sys_flag = zlib.compress(body, 5), w.COMPRESSED_FLAG
        return body, sys_flag, props

    async def send(self, msg: Message, queue: MessageQueue | None = None,
                   selector: QueueSelector | None = None, arg: object = None,
                   timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer. Retries other queues on retryable failures."""
        body, sys_flag, props = self._prepare(msg)
        return await self._send(msg, body, sys_flag, props, queue, selector, arg, timeout, batch=False)

    async def _send(self, msg: Message, body: bytes, sys_flag: int, props: dict[str, str],
                    queue: MessageQueue | None, selector: QueueSelector | None, arg: object,
                    timeout: float | None, batch: bool) -> SendResult:
        props_s = properties_to_string(props)
        reconsume, max_reconsume = retry_counts(msg.topic, props)
        attempts = 1 if (queue is not None or selector is not None) else 1 + self.retry_times
        last: Exception | None = None
        tried: set[str] = set()
        for _ in range(attempts):
            queues = await self.queues(msg.topic)
            if queue is not None:
                mq = queue
            elif selector is not None:
                mq = selector(queues, msg, arg)
            else:
                mq = self._pick(queues, tried)
            tried.add(mq.broker_name)
            cmd = w.request(w.SEND_BATCH_MESSAGE if batch else w.SEND_MESSAGE_V2,
                            send_message_header_v2(self.group, msg.topic, mq, sys_flag, int(time.time() * 1000),
                                                   msg.flag, props_s, batch, reconsume, max_reconsume), body)
            try:
                if mq.broker_name not in self.instance.broker_addrs:
                    await self._load_queues(msg.topic)
                resp = await self.instance.invoke_broker(mq.broker_name, cmd, timeout or self.send_timeout)
            except (TimeoutError, w.MQClientError) as e:
                last = e
                continue
            status = _SEND_OK.get(resp.code)
            if status is None:
                last = w.MQClientError(resp.code, resp.remark, f"send to {msg.topic}")
                if resp.code in _RETRYABLE:
                    self._publish.pop(msg.topic, None)
                    continue
                raise last
            if mq.topic not in self.instance.routes:  # created through TBW102: pick up the real route
                self._publish.pop(msg.topic, None)
            ext = resp.ext_fields or {}
            return SendResult(status, props.get(UNIQ_KEY, ""), ext.get("msgId", ""),
                              MessageQueue(msg.topic, mq.broker_name, int(ext.get("queueId", mq.queue_id))),
                              int(ext.get("queueOffset", -1)))
        assert last is not None
        raise last

    def _pick(self, queues: list[MessageQueue], avoid: set[str]) -> MessageQueue:
        n = len(queues)
        for _ in range(n):
            mq = queues[next(self._rr) % n]
            if mq.broker_name not in avoid or len(avoid) >= len({q.broker_name for q in queues}):
                return mq
        return queues[next(self._rr) % n]

    async def send_oneway(self, msg: Message, queue: MessageQueue | None = None) -> None:
        body, sys_flag, props = self._prepare(msg)
        props.pop(MessageConst.WAIT, None)
        queues = await self.queues(msg.topic)
        mq = queue or queues[next(self._rr) % len(queues)]
        header = send_message_header_v2(self.group, msg.topic, mq, sys_flag, int(time.time() * 1000), msg.flag,
                                        properties_to_string(props), False, *retry_counts(msg.topic, props))
        cmd = w.request(w.SEND_MESSAGE_V2, header, body)
        await self.instance.oneway_broker(mq.broker_name, cmd)

    async def send_batch(self, msgs: Iterable[Message], queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE: all messages share one topic; no delay levels, no retry topics."""
        messages = list(msgs)
        if not messages:
            raise ValueError("empty batch")
        topic = messages[0].topic
        items: list[tuple[int, bytes, str]] = []
        uniq: list[str] = []
        for m in messages:
            if m.topic != topic:
                raise ValueError("all messages of a batch must have the same topic")
            if m.delay_level or topic.startswith(w.RETRY_PREFIX):
                raise ValueError("batch messages cannot have a delay level or a retry topic")
            props = m.build_properties()
            props.setdefault(UNIQ_KEY, new_uniq_id())
            uniq.append(props[UNIQ_KEY])
            items.append((m.flag, bytes(m.body), properties_to_string(props)))
        head = Message(topic, flag=0)
        res = await self._send(head, encode_batch(items), 0, {MessageConst.WAIT: "true"}, queue, None, None,
                               timeout, batch=True)
        res.msg_id = ",".join(uniq)
        return res

    # -- fire and collect --------------------------------------------------------------------
    async def send_async(self, msg: Message, **kw: Unpack[SendOptions]) -> asyncio.Future[SendResult]:
        """Start a send and return its future at once (bounded by ``max_inflight``); see ``collect``."""
        await self._sem.acquire()
        fut = asyncio.ensure_future(self.send(msg, **kw))
        self._inflight.add(fut)

        def done(f: asyncio.Future[SendResult]) -> None:
            self._inflight.discard(f)
            self._sem.release()

        fut.add_done_callback(done)
        return fut

    async def collect(self) -> list[SendResult | BaseException]:
        """Wait for every send started with ``send_async`` that is still in flight."""
        pending = list(self._inflight)
        return list(await asyncio.gather(*pending, return_exceptions=True)) if pending else []

    async def send_all(self, msgs: Iterable[Message]) -> list[SendResult | BaseException]:
        futs = [await self.send_async(m) for m in msgs]
        return list(await asyncio.gather(*futs, return_exceptions=True))

    # -- timers ------------------------------------------------------------------------------
    async def view_message(self, offset_msg_id: str) -> MessageExt:
        ip, port, phys = decode_offset_msg_id(offset_msg_id)
        resp = await self.instance.invoke_addr(f"{ip}:{port}", w.request(w.VIEW_MESSAGE_BY_ID,
                                                                         {"offset": str(phys)}))
        w.check(resp, f"view message {offset_msg_id}")
        return decode_messages(resp.body)[0]

    async def cancel_timer(self, target: str | tuple[str, str, int]) -> SendResult:
        """Cancel a timer message: send a TIMER_DEL_UNIQKEY marker with the target's deliver time.

        ``target`` is an offset msgId (the target is looked up with VIEW_MESSAGE_BY_ID) or a tuple
        ``(topic, uniq_key, deliver_ms)``."""
        if isinstance(target, str):
            ext = await self.view_message(target)
            p = ext.properties
            topic = p.get(MessageConst.REAL_TOPIC) or ext.stored_topic
            uniq = p.get(UNIQ_KEY)
            if not uniq or not (p.get(TIMER_DELIVER_MS) or p.get(TIMER_OUT_MS)):
                raise w.MQClientError(w.NO_CODE, f"message {target} is not a timer message", "cancel")
            if p.get(TIMER_DELIVER_MS):
                deliver_ms = int(p[TIMER_DELIVER_MS])
            else:  # only the slot time is known: aim just past the slot boundary so it rounds into it
                deliver_ms = int(p[TIMER_OUT_MS]) + 1
        else:
            topic, uniq, deliver_ms = target
        props = {TIMER_DEL_UNIQKEY: f"{topic}+{uniq}", UNIQ_KEY: uniq, TIMER_DELIVER_MS: str(int(deliver_ms))}
        log.info("cancel timer", topic=topic, uniq_key=uniq, deliver_ms=deliver_ms)
        return await self.send(Message(topic, b"0", tags="_RECALL_TAG_", properties=props))
