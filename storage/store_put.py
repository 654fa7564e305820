"""The put path (`PutPath`, a part of MessageStore): `put(requests)` / `put_async(requests)`, the checks
before anything is stored (store running and writable, disk space, record shape, ConsumeQueue room),
the CommitLog append, the ConsumeQueue units of one put per queue (storage.consume_queue_table), the
index keys, the group commit (SYNC_FLUSH) and the dispatch listeners once per (topic, queue), through the
dispatch gate (storage.dispatch.DispatchGate: held while the records end past the dispatch limit).

One pass checks the requests and assigns queue offsets, the CommitLog copies runs of records with one
write each, one pass builds the ConsumeQueue units (one write per queue) and the index entries (one
call), then the dispatch listeners run once per (topic, queue). Results are in request order; a
file that cannot be created (a full disk) is a status with a remark, never an exception.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable

import structlog

from codec.consume_queue_unit import UNIT
from storage import _record as R
from storage.commitlog import CommitLog
from storage.consume_queue_table import ConsumeQueueTable
from storage.disk_space import DiskSpace
from storage.dispatch import DispatchGate
from storage.faults import PutFaultInjector
from storage.flush import GroupCommitService
from storage.index import IndexService
from storage.mapped_file import space_on
from storage.store_status import RunState, StoreCounters
from storage.store_types import PutRequest, PutResult, PutStatus, StoreConfig

log = structlog.get_logger(__name__)


def _space_error(cause: BaseException | None, what: str, where: str) -> tuple[PutStatus, str]:
    """The put status and remark for a file that could not be created under `where`: ENOSPC is
    SERVICE_NOT_AVAILABLE (the client's code 14, as RocketMQ answers a full disk) with a remark saying
    the disk is full and naming the file system and its free space."""
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
        return (PutStatus.SERVICE_NOT_AVAILABLE,
                f"disk full: cannot reserve a {what}: {cause.strerror} ({space_on(where)})")
    return PutStatus.CREATE_MAPPED_FILE_FAILED, f"create mapped file failed ({what}): {cause}"


class _QueueUnits:
    """One queue's ConsumeQueue units of a put: its first queue offset, the units, and the CommitLog end
    of its last record."""

    __slots__ = ("first", "units", "end")

    def __init__(self, first: int, units: bytearray, end: int) -> None:
        self.first, self.units, self.end = first, units, end


class PutPath:
    def __init__(self, config: StoreConfig, commitlog: CommitLog, queues: ConsumeQueueTable, index: IndexService,
                 group_commit: GroupCommitService, gate: DispatchGate, faults: PutFaultInjector,
                 disk: DiskSpace, run: RunState, counters: StoreCounters, now_ms: Callable[[], int]) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.group_commit = group_commit
        self.gate = gate  # the dispatch listeners, behind the dispatch limit (storage.dispatch)
        self.faults = faults
        self.disk = disk
        self.run = run
        self.counters = counters
        self.now_ms = now_ms  # the store-timestamp source (MessageStore.now_ms)

    def refusal(self) -> str | None:
        """Why the store takes no put now (not running, a slave, the disk full), or None."""
        run = self.run
        if run.closed or not run.loaded:
            return "store is not running"
        if run.read_only:
            return "store is read-only (brokerRole SLAVE): send to the master"
        if self.disk.used_ratio() > self.config.disk_max_used_ratio:
            log.warning("store.disk_full", ratio=round(self.disk.ratio, 4), limit=self.config.disk_max_used_ratio)
            return (f"disk full: used ratio {self.disk.ratio:.3f} > {self.config.disk_max_used_ratio}"
                    f" ({space_on(self.config.store_path)})")
        return None

    def put(self, requests: list[PutRequest]) -> list[PutResult]:
        """Append a batch synchronously; see ARCHITECTURE.md. Results are in request order.

        One pass checks the requests and assigns queue offsets, the CommitLog copies runs of records
        with one write each, one pass builds the ConsumeQueue units (one write per queue) and the index
        entries (one call), then the dispatch listeners run once per (topic, queue)."""
        results: list[PutResult | None] = [None] * len(requests)
        refused = self.refusal()
        if refused is not None:
            return self._fail_all(requests, results, PutStatus.SERVICE_NOT_AVAILABLE, refused)
        faults = self.faults
        counted = self.counters
        queues = self.queues
        cfg = self.config
        max_size = min(cfg.max_message_size, cfg.mapped_file_size_commitlog - R.BLANK_LEN)
        min_size, read_head, magics = R.MIN_RECORD, R.read_head, R.RECORD_MAGICS
        counters = queues.offsets
        next_off: dict[tuple[str, int], int] = {}
        accepted: list[PutRequest] = []
        positions: list[int] = []  # request index of each accepted one
        qoffs: list[int] = []
        records: list[bytearray] = []
        for i, req in enumerate(requests):
            status = faults.take(req) if faults.enabled else None
            if status is not None:
                results[i] = PutResult(status, remark="injected fault")
                counted.put_failed_total += 1
                continue
            rec = req.record
            n = len(rec)
            if n > max_size or n < min_size or (h := read_head(rec, 0))[0] != n or h[1] not in magics:
                results[i] = PutResult(PutStatus.MESSAGE_ILLEGAL, remark="message illegal")
                counted.put_failed_total += 1
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
            err = queues.room(key, first, end - first)
            if err is not None:
                status, remark = _space_error(err, "ConsumeQueue file", self.config.store_path)
                for i in positions:
                    results[i] = PutResult(status, remark=remark)
                counted.put_failed_total += len(positions)
                return results  # type: ignore[return-value]  # every slot was filled just above
        store_ts = self.now_ms()
        phys, append_err = self.commitlog.append_batch(records, qoffs, store_ts)
        units: dict[tuple[str, int], _QueueUnits] = {}
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
                units[key] = _QueueUnits(qoffs[j], bytearray(unit), p + size)
            else:
                entry.units += unit
                entry.end = p + size
            if req.keys:
                index_entries.append((req.topic, req.keys, p, size))
            results[positions[j]] = PutResult(ok, p, size, qoffs[j], store_ts)
            end = p + size
            nbytes += size
        if index_entries:
            self.index.add_batch(index_entries, store_ts)
        counted.put_bytes_total += nbytes
        counted.put_ok_total += len(phys)
        if append_err is not None:
            status, remark = _space_error(append_err.cause, "CommitLog segment", self.config.store_path)
            for i in positions[len(phys):]:
                results[i] = PutResult(status, remark=remark)
                counted.put_failed_total += 1
        for key, entry in units.items():
            queues.write_units(key, entry.first, entry.units, entry.end)
        if phys and cfg.sync_flush:
            fut = self.group_commit.request(end)
            for j in range(len(phys)):
                results[positions[j]].flushed = fut  # type: ignore[union-attr]  # stored above (PUT_OK)
        gate = self.gate
        if gate.limit is None:
            if gate.listeners.active:
                gate.listeners.dispatch(units, queues.offsets)
        elif units:
            gate.after_write(units, queues.offsets, end)
        return results  # type: ignore[return-value]  # every slot holds a result: rejected, stored or failed above

    def _fail_all(self, requests: list[PutRequest], results: list[PutResult | None], status: PutStatus,
                  remark: str) -> list[PutResult]:
        for i in range(len(requests)):
            results[i] = PutResult(status, remark=remark)
        self.counters.put_failed_total += len(requests)
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
