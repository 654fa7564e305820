"""RocketMQ's AllocateMappedFileService: the next file of a log made on a pool thread.

Reserving a file's blocks (`posix_fallocate`) writes every page of it on tmpfs and on a file system
without fast fallocate: for a 1 GiB CommitLog segment, hundreds of milliseconds; a 100 MiB timerlog
segment or a 20 MiB IndexFile, tens. `AllocateAhead` has it made on a pool thread under a spare name,
so the write that rolls over on the loop thread only renames it. One file is asked for at a time; one
not ready when needed is abandoned (the caller makes it inline) and removed once the pool has made it.

Users: the CommitLog's `MappedFileQueue` (`allocate_ahead`), the IndexService, and the timerlog through
the facade's declared service (`MessageStore.made_ahead`, typed `storage.store_types.MadeAhead`). Each
names its files `<name>.ahead.spare` (AHEAD_SUFFIX) and removes leftovers of a killed run at load.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Generic, TypeVar

import structlog

from storage.store_types import AHEAD_SUFFIX as AHEAD_SUFFIX

log = structlog.get_logger(__name__)

SPARE_SUFFIX = ".spare"  # ends AHEAD_SUFFIX too (`MappedFileQueue.load` removes both kinds)

T = TypeVar("T")


class AllocateAhead(Generic[T]):
    """The one file of a kind being made ahead of need on `pool`, and how often that worked.

    `destroy(made)` closes and removes a made file nobody took. `what` names the log in the log line
    of a failure. With `pool` None nothing is asked for (every file is made inline)."""

    __slots__ = ("pool", "_destroy", "what", "_fut", "start", "used", "missed")

    def __init__(self, pool: Executor | None, destroy: Callable[[T], None], what: str) -> None:
        self.pool = pool
        self._destroy = destroy
        self.what = what
        self._fut: Future[T] | None = None
        self.start = -1  # the key (start offset) of the file asked for (-1: none)
        self.used = 0  # files that came ready when needed
        self.missed = 0  # ... that were not ready (or failed) when needed: made inline instead

    def request(self, start: int, make: Callable[[], T]) -> None:
        """Have `make()` run on the pool for the file keyed `start` (a no-op if that one is asked for and
        has not failed: a failure, a full disk, is asked again, so the file comes once space returns)."""
        if self.pool is None:
            return
        if self.start == start and not self._failed():
            return
        self.abandon()
        try:
            self._fut = self.pool.submit(make)
        except RuntimeError:  # the pool is shut down (the store closed first): made inline if ever needed
            return
        self.start = start

    def _failed(self) -> bool:
        fut = self._fut
        return fut is not None and fut.done() and (fut.cancelled() or fut.exception() is not None)

    def ready(self, start: int) -> bool:
        """The file keyed `start` is made (its blocks reserved) and waiting to be taken."""
        fut = self._fut
        return self.start == start and fut is not None and fut.done() and not self._failed()

    def take(self, start: int) -> T | None:
        """The file made ahead if it is the one keyed `start` and ready; else None (what was asked for is
        abandoned, and counted as missed)."""
        fut = self._fut
        if fut is None:
            return None
        if self.start != start or not fut.done() or fut.cancelled() or fut.exception() is not None:
            self.missed += 1
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                log.warning("mapped_file.allocate_ahead_failed", directory=self.what, start=self.start,
                            error=str(fut.exception()))
            self.abandon()
            return None
        self._fut, self.start = None, -1
        self.used += 1
        return fut.result()

    def abandon(self) -> None:
        fut, self._fut, self.start = self._fut, None, -1
        if fut is not None and not fut.cancel():
            fut.add_done_callback(self._destroy_made)  # runs now if done, else on the pool thread when it is

    def close(self) -> None:
        """Abandon what is asked for and wait for the pool: its file is gone when this returns."""
        fut, self._fut, self.start = self._fut, None, -1
        if fut is not None and not fut.cancel():
            self._destroy_made(fut)

    def _destroy_made(self, fut: Future[T]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self._destroy(fut.result())
