"""Dequeue stage (scheduled-messages.md §4.5 steps 3-5): due slot → messages → real topic.

Two asyncio tasks joined by a bounded asyncio.Queue:
- the reader finds the next non-empty slot (wheel occupancy search), sleeps until its time with
  loop.call_at (woken early when the enqueue stage links an earlier slot), walks the slot's unit
  chain (lastPos → prevPos), collects cancel keys from the delete markers, orders the units by their
  exact deliver ms (timerlog reserved field) and pushes chunks, then a commit marker for the slot;
- the putter waits until each unit's exact ms (never early), rewrites the records (real topic and
  queue, TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS; roll units go back to rmq_sys_wheel_timer with
  TIMER_ROLL_TIMES + 1) and puts them in batches: per batch one MessageStore.read_records, one
  codec.timer_rewrite.build_timer_deliveries (bytes edits, no property dict), one put, and the
  due / delivered events handed to the listeners as one list each. A failed put is retried after 500 × precision / 1000
  ms until it succeeds (illegal records are dropped and counted). `commit_read_ms` moves when the
  putter reaches the slot's commit marker, i.e. after every message of the slot was put.
"""

from __future__ import annotations

import asyncio
import struct
import time
from itertools import accumulate

import numpy as np
import structlog

from codec.codes import SysFlag
from codec.properties import parse_properties
from codec.record import POS_SYS_FLAG, read_properties_bytes, read_store_timestamp, store_timestamp_pos
from codec.timer_rewrite import CANCELLED, MISSING, build_timer_deliveries
from scheduler.timer.hook import TIMER_DEL_UNIQKEY
from scheduler.timer.timerlog import MAGIC_DELETE, MAGIC_ROLL
from storage.message_store import PutStatus

log = structlog.get_logger(__name__)

CHUNK = 4096
WALK_STEP = 20000  # units per timerlog read between yields to the loop
_GIVE_UP = {"MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED"}
PUT_OK = PutStatus.PUT_OK
_SYS_FLAG = struct.Struct(">i")
_TS_POS = (store_timestamp_pos(0), store_timestamp_pos(SysFlag.BORNHOST_V6))  # STORETIMESTAMP by BORNHOST_V6


class _PutRun:
    """Converted records (record, topic, queue id, tagsCode, keys) as MessageStore.put_batch takes
    them (the attributes of codec.delivery_batch.DeliveryBatch): back to back in one buffer."""

    __slots__ = ("buf", "starts", "dests", "tags_codes", "keys", "ts_pos")

    def __init__(self, built: list[tuple]) -> None:
        recs = [b[0] for b in built]
        self.buf = bytearray(b"".join(recs))
        self.starts = list(accumulate(map(len, recs), initial=0))
        self.dests = [(b[1], b[2]) for b in built]
        self.tags_codes = [b[3] for b in built]
        self.keys = [b[4] for b in built]
        sys_flag = _SYS_FLAG.unpack_from
        buf = self.buf
        self.ts_pos = [s + _TS_POS[(sys_flag(buf, s + POS_SYS_FLAG)[0] & SysFlag.BORNHOST_V6) != 0]
                       for s in self.starts[:-1]]


class SlotChunk:
    """Units of one slot in due order, as parallel int64 numpy arrays (no object per message)."""

    __slots__ = ("slot", "due", "exact", "offset", "size", "magic", "write_ms", "cancel", "base")

    def __init__(self, slot: int, cancel: set[str], due, exact, offset, size, magic, write_ms, base: int = 0) -> None:
        self.slot = slot
        self.base = base  # index of the chunk's first unit in the slot's due order
        self.cancel = cancel
        self.due = due
        self.exact = exact
        self.offset = offset
        self.size = size
        self.magic = magic
        self.write_ms = write_ms


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
                    self._move_cursor(target)
                    await self._put_queue.put(target)
                self._reader_target = s if s is not None else 1 << 62
                # idle: wake at least every quarter ring so the cursor never falls a ring behind
                await self._sleep_until(s if s is not None else now + self.wheel.ring // 8 * prec, wakeable=True)
                self._reader_target = 1 << 62
                continue
            if self.wheel.get_slot(s)[1] < 0:  # stale occupancy mark (slot holds another time)
                self.wheel.release(s)
                continue
            self._move_cursor(s + prec)
            for chunk in await self._load_slot(s):
                await self._put_queue.put(chunk)
            await self._put_queue.put(s + prec)

    async def _load_slot(self, s: int) -> list[SlotChunk]:
        """Walk the chain of slot s; delete markers first (their keys), then units in due order,
        ties oldest first: the walk goes newest -> oldest (prevPos), so it is reversed before the
        stable sort, as RocketMQ 5's dequeue puts each unit at the front of its normal-message list."""
        wheel, tl = self.wheel, self.timerlog
        _first, pos, _num = wheel.get_slot(s)
        wheel.release(s)
        min_pos = tl.min_pos
        parts = []
        while pos >= min_pos and pos >= 0:
            units, pos, bad = tl.read_chain(pos, min_pos, WALK_STEP)
            parts.append(units)
            if bad is not None:
                log.error("timer.bad_unit", pos=bad, slot=s)
                break
            if pos >= min_pos and pos >= 0:
                await asyncio.sleep(0)  # yield to the loop between steps of a long chain
        tl.forget_read_pages()
        units = (parts[0] if len(parts) == 1 else np.concatenate(parts))[::-1]
        magic = units["magic"].astype(np.int64)
        marker = ((magic & MAGIC_DELETE) != 0) & ((magic & MAGIC_ROLL) == 0)
        cancel: set[str] = set()
        if marker.any():
            for off, sz in zip(units["offset"][marker].tolist(), units["size_py"][marker].tolist(), strict=True):
                rec = self.store.read_record(off, sz)
                if rec is not None:
                    key = parse_properties(read_properties_bytes(rec, 0)).get(TIMER_DEL_UNIQKEY)
                    if key:
                        cancel.add(key)
            keep = ~marker
            units, magic = units[keep], magic[keep]
        exact = units["exact"].astype(np.int64)
        due = np.where((magic & MAGIC_ROLL) != 0, s, exact)
        order = np.argsort(due, kind="stable")
        due, exact, magic = due[order], exact[order], magic[order]
        offset = units["offset"].astype(np.int64)[order]
        size = units["size_py"].astype(np.int64)[order]
        write_ms = units["write_ms"].astype(np.int64)[order]
        self.metrics.markers_seen = len(cancel)
        base = 0
        resume = self._resume_after
        if resume is not None and resume[0] == s:
            # a promoted slave: the old master had put this slot's units up to (due, phys) = resume[1:]
            self._resume_after = None
            done = (due < resume[1]) | ((due == resume[1]) & (offset <= resume[2]))
            base = int(done.sum())
            keep = ~done
            due, exact, magic, offset, size, write_ms = (a[keep] for a in (due, exact, magic, offset, size, write_ms))
            log.info("timer.resume_slot", slot=s, skipped=base, remaining=len(due))
        return [SlotChunk(s, cancel, due[i:i + CHUNK], exact[i:i + CHUNK], offset[i:i + CHUNK], size[i:i + CHUNK],
                          magic[i:i + CHUNK], write_ms[i:i + CHUNK], base + i) for i in range(0, len(due), CHUNK)]

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
                    self.slot_progress = (item, 0, -1, -1)
                continue
            if item.slot > self.commit_read_ms:
                # the reader hands slots over in order, so every slot below this one is put (a slot
                # already due when the reader reached it comes without an advance marker before it)
                self.commit_read_ms = item.slot
                self.checkpoint.set_read_time(item.slot)
                self.slot_progress = (item.slot, item.base, -1, -1)
            await self._deliver_chunk(item)

    async def _deliver_chunk(self, c: SlotChunk) -> None:
        i, n = 0, len(c.due)
        batch = self.config.put_batch
        while i < n:
            now = now_ms()
            j = i + int(np.searchsorted(c.due[i:n], now, side="right"))
            if j == i:
                await self._sleep_until(int(c.due[i]), wakeable=False)
                continue
            while i < j:
                k = min(j, i + batch)
                await self._put_units(c, i, k)
                # seed 003's localIndex: units of the slot put so far, and the due order key of the last
                self.slot_progress = (c.slot, c.base + k, int(c.due[k - 1]), int(c.offset[k - 1]))
                i = k

    async def _put_units(self, c: SlotChunk, lo: int, hi: int) -> None:
        """convert + convertMessage for units lo..hi of a chunk, then one put_batch (retried as a batch)."""
        m = self.metrics
        offsets = c.offset[lo:hi].tolist()
        raws = self.store.read_records(zip(offsets, c.size[lo:hi].tolist(), strict=True))
        exact = c.exact[lo:hi].tolist()
        rolls = (c.magic[lo:hi] & MAGIC_ROLL).tolist()
        listening = bool(m.listeners)
        uniqs: list | None = [] if listening else None
        built = build_timer_deliveries(raws, rolls, exact, c.write_ms[lo:hi].tolist(), now_ms(), c.cancel,
                                       uniqs=uniqs)  # (record, topic, queue id, tagsCode, keys) tuples
        reqs, dues = [], []  # dues: exact deliver ms of a final delivery, None for a roll
        events = [] if listening else None  # per request: (msgId prefix, topic, uniqKey, storeTs, offset) or None
        for k, b in enumerate(built):
            if type(b) is int:
                if b == MISSING:
                    m.missing += 1
                elif b == CANCELLED:
                    m.cancelled += 1
                continue  # SKIPPED: a (rolled-then-final) marker or no REAL_TOPIC is never delivered
            reqs.append(b)
            if rolls[k]:
                dues.append(None)
                if listening:
                    events.append(None)
                continue
            due = exact[k]
            dues.append(due)
            if listening:
                raw = raws[k]
                u = uniqs[k]
                events.append((self.msg_id_prefix(raw), b[1], u.decode("utf-8", "replace") if u is not None
                               else None, read_store_timestamp(raw, 0), offsets[k]))
        del raws
        if events:
            m.emit_many("due", [(e[1], e[2], e[0] + f"{e[4]:016X}", e[3], due, 0)
                                for e, due in zip(events, dues, strict=True) if e is not None])
        await self._put_with_retry(reqs, dues, events)

    async def _put_with_retry(self, reqs: list, dues: list, events: list | None) -> None:
        """Put the converted records (tuples) with MessageStore.put_batch; records that failed with a
        retryable status are put again after a back-off, illegal ones are dropped and counted."""
        m = self.metrics
        backoff = 0.5 * self.config.precision_ms / 1000.0
        while reqs:
            res = self.store.put_batch(_PutRun(reqs))
            statuses, phys = res.statuses, res.phys
            retry = []
            done = now_ms()
            late = []
            delivered = [] if events is not None else None
            rolled = 0
            for k, due in enumerate(dues):
                if statuses is None or statuses[k] is PUT_OK:
                    if due is None:
                        rolled += 1
                        continue
                    late.append(done - due)
                    if delivered is not None:
                        prefix, topic, uniq, store_ts, _off = events[k]
                        delivered.append((topic, uniq, prefix + f"{phys[k]:016X}", store_ts, due, done))
                elif statuses[k].name in _GIVE_UP:
                    m.put_failures += 1
                    log.error("timer.deliver_dropped", topic=reqs[k][1], status=statuses[k].name)
                else:
                    m.put_failures += 1
                    retry.append(k)
            m.rolled += rolled
            if late:
                m.delivered += len(late)
                m.lateness.observe_many(late)
                m.dequeue_latency_ms = late[-1]
            m.dequeue_rate.add(len(reqs) - len(retry))
            if delivered:
                m.emit_many("delivered", delivered)
            if retry:
                reqs, dues = [reqs[k] for k in retry], [dues[k] for k in retry]
                events = [events[k] for k in retry] if events is not None else None
                log.warning("timer.deliver_retry", count=len(reqs), backoff_s=backoff)
                await asyncio.sleep(backoff)  # back-off before retrying failed puts
            else:
                reqs = []
                await asyncio.sleep(0)
