"""One delay level's delivery task (DeliverDelayedMessageTimerTask, scheduled-messages.md §1.4-1.6).

Within a level messages come due in store order, so the task reads ConsumeQueue units in bulk,
delivers everything already due with one MessageStore.put_batch per batch (yielding one loop turn
between batches of a backlog), then sleeps (loop.call_at) until exactly the head's due ms (the first
ms strictly after its tagsCode = storeTimestamp + delay: scheduler.due, never early). An idle level sleeps on a future that the store's dispatch listener resolves when a
message enters SCHEDULE_TOPIC_XXXX queue level-1. No polling.

This module is the per-level loop (which units are due, cancels, poison records set aside, waits);
the delivery of a pass's batch is its mixins': scheduler.delay_sync (put, wait, resend the failed ones
before the offset moves), scheduler.delay_async (put, hand the outcome to the pending deque of
scheduler.async_deliver) and scheduler.delay_events (events, stats, put counts), over the state
declared in scheduler.delay_state.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, TypedDict

import structlog

from codec.buffers import BytesLike
from codec.codes import RMQ_SYS_TRANS_HALF_TOPIC, SCHEDULE_TOPIC
from codec.consume_queue_unit import UNIT as _UNIT
from codec.consume_queue_unit import UNIT_SIZE
from codec.delivery_batch import build_delivery_batch
from codec.errors import CodecError
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes
from codec.record_rewrite import build_deliveries
from scheduler.async_deliver import AsyncLevelHandler
from scheduler.delay_async import AsyncDeliverMixin
from scheduler.delay_events import LevelEventsMixin, event_infos
from scheduler.delay_state import Raws, Spans
from scheduler.delay_sync import SyncDeliverMixin
from scheduler.due import AFTER_MS
from scheduler.quarantine import LEVEL
from scheduler.stats import LatenessHistogram, LevelStats
from storage.store_types import PutRequest

if TYPE_CHECKING:
    from codec.delivery_batch import DeliveryBatch
    from scheduler.delay_service import DelayLevelService
    from scheduler.progress_file import ProgressFile

log = structlog.get_logger(__name__)

HALF_TOPIC = RMQ_SYS_TRANS_HALF_TOPIC
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

class LevelDeliverer(SyncDeliverMixin, AsyncDeliverMixin, LevelEventsMixin):
    def __init__(self, svc: DelayLevelService, level: int) -> None:
        self.svc = svc
        self.store = svc.store
        self.level = level
        self.queue_id = level - 1
        self.delay_ms = svc.config.levels_ms[level - 1]
        self.offset = 0        # delivered: next schedule-queue offset whose delivery is not confirmed
        # scheduler.progress_file (scheduleProgress): begin(CommitLog end) just before a delivery put,
        # commit(next offset not put, CommitLog end) right after it, in the same loop step
        self._progress_begin = _no_begin
        self._progress_commit = _no_commit
        self.scan_offset = 0   # next unit to look at (> offset while async deliveries are in flight)
        self.claimed_offset = 0  # units below it were taken by the current pass (cancel: too late)
        self.stats = LevelStats(level)
        self.handler = AsyncLevelHandler(self) if svc.config.async_deliver else None
        self._wake: asyncio.Future[None] | None = None
        self._idle = False
        self.stopping = False

    def bind_progress(self, progress: ProgressFile) -> None:
        self._progress_begin, self._progress_commit = progress.level_writer(self.level)

    def put_offset(self, end: int | None = None) -> int:
        """The next schedule offset whose delivery is not in the CommitLog: the first failed put in
        flight (async), else `end` (default: scan_offset)."""
        h = self.handler
        if h is not None and h.failed > 0:
            first = h.first_failed()
            if first is not None:
                return first
        return self.scan_offset if end is None else end

    def commit_progress(self, offset: int) -> None:
        self._progress_commit(offset, self.store.commitlog_max_offset())

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
        if self.handler is not None:
            self.handler.stop()

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
        store, qid = self.store, self.queue_id
        units = store.read_units(SCHEDULE_TOPIC, qid, self.scan_offset, self.svc.config.batch_size)
        if not units:
            self._reset_offset()
            self.stats.next_due_ms = 0
            if store.max_offset(SCHEDULE_TOPIC, qid) <= self.scan_offset and not self.stopping:
                if self.svc.listeners:
                    self.svc.fire("idle", level=self.level, offset=self.scan_offset)
                await self._wait(idle=True)
            return
        handler = self.handler
        limit = len(units) // UNIT_SIZE
        if handler is not None:
            if handler.blocked() or handler.room() <= 0:
                await handler.wait_space()
                return
            limit = min(limit, handler.room())
        now = now_ms()
        late_bound = now + self.delay_ms
        base = self.scan_offset
        spans, dues = [], []
        wait_due = 0
        scanned = limit
        for i, (phys, size, tags_code) in enumerate(_UNIT.iter_unpack(units[:limit * UNIT_SIZE])):
            # never early: due = scheduler.due.level_due_ms(tagsCode), inlined (the first ms strictly
            # after storeTimestamp + delay); delivered once now >= due
            due = tags_code + AFTER_MS
            if tags_code > late_bound:  # correctDeliverTimestamp
                due = now
            if due > now:
                wait_due, scanned = due, i
                break
            spans.append((phys, size))
            dues.append(due)
        cancelled = self.svc.cancels.of_level(self.level)
        if cancelled:  # operator cancels (scheduled cancel --id): those units are never delivered
            keep = [i for i in range(len(spans)) if base + i not in cancelled]
            if len(keep) < len(spans):
                self.svc.cancels.cancelled_total += len(spans) - len(keep)
                log.info("delay.cancelled_skipped", delay_level=self.level, count=len(spans) - len(keep), offset=base)
                spans, dues = [spans[i] for i in keep], [dues[i] for i in keep]
            self.svc.cancels.passed(self.level, base + scanned)
        self.claimed_offset = base + scanned  # past this, a cancel comes too late (being delivered)
        raws = store.read_records(spans)
        try:
            batch = build_delivery_batch(raws, HALF_TOPIC)  # unreadable, no REAL_TOPIC, half message: dropped
        except CodecError:  # a malformed record: set it aside, the rest of the batch goes on
            batch, raws = self._isolate(raws, spans, base)
        if batch.dropped:
            self._drop(batch, raws, spans, base)
        infos = None
        if self.svc.listeners:
            infos = event_infos(raws, batch)
            self._fire_due(batch, spans, dues, infos)
        if handler is None:
            await self._deliver_sync(batch, dues, infos, raws, spans, base, base + scanned)
            self.offset = self.scan_offset = base + scanned
        else:
            self._deliver_async(batch, base, spans, dues, infos, base + scanned)
            self.scan_offset = base + scanned
        self.stats.next_due_ms = wait_due
        if wait_due and not self.stopping:
            cfg = self.svc.config
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

    def _reset_offset(self) -> None:
        """§1.4 step 2: move an offset outside [min, max] of the schedule queue back into it."""
        store, qid = self.store, self.queue_id
        lo, hi = store.min_offset(SCHEDULE_TOPIC, qid), store.max_offset(SCHEDULE_TOPIC, qid)
        new = lo if lo > self.scan_offset else hi if hi < self.scan_offset else self.scan_offset
        if new != self.scan_offset:
            log.warning("delay.offset_reset", level=self.level, old=self.scan_offset, new=new, min=lo, max=hi)
            self.scan_offset = new
            if self.handler is None or not self.handler.pending:
                self.offset = new
                self.commit_progress(new)

    # ---- poison records (scheduler.quarantine) -------------------------------------------
    def _isolate(self, raws: Raws, spans: Spans, base: int) -> tuple[DeliveryBatch, Raws]:
        """build_delivery_batch failed on the batch: quarantine each record it fails on, build the rest."""
        raws = list(raws)
        for i, raw in enumerate(raws):
            if raw is None:
                continue
            try:
                build_delivery_batch((raw,))
            except CodecError as e:
                self._set_aside(raw, f"cannot convert: {e}", spans[i][0], base + i)
                raws[i] = None
                self.stats.quarantined += 1
        return build_delivery_batch(raws, HALF_TOPIC), raws

    def _drop(self, batch: DeliveryBatch, raws: Raws, spans: Spans, base: int) -> None:
        """Dropped records: a half message or an unreadable one is skipped (as RocketMQ does); a
        readable record without REAL_TOPIC cannot be delivered anywhere and is quarantined."""
        skipped = 0
        for i in batch.dropped:
            raw = raws[i]
            if raw is None:
                skipped += 1
                continue
            if parse_properties(read_properties_bytes(raw, 0)).get(MessageConst.REAL_TOPIC):
                skipped += 1  # a transactional half message: never delivered from a delay level
                continue
            self._set_aside(raw, "no REAL_TOPIC", spans[i][0], base + i)
            self.stats.quarantined += 1
        if skipped:
            self.stats.skipped += skipped
            log.warning("delay.skip_unreadable", level=self.level, count=skipped, offset=base)

    def _set_aside(self, raw: memoryview, reason: str, phys: int, offset: int) -> None:
        """Quarantine one schedule record; a quarantine put that may pass later (disk full) raises,
        so the supervisor backs off and the pass is tried again (nothing was put for it yet)."""
        if not self.svc.quarantine.set_aside(raw, reason, LEVEL, phys, level=self.level, offset=offset):
            raise RuntimeError(f"quarantine put failed for schedule offset {offset}: try again")

    def quarantine_refused(self, phys: int, size: int, why: str, offset: int) -> bool:
        """Quarantine the schedule record at `phys` that cannot be delivered (True when set aside;
        False: keep resending, e.g. the quarantine put hit a full disk)."""
        raw = self.store.read_record(phys, size)
        if raw is None:
            return False
        if self.svc.quarantine.set_aside(raw, why, LEVEL, phys,
                                         level=self.level, offset=offset):
            self.stats.quarantined += 1
            return True
        return False

    def make_request(self, raw: BytesLike) -> PutRequest | None:
        """messageTimeup: the delivery PutRequest, or None to drop (no REAL_TOPIC, half message)."""
        d = build_deliveries((raw,))[0]
        if d is None or d.topic == HALF_TOPIC:
            return None
        return PutRequest(d.record, d.topic, d.queue_id, d.tags_code, d.keys, -1)

    # ---- visibility ----------------------------------------------------------------------
    def max_offset(self) -> int:
        return self.store.max_offset(SCHEDULE_TOPIC, self.queue_id)

    def snapshot(self) -> LevelSnapshot:
        mx = self.max_offset()
        st = self.stats
        return {"level": self.level, "delay_ms": self.delay_ms, "delivered_offset": self.offset,
                "max_offset": mx, "pending": max(0, mx - self.offset), "next_due_ms": st.next_due_ms,
                "delivered_total": st.delivered, "skipped_total": st.skipped, "failed_puts": st.failed_puts,
                "quarantined_total": st.quarantined,
                "resends": st.resends, "deliver_rate": st.rate(), "lateness_ms": st.histogram(),
                "in_flight": self.handler.count if self.handler is not None else 0,
                "blocked": self.handler.blocked() if self.handler is not None else False}


def _no_begin(phys: int) -> None:
    pass


def _no_commit(offset: int, end: int) -> None:
    pass


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
