"""The Enqueuer (scheduled-messages.md §4.5 steps 1-2, §4.6): rmq_sys_wheel_timer CQ → timerlog + wheel slot.

One supervised task. It is woken by the store's dispatch listener for (rmq_sys_wheel_timer, 0); it
reads ConsumeQueue units in bulk, reads each record's properties, appends one 52-byte unit per
message and links it into its slot. The whole batch is synchronous, so the enqueued queue offset
(`TimerClocks.queue_offset`) moves only after the units of that batch exist in the timerlog.

A unit whose slot the reader has already loaded (slot < read cursor) is linked into the cursor's
slot instead (keeping its exact deliver time), so it is delivered at once and never lost. A unit linked
into a slot earlier than the one the SlotReader sleeps towards wakes it (`ReaderAlarm`).
"""

from __future__ import annotations

import asyncio
import struct
import time

import structlog

from codec.codes import TIMER_TOPIC
from codec.consume_queue_unit import UNIT, UNIT_SIZE
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes, read_store_timestamp
from codec.tags import java_hash
from codec.timer_layout import MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, MAGIC_UNCOUNTED, num_delta
from scheduler.due import relative_due_ms
from scheduler.quarantine import TIMER_ENQUEUE, Quarantine
from scheduler.store_port import StorePort
from scheduler.timer.cancel import CancelState, slot_cancel_state
from scheduler.timer.config import TimerConfig
from scheduler.timer.metrics import TimerMetrics
from scheduler.timer.msg_ids import msg_id
from scheduler.timer.state import Following, ReaderAlarm, TimerClocks, TimerFiles
from storage.mapped_file import space_on

log = structlog.get_logger(__name__)

_K = MessageConst
TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS = _K.TIMER_DELIVER_MS, _K.TIMER_DELAY_SEC, _K.TIMER_DELAY_MS
TIMER_OUT_MS, TIMER_ROLL_TIMES, TIMER_DEL_UNIQKEY = _K.TIMER_OUT_MS, _K.TIMER_ROLL_TIMES, _K.TIMER_DEL_UNIQKEY
REAL_TOPIC, UNIQ_KEY = _K.REAL_TOPIC, _K.UNIQ_KEY
CQ_UNIT, CQ_UNIT_SIZE = UNIT, UNIT_SIZE
ENQUEUE_BATCH = 1024
_BLANK_CQ_SIZE = 2147483647
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


class Enqueuer:
    """rmq_sys_wheel_timer units → timerlog + wheel slot (`run`: the supervised task). Also answers
    `wait_enqueued` (resolves once every timer-topic message below an offset is in the wheel)."""

    def __init__(self, store: StorePort, config: TimerConfig, files: TimerFiles, clocks: TimerClocks,
                 following: Following, alarm: ReaderAlarm, metrics: TimerMetrics, quarantine: Quarantine,
                 roll_window_slots: int) -> None:
        self.store = store
        self.config = config
        self.files = files
        self.clocks = clocks
        self.following = following
        self.alarm = alarm
        self.metrics = metrics
        self.quarantine = quarantine
        self.roll_window_slots = roll_window_slots
        self.wake = asyncio.Event()  # set by the dispatch listener (`on_dispatch`)
        # the admission's count: (timer queue max offset when last admitted, timer messages admitted since)
        self._admitted = (-1, 0)
        self.running = False  # the facade's switch: `run` returns once it is off
        self._offset_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def admit(self) -> str | None:
        """The put hook's admission of one more timer message: None when the timerlog has blocks reserved
        for every unit not yet enqueued (the stored backlog, plus those admitted since the timer queue
        last grew: a send run's others, put together after the hooks), else the "disk full" remark
        naming the file system and its free space (the send is refused: nothing is acknowledged that
        could not be enqueued, so delivered)."""
        tl = self.files.timerlog
        mx = self.store.max_offset(TIMER_TOPIC, 0)
        seen, admitted = self._admitted
        admitted = admitted + 1 if seen == mx else 1
        backlog = max(0, mx - self.clocks.queue_offset) + admitted
        if tl.room_for(backlog):
            self._admitted = (mx, admitted)
            return None
        self.metrics.refused_disk_full += 1
        return (f"disk full: the timerlog cannot reserve a {tl.file_size}-byte segment for {backlog} more "
                f"timer messages ({space_on(tl.dir)})")

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener (storage.store_state.DispatchListener)."""
        if topic == TIMER_TOPIC and queue_id == 0:
            self.wake.set()

    async def run(self) -> None:
        """The enqueue task (run by the store's supervisor: an error is logged, counted, backed off and
        the task restarted; the offset moves only after a batch, so nothing is skipped). A full disk
        (a timerlog file cannot be made) is not a failure: the task pauses, retries every precision
        interval and says when it resumes."""
        paused = False
        wake = self.wake
        while self.running:
            wake.clear()
            try:
                n = self.enqueue_batch(ENQUEUE_BATCH)
            except OSError as e:
                if not paused:
                    log.error("timer.enqueue_paused", error=str(e), offset=self.clocks.queue_offset)
                    paused = True
                await asyncio.sleep(self.config.precision_ms / 1000.0)
                continue
            if paused:
                paused = False
                log.info("timer.enqueue_resumed", offset=self.clocks.queue_offset)
            if n == 0:
                await wake.wait()
            else:
                await asyncio.sleep(0)  # yield to the network between batches

    def drain(self, max_units: int = ENQUEUE_BATCH) -> None:
        """Enqueue everything there is now (batches of `max_units`), without yielding."""
        while self.enqueue_batch(max_units):
            pass

    def enqueue_batch(self, max_units: int) -> int:
        store, clocks = self.store, self.clocks
        off = clocks.queue_offset
        mn = store.min_offset(TIMER_TOPIC, 0)
        mx = store.max_offset(TIMER_TOPIC, 0)
        if self.following.active:  # a slave never indexes past what its master enqueued
            mx = min(mx, max(self.following.enqueue_limit, off))
        if off < mn:
            log.warning("timer.enqueue_offset_below_min", offset=off, min_offset=mn)
            off = mn
        if off >= mx:
            clocks.queue_offset = off
            self._notify_enqueued()
            return 0
        units = store.read_units(TIMER_TOPIC, 0, off, min(max_units, mx - off))
        if units is None or len(units) < CQ_UNIT_SIZE:
            return 0
        k = len(units) // CQ_UNIT_SIZE
        prec = self.config.precision_ms
        now = int(time.time() * 1000)
        clocks.write_ms = max(clocks.write_ms, now - now % prec)
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
        self.clocks.queue_offset = offset
        m.enqueued += k
        m.enqueue_rate.add(k)
        m.enqueue_latency_ms = max(0, int(time.time() * 1000) - started_ms)
        if lowest is not None:
            self.alarm.wake(lowest)
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
        following = self.following
        if following.active:  # [cluster-ha] a slave links the unit where the master did (or drops it: already put)
            followed = following.master_slot(self.clocks, slot, queue_offset)
            if followed is None:
                following.skipped += 1
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
                       msgId=msg_id(rec, phys), bornTs=0, storeTs=store_ts, dueTs=exact, deliveredTs=0)
        return where

    def _do_enqueue(self, slot: int, exact: int, magic: int, phys: int, size: int, topic_hash: int,
                    cancel_key: str | None = None) -> int:
        """§4.6: roll decision, append the unit, link it into its slot. Returns the slot used. A delete
        marker lowers the slot's num only when it cancels a live timer there (MAGIC_UNCOUNTED else)."""
        prec = self.config.precision_ms
        clocks = self.clocks
        w = clocks.write_ms
        delayed = slot
        window = self.roll_window_slots * prec
        if delayed - w >= window:
            magic |= MAGIC_ROLL
            excess = delayed - w - window
            if excess < (self.roll_window_slots // 3) * prec:
                delayed = w + (self.roll_window_slots // 2) * prec
            else:
                delayed = w + window
        if delayed < clocks.read_cursor_ms and not self.following.active:  # a slave's slot came from the master
            delayed = clocks.read_cursor_ms
            self.metrics.late_bumped += 1
        files = self.files
        if magic & MAGIC_DELETE and (magic & MAGIC_ROLL or slot_cancel_state(
                files, self.store, delayed, cancel_key or "", topic_hash) is not CancelState.LIVE):
            magic |= MAGIC_UNCOUNTED
            self.metrics.cancel_unmatched += 1
        wheel, timerlog = files.wheel, files.timerlog
        _first, last, _num = wheel.get_slot(delayed)
        pos = timerlog.append(last, magic, w, delayed - w, phys, size, topic_hash, exact)
        wheel.add_unit(delayed, pos, num_delta(magic))
        return delayed

    # ---- waiting for the wheel to catch up ------------------------------------------------
    async def wait_enqueued(self, queue_offset: int, timeout: float | None = None) -> None:
        """Resolve once every timer-topic message below `queue_offset` is in the wheel."""
        if self.clocks.queue_offset >= queue_offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._offset_waiters.append((queue_offset, fut))
        await asyncio.wait_for(fut, timeout)

    def _notify_enqueued(self) -> None:
        if self._offset_waiters:
            keep = []
            done = self.clocks.queue_offset
            for off, fut in self._offset_waiters:
                if fut.done():
                    continue
                if done >= off:
                    fut.set_result(None)
                else:
                    keep.append((off, fut))
            self._offset_waiters = keep
