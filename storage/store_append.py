"""Batch put of already-built records (`BatchAppend`, a part of MessageStore): the delay-level drain's append.

`put_batch(batch)` takes records laid back to back in ONE buffer (a `storage.store_types.PutBatch`:
`buf`, `starts`, `dests`, `tags_codes`, `keys`, `ts_pos` and `deliver_delays`, per record
PutRequest.deliver_delay_ms or None when all are -1) and
stores them like `put` would, without a PutRequest/PutResult per record (a run of plain sends, the
delay drain, the timer wheel's dequeue):

- space for the whole run is reserved once in the active CommitLog segment;
- one loop assigns queue offsets and patches QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP in the
  buffer, packs the ConsumeQueue units per queue and collects the index entries;
- the buffer is copied into the mapping with one write; then one units write per queue, one index
  call, one group-commit request (SYNC_FLUSH) and the dispatch listeners once per queue (through the
  dispatch gate, as `put`).

A run of ONE record (every gRPC send, a sync producer's send) takes `_put_one`: the same checks, patches
and writes in the same order, without the per-queue dict, the `QueueRun` and the per-record lists the
general loop (`_put_many`, its reference) pays for; tests/storage/test_put_one.py checks (hypothesis) that
both leave byte-identical CommitLog, ConsumeQueue and index files and return the same result.

The records are trusted to be well formed (built by codec from stored records); sizes are checked.
Anything off the fast path (the run does not fit the segment, a record too large, the store not
running, the disk full, the fault injector enabled) goes through `put` with one PutRequest per record,
so the results and failure statuses are exactly those of `put`.
"""

from __future__ import annotations

import operator
import struct

from codec.consume_queue_unit import UNIT, UNIT_SIZE
from codec.record import POS_QUEUE_OFFSET, QUEUE_AND_PHYS_OFFSET
from storage.consume_queue import QueueRun
from storage.store_put import PutPath
from storage.store_types import BatchPutResult, PutBatch, PutRequest, PutStatus

_I64 = struct.Struct(">q")


class BatchAppend:
    """Shares the put path's parts and checks (`put_path`), and falls back to its `put` off the fast path."""

    def __init__(self, put_path: PutPath) -> None:
        self.put_path = put_path

    def put_batch(self, batch: PutBatch) -> BatchPutResult:
        """Append every record of `batch` (see the module docstring); results in one object."""
        n = len(batch.dests)
        if n == 1:
            return self._put_one(batch)
        if not n:
            return BatchPutResult(0, [], queue_offsets=[])
        return self._put_many(batch)

    def _put_one(self, batch: PutBatch) -> BatchPutResult:
        """`_put_many` for a run of one record (its reference: the same writes, in the same order)."""
        buf = batch.buf
        size = len(buf)
        pp = self.put_path
        cfg = pp.config
        run = pp.run
        if (run.closed or not run.loaded or pp.faults.enabled or run.read_only
                or pp.disk.used_ratio() > cfg.disk_max_used_ratio or size > cfg.max_message_size):
            return self._put_batch_slow(batch)
        cl = pp.commitlog
        spot = cl.reserve(size)
        if spot is None or type(spot) is not tuple:  # segment end (or no segment): the general path
            return self._put_batch_slow(batch)
        mf, pos = spot
        store_ts = pp.now_ms()
        p = mf.file_from_offset + pos
        end = p + size
        queues = pp.queues
        counters = queues.offsets
        key = batch.dests[0]
        q = counters.get(key, 0)
        tcode = batch.tags_codes[0]
        delays = batch.deliver_delays
        if delays and delays[0] >= 0:  # a scheduled record's tagsCode is its deliver time (as in `put`)
            tcode = store_ts + delays[0]
        QUEUE_AND_PHYS_OFFSET.pack_into(buf, POS_QUEUE_OFFSET, q, p)
        _I64.pack_into(buf, batch.ts_pos[0], store_ts)
        cq = queues.queues.get(key)
        if (cq is None or not cq.takes_unit_at(q)) and queues.room(key, q, 1) is not None:
            return self._put_batch_slow(batch)  # ConsumeQueue room first (a full disk: `put` says why)
        cl.commit(mf, pos, buf)
        unit = UNIT.pack(p, size, tcode)
        queues.write_unit(key, q, unit, end)
        keys = batch.keys[0]
        if keys:
            pp.index.add_one(key[0], keys, p, size, store_ts)
        counted = pp.counters
        counted.put_bytes_total += size
        counted.put_ok_total += 1
        flushed = pp.group_commit.request(end) if cfg.sync_flush else None
        gate = pp.gate
        if gate.limit is None:
            if gate.listeners.active:
                gate.listeners.dispatch_one(key[0], key[1], q + 1)
        else:
            gate.after_write({key: QueueRun(q, bytearray(unit), end)}, counters, end)
        return BatchPutResult(1, [p], store_ts, flushed, queue_offsets=[q])

    def _put_many(self, batch: PutBatch) -> BatchPutResult:
        """The general loop for a run of records (at least one; the reference of `_put_one`)."""
        dests = batch.dests
        n = len(dests)
        buf = batch.buf
        pp = self.put_path
        cfg = pp.config
        run = pp.run
        if (run.closed or not run.loaded or pp.faults.enabled or run.read_only
                or pp.disk.used_ratio() > cfg.disk_max_used_ratio
                or (len(buf) > cfg.max_message_size
                    and max(map(operator.sub, batch.starts[1:], batch.starts)) > cfg.max_message_size)):
            return self._put_batch_slow(batch)
        cl = pp.commitlog
        spot = cl.reserve(len(buf))
        if spot is None or type(spot) is not tuple:  # segment end (or no segment): the general path
            return self._put_batch_slow(batch)
        mf, pos = spot
        store_ts = pp.now_ms()
        base = mf.file_from_offset + pos
        queues = pp.queues
        counters = queues.offsets
        state: dict[tuple[str, int], QueueRun] = {}  # the units this run adds, per queue
        starts, tcodes, ts_pos, keys = batch.starts, batch.tags_codes, batch.ts_pos, batch.keys
        delays = batch.deliver_delays
        if delays:  # a scheduled record's tagsCode is its deliver time (as in `put`)
            tcodes = [store_ts + d if d >= 0 else t for t, d in zip(tcodes, delays, strict=True)]
        pack_qp = QUEUE_AND_PHYS_OFFSET.pack_into
        pack_ts = _I64.pack_into
        pack_unit = UNIT.pack
        phys: list[int] = []
        append_phys = phys.append
        qoffs: list[int] = []
        append_qoff = qoffs.append
        index_entries = []
        s = 0
        for j, key in enumerate(dests):
            e = starts[j + 1]
            p = base + s
            st = state.get(key)
            if st is None:
                st = state[key] = QueueRun(counters.get(key, 0), bytearray(), 0)
            q = st.next_offset
            st.next_offset = q + 1
            append_qoff(q)
            pack_qp(buf, s + POS_QUEUE_OFFSET, q, p)
            pack_ts(buf, ts_pos[j], store_ts)
            size = e - s
            st.units += pack_unit(p, size, tcodes[j])
            st.end = p + size
            append_phys(p)
            if keys[j]:
                index_entries.append((key[0], keys[j], p, size))
            s = e
        for key, st in state.items():  # ConsumeQueue room first (a full disk: `put` says why)
            if queues.room(key, st.first, len(st.units) // UNIT_SIZE) is not None:
                return self._put_batch_slow(batch)
        cl.commit(mf, pos, buf)
        for key, st in state.items():
            queues.write_units(key, st.first, st.units, st.end)
        if index_entries:
            pp.index.add_batch(index_entries, store_ts)
        counted = pp.counters
        counted.put_bytes_total += len(buf)
        counted.put_ok_total += n
        flushed = pp.group_commit.request(base + len(buf)) if cfg.sync_flush else None
        gate = pp.gate
        if gate.limit is None:
            if gate.listeners.active:
                gate.listeners.dispatch(state, counters)
        else:
            gate.after_write(state, counters, base + len(buf))
        return BatchPutResult(n, phys, store_ts, flushed, queue_offsets=qoffs)

    def _put_batch_slow(self, batch: PutBatch) -> BatchPutResult:
        """`put` with one PutRequest per record; its results folded into a BatchPutResult."""
        starts, buf = batch.starts, batch.buf
        delays = batch.deliver_delays or [-1] * len(batch.dests)
        reqs = [PutRequest(buf[starts[j]:starts[j + 1]], topic, qid, batch.tags_codes[j], batch.keys[j], delays[j])
                for j, (topic, qid) in enumerate(batch.dests)]
        results = self.put_path.put(reqs)
        ok = PutStatus.PUT_OK
        phys = [r.phys_offset if r.status is ok else -1 for r in results]
        qoffs = [r.queue_offset if r.status is ok else -1 for r in results]
        count = sum(1 for r in results if r.status is ok)
        first = next((r for r in results if r.status is ok), None)
        out = BatchPutResult(count, phys, first.store_timestamp if first else 0, first.flushed if first else None,
                             queue_offsets=qoffs)
        if count != len(results):
            out.statuses = [r.status for r in results]
            out.remark = next(r.remark for r in results if r.status is not ok)
        return out
