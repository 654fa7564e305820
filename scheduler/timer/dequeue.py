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
  ms until it succeeds; a record that cannot be converted (build_timer_deliveries raises for it)
  or that the store refuses for good (too large once converted) is quarantined
  (scheduler.quarantine) and the rest of its batch goes on. `commit_read_ms` moves when the
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
from codec.errors import CodecError
from codec.properties import parse_properties
from codec.record import POS_SYS_FLAG, read_properties_bytes, read_store_timestamp, store_timestamp_pos
from codec.timer_rewrite import CANCELLED, MISSING, SKIPPED, build_timer_deliveries
from scheduler.events import count_puts
from scheduler.progress_file import NO_PHYS
from scheduler.quarantine import GIVE_UP, TIMER_DEQUEUE
from scheduler.timer.hook import REAL_TOPIC as REAL_TOPIC_KEY
from scheduler.timer.hook import TIMER_DEL_UNIQKEY
from scheduler.timer.timerlog import MAGIC_DELETE, MAGIC_ROLL, UNIT_DTYPE
from storage.message_store import PutStatus

log = structlog.get_logger(__name__)

CHUNK = 4096
WALK_STEP = 20000  # units per timerlog read between yields to the loop
QUARANTINED = -1  # a unit whose record was set aside (scheduler.quarantine)
PUT_OK = PutStatus.PUT_OK
_SYS_FLAG = struct.Struct(">i")
_TS_POS = (store_timestamp_pos(0), store_timestamp_pos(SysFlag.BORNHOST_V6))  # STORETIMESTAMP by BORNHOST_V6


class _PutRun:
    """Converted records (record, topic, queue id, tagsCode, keys) as MessageStore.put_batch takes
    them (a storage.store_types.PutBatch): back to back in one buffer."""

    __slots__ = ("buf", "starts", "dests", "tags_codes", "keys", "ts_pos", "deliver_delays")

    def __init__(self, built: list[tuple]) -> None:
        self.deliver_delays = None  # a roll goes back to the wheel's topic by its own TIMER_OUT_MS
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
    """Units of one slot in delivery order (due ms, then timerlog position), as parallel int64 numpy
    arrays (no object per message). `last_pos`: the slot's chain end when it was loaded."""

    __slots__ = ("slot", "due", "exact", "offset", "size", "magic", "write_ms", "cancel", "base", "done", "pos",
                 "last_pos")

    def __init__(self, slot: int, cancel: set[str], due, exact, offset, size, magic, write_ms, base: int = 0,
                 pos=None, last_pos: int = -1) -> None:
        self.slot = slot
        self.base = base  # index of the chunk's first unit in the slot's due order
        self.cancel = cancel
        self.due = due
        self.exact = exact
        self.offset = offset
        self.size = size
        self.magic = magic
        self.write_ms = write_ms
        self.done = 0  # units already put (a restarted putter goes on from here)
        self.pos = pos if pos is not None else np.full(len(due), -1, dtype=np.int64)
        self.last_pos = last_pos

    def __len__(self) -> int:
        return len(self.due)

    def take(self, keep, base: int | None = None) -> SlotChunk:
        """The units selected by a boolean or index array, same slot (`base`: the first one's index in
        the slot's due order, default unchanged)."""
        return SlotChunk(self.slot, self.cancel, self.due[keep], self.exact[keep], self.offset[keep], self.size[keep],
                         self.magic[keep], self.write_ms[keep], self.base if base is None else base, self.pos[keep],
                         self.last_pos)


def _no_real_topic(raw) -> bool:
    """A timer record that is not a delete marker and has no REAL_TOPIC: nowhere to deliver it."""
    props = parse_properties(read_properties_bytes(raw, 0))
    return not props.get(REAL_TOPIC_KEY) and TIMER_DEL_UNIQKEY not in props


def now_ms() -> int:
    return int(time.time() * 1000)


def already_put(c: SlotChunk, done_due: int, done_pos: int, last_pos: int):
    """Which units of a reloaded slot scheduleProgress says were put before: units the slot held when
    it was loaded then (timerlog position <= last_pos) ordered at or before (done_due, done_pos)."""
    return (c.pos <= last_pos) & ((c.due < done_due) | ((c.due == done_due) & (c.pos <= done_pos)))


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
            try:
                chunks = await self._load_slot(s)
            except Exception:  # nothing of the slot was queued: a restarted reader loads it again
                self.wheel.reoccupy(s)
                self._move_cursor(s)
                raise
            for chunk in chunks:
                await self._put_queue.put(chunk)
            await self._put_queue.put(s + prec)

    async def _load_slot(self, s: int) -> list[SlotChunk]:
        """Walk the chain of slot s (yielding to the loop between steps of a long chain), then
        `_order_slot`; split into chunks of CHUNK units."""
        wheel, tl = self.wheel, self.timerlog
        _first, last, _num = wheel.get_slot(s)
        wheel.release(s)
        min_pos = tl.min_pos
        parts = []
        pos = last
        while pos >= min_pos and pos >= 0:
            units, pos, bad = tl.read_chain(pos, min_pos, WALK_STEP)
            parts.append(units)
            if bad is not None:
                log.error("timer.bad_unit", pos=bad, slot=s)
                break
            if pos >= min_pos and pos >= 0:
                await asyncio.sleep(0)  # yield to the loop between steps of a long chain
        tl.forget_read_pages()
        c = self._order_slot(s, last, parts)
        skipped = 0
        after = self._resume_after
        if after is not None and after[0] == s:
            # a promoted slave: the old master had put this slot's units up to (due, phys) = after[1:]
            self._resume_after = None
            done = (c.due < after[1]) | ((c.due == after[1]) & (c.offset <= after[2]))
            skipped = int(done.sum())
            c = c.take(~done)
            log.info("timer.resume_slot", slot=s, skipped=skipped, remaining=len(c))
        resume = self._resume
        if resume is not None and resume[0] == s:  # the slot a kill interrupted: what was put stays put
            self._resume = None
            done = already_put(c, *resume[1:])
            skipped += int(done.sum())
            c = c.take(~done)
            log.info("timer.slot_resumed", slot=s, done_due=resume[1], done_pos=resume[2], left=len(c))
        return [c.take(slice(i, i + CHUNK), skipped + i) for i in range(0, len(c), CHUNK)]

    def _walk_slot(self, s: int) -> tuple[int, list]:
        """(the slot's chain end, the chain's units) without yielding (recovery)."""
        tl = self.timerlog
        _first, last, _num = self.wheel.get_slot(s)
        min_pos = tl.min_pos
        parts = []
        pos = last
        while pos >= min_pos and pos >= 0:
            units, pos, bad = tl.read_chain(pos, min_pos, WALK_STEP)
            parts.append(units)
            if bad is not None:
                break
        return last, parts

    def _order_slot(self, s: int, last: int, parts: list, markers_upto: int | None = None) -> SlotChunk:
        """The walked chain (newest first) of slot s as one SlotChunk: delete markers set aside (their
        keys), units in due order, ties oldest first (lower timerlog position): the walk is reversed
        before the stable sort, as RocketMQ 5's dequeue puts each unit at the front of its
        normal-message list. So the order is by (due, timerlog position)."""
        chain = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, dtype=UNIT_DTYPE)
        # a unit's own position: the chain's start for the first, else the prevPos of the one before it
        where = np.empty(len(chain), dtype=np.int64)
        if len(chain):
            where[0] = last
            where[1:] = chain["prev"][:-1]
        units, where = chain[::-1], where[::-1]
        magic = units["magic"].astype(np.int64)
        marker = ((magic & MAGIC_DELETE) != 0) & ((magic & MAGIC_ROLL) == 0)
        cancel: set[str] = set()
        if marker.any():
            seen = marker if markers_upto is None else marker & (where <= markers_upto)
            for off, sz in zip(units["offset"][seen].tolist(), units["size_py"][seen].tolist(), strict=True):
                rec = self.store.read_record(off, sz)
                if rec is not None:
                    key = parse_properties(read_properties_bytes(rec, 0)).get(TIMER_DEL_UNIQKEY)
                    if key:
                        cancel.add(key)
            keep = ~marker
            units, magic, where = units[keep], magic[keep], where[keep]
        exact = units["exact"].astype(np.int64)
        due = np.where((magic & MAGIC_ROLL) != 0, s, exact)
        order = np.argsort(due, kind="stable")
        self.metrics.markers_seen = len(cancel)
        return SlotChunk(s, cancel, due[order], exact[order], units["offset"].astype(np.int64)[order],
                         units["size_py"].astype(np.int64)[order], magic[order],
                         units["write_ms"].astype(np.int64)[order], 0, where[order], last)

    # ---- putter ------------------------------------------------------------------------
    async def _putter_loop(self) -> None:
        q = self._put_queue
        while True:
            item = self._put_current  # a chunk a failed run did not finish (the supervisor restarted us)
            if item is None:
                item = self._put_current = await q.get()
            if item is None:
                return
            if isinstance(item, int):
                if item > self.commit_read_ms:
                    self.commit_read_ms = item
                    self.checkpoint.set_read_time(item)
                    self._done_key_slot, self._done_key = item, (-1, -1)
                    self.progress_file.timer_commit(item, -1, -1, -1, self.store.commitlog_max_offset())
                    self.slot_progress = (item, 0, -1, -1)
            else:
                await self._deliver_chunk(item)
            self._put_current = None

    async def _deliver_chunk(self, c: SlotChunk) -> None:
        if c.slot > self.commit_read_ms:  # the reader went past empty slots to this one: the clock follows
            self.commit_read_ms = c.slot
            self.checkpoint.set_read_time(c.slot)
        if c.slot != self.slot_progress[0]:  # [cluster-ha] the slot in progress, for the slaves
            d = c.done
            self.slot_progress = (c.slot, c.base + d, int(c.due[d - 1]) if d else -1, int(c.offset[d - 1]) if d else -1)
        if c.slot != self._done_key_slot:
            self._done_key_slot, self._done_key = c.slot, (-1, -1)
            self.progress_file.timer_commit(c.slot, -1, -1, -1, self.store.commitlog_max_offset())
        i, n = c.done, len(c.due)
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
                i = c.done = k

    async def _put_units(self, c: SlotChunk, lo: int, hi: int) -> None:
        """convert + convertMessage for units lo..hi of a chunk, then one put_batch (retried as a batch)."""
        m = self.metrics
        offsets = c.offset[lo:hi].tolist()
        raws = self.store.read_records(zip(offsets, c.size[lo:hi].tolist(), strict=True))
        exact = c.exact[lo:hi].tolist()
        rolls = (c.magic[lo:hi] & MAGIC_ROLL).tolist()
        listening = bool(m.listeners)
        uniqs: list | None = [] if listening else None
        write_ms = c.write_ms[lo:hi].tolist()
        deq = now_ms()
        try:
            built = build_timer_deliveries(raws, rolls, exact, write_ms, deq, c.cancel,
                                           uniqs=uniqs)  # (record, topic, queue id, tagsCode, keys) tuples
        except (CodecError, ValueError):  # a poison record: set it aside, the rest of the batch goes on
            built = self._isolate(raws, rolls, exact, write_ms, deq, c.cancel, uniqs, offsets, c.slot)
        reqs, dues = [], []  # dues: exact deliver ms of a final delivery, None for a roll
        units_of = []  # chunk index of each request's unit
        origins = []  # per request: (stored timer record, its CommitLog offset) for the quarantine
        events = [] if listening else None  # per request: (msgId prefix, topic, uniqKey, storeTs, offset) or None
        for k, b in enumerate(built):
            if type(b) is int:
                if b == MISSING:
                    m.missing += 1
                elif b == CANCELLED:
                    m.cancelled += 1
                elif b == SKIPPED and not rolls[k] and _no_real_topic(raws[k]):
                    self._set_aside(raws[k], "no REAL_TOPIC", offsets[k], slot=c.slot)
                continue  # SKIPPED: a (rolled-then-final) marker is never delivered
            reqs.append(b)
            units_of.append(lo + k)
            origins.append((raws[k], offsets[k]))
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
        await self._put_with_retry(reqs, dues, events, origins, c, lo, hi, units_of)

    def _commit_through(self, c: SlotChunk, i: int) -> None:
        """scheduleProgress: units of the chunk up to index i (inclusive) are put; -1 = none of them
        (the progress keeps the key it had)."""
        if i < 0:
            self.progress_file.timer_begin(NO_PHYS)  # nothing of this put stored: only the in-flight mark goes
            return
        self._done_key = (int(c.due[i]), int(c.pos[i]))
        self.progress_file.timer_commit(c.slot, *self._done_key, c.last_pos, self.store.commitlog_max_offset())

    def _isolate(self, raws, rolls, exact, write_ms, deq: int, cancel, uniqs, offsets, slot: int) -> list:
        """build_timer_deliveries per record: one that raises is quarantined (QUARANTINED)."""
        out = []
        for k, raw in enumerate(raws):
            one = [] if uniqs is not None else None
            try:
                b = build_timer_deliveries((raw,), rolls[k:k + 1], exact[k:k + 1], write_ms[k:k + 1], deq, cancel,
                                           uniqs=one)[0]
            except (CodecError, ValueError) as e:
                self._set_aside(raw, f"cannot convert: {e}", offsets[k], slot=slot, roll=bool(rolls[k]))
                b, one = QUARANTINED, [None] if one is not None else None
            out.append(b)
            if uniqs is not None:
                uniqs.extend(one)
        return out

    def _set_aside(self, raw, reason: str, phys: int, **context) -> None:
        """Quarantine one timer record; a quarantine put that may pass later (disk full) raises, so the
        supervisor backs off and the putter goes on from the same units (nothing was put for them)."""
        if not self.quarantine.set_aside(raw, reason, TIMER_DEQUEUE, phys, **context):
            raise RuntimeError(f"quarantine put failed for the timer record at {phys}: try again")

    async def _put_with_retry(self, reqs: list, dues: list, events: list | None, origins: list, c: SlotChunk,
                              lo: int, hi: int, units_of: list[int]) -> None:
        """Put the converted records (tuples) with MessageStore.put_batch; records that failed with a
        retryable status are put again after a back-off, ones the store refuses for good (too large
        once converted) are quarantined. scheduleProgress moves in the same step as the first put:
        through unit hi - 1, or up to the unit before the first failure (`units_of[k]`: chunk index of
        record k), which also lifts the in-flight mark before any quarantine put; and through hi - 1
        once every failed record is stored or set aside (retries carry no in-flight mark: a kill during
        them may re-deliver, never lose)."""
        m = self.metrics
        backoff = 0.5 * self.config.precision_ms / 1000.0
        first = True
        if not reqs:
            self._commit_through(c, hi - 1)
            return
        while reqs:
            if first:
                self.progress_file.timer_begin(self.store.commitlog_max_offset())
            res = self.store.put_batch(_PutRun(reqs))
            statuses, phys = res.statuses, res.phys
            if statuses is None:
                self._commit_through(c, hi - 1)
            elif first:
                k = next(k for k, x in enumerate(statuses) if x is not PUT_OK)
                self._commit_through(c, units_of[k] - 1 if units_of[k] > lo else -1)
            first = False
            retry = []
            done = now_ms()
            late = []
            delivered = [] if events is not None else None
            rolled = 0
            stored = [] if statuses is None else None  # request indexes put (None: all of them)
            for k, due in enumerate(dues):
                if statuses is None or statuses[k] is PUT_OK:
                    if stored is not None:
                        stored.append(k)
                    if due is None:
                        rolled += 1
                        continue
                    late.append(done - due)
                    if delivered is not None:
                        prefix, topic, uniq, store_ts, _off = events[k]
                        delivered.append((topic, uniq, prefix + f"{phys[k]:016X}", store_ts, due, done))
                elif statuses[k] in GIVE_UP and self.quarantine.set_aside(
                        origins[k][0], f"delivery refused by the store: {statuses[k].name}", TIMER_DEQUEUE,
                        origins[k][1], topic=reqs[k][1], roll=due is None):
                    m.put_failures += 1
                else:
                    m.put_failures += 1
                    retry.append(k)
            m.rolled += rolled
            put = reqs if stored is None else [reqs[k] for k in stored]
            if put:  # counted as puts of their topics (real topic, or rmq_sys_wheel_timer for a roll)
                count_puts(self.on_put, [r[1] for r in put], [len(r[0]) for r in put])
            if late:
                m.delivered += len(late)
                m.lateness.observe_many(late)
                m.dequeue_latency_ms = late[-1]
            m.dequeue_rate.add(len(reqs) - len(retry))
            if delivered:
                m.emit_many("delivered", delivered)
            if statuses is not None and not retry:  # the failed ones are set aside: the whole run is handled
                self._commit_through(c, hi - 1)
            if retry:
                reqs, dues = [reqs[k] for k in retry], [dues[k] for k in retry]
                units_of = [units_of[k] for k in retry]
                origins = [origins[k] for k in retry]
                events = [events[k] for k in retry] if events is not None else None
                log.warning("timer.deliver_retry", count=len(reqs), backoff_s=backoff)
                await asyncio.sleep(backoff)  # back-off before retrying failed puts
            else:
                reqs = []
                await asyncio.sleep(0)
