"""The Putter (scheduled-messages.md §4.5 steps 4-5): ordered units → real topic.

The SlotReader (scheduler.timer.reader) hands over chunks of a due slot's units through a bounded
asyncio.Queue, then the slot's end. The putter waits until each unit's exact ms (never early), rewrites the records (real topic and
  queue, TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS; roll units go back to rmq_sys_wheel_timer with
  TIMER_ROLL_TIMES + 1) and puts them in batches: per batch one MessageStore.read_records, one
  codec.timer_rewrite.build_timer_deliveries (bytes edits, no property dict), one put, and the
  due / delivered events handed to the listeners as one list each. A failed put is retried after 500 × precision / 1000
  ms until it succeeds; a record that cannot be converted (build_timer_deliveries raises for it)
  or that the store refuses for good (too large once converted) is quarantined
  (scheduler.quarantine) and the rest of its batch goes on. `commit_read_ms` moves when the
  putter reaches the slot's commit marker, i.e. after every message of the slot was put.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

import numpy as np
import structlog

from codec.buffers import BytesLike
from codec.errors import CodecError
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes, read_store_timestamp
from codec.timer_layout import MAGIC_ROLL
from codec.timer_rewrite import (
    CANCELLED,
    MISSING,
    SKIPPED,
    TimerDelivery,
    build_timer_deliveries,
    timer_put_run,
)
from scheduler.events import PutObserver, count_puts
from scheduler.progress_file import NO_PHYS
from scheduler.quarantine import GIVE_UP, TIMER_DEQUEUE, Quarantine
from scheduler.store_port import StorePort
from scheduler.timer.config import TimerConfig
from scheduler.timer.metrics import DeliveryRow, TimerMetrics
from scheduler.timer.msg_ids import msg_id_prefix
from scheduler.timer.reader import PutItem, SlotChunk
from scheduler.timer.state import SlotProgress, TimerClocks, TimerFiles, now_ms, sleep_until
from storage.store_types import PutStatus

log = structlog.get_logger(__name__)

QUARANTINED = -1  # a unit whose record was set aside (scheduler.quarantine)
PUT_OK = PutStatus.PUT_OK
REAL_TOPIC_KEY, TIMER_DEL_UNIQKEY = MessageConst.REAL_TOPIC, MessageConst.TIMER_DEL_UNIQKEY


# per unit, as codec.timer_rewrite.build_timer_deliveries makes it: its TimerDelivery, or MISSING /
# SKIPPED / CANCELLED / QUARANTINED
Built = list[TimerDelivery | int]


class DueEvent(NamedTuple):
    """What the "delivered" event of a final delivery needs that only the stored timer record has."""

    msg_id_prefix: str
    topic: str
    uniq_key: str | None
    store_ts: int
    offset: int  # the timer record's CommitLog offset


def _no_real_topic(raw: BytesLike) -> bool:
    """A timer record that is not a delete marker and has no REAL_TOPIC: nowhere to deliver it."""
    props = parse_properties(read_properties_bytes(raw, 0))
    return not props.get(REAL_TOPIC_KEY) and TIMER_DEL_UNIQKEY not in props


class Putter:
    """Takes a slot's chunks from `put_queue`, waits for each unit's exact ms, builds the deliveries, puts
    them and advances the read clock (`TimerClocks.commit_read_ms`, the checkpoint) and scheduleProgress
    (`run`: the supervised task). `done_key`: (slot, (due, timerlog position)) of the last unit put, as
    recovery found it."""

    def __init__(self, store: StorePort, config: TimerConfig, files: TimerFiles, clocks: TimerClocks,
                 put_queue: asyncio.Queue[PutItem], metrics: TimerMetrics, quarantine: Quarantine,
                 on_put: PutObserver, done_key: tuple[int, tuple[int, int]] = (-1, (-1, -1))) -> None:
        self.store = store
        self.config = config
        self.files = files
        self.clocks = clocks
        self.put_queue = put_queue
        self.metrics = metrics
        self.quarantine = quarantine
        self.on_put = on_put
        self._put_current: PutItem | None = None  # the item in progress: a restarted putter finishes it first
        self._done_key_slot, self._done_key = done_key  # (due, timerlog position) of the last unit put of that slot

    async def run(self) -> None:
        q, clocks = self.put_queue, self.clocks
        while True:
            item = self._put_current  # a chunk a failed run did not finish (the supervisor restarted us)
            if item is None:
                item = self._put_current = await q.get()
            if isinstance(item, int):
                if item > clocks.commit_read_ms:
                    files = self.files
                    clocks.commit_read_ms = item
                    files.checkpoint.set_read_time(item)
                    self._done_key_slot, self._done_key = item, (-1, -1)
                    files.progress_file.timer_commit(item, -1, -1, -1, self.store.commitlog_max_offset())
                    clocks.slot_progress = SlotProgress(item, 0, -1, -1)
            else:
                await self._deliver_chunk(item)
            self._put_current = None

    async def _deliver_chunk(self, c: SlotChunk) -> None:
        files, clocks = self.files, self.clocks
        if c.slot > clocks.commit_read_ms:  # the reader went past empty slots to this one: the clock follows
            clocks.commit_read_ms = c.slot
            files.checkpoint.set_read_time(c.slot)
        if c.slot != clocks.slot_progress.slot_ms:  # [cluster-ha] the slot in progress, for the slaves
            d = c.done
            clocks.slot_progress = SlotProgress(c.slot, c.base + d, int(c.due[d - 1]) if d else -1,
                                              int(c.offset[d - 1]) if d else -1)
        if c.slot != self._done_key_slot:
            self._done_key_slot, self._done_key = c.slot, (-1, -1)
            files.progress_file.timer_commit(c.slot, -1, -1, -1, self.store.commitlog_max_offset())
        i, n = c.done, len(c.due)
        batch = self.config.put_batch
        while i < n:
            now = now_ms()
            j = i + int(np.searchsorted(c.due[i:n], now, side="right"))
            if j == i:
                await sleep_until(int(c.due[i]))
                continue
            while i < j:
                k = min(j, i + batch)
                await self._put_units(c, i, k)
                # seed 003's localIndex: units of the slot put so far, and the due order key of the last
                clocks.slot_progress = SlotProgress(c.slot, c.base + k, int(c.due[k - 1]), int(c.offset[k - 1]))
                i = c.done = k

    async def _put_units(self, c: SlotChunk, lo: int, hi: int) -> None:
        """convert + convertMessage for units lo..hi of a chunk, then one put_batch (retried as a batch)."""
        m = self.metrics
        offsets: list[int] = c.offset[lo:hi].tolist()
        raws = self.store.read_records(zip(offsets, c.size[lo:hi].tolist(), strict=True))
        exact: list[int] = c.exact[lo:hi].tolist()
        rolls: list[int] = (c.magic[lo:hi] & MAGIC_ROLL).tolist()
        listening = bool(m.listeners)
        uniqs: list[bytes | None] | None = [] if listening else None
        write_ms: list[int] = c.write_ms[lo:hi].tolist()
        deq = now_ms()
        built: Built
        try:
            built = build_timer_deliveries(raws, rolls, exact, write_ms, deq, c.cancel, uniqs=uniqs)
        except (CodecError, ValueError):  # a poison record: set it aside, the rest of the batch goes on
            built = self._isolate(raws, rolls, exact, write_ms, deq, c.cancel, uniqs, offsets, c.slot)
        reqs: list[TimerDelivery] = []
        dues: list[int | None] = []  # exact deliver ms of a final delivery, None for a roll
        units_of: list[int] = []  # chunk index of each request's unit
        origins: list[tuple[memoryview, int]] = []  # per request: (stored timer record, its CommitLog offset)
        events: list[DueEvent | None] | None = [] if listening else None  # per request (None: a roll)
        for k, b in enumerate(built):
            raw = raws[k]
            if isinstance(b, int) or raw is None:  # (a record that was not read is MISSING)
                if b == MISSING:
                    m.missing += 1
                elif b == CANCELLED:
                    m.cancelled += 1
                elif b == SKIPPED and raw is not None and not rolls[k] and _no_real_topic(raw):
                    self._set_aside(raw, "no REAL_TOPIC", offsets[k], slot=c.slot)
                continue  # SKIPPED: a (rolled-then-final) marker is never delivered
            reqs.append(b)
            units_of.append(lo + k)
            origins.append((raw, offsets[k]))
            if rolls[k]:
                dues.append(None)
                if events is not None:
                    events.append(None)
                continue
            due = exact[k]
            dues.append(due)
            if events is not None and uniqs is not None:
                u = uniqs[k]
                events.append(DueEvent(msg_id_prefix(raw), b.topic, u.decode("utf-8", "replace") if u is not None
                                       else None, read_store_timestamp(raw, 0), offsets[k]))
        del raws
        if events:
            m.emit_many("due", [(e.topic, e.uniq_key, e.msg_id_prefix + f"{e.offset:016X}", e.store_ts, due, 0)
                                for e, due in zip(events, dues, strict=True) if e is not None and due is not None])
        await self._put_with_retry(reqs, dues, events, origins, c, lo, hi, units_of)

    def _commit_through(self, c: SlotChunk, i: int) -> None:
        """scheduleProgress: units of the chunk up to index i (inclusive) are put; -1 = none of them
        (the progress keeps the key it had)."""
        progress = self.files.progress_file
        if i < 0:
            progress.timer_begin(NO_PHYS)  # nothing of this put stored: only the in-flight mark goes
            return
        self._done_key = (int(c.due[i]), int(c.pos[i]))
        progress.timer_commit(c.slot, *self._done_key, c.last_pos, self.store.commitlog_max_offset())

    def _isolate(self, raws: list[memoryview | None], rolls: list[int], exact: list[int], write_ms: list[int],
                 deq: int, cancel: set[str], uniqs: list[bytes | None] | None, offsets: list[int],
                 slot: int) -> Built:
        """build_timer_deliveries per record: one that raises is quarantined (QUARANTINED)."""
        out: Built = []
        for k, raw in enumerate(raws):
            one: list[bytes | None] | None = [] if uniqs is not None else None
            try:
                b = build_timer_deliveries((raw,), rolls[k:k + 1], exact[k:k + 1], write_ms[k:k + 1], deq, cancel,
                                           uniqs=one)[0]
            except (CodecError, ValueError) as e:
                assert raw is not None  # a missing record converts (MISSING): this one was read
                self._set_aside(raw, f"cannot convert: {e}", offsets[k], slot=slot, roll=bool(rolls[k]))
                b, one = QUARANTINED, [None] if one is not None else None
            out.append(b)
            if uniqs is not None and one is not None:
                uniqs.extend(one)
        return out

    def _set_aside(self, raw: BytesLike, reason: str, phys: int, **context: object) -> None:
        """Quarantine one timer record; a quarantine put that may pass later (disk full) raises, so the
        supervisor backs off and the putter goes on from the same units (nothing was put for them)."""
        if not self.quarantine.set_aside(raw, reason, TIMER_DEQUEUE, phys, **context):
            raise RuntimeError(f"quarantine put failed for the timer record at {phys}: try again")

    async def _put_with_retry(self, reqs: list[TimerDelivery], dues: list[int | None], events: list[DueEvent | None] | None,
                              origins: list[tuple[memoryview, int]], c: SlotChunk, lo: int, hi: int,
                              units_of: list[int]) -> None:
        """Put the converted records (TimerDelivery) with MessageStore.put_batch; records that failed with a
        retryable status are put again after a back-off, ones the store refuses for good (too large
        once converted) are quarantined. scheduleProgress moves in the same step as the first put:
        through unit hi - 1, or up to the unit before the first failure (`units_of[k]`: chunk index of
        record k), which also lifts the in-flight mark before any quarantine put; and through hi - 1
        once every failed record is stored or set aside (retries carry no in-flight mark: a kill during
        them may re-deliver, never lose)."""
        m = self.metrics
        progress = self.files.progress_file
        backoff = 0.5 * self.config.precision_ms / 1000.0
        first = True
        if not reqs:
            self._commit_through(c, hi - 1)
            return
        while reqs:
            if first:
                progress.timer_begin(self.store.commitlog_max_offset())
            res = self.store.put_batch(timer_put_run(reqs))
            statuses, phys = res.statuses, res.phys
            if statuses is None:
                self._commit_through(c, hi - 1)
            elif first:
                k = next(k for k, x in enumerate(statuses) if x is not PUT_OK)
                self._commit_through(c, units_of[k] - 1 if units_of[k] > lo else -1)
            first = False
            retry: list[int] = []
            done = now_ms()
            late: list[int] = []
            delivered: list[DeliveryRow] | None = [] if events is not None else None
            rolled = 0
            stored: list[int] | None = [] if statuses is None else None  # request indexes put (None: all of them)
            for k, due in enumerate(dues):
                if statuses is None or statuses[k] is PUT_OK:
                    if stored is not None:
                        stored.append(k)
                    if due is None:
                        rolled += 1
                        continue
                    late.append(done - due)
                    if delivered is not None and events is not None:
                        e = events[k]
                        assert e is not None  # a final delivery has its event
                        delivered.append((e.topic, e.uniq_key, e.msg_id_prefix + f"{phys[k]:016X}", e.store_ts, due,
                                          done))
                elif statuses[k] in GIVE_UP and self.quarantine.set_aside(
                        origins[k][0], f"delivery refused by the store: {statuses[k].name}", TIMER_DEQUEUE,
                        origins[k][1], topic=reqs[k].topic, roll=due is None):
                    m.put_failures += 1
                else:
                    m.put_failures += 1
                    retry.append(k)
            m.rolled += rolled
            put = reqs if stored is None else [reqs[k] for k in stored]
            if put:  # counted as puts of their topics (real topic, or rmq_sys_wheel_timer for a roll)
                count_puts(self.on_put, [r.topic for r in put], [len(r.record) for r in put])
            if late:
                m.delivered += len(late)
                m.observe_lateness(late)
                m.dequeue_latency_ms = late[-1]
            m.dequeue_rate.add(len(reqs) - len(retry))
            if delivered:
                m.emit_many("delivered", delivered)
            if statuses is not None and not retry:  # the failed ones are set aside: the whole run is handled
                self._commit_through(c, hi - 1)
            if retry:
                reqs, dues = [reqs[k] for k in retry], [dues[k] for k in retry]
                units_of = [units_of[k] for k in retry]
                origins = [origins[k] for k in retry]
                events = [events[k] for k in retry] if events is not None else None
                log.warning("timer.deliver_retry", count=len(reqs), backoff_s=backoff)
                await asyncio.sleep(backoff)  # back-off before retrying failed puts
            else:
                reqs = []
                await asyncio.sleep(0)
