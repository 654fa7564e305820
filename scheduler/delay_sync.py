"""A delay level's sync delivery (scheduled-messages.md §1.5; a scheduler.level_delivery.LevelDelivery):
one put_batch per pass, waited for; the failed records resent one PutRequest each, with backoff, until
stored (or set aside when the store refuses them for good) before the level's offset moves past the
batch, so nothing is lost or duplicated; under faults the resent messages land after the rest of their
batch."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

import structlog

from scheduler.async_deliver import flush_ok
from scheduler.delay_events import DeliveryInfo, LevelReporter
from scheduler.level_cursor import LevelCursor
from scheduler.level_delivery import DueBatch
from scheduler.level_quarantine import LevelQuarantine
from scheduler.quarantine import GIVE_UP
from scheduler.store_port import StorePort
from storage.store_types import PutRequest, PutStatus

log = structlog.get_logger(__name__)

DELAY_FOR_A_WHILE_S = 0.1
PUT_OK = PutStatus.PUT_OK


class Resend(NamedTuple):
    """A message resent one by one after its batch put failed."""

    due: int
    info: DeliveryInfo | None  # for event listeners
    raw: memoryview  # the schedule record (for the quarantine)
    phys: int  # its CommitLog offset


class SyncDelivery:
    __slots__ = ("cursor", "store", "report", "quarantine")

    def __init__(self, cursor: LevelCursor, store: StorePort, report: LevelReporter,
                 quarantine: LevelQuarantine) -> None:
        self.cursor = cursor
        self.store = store
        self.report = report
        self.quarantine = quarantine

    def room(self, limit: int) -> int:
        return limit

    async def wait_space(self) -> None:
        return None

    def has_pending(self) -> bool:
        return False

    def in_flight(self) -> int:
        return 0

    def blocked(self) -> bool:
        return False

    def stop(self) -> None:
        return None

    async def deliver(self, due: DueBatch) -> None:
        await self._put(due)
        cursor = self.cursor
        cursor.offset = cursor.scan_offset = due.end

    async def _put(self, due: DueBatch) -> None:
        """One put_batch for the whole batch; failed records (put status, or a flush that did not
        confirm) are resent one PutRequest each, with backoff, until stored; a record the store
        refuses for good (GIVE_UP: oversize with its real topic) is quarantined instead. The progress
        (scheduleProgress) moves to `end` in the same step as the put (to the first failed record if a
        put failed, and to `end` once the failed ones are stored or set aside)."""
        batch, end, cursor = due.batch, due.end, self.cursor
        n = len(batch)
        if not n:
            cursor.commit(end)
            return
        cursor.begin_put()
        res = self.store.put_batch(batch)
        report = self.report
        report.count_puts(batch, res.statuses)
        statuses = res.statuses
        if statuses is None:
            cursor.commit(end)
        else:
            first = next((j for j, x in enumerate(statuses) if x is not PUT_OK), None)
            cursor.commit(end if first is None else due.base + batch.source[first])
        fl = res.flushed
        flushed_ok = True
        if fl is not None:
            if not fl.done():
                await asyncio.wait((fl,))
            flushed_ok = flush_ok(fl)  # not confirmed durable: resend (Java does the same)
        src, dues, infos = batch.source, due.dues, due.infos
        if statuses is None and flushed_ok:
            report.delivered_run(dues if not batch.dropped else [dues[i] for i in src], res.store_timestamp,
                                 res.phys, infos)
            return
        failed: list[int] = []
        raws = due.raws
        for j, i in enumerate(src):
            if statuses is not None and statuses[j] in GIVE_UP and self.quarantine.refused(
                    raws[i], statuses[j], due.phys[i], batch.dests[j][0]):  # type: ignore[arg-type]  # source: built, never None
                continue
            if (statuses is not None and statuses[j] is not PUT_OK) or (not flushed_ok and res.phys[j] >= 0):
                failed.append(j)
            else:
                report.delivered(dues[i], infos[j] if infos is not None else None, res.store_timestamp,
                                 res.phys[j], batch.dests[j][0])
        if not failed:  # every failure was set aside
            cursor.commit(end)
            return
        report.stats.failed_puts += len(failed)
        log.warning("delay.deliver_failed", level=cursor.level, failed=len(failed), attempt=1,
                    status=str(statuses[failed[0]] if statuses is not None else "FLUSH_FAILED"))
        reqs = [PutRequest(batch.record(j), *batch.dests[j], batch.tags_codes[j], batch.keys[j], -1) for j in failed]
        resends = []
        for j in failed:
            i = src[j]
            raw = raws[i]
            assert raw is not None  # batch.source names only records that were built
            resends.append(Resend(dues[i], infos[j] if infos is not None else None, raw, due.phys[i]))
        await self._resend(reqs, resends)
        cursor.commit(end)

    async def _resend(self, reqs: list[PutRequest], resends: list[Resend]) -> None:
        attempt = 1
        todo = list(range(len(reqs)))
        report = self.report
        while todo:
            await asyncio.sleep(DELAY_FOR_A_WHILE_S)
            results = self.store.put([reqs[i] for i in todo])
            failed: list[int] = []
            first_status: PutStatus | None = None
            for i, r in zip(todo, results, strict=True):
                if r.status in GIVE_UP and self.quarantine.refused(resends[i].raw, r.status, resends[i].phys,
                                                                   reqs[i].topic):
                    continue
                if r.status is PUT_OK:
                    report.on_put(reqs[i].topic, 1, len(reqs[i].record))
                    fl = r.flushed
                    if fl is not None:
                        if not fl.done():
                            await asyncio.wait((fl,))
                        if not flush_ok(fl):
                            failed.append(i)
                            first_status = r.status if first_status is None else first_status
                            continue
                    report.delivered(resends[i].due, resends[i].info, r.store_timestamp, r.phys_offset,
                                     reqs[i].topic)
                    continue
                failed.append(i)
                first_status = r.status if first_status is None else first_status
            attempt += 1
            if failed:
                report.stats.failed_puts += len(failed)
                if attempt % 100 == 0:
                    log.warning("delay.deliver_failed", level=self.cursor.level, failed=len(failed),
                                attempt=attempt, status=str(first_status))
            todo = sorted(failed)
