"""What the TimerMessageStore's stages (enqueue, reader, putter, follow) share: the service's state and
the few methods one stage calls on another, declared once so each mixin is type-checked against the
real attribute types (as storage.store_state does for the MessageStore). Annotations only, apart from
the small named records below and `files()`: `TimerMessageStore.__init__` assigns every attribute
(tests/scheduler/test_declared_state.py checks it).

The files (`wheel`, `timerlog`, `checkpoint`, `progress_file`) are None until `load()`. The stages run
only between `load()` and `shutdown()` and read them through `files()`: one named record, set by
`load()` and cleared by `shutdown()`, so a stage that runs outside that window fails with one clear error.
"""

from __future__ import annotations

import asyncio
import collections
import random
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from codec.buffers import BytesLike
    from scheduler.events import PutObserver
    from scheduler.progress_file import ProgressFile
    from scheduler.quarantine import Quarantine
    from scheduler.store_port import StorePort
    from scheduler.timer.checkpoint import TimerCheckpoint
    from scheduler.timer.config import TimerConfig
    from scheduler.timer.metrics import TimerMetrics
    from scheduler.timer.reader import SlotChunk
    from scheduler.timer.timerlog import TimerLog
    from scheduler.timer.wheel import TimerWheel
    from storage.supervisor import SupervisedTask


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
    """A promoted slave: the old master had put slot `slot_ms`'s units up to (due_ms, phys)."""

    slot_ms: int
    due_ms: int
    phys: int


class TimerFiles(NamedTuple):
    wheel: TimerWheel
    timerlog: TimerLog
    checkpoint: TimerCheckpoint
    progress_file: ProgressFile


class TimerState:
    store: StorePort
    config: TimerConfig
    on_put: PutObserver
    rng: random.Random
    metrics: TimerMetrics
    quarantine: Quarantine
    roll_window_slots: int
    wheel: TimerWheel | None
    timerlog: TimerLog | None
    checkpoint: TimerCheckpoint | None
    progress_file: ProgressFile | None
    _files: TimerFiles | None  # the four above while loaded
    curr_queue_offset: int
    commit_queue_offset: int
    curr_write_ms: int
    read_cursor_ms: int
    commit_read_ms: int
    slot_progress: SlotProgress
    cursor_history: collections.deque[tuple[int, int]]  # (timer queue offset, reader cursor ms)
    follower_skipped: int
    _loaded: bool
    _running: bool
    _tasks: list[SupervisedTask]
    _clean_handle: asyncio.TimerHandle | None
    _enqueue_wake: asyncio.Event | None
    _reader_wake: asyncio.Future[None] | None
    _reader_target: int
    # what the putter takes from the reader: a chunk of a slot's units, or the slot's end (the slot is
    # fully queued: the read clock may move there)
    _put_queue: asyncio.Queue[SlotChunk | int] | None
    _put_current: SlotChunk | int | None
    _offset_waiters: list[tuple[int, asyncio.Future[None]]]
    _resume: ResumePoint | None
    _done_key: tuple[int, int]
    _done_key_slot: int
    _resume_after: ResumeAfter | None
    _following: bool
    _enqueue_limit: int
    _master_read_ms: int

    def files(self) -> TimerFiles:
        """The open files; only the stages call it, and they run only between load() and shutdown()."""
        f = self._files
        if f is None:
            raise RuntimeError("the timer store is not loaded")
        return f

    if TYPE_CHECKING:  # defined by one stage (or the service), called by another
        def _move_cursor(self, ms: int) -> None: ...

        def _master_slot(self, slot: int, queue_offset: int) -> int | None: ...

        def _notify_enqueued(self) -> None: ...

        def _wake_reader(self, slot: int) -> None: ...

        def _enqueue_batch(self, max_units: int) -> int: ...

        async def _sleep_until(self, target_ms: int, wakeable: bool) -> None: ...

        def msg_id(self, rec: BytesLike, phys_offset: int) -> str: ...

        def msg_id_prefix(self, rec: BytesLike) -> str: ...
