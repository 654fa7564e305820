"""DelayLevelService: one asyncio task per delay level (+ a result handler per level in async mode),
delayOffset.json persistence, visibility (runtime_info / stats) and the event hook list.

Lifecycle: `load()` reads and corrects delayOffset.json (called by `start()` if not done),
`start()` runs on the running loop, `async shutdown()` lets every level finish its current pass,
drains confirmed async deliveries and persists the offsets.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, TypedDict

import structlog

from codec.msgid import offset_msg_id
from scheduler.delay_cancel import FILE_NAME as CANCEL_FILE
from scheduler.delay_cancel import DelayCancelTable
from scheduler.delay_config import DelayConfig
from scheduler.delay_deliver import LevelDeliverer, LevelSnapshot
from scheduler.delay_events import LevelEventHooks
from scheduler.delay_offsets import FILE_NAME as DELAY_OFFSET_FILE
from scheduler.delay_offsets import DelayOffsetBackend, DelayOffsetTable
from scheduler.delay_recovery import deliveries_after, resume_offset, skip_delivered
from scheduler.events import EventListener, PutObserver, ignore_puts
from scheduler.levels import SCHEDULE_TOPIC
from scheduler.loop_lag import LoopLagProbe
from scheduler.progress_file import ProgressFile
from scheduler.quarantine import Quarantine
from scheduler.store_port import StorePort
from storage.supervisor import SupervisedTask

log = structlog.get_logger(__name__)


class DelayServiceStats(TypedDict):
    """The delay levels' figures (/metrics, the telemetry export)."""

    async_deliver: bool
    levels: dict[int, LevelSnapshot]  # by delay level
    pending_total: int
    delivered_total: int
    quarantined: dict[str, int]  # records set aside, by stage (open-ended: the stages that have set some aside)

SHUTDOWN_WAIT_S = 5.0  # WAIT_FOR_SHUTDOWN


class DelayLevelService:
    def __init__(self, store: StorePort, config: DelayConfig, levels_ms: list[int] | None = None,
                 offset_backend: DelayOffsetBackend | None = None, on_put: PutObserver | None = None) -> None:
        self.store = store
        # every put a level makes (deliveries, by real topic): RocketMQ counts them as puts of their topic
        self.on_put: PutObserver = on_put if on_put is not None else ignore_puts
        self.config = DelayConfig.coerce(config, levels_ms)
        # the levels' progress and the cancel set, kept where storage says (MessageStore facade); the
        # broker passes its MetaStore's offset backend
        cfg_dir = self.config.config_dir
        if offset_backend is None and cfg_dir:
            offset_backend = store.delay_offset_file(os.path.join(cfg_dir, DELAY_OFFSET_FILE))
        self.offsets = DelayOffsetTable(offset_backend)
        self.cancels = DelayCancelTable(store.config_file(os.path.join(cfg_dir, CANCEL_FILE)) if cfg_dir else None)
        self.listeners: list[EventListener] = []
        self.quarantine = Quarantine(store)  # poison schedule records go to rmq_sys_SCHEDULE_QUARANTINE
        hooks = LevelEventHooks(self.listeners, self.fire, self.msg_id_prefix, self.on_put)
        self.levels = [LevelDeliverer(lv, store, self.config, self.cancels, self.quarantine, hooks)
                       for lv in range(1, len(self.config.levels_ms) + 1)]
        self._tasks: list[SupervisedTask] = []
        self._loaded = False
        self._started = False
        self._msg_id_prefix: str | None = None
        self._persist_handle: asyncio.TimerHandle | None = None
        self._probe: LoopLagProbe | None = None
        self._persist_job: asyncio.Future[None] | None = None
        self.progress_file: ProgressFile | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    def load(self) -> bool:
        """Each level's resume offset: its scheduleProgress record (exact after kill -9; see
        scheduler.delay_recovery), else delayOffset.json; clamped into its schedule queue's [min, max]."""
        self.offsets.load()
        self.cancels.load()
        store = self.store
        self.progress_file = ProgressFile(self.config.config_dir, len(self.levels))
        sources = {}
        for d in self.levels:
            start, sources[d.level] = resume_offset(store, d.level, self.progress_file, self.offsets.get(d.level),
                                                    self.config.batch_size, self.cancels.of_level(d.level))
            self.offsets.set(d.level, start)
            lo = store.min_offset(SCHEDULE_TOPIC, d.queue_id)
            hi = store.max_offset(SCHEDULE_TOPIC, d.queue_id)
            d.offset = d.scan_offset = self.offsets.correct(d.level, lo, hi)
            self.progress_file.set_level(d.level, d.offset, store.commitlog_max_offset())
            d.cursor.bind(self.progress_file)
        self._loaded = True
        log.info("delay.resumed", offsets={d.level: d.offset for d in self.levels if d.offset},
                 sources=sorted(set(sources.values())))
        return True

    # ---- master / slave ([cluster-ha]) --------------------------------------------------------
    def progress(self) -> dict[int, int]:
        """Per level, the next schedule-queue offset not put into the CommitLog (its scheduleProgress
        record, written in the same loop step as each delivery put, so it agrees with the CommitLog end
        taken in the same step; the confirmed offset can lag a put that waits for its flush)."""
        pf = self.progress_file
        return {d.level: pf.level(d.level).offset if pf is not None else d.offset for d in self.levels}

    def resume_from(self, offsets: dict[int, int], since_phys: int = -1) -> dict[int, int]:
        """Before `start` on a promoted slave: take the master's last synced offsets (clamped into each
        schedule queue's [min, max]) instead of delayOffset.json, and persist them. `since_phys`: the
        CommitLog end when the master took those offsets (-1: unknown); each level then moves past the
        deliveries the replicated CommitLog holds after it (scheduler.delay_recovery.skip_delivered).
        Returns how many deliveries were skipped per level."""
        if not self._loaded:
            self.load()
        after = deliveries_after(self.store, since_phys)
        skipped: dict[int, int] = {}
        for d in self.levels:
            if d.level in offsets:
                start = offsets[d.level]
                k = after.get(d.level, 0)
                if k:
                    start = skip_delivered(self.store, d.level, start, k, self.config.batch_size,
                                           self.cancels.of_level(d.level))
                    skipped[d.level] = k
                self.offsets.set(d.level, start)
                lo = self.store.min_offset(SCHEDULE_TOPIC, d.queue_id)
                hi = self.store.max_offset(SCHEDULE_TOPIC, d.queue_id)
                d.offset = d.scan_offset = self.offsets.correct(d.level, lo, hi)
                if self.progress_file is not None:  # load() above made it
                    self.progress_file.set_level(d.level, d.offset, self.store.commitlog_max_offset())
        self.persist()
        if since_phys >= 0:
            log.warning("delay.promotion_resumed", since_phys=since_phys, skipped_delivered=skipped,
                        offsets={d.level: d.offset for d in self.levels if d.offset})
        return skipped

    def start(self) -> None:
        if self._started:
            return
        if not self._loaded:
            self.load()
        loop = asyncio.get_running_loop()
        self.store.add_dispatch_listener(self._on_dispatch, SCHEDULE_TOPIC)
        sup = self.store.supervisor  # storage.supervisor: log with context, count, back off, restart
        for d in self.levels:
            d.resume()  # stopped by an earlier shutdown (a demotion) when started again at a promotion
            self._tasks.append(sup.spawn(f"delay-level-{d.level}", d.run, level=d.level))
            if d.handler is not None:
                self._tasks.append(sup.spawn(f"delay-handler-{d.level}", d.handler.run, level=d.level))
        self._schedule_persist(loop)
        self._probe = LoopLagProbe.from_env()
        if self._probe is not None:
            self._probe.start()
        self._started = True
        log.info("delay.started", levels=len(self.levels), async_deliver=self.config.async_deliver,
                 offsets={d.level: d.offset for d in self.levels if d.offset})

    @property
    def running(self) -> bool:
        return self._started

    async def shutdown(self) -> None:
        if self._probe is not None:
            self._probe.stop()
            self._probe = None
        if self._persist_handle is not None:
            self._persist_handle.cancel()
            self._persist_handle = None
        self.store.remove_dispatch_listener(self._on_dispatch)
        for d in self.levels:
            d.stop()
        if self._tasks:
            _done, pending = await asyncio.wait([t.task for t in self._tasks], timeout=SHUTDOWN_WAIT_S)
            for t in pending:
                t.cancel()
            if pending:
                log.warning("delay.shutdown_cancelled", tasks=[t.get_name() for t in pending])
            await self.store.supervisor.reap(self._tasks)  # an error a task ended with is logged
            self._tasks.clear()
        self._started = False
        if self._persist_job is not None:  # let a periodic write finish before the final one
            await asyncio.wait((self._persist_job,))
        self.persist()
        if self.progress_file is not None:
            self.progress_file.close()
            self.progress_file = None
            self._loaded = False
        log.info("delay.stopped", offsets={d.level: d.offset for d in self.levels})

    # ---- offsets -------------------------------------------------------------------------
    def persist(self) -> bool:
        for d in self.levels:
            self.offsets.set(d.level, d.offset)
        try:
            return self.offsets.persist()
        except OSError as e:
            log.error("delay.persist_failed", error=repr(e))
            return False

    def _schedule_persist(self, loop: asyncio.AbstractEventLoop) -> None:
        """Every flushDelayOffsetInterval: snapshot the offsets on the loop, write them through the
        backend (the file's fsyncs and renames, or the MetaStore's commit) in an executor thread so a slow
        disk never stalls deliveries."""
        interval = self.config.flush_offset_interval_ms / 1000
        if interval <= 0:
            return

        def tick() -> None:
            self._persist_handle = None
            for d in self.levels:
                self.offsets.set(d.level, d.offset)
            data = self.offsets.take_snapshot()
            self._persist_job = job = loop.run_in_executor(None, self._write_offsets, data)
            job.add_done_callback(written)

        def written(job: asyncio.Future[None]) -> None:
            self._persist_job = None
            exc = None if job.cancelled() else job.exception()
            if exc is not None:
                self.offsets.mark_unpersisted()
                log.error("delay.persist_failed", error=repr(exc))
            if self._started:
                self._persist_handle = loop.call_later(interval, tick)

        self._persist_handle = loop.call_later(interval, tick)

    def _write_offsets(self, data: dict[int, int] | None) -> None:
        """Executor thread: delayOffset.json when it changed, and an msync of scheduleProgress (which a
        kill -9 does not need, a power loss does)."""
        if data is not None:
            self.offsets.write(data)
        if self.progress_file is not None:
            self.progress_file.flush()

    # ---- dispatch wake-up ----------------------------------------------------------------
    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < len(self.levels):
            self.levels[queue_id].on_dispatch()

    # ---- events --------------------------------------------------------------------------
    def add_listener(self, fn: EventListener) -> None:
        """Batches of "due" and "delivered" (topic, msgId, uniqKey, level, bornTs, storeTs, dueTs,
        deliveredTs); single "idle" (level, offset) and, in async mode, "resend" (level, offset,
        resendCount, status, blocked) events. Costs nothing while the list is empty."""
        self.listeners.append(fn)

    def remove_listener(self, fn: EventListener) -> None:
        self.listeners.remove(fn)

    def fire(self, event: str, **fields: Any) -> None:
        for fn in self.listeners:
            try:
                fn(event, **fields)
            except Exception as e:
                log.warning("delay.listener_failed", event=event, error=repr(e))

    def msg_id_prefix(self) -> str:
        """The store-host hex part of this broker's offset msgIds (computed once)."""
        prefix = self._msg_id_prefix
        if prefix is None:
            ip, _, port = self.config.broker_addr.rpartition(":")
            prefix = self._msg_id_prefix = offset_msg_id(ip, int(port), 0)[:-16]
        return prefix

    def msg_id(self, phys_offset: int) -> str:
        """Offset msgId of a CommitLog offset on this broker."""
        prefix = self.msg_id_prefix()
        if phys_offset < 0:  # not a stored record's offset; keep offset_msg_id's two's-complement form
            ip, _, port = self.config.broker_addr.rpartition(":")
            return offset_msg_id(ip, int(port), phys_offset)
        return f"{prefix}{phys_offset:016X}"

    # ---- visibility ----------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        info: dict[str, str] = {}
        for d in self.levels:
            snap = d.snapshot()
            lv = d.level
            info[f"scheduleMessageOffset_{lv}"] = f"{snap['delivered_offset']},{snap['max_offset']}"
            info[f"scheduleMessagePending_{lv}"] = str(snap["pending"])
            info[f"scheduleMessageNextDue_{lv}"] = str(snap["next_due_ms"])
            info[f"scheduleMessageDelivered_{lv}"] = str(snap["delivered_total"])
            info[f"scheduleMessageDeliverRate_{lv}"] = f"{snap['deliver_rate']:.1f}"
            info[f"scheduleMessageDelayMs_{lv}"] = str(d.delay_ms)
            # exact (nearest rank) over the last LATENESS_WINDOW deliveries, not a histogram bucket's edge
            recent = d.stats.recent_lateness
            info[f"scheduleMessageLatenessP50_{lv}"] = f"{recent.quantile(0.5):.0f}"
            info[f"scheduleMessageLatenessP99_{lv}"] = f"{recent.quantile(0.99):.0f}"
            info[f"scheduleMessageLatenessMax_{lv}"] = f"{d.stats.lateness.max:.0f}"
            info[f"scheduleMessageLatenessWindow_{lv}"] = str(len(recent))
        info["scheduleMessageCancelPending"] = str(self.cancels.count())
        info["scheduleMessageCancelled"] = str(self.cancels.cancelled_total)
        return info

    def stats(self) -> DelayServiceStats:
        levels = {d.level: d.snapshot() for d in self.levels}
        return {"async_deliver": self.config.async_deliver, "levels": levels,
                "pending_total": sum(v["pending"] for v in levels.values()),
                "delivered_total": sum(v["delivered_total"] for v in levels.values()),
                "quarantined": self.quarantine.stats()}
