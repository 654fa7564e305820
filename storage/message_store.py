"""MessageStore: the storage facade (ARCHITECTURE.md). The scheduler and the server use only this.

Layout under `store_path`: `commitlog/`, `consumequeue/<topic>/<qid>/`, `index/<IndexFiles>`,
`checkpoint`, `abort` (present while running), `config/` (JSON tables, see topic_config etc.).

This class holds the lifecycle (load, flush tasks, retention timer, close), the dispatch listeners
(`add_dispatch_listener` / `remove_dispatch_listener`, a `storage.store_types.DispatchListener` each),
the ConsumeQueue table and the scheduler's small state files (`delay_offset_file`,
`config_file`); the rest are mixins over `storage.store_state.StoreState`: `store_put`
(put, put_async), `store_append` (put_batch), `store_reads`, `retention`, `replica`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar, overload

import structlog

from storage.allocate import AllocateAhead
from storage.checkpoint import Checkpoint, CheckpointFile
from storage.commitlog import CommitLog
from storage.config_store import ConfigFile
from storage.consume_queue import ConsumeQueue
from storage.faults import PutFaultInjector
from storage.flush import GroupCommitService, PeriodicFlusher, flush_segments_blocking
from storage.index import IndexService
from storage.index_file import IndexFile
from storage.meta_store import DelayOffsetFile
from storage.recovery import iter_records, recover
from storage.replica import ReplicaMixin
from storage.retention import RetentionMixin
from storage.store_append import BatchPutMixin
from storage.store_put import PutMixin
from storage.store_reads import ReadMixin
from storage.store_types import (
    BatchPutResult,
    DispatchListener,
    GetResult,
    GetStatus,
    MadeAhead,
    PutRequest,
    PutResult,
    PutStatus,
    QueryResult,
    StoreConfig,
    TagsCodeOf,
    tags_hash_code,
)
from storage.supervisor import Supervisor

__all__ = ["MessageStore", "StoreConfig", "PutRequest", "PutResult", "PutStatus", "BatchPutResult", "GetResult",
           "GetStatus", "QueryResult"]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

# (CommitLog max offset, ConsumeQueues, IndexService flush plan): what one logics flush covers
_LogicsSnapshot = tuple[int, list[ConsumeQueue], list[tuple[IndexFile, int, bool]]]


class MessageStore(PutMixin, ReadMixin, RetentionMixin, BatchPutMixin, ReplicaMixin):
    def __init__(self, config: StoreConfig, supervisor: Supervisor | None = None,
                 tags_code_of: TagsCodeOf = tags_hash_code) -> None:
        self.config = config
        # a rebuilt ConsumeQueue unit's tagsCode (recovery, replication): the composition root passes the
        # scheduler's rule for schedule records; storage itself knows only the TAGS hash
        self.tags_code_of = tags_code_of
        # the process's one failure policy for background work (storage.supervisor); the scheduler and
        # the server start their long-running tasks through it too
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        root = config.store_path
        # RocketMQ's AllocateMappedFileService: the next CommitLog segment, IndexFile and (`made_ahead`)
        # timerlog segment are made on this thread
        self._allocator = ThreadPoolExecutor(1, thread_name_prefix="allocate-mapped-file")
        self.commitlog = CommitLog(os.path.join(root, "commitlog"), config.mapped_file_size_commitlog,
                                   self._allocator)
        self.cq_root = os.path.join(root, "consumequeue")
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.index = IndexService(root, self.commitlog.read_record, config.max_hash_slot_num, config.max_index_num,
                                  self._allocator)
        self.checkpoint = CheckpointFile(root)
        self.faults = PutFaultInjector()
        self._listeners: list[DispatchListener] = []
        self._group_commit = GroupCommitService(self.commitlog)
        self._flushers: list[PeriodicFlusher] = []
        self._loaded = False
        self._closed = False
        self._clean_handle: asyncio.TimerHandle | None = None  # the retention timer (start())
        self._disk_checked_at = 0.0
        self._disk_ratio = 0.0
        self._space_logged_at = 0.0
        self.put_ok_total = 0
        self.put_failed_total = 0
        self.put_bytes_total = 0
        self.get_total = 0
        self.boot_ms = int(time.time() * 1000)
        # store-timestamp source (epoch ms); replaceable so tests can control store times
        self.now_ms: Callable[[], int] = lambda: int(time.time() * 1000)

    # ---- lifecycle ------------------------------------------------------------------------------
    def load(self) -> bool:
        """Open and recover the store (see storage.recovery); marks it running (abort file)."""
        os.makedirs(self.config.store_path, exist_ok=True)
        recover(self)
        self.commitlog.allocate_first()
        self.index.allocate_ahead()
        self.checkpoint.mark_running()
        self._loaded = True
        return True

    def start(self) -> None:
        """Start the flush tasks on the running loop."""
        cfg = self.config
        if cfg.sync_flush:
            self._group_commit.start(self.supervisor)
        else:
            self._flushers.append(PeriodicFlusher(
                "commitlog-flush", cfg.flush_interval_ms, lambda: None,
                lambda _: flush_segments_blocking(self.commitlog.queue)))
        self._flushers.append(PeriodicFlusher(
            "logics-flush", cfg.flush_consume_queue_interval_ms, self._prepare_logics_flush, self._logics_flush))
        self._start_cleaner()
        for f in self._flushers:
            f.start(self.supervisor)

    def _start_cleaner(self) -> None:
        loop = asyncio.get_running_loop()
        interval = max(self.config.clean_resource_interval_ms, 1) / 1000.0

        def tick() -> None:
            if self._closed:
                return
            try:
                self.clean_expired()
            except Exception as e:
                self.supervisor.failed("storage-retention", e)
            self._clean_handle = loop.call_later(interval, tick)

        self._clean_handle = loop.call_later(interval, tick)

    def _prepare_logics_flush(self) -> _LogicsSnapshot:
        """On the loop thread: snapshot what the flush will cover (for the checkpoint)."""
        pending_index = self.index.take_pending()
        return (self.commitlog.max_offset, list(self.consume_queues.values()), pending_index)

    def _logics_flush(self, snapshot: _LogicsSnapshot) -> None:
        cl_max, cqs, pending_index = snapshot
        for cq in cqs:
            flush_segments_blocking(cq.files)
        if pending_index:
            self.index.write(pending_index)
        self.checkpoint.write(Checkpoint(self.commitlog.flushed_offset, cl_max, cl_max))

    async def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker, close the files."""
        if self._closed:
            return
        self._closed = True
        if self._clean_handle is not None:
            self._clean_handle.cancel()
        for f in self._flushers:
            await f.stop()
        await self._group_commit.stop()
        self.close()

    def close(self) -> None:
        """Synchronous clean close (also used when no loop runs)."""
        self._closed = True
        if not self._loaded:
            return
        self.commitlog.flush()
        for cq in self.consume_queues.values():
            cq.flush()
        self.index.flush()
        cl_max = self.commitlog.max_offset
        try:
            self.checkpoint.write(Checkpoint(self.commitlog.flushed_offset, cl_max, cl_max))
            self.checkpoint.mark_clean()
        except OSError as e:  # a full disk: the abort marker stays, so the next start scans (nothing lost)
            log.error("store.checkpoint_write_failed", error=str(e), commitlog_max_offset=cl_max)
        for cq in self.consume_queues.values():
            cq.close()
        self.index.close()
        self.commitlog.close()
        self._allocator.shutdown()
        self._loaded = False
        log.info("store.closed", commitlog_max_offset=cl_max)

    def made_ahead(self, what: str, destroy: Callable[[_T], None]) -> MadeAhead[_T]:
        """The next file of a log of the caller's own (the timerlog) made ahead of need on the store's
        allocate pool, as the CommitLog's segments are (storage.store_types.MadeAhead). `what` names the
        log in log lines; `destroy` closes and removes a made file nobody took."""
        return AllocateAhead(self._allocator, destroy, what)

    # ---- listeners ------------------------------------------------------------------------------
    def add_dispatch_listener(self, fn: DispatchListener) -> None:
        self._listeners.append(fn)

    def remove_dispatch_listener(self, fn: DispatchListener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    # ---- small state files (the scheduler's, under <store>/config) ------------------------------
    def delay_offset_file(self, path: str) -> DelayOffsetFile:
        """`delayOffset.json` at `path` (`read()` / `write(table)`: RocketMQ's shape, atomic, `.bak` fallback):
        the delay levels' progress where the composition root passes no MetaStore-backed one."""
        return DelayOffsetFile(path)

    def config_file(self, path: str) -> ConfigFile:
        """A small JSON state file at `path` (`read()` / `write(obj)`: atomic, `.bak` fallback), e.g. the
        scheduler's `delayCancel.json`."""
        return ConfigFile(path)

    # ---- consume queues -------------------------------------------------------------------------
    @overload
    def consume_queue(self, topic: str, queue_id: int, create: Literal[True]) -> ConsumeQueue: ...

    @overload
    def consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...

    def consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        key = (topic, queue_id)
        cq = self.consume_queues.get(key)
        if cq is None and create:
            cq = ConsumeQueue(self.cq_root, topic, queue_id, self.config.mapped_file_size_consume_queue)
            self.consume_queues[key] = cq
        return cq

    def delete_consume_queues(self, topic: str) -> int:
        """Forget a deleted topic's ConsumeQueues and remove their files (RocketMQ's cleanUnusedTopic).
        Its records stay in the CommitLog until retention. Returns the number of queues removed."""
        keys = [k for k in self.consume_queues if k[0] == topic]
        for key in keys:
            cq = self.consume_queues.pop(key)
            self.queue_offsets.pop(key, None)
            try:
                cq.close()
            except BufferError:  # a reader still holds a view of its map: unmapped when that goes
                pass
        path = os.path.join(self.cq_root, topic)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        return len(keys)

    @property
    def flush_count(self) -> int:
        return self._group_commit.flush_count

    # ---- info -----------------------------------------------------------------------------------
    def commitlog_min_offset(self) -> int:
        return self.commitlog.min_offset

    def commitlog_max_offset(self) -> int:
        return self.commitlog.max_offset

    def records_from(self, phys_offset: int) -> Iterator[tuple[int, memoryview]]:
        """(phys, record view) of every CommitLog record from `phys_offset` to the end (segment-end
        blanks skipped): the scheduler's check of a delivery put in flight when the process died."""
        for phys, _total, _topic, _props, view in iter_records(self.commitlog, phys_offset,
                                                               self.commitlog.max_offset):
            yield phys, view

    def runtime_info(self) -> dict[str, str]:
        return {
            "commitLogMinOffset": str(self.commitlog.min_offset),
            "commitLogMaxOffset": str(self.commitlog.max_offset),
            "commitLogDiskRatio": f"{self.disk_used_ratio():.4f}",
            "consumeQueueCount": str(len(self.consume_queues)),
            "putMessageTimesTotal": str(self.put_ok_total),
            "putMessageFailedTimes": str(self.put_failed_total),
            "putMessageSizeTotal": str(self.put_bytes_total),
            "getMessageTimesTotal": str(self.get_total),
            "flushDiskType": str(self.config.flush_disk_type),
            "groupCommitFlushTimes": str(self._group_commit.flush_count),
            "bootTimestamp": str(self.boot_ms),
        }
