"""RocketMQ's AllocateMappedFileService: the next segment of a MappedFileQueue made on a pool thread.

Reserving a segment's blocks (`posix_fallocate`) writes every page of it on tmpfs and on a file system
without fast fallocate: for a 1 GiB CommitLog segment, hundreds of milliseconds. `SegmentAhead` has it
made on a pool thread under a spare name, so the put that rolls over on the loop thread only renames
it. One segment is asked for at a time; one not ready when needed is abandoned (the caller makes it
inline) and removed once the pool has made it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from storage.mapped_file import MappedFile

log = structlog.get_logger(__name__)


class SegmentAhead:
    """The one segment of a queue being made ahead of need, and how often that worked."""

    __slots__ = ("_fut", "start", "used", "missed")

    def __init__(self) -> None:
        self._fut: Future[MappedFile] | None = None
        self.start = -1  # the start of the segment asked for (-1: none)
        self.used = 0  # segments that came ready when needed
        self.missed = 0  # ... that were not ready (or failed) when needed: made inline instead

    def request(self, pool: Executor, start: int, make: Callable[[], MappedFile]) -> None:
        """Have `make()` run on `pool` for the segment at `start` (a no-op if that one is asked for)."""
        if self.start == start:
            return
        self.abandon()
        self._fut = pool.submit(make)
        self.start = start

    def take(self, start: int, directory: str) -> MappedFile | None:
        """The segment made ahead if it is the one at `start` and ready; else None (what was asked for is
        abandoned). `directory` names the queue in the log line of a failure."""
        fut = self._fut
        if fut is None:
            return None
        if self.start != start or not fut.done() or fut.cancelled() or fut.exception() is not None:
            self.missed += 1
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                log.warning("mapped_file.allocate_ahead_failed", directory=directory, start=self.start,
                            error=str(fut.exception()))
            self.abandon()
            return None
        self._fut, self.start = None, -1
        self.used += 1
        return fut.result()

    def abandon(self) -> None:
        fut, self._fut, self.start = self._fut, None, -1
        if fut is not None and not fut.cancel():
            fut.add_done_callback(_destroy_made)  # runs now if done, else on the pool thread when it is

    def close(self) -> None:
        """Abandon what is asked for and wait for the pool: its file is gone when this returns."""
        fut, self._fut, self.start = self._fut, None, -1
        if fut is not None and not fut.cancel():
            _destroy_made(fut)


def _destroy_made(fut: Future[MappedFile]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().destroy()
