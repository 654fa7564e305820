"""A delay level's async delivery (scheduled-messages.md §2), the level's side: one put_batch per pass
without waiting, its outcome handed to the pending deque (scheduler.async_deliver.AsyncLevelHandler) as
one PendingBatch for a run stored whole, else one PendingEntry per message; and the handler's
callbacks, in offset order, that move the delivered offset and report the deliveries. A part of
scheduler.delay_deliver.LevelDeliverer."""

from __future__ import annotations

from collections.abc import Sequence

from codec.delivery_batch import DeliveryBatch
from scheduler.async_deliver import EXCEPTION, RUNNING, SKIP, PendingBatch, PendingEntry
from scheduler.delay_events import EventInfos
from scheduler.delay_state import LevelState, Spans
from scheduler.quarantine import GIVE_UP
from storage.message_store import BatchPutResult, PutStatus

PUT_OK = PutStatus.PUT_OK


class AsyncDeliverMixin(LevelState):
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
        st.observe_lateness(lateness)
        if self.svc.listeners:
            for e in entries:
                if isinstance(e, PendingBatch):
                    if e.infos is not None and e.topics is not None:
                        self._fire_delivered(e.topics, e.dphys, e.infos, e.dues, e.store_ts)
                elif e.info is not None and e.dphys >= 0:
                    topic, info = e.info
                    self._fire_one(e.due, info, e.store_ts, e.dphys, topic)
