"""A delay level's place in its schedule queue (SCHEDULE_TOPIC_XXXX queue level-1) and its durable
progress (scheduler.progress_file's scheduleProgress record for the level): `begin_put` just before a
delivery put (the in-flight mark: the CommitLog end), `commit(offset)` right after it, in the same
loop step (the next schedule offset not put, and the CommitLog end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.progress_file import ProgressFile


class LevelCursor:
    __slots__ = ("level", "queue_id", "offset", "scan_offset", "claimed_offset", "_commitlog_end", "_begin",
                 "_commit")

    def __init__(self, level: int, commitlog_end: Callable[[], int]) -> None:
        self.level = level
        self.queue_id = level - 1
        self.offset = 0  # delivered: next schedule-queue offset whose delivery is not confirmed
        self.scan_offset = 0  # next unit to look at (> offset while async deliveries are in flight)
        self.claimed_offset = 0  # units below it were taken by the current pass (cancel: too late)
        self._commitlog_end = commitlog_end
        self._begin: Callable[[int], None] = _no_begin
        self._commit: Callable[[int, int], None] = _no_commit

    def bind(self, progress: ProgressFile) -> None:
        """Write this level's scheduleProgress record from now on (before: nothing is written)."""
        self._begin, self._commit = progress.level_writer(self.level)

    def begin_put(self) -> None:
        self._begin(self._commitlog_end())

    def commit(self, offset: int) -> None:
        """Every schedule offset below `offset` is in the CommitLog (delivered or set aside)."""
        self._commit(offset, self._commitlog_end())


def _no_begin(phys: int) -> None:
    pass


def _no_commit(offset: int, end: int) -> None:
    pass
