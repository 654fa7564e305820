"""The wheel on a slave and at a failover ([cluster-ha]): the reader cursor's history a master hands its
slaves (scheduler.progress.TimerProgress, `timer_progress`), a slave linking each replicated unit into
exactly the master's slot, and a promoted slave taking over where the old master's delivery got.

A master remembers where its reader cursor was each time it moved (`TimerClocks.cursor_history`:
(timer queue offset enqueued, cursor ms)); a unit at timer queue offset x was linked no earlier than the
cursor of the last entry at or below x. A slave's Enqueuer enqueues only up to the master's enqueued
offset (`Follower.follow`), drops the units of slots the master has already put and links the others
where the master did (`Following.master_slot`). `Follower.take_over` (from TimerMessageStore.promote)
makes the slave's wheel the master's.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from codec.codes import SCHEDULE_QUARANTINE_TOPIC, TIMER_TOPIC
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes, read_topic
from scheduler.progress import TimerProgress
from scheduler.store_port import StorePort
from scheduler.timer.config import TimerConfig
from scheduler.timer.enqueue import Enqueuer
from scheduler.timer.state import Following, ResumeAfter, SlotProgress, SlotResume, TimerClocks, TimerFiles

_TIMER_OUT, _DEQUEUED, _UNIQ, _DELAY = (MessageConst.TIMER_OUT_MS, MessageConst.TIMER_DEQUEUE_MS,
                                       MessageConst.UNIQ_KEY, MessageConst.DELAY)


class TimerTail(NamedTuple):
    """The wheel's deliveries a replicated CommitLog holds after a point (`timer_deliveries_after`):
    how many, and the slot and UNIQ_KEY of the last one."""

    delivered: int
    slot_ms: int
    last_uniq: str | None


def timer_deliveries_after(store: StorePort, phys: int) -> TimerTail:
    """The final timer deliveries (a real topic, TIMER_OUT_MS and TIMER_DEQUEUE_MS set, no DELAY level)
    in the CommitLog from `phys` to its end. The wheel puts slot after slot, each in due order, so the
    last one says how far the master got: every earlier slot, and its slot up to that unit."""
    count, slot, uniq = 0, -1, None
    if phys < 0:
        return TimerTail(0, -1, None)
    for _p, rec in store.records_from(phys):
        if read_topic(rec) in (TIMER_TOPIC, SCHEDULE_QUARANTINE_TOPIC):
            continue
        props = parse_properties(read_properties_bytes(rec))
        out = props.get(_TIMER_OUT)
        if out is None or _DEQUEUED not in props or _DELAY in props or not out.lstrip("-").isdigit():
            continue
        count += 1
        if int(out) >= slot:
            slot, uniq = int(out), props.get(_UNIQ)
    return TimerTail(count, slot, uniq)


def timer_progress(clocks: TimerClocks, from_queue_offset: int = -1) -> TimerProgress:
    """The wheel's part of scheduler.progress.SchedulerProgress; the cursor history from the entry in
    effect at `from_queue_offset` (the slave's enqueue position) on."""
    slot, n, due, phys = clocks.slot_progress
    if slot != clocks.commit_read_ms:
        slot, n, due, phys = clocks.commit_read_ms, 0, -1, -1
    hist = list(clocks.cursor_history)
    if from_queue_offset >= 0 and hist:
        i = bisect.bisect_right([q for q, _ in hist], from_queue_offset) - 1
        hist = hist[max(i, 0):]
    return TimerProgress(clocks.commit_read_ms, clocks.queue_offset, clocks.read_cursor_ms, slot, n, due, phys,
                         hist)


class Follower:
    """A slave following its master's TimerProgress (`follow`, `follow_final`), and its wheel becoming
    the master's at a promotion (`take_over`)."""

    def __init__(self, config: TimerConfig, files: TimerFiles, clocks: TimerClocks, following: Following,
                 resume: SlotResume, enqueuer: Enqueuer) -> None:
        self.config = config
        self.files = files
        self.clocks = clocks
        self.following = following
        self.resume = resume
        self.enqueuer = enqueuer

    def follow(self, p: TimerProgress) -> None:
        """Adopt a master's TimerProgress on a slave: enqueue up to its queue offset; a unit already
        due is linked no earlier than the master's reader cursor (so its slot here is never earlier
        than on the master, and a new master skipping the slots below read_ms drops nothing)."""
        following, clocks = self.following, self.clocks
        if not following.active:
            return
        clocks.commit_read_ms = max(clocks.commit_read_ms, p.read_ms)
        following.master_read_ms = max(following.master_read_ms, p.read_ms)
        h = clocks.cursor_history
        for q, c in p.cursor_history:
            if h and q < h[-1][0]:
                continue
            if h and q == h[-1][0]:
                h[-1] = (q, max(c, h[-1][1]))
            else:
                h.append((q, c))
        clocks.slot_progress = SlotProgress(p.slot_ms, p.put_in_slot, p.last_due_ms, p.last_phys)
        if p.queue_offset > following.enqueue_limit:
            following.enqueue_limit = p.queue_offset
            self.enqueuer.wake.set()

    def follow_final(self, p: TimerProgress) -> None:
        self.follow(p)
        clocks = self.clocks
        prec = self.config.precision_ms
        read_ms = p.read_ms - p.read_ms % prec
        clocks.read_cursor_ms = clocks.commit_read_ms = read_ms
        clocks.slot_progress = SlotProgress(p.slot_ms, p.put_in_slot, p.last_due_ms, p.last_phys)
        self.resume.after_promotion = ResumeAfter(p.slot_ms, p.last_due_ms, p.last_phys) \
            if p.slot_ms == read_ms and p.put_in_slot > 0 else None
        self.resume.after_kill = None  # this node's own scheduleProgress is superseded by the master's record

    def take_over(self, p: TimerProgress | None, tail: TimerTail | None = None) -> None:
        """A promoted slave's wheel becomes the master's: from `p` (the last TimerProgress synced), else
        from this node's own checkpoint. The slot in progress skips the units already put. `tail`: the
        deliveries the replica holds after `p` was taken; the read clock moves to the last one's slot,
        which skips its units up to that one."""
        if p is not None:
            self.follow_final(p)
            if tail is not None and tail.delivered and tail.slot_ms >= self.clocks.commit_read_ms:
                self._skip_tail(tail)
        clocks, following = self.clocks, self.following
        # every replicated timer message into the wheel before the reader looks at a slot: the ones the
        # old master had enqueued at its last record where it linked them, later ones no earlier than
        # read_ms (never skipped: the old master may not have linked them)
        q_sync = p.queue_offset if p is not None else clocks.queue_offset
        h = clocks.cursor_history
        while h and h[-1][0] >= q_sync:
            h.pop()
        h.append((q_sync, clocks.read_cursor_ms))
        following.master_read_ms = clocks.commit_read_ms
        following.enqueue_limit = 1 << 62
        self.enqueuer.drain(1 << 16)
        following.active = False
        h.clear()
        h.append((clocks.queue_offset, clocks.read_cursor_ms))
        self.files.wheel.rebuild_occupancy(clocks.read_cursor_ms)

    def _skip_tail(self, tail: TimerTail) -> None:
        clocks, resume = self.clocks, self.resume
        after = resume.after_promotion
        if tail.slot_ms > clocks.commit_read_ms:  # the master finished every slot before it
            clocks.read_cursor_ms = clocks.commit_read_ms = tail.slot_ms
            clocks.slot_progress = SlotProgress(tail.slot_ms, 0, -1, -1)
            after = None
        resume.after_promotion = ResumeAfter(tail.slot_ms, after.due_ms if after is not None else -1,
                                             after.phys if after is not None else -1, tail.last_uniq)
