"""RocketMQ 5's pop consumption over the broker's own ConsumeQueues, with its state in `PopStore` (durable):
one engine, composed by the broker (server/broker.py), used by the in-broker gRPC endpoint
(ReceiveMessage / AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue, receipts
`qid:offset:seq`) and by the remoting processors (server/processors/pop.py: POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, ... for a stateless proxy; receipts are Apache's extraInfo, which names a
delivery by its queue, offset and the time it becomes visible: `*_by_visible`).

A receive hands out a queue's in-flight deliveries whose invisible time is over (delivery_attempt + 1)
before new messages; a delivery whose attempt reached the group's max attempts (`retryMaxTimes` + 1,
RocketMQ 5's maxDeliveryAttempts) goes to `%DLQ%<group>` instead and is done. A group new to a queue
starts at the group's committed offset (shared with 4.x consumers of the group), else at the queue's
first offset. The committed consumer offset follows the lowest offset still in flight, so mqadmin and
4.x tools see the group's progress. Long polling: a receive with nothing to hand out waits for a put
to the topic (the store's dispatch listener), an in-flight message becoming visible, or its deadline.
FIFO groups (`consumeMessageOrderly`) get nothing new from a queue while a delivery of it is in flight.
A SQL92 filter reads new messages as a pull does (`_read_new`): evaluated on the record's property bytes in the
store's lookup and, with `enableCalcFilterBitMap`, after the group's bitmap pre-filter (server.filter_bitmap),
so units its bits rule out are passed over without reading the CommitLog; a receive that only passed over
units scans on at once instead of waiting for a put.

A group with 4.x members too (push/pull consumers heartbeating over remoting): 5.x consumers are
members of the group in the ClientManager (telemetry.py), so the 4.x clients' rebalance
(AllocateMessageQueueAveragely over every member's client id and the topic's queues) hands some
queues to 5.x ids. Pop then serves exactly those queues (`pop_share`), and the 4.x clients pull the
rest: each queue has one consumer side, none is left to nobody, nothing is consumed twice while the
membership holds (a leaver's queues are taken over from the committed offsets). Exact when
the 4.x clients use the default averaging strategy and the topic lives on this broker alone (with
several brokers they allocate over all brokers' queues, which one broker does not see).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.codes import DLQ_PREFIX, ResponseCode
from codec.consume_queue_unit import UNIT_HEAD, UNIT_SIZE
from codec.errors import CodecError
from codec.msgid import offset_msg_id
from codec.pop_receipt import ConsumeInitMode
from codec.properties import MessageConst as K
from codec.record import MessageRecord, decode_record
from server.pop.model import (
    Delivery,
    Failure,
    MessageFilter,
    PopError,
    SqlFilter,
    allocate_averagely,
    decode_handle,
    encode_handle,
)
from server.pop.state import Inflight, Key, PopStore, QueueState
from storage.store_types import GetResult, GetStatus
from storage.supervisor import SupervisedTask

if TYPE_CHECKING:
    from server.client_manager import ClientManager
    from server.filter_bitmap import FilterBitmaps, UnitGate
    from server.offsets_table import ConsumerOffsetManager
    from server.topics import TopicManager
    from server.transactions import PutRecord
    from storage.message_store import MessageStore
    from storage.subscription_group import SubscriptionGroupConfig, SubscriptionGroupTable

log = structlog.get_logger(__name__)


SWEEP_INTERVAL_S = 1.0
_ADVANCE = (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_BADLY,
            GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING)


CONSUME_POP = "CONSUME_POP"  # a heartbeat's consumeType: the group's members pop (a proxy's clients)


@dataclass(frozen=True, slots=True)
class PopDeps:
    """What pop uses of the broker (built by server.processor_wiring.pop_deps)."""

    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupTable
    offsets: ConsumerOffsetManager
    clients: ClientManager
    put_record: PutRecord  # DLQ copies
    store_host: tuple[str, int]
    is_pop_channel: Callable[[object], bool]  # a ClientManager connection that pops (a 5.x gRPC session)
    bitmaps: FilterBitmaps | None = None  # enableCalcFilterBitMap: SQL92 units ruled out without the CommitLog


class PopService:
    def __init__(self, deps: PopDeps, state: PopStore) -> None:
        self.deps = deps
        self.state = state
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._sweeper: SupervisedTask | None = None
        self._rr = 0
        self.dlq_total = 0
        self.sweep_errors = 0
        self.commitlog_bytes_read = 0  # records read for new messages (filtered or not): the bitmap's saving

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self, sweep: bool = True) -> None:
        """`sweep`: a master's (Apache's PopReviveService, a master-only service): a slave starts without it,
        a promotion starts it (`start_sweep`), a demotion stops it (`stop_sweep`): its DLQ puts and
        offset commits are a master's writes."""
        self.deps.store.add_dispatch_listener(self._on_dispatch)
        if sweep:
            self.start_sweep()

    def start_sweep(self) -> None:
        if self._sweeper is None:
            self._sweeper = self.deps.store.supervisor.spawn("pop-sweep", self._sweep_forever)

    async def stop_sweep(self) -> None:
        if self._sweeper is not None:
            await self._sweeper.stop()
            self._sweeper = None

    @property
    def sweeping(self) -> bool:
        return self._sweeper is not None

    async def stop(self) -> None:
        self.deps.store.remove_dispatch_listener(self._on_dispatch)
        await self.stop_sweep()
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.set_result(None)
        self.state.close()

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        self._wake(topic)

    def _wake(self, topic: str) -> None:
        futs = self._waiters.pop(topic, None)
        if futs:
            for f in futs:
                if not f.done():
                    f.set_result(None)

    # ---- group facts ---------------------------------------------------------------------
    def group_config(self, group: str) -> SubscriptionGroupConfig:
        gcfg = self.deps.groups.find(group)
        if gcfg is None:
            raise PopError(Failure.GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        if not gcfg.consume_enable:
            raise PopError(Failure.FORBIDDEN, f"consumer group {group} may not consume (consumeEnable=false)")
        return gcfg

    def max_attempts(self, group: str) -> int:
        gcfg = self.deps.groups.find(group)
        return (gcfg.retry_max_times if gcfg is not None else 16) + 1

    def is_fifo(self, group: str) -> bool:
        gcfg = self.deps.groups.find(group)
        return bool(gcfg is not None and gcfg.consume_message_orderly)

    def _queue(self, key: Key, init_mode: int = ConsumeInitMode.MIN) -> QueueState:
        group, topic, qid = key

        def initial() -> int:
            committed = self.deps.offsets.query(group, topic, qid)
            if committed >= 0:
                return committed
            if init_mode == ConsumeInitMode.MAX:  # Apache: the queue's last message
                return max(0, self.deps.store.max_offset(topic, qid) - 1)
            return max(0, self.deps.store.min_offset(topic, qid))
        return self.state.queue(key, initial)

    def _commit(self, key: Key) -> None:
        q = self.state.queues.get(key)
        if q is not None:
            group, topic, qid = key
            self.deps.offsets.commit(group, topic, qid, q.commit_offset())

    # ---- receive -------------------------------------------------------------------------
    def read_queue_ids(self, topic: str) -> list[int]:
        tcfg = self.deps.topics.get(topic)
        if tcfg is None:
            raise PopError(Failure.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        if not tcfg.readable:
            raise PopError(Failure.FORBIDDEN, f"topic {topic} is not readable")
        return list(range(tcfg.read_queue_nums))

    def pop_share(self, group: str, qids: list[int]) -> list[int]:
        """The queues 5.x receives of `group` pop: all of them, unless 4.x consumers are members too;
        then the queues the 4.x rebalance gives the 5.x members' client ids (module docstring)."""
        info = self.deps.clients.consumer_group(group)
        if info is None or info.consume_type == CONSUME_POP:
            return qids
        ids = {ch.client_id for ch in info.channels.values()}
        pop_ids = {ch.client_id for conn, ch in info.channels.items() if self.deps.is_pop_channel(conn)}
        if pop_ids == ids:
            return qids
        # 4.x members: they own every queue not allocated to a registered 5.x member (a 5.x client
        # that receives between two Telemetry streams gets nothing rather than their queues)
        share: set[int] = set()
        for cid in pop_ids:
            share.update(allocate_averagely(cid, qids, sorted(ids)))
        return [q for q in qids if q in share]

    async def receive(self, group: str, topic: str, queue_id: int, batch: int, invisible_ms: int,
                      accept: MessageFilter, deadline: float, order: bool = False,
                      init_mode: int = ConsumeInitMode.MIN) -> list[Delivery]:
        """Up to `batch` deliveries; waits (long polling) until `deadline` (loop time) when there are none.
        `order`: an orderly pop whatever the group's consumeMessageOrderly says (POP_MESSAGE's `order`)."""
        self.group_config(group)
        readable = self.read_queue_ids(topic)
        if queue_id >= 0 and queue_id not in readable:
            raise PopError(Failure.BAD_REQUEST, f"topic {topic} has no readable queue {queue_id}")
        fifo = order or self.is_fifo(group)
        loop = asyncio.get_running_loop()
        while True:
            # the group's membership may change while this receive long-polls: its share is taken anew
            qids = [q for q in self.pop_share(group, readable) if queue_id < 0 or q == queue_id]
            out: list[Delivery] = []
            scanned = False
            self._rr += 1
            start = self._rr % len(qids) if qids else 0
            for qid in qids[start:] + qids[:start]:
                if len(out) >= batch:
                    break
                got, moved = await self._collect((group, topic, qid), batch - len(out), invisible_ms, accept, fifo,
                                                 init_mode)
                out += got
                scanned = scanned or moved
            now = loop.time()
            if out or now >= deadline:
                return out
            if scanned:  # a selective filter passed over units that did not match: scan on before waiting
                await asyncio.sleep(0)
                continue
            wait_s = deadline - now
            next_visible = self._next_visible_ms(group, topic, qids)
            if next_visible is not None:
                wait_s = min(wait_s, max(0.0, next_visible / 1000 - time.time()) + 0.001)
            await self.wait_for_topic(topic, wait_s)

    async def pull(self, topic: str, qid: int, offset: int, batch: int, accept: MessageFilter,
                   deadline: float) -> tuple[list[MessageRecord], int, GetStatus]:
        """PullMessage (5.x pull consumers): messages from `offset`, waiting until `deadline` for a first one."""
        loop = asyncio.get_running_loop()
        while True:
            res = self.deps.store.get_messages(topic, qid, offset, batch)
            recs = []
            if res.status is GetStatus.FOUND:
                for buf in res.buffers:
                    try:
                        rec = decode_record(buf)[0]
                    except CodecError:
                        continue
                    if accept.accepts(rec):
                        recs.append(rec)
            if recs or res.status not in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE,
                                          GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.FOUND) \
                    or loop.time() >= deadline:
                return recs, res.next_begin_offset if res.status is not GetStatus.NO_MESSAGE_IN_QUEUE else offset, \
                    res.status
            if res.status is GetStatus.FOUND:  # everything filtered out: go on from there at once
                offset = res.next_begin_offset
                continue
            await self.wait_for_topic(topic, deadline - loop.time())

    async def wait_for_topic(self, topic: str, timeout_s: float) -> None:
        """Until a put to `topic` is dispatched, a pop state change wakes it, or timeout_s passes."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(topic, set()).add(fut)
        try:
            await asyncio.wait_for(fut, max(0.0, timeout_s))
        except TimeoutError:
            pass
        finally:
            waiting = self._waiters.get(topic)
            if waiting is not None:
                waiting.discard(fut)

    def _next_visible_ms(self, group: str, topic: str, qids: list[int]) -> int | None:
        best = None
        for qid in qids:
            q = self.state.queues.get((group, topic, qid))
            if q is None:
                continue
            for e in q.inflight.values():
                if best is None or e.visible_ms < best:
                    best = e.visible_ms
        return best

    async def _collect(self, key: Key, want: int, invisible_ms: int, accept: MessageFilter, fifo: bool,
                       init_mode: int = ConsumeInitMode.MIN) -> tuple[list[Delivery], bool]:
        """Up to `want` deliveries of one queue, and whether its next offset moved (units were passed over)."""
        group, topic, qid = key
        q = self._queue(key, init_mode)
        now_ms = int(time.time() * 1000)
        out: list[Delivery] = []
        entries: list[tuple[int, int, int]] = []
        max_att = self.max_attempts(group)
        for off in sorted(o for o, e in q.inflight.items() if e.visible_ms <= now_ms):
            if len(out) >= want:
                break
            e = q.inflight.get(off)
            if e is None or e.visible_ms > now_ms:
                continue
            rec = self._read(topic, qid, off)
            if rec is None:  # the message is gone (retention): nothing left to deliver
                self.state.ack(key, off, e.seq)
                continue
            if e.attempt >= max_att:
                await self._to_dlq(key, off, e.seq, rec, e.attempt)
                continue
            if not accept.accepts(rec):
                self.state.ack(key, off, e.seq)
                continue
            seq = self.state.next_seq()
            entries.append((off, seq, e.attempt + 1))
            out.append(Delivery(rec, qid, off, seq, e.attempt + 1, invisible_ms, now_ms))
        blocked = fifo and any(e.visible_ms > now_ms for e in q.inflight.values())
        new_next = q.next_offset
        if len(out) < want and not blocked and not (fifo and out):
            res = self._read_new(group, topic, qid, q.next_offset, want - len(out), accept)
            if res.status is GetStatus.FOUND:
                for buf, qoff in zip(res.buffers, res.queue_offsets, strict=True):
                    try:
                        rec = decode_record(buf)[0]
                    except CodecError as e:
                        log.error("pop.bad_record", topic=topic, queue_id=qid, offset=qoff, error=str(e))
                        continue
                    if not isinstance(accept, SqlFilter) and not accept.accepts(rec):  # SQL92: the store matched
                        continue
                    seq = self.state.next_seq()
                    entries.append((qoff, seq, 1))
                    out.append(Delivery(rec, qid, qoff, seq, 1, invisible_ms, now_ms))
                new_next = res.next_begin_offset
            elif res.status in _ADVANCE and res.next_begin_offset != q.next_offset:
                new_next = res.next_begin_offset
        moved = new_next != q.next_offset
        if entries or moved:
            self.state.pop(key, new_next, now_ms + invisible_ms, entries)
            self._commit(key)
        return out, moved

    def _read_new(self, group: str, topic: str, qid: int, offset: int, want: int, accept: MessageFilter) -> GetResult:
        """The store's lookup of new messages. A SQL92 filter is the lookup's record filter (on the record's
        property bytes) and, with the bitmap pre-filter, its unit filter: units the group's bits rule out are
        passed over without reading the CommitLog, as a pull does. `commitlog_bytes_read` counts each record read."""
        store = self.deps.store
        if not isinstance(accept, SqlFilter):
            res = store.get_messages(topic, qid, offset, want)
            self.commitlog_bytes_read += res.buffer_total_size
            return res
        matches = accept.selector.matches_record
        read = 0

        def record_filter(rec: memoryview) -> bool:
            nonlocal read
            read += len(rec)
            return matches(rec)
        bitmaps = self.deps.bitmaps
        gate: UnitGate | None = None
        if bitmaps is not None:  # pop has no subVersion: 0 never displaces a 4.x consumer's newer expression
            gate = bitmaps.gate(group, topic, qid, 0, accept.selector)
        res = store.get_messages(topic, qid, offset, want, None, record_filter, gate)
        if gate is not None and bitmaps is not None:
            bitmaps.count_skipped(gate)
        self.commitlog_bytes_read += read
        return res

    def runtime_info(self) -> dict[str, int]:
        """Ours in GET_BROKER_RUNTIME_INFO: the CommitLog bytes pop read for new messages."""
        return {"popCommitLogBytesRead": self.commitlog_bytes_read}

    def _read(self, topic: str, qid: int, offset: int) -> MessageRecord | None:
        store = self.deps.store
        units = store.read_units(topic, qid, offset, 1)
        if not units or len(units) < UNIT_SIZE:
            return None
        phys, size = UNIT_HEAD.unpack_from(units, 0)
        raw = store.read_record(phys, size)
        if raw is None or len(raw) == 0:
            return None
        try:
            return decode_record(raw)[0]
        except CodecError:
            return None

    # ---- ack / change / DLQ --------------------------------------------------------------
    def ack(self, group: str, topic: str, handle: str) -> None:
        qid, offset, seq = decode_handle(handle)
        key = (group, topic, qid)
        if not self.state.ack(key, offset, seq):
            raise PopError(Failure.INVALID_RECEIPT,
                           f"receipt handle {handle} is expired or was acked (topic {topic}, group {group})")
        self._commit(key)
        if self.is_fifo(group):
            self._wake(topic)

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        qid, offset, seq = decode_handle(handle)
        new = self.state.change((group, topic, qid), offset, seq, int(time.time() * 1000) + invisible_ms)
        if new is None:
            raise PopError(Failure.INVALID_RECEIPT,
                           f"receipt handle {handle} is expired or was acked (topic {topic}, group {group})")
        if invisible_ms == 0:
            self._wake(topic)
        return encode_handle(qid, offset, new)

    # ---- receipts by visible time (remoting: Apache's extraInfo) --------------------------------
    def _by_visible(self, key: Key, offset: int, visible_ms: int) -> Inflight:
        e = self.state.find(key, offset)
        if e is None or e.visible_ms != visible_ms:
            group, topic, qid = key
            raise PopError(Failure.INVALID_RECEIPT, f"no delivery of {topic} queue {qid} offset {offset} "
                                                    f"visible at {visible_ms} is in flight for group {group}: "
                                                    "expired, acked or changed since")
        return e

    def ack_by_visible(self, group: str, topic: str, qid: int, offset: int, visible_ms: int) -> None:
        """ACK_MESSAGE: the delivery of (queue, offset) that becomes visible at `visible_ms` is done."""
        key = (group, topic, qid)
        e = self._by_visible(key, offset, visible_ms)
        self.state.ack(key, offset, e.seq)
        self._commit(key)
        if self.is_fifo(group) or self.state.find(key, offset) is None:
            self._wake(topic)

    def change_by_visible(self, group: str, topic: str, qid: int, offset: int, visible_ms: int,
                          invisible_ms: int) -> int:
        """CHANGE_MESSAGE_INVISIBLETIME: that delivery is invisible for `invisible_ms` from now; the pop
        time (now) of its new receipt."""
        key = (group, topic, qid)
        e = self._by_visible(key, offset, visible_ms)
        now_ms = int(time.time() * 1000)
        self.state.change(key, offset, e.seq, now_ms + invisible_ms)
        if invisible_ms == 0:
            self._wake(topic)
        return now_ms

    def peek(self, group: str, topic: str, qid: int, batch: int) -> list[bytes]:
        """PEEK_MESSAGE: the stored records a pop of the queue would hand out next, nothing changed."""
        self.group_config(group)
        if qid not in self.read_queue_ids(topic):
            raise PopError(Failure.BAD_REQUEST, f"topic {topic} has no readable queue {qid}")
        q = self.state.queues.get((group, topic, qid))
        if q is not None:
            start = q.next_offset
        else:
            committed = self.deps.offsets.query(group, topic, qid)
            start = committed if committed >= 0 else max(0, self.deps.store.min_offset(topic, qid))
        res = self.deps.store.get_messages(topic, qid, start, batch)
        return [bytes(b) for b in res.buffers] if res.status is GetStatus.FOUND else []

    def has_message(self, group: str, topic: str, queue_id: int) -> bool:
        """NOTIFICATION: would a pop of the queue (or any readable queue, -1) hand something out now?"""
        self.group_config(group)
        now_ms = int(time.time() * 1000)
        for qid in self.read_queue_ids(topic):
            if queue_id >= 0 and qid != queue_id:
                continue
            q = self.state.queues.get((group, topic, qid))
            if q is None:
                committed = self.deps.offsets.query(group, topic, qid)
                start = committed if committed >= 0 else max(0, self.deps.store.min_offset(topic, qid))
            else:
                if any(e.visible_ms <= now_ms for e in q.inflight.values()):
                    return True
                start = q.next_offset
            if self.deps.store.max_offset(topic, qid) > start:
                return True
        return False

    async def wait_for_message(self, group: str, topic: str, queue_id: int, deadline: float) -> bool:
        """NOTIFICATION's long polling: has_message, waiting until `deadline` (loop time) for one."""
        loop = asyncio.get_running_loop()
        while True:
            if self.has_message(group, topic, queue_id):
                return True
            now = loop.time()
            if now >= deadline:
                return False
            await self.wait_for_topic(topic, deadline - now)

    def rest_num(self, group: str, topic: str, queue_id: int) -> int:
        """POP_MESSAGE's restNum: messages not yet handed out in the queue (all readable ones for -1)."""
        tcfg = self.deps.topics.get(topic)
        if tcfg is None:
            return 0
        rest = 0
        for qid in range(tcfg.read_queue_nums):
            if queue_id < 0 or qid == queue_id:
                q = self.state.queues.get((group, topic, qid))
                if q is not None:
                    rest += max(0, self.deps.store.max_offset(topic, qid) - q.next_offset)
        return rest

    def polling_count(self, topic: str) -> int:
        """POLLING_INFO: how many long-polling requests wait on the topic."""
        return len(self._waiters.get(topic, ()))

    async def forward_to_dlq(self, group: str, topic: str, handle: str) -> None:
        qid, offset, seq = decode_handle(handle)
        key = (group, topic, qid)
        q = self.state.queues.get(key)
        e = q.inflight.get(offset) if q else None
        if e is None or e.seq != seq:
            raise PopError(Failure.INVALID_RECEIPT, f"receipt handle {handle} is expired or was acked")
        rec = self._read(topic, qid, offset)
        if rec is None:
            self.state.ack(key, offset, seq)
        else:
            await self._to_dlq(key, offset, seq, rec, e.attempt)
        self._commit(key)

    async def _to_dlq(self, key: Key, offset: int, seq: int, rec: MessageRecord, attempts: int) -> None:
        group, topic, qid = key
        dlq = DLQ_PREFIX + group
        self.deps.topics.create_in_send_back(dlq, 1, 6)
        props = {k: v for k, v in rec.properties.items()
                 if k not in (K.DELAY, K.TIMER_DELIVER_MS, K.TIMER_DELAY_MS, K.TIMER_DELAY_SEC, K.TIMER_OUT_MS)}
        props[K.DLQ_ORIGIN_TOPIC] = topic
        props[K.DLQ_ORIGIN_MESSAGE_ID] = rec.properties.get(K.UNIQ_KEY) or offset_msg_id(
            *self.deps.store_host, rec.commitlog_offset)
        props[K.RETRY_TOPIC] = topic
        dead = MessageRecord(topic=dlq, body=rec.body, queue_id=0, flag=rec.flag, sys_flag=rec.sys_flag,
                             born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                             store_host=self.deps.store_host, reconsume_times=attempts, properties=props)
        code, remark = await self.deps.put_record(dead, False)
        if code != ResponseCode.SUCCESS:
            raise PopError(Failure.INTERNAL, f"could not store to {dlq}: {remark}")
        # the entry may have been acked while the put waited: then there is nothing more to do
        if self.state.ack(key, offset, seq):
            self.dlq_total += 1
            log.info("pop.to_dlq", group=group, topic=topic, queue_id=qid, offset=offset, attempts=attempts)

    async def _sweep_forever(self) -> None:
        """Moves deliveries past their max attempts to the DLQ when nobody receives (run by the store's
        supervisor: a failure is logged, counted, backed off and the sweep restarted)."""
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self._sweep()
            except Exception:
                self.sweep_errors += 1
                raise

    async def _sweep(self) -> None:
        now_ms = int(time.time() * 1000)
        for key, q in list(self.state.queues.items()):
            max_att = self.max_attempts(key[0])
            due = [(off, e.seq, e.attempt) for off, e in q.inflight.items()
                   if e.visible_ms <= now_ms and e.attempt >= max_att]
            for off, seq, attempts in due:
                rec = self._read(key[1], key[2], off)
                if rec is None:
                    self.state.ack(key, off, seq)
                else:
                    await self._to_dlq(key, off, seq, rec, attempts)
            if due:
                self._commit(key)

    def stats(self) -> dict[str, int]:
        return {"grpcPopQueues": len(self.state.queues),
                "grpcPopInflight": sum(len(q.inflight) for q in self.state.queues.values()),
                "grpcPopDlq": self.dlq_total,
                "grpcLongPollParked": self.parked}

    @property
    def parked(self) -> int:
        """ReceiveMessage / PullMessage calls parked now, waiting for a put to their topic (a long poll)."""
        return sum(1 for futs in self._waiters.values() for f in futs if not f.done())
