"""Enqueue stage (scheduled-messages.md §4.5 steps 1-2, §4.6): rmq_sys_wheel_timer CQ → timerlog + wheel.

One asyncio task. It is woken by the store's dispatch listener for (rmq_sys_wheel_timer, 0); it
reads ConsumeQueue units in bulk, reads each record's properties, appends one 52-byte unit per
message and links it into its slot. The whole batch is synchronous, so `commit_queue_offset` moves
only after the units of that batch exist in the timerlog.

A unit whose slot the reader has already loaded (slot < read cursor) is linked into the cursor's
slot instead (keeping its exact deliver time), so it is delivered at once and never lost.
"""

from __future__ import annotations

import asyncio
import struct
import time

import structlog

from codec.codes import TIMER_TOPIC
from codec.consume_queue_unit import BLANK_SIZE as _BLANK_CQ_SIZE
from codec.consume_queue_unit import UNIT as CQ_UNIT
from codec.consume_queue_unit import UNIT_SIZE as CQ_UNIT_SIZE
from codec.properties import parse_properties
from codec.record import read_properties_bytes, read_store_timestamp
from codec.tags import java_hash
from scheduler.due import relative_due_ms
from scheduler.quarantine import TIMER_ENQUEUE
from scheduler.timer.hook import (
    REAL_TOPIC,
    TIMER_DEL_UNIQKEY,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    TIMER_ROLL_TIMES,
    UNIQ_KEY,
)
from scheduler.timer.state import TimerState
from scheduler.timer.timerlog import MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, MAGIC_UNCOUNTED, num_delta

log = structlog.get_logger(__name__)

ENQUEUE_BATCH = 1024
CANCEL_LIVE, CANCEL_ALREADY, CANCEL_NOT_FOUND = "LIVE", "ALREADY_CANCELLED", "NOT_FOUND"
CANCEL_DUE, CANCEL_UNDECIDED = "DUE", "UNDECIDED"
CANCEL_CATCH_UP = 4096  # enqueue lag up to which a cancel's check first enqueues what precedes it
MAX_SLOT_MS = 1 << 53  # a TIMER_OUT_MS at or past this is absurd (year 285,000): quarantined


def exact_deliver_ms(props: dict[str, str], slot: int, store_ts: int, precision: int) -> int:
    """The exact deliver ms of a message in slot `slot` (always in (slot, slot + precision]).

    First entry: relative delays count from the store timestamp, the first ms strictly after it
    (scheduler.due.relative_due_ms), capped by the slot end: the hook chose the slot from its own
    (earlier or equal) clock reading by the same rule, so the cap is never early either. An absolute
    TIMER_DELIVER_MS is used as is. A rolled record carries TIMER_DELIVER_MS stamped by the roll (see
    dequeue), so precedence is DELIVER_MS for rolled records.
    """
    hi = slot + precision
    if TIMER_ROLL_TIMES not in props:
        for key, mult in ((TIMER_DELAY_SEC, 1000), (TIMER_DELAY_MS, 1)):
            v = props.get(key)
            if v is not None:
                try:
                    return max(slot + 1, min(relative_due_ms(store_ts, int(v) * mult), hi))
                except ValueError:
                    return hi
    v = props.get(TIMER_DELIVER_MS)
    if v is not None:
        try:
            d = int(v)
        except ValueError:
            return hi
        if slot < d <= hi:
            return d
    return hi


class EnqueueMixin(TimerState):
    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener (storage.store_types.DispatchListener)."""
        if topic == TIMER_TOPIC and queue_id == 0 and self._enqueue_wake is not None:
            self._enqueue_wake.set()

    async def _enqueue_loop(self) -> None:
        """The enqueue task (run by the store's supervisor: an error is logged, counted, backed off and
        the task restarted; the offset moves only after a batch, so nothing is skipped). A full disk
        (a timerlog file cannot be made) is not a failure: the task pauses, retries every precision
        interval and says when it resumes."""
        paused = False
        wake = self._enqueue_wake
        assert wake is not None  # made by start / start_follower before the task
        while self._running:
            wake.clear()
            try:
                n = self._enqueue_batch(ENQUEUE_BATCH)
            except OSError as e:
                if not paused:
                    log.error("timer.enqueue_paused", error=str(e), offset=self.curr_queue_offset)
                    paused = True
                await asyncio.sleep(self.config.precision_ms / 1000.0)
                continue
            if paused:
                paused = False
                log.info("timer.enqueue_resumed", offset=self.curr_queue_offset)
            if n == 0:
                await wake.wait()
            else:
                await asyncio.sleep(0)  # yield to the network between batches

    def _enqueue_batch(self, max_units: int) -> int:
        store = self.store
        off = self.curr_queue_offset
        mn = store.min_offset(TIMER_TOPIC, 0)
        mx = store.max_offset(TIMER_TOPIC, 0)
        if self._following:  # a slave never indexes past what its master enqueued
            mx = min(mx, max(self._enqueue_limit, off))
        if off < mn:
            log.warning("timer.enqueue_offset_below_min", offset=off, min_offset=mn)
            off = mn
        if off >= mx:
            self.curr_queue_offset = self.commit_queue_offset = off
            self._notify_enqueued()
            return 0
        units = store.read_units(TIMER_TOPIC, 0, off, min(max_units, mx - off))
        if units is None or len(units) < CQ_UNIT_SIZE:
            return 0
        k = len(units) // CQ_UNIT_SIZE
        prec = self.config.precision_ms
        now = int(time.time() * 1000)
        self.curr_write_ms = max(self.curr_write_ms, now - now % prec)
        m = self.metrics
        emit = bool(m.listeners)
        lowest: int | None = None
        for i in range(k):
            phys, size, _tags = CQ_UNIT.unpack_from(units, i * CQ_UNIT_SIZE)
            if size == _BLANK_CQ_SIZE:
                continue
            rec = store.read_record(phys, size)
            if rec is None:
                m.missing += 1
                continue
            try:
                where = self._enqueue_record(rec, phys, size, prec, emit, off + i)
            except OSError:  # no room for a timerlog file: nothing of this unit was written; keep the
                self._commit_enqueued(off + i, i, now, lowest)  # units before it (no re-enqueue later)
                raise
            except (ValueError, OverflowError, struct.error) as e:  # a poison record: set aside, go on
                where = None
                if not self.quarantine.set_aside(rec, f"cannot enqueue: {e}", TIMER_ENQUEUE, phys,
                                                 queue_offset=off + i):
                    # the quarantine put may pass later (disk full): keep what this batch enqueued,
                    # let the supervisor back off and come back to this record
                    self._commit_enqueued(off + i, i, now, lowest)
                    raise RuntimeError(f"quarantine put failed for timer queue offset {off + i}") from e
            if where is not None and (lowest is None or where < lowest):
                lowest = where
        self._commit_enqueued(off + k, k, now, lowest)
        return k

    def _commit_enqueued(self, offset: int, k: int, started_ms: int, lowest: int | None) -> None:
        m = self.metrics
        self.curr_queue_offset = self.commit_queue_offset = offset
        m.enqueued += k
        m.enqueue_rate.add(k)
        m.enqueue_latency_ms = max(0, int(time.time() * 1000) - started_ms)
        if lowest is not None:
            self._wake_reader(lowest)
        self._notify_enqueued()

    def _enqueue_record(self, rec: memoryview, phys: int, size: int, prec: int, emit: bool,
                        queue_offset: int = -1) -> int | None:
        """One timer record into the timerlog and its slot; the slot used (None: a slave's unit the master
        has already put). Raises ValueError (or OverflowError / struct.error) for a record whose timer
        properties cannot be enqueued."""
        m = self.metrics
        props = parse_properties(read_properties_bytes(rec, 0))
        v = props.get(TIMER_OUT_MS)
        if v is None:
            raise ValueError("no TIMER_OUT_MS")
        slot = int(v)
        if not 0 <= slot < MAX_SLOT_MS:
            raise ValueError(f"TIMER_OUT_MS {v!r} out of range")
        store_ts = read_store_timestamp(rec, 0)
        exact = exact_deliver_ms(props, slot, store_ts, prec)
        cancel_key = props.get(TIMER_DEL_UNIQKEY)
        magic = MAGIC_DEFAULT if cancel_key is None else MAGIC_DELETE
        real_topic = props.get(REAL_TOPIC)
        if self._following:  # [cluster-ha] a slave links the unit where the master did (or drops it: already put)
            followed = self._master_slot(slot, queue_offset)
            if followed is None:
                self.follower_skipped += 1
                return None
            slot = followed
        where = self._do_enqueue(slot, exact, magic, phys, size, java_hash(real_topic) if real_topic else 0,
                                 cancel_key)
        if magic == MAGIC_DELETE:
            m.markers += 1
        elif TIMER_ROLL_TIMES not in props:
            m.accepted += 1
            if emit:
                m.emit("accepted", kind="timer", level=0, topic=real_topic, uniqKey=props.get(UNIQ_KEY),
                       msgId=self.msg_id(rec, phys), bornTs=0, storeTs=store_ts, dueTs=exact,
                       deliveredTs=0)
        return where

    def _do_enqueue(self, slot: int, exact: int, magic: int, phys: int, size: int, topic_hash: int,
                    cancel_key: str | None = None) -> int:
        """§4.6: roll decision, append the unit, link it into its slot. Returns the slot used. A delete
        marker lowers the slot's num only when it cancels a live timer there (MAGIC_UNCOUNTED else)."""
        cfg = self.config
        prec = cfg.precision_ms
        w = self.curr_write_ms
        delayed = slot
        window = self.roll_window_slots * prec
        if delayed - w >= window:
            magic |= MAGIC_ROLL
            excess = delayed - w - window
            if excess < (self.roll_window_slots // 3) * prec:
                delayed = w + (self.roll_window_slots // 2) * prec
            else:
                delayed = w + window
        if delayed < self.read_cursor_ms and not self._following:  # a slave's slot came from the master
            delayed = self.read_cursor_ms
            self.metrics.late_bumped += 1
        if magic & MAGIC_DELETE and (magic & MAGIC_ROLL or self.cancel_state(delayed, cancel_key or "",
                                                                             topic_hash) != CANCEL_LIVE):
            magic |= MAGIC_UNCOUNTED
            self.metrics.cancel_unmatched += 1
        files = self.files()
        wheel, timerlog = files.wheel, files.timerlog
        _first, last, _num = wheel.get_slot(delayed)
        pos = timerlog.append(last, magic, w, delayed - w, phys, size, topic_hash, exact)
        wheel.add_unit(delayed, pos, num_delta(magic))
        return delayed

    def check_cancel(self, slot: int, key: str, topic: str) -> str | None:
        """The put hook's answer to a delete marker for timer `key` (REAL_TOPIC+UNIQ_KEY) in `slot`:
        None to store it, else why it would change nothing (cancel_verdict)."""
        return self.cancel_verdict(slot, key, topic)[1]

    def cancel_verdict(self, slot: int, key: str, topic: str) -> tuple[str, str | None]:
        """(state, why a marker would change nothing or None): CANCEL_DUE (the slot was read),
        CANCEL_ALREADY, CANCEL_NOT_FOUND, CANCEL_LIVE or CANCEL_UNDECIDED. Definite answers only: a
        timer parked for a roll (its deliver time was more than the roll window ahead) may still come
        back to the slot, so "not found" is answered only once every roll slot it could be parked in
        was put; before that (or with a long enqueue backlog) the answer is UNDECIDED."""
        if not self._running or self._following:
            return CANCEL_UNDECIDED, None
        prec = self.config.precision_ms
        if slot < self.read_cursor_ms:
            return CANCEL_DUE, (f"timer {key} is due in slot {slot}, already read: delivered or being delivered; "
                                f"nothing cancelled")
        settled = (self.config.max_delay_sec * 1000 < self.roll_window_slots * prec  # nothing is ever parked
                   or self.commit_read_ms > slot - (self.roll_window_slots // 3) * prec)
        mx = self.store.max_offset(TIMER_TOPIC, 0)
        if mx - self.commit_queue_offset > CANCEL_CATCH_UP:
            return CANCEL_UNDECIDED, None  # a long enqueue backlog: no answer now, the marker is stored
        while self._enqueue_batch(ENQUEUE_BATCH):  # the timers sent before this marker into the wheel first
            pass
        state = self.cancel_state(slot, key, java_hash(topic))
        if state == CANCEL_ALREADY:
            return state, f"timer {key} is already cancelled; nothing changed"
        if state == CANCEL_NOT_FOUND:
            if not settled:
                return CANCEL_UNDECIDED, None
            return state, f"no pending timer {key} in slot {slot} (unknown, or already delivered); nothing cancelled"
        return state, None

    def cancel_state(self, slot: int, key: str, topic_hash: int) -> str:
        """Whether slot `slot` holds a live timer `key` (REAL_TOPIC+UNIQ_KEY): CANCEL_LIVE, or
        CANCEL_ALREADY (a delete marker for it is linked there already), or CANCEL_NOT_FOUND. Walks the
        slot's chain; only records whose topic hash matches are read (cancels are rare)."""
        files = self.files()
        tl = files.timerlog
        _first, last, _num = files.wheel.get_slot(slot)
        found = False
        for step in tl.walk_chain(last):
            if step.bad is not None:
                break
            units = step.units
            hit = units[(units["topic_hash"] == topic_hash) & ((units["magic"] & MAGIC_ROLL) == 0)]
            for off, sz, mg in zip(hit["offset"].tolist(), hit["size_py"].tolist(), hit["magic"].tolist(),
                                   strict=True):
                rec = self.store.read_record(off, sz)
                if rec is None:
                    continue
                props = parse_properties(read_properties_bytes(rec, 0))
                if mg & MAGIC_DELETE:
                    if props.get(TIMER_DEL_UNIQKEY) == key:
                        return CANCEL_ALREADY
                elif f"{props.get(REAL_TOPIC)}+{props.get(UNIQ_KEY)}" == key:
                    found = True
        return CANCEL_LIVE if found else CANCEL_NOT_FOUND
