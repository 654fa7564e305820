"""A delay level's async delivery (scheduled-messages.md §2; a scheduler.level_delivery.LevelDelivery):
one put_batch per pass without waiting, its outcome handed to the pending deque
(scheduler.async_deliver.AsyncLevelHandler) as one PendingBatch for a run stored whole, else one
PendingEntry per message; the handler moves the delivered offset in order and reports the deliveries."""

from __future__ import annotations

from scheduler.async_deliver import EXCEPTION, RUNNING, SKIP, AsyncLevelHandler, PendingBatch, PendingEntry
from scheduler.delay_events import LevelReporter
from scheduler.level_cursor import LevelCursor
from scheduler.level_delivery import DueBatch
from scheduler.level_quarantine import LevelQuarantine
from scheduler.quarantine import GIVE_UP
from scheduler.store_port import StorePort
from storage.store_types import BatchPutResult, PutStatus

PUT_OK = PutStatus.PUT_OK


class AsyncDelivery:
    __slots__ = ("cursor", "store", "report", "quarantine", "handler")

    def __init__(self, cursor: LevelCursor, store: StorePort, report: LevelReporter,
                 quarantine: LevelQuarantine, handler: AsyncLevelHandler) -> None:
        self.cursor = cursor
        self.store = store
        self.report = report
        self.quarantine = quarantine
        self.handler = handler

    def room(self, limit: int) -> int:
        handler = self.handler
        if handler.blocked():
            return 0
        return max(0, min(limit, handler.room()))

    async def wait_space(self) -> None:
        await self.handler.wait_space()

    def has_pending(self) -> bool:
        return bool(self.handler.pending)

    def in_flight(self) -> int:
        return self.handler.count

    def blocked(self) -> bool:
        return self.handler.blocked()

    def stop(self) -> None:
        self.handler.stop()

    async def deliver(self, due: DueBatch) -> None:
        self._put(due)
        self.cursor.scan_offset = due.end

    def _put(self, due: DueBatch) -> None:
        if not due.dues:
            return
        batch = due.batch
        store, handler, cursor = self.store, self.handler, self.cursor
        res: BatchPutResult | None = None
        if len(batch):
            cursor.begin_put()
            res = store.put_batch(batch)
            self.report.count_puts(batch, res.statuses)
        if res is not None and not batch.dropped and res.statuses is None:
            # the common case: one pending entry for the whole run
            handler.extend((PendingBatch(due.base, due.phys, due.sizes, due.dues, res.flushed, res.store_timestamp,
                                         res.phys, due.infos),))
        else:
            self._pending_entries(due, res)
        cursor.commit(handler.put_offset(due.end))

    def _pending_entries(self, due: DueBatch, res: BatchPutResult | None) -> None:
        """One PendingEntry per message: SKIP for dropped ones, RUNNING or EXCEPTION for the others."""
        handler = self.handler
        batch, base, phys, sizes, dues, infos = due.batch, due.base, due.phys, due.sizes, due.dues, due.infos
        entries: list[PendingEntry | None] = [None] * len(dues)
        for i in batch.dropped:
            entries[i] = PendingEntry(base + i, phys[i], sizes[i], dues[i], SKIP)
        if res is not None:
            statuses, dphys, ts, fl = res.statuses, res.phys, res.store_timestamp, res.flushed
            dests = batch.dests
            for j, i in enumerate(batch.source):
                ok = statuses is None or statuses[j] is PUT_OK
                status = RUNNING if ok else EXCEPTION
                if not ok and statuses is not None and statuses[j] in GIVE_UP and self.quarantine.refused_at(
                        phys[i], sizes[i], f"delivery refused by the store: {statuses[j].name}", base + i):
                    status = SKIP
                e = entries[i] = (PendingEntry(base + i, phys[i], sizes[i], dues[i], status, dests[j][0], infos[j])
                                  if infos is not None else PendingEntry(base + i, phys[i], sizes[i], dues[i], status))
                if ok:
                    e.flushed, e.store_ts, e.dphys = fl, ts, dphys[j]
            if statuses is not None:
                self.report.stats.failed_puts += sum(1 for x in statuses if x is not PUT_OK)
                # EXCEPTION entries only: one the store refused for good was quarantined (SKIP)
                handler.failed += sum(1 for e in entries if e is not None and e.status is EXCEPTION)
        handler.extend(entries)  # type: ignore[arg-type]  # every message is dropped or in batch.source: no None left
