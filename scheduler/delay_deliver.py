"""One delay level's delivery task (DeliverDelayedMessageTimerTask, scheduled-messages.md §1.4-1.6).

Within a level messages come due in store order, so the task reads ConsumeQueue units in bulk,
delivers everything already due with one MessageStore.put_batch per batch (yielding one loop turn
between batches of a backlog), then sleeps (loop.call_at) until exactly the head's due ms (the first
ms strictly after its tagsCode = storeTimestamp + delay: scheduler.due, never early). An idle level
sleeps on a future that the store's dispatch listener resolves when a message enters
SCHEDULE_TOPIC_XXXX queue level-1. No polling.

`LevelDeliverer` is the level's loop, one pass top to bottom, over its parts: the cursor
(scheduler.level_cursor: offsets and scheduleProgress), `scan_due` (scheduler.level_scan: which units
are due), the operator cancels, the quarantine of poison records (scheduler.level_quarantine), the
events and stats (scheduler.delay_events.LevelReporter) and the delivery strategy
(scheduler.level_delivery.LevelDelivery: scheduler.delay_sync or scheduler.delay_async).
"""

from __future__ import annotations

import asyncio
import time
from typing import TypedDict

import structlog

from codec.codes import SCHEDULE_TOPIC
from codec.consume_queue_unit import UNIT_SIZE
from scheduler.async_deliver import AsyncLevelHandler
from scheduler.delay_async import AsyncDelivery
from scheduler.delay_cancel import DelayCancelTable
from scheduler.delay_config import DelayConfig
from scheduler.delay_events import LevelEventHooks, LevelReporter, event_infos
from scheduler.delay_sync import SyncDelivery
from scheduler.level_cursor import LevelCursor
from scheduler.level_delivery import DueBatch, LevelDelivery
from scheduler.level_quarantine import LevelQuarantine
from scheduler.level_scan import DueScan, scan_due
from scheduler.quarantine import Quarantine
from scheduler.stats import LatenessHistogram
from scheduler.store_port import StorePort

log = structlog.get_logger(__name__)

_monotonic = time.monotonic  # the loop's clock (CLOCK_MONOTONIC)


def now_ms() -> int:
    return int(time.time() * 1000)


class LevelSnapshot(TypedDict):
    """One delay level's figures (`LevelDeliverer.snapshot`; runtime info, /metrics, telemetry export)."""

    level: int
    delay_ms: int
    delivered_offset: int  # next schedule-queue offset whose delivery is not confirmed
    max_offset: int
    pending: int
    next_due_ms: int  # 0: no message waiting
    delivered_total: int
    skipped_total: int
    failed_puts: int
    quarantined_total: int
    resends: int
    deliver_rate: float  # messages per second over about the last ten seconds
    lateness_ms: LatenessHistogram
    in_flight: int  # async deliver: messages put and not yet confirmed
    blocked: bool


class LevelDeliverer:
    """One delay level: its task (`run`), wake-ups and figures."""

    def __init__(self, level: int, store: StorePort, config: DelayConfig, cancels: DelayCancelTable,
                 quarantine: Quarantine, hooks: LevelEventHooks) -> None:
        self.store = store
        self.config = config
        self.cancels = cancels
        self.level = level
        self.queue_id = level - 1
        self.delay_ms = config.levels_ms[level - 1]
        self.cursor = LevelCursor(level, store.commitlog_max_offset)
        self.report = LevelReporter(level, hooks)
        self.stats = self.report.stats
        self.quarantine = LevelQuarantine(level, quarantine, store, self.stats)
        self.handler: AsyncLevelHandler | None = None  # async mode: its task is run beside the level's
        self.delivery: LevelDelivery
        if config.async_deliver:
            self.handler = AsyncLevelHandler(self.cursor, store, self.report, self.quarantine, config)
            self.delivery = AsyncDelivery(self.cursor, store, self.report, self.quarantine, self.handler)
        else:
            self.delivery = SyncDelivery(self.cursor, store, self.report, self.quarantine)
        self._wake: asyncio.Future[None] | None = None
        self._idle = False
        self.stopping = False

    # the cursor's offsets, for the service, browse/cancel and tests
    @property
    def offset(self) -> int:
        """Delivered: the next schedule-queue offset whose delivery is not confirmed."""
        return self.cursor.offset

    @offset.setter
    def offset(self, value: int) -> None:
        self.cursor.offset = value

    @property
    def scan_offset(self) -> int:
        """The next unit to look at (> offset while async deliveries are in flight)."""
        return self.cursor.scan_offset

    @scan_offset.setter
    def scan_offset(self, value: int) -> None:
        self.cursor.scan_offset = value

    @property
    def claimed_offset(self) -> int:
        """Units below it were taken by the current pass (a cancel comes too late for them)."""
        return self.cursor.claimed_offset

    # ---- wake-ups ------------------------------------------------------------------------
    def on_dispatch(self) -> None:
        if self._idle:
            self._wake_now()

    def _wake_now(self) -> None:
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    def stop(self) -> None:
        self.stopping = True
        self._wake_now()
        self.delivery.stop()

    def resume(self) -> None:
        """Runnable again after `stop` (the service started again: a demoted master elected again)."""
        self.stopping = False
        if self.handler is not None:
            self.handler.resume()

    async def _wait(self, idle: bool, due_ms: int = 0) -> None:
        loop = asyncio.get_running_loop()
        fut = self._wake = loop.create_future()
        handle = None
        if not idle:
            # from the current monotonic time, not loop.time(): that is cached at the start of the loop
            # iteration, so a timer computed from it fired early and cost a whole empty pass
            handle = loop.call_at(_monotonic() + (due_ms - time.time() * 1000) / 1000, _set_done, fut)
        self._idle = idle
        try:
            await fut
        finally:
            self._idle = False
            if handle is not None:
                handle.cancel()

    # ---- the task ------------------------------------------------------------------------
    async def run(self) -> None:
        """The level's task (run by the store's supervisor: an error is logged, counted, backed off
        and the task restarted from the current offsets)."""
        while not self.stopping:
            await self._pass()

    async def _pass(self) -> None:
        store, qid, cursor, delivery, cfg = self.store, self.queue_id, self.cursor, self.delivery, self.config
        base = cursor.scan_offset
        # 1. the units from the scan offset
        units = store.read_units(SCHEDULE_TOPIC, qid, base, cfg.batch_size)
        if not units:
            self._reset_offset()
            self.stats.next_due_ms = 0
            if store.max_offset(SCHEDULE_TOPIC, qid) <= cursor.scan_offset and not self.stopping:
                self.report.event("idle", offset=cursor.scan_offset)
                await self._wait(idle=True)
            return
        # 2. as many as the delivery takes now (async: the pending limit; blocked: none)
        limit = delivery.room(len(units) // UNIT_SIZE)
        if limit <= 0:
            await delivery.wait_space()
            return
        # 3. the due run at their head (never early)
        now = now_ms()
        scan = scan_due(units, limit, now, self.delay_ms)
        # 4. operator cancels (scheduled cancel --id): those units are never delivered
        cancelled = self.cancels.of_level(self.level)
        if cancelled:
            scan = self._drop_cancelled(cancelled, scan, base)
        phys, sizes, dues, scanned, wait_due = scan
        end = base + scanned
        cursor.claimed_offset = end  # past this, a cancel comes too late (being delivered)
        # 5. the records, their delivery batch (poison records set aside), the "due" events
        raws = store.read_records(zip(phys, sizes, strict=True))
        batch = self.quarantine.build(raws, phys, base)
        infos = None
        report = self.report
        if report.listeners:
            infos = event_infos(raws, batch)
            report.fire_due(batch, phys, dues, infos)
        # 6. delivered (sync: confirmed; async: put and handed to the pending deque); the cursor moves
        await delivery.deliver(DueBatch(batch, raws, phys, sizes, dues, infos, base, end))
        # 7. sleep until the next unit is due, or give the loop a turn before the next batch
        self.stats.next_due_ms = wait_due
        if wait_due and not self.stopping:
            if scanned >= cfg.coalesce_min_batch and cfg.coalesce_ms > 0:
                # a busy level (this pass delivered a batch, more are due right behind it) wakes at
                # most every coalesce_ms: fewer, larger passes, each at most coalesce_ms late. On the
                # next multiple of coalesce_ms, so busy levels wake in the same loop iteration and a
                # held pull is answered once for all of them
                c = cfg.coalesce_ms
                wait_due = max(wait_due, now - now % c + c)
            await self._wait(idle=False, due_ms=wait_due)
        elif scanned:
            # more may be due at once (a backlog after a restart): give the loop one turn per batch so
            # sends, pulls and the other levels are served during the drain, not after it
            await asyncio.sleep(0)

    def _drop_cancelled(self, cancelled: dict[int, str], scan: DueScan, base: int) -> DueScan:
        """The scan without the cancelled units (`scanned` unchanged: they are passed, never delivered)."""
        cancels = self.cancels
        phys, sizes, dues = scan.phys, scan.sizes, scan.dues
        keep = [i for i in range(len(phys)) if base + i not in cancelled]
        if len(keep) < len(phys):
            cancels.cancelled_total += len(phys) - len(keep)
            log.info("delay.cancelled_skipped", delay_level=self.level, count=len(phys) - len(keep), offset=base)
            scan = scan._replace(phys=[phys[i] for i in keep], sizes=[sizes[i] for i in keep],
                                 dues=[dues[i] for i in keep])
        cancels.passed(self.level, base + scan.scanned)
        return scan

    def _reset_offset(self) -> None:
        """§1.4 step 2: move an offset outside [min, max] of the schedule queue back into it."""
        store, qid, cursor = self.store, self.queue_id, self.cursor
        lo, hi = store.min_offset(SCHEDULE_TOPIC, qid), store.max_offset(SCHEDULE_TOPIC, qid)
        scan = cursor.scan_offset
        new = lo if lo > scan else hi if hi < scan else scan
        if new != scan:
            log.warning("delay.offset_reset", level=self.level, old=scan, new=new, min=lo, max=hi)
            cursor.scan_offset = new
            if not self.delivery.has_pending():
                cursor.offset = new
                cursor.commit(new)

    # ---- visibility ----------------------------------------------------------------------
    def max_offset(self) -> int:
        return self.store.max_offset(SCHEDULE_TOPIC, self.queue_id)

    def snapshot(self) -> LevelSnapshot:
        mx = self.max_offset()
        st = self.stats
        offset = self.cursor.offset
        return {"level": self.level, "delay_ms": self.delay_ms, "delivered_offset": offset,
                "max_offset": mx, "pending": max(0, mx - offset), "next_due_ms": st.next_due_ms,
                "delivered_total": st.delivered, "skipped_total": st.skipped, "failed_puts": st.failed_puts,
                "quarantined_total": st.quarantined,
                "resends": st.resends, "deliver_rate": st.rate(), "lateness_ms": st.histogram(),
                "in_flight": self.delivery.in_flight(), "blocked": self.delivery.blocked()}


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
