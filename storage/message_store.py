"""MessageStore: the storage facade (ARCHITECTURE.md). The scheduler and the server use only this.

Layout under `store_path`: `commitlog/`, `consumequeue/<topic>/<qid>/`, `index/<IndexFiles>`,
`checkpoint`, `abort` (present while running), `config/` (JSON tables, see topic_config etc.).
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, overload

import structlog

from storage import _record as R
from storage.checkpoint import Checkpoint, CheckpointFile
from storage.commitlog import CommitLog
from storage.consume_queue import UNIT, ConsumeQueue
from storage.faults import PutFaultInjector
from storage.flush import GroupCommitService, PeriodicFlusher, flush_segments_blocking
from storage.index import IndexService
from storage.index_file import IndexFile
from storage.recovery import iter_records, recover
from storage.replica import ReplicaMixin
from storage.retention import RetentionMixin
from storage.store_append import BatchPutMixin
from storage.store_reads import ReadMixin
from storage.store_state import DispatchListener
from storage.store_types import (
    BatchPutResult,
    GetResult,
    GetStatus,
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

# (CommitLog max offset, ConsumeQueues, IndexService flush plan): what one logics flush covers
_LogicsSnapshot = tuple[int, list[ConsumeQueue], list[tuple[IndexFile, int, bool]]]


def _space_error(cause: BaseException | None, what: str) -> tuple[PutStatus, str]:
    """The put status and remark for a file that could not be created: ENOSPC is SERVICE_NOT_AVAILABLE
    (the client's code 14) with a remark saying the disk is full."""
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
        return PutStatus.SERVICE_NOT_AVAILABLE, f"disk full: cannot reserve a {what}: {cause.strerror}"
    return PutStatus.CREATE_MAPPED_FILE_FAILED, f"create mapped file failed ({what}): {cause}"


class MessageStore(ReadMixin, RetentionMixin, BatchPutMixin, ReplicaMixin):
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
        self.commitlog = CommitLog(os.path.join(root, "commitlog"), config.mapped_file_size_commitlog)
        self.cq_root = os.path.join(root, "consumequeue")
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.index = IndexService(root, self.commitlog.read_record, config.max_hash_slot_num, config.max_index_num)
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
        self._loaded = False
        log.info("store.closed", commitlog_max_offset=cl_max)

    # ---- listeners ------------------------------------------------------------------------------
    def add_dispatch_listener(self, fn: DispatchListener) -> None:
        self._listeners.append(fn)

    def remove_dispatch_listener(self, fn: DispatchListener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

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

    # ---- put ------------------------------------------------------------------------------------
    def disk_used_ratio(self) -> float:
        now = time.monotonic()
        if now - self._disk_checked_at >= self.config.disk_check_interval_ms / 1000.0 or self._disk_checked_at == 0:
            try:
                st = os.statvfs(self.config.store_path)
                self._disk_ratio = 1.0 - st.f_bavail / st.f_blocks if st.f_blocks else 0.0
            except OSError:
                self._disk_ratio = 0.0
            self._disk_checked_at = now
        return self._disk_ratio

    def put(self, requests: list[PutRequest]) -> list[PutResult]:
        """Append a batch synchronously; see ARCHITECTURE.md. Results are in request order.

        One pass checks the requests and assigns queue offsets, the CommitLog copies runs of records
        with one write each, one pass builds the ConsumeQueue units (one write per queue) and the index
        entries (one call), then the dispatch listeners run once per (topic, queue)."""
        results: list[PutResult | None] = [None] * len(requests)
        if self._closed or not self._loaded:
            return self._fail_all(requests, results, PutStatus.SERVICE_NOT_AVAILABLE, "store is not running")
        if self.read_only:
            return self._fail_all(requests, results, PutStatus.SERVICE_NOT_AVAILABLE,
                                  "store is read-only (brokerRole SLAVE): send to the master")
        if self.disk_used_ratio() > self.config.disk_max_used_ratio:
            log.warning("store.disk_full", ratio=round(self._disk_ratio, 4), limit=self.config.disk_max_used_ratio)
            return self._fail_all(requests, results, PutStatus.SERVICE_NOT_AVAILABLE,
                                  f"disk full: used ratio {self._disk_ratio:.3f} > {self.config.disk_max_used_ratio}")
        faults = self.faults
        cfg = self.config
        max_size = min(cfg.max_message_size, cfg.mapped_file_size_commitlog - R.BLANK_LEN)
        min_size, read_head, magics = R.MIN_RECORD, R.read_head, R.RECORD_MAGICS
        counters = self.queue_offsets
        next_off: dict[tuple[str, int], int] = {}
        accepted: list[PutRequest] = []
        positions: list[int] = []  # request index of each accepted one
        qoffs: list[int] = []
        records: list[bytearray] = []
        for i, req in enumerate(requests):
            status = faults.take(req) if faults.enabled else None
            if status is not None:
                results[i] = PutResult(status, remark="injected fault")
                self.put_failed_total += 1
                continue
            rec = req.record
            n = len(rec)
            if n > max_size or n < min_size or (h := read_head(rec, 0))[0] != n or h[1] not in magics:
                results[i] = PutResult(PutStatus.MESSAGE_ILLEGAL, remark="message illegal")
                self.put_failed_total += 1
                continue
            key = (req.topic, req.queue_id)
            off = next_off.get(key)
            if off is None:
                off = counters.get(key, 0)
            next_off[key] = off + 1
            qoffs.append(off)
            accepted.append(req)
            positions.append(i)
            records.append(rec)
        if not accepted:
            return results  # type: ignore[return-value]  # no request accepted: every slot was filled above
        for key, end in next_off.items():  # ConsumeQueue room first: nothing stored unless all fits
            first = counters.get(key, 0)
            err = self._cq_room(key, first, end - first)
            if err is not None:
                status, remark = _space_error(err, "ConsumeQueue file")
                for i in positions:
                    results[i] = PutResult(status, remark=remark)
                self.put_failed_total += len(positions)
                return results  # type: ignore[return-value]  # every slot was filled just above
        store_ts = self.now_ms()
        phys, append_err = self.commitlog.append_batch(records, qoffs, store_ts)
        units: dict[tuple[str, int], list[Any]] = {}  # queue -> [first queue offset, units bytearray, end]
        index_entries = []
        pack = UNIT.pack
        ok = PutStatus.PUT_OK
        end = 0
        nbytes = 0
        for j, p in enumerate(phys):
            req = accepted[j]
            size = len(records[j])
            key = (req.topic, req.queue_id)
            delay = req.deliver_delay_ms
            unit = pack(p, size, store_ts + delay if delay >= 0 else req.tags_code)
            entry = units.get(key)
            if entry is None:
                units[key] = [qoffs[j], bytearray(unit), p + size]
            else:
                entry[1] += unit
                entry[2] = p + size
            if req.keys:
                index_entries.append((req.topic, req.keys, p, size))
            results[positions[j]] = PutResult(ok, p, size, qoffs[j], store_ts)
            end = p + size
            nbytes += size
        if index_entries:
            self.index.add_batch(index_entries, store_ts)
        self.put_bytes_total += nbytes
        self.put_ok_total += len(phys)
        if append_err is not None:
            status, remark = _space_error(append_err.cause, "CommitLog segment")
            for i in positions[len(phys):]:
                results[i] = PutResult(status, remark=remark)
                self.put_failed_total += 1
        for key, entry in units.items():
            self._write_units(key, *entry)
        if phys and cfg.sync_flush:
            fut = self._group_commit.request(end)
            for j in range(len(phys)):
                results[positions[j]].flushed = fut  # type: ignore[union-attr]  # stored above (PUT_OK)
        if self._listeners:
            self._dispatch(units)
        return results  # type: ignore[return-value]  # every slot holds a result: rejected, stored or failed above

    def _cq_room(self, key: tuple[str, int], first: int, count: int) -> OSError | None:
        """Reserve the ConsumeQueue file `count` units from `first` need (see ConsumeQueue.ensure_room)."""
        cq = self.consume_queue(key[0], key[1], create=True)
        try:
            cq.ensure_room(first, count)
        except OSError as e:
            now = time.monotonic()
            if now - self._space_logged_at > 10.0:
                self._space_logged_at = now
                log.error("store.consume_queue_no_room", topic=key[0], queue_id=key[1], error=str(e))
            return e
        return None

    def _write_units(self, key: tuple[str, int], first: int, buf: bytes | bytearray | memoryview,
                     max_end: int) -> None:
        """ConsumeQueue units of one put for one queue (one write), then its offset counter."""
        cq = self.consume_queue(key[0], key[1], create=True)
        try:
            cq.put_units(first, buf, max_end)
        except OSError as e:  # the CommitLog has it; recovery rebuilds the units
            log.error("store.consume_queue_write_failed", topic=key[0], queue_id=key[1], error=str(e))
        self.queue_offsets[key] = first + len(buf) // 20

    def _dispatch(self, keys: Iterable[tuple[str, int]]) -> None:
        """Dispatch listeners once per (topic, queue) a put wrote to."""
        counters = self.queue_offsets
        for key in keys:
            max_offset = counters[key]
            for fn in self._listeners:
                try:
                    fn(key[0], key[1], max_offset)
                except Exception as e:
                    log.error("store.dispatch_listener_failed", listener=repr(fn), error=repr(e))

    def _fail_all(self, requests: list[PutRequest], results: list[PutResult | None], status: PutStatus,
                  remark: str) -> list[PutResult]:
        for i in range(len(requests)):
            results[i] = PutResult(status, remark=remark)
        self.put_failed_total += len(requests)
        return results  # type: ignore[return-value]  # every slot was filled just above

    async def put_async(self, requests: list[PutRequest]) -> list[PutResult]:
        """`put`, then (SYNC_FLUSH) wait for the group commit; a flush that does not finish within
        sync_flush_timeout_ms turns PUT_OK into FLUSH_DISK_TIMEOUT (the record is stored)."""
        results = self.put(requests)
        fut = next((r.flushed for r in results if r.flushed is not None), None)
        if fut is not None:
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.config.sync_flush_timeout_ms / 1000.0)
            except TimeoutError:
                for r in results:
                    if r.status is PutStatus.PUT_OK:
                        r.status = PutStatus.FLUSH_DISK_TIMEOUT
        return results

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
