"""TimerMessageStore: the 5.x timer wheel for arbitrary-delay messages (scheduled-messages.md §4).

    svc = TimerMessageStore(store, TimerConfig(store_root=..., precision_ms=100))
    svc.load(); svc.start()          # start() loads if needed; call it on the running loop
    ...; await svc.shutdown()

Files under the store root: `timerlog/`, `timerwheel`, `config/timercheck`. The facade builds the
parts at load() and runs each as a supervised task: the Enqueuer (dispatch-listener driven), the
SlotReader and the Putter (a bounded queue between them), on a slave the Follower instead of the
last two; and the flush/checkpoint every flush_interval_ms. Memory is O(slots): the wheel lives in its mmap, plus a 1-byte-per-slot
occupancy map; per-message data exists only for the slot being delivered.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import time
from typing import NamedTuple, TypedDict

import structlog

from codec.buffers import BytesLike
from codec.codes import TIMER_TOPIC
from scheduler.durable import sync_and_close
from scheduler.events import EventListener, PutObserver, ignore_puts
from scheduler.progress import TimerProgress
from scheduler.progress_file import ProgressFile
from scheduler.quarantine import Quarantine
from scheduler.store_port import StorePort
from scheduler.timer.cancel import CancelCheck, CancelState
from scheduler.timer.checkpoint import TimerCheckpoint, checkpoint_path
from scheduler.timer.config import TimerConfig
from scheduler.timer.dequeue import Putter
from scheduler.timer.enqueue import ENQUEUE_BATCH, Enqueuer
from scheduler.timer.follow import Follower, TimerTail, timer_deliveries_after, timer_progress
from scheduler.timer.metrics import TimerMetrics
from scheduler.timer.msg_ids import msg_id, msg_id_prefix
from scheduler.timer.reader import PutItem, SlotReader
from scheduler.timer.recovery import recover
from scheduler.timer.state import (
    Following,
    ReaderAlarm,
    SlotResume,
    TimerClocks,
    TimerFiles,
)
from scheduler.timer.timerlog import DIR_NAME, TimerLog
from scheduler.timer.timerlog_segment import Segment
from scheduler.timer.wheel import FILE_NAME, TimerWheel
from storage.supervisor import SupervisedTask

log = structlog.get_logger(__name__)


class TimerStats(TypedDict):
    """The time wheel's figures (`TimerMessageStore.stats`: runtime info, /metrics, the telemetry export)."""

    pending: int  # timer messages in the wheel
    occupied_slots: int
    next_due_slot_ms: int  # -1: none
    enqueued: int
    accepted: int
    delivered: int
    rolled: int
    cancelled: int
    markers: int
    cancel_unmatched: int
    missing: int
    put_failures: int
    rejected: int
    late_bumped: int
    enqueue_lag: int  # rmq_sys_wheel_timer messages not yet in the wheel
    dequeue_lag_ms: int
    enqueue_rate: float
    dequeue_rate: float
    enqueue_latency_ms: int
    dequeue_latency_ms: int
    lateness_p50_ms: float
    lateness_p99_ms: float
    lateness_window: int  # how many recent deliveries the exact p50/p99 are over
    lateness_max_ms: float
    lateness_buckets: list[tuple[float, int]]  # cumulative (upper bound ms, count)
    read_ms: int
    write_ms: int
    queue_offset: int
    timerlog_pos: int
    quarantined: dict[str, int]  # records set aside, by stage (open-ended: the stages that have set some aside)


PUT_QUEUE_CAPACITY = 64  # chunks of up to 4096 units (stock DEFAULT_CAPACITY is 1024 requests)


def discard_local_state(store_root: str) -> list[str]:
    """Delete a (stopped) timer store's own files: timerlog, wheel and timercheck. The wheel is rebuilt
    from the timer topic's ConsumeQueue at the next load (a former master whose CommitLog was cut when it
    rejoined: its units may point at bytes it no longer has). Returns what was removed."""
    gone = []
    tl = os.path.join(store_root, DIR_NAME)
    if os.path.isdir(tl):
        shutil.rmtree(tl)
        gone.append(tl)
    for path in (os.path.join(store_root, FILE_NAME), checkpoint_path(store_root)):
        if os.path.exists(path):
            os.unlink(path)
            gone.append(path)
    return gone


class TimerParts(NamedTuple):
    """The parts `load()` builds over the open files, linked by the queues between them."""

    enqueuer: Enqueuer
    reader: SlotReader
    putter: Putter
    follower: Follower
    cancel_check: CancelCheck


class TimerMessageStore:
    """A small facade over the timer's parts (scheduler.timer.state says what they share): it opens the
    files and builds the parts at load(), runs them as supervised tasks (start / start_follower /
    promote), stops them (shutdown), and owns the flush / checkpoint and timerlog-clean ticks."""

    def __init__(self, store: StorePort, config: TimerConfig | None = None,
                 on_put: PutObserver | None = None) -> None:
        self.store = store
        # every put the wheel makes (deliveries by real topic, rolls): counted as puts of their topic
        self.on_put = on_put if on_put is not None else ignore_puts
        self.config = config if config is not None else TimerConfig()
        if not self.config.store_root:  # the wheel's files live beside the store's
            self.config.store_root = store.config.store_path
        self.rng = random.Random()
        self.metrics = TimerMetrics()
        self.quarantine = Quarantine(store)  # poison timer records go to rmq_sys_SCHEDULE_QUARANTINE
        self.roll_window_slots = self.config.effective_roll_window_slots
        self.clocks = TimerClocks()
        self.following = Following()  # [cluster-ha] a slave: enqueue only, never past what the master enqueued
        self._files: TimerFiles | None = None  # while loaded
        self._parts: TimerParts | None = None  # while loaded
        self._loaded = False
        self._running = False
        self._tasks: list[SupervisedTask] = []
        self._clean_handle: asyncio.TimerHandle | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    def load(self) -> bool:
        if self._loaded:
            return True
        cfg, store, clocks = self.config, self.store, self.clocks
        # the next timerlog segment is made on the store's allocate pool (storage.store_types.MadeAhead)
        timerlog = TimerLog(cfg.store_root, cfg.timerlog_file_size, store.made_ahead("timerlog", Segment.destroy))
        files = TimerFiles(TimerWheel(cfg.store_root, cfg.slots_total, cfg.precision_ms), timerlog,
                           TimerCheckpoint(cfg.store_root), ProgressFile(os.path.join(cfg.store_root, "config"), 0))
        self._files = files
        rec = recover(files, store, cfg)
        clocks.queue_offset = rec.queue_offset
        clocks.read_cursor_ms = clocks.commit_read_ms = rec.read_ms
        clocks.write_ms = rec.write_ms
        timerlog.allocate_ahead()  # a fresh (or full) timerlog's next segment: the first timer only renames it
        alarm = ReaderAlarm()
        resume = SlotResume(after_kill=rec.resume)
        put_queue: asyncio.Queue[PutItem] = asyncio.Queue(PUT_QUEUE_CAPACITY)
        enqueuer = Enqueuer(store, cfg, files, clocks, self.following, alarm, self.metrics, self.quarantine,
                            self.roll_window_slots)
        done_key = (rec.resume.slot_ms, (rec.resume.done_due, rec.resume.done_pos)) if rec.resume else (-1, (-1, -1))
        self._parts = TimerParts(
            enqueuer,
            SlotReader(store, cfg, files, clocks, alarm, put_queue, resume),
            Putter(store, cfg, files, clocks, put_queue, self.metrics, self.quarantine, self.on_put, done_key),
            Follower(cfg, files, clocks, self.following, resume, enqueuer),
            CancelCheck(store, cfg, files, clocks, self.roll_window_slots, lambda: enqueuer.drain(ENQUEUE_BATCH)))
        self._loaded = True
        return True

    def parts(self) -> TimerParts:
        p = self._parts
        if p is None:
            raise RuntimeError("the timer store is not loaded")
        return p

    def start(self) -> None:
        if self._running:
            return
        self.load()
        parts, clocks = self.parts(), self.clocks
        loop = asyncio.get_running_loop()
        self._running = parts.enqueuer.running = parts.reader.running = True
        clocks.write_ms = max(clocks.write_ms, self._floor(int(time.time() * 1000)))
        clocks.cursor_history.append((clocks.queue_offset, clocks.read_cursor_ms))
        self.store.add_dispatch_listener(parts.enqueuer.on_dispatch, TIMER_TOPIC)
        sup = self.store.supervisor  # storage.supervisor: log with context, count, back off, restart
        self._tasks = [sup.spawn("timer-enqueue", parts.enqueuer.run),
                       sup.spawn("timer-dequeue-get", parts.reader.run),
                       sup.spawn("timer-dequeue-put", parts.putter.run)]
        self._schedule_flush()
        self._clean_handle = loop.call_later(self.config.timerlog_clean_interval_ms / 1000.0, self._clean_tick)
        log.info("timer.started", precision_ms=self.config.precision_ms, pending=self.files().wheel.pending,
                 roll_window_slots=self.roll_window_slots, max_delay_sec=self.config.max_delay_sec)

    # ---- master / slave ([cluster-ha]) --------------------------------------------------------
    def start_follower(self) -> None:
        """A slave's wheel: the Enqueuer only (the replicated timer topic → timerlog + wheel), never
        past the master's enqueued offset (`follow`); no SlotReader or Putter, nothing is delivered."""
        if self._running:
            return
        self.load()
        parts, clocks, following = self.parts(), self.clocks, self.following
        following.active = True
        following.enqueue_limit = min(clocks.queue_offset, self.store.max_offset(TIMER_TOPIC, 0))
        clocks.cursor_history.clear()  # filled from the master's records
        self._running = parts.enqueuer.running = True
        self.store.add_dispatch_listener(parts.enqueuer.on_dispatch, TIMER_TOPIC)
        self._tasks = [self.store.supervisor.spawn("timer-enqueue", parts.enqueuer.run)]
        self._schedule_flush()
        log.info("timer.following", queue_offset=clocks.queue_offset, read_ms=clocks.commit_read_ms)

    async def refollow(self) -> list[str]:
        """A following wheel whose CommitLog was cut under it (a former master's tail, cut at its running HA
        client's handshake): closed, its own files removed, and following again from scratch, clocks
        included, as a slave that starts after such a cut does (rebuilt from the timer topic's
        ConsumeQueue, cut with the CommitLog). Returns the files removed."""
        await self.shutdown()
        gone = discard_local_state(self.config.store_root)
        self.clocks, self.following = TimerClocks(), Following()
        self.start_follower()
        return gone

    def promote(self, p: TimerProgress | None = None, since_phys: int = -1) -> TimerTail | None:
        """Start delivering (a slave became the master): from `p` (the last TimerProgress synced),
        else from this node's own checkpoint (scheduler.timer.follow). The slot in progress skips the
        units already put. `since_phys`: the CommitLog end when `p` was taken; the deliveries the
        replica holds after it are skipped too (returned: what was found)."""
        if not self.following.active:
            return None
        parts = self.parts()
        tail = timer_deliveries_after(self.store, since_phys) if p is not None and since_phys >= 0 else None
        parts.follower.take_over(p, tail)
        loop = asyncio.get_running_loop()
        sup = self.store.supervisor
        parts.reader.running = True
        self._tasks += [sup.spawn("timer-dequeue-get", parts.reader.run),
                        sup.spawn("timer-dequeue-put", parts.putter.run)]
        self._clean_handle = loop.call_later(self.config.timerlog_clean_interval_ms / 1000.0, self._clean_tick)
        log.info("timer.promoted", read_ms=self.clocks.commit_read_ms, resume_after=parts.reader.resume.after_promotion,
                 queue_offset=self.clocks.queue_offset, pending=self.files().wheel.pending, replicated_tail=tail)
        return tail

    def progress(self, from_queue_offset: int = -1) -> TimerProgress:
        """The wheel's part of scheduler.progress.SchedulerProgress (scheduler.timer.follow.timer_progress)."""
        return timer_progress(self.clocks, from_queue_offset)

    def follow(self, p: TimerProgress) -> None:
        """A slave adopts its master's TimerProgress (scheduler.timer.follow.Follower.follow)."""
        if self._parts is not None:
            self._parts.follower.follow(p)

    def follow_final(self, p: TimerProgress) -> None:
        self.parts().follower.follow_final(p)

    async def shutdown(self) -> None:
        if not self._loaded:
            return
        parts = self.parts()
        if self._running:
            self._running = parts.enqueuer.running = parts.reader.running = False
            self.store.remove_dispatch_listener(parts.enqueuer.on_dispatch)
            if self._clean_handle is not None:
                self._clean_handle.cancel()
            for t in self._tasks:
                t.cancel()
            await self.store.supervisor.reap(self._tasks)  # an error a task ended with is logged, not swallowed
            self._tasks = []
        self.flush()
        files = self.files()
        files.timerlog.close()
        files.wheel.close()
        files.checkpoint.close()
        files.progress_file.close()
        self._files = None
        self._parts = None
        self._loaded = False
        log.info("timer.stopped", read_ms=self.clocks.commit_read_ms, queue_offset=self.clocks.queue_offset)

    @property
    def delivering(self) -> bool:
        """Its SlotReader and Putter run (a master's wheel; a slave's only follows)."""
        p = self._parts
        return self._running and p is not None and p.reader.running

    def _floor(self, ms: int) -> int:
        return ms - ms % self.config.precision_ms

    # ---- the files and the clocks ----------------------------------------------------------
    def files(self) -> TimerFiles:
        """The open files (between load() and shutdown())."""
        f = self._files
        if f is None:
            raise RuntimeError("the timer store is not loaded")
        return f

    @property
    def wheel(self) -> TimerWheel | None:
        return self._files.wheel if self._files is not None else None

    @property
    def timerlog(self) -> TimerLog | None:
        return self._files.timerlog if self._files is not None else None

    @property
    def checkpoint(self) -> TimerCheckpoint | None:
        return self._files.checkpoint if self._files is not None else None

    @property
    def progress_file(self) -> ProgressFile | None:
        return self._files.progress_file if self._files is not None else None

    @property
    def commit_queue_offset(self) -> int:
        """Timer-topic messages below it are in the timerlog and the wheel."""
        return self.clocks.queue_offset

    @property
    def curr_write_ms(self) -> int:
        return self.clocks.write_ms

    @property
    def read_cursor_ms(self) -> int:
        return self.clocks.read_cursor_ms

    @property
    def commit_read_ms(self) -> int:
        """Slots below it were put (the checkpoint's lastReadTimeMs)."""
        return self.clocks.commit_read_ms

    @commit_read_ms.setter
    def commit_read_ms(self, ms: int) -> None:
        self.clocks.commit_read_ms = ms

    @property
    def follower_skipped(self) -> int:
        return self.following.skipped

    # ---- flush / checkpoint (§4.5 step 6) ------------------------------------------------
    def _schedule_flush(self) -> None:
        self._tasks.append(self.store.supervisor.spawn("timer-flush", self._flush_loop))

    async def _flush_loop(self) -> None:
        """Every flush_interval_ms: make the timerlog, wheel and progress durable, then the checkpoint,
        with the syncs in an executor thread (a failure is logged, counted and retried by the supervisor)."""
        interval = self.config.flush_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            await self.flush_async()

    def _clean_tick(self) -> None:
        if not self._running:
            return
        try:
            self.clean_expired_timerlog()
        except Exception as e:
            self.store.supervisor.failed("timer-timerlog-clean", e)
        loop = asyncio.get_running_loop()
        self._clean_handle = loop.call_later(self.config.timerlog_clean_interval_ms / 1000.0, self._clean_tick)

    def clean_expired_timerlog(self) -> list[str]:
        """Delete timerlog files whose messages the CommitLog no longer has (TimerLog.delete_expired)."""
        return self.files().timerlog.delete_expired(self.store.commitlog_min_offset())

    def flush(self) -> None:
        """Snapshot the clocks first, then make the timerlog and wheel durable, then the checkpoint
        (blocking: shutdown and tests; the running service uses flush_async)."""
        read_ms, queue_offset = self.clocks.commit_read_ms, self.clocks.queue_offset
        files = self.files()
        pos = files.timerlog.flush()
        files.wheel.flush()
        files.progress_file.flush()
        files.checkpoint.write(read_ms, pos, queue_offset, int(time.time() * 1000))

    async def flush_async(self) -> None:
        """`flush` with every fdatasync in an executor thread (scheduler.durable): the loop only takes
        descriptors and writes the checkpoint's fields between the two syncs."""
        loop = asyncio.get_running_loop()
        queue_offset = self.clocks.queue_offset  # enqueued below it = in the timerlog below `pos`
        files = self.files()
        pos, fds = files.timerlog.flush_plan()
        fds += [files.wheel.sync_fd(), *files.progress_file.sync_fds()]
        await loop.run_in_executor(None, sync_and_close, fds)
        files.timerlog.flushed(pos)
        # the read clock as it is NOW: the putter advanced it (and wrote it into the mapping,
        # set_read_time) while the thread synced; the value from before the sync would move the
        # checkpoint back and a restart would deliver those slots again
        files.checkpoint.record(self.clocks.commit_read_ms, pos, queue_offset, int(time.time() * 1000))
        await loop.run_in_executor(None, sync_and_close, [files.checkpoint.sync_fd()])

    # ---- admission ----------------------------------------------------------------------
    def admit(self) -> str | None:
        """The put hook's admission of one more timer message on a running master's wheel
        (Enqueuer.admit): None, or the "disk full" remark refusing it."""
        if not self._running or self.following.active:
            return None
        return self.parts().enqueuer.admit()

    # ---- cancels ------------------------------------------------------------------------
    def check_cancel(self, slot: int, key: str, topic: str) -> str | None:
        """The put hook's answer to a delete marker for timer `key` (REAL_TOPIC+UNIQ_KEY) in `slot`:
        None to store it, else why it would change nothing (cancel_verdict)."""
        return self.cancel_verdict(slot, key, topic)[1]

    def cancel_verdict(self, slot: int, key: str, topic: str) -> tuple[CancelState, str | None]:
        """scheduler.timer.cancel.CancelCheck.verdict on a running master's wheel; UNDECIDED otherwise."""
        if not self._running or self.following.active:
            return CancelState.UNDECIDED, None
        return self.parts().cancel_check.verdict(slot, key, topic)

    # ---- events / ids --------------------------------------------------------------------
    def add_listener(self, fn: EventListener) -> None:
        """"accepted" (entered the wheel), "due" and "delivered" events; fields
        kind="timer", level=0, topic (real topic), msgId, uniqKey, bornTs, storeTs, dueTs, deliveredTs."""
        self.metrics.listeners.append(fn)

    def remove_listener(self, fn: EventListener) -> None:
        self.metrics.listeners.remove(fn)

    def msg_id(self, rec: BytesLike, phys_offset: int) -> str:
        """Offset msgId of a record (scheduler.timer.msg_ids)."""
        return msg_id(rec, phys_offset)

    def msg_id_prefix(self, rec: BytesLike) -> str:
        """The store-host part of a record's offset msgId (all but the 16 hex digits of the offset)."""
        return msg_id_prefix(rec)

    async def wait_enqueued(self, queue_offset: int, timeout: float | None = None) -> None:
        """Resolve once every timer-topic message below `queue_offset` is in the wheel."""
        await self.parts().enqueuer.wait_enqueued(queue_offset, timeout)

    def msg_id_from(self, phys_offset: int) -> str:
        rec = self.store.read_record(phys_offset)
        return msg_id(rec, phys_offset) if rec is not None else ""

    # ---- visibility ----------------------------------------------------------------------
    def next_due_slot(self) -> int | None:
        w = self.wheel
        return w.next_nonempty(self.clocks.read_cursor_ms) if self._loaded and w is not None else None

    def stats(self) -> TimerStats:
        m, w, clocks = self.metrics, self.wheel, self.clocks
        now = int(time.time() * 1000)
        cq_max = self.store.max_offset(TIMER_TOPIC, 0) if self._loaded else 0
        nxt = self.next_due_slot()
        tl = self.timerlog
        return {
            "pending": w.pending if w else 0, "occupied_slots": w.occupied if w else 0,
            "next_due_slot_ms": nxt if nxt is not None else -1,
            "enqueued": m.enqueued, "accepted": m.accepted, "delivered": m.delivered, "rolled": m.rolled,
            "cancelled": m.cancelled, "markers": m.markers, "cancel_unmatched": m.cancel_unmatched,
            "missing": m.missing,
            "put_failures": m.put_failures, "rejected": m.rejected, "late_bumped": m.late_bumped,
            "enqueue_lag": max(0, cq_max - clocks.queue_offset),
            "dequeue_lag_ms": max(0, self._floor(now) - clocks.commit_read_ms) if nxt is not None and nxt <= now else 0,
            "enqueue_rate": m.enqueue_rate.value(), "dequeue_rate": m.dequeue_rate.value(),
            "enqueue_latency_ms": m.enqueue_latency_ms, "dequeue_latency_ms": m.dequeue_latency_ms,
            "lateness_p50_ms": m.recent_lateness.quantile(0.5), "lateness_p99_ms": m.recent_lateness.quantile(0.99),
            "lateness_window": len(m.recent_lateness),
            "lateness_max_ms": m.lateness.max, "lateness_buckets": m.lateness.cumulative(),
            "read_ms": clocks.commit_read_ms, "write_ms": clocks.write_ms,
            "queue_offset": clocks.queue_offset, "timerlog_pos": tl.write_pos if tl else 0,
            "quarantined": self.quarantine.stats(),
        }

    def runtime_info(self) -> dict[str, str]:
        s = self.stats()
        return {
            "timerReadBehind": str(s["dequeue_lag_ms"]),
            "timerOffsetBehind": str(s["enqueue_lag"]),
            "timerCongestNum": str(s["pending"]),
            "timerEnqueueTps": f"{s['enqueue_rate']:.1f}",
            "timerDequeueTps": f"{s['dequeue_rate']:.1f}",
            "rocketmq_timing_messages": str(s["pending"]),
            "rocketmq_timer_message_snapshot": str(s["pending"]),
            "rocketmq_timer_enqueue_total": str(s["enqueued"]),
            "rocketmq_timer_dequeue_total": str(s["delivered"] + s["rolled"]),
            "rocketmq_timer_enqueue_lag": str(s["enqueue_lag"]),
            "rocketmq_timer_enqueue_latency": str(s["enqueue_latency_ms"]),
            "rocketmq_timer_dequeue_lag": str(s["dequeue_lag_ms"]),
            "rocketmq_timer_dequeue_latency": str(s["dequeue_latency_ms"]),
            "rocketmq_delay_message_latency_p99": str(s["lateness_p99_ms"]),
            # exact, over the last lateness_window deliveries (nearest rank); max since start
            "timerLatenessP50": f"{s['lateness_p50_ms']:.0f}", "timerLatenessP99": f"{s['lateness_p99_ms']:.0f}",
            "timerLatenessMax": f"{s['lateness_max_ms']:.0f}", "timerLatenessWindow": str(s["lateness_window"]),
            "timerPending": str(s["pending"]), "timerOccupiedSlots": str(s["occupied_slots"]),
            "timerNextDueSlotMs": str(s["next_due_slot_ms"]),
            "timerDelivered": str(s["delivered"]), "timerCancelled": str(s["cancelled"]),
            "timerRolled": str(s["rolled"]), "timerRejected": str(s["rejected"]),
            "timerCancelUnmatched": str(s["cancel_unmatched"]),
        }
