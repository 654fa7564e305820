"""MessageStore: the storage facade (ARCHITECTURE.md). The server uses only this; the scheduler sees it as
`scheduler.store_port.StorePort`.

Layout under `store_path`: `commitlog/`, `consumequeue/<topic>/<qid>/`, `index/<IndexFiles>`,
`checkpoint`, `abort` (present while running), `config/` (JSON tables, see topic_config etc.).

The facade is composed of parts with one job each, made in `__init__` and passed what they need:

- the files: `commitlog` (CommitLog), `queues` (storage.consume_queue_table.ConsumeQueueTable: every
  ConsumeQueue and its next offset), `index` (IndexService), `checkpoint`;
- what the parts share: `run` (storage.store_status.RunState: running, read-only) and `counters`
  (StoreCounters), the dispatch listeners behind the dispatch gate (storage.dispatch: DispatchListeners,
  DispatchGate, whose limit the composition sets with `set_dispatch_limit`), the disk check
  (storage.disk_space.DiskSpace), the fault injector;
- `put_path` (storage.store_put.PutPath: put, put_async), `batch` (storage.store_append.BatchAppend:
  put_batch over the put path), `reads` (storage.store_reads.StoreReads), `retention`
  (storage.retention.Retention), `replica` (storage.replica.ReplicaAppender).

The facade itself holds the lifecycle (load, flush tasks, retention timer, close) and forwards each public
method to its part.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Container, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal, TypeVar, overload

import structlog

from codec.buffers import BytesLike
from storage.allocate import AllocateAhead
from storage.checkpoint import Checkpoint, CheckpointFile
from storage.commitlog import CommitLog
from storage.config_store import ConfigFile
from storage.consume_queue import ConsumeQueue
from storage.consume_queue_table import ConsumeQueueTable
from storage.disk_space import DiskSpace
from storage.dispatch import DispatchGate, DispatchListeners
from storage.faults import PutFaultInjector
from storage.flush import GroupCommitService, PeriodicFlusher, flush_segments_blocking
from storage.index import IndexService
from storage.index_file import IndexFile
from storage.meta_store import DelayOffsetFile
from storage.recovery import iter_records, recover
from storage.replica import DestinationListener, ReplicaAppender
from storage.retention import Retention
from storage.store_append import BatchAppend
from storage.store_put import PutPath
from storage.store_reads import StoreReads
from storage.store_status import RunState, StoreCounters
from storage.store_types import (
    BatchPutResult,
    DispatchListener,
    GetResult,
    GetStatus,
    MadeAhead,
    PutBatch,
    PutRequest,
    PutResult,
    PutStatus,
    QueryResult,
    QueueFilesListener,
    StoreConfig,
    TagsCodeOf,
    tags_hash_code,
)
from storage.supervisor import Supervisor

if TYPE_CHECKING:
    from codec.record import MessageRecord

__all__ = ["MessageStore", "StoreConfig", "PutRequest", "PutResult", "PutStatus", "BatchPutResult", "GetResult",
           "GetStatus", "QueryResult"]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

# (CommitLog max offset, ConsumeQueues, IndexService flush plan): what one logics flush covers
_LogicsSnapshot = tuple[int, list[ConsumeQueue], list[tuple[IndexFile, int, bool]]]


class MessageStore:
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
        # the files
        self.commitlog = CommitLog(os.path.join(root, "commitlog"), config.mapped_file_size_commitlog,
                                   self._allocator)
        self.queues = ConsumeQueueTable(os.path.join(root, "consumequeue"), config.mapped_file_size_consume_queue)
        self.index = IndexService(root, self.commitlog.read_record, config.max_hash_slot_num, config.max_index_num,
                                  self._allocator)
        self.checkpoint = CheckpointFile(root)
        # what the parts share
        self.run = RunState()
        self.counters = StoreCounters()
        self.listeners = DispatchListeners()
        self.gate = DispatchGate(self.listeners)  # the dispatch limit (set_dispatch_limit)
        self.faults = PutFaultInjector()
        self.disk = DiskSpace(config)
        self._group_commit = GroupCommitService(self.commitlog)
        # the parts
        self.put_path = PutPath(config, self.commitlog, self.queues, self.index, self._group_commit, self.gate,
                                self.faults, self.disk, self.run, self.counters,
                                lambda: int(time.time() * 1000))
        self.batch = BatchAppend(self.put_path)
        self.reads = StoreReads(config, self.commitlog, self.queues, self.index, self.counters, self.gate)
        self.retention = Retention(config, self.commitlog, self.queues, self.index, self.run)
        self.replica = ReplicaAppender(self.commitlog, self.queues, self.index, self.gate, self.run,
                                       self.counters, tags_code_of)
        self._flushers: list[PeriodicFlusher] = []
        self._clean_handle: asyncio.TimerHandle | None = None  # the retention timer (start())
        self.boot_ms = int(time.time() * 1000)

    # ---- lifecycle ------------------------------------------------------------------------------
    def load(self) -> bool:
        """Open and recover the store (see storage.recovery); marks it running (abort file)."""
        os.makedirs(self.config.store_path, exist_ok=True)
        recover(self.commitlog, self.queues, self.checkpoint, self.index, self.tags_code_of)
        self.commitlog.allocate_first()
        self.index.allocate_ahead()
        self.checkpoint.mark_running()
        self.run.loaded = True
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
            if self.run.closed:
                return
            try:
                self.retention.clean_expired()
            except Exception as e:
                self.supervisor.failed("storage-retention", e)
            self._clean_handle = loop.call_later(interval, tick)

        self._clean_handle = loop.call_later(interval, tick)

    def _prepare_logics_flush(self) -> _LogicsSnapshot:
        """On the loop thread: snapshot what the flush will cover (for the checkpoint)."""
        pending_index = self.index.take_pending()
        return (self.commitlog.max_offset, list(self.queues.queues.values()), pending_index)

    def _logics_flush(self, snapshot: _LogicsSnapshot) -> None:
        cl_max, cqs, pending_index = snapshot
        for cq in cqs:
            flush_segments_blocking(cq.files)
        if pending_index:
            self.index.write(pending_index)
        self.checkpoint.write(Checkpoint(self.commitlog.flushed_offset, cl_max, cl_max))

    async def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker, close the files."""
        if self.run.closed:
            return
        self.run.closed = True
        if self._clean_handle is not None:
            self._clean_handle.cancel()
        for f in self._flushers:
            await f.stop()
        await self._group_commit.stop()
        self.close()

    def close(self) -> None:
        """Synchronous clean close (also used when no loop runs)."""
        self.run.closed = True
        if not self.run.loaded:
            return
        self.commitlog.flush()
        for cq in self.queues.queues.values():
            cq.flush()
        self.index.flush()
        cl_max = self.commitlog.max_offset
        try:
            self.checkpoint.write(Checkpoint(self.commitlog.flushed_offset, cl_max, cl_max))
            self.checkpoint.mark_clean()
        except OSError as e:  # a full disk: the abort marker stays, so the next start scans (nothing lost)
            log.error("store.checkpoint_write_failed", error=str(e), commitlog_max_offset=cl_max)
        for cq in self.queues.queues.values():
            cq.close()
        self.index.close()
        self.commitlog.close()
        self._allocator.shutdown()
        self.run.loaded = False
        log.info("store.closed", commitlog_max_offset=cl_max)

    def made_ahead(self, what: str, destroy: Callable[[_T], None]) -> MadeAhead[_T]:
        """The next file of a log of the caller's own (the timerlog) made ahead of need on the store's
        allocate pool, as the CommitLog's segments are (storage.store_types.MadeAhead). `what` names the
        log in log lines; `destroy` closes and removes a made file nobody took."""
        return AllocateAhead(self._allocator, destroy, what)

    # ---- listeners ------------------------------------------------------------------------------
    def add_dispatch_listener(self, fn: DispatchListener, topic: str | None = None) -> None:
        """`fn` is called once per (topic, queue) a write reached (storage.dispatch); with `topic`, for that
        topic's queues only (a put to another topic costs it nothing)."""
        self.listeners.add(fn, topic)

    def remove_dispatch_listener(self, fn: DispatchListener) -> None:
        self.listeners.remove(fn)

    def set_dispatch_limit(self, limit: int | None) -> None:
        """Dispatch (ConsumeQueue reads, index queries, the dispatch listeners) up to CommitLog offset `limit`
        from now on (None: no limit), releasing the held writes it covers (storage.dispatch.DispatchGate).
        RocketMQ 5's confirmOffset in controller mode; the store only applies it."""
        self.gate.set_limit(limit, self.queues.offsets)

    @property
    def dispatch_limit(self) -> int | None:
        return self.gate.limit

    def add_queue_files_listener(self, listener: QueueFilesListener) -> None:
        """`listener` follows the ConsumeQueues' retention and topic deletion (storage.store_types)."""
        self.retention.queue_listeners.append(listener)

    # ---- puts (storage.store_put, storage.store_append) -----------------------------------------
    def put(self, requests: list[PutRequest]) -> list[PutResult]:
        return self.put_path.put(requests)

    async def put_async(self, requests: list[PutRequest]) -> list[PutResult]:
        return await self.put_path.put_async(requests)

    def put_batch(self, batch: PutBatch) -> BatchPutResult:
        return self.batch.put_batch(batch)

    @property
    def now_ms(self) -> Callable[[], int]:
        """The store-timestamp source (epoch ms); replaceable so tests can control store times."""
        return self.put_path.now_ms

    @now_ms.setter
    def now_ms(self, fn: Callable[[], int]) -> None:
        self.put_path.now_ms = fn

    def disk_used_ratio(self) -> float:
        return self.disk.used_ratio()

    # ---- reads (storage.store_reads) ------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_num: int,
                     tag_codes: Container[int] | None = None,
                     record_filter: Callable[[memoryview], bool] | None = None,
                     unit_filter: Callable[[int], bool] | None = None,
                     record_literal: bytes | None = None,
                     unit_flags: Callable[[int, int], bytes] | None = None) -> GetResult:
        return self.reads.get_messages(topic, queue_id, offset, max_num, tag_codes, record_filter, unit_filter,
                                       record_literal, unit_flags)

    def read_units(self, topic: str, queue_id: int, offset: int, max_units: int) -> memoryview | None:
        return self.reads.read_units(topic, queue_id, offset, max_units)

    def read_record(self, phys_offset: int, size: int | None = None) -> memoryview | None:
        return self.commitlog.read_record(phys_offset, size)

    def read_records(self, spans: Iterable[tuple[int, int]]) -> list[memoryview | None]:
        return self.commitlog.read_records(spans)

    def lookup_message_by_offset(self, phys_offset: int) -> MessageRecord | None:
        return self.reads.lookup_message_by_offset(phys_offset)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.reads.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.reads.max_offset(topic, queue_id)

    def queue_ids(self, topic: str) -> list[int]:
        return self.reads.queue_ids(topic)

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        return self.reads.earliest_store_time(topic, queue_id)

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        return self.reads.search_offset_by_timestamp(topic, queue_id, timestamp)

    def query_by_key(self, topic: str, key: str, max_num: int, begin: int = 0,
                     end: int = (1 << 63) - 1) -> QueryResult:
        return self.reads.query_by_key(topic, key, max_num, begin, end)

    # ---- retention (storage.retention) ----------------------------------------------------------
    def clean_expired(self, now: float | None = None) -> list[str]:
        return self.retention.clean_expired(now)

    # ---- replica (storage.replica) --------------------------------------------------------------
    def start_replica(self) -> int:
        return self.replica.start_replica()

    def stop_replica(self) -> None:
        self.replica.stop_replica()

    def replica_data(self, offset: int, max_bytes: int) -> memoryview | None:
        return self.replica.replica_data(offset, max_bytes)

    def append_replica(self, offset: int, data: BytesLike) -> int:
        return self.replica.append_replica(offset, data)

    def reput(self) -> int:
        return self.replica.reput()

    def add_replica_destination_listener(self, fn: DestinationListener) -> None:
        """fn({(topic, queue_id)}) after a reput pass whose records name later destinations (storage.replica)."""
        self.replica.destination_listeners.append(fn)

    def remove_replica_destination_listener(self, fn: DestinationListener) -> None:
        if fn in self.replica.destination_listeners:
            self.replica.destination_listeners.remove(fn)

    def truncate_replica(self, offset: int) -> int:
        return self.replica.truncate_replica(offset)

    # ---- small state files (the scheduler's, under <store>/config) ------------------------------
    def delay_offset_file(self, path: str) -> DelayOffsetFile:
        """`delayOffset.json` at `path` (`read()` / `write(table)`: RocketMQ's shape, atomic, `.bak` fallback):
        the delay levels' progress where the composition root passes no MetaStore-backed one."""
        return DelayOffsetFile(path)

    def config_file(self, path: str) -> ConfigFile:
        """A small JSON state file at `path` (`read()` / `write(obj)`: atomic, `.bak` fallback), e.g. the
        scheduler's `delayCancel.json`."""
        return ConfigFile(path)

    # ---- consume queues (storage.consume_queue_table) ------------------------------------------
    @overload
    def consume_queue(self, topic: str, queue_id: int, create: Literal[True]) -> ConsumeQueue: ...

    @overload
    def consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...

    def consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        return self.queues.get(topic, queue_id, create)

    def delete_consume_queues(self, topic: str) -> int:
        """Forget a deleted topic's ConsumeQueues and remove their files (RocketMQ's cleanUnusedTopic).
        Its records stay in the CommitLog until retention. Returns the number of queues removed."""
        removed = self.queues.delete_topic(topic)
        self.gate.forget_topic(topic)
        for listener in self.retention.queue_listeners:
            listener.topic_deleted(topic)
        return removed

    @property
    def flush_count(self) -> int:
        return self._group_commit.flush_count

    @property
    def put_ok_total(self) -> int:
        return self.counters.put_ok_total

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
            "consumeQueueCount": str(len(self.queues.queues)),
            "putMessageTimesTotal": str(self.counters.put_ok_total),
            "putMessageFailedTimes": str(self.counters.put_failed_total),
            "putMessageSizeTotal": str(self.counters.put_bytes_total),
            "getMessageTimesTotal": str(self.counters.get_total),
            "flushDiskType": str(self.config.flush_disk_type),
            "groupCommitFlushTimes": str(self._group_commit.flush_count),
            "bootTimestamp": str(self.boot_ms),
        }
