"""Dequeue stage (scheduled-messages.md §4.5 steps 3-5): due slot → messages → real topic.

Two asyncio tasks joined by a bounded asyncio.Queue:
- the reader finds the next non-empty slot (wheel occupancy search), sleeps until its time with
  loop.call_at (woken early when the enqueue stage links an earlier slot), walks the slot's unit
  chain (lastPos → prevPos), collects cancel keys from the delete markers, orders the units by their
  exact deliver ms (timerlog reserved field) and pushes chunks, then a commit marker for the slot;
- the putter waits until each unit's exact ms (never early), rewrites the records (real topic and
  queue, TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS; roll units go back to rmq_sys_wheel_timer with
  TIMER_ROLL_TIMES + 1) and puts them in batches. A failed put is retried after 500 × precision / 1000
  ms until it succeeds (illegal records are dropped and counted). `commit_read_ms` moves when the
  putter reaches the slot's commit marker, i.e. after every message of the slot was put.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from bisect import bisect_right

import structlog

from codec.properties import parse_properties, properties_to_string
from codec.record import read_properties_bytes, read_store_timestamp, rewrite_for_delivery
from codec.tags import java_hash
from scheduler.timer.config import TIMER_TOPIC
from scheduler.timer.hook import (
    REAL_QID,
    REAL_TOPIC,
    TIMER_DEL_UNIQKEY,
    TIMER_DELIVER_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    TIMER_ROLL_TIMES,
    UNIQ_KEY,
)
from scheduler.timer.timerlog import MAGIC_DELETE, MAGIC_ROLL

log = structlog.get_logger(__name__)

CHUNK = 4096
_GIVE_UP = {"MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED"}


class SlotChunk:
    """Units of one slot in due order, as parallel int64 arrays (no object per message)."""

    __slots__ = ("slot", "due", "exact", "offset", "size", "magic", "write_ms", "cancel")

    def __init__(self, slot: int, cancel: set[str]) -> None:
        self.slot = slot
        self.cancel = cancel
        self.due = array("q")
        self.exact = array("q")
        self.offset = array("q")
        self.size = array("q")
        self.magic = array("q")
        self.write_ms = array("q")


def now_ms() -> int:
    return int(time.time() * 1000)


class DequeueMixin:
    # ---- wake-ups ----------------------------------------------------------------------
    def _wake_reader(self, slot: int) -> None:
        if slot < self._reader_target:
            fut = self._reader_wake
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def _sleep_until(self, target_ms: int, wakeable: bool) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if wakeable:
            self._reader_wake = fut
        handle = None
        if target_ms is not None:
            delay = max(0.0, (target_ms - now_ms()) / 1000.0)
            handle = loop.call_at(loop.time() + delay, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
            if wakeable:
                self._reader_wake = None

    # ---- reader ------------------------------------------------------------------------
    async def _reader_loop(self) -> None:
        prec = self.config.precision_ms
        while self._running:
            s = self.wheel.next_nonempty(self.read_cursor_ms)
            now = now_ms()
            if s is None or s > now:
                floor_now = now - now % prec
                target = floor_now if s is None else min(s, floor_now)
                if target > self.read_cursor_ms:  # empty slots passed: let the read clock follow time
                    self.read_cursor_ms = target
                    await self._put_queue.put(target)
                self._reader_target = s if s is not None else 1 << 62
                # idle: wake at least every quarter ring so the cursor never falls a ring behind
                await self._sleep_until(s if s is not None else now + self.wheel.ring // 8 * prec, wakeable=True)
                self._reader_target = 1 << 62
                continue
            if self.wheel.get_slot(s)[1] < 0:  # stale occupancy mark (slot holds another time)
                self.wheel.release(s)
                continue
            self.read_cursor_ms = s + prec
            for chunk in await self._load_slot(s):
                await self._put_queue.put(chunk)
            await self._put_queue.put(s + prec)

    async def _load_slot(self, s: int) -> list[SlotChunk]:
        """Walk the chain of slot s; delete markers first (their keys), then units in due order."""
        wheel, tl = self.wheel, self.timerlog
        _first, pos, _num = wheel.get_slot(s)
        wheel.release(s)
        min_pos = tl.min_pos
        due, exact, offs, sizes, magics, wms = (array("q") for _ in range(6))
        cancel: set[str] = set()
        n = 0
        while pos >= min_pos and pos >= 0:
            size, prev, magic, wms_, delta, off, sz, _h, ex = tl.read(pos)
            if size != 52:
                log.error("timer.bad_unit", pos=pos, slot=s)
                break
            if magic & MAGIC_DELETE and not magic & MAGIC_ROLL:
                rec = self.store.read_record(off, sz)
                if rec is not None:
                    key = parse_properties(read_properties_bytes(rec, 0)).get(TIMER_DEL_UNIQKEY)
                    if key:
                        cancel.add(key)
            else:
                due.append(s if magic & MAGIC_ROLL else ex)
                exact.append(ex)
                offs.append(off)
                sizes.append(sz)
                magics.append(magic)
                wms.append(wms_)
            pos = prev
            n += 1
            if n % 20000 == 0:
                await asyncio.sleep(0)
        tl.forget_read_pages()
        order = sorted(range(len(due)), key=due.__getitem__)
        chunks = []
        for start in range(0, len(order), CHUNK):
            c = SlotChunk(s, cancel)
            for i in order[start:start + CHUNK]:
                c.due.append(due[i])
                c.exact.append(exact[i])
                c.offset.append(offs[i])
                c.size.append(sizes[i])
                c.magic.append(magics[i])
                c.write_ms.append(wms[i])
            chunks.append(c)
        self.metrics.markers_seen = len(cancel)
        return chunks

    # ---- putter ------------------------------------------------------------------------
    async def _putter_loop(self) -> None:
        q = self._put_queue
        while True:
            item = await q.get()
            if item is None:
                return
            if isinstance(item, int):
                if item > self.commit_read_ms:
                    self.commit_read_ms = item
                    self.checkpoint.set_read_time(item)
                continue
            await self._deliver_chunk(item)

    async def _deliver_chunk(self, c: SlotChunk) -> None:
        i, n = 0, len(c.due)
        batch = self.config.put_batch
        while i < n:
            now = now_ms()
            j = bisect_right(c.due, now, i, n)
            if j == i:
                await self._sleep_until(c.due[i], wakeable=False)
                continue
            while i < j:
                k = min(j, i + batch)
                await self._put_units(c, i, k)
                i = k

    async def _put_units(self, c: SlotChunk, lo: int, hi: int) -> None:
        from storage.message_store import PutRequest

        store, m = self.store, self.metrics
        emit = bool(m.listeners)
        reqs, infos = [], []
        now = now_ms()
        for i in range(lo, hi):
            rec = store.read_record(c.offset[i], c.size[i])
            if rec is None:
                m.missing += 1
                continue
            props = parse_properties(read_properties_bytes(rec, 0))
            magic = c.magic[i]
            if magic & MAGIC_ROLL:
                props[TIMER_ROLL_TIMES] = str(int(props.get(TIMER_ROLL_TIMES, "0") or 0) + 1)
                props[TIMER_DELIVER_MS] = str(c.exact[i])
                props[TIMER_ENQUEUE_MS] = str(c.write_ms[i])
                props[TIMER_DEQUEUE_MS] = str(now)
                raw = rewrite_for_delivery(rec, TIMER_TOPIC, 0,
                                           properties_bytes=properties_to_string(props).encode())
                reqs.append(PutRequest(raw, TIMER_TOPIC, 0, 0, ()))
                infos.append(None)
                continue
            topic = props.get(REAL_TOPIC)
            uniq = props.get(UNIQ_KEY)
            if c.cancel and uniq and f"{topic}+{uniq}" in c.cancel:
                m.cancelled += 1
                continue
            if TIMER_DEL_UNIQKEY in props or not topic:
                continue  # a (rolled-then-final) marker is never delivered
            try:
                qid = int(props.get(REAL_QID, "0"))
            except ValueError:
                qid = 0
            props[TIMER_ENQUEUE_MS] = str(c.write_ms[i])
            props[TIMER_DEQUEUE_MS] = str(now)
            raw = rewrite_for_delivery(rec, topic, qid, properties_bytes=properties_to_string(props).encode())
            keys = [k for k in (props.get("KEYS") or "").split(" ") if k]
            if uniq:
                keys.append(uniq)
            tags = props.get("TAGS")
            reqs.append(PutRequest(raw, topic, qid, java_hash(tags) if tags else 0, tuple(keys)))
            store_ts = read_store_timestamp(rec, 0)
            infos.append((c.exact[i], topic, uniq, store_ts))
            if emit:
                m.emit("due", kind="timer", level=0, topic=topic, uniqKey=uniq, msgId=self.msg_id(rec, c.offset[i]),
                       bornTs=0, storeTs=store_ts, dueTs=c.exact[i], deliveredTs=0)
        await self._put_with_retry(reqs, infos)

    async def _put_with_retry(self, reqs: list, infos: list) -> None:
        m = self.metrics
        backoff = 0.5 * self.config.precision_ms / 1000.0
        while reqs:
            results = self.store.put(reqs)
            retry_r, retry_i = [], []
            done = now_ms()
            for req, info, res in zip(reqs, infos, results, strict=True):
                if res.status.name == "PUT_OK":
                    if info is None:
                        m.rolled += 1
                        continue
                    m.delivered += 1
                    late = done - info[0]
                    m.lateness.observe(late if late > 0 else 0)
                    m.dequeue_latency_ms = late
                    if m.listeners:
                        m.emit("delivered", kind="timer", level=0, topic=info[1], uniqKey=info[2],
                               msgId=self.msg_id_from(res.phys_offset), bornTs=0, storeTs=info[3],
                               dueTs=info[0], deliveredTs=done)
                elif res.status.name in _GIVE_UP:
                    m.put_failures += 1
                    log.error("timer.deliver_dropped", topic=req.topic, status=res.status.name)
                else:
                    m.put_failures += 1
                    retry_r.append(req)
                    retry_i.append(info)
            m.dequeue_rate.add(len(reqs) - len(retry_r))
            reqs, infos = retry_r, retry_i
            if reqs:
                log.warning("timer.deliver_retry", count=len(reqs), backoff_s=backoff)
                await asyncio.sleep(backoff)  # back-off before retrying failed puts
            else:
                await asyncio.sleep(0)
