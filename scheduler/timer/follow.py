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

from scheduler.progress import TimerProgress
from scheduler.timer.config import TimerConfig
from scheduler.timer.enqueue import Enqueuer
from scheduler.timer.state import Following, ResumeAfter, SlotProgress, SlotResume, TimerClocks, TimerFiles


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

    def take_over(self, p: TimerProgress | None) -> None:
        """A promoted slave's wheel becomes the master's: from `p` (the last TimerProgress synced), else
        from this node's own checkpoint. The slot in progress skips the units already put."""
        if p is not None:
            self.follow_final(p)
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
