"""Pop state (gRPC ReceiveMessage and remoting POP_MESSAGE alike) that survives kill -9: a journal plus a
snapshot under <store>/grpc/ (the directory keeps the name it had when only the gRPC endpoint popped).

Per (group, topic, queue id) a `QueueState`: `next_offset` (the first ConsumeQueue offset never handed
out) and the in-flight deliveries `offset -> Inflight(seq, attempt, visible_ms)`. Everything below
`next_offset` that is not in flight is done (acked, sent to the DLQ, or filtered out). `seq` numbers
every delivery across the broker's life: a receipt handle names (queue, offset, seq), so a handle of
an earlier delivery of the same message is recognised as stale.

Journal records (`pop.journal`), each `u32 length | u32 crc32 | msgpack`:
  ["P", group, topic, qid, next_offset, visible_ms, [[offset, seq, attempt], ...]]   a receive
  ["A", group, topic, qid, offset, seq]                                              ack / DLQ done
  ["C", group, topic, qid, offset, old_seq, new_seq, visible_ms]                     change invisible time
A record is written (os.write: in the kernel, so kill -9 loses nothing) before the RPC is answered;
with SYNC_FLUSH it is also fdatasync'ed. Load replays the snapshot then the journal, and cuts a torn
or corrupt tail at the last valid record (logged). Once the journal passes `compact_bytes` the whole
state is written to `pop.snapshot` (tmp + fsync + rename) and the journal starts empty; replay is
idempotent, so a crash between the two steps only replays records the snapshot already holds.
RocketMQ keeps the same facts as checkpoint/ack messages in its revive topic, revived by a scan;
here the in-flight set is in memory (bounded by what consumers hold) and its changes are durable.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import structlog

log = structlog.get_logger(__name__)

_HEAD = struct.Struct("<II")
JOURNAL, SNAPSHOT = "pop.journal", "pop.snapshot"
MAX_RECORD = 64 * 1024 * 1024

Key = tuple[str, str, int]


@dataclass(slots=True)
class Inflight:
    seq: int
    attempt: int       # 1 for the first delivery
    visible_ms: int    # wall-clock ms at which it may be delivered again


@dataclass(slots=True)
class QueueState:
    next_offset: int
    inflight: dict[int, Inflight] = field(default_factory=dict)

    def commit_offset(self) -> int:
        return min(self.inflight) if self.inflight else self.next_offset


class PopStore:
    def __init__(self, root: str, sync: bool = False, compact_bytes: int = 64 * 1024 * 1024) -> None:
        self.dir = os.path.join(root, "grpc")
        self.sync = sync
        self.compact_bytes = compact_bytes
        self.queues: dict[Key, QueueState] = {}
        self.seq = 0
        self._fd = -1
        self._size = 0
        self.cut_bytes = 0

    # ---- load / close --------------------------------------------------------------------
    def load(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        snap = os.path.join(self.dir, SNAPSHOT)
        if os.path.exists(snap):
            with open(snap, "rb") as f:
                data = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
            self.seq = data["seq"]
            for group, topic, qid, nxt, items in data["queues"]:
                self.queues[(group, topic, qid)] = QueueState(
                    nxt, {off: Inflight(seq, att, vis) for off, seq, att, vis in items})
        path = os.path.join(self.dir, JOURNAL)
        good = 0
        records = 0
        if os.path.exists(path):
            with open(path, "rb") as f:
                buf = f.read()
            pos = 0
            while pos + _HEAD.size <= len(buf):
                n, crc = _HEAD.unpack_from(buf, pos)
                end = pos + _HEAD.size + n
                if n > MAX_RECORD or end > len(buf) or zlib.crc32(buf[pos + _HEAD.size:end]) != crc:
                    break
                try:
                    self._apply(msgpack.unpackb(buf[pos + _HEAD.size:end], raw=False))
                except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
                    log.error("pop.journal_bad_record", pos=pos, error=repr(e))
                    break
                pos = good = end
                records += 1
            if good < len(buf):
                self.cut_bytes = len(buf) - good
                log.warning("pop.journal_tail_cut", path=path, valid_bytes=good, cut_bytes=self.cut_bytes)
                with open(path, "r+b") as f:
                    f.truncate(good)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = good
        inflight = sum(len(q.inflight) for q in self.queues.values())
        log.info("pop.loaded", queues=len(self.queues), inflight=inflight, journal_records=records, seq=self.seq)

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
            self._fd = -1

    # ---- records -------------------------------------------------------------------------
    def _apply(self, r: list[Any]) -> None:
        """One journal record (the layouts in the module docstring)."""
        kind, group, topic, qid, *fields = r
        key = (group, topic, qid)
        if kind == "P":
            next_offset, visible_ms, entries = fields
            q = self.queues.get(key)
            if q is None:
                q = self.queues[key] = QueueState(next_offset)
            q.next_offset = max(q.next_offset, next_offset)
            for off, seq, att in entries:
                q.inflight[off] = Inflight(seq, att, visible_ms)
                self.seq = max(self.seq, seq)
        elif kind == "A":
            offset, seq = fields
            q = self.queues.get(key)
            e = q.inflight.get(offset) if q else None
            if q is not None and e is not None and e.seq == seq:
                del q.inflight[offset]
        elif kind == "C":
            offset, old_seq, new_seq, visible_ms = fields
            q = self.queues.get(key)
            e = q.inflight.get(offset) if q else None
            if e is not None and e.seq == old_seq:
                e.seq, e.visible_ms = new_seq, visible_ms
            self.seq = max(self.seq, new_seq)
        else:
            raise ValueError(f"unknown pop journal record {kind!r}")

    def _write(self, records: list[list[Any]]) -> None:
        out = bytearray()
        for r in records:
            payload = msgpack.packb(r, use_bin_type=True)
            out += _HEAD.pack(len(payload), zlib.crc32(payload))
            out += payload
        view = memoryview(out)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self.sync:
            os.fdatasync(self._fd)
        self._size += len(out)

    def _maybe_compact(self) -> None:
        if self._size >= self.compact_bytes:
            self.compact()

    def compact(self) -> None:
        """Write the whole state as the snapshot and start an empty journal."""
        data = {"seq": self.seq, "queues": [
            [g, t, qid, q.next_offset, [[off, e.seq, e.attempt, e.visible_ms] for off, e in q.inflight.items()]]
            for (g, t, qid), q in self.queues.items()]}
        snap = os.path.join(self.dir, SNAPSHOT)
        tmp = snap + ".tmp"
        with open(tmp, "wb") as f:
            f.write(msgpack.packb(data, use_bin_type=True))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, snap)
        os.ftruncate(self._fd, 0)
        self._size = 0
        log.info("pop.compacted", queues=len(self.queues))

    # ---- operations (each durable before it returns) -------------------------------------
    def queue(self, key: Key, initial_offset: Callable[[], int]) -> QueueState:
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = QueueState(initial_offset())
        return q

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def pop(self, key: Key, next_offset: int, visible_ms: int, entries: list[tuple[int, int, int]]) -> None:
        """Record a receive: entries (offset, seq, attempt), all invisible until visible_ms."""
        self._write([["P", *key, next_offset, visible_ms, [list(e) for e in entries]]])
        self._apply(["P", *key, next_offset, visible_ms, entries])
        self._maybe_compact()

    def ack(self, key: Key, offset: int, seq: int) -> bool:
        """True when (offset, seq) was in flight and is now done; False for a stale or unknown handle."""
        q = self.queues.get(key)
        e = q.inflight.get(offset) if q else None
        if q is None or e is None or e.seq != seq:
            return False
        self._write([["A", *key, offset, seq]])
        del q.inflight[offset]
        self._maybe_compact()
        return True

    def find(self, key: Key, offset: int) -> Inflight | None:
        q = self.queues.get(key)
        return q.inflight.get(offset) if q else None

    def change(self, key: Key, offset: int, seq: int, visible_ms: int) -> int | None:
        """A new seq (receipt handle) for an in-flight delivery that is invisible until visible_ms."""
        q = self.queues.get(key)
        e = q.inflight.get(offset) if q else None
        if e is None or e.seq != seq:
            return None
        new = self.next_seq()
        self._write([["C", *key, offset, seq, new, visible_ms]])
        e.seq, e.visible_ms = new, visible_ms
        self._maybe_compact()
        return new
