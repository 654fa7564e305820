"""Async deliver (scheduled-messages.md §2): per-level pending deque and its result handler.

The level task puts a batch and enqueues it without waiting: one `PendingBatch` for a run that
put_batch stored whole, else one `PendingEntry` per message (dropped records SKIP, failed puts
EXCEPTION). The handler awaits the head's flush future (no busy waiting), advances the delivered
offset strictly in order, and resends a failed head (message by message: a batch whose flush failed
is split first) with backoff min(n*100 ms, 60 s). The pending limit counts messages. While the head has failed more
than `max_resend_blocked` times the level takes no new deliveries (`blocked`); a schedule record
that can no longer be read is SKIPped after more than 2*max_resend_blocked tries.

Deviation from 4.9.x, on purpose: a SKIP at the head advances the offset past it (Java waits for a
later SUCCESS to do that), so a restart does not rescan it and `pending` reaches 0.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from scheduler.delay_deliver import LevelDeliverer
    from scheduler.delay_events import DeliveryInfo, EventInfos

from codec.errors import CodecError
from scheduler.quarantine import GIVE_UP

log = structlog.get_logger(__name__)

RUNNING, SUCCESS, EXCEPTION, SKIP = "RUNNING", "SUCCESS", "EXCEPTION", "SKIP"


EventInfo = tuple[str, "DeliveryInfo"]  # (real topic, what the events carry from the schedule record)


class PendingEntry:
    """PutResultProcess: one delivered message in flight. Until its put succeeded `dphys` is -1;
    then `dphys` / `store_ts` are the delivered record's CommitLog offset and store time and `flushed`
    its group-commit future (None without SYNC_FLUSH; shared by the whole put batch)."""

    __slots__ = ("offset", "phys", "size", "due", "status", "resend_count", "info", "flushed", "store_ts", "dphys")

    def __init__(self, offset: int, phys: int, size: int, due: int, status: str, info: EventInfo | None = None) -> None:
        self.offset = offset
        self.phys = phys
        self.size = size
        self.due = due
        self.status = status
        self.resend_count = 0
        self.info = info  # (topic, DeliveryInfo) for event listeners, else None
        self.flushed: asyncio.Future[bool] | None = None
        self.store_ts = 0
        self.dphys = -1

    count = 1  # schedule-queue offsets this entry covers


class PendingBatch:
    """A run of consecutive schedule-queue offsets all stored by one put_batch (RUNNING until its
    shared flush future confirms them). It never fails as a whole: if the flush does not confirm,
    the handler splits it into one PendingEntry per message (EXCEPTION) and resends them one by one,
    so blocking and SKIP keep their per-message rules. Nothing is resent while it is a batch."""

    __slots__ = ("offset", "count", "spans", "dues", "status", "flushed", "store_ts", "dphys", "infos", "topics")
    resend_count = 0

    def __init__(self, offset: int, spans: list[tuple[int, int]], dues: list[int], flushed: asyncio.Future[bool] | None,
                 store_ts: int, dphys: list[int], topics: list[str] | None, infos: EventInfos | None) -> None:
        self.offset = offset
        self.count = len(dues)
        self.spans = spans  # (schedule phys, size) per message
        self.dues = dues
        self.status = RUNNING
        self.flushed = flushed
        self.store_ts = store_ts
        self.dphys = dphys  # delivered CommitLog offset per message
        self.topics = topics
        self.infos = infos  # per-message event info, or None when nobody listens

    def split(self) -> list[PendingEntry]:
        """One EXCEPTION entry per message (the flush did not confirm the batch)."""
        out = []
        for k, ((phys, size), due) in enumerate(zip(self.spans, self.dues, strict=True)):
            info = (self.topics[k], self.infos[k]) if self.infos is not None and self.topics is not None else None
            out.append(PendingEntry(self.offset + k, phys, size, due, EXCEPTION, info))
        return out


def flush_ok(fut: asyncio.Future[bool]) -> bool:
    """A completed flush future (the store's group commit) counts as success unless it failed or
    resolved False."""
    if fut.cancelled() or fut.exception() is not None:
        return False
    return fut.result() is not False


class AsyncLevelHandler:
    """HandlePutResultTask for one level, as an asyncio task that sleeps on futures."""

    def __init__(self, deliverer: LevelDeliverer) -> None:
        self.deliverer = deliverer
        cfg = deliverer.svc.config
        self.max_pending = cfg.max_pending
        self.max_resend_blocked = cfg.max_resend_blocked
        self.backoff_cap_ms = cfg.resend_backoff_cap_ms
        self.pending: deque[PendingEntry | PendingBatch] = deque()
        self.count = 0  # messages in `pending` (a PendingBatch holds several)
        self.failed = 0  # EXCEPTION entries in `pending` (not in the CommitLog: the progress stops at the first)
        self._has_work: asyncio.Future[None] | None = None
        self._space: asyncio.Future[None] | None = None
        self.stopping = False

    # ---- used by the level task ----------------------------------------------------------
    def blocked(self) -> bool:
        """need2Blocked on the head: more than max_resend_blocked resends."""
        return bool(self.pending) and self.pending[0].resend_count > self.max_resend_blocked

    def room(self) -> int:
        """How many messages may still be enqueued (Java admits while size <= limit: up to limit+1)."""
        return self.max_pending + 1 - self.count

    def first_failed(self) -> int | None:
        """The schedule offset of the first EXCEPTION entry (None, and the count corrected, if there is
        none: the count is only a shortcut for the common case of no failures)."""
        first = next((e.offset for e in self.pending if e.status == EXCEPTION), None)
        if first is None:
            log.warning("delay.failed_count_corrected", level=self.deliverer.level, was=self.failed)
            self.failed = 0
        return first

    def extend(self, entries: Sequence[PendingEntry | PendingBatch]) -> None:
        self.pending.extend(entries)
        self.count += sum(e.count for e in entries)
        w = self._has_work
        if w is not None and not w.done():
            w.set_result(None)

    async def wait_space(self) -> None:
        """Until the handler removes an entry (or stops)."""
        if self.stopping:
            return
        fut = self._space = asyncio.get_running_loop().create_future()
        await fut

    def _signal_space(self) -> None:
        s = self._space
        if s is not None and not s.done():
            s.set_result(None)

    def stop(self) -> None:
        self.stopping = True
        for f in (self._has_work, self._space):
            if f is not None and not f.done():
                f.set_result(None)

    # ---- the handler task ----------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        pending = self.pending
        d = self.deliverer
        while True:
            if not pending:
                if self.stopping:
                    return
                fut = self._has_work = loop.create_future()
                await fut
                continue
            head = pending[0]
            if head.status == RUNNING and self._pop_confirmed():
                continue
            if head.status == RUNNING:
                fl = head.flushed
                if fl is not None:
                    if not fl.done():
                        await asyncio.wait((fl,))
                    head.status = SUCCESS if flush_ok(fl) else EXCEPTION
                    if head.status == EXCEPTION and type(head) is not PendingBatch:
                        self.failed += 1
                        d.commit_progress(d.put_offset())
                else:
                    head.status = SUCCESS
            status = head.status
            if isinstance(head, PendingBatch):  # (no subclasses: as cheap as `type(head) is`)
                pending.popleft()
                if status == SUCCESS:
                    self.count -= head.count
                    d.entries_done((head,))
                    self._signal_space()
                else:  # not confirmed durable: resend message by message
                    pending.extendleft(reversed(head.split()))
                    self.failed += head.count
                    d.commit_progress(d.put_offset())
                continue
            if status == SUCCESS or status == SKIP:
                pending.popleft()
                self.count -= 1
                d.entry_done(head)
                self._signal_space()
            elif status == EXCEPTION:
                if self.stopping:
                    log.warning("delay.async_stopped_on_failed_head", level=d.level, offset=head.offset)
                    return
                await self._resend(head)
                if d.svc.listeners:
                    d.svc.fire("resend", level=d.level, offset=head.offset, resendCount=head.resend_count,
                               status=head.status, blocked=self.blocked())
                if head.resend_count == self.max_resend_blocked + 1:
                    log.warning("delay.level_blocked", level=d.level, offset=head.offset,
                                resends=head.resend_count)

    def _pop_confirmed(self) -> int:
        """Pop the run of RUNNING head entries already confirmed (no flush to wait for, or flushed
        fine) and hand them to the deliverer at once; returns how many."""
        pending = self.pending
        done = []
        while pending:
            e = pending[0]
            if e.status != RUNNING:
                break
            fl = e.flushed
            if fl is not None and (not fl.done() or not flush_ok(fl)):
                break
            e.status = SUCCESS
            done.append(pending.popleft())
            self.count -= e.count
        if done:
            self.deliverer.entries_done(done)
            self._signal_space()
        return len(done)

    async def _resend(self, head: PendingEntry) -> None:
        """doResend: back off, re-read the schedule record, put it synchronously. `head` is EXCEPTION
        (counted in `failed`) on entry; the progress file follows every change of that."""
        d = self.deliverer
        delay_ms = min(head.resend_count * 100, self.backoff_cap_ms)
        head.resend_count += 1
        d.stats.resends += 1
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        raw = d.store.read_record(head.phys, head.size)
        if raw is None:
            if head.resend_count > 2 * self.max_resend_blocked:
                log.error("delay.async_skip_unreadable", level=d.level, offset=head.offset, phys=head.phys)
                self._settle(head, SKIP)
            return
        try:
            try:
                req = d.make_request(raw)
            except CodecError as e:  # a malformed record: set aside (scheduler.quarantine), not retried
                if d.quarantine_refused(head.phys, head.size, f"cannot convert: {e}", head.offset):
                    self._settle(head, SKIP)
                return
            if req is None:
                self._settle(head, SKIP)
                return
            d._progress_begin(d.store.commitlog_max_offset())
            result = d.store.put([req])[0]
            if not result.ok:
                d.stats.failed_puts += 1
                d.commit_progress(d.put_offset())  # the in-flight mark goes before any quarantine put
                if result.status in GIVE_UP and d.quarantine_refused(
                        head.phys, head.size, f"delivery refused by the store: {result.status.name}", head.offset):
                    self._settle(head, SKIP)
                return
            d.svc.on_put(req.topic, 1, len(req.record))
            head.flushed, head.store_ts, head.dphys = result.flushed, result.store_timestamp, result.phys_offset
            self._settle(head, RUNNING)  # in the CommitLog: the progress moves past it now
            fl = result.flushed
            if fl is not None:
                await asyncio.wait((fl,))
                if not flush_ok(fl):
                    self._unsettle(head)
                    return
            head.status = SUCCESS
        except Exception as e:  # a broken record or store error: retried on the next pass
            log.error("delay.async_resend_failed", level=d.level, offset=head.offset, error=repr(e))
            if head.status != EXCEPTION:
                self._unsettle(head)
            else:
                d.commit_progress(d.put_offset())

    def _settle(self, head: PendingEntry, status: str) -> None:
        """A failed head is no longer failed (SKIP, or put again: RUNNING)."""
        head.status = status
        self.failed -= 1
        d = self.deliverer
        d.commit_progress(d.put_offset())

    def _unsettle(self, head: PendingEntry) -> None:
        head.status = EXCEPTION
        self.failed += 1
        d = self.deliverer
        d.commit_progress(d.put_offset())
