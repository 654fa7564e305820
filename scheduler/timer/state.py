"""What the timer's parts (scheduler.timer.enqueue's Enqueuer, reader's SlotReader, dequeue's Putter,
follow's Follower) share, as small named records each part is handed by the TimerMessageStore facade:

- `TimerFiles`: the four open files (set by `load()`, gone at `shutdown()`);
- `TimerClocks`: the wheel's positions (enqueued timer-queue offset, write clock, reader cursor and its
  history, committed read clock, the slot being put);
- `Following`: a slave's view of its master (scheduler.timer.follow);
- `SlotResume`: where the next load of a slot resumes (after a kill -9, after a promotion);
- `ReaderAlarm`: how the Enqueuer wakes the SlotReader when it links a unit into an earlier slot.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from scheduler.progress_file import ProgressFile
from scheduler.timer.checkpoint import TimerCheckpoint
from scheduler.timer.timerlog import TimerLog
from scheduler.timer.wheel import TimerWheel

CURSOR_HISTORY = 8192  # reader-cursor moves a master remembers for its slaves (about 2 h of busy slots)
NEVER = 1 << 62


def now_ms() -> int:
    return int(time.time() * 1000)


class SlotProgress(NamedTuple):
    """[cluster-ha] the slot being put: how many of its units (in due order) were put, and the due
    order key (exact ms, CommitLog offset) of the last one (seed 003's localIndex)."""

    slot_ms: int
    put_in_slot: int
    last_due_ms: int
    last_phys: int


class ResumePoint(NamedTuple):
    """The slot a kill -9 interrupted (scheduleProgress): units of it up to (done_due, done_pos) among
    those linked by `last_pos` were put; the reader skips them when it loads the slot."""

    slot_ms: int
    done_due: int
    done_pos: int
    last_pos: int


class ResumeAfter(NamedTuple):
    """A promoted slave: the old master had put slot `slot_ms`'s units up to (due_ms, phys) by its
    last adopted progress record, and after it up to the unit whose record has UNIQ_KEY `last_uniq`
    (its last delivery the replicated CommitLog holds; None: none)."""

    slot_ms: int
    due_ms: int
    phys: int
    last_uniq: str | None = None


class TimerFiles(NamedTuple):
    wheel: TimerWheel
    timerlog: TimerLog
    checkpoint: TimerCheckpoint
    progress_file: ProgressFile


@dataclass(slots=True)
class TimerClocks:
    """The wheel's positions. `queue_offset`: timer-topic messages below it are in the timerlog and the
    wheel (the Enqueuer moves it after each batch); `write_ms`: the enqueue clock (floor of now);
    `read_cursor_ms`: slots below it were handed to the Putter (the SlotReader moves it, `cursor_history`
    remembers where it was at which queue offset, for the slaves); `commit_read_ms`: slots below it were
    put (the Putter moves it; the checkpoint's lastReadTimeMs); `slot_progress`: the slot being put."""

    queue_offset: int = 0
    write_ms: int = 0
    read_cursor_ms: int = 0
    commit_read_ms: int = 0
    slot_progress: SlotProgress = SlotProgress(0, 0, -1, -1)
    # (timer queue offset enqueued, reader cursor ms) each time the cursor moved
    cursor_history: collections.deque[tuple[int, int]] = field(
        default_factory=lambda: collections.deque(maxlen=CURSOR_HISTORY))

    def move_cursor(self, ms: int) -> None:
        """The reader's cursor moves: units enqueued from now on are linked no earlier than `ms`."""
        self.read_cursor_ms = ms
        h = self.cursor_history
        if h and h[-1][0] == self.queue_offset:
            h[-1] = (self.queue_offset, ms)
        else:
            h.append((self.queue_offset, ms))


@dataclass(slots=True)
class Following:
    """[cluster-ha] a slave's wheel: `active` while following (enqueue only, never past `enqueue_limit`,
    the master's enqueued offset); `master_read_ms`: slots below it the master has put; `skipped`: units
    not linked here because the master had already put them."""

    active: bool = False
    enqueue_limit: int = 0
    master_read_ms: int = 0
    skipped: int = 0

    def master_slot(self, clocks: TimerClocks, slot: int, queue_offset: int) -> int | None:
        """The slot the master linked the unit at timer-queue offset `queue_offset` into (or a later one
        when the history no longer reaches back that far); None when the master has already put that
        slot (below its read position), so the unit is not linked here."""
        h = clocks.cursor_history
        if h:
            qs = [q for q, _ in h] if len(h) < 64 else None
            i = (bisect.bisect_right(qs, queue_offset) if qs is not None else
                 bisect.bisect_right(h, (queue_offset, NEVER))) - 1
            cursor = h[max(i, 0)][1]
            if slot < cursor:
                slot = cursor
        if slot < self.master_read_ms:
            return None
        return slot


@dataclass(slots=True)
class SlotResume:
    """Where the SlotReader's next load of a slot resumes: `after_kill` (recovery's scheduleProgress)
    and `after_promotion` (a promoted slave); each is used once, by the load of its slot."""

    after_kill: ResumePoint | None = None
    after_promotion: ResumeAfter | None = None


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def sleep_until(target_ms: int, alarm: ReaderAlarm | None = None) -> None:
    """Sleep until wall-clock ms `target_ms` (loop.call_at); with `alarm`, woken early by `alarm.wake`."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    if alarm is not None:
        alarm.fut = fut
    delay = max(0.0, (target_ms - now_ms()) / 1000.0)
    handle = loop.call_at(loop.time() + delay, _set_done, fut)
    try:
        await fut
    finally:
        handle.cancel()
        if alarm is not None:
            alarm.fut = None


class ReaderAlarm:
    """The SlotReader sleeps until `target` (its next non-empty slot); the Enqueuer linking a unit into an
    earlier slot wakes it."""

    __slots__ = ("fut", "target")

    def __init__(self) -> None:
        self.fut: asyncio.Future[None] | None = None
        self.target = NEVER

    def wake(self, slot: int) -> None:
        if slot < self.target:
            fut = self.fut
            if fut is not None and not fut.done():
                fut.set_result(None)
