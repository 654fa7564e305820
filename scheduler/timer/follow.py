"""The wheel on a slave and at a failover ([cluster-ha]): the reader cursor's history a master hands its
slaves (scheduler.progress.TimerProgress), a slave linking each replicated unit into exactly the master's
slot, and a promoted slave taking over where the old master's delivery got.

A master remembers where its reader cursor was each time it moved (`cursor_history`: (timer queue
offset enqueued, cursor ms)); a unit at timer queue offset x was linked no earlier than the cursor of the
last entry at or below x. A slave enqueues only up to the master's enqueued offset (`follow`), drops
the units of slots the master has already put and links the others where the master did
(`_master_slot`). `_take_over` (from TimerMessageStore.promote) makes the slave's wheel the master's.
"""

from __future__ import annotations

import bisect

from scheduler.progress import TimerProgress
from scheduler.timer.state import ResumeAfter, SlotProgress, TimerState


class FollowMixin(TimerState):
    def _move_cursor(self, ms: int) -> None:
        """The reader's cursor moves: units enqueued from now on are linked no earlier than `ms`."""
        self.read_cursor_ms = ms
        h = self.cursor_history
        if h and h[-1][0] == self.commit_queue_offset:
            h[-1] = (self.commit_queue_offset, ms)
        else:
            h.append((self.commit_queue_offset, ms))

    def progress(self, from_queue_offset: int = -1) -> TimerProgress:
        """The wheel's part of scheduler.progress.SchedulerProgress; the cursor history from the entry
        in effect at `from_queue_offset` (the slave's enqueue position) on."""
        slot, n, due, phys = self.slot_progress
        if slot != self.commit_read_ms:
            slot, n, due, phys = self.commit_read_ms, 0, -1, -1
        hist = list(self.cursor_history)
        if from_queue_offset >= 0 and hist:
            i = bisect.bisect_right([q for q, _ in hist], from_queue_offset) - 1
            hist = hist[max(i, 0):]
        return TimerProgress(self.commit_read_ms, self.commit_queue_offset, self.read_cursor_ms, slot, n, due, phys,
                             hist)

    def _master_slot(self, slot: int, queue_offset: int) -> int | None:
        """A slave: the slot the master linked the unit at timer-queue offset `queue_offset` into (or a
        later one when the history no longer reaches back that far); None when the master has already
        put that slot (below its read position), so the unit is not linked here."""
        h = self.cursor_history
        if h:
            qs = [q for q, _ in h] if len(h) < 64 else None
            i = (bisect.bisect_right(qs, queue_offset) if qs is not None else
                 bisect.bisect_right(h, (queue_offset, 1 << 62))) - 1
            cursor = h[max(i, 0)][1]
            if slot < cursor:
                slot = cursor
        if slot < self._master_read_ms:
            return None
        return slot

    def follow(self, p: TimerProgress) -> None:
        """Adopt a master's TimerProgress on a slave: enqueue up to its queue offset; a unit already
        due is linked no earlier than the master's reader cursor (so its slot here is never earlier
        than on the master, and a new master skipping the slots below read_ms drops nothing)."""
        if not self._following:
            return
        self.commit_read_ms = max(self.commit_read_ms, p.read_ms)
        self._master_read_ms = max(self._master_read_ms, p.read_ms)
        h = self.cursor_history
        for q, c in p.cursor_history:
            if h and q < h[-1][0]:
                continue
            if h and q == h[-1][0]:
                h[-1] = (q, max(c, h[-1][1]))
            else:
                h.append((q, c))
        self.slot_progress = SlotProgress(p.slot_ms, p.put_in_slot, p.last_due_ms, p.last_phys)
        if p.queue_offset > self._enqueue_limit:
            self._enqueue_limit = p.queue_offset
            if self._enqueue_wake is not None:
                self._enqueue_wake.set()

    def follow_final(self, p: TimerProgress) -> None:
        self.follow(p)
        prec = self.config.precision_ms
        read_ms = p.read_ms - p.read_ms % prec
        self.read_cursor_ms = self.commit_read_ms = read_ms
        self.slot_progress = SlotProgress(p.slot_ms, p.put_in_slot, p.last_due_ms, p.last_phys)
        self._resume_after = ResumeAfter(p.slot_ms, p.last_due_ms, p.last_phys) if p.slot_ms == read_ms and \
            p.put_in_slot > 0 else None
        self._resume = None  # this node's own scheduleProgress is superseded by the master's record

    def _take_over(self, p: TimerProgress | None) -> None:
        """A promoted slave's wheel becomes the master's: from `p` (the last TimerProgress synced), else
        from this node's own checkpoint. The slot in progress skips the units already put."""
        if p is not None:
            self.follow_final(p)
        # every replicated timer message into the wheel before the reader looks at a slot: the ones the
        # old master had enqueued at its last record where it linked them, later ones no earlier than
        # read_ms (never skipped: the old master may not have linked them)
        q_sync = p.queue_offset if p is not None else self.commit_queue_offset
        h = self.cursor_history
        while h and h[-1][0] >= q_sync:
            h.pop()
        h.append((q_sync, self.read_cursor_ms))
        self._master_read_ms = self.commit_read_ms
        self._enqueue_limit = 1 << 62
        while self._enqueue_batch(1 << 16):
            pass
        self._following = False
        self.cursor_history.clear()
        self.cursor_history.append((self.commit_queue_offset, self.read_cursor_ms))
        self.files().wheel.rebuild_occupancy(self.read_cursor_ms)
