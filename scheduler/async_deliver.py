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
import enum
from collections import deque
from collections.abc import Sequence

import structlog

from codec.buffers import BytesLike
from codec.errors import CodecError
from codec.record_rewrite import build_deliveries
from scheduler.delay_config import DelayConfig
from scheduler.delay_events import DeliveryInfo, EventInfos, LevelReporter
from scheduler.level_cursor import LevelCursor
from scheduler.level_quarantine import HALF_TOPIC, LevelQuarantine
from scheduler.quarantine import GIVE_UP
from scheduler.store_port import StorePort
from storage.store_types import PutRequest

log = structlog.get_logger(__name__)


class EntryStatus(enum.Enum):
    """A pending entry's state (PutResultProcess.status); the value is what the "resend" event carries."""

    RUNNING = "RUNNING"  # put, not yet confirmed
    SUCCESS = "SUCCESS"  # confirmed (stored, flushed where that is waited for)
    EXCEPTION = "EXCEPTION"  # put failed or not confirmed: to be resent
    SKIP = "SKIP"  # never delivered (dropped, unreadable, set aside): the offset moves past it


RUNNING, SUCCESS, EXCEPTION, SKIP = EntryStatus.RUNNING, EntryStatus.SUCCESS, EntryStatus.EXCEPTION, EntryStatus.SKIP


class PendingEntry:
    """PutResultProcess: one delivered message in flight. Until its put succeeded `dphys` is -1;
    then `dphys` / `store_ts` are the delivered record's CommitLog offset and store time and `flushed`
    its group-commit future (None without SYNC_FLUSH; shared by the whole put batch)."""

    __slots__ = ("offset", "phys", "size", "due", "status", "resend_count", "topic", "info", "flushed", "store_ts",
                 "dphys")

    def __init__(self, offset: int, phys: int, size: int, due: int, status: EntryStatus, topic: str = "",
                 info: DeliveryInfo | None = None) -> None:
        self.offset = offset
        self.phys = phys
        self.size = size
        self.due = due
        self.status = status
        self.resend_count = 0
        self.topic = topic  # the real topic, with `info` (for event listeners)
        self.info = info  # what the events carry from the schedule record, else None
        self.flushed: asyncio.Future[bool] | None = None
        self.store_ts = 0
        self.dphys = -1

    count = 1  # schedule-queue offsets this entry covers


class PendingBatch:
    """A run of consecutive schedule-queue offsets all stored by one put_batch (RUNNING until its
    shared flush future confirms them). It never fails as a whole: if the flush does not confirm,
    the handler splits it into one PendingEntry per message (EXCEPTION) and resends them one by one,
    so blocking and SKIP keep their per-message rules. Nothing is resent while it is a batch."""

    __slots__ = ("offset", "count", "phys", "sizes", "dues", "status", "flushed", "store_ts", "dphys", "infos")
    resend_count = 0

    def __init__(self, offset: int, phys: list[int], sizes: list[int], dues: list[int],
                 flushed: asyncio.Future[bool] | None, store_ts: int, dphys: list[int],
                 infos: EventInfos | None) -> None:
        self.offset = offset
        self.count = len(dues)
        self.phys = phys  # schedule record phys per message
        self.sizes = sizes  # and size
        self.dues = dues
        self.status = RUNNING
        self.flushed = flushed
        self.store_ts = store_ts
        self.dphys = dphys  # delivered CommitLog offset per message
        self.infos = infos  # per-message event columns (real topics included), or None when nobody listens

    def split(self) -> list[PendingEntry]:
        """One EXCEPTION entry per message (the flush did not confirm the batch)."""
        infos = self.infos
        if infos is None:
            return [PendingEntry(self.offset + k, phys, size, due, EXCEPTION)
                    for k, (phys, size, due) in enumerate(zip(self.phys, self.sizes, self.dues, strict=True))]
        return [PendingEntry(self.offset + k, phys, size, due, EXCEPTION, infos.topics[k], infos[k])
                for k, (phys, size, due) in enumerate(zip(self.phys, self.sizes, self.dues, strict=True))]


def flush_ok(fut: asyncio.Future[bool]) -> bool:
    """A completed flush future (the store's group commit) counts as success unless it failed or
    resolved False."""
    if fut.cancelled() or fut.exception() is not None:
        return False
    return fut.result() is not False


def delivery_request(raw: BytesLike) -> PutRequest | None:
    """messageTimeup for one schedule record: the delivery PutRequest, or None to drop (no REAL_TOPIC,
    half message)."""
    d = build_deliveries((raw,))[0]
    if d is None or d.topic == HALF_TOPIC:
        return None
    return PutRequest(d.record, d.topic, d.queue_id, d.tags_code, d.keys, -1)


class AsyncLevelHandler:
    """HandlePutResultTask for one level, as an asyncio task that sleeps on futures: it moves the
    level's delivered offset (`cursor.offset`) strictly in order and reports what was delivered."""

    def __init__(self, cursor: LevelCursor, store: StorePort, report: LevelReporter, quarantine: LevelQuarantine,
                 config: DelayConfig) -> None:
        self.cursor = cursor
        self.store = store
        self.report = report
        self.quarantine = quarantine
        self.max_pending = config.max_pending
        self.max_resend_blocked = config.max_resend_blocked
        self.backoff_cap_ms = config.resend_backoff_cap_ms
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

    def put_offset(self, end: int | None = None) -> int:
        """The next schedule offset whose delivery is not in the CommitLog: the first failed put in
        flight, else `end` (default: the cursor's scan_offset)."""
        if self.failed > 0:
            first = self.first_failed()
            if first is not None:
                return first
        return self.cursor.scan_offset if end is None else end

    def first_failed(self) -> int | None:
        """The schedule offset of the first EXCEPTION entry (None, and the count corrected, if there is
        none: the count is only a shortcut for the common case of no failures)."""
        first = next((e.offset for e in self.pending if e.status is EXCEPTION), None)
        if first is None:
            log.warning("delay.failed_count_corrected", level=self.cursor.level, was=self.failed)
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

    def resume(self) -> None:
        """Before the handler's task runs again after `stop` (a demoted master elected again): what was in
        flight then is forgotten, the level resumes from the offsets it is given (resume_from)."""
        if not self.stopping:
            return
        self.stopping = False
        self.pending.clear()
        self.count = self.failed = 0
        self._has_work = self._space = None

    def stop(self) -> None:
        self.stopping = True
        for f in (self._has_work, self._space):
            if f is not None and not f.done():
                f.set_result(None)

    def _commit(self) -> None:
        self.cursor.commit(self.put_offset())

    # ---- the handler task ----------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        pending = self.pending
        level = self.cursor.level
        while True:
            if not pending:
                if self.stopping:
                    return
                fut = self._has_work = loop.create_future()
                await fut
                continue
            head = pending[0]
            if head.status is RUNNING and self._pop_confirmed():
                continue
            if head.status is RUNNING:
                fl = head.flushed
                if fl is not None:
                    if not fl.done():
                        await asyncio.wait((fl,))
                    head.status = SUCCESS if flush_ok(fl) else EXCEPTION
                    if head.status is EXCEPTION and type(head) is not PendingBatch:
                        self.failed += 1
                        self._commit()
                else:
                    head.status = SUCCESS
            status = head.status
            if isinstance(head, PendingBatch):  # (no subclasses: as cheap as `type(head) is`)
                pending.popleft()
                if status is SUCCESS:
                    self.count -= head.count
                    self._done((head,))
                    self._signal_space()
                else:  # not confirmed durable: resend message by message
                    pending.extendleft(reversed(head.split()))
                    self.failed += head.count
                    self._commit()
                continue
            if status is SUCCESS or status is SKIP:
                pending.popleft()
                self.count -= 1
                self._done_one(head)
                self._signal_space()
            elif status is EXCEPTION:
                if self.stopping:
                    log.warning("delay.async_stopped_on_failed_head", level=level, offset=head.offset)
                    return
                await self._resend(head)
                self.report.event("resend", offset=head.offset, resendCount=head.resend_count,
                                  status=head.status.value, blocked=self.blocked())
                if head.resend_count == self.max_resend_blocked + 1:
                    log.warning("delay.level_blocked", level=level, offset=head.offset,
                                resends=head.resend_count)

    def _pop_confirmed(self) -> int:
        """Pop the run of RUNNING head entries already confirmed (no flush to wait for, or flushed
        fine) and report them at once; returns how many."""
        pending = self.pending
        done = []
        while pending:
            e = pending[0]
            if e.status is not RUNNING:
                break
            fl = e.flushed
            if fl is not None and (not fl.done() or not flush_ok(fl)):
                break
            e.status = SUCCESS
            done.append(pending.popleft())
            self.count -= e.count
        if done:
            self._done(done)
            self._signal_space()
        return len(done)

    # ---- confirmed deliveries: the offset moves, the reporter hears of them ------------------
    def _done_one(self, e: PendingEntry) -> None:
        """SUCCESS or SKIP of the head."""
        cursor = self.cursor
        if e.offset + 1 > cursor.offset:
            cursor.offset = e.offset + 1
        if e.status is SKIP or e.dphys < 0:
            return
        self.report.delivered(e.due, e.info, e.store_ts, e.dphys, e.topic)

    def _done(self, entries: Sequence[PendingEntry | PendingBatch]) -> None:
        """`_done_one` for a run of SUCCESS entries (PendingEntry or PendingBatch) in offset order,
        with one stats update."""
        cursor = self.cursor
        last = entries[-1]
        end = last.offset + last.count
        if end > cursor.offset:
            cursor.offset = end
        lateness = []
        for e in entries:
            if isinstance(e, PendingBatch):  # (no subclasses: as cheap as `type(e) is`)
                ts = e.store_ts
                lateness += [ts - due for due in e.dues]
            elif e.dphys >= 0:
                lateness.append(e.store_ts - e.due)
        if not lateness:
            return
        report = self.report
        st = report.stats
        st.add_delivered(len(lateness))
        st.observe_lateness(lateness)
        if report.listeners:
            for e in entries:
                if isinstance(e, PendingBatch):
                    if e.infos is not None:
                        report.fire_delivered(e.infos.topics, e.dphys, e.infos, e.dues, e.store_ts)
                elif e.info is not None and e.dphys >= 0:
                    report.fire_one(e.due, e.info, e.store_ts, e.dphys, e.topic)

    # ---- a failed head -----------------------------------------------------------------------
    async def _resend(self, head: PendingEntry) -> None:
        """doResend: back off, re-read the schedule record, put it synchronously. `head` is EXCEPTION
        (counted in `failed`) on entry; the progress file follows every change of that."""
        level, store = self.cursor.level, self.store
        delay_ms = min(head.resend_count * 100, self.backoff_cap_ms)
        head.resend_count += 1
        self.report.stats.resends += 1
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        raw = store.read_record(head.phys, head.size)
        if raw is None:
            if head.resend_count > 2 * self.max_resend_blocked:
                log.error("delay.async_skip_unreadable", level=level, offset=head.offset, phys=head.phys)
                self._settle(head, SKIP)
            return
        try:
            try:
                req = delivery_request(raw)
            except CodecError as e:  # a malformed record: set aside (scheduler.quarantine), not retried
                if self.quarantine.refused_at(head.phys, head.size, f"cannot convert: {e}", head.offset):
                    self._settle(head, SKIP)
                return
            if req is None:
                self._settle(head, SKIP)
                return
            self.cursor.begin_put()
            result = store.put([req])[0]
            if not result.ok:
                self.report.stats.failed_puts += 1
                self._commit()  # the in-flight mark goes before any quarantine put
                if result.status in GIVE_UP and self.quarantine.refused_at(
                        head.phys, head.size, f"delivery refused by the store: {result.status.name}", head.offset):
                    self._settle(head, SKIP)
                return
            self.report.on_put(req.topic, 1, len(req.record))
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
            log.error("delay.async_resend_failed", level=level, offset=head.offset, error=repr(e))
            if head.status is not EXCEPTION:
                self._unsettle(head)
            else:
                self._commit()

    def _settle(self, head: PendingEntry, status: EntryStatus) -> None:
        """A failed head is no longer failed (SKIP, or put again: RUNNING)."""
        head.status = status
        self.failed -= 1
        self._commit()

    def _unsettle(self, head: PendingEntry) -> None:
        head.status = EXCEPTION
        self.failed += 1
        self._commit()
