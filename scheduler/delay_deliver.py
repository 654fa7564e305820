"""One delay level's delivery task (DeliverDelayedMessageTimerTask, scheduled-messages.md §1.4-1.6).

Within a level messages come due in store order, so the task reads ConsumeQueue units in bulk,
delivers everything already due with one MessageStore.put_batch per batch (yielding one loop turn
between batches of a backlog), then sleeps (loop.call_at) until exactly the head's due ms (the first
ms strictly after its tagsCode = storeTimestamp + delay: scheduler.due, never early). An idle level sleeps on a future that the store's dispatch listener resolves when a
message enters SCHEDULE_TOPIC_XXXX queue level-1. No polling.

Sync mode: a failed put is resent (only the failed messages, with backoff) before the offset moves
past the batch, so nothing is lost or duplicated; under faults the resent messages land after the
rest of their batch. Async mode: see scheduler.async_deliver.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from codec.buffers import BytesLike
from codec.codes import RMQ_SYS_TRANS_HALF_TOPIC, SCHEDULE_TOPIC
from codec.delivery_batch import build_delivery_batch
from codec.errors import CodecError
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes
from codec.record_rewrite import build_deliveries
from scheduler.async_deliver import (
    EXCEPTION,
    RUNNING,
    SKIP,
    AsyncLevelHandler,
    PendingBatch,
    PendingEntry,
    flush_ok,
)
from scheduler.delay_events import EventInfos, event_infos
from scheduler.due import AFTER_MS
from scheduler.events import EventColumns, count_puts, fire_columns
from scheduler.quarantine import GIVE_UP, LEVEL
from scheduler.stats import LevelStats
from storage.message_store import BatchPutResult, PutRequest, PutResult, PutStatus

if TYPE_CHECKING:
    from codec.delivery_batch import DeliveryBatch
    from scheduler.delay_service import DelayLevelService
    from scheduler.progress_file import ProgressFile

Raws = list[memoryview | None]  # schedule records read for a pass (None: gone or set aside)
Spans = list[tuple[int, int]]  # (schedule record phys, size) per unit
# a message resent one by one: (due, event info or None, schedule record, schedule phys)
ResendMeta = tuple[int, tuple[int, str, int] | None, memoryview | None, int]

log = structlog.get_logger(__name__)

_UNIT = struct.Struct(">qiq")  # phys offset, size, tagsCode (= deliverTimestamp = storeTimestamp + delay)
UNIT_SIZE = 20
HALF_TOPIC = RMQ_SYS_TRANS_HALF_TOPIC
DELAY_FOR_A_WHILE_S = 0.1
PUT_OK = PutStatus.PUT_OK
_monotonic = time.monotonic  # the loop's clock (CLOCK_MONOTONIC)


def now_ms() -> int:
    return int(time.time() * 1000)


class LevelDeliverer:
    def __init__(self, svc: DelayLevelService, level: int) -> None:
        self.svc = svc
        self.store = svc.store
        self.level = level
        self.queue_id = level - 1
        self.delay_ms = svc.config.levels_ms[level - 1]
        self.offset = 0        # delivered: next schedule-queue offset whose delivery is not confirmed
        # scheduler.progress_file (scheduleProgress): begin(CommitLog end) just before a delivery put,
        # commit(next offset not put, CommitLog end) right after it, in the same loop step
        self._progress_begin: Callable[[int], None] = _no_begin
        self._progress_commit: Callable[[int, int], None] = _no_commit
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

    def make_request(self, raw: BytesLike) -> PutRequest | None:
        """messageTimeup: the delivery PutRequest, or None to drop (no REAL_TOPIC, half message)."""
        d = build_deliveries((raw,))[0]
        if d is None or d.topic == HALF_TOPIC:
            return None
        return PutRequest(d.record, d.topic, d.queue_id, d.tags_code, d.keys, -1)

    # ---- sync ----------------------------------------------------------------------------
    async def _deliver_sync(self, batch: DeliveryBatch, dues: list[int], infos: EventInfos | None, raws: Raws,
                            spans: Spans, base: int, end: int) -> None:
        """One put_batch for the whole batch; failed records (put status, or a flush that did not
        confirm) are resent one PutRequest each, with backoff, until stored; a record the store
        refuses for good (GIVE_UP: oversize with its real topic) is quarantined instead. The progress
        (scheduleProgress) moves to `end` in the same step as the put (to the first failed record if a
        put failed, and to `end` once the failed ones are stored or set aside)."""
        n = len(batch)
        store = self.store
        if not n:
            self._progress_commit(end, store.commitlog_max_offset())
            return
        self._progress_begin(store.commitlog_max_offset())
        res = store.put_batch(batch)
        self._count_puts(batch, res.statuses)
        statuses = res.statuses
        if statuses is None:
            self._progress_commit(end, store.commitlog_max_offset())
        else:
            first = next((j for j, x in enumerate(statuses) if x is not PUT_OK), None)
            self._progress_commit(end if first is None else base + batch.source[first], store.commitlog_max_offset())
        fl = res.flushed
        flushed_ok = True
        if fl is not None:
            if not fl.done():
                await asyncio.wait((fl,))
            flushed_ok = flush_ok(fl)  # not confirmed durable: resend (Java does the same)
        src = batch.source
        st = self.stats
        if statuses is None and flushed_ok:
            ts = res.store_timestamp
            st.add_delivered(n)
            st.lateness.observe_many([ts - dues[i] for i in src])
            if infos is not None:
                self._fire_delivered(infos.topics, res.phys, infos, [dues[i] for i in src], ts)
            return
        failed: list[int] = []
        for j, i in enumerate(src):
            if statuses is not None and statuses[j] in GIVE_UP and self.svc.quarantine.set_aside(
                    raws[i], f"delivery refused by the store: {statuses[j].name}", LEVEL, spans[i][0],  # type: ignore[arg-type]  # source: built, never None
                    level=self.level, topic=batch.dests[j][0]):
                self.stats.quarantined += 1
                continue
            if (statuses is not None and statuses[j] is not PUT_OK) or (not flushed_ok and res.phys[j] >= 0):
                failed.append(j)
            elif infos is None:
                st.add_delivered(1)
                st.record_lateness(res.store_timestamp - dues[i])
            else:
                self._delivered(dues[i], infos[j], res.store_timestamp, res.phys[j], batch.dests[j][0])
        if not failed:  # every failure was set aside
            self.commit_progress(end)
            return
        st.failed_puts += len(failed)
        log.warning("delay.deliver_failed", level=self.level, failed=len(failed), attempt=1,
                    status=str(statuses[failed[0]] if statuses is not None else "FLUSH_FAILED"))
        reqs = [PutRequest(batch.record(j), *batch.dests[j], batch.tags_codes[j], batch.keys[j], -1) for j in failed]
        metas = [(dues[src[j]], infos[j] if infos is not None else None, raws[src[j]], spans[src[j]][0])
                 for j in failed]
        await self._resend_sync(reqs, metas)
        self.commit_progress(end)

    async def _resend_sync(self, reqs: list[PutRequest], metas: list[ResendMeta]) -> None:
        attempt = 1
        todo = list(range(len(reqs)))
        while todo:
            await asyncio.sleep(DELAY_FOR_A_WHILE_S)
            results = self.store.put([reqs[i] for i in todo])
            failed: list[tuple[int, PutResult]] = []
            for i, r in zip(todo, results, strict=True):
                if r.status in GIVE_UP and self.svc.quarantine.set_aside(
                        metas[i][2], f"delivery refused by the store: {r.status.name}", LEVEL, metas[i][3],  # type: ignore[arg-type]  # from raws[source[j]]: never None
                        level=self.level, topic=reqs[i].topic):
                    self.stats.quarantined += 1
                    continue
                if r.status is not PUT_OK:
                    failed.append((i, r))
                    continue
                self.svc.on_put(reqs[i].topic, 1, len(reqs[i].record))
                fl = r.flushed
                if fl is not None:
                    if not fl.done():
                        await asyncio.wait((fl,))
                    if not flush_ok(fl):
                        failed.append((i, r))
                        continue
                due, info = metas[i][:2]
                if info is None:
                    self.stats.add_delivered(1)
                    self.stats.record_lateness(r.store_timestamp - due)
                else:
                    self._delivered(due, info, r.store_timestamp, r.phys_offset, reqs[i].topic)
            attempt += 1
            if failed:
                self.stats.failed_puts += len(failed)
                if attempt % 100 == 0:
                    log.warning("delay.deliver_failed", level=self.level, failed=len(failed), attempt=attempt,
                                status=str(failed[0][1].status))
            todo = sorted(i for i, _ in failed)

    def _delivered(self, due: int, info: tuple[int, str, int], store_ts: int, phys: int, topic: str) -> None:
        """One delivered message with event listeners; `info` = (schedule store ts, uniqKey, bornTs)."""
        st = self.stats
        st.add_delivered(1)
        st.record_lateness(store_ts - due)
        self._fire_one(due, info, store_ts, phys, topic)

    def _fire_one(self, due: int, info: tuple[int, str, int], store_ts: int, phys: int, topic: str) -> None:
        stored, uniq, born = info
        fire_columns(self.svc.listeners, "delivered", EventColumns(
            "level", self.level, self.svc.msg_id_prefix(), [topic], [phys], [uniq], [born], [stored], [due], store_ts))

    def _fire_delivered(self, topics: list[str], phys: list[int], infos: EventInfos, dues: list[int],
                        store_ts: int) -> None:
        """One "delivered" event per message of a run stored at `store_ts`, handed over as columns."""
        fire_columns(self.svc.listeners, "delivered", EventColumns(
            "level", self.level, self.svc.msg_id_prefix(), topics, phys, infos.uniqs, infos.born_ts,
            infos.store_ts, dues, store_ts))

    def _fire_due(self, batch: DeliveryBatch, spans: Spans, dues: list[int], infos: EventInfos) -> None:
        src = batch.source
        fire_columns(self.svc.listeners, "due", EventColumns(
            "level", self.level, self.svc.msg_id_prefix(), infos.topics, [spans[i][0] for i in src], infos.uniqs,
            infos.born_ts, infos.store_ts, [dues[i] for i in src], 0))

    # ---- async ---------------------------------------------------------------------------
    def _deliver_async(self, batch: DeliveryBatch, base: int, spans: Spans, dues: list[int], infos: EventInfos | None,
                       end: int) -> None:
        if not spans:
            return
        n = len(batch)
        store = self.store
        handler = self.handler
        assert handler is not None  # async mode
        res: BatchPutResult | None = None
        if n:
            self._progress_begin(store.commitlog_max_offset())
            res = store.put_batch(batch)
            self._count_puts(batch, res.statuses)
        if res is not None and not batch.dropped:
            if res.statuses is None:  # the common case: one pending entry for the whole run
                topics = infos.topics if infos is not None else None
                handler.extend((PendingBatch(base, spans, dues, res.flushed, res.store_timestamp, res.phys,
                                                  topics, infos),))
                self._progress_commit(self.put_offset(end), store.commitlog_max_offset())
                return
            self._pending_entries(batch, base, spans, dues, infos, res)
        else:
            self._pending_entries(batch, base, spans, dues, infos, res)
        self._progress_commit(self.put_offset(end), store.commitlog_max_offset())

    def _count_puts(self, batch: DeliveryBatch, statuses: list[PutStatus] | None) -> None:
        """The deliveries one put_batch stored count as puts of their real topics (svc.on_put)."""
        starts, dests = batch.starts, batch.dests
        ok: Sequence[int]
        if statuses is None:
            first = dests[0]
            if dests.count(first) == len(dests):  # one destination (the usual run): one call, no per-record work
                self.svc.on_put(first[0], len(dests), starts[-1] - starts[0])
                return
            ok = range(len(dests))
        else:
            ok = [j for j, s in enumerate(statuses) if s is PUT_OK]
        count_puts(self.svc.on_put, [dests[j][0] for j in ok], [starts[j + 1] - starts[j] for j in ok])

    def _pending_entries(self, batch: DeliveryBatch, base: int, spans: Spans, dues: list[int],
                         infos: EventInfos | None, res: BatchPutResult | None) -> None:
        """One PendingEntry per message: SKIP for dropped ones, RUNNING or EXCEPTION for the others."""
        handler = self.handler
        assert handler is not None  # async mode
        entries: list[PendingEntry | None] = [None] * len(spans)
        for i in batch.dropped:
            entries[i] = PendingEntry(base + i, spans[i][0], spans[i][1], dues[i], SKIP)
        if res is not None:
            statuses, phys, ts, fl = res.statuses, res.phys, res.store_timestamp, res.flushed
            dests = batch.dests
            for j, i in enumerate(batch.source):
                ok = statuses is None or statuses[j] is PUT_OK
                status = RUNNING if ok else EXCEPTION
                if not ok and statuses is not None and statuses[j] in GIVE_UP and self.quarantine_refused(
                        spans[i][0], spans[i][1], f"delivery refused by the store: {statuses[j].name}", base + i):
                    status = SKIP
                e = entries[i] = PendingEntry(base + i, spans[i][0], spans[i][1], dues[i], status,
                                              (dests[j][0], infos[j]) if infos is not None else None)
                if ok:
                    e.flushed, e.store_ts, e.dphys = fl, ts, phys[j]
            if statuses is not None:
                self.stats.failed_puts += sum(1 for x in statuses if x is not PUT_OK)
                # EXCEPTION entries only: one the store refused for good was quarantined (SKIP)
                handler.failed += sum(1 for e in entries if e is not None and e.status == EXCEPTION)
        handler.extend(entries)  # type: ignore[arg-type]  # every span is dropped or in batch.source: no None left

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

    def entry_done(self, e: PendingEntry) -> None:
        """Handler callback, in offset order: SUCCESS or SKIP of the head."""
        if e.offset + 1 > self.offset:
            self.offset = e.offset + 1
        if e.status == SKIP or e.dphys < 0:
            return
        if e.info is not None:
            topic, info = e.info
            self._delivered(e.due, info, e.store_ts, e.dphys, topic)
        else:
            st = self.stats
            st.add_delivered(1)
            st.record_lateness(e.store_ts - e.due)

    def entries_done(self, entries: Sequence[PendingEntry | PendingBatch]) -> None:
        """`entry_done` for a run of SUCCESS entries (PendingEntry or PendingBatch) in offset order,
        with one stats update."""
        last = entries[-1]
        end = last.offset + last.count
        if end > self.offset:
            self.offset = end
        lateness = []
        for e in entries:
            if isinstance(e, PendingBatch):  # (no subclasses: as cheap as `type(e) is`)
                ts = e.store_ts
                lateness += [ts - due for due in e.dues]
            elif e.dphys >= 0:
                lateness.append(e.store_ts - e.due)
        if not lateness:
            return
        st = self.stats
        st.add_delivered(len(lateness))
        st.lateness.observe_many(lateness)
        if self.svc.listeners:
            for e in entries:
                if isinstance(e, PendingBatch):
                    if e.infos is not None and e.topics is not None:
                        self._fire_delivered(e.topics, e.dphys, e.infos, e.dues, e.store_ts)
                elif e.info is not None and e.dphys >= 0:
                    topic, info = e.info
                    self._fire_one(e.due, info, e.store_ts, e.dphys, topic)

    # ---- visibility ----------------------------------------------------------------------
    def max_offset(self) -> int:
        return self.store.max_offset(SCHEDULE_TOPIC, self.queue_id)

    def snapshot(self) -> dict[str, Any]:
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
