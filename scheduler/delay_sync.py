"""A delay level's sync delivery (scheduled-messages.md §1.5): one put_batch per pass, waited for; the
failed records resent one PutRequest each, with backoff, until stored (or set aside when the store
refuses them for good) before the level's offset moves past the batch, so nothing is lost or
duplicated; under faults the resent messages land after the rest of their batch. A part of
scheduler.delay_deliver.LevelDeliverer."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

import structlog

from codec.delivery_batch import DeliveryBatch
from scheduler.async_deliver import flush_ok
from scheduler.delay_events import DeliveryInfo, EventInfos
from scheduler.delay_state import LevelState, Raws, Spans
from scheduler.quarantine import GIVE_UP, LEVEL
from storage.message_store import PutRequest, PutResult, PutStatus

log = structlog.get_logger(__name__)

DELAY_FOR_A_WHILE_S = 0.1
PUT_OK = PutStatus.PUT_OK


class Resend(NamedTuple):
    """A message resent one by one after its batch put failed."""

    due: int
    info: DeliveryInfo | None  # for event listeners
    raw: memoryview  # the schedule record (for the quarantine)
    phys: int  # its CommitLog offset


class SyncDeliverMixin(LevelState):
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
            st.observe_lateness([ts - dues[i] for i in src])
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
        resends = []
        for j in failed:
            i = src[j]
            raw = raws[i]
            assert raw is not None  # batch.source names only records that were built
            resends.append(Resend(dues[i], infos[j] if infos is not None else None, raw, spans[i][0]))
        await self._resend_sync(reqs, resends)
        self.commit_progress(end)

    async def _resend_sync(self, reqs: list[PutRequest], resends: list[Resend]) -> None:
        attempt = 1
        todo = list(range(len(reqs)))
        while todo:
            await asyncio.sleep(DELAY_FOR_A_WHILE_S)
            results = self.store.put([reqs[i] for i in todo])
            failed: list[tuple[int, PutResult]] = []
            for i, r in zip(todo, results, strict=True):
                if r.status in GIVE_UP and self.svc.quarantine.set_aside(
                        resends[i].raw, f"delivery refused by the store: {r.status.name}", LEVEL, resends[i].phys,
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
                due, info = resends[i].due, resends[i].info
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
