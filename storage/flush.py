"""Flushing: SYNC_FLUSH group commit and the periodic flusher (ASYNC_FLUSH CommitLog, ConsumeQueues,
index, checkpoint).

Group commit: `put` registers (end offset, future) and sets an event; one task wakes on it, snapshots
the dirty segments, runs fdatasync for all of them in an executor thread, then resolves every waiter
whose offset is covered. Puts that arrive during a flush are covered by the next one, so N concurrent
puts cost far fewer than N flushes.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque

import structlog

log = structlog.get_logger(__name__)


def _fdatasync_all(fds: list[int]) -> None:
    for fd in fds:
        os.fdatasync(fd)


def flush_segments_blocking(mfq) -> None:
    """Flush a MappedFileQueue from any thread (positions are snapshotted first)."""
    plan = [(mf, mf.wrote_pos) for mf in mfq.files if mf.flushed_pos < mf.wrote_pos and mf.fd >= 0]
    for mf, target in plan:
        os.fdatasync(mf.fd)
        mf.flushed_pos = max(mf.flushed_pos, target)
    mfq.drop_flushed_pages()


class GroupCommitService:
    def __init__(self, commitlog) -> None:
        self.commitlog = commitlog
        self.flush_count = 0
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()
        self._wake: asyncio.Event | None = None
        self._task = None  # storage.supervisor.SupervisedTask

    def start(self, supervisor) -> None:
        self._wake = asyncio.Event()
        self._task = supervisor.spawn("storage-group-commit", self._run)

    def request(self, end_offset: int) -> asyncio.Future | None:
        """A future resolved (True) once everything below `end_offset` is durable. Without a running
        flush task (no event loop), flushes inline and returns None."""
        if self._task is None:
            self.commitlog.flush()
            self.flush_count += 1
            return None
        loop = self._task.task.get_loop()
        fut = loop.create_future()
        if end_offset <= self.commitlog.flushed_offset:
            fut.set_result(True)
            return fut
        self._waiters.append((end_offset, fut))
        self._wake.set()
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._waiters:
                continue
            plan = [(mf, mf.wrote_pos) for mf in self.commitlog.queue.files if mf.flushed_pos < mf.wrote_pos]
            try:
                if plan:
                    await loop.run_in_executor(None, _fdatasync_all, [mf.fd for mf, _ in plan])
            except OSError as e:
                log.error("flush.group_commit_failed", error=str(e))
                continue  # waiters time out as FLUSH_DISK_TIMEOUT
            for mf, target in plan:
                mf.flushed_pos = max(mf.flushed_pos, target)
            self.commitlog.queue.drop_flushed_pages()
            self.flush_count += 1
            flushed = self.commitlog.flushed_offset
            waiters = self._waiters
            while waiters and waiters[0][0] <= flushed:
                _, fut = waiters.popleft()
                if not fut.done():
                    fut.set_result(True)
            if waiters:
                self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            await self._task.stop()
            self._task = None
        self.commitlog.flush()
        while self._waiters:
            _, fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(True)


class PeriodicFlusher:
    """A timer task: every `interval_ms` run `job()` (blocking, in an executor thread)."""

    def __init__(self, name: str, interval_ms: int, prepare, job) -> None:
        self.name = name
        self.interval = max(interval_ms, 1) / 1000.0
        self.prepare = prepare  # runs on the loop thread, returns the argument for job
        self.job = job
        self._task = None  # storage.supervisor.SupervisedTask
        self._job: asyncio.Future | None = None
        self.failures = 0  # consecutive failed runs (a full disk)
        self._logged_at = -1e9

    def start(self, supervisor) -> None:
        self._task = supervisor.spawn(f"storage-{self.name}", self._run)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            try:
                arg = self.prepare()
                self._job = loop.run_in_executor(None, self.job, arg)
                await asyncio.shield(self._job)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep flushing; a failure is logged (once a minute while it lasts)
                self.failures += 1
                now = loop.time()
                if now - self._logged_at >= 60.0:
                    self._logged_at = now
                    log.error("flush.periodic_failed", flusher=self.name, error=repr(e), failures=self.failures)
                continue
            if self.failures:
                log.info("flush.periodic_recovered", flusher=self.name, failures=self.failures)
                self.failures = 0
                self._logged_at = -1e9

    async def stop(self) -> None:
        """Cancel the timer and wait for a job already running in its thread to finish."""
        if self._task is not None:
            await self._task.stop()
            self._task = None
        if self._job is not None:
            try:
                await self._job
            except Exception as e:
                log.error("flush.periodic_failed", flusher=self.name, error=repr(e))
            self._job = None
