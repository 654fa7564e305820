"""Message key index for QUERY_MESSAGE: `topic#key` -> records (KEYS split on space, and UNIQ_KEY).

Design: an append-only file `<store>/index/keys.idx` of entries
`[int64 physOffset][int32 size][int64 storeTimestamp][int16 keyLen][key UTF-8]`, in CommitLog order,
plus an in-memory dict rebuilt from that file at load. Entries are buffered and written at flush
time; the checkpoint's `indexOffset` says up to which CommitLog offset the file is complete, and crash
recovery re-adds keys for records past it by scanning the CommitLog. Entries pointing past the
recovered CommitLog end are cut off at load; entries below the CommitLog min are skipped by queries.

Records parked in the scheduler's system topics (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer) get no
entries: they are internal until due, and the copy delivered into the real topic is indexed when it is
put. Without this the index would hold one entry per pending timer (issue 4: memory must not grow
with pending messages).
"""

from __future__ import annotations

import os
import struct

import structlog

from codec.codes import SCHEDULE_TOPIC, TIMER_TOPIC

log = structlog.get_logger(__name__)

_HEAD = struct.Struct(">qiqh")
UNINDEXED_TOPICS = frozenset((SCHEDULE_TOPIC, TIMER_TOPIC))
_UNINDEXED_PREFIXES = tuple(f"{t}#" for t in UNINDEXED_TOPICS)


class IndexService:
    def __init__(self, store_path: str) -> None:
        self.directory = os.path.join(store_path, "index")
        self.path = os.path.join(self.directory, "keys.idx")
        self.table: dict[str, list[tuple[int, int, int]]] = {}
        self._pending = bytearray()
        self.last_update_ts = 0
        self.last_update_phys = 0
        self.entries = 0
        self._prefixes: dict[str, tuple[str, bytes] | None] = {}

    def load(self, commitlog_max: int) -> None:
        """Read the file; cut entries that are torn or point at or past `commitlog_max`."""
        os.makedirs(self.directory, exist_ok=True)
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        pos, n, good = 0, len(data), 0
        while pos + _HEAD.size <= n:
            phys, size, ts, klen = _HEAD.unpack_from(data, pos)
            end = pos + _HEAD.size + klen
            if klen < 0 or end > n or phys + size > commitlog_max:
                break
            key = data[pos + _HEAD.size:end].decode("utf-8", "replace")
            if not key.startswith(_UNINDEXED_PREFIXES):  # written by an older version
                self._add(key, phys, size, ts)
            pos = good = end
        if good < n:
            log.warning("index.truncated", file=self.path, from_offset=good, bytes=n - good)
            with open(self.path, "r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())

    def _add(self, key: str, phys: int, size: int, ts: int) -> None:
        lst = self.table.get(key)
        if lst is None:
            self.table[key] = [(phys, size, ts)]
        else:
            lst.append((phys, size, ts))
        self.entries += 1
        self.last_update_ts, self.last_update_phys = ts, phys

    def add(self, topic: str, keys, phys: int, size: int, ts: int) -> None:
        self.add_batch(((topic, keys, phys, size),), ts)

    def add_batch(self, entries, ts: int) -> None:
        """Entries (topic, keys, phys, size) stored at `ts`; keys are str or UTF-8 bytes."""
        pending, table, pack, prefixes = self._pending, self.table, _HEAD.pack, self._prefixes
        n = last = 0
        for topic, keys, phys, size in entries:
            pre = prefixes.get(topic)
            if pre is None:
                if topic in UNINDEXED_TOPICS:
                    continue
                if len(prefixes) > 4096:
                    prefixes.clear()
                pre = prefixes[topic] = (f"{topic}#", f"{topic}#".encode())
            for k in keys:
                if not k:
                    continue
                if type(k) is str:
                    key = pre[0] + k
                    kb = key.encode("utf-8")
                else:
                    kb = pre[1] + k
                    key = kb.decode("utf-8", "replace")
                pending += pack(phys, size, ts, len(kb))
                pending += kb
                hit = (phys, size, ts)
                lst = table.get(key)
                if lst is None:
                    table[key] = [hit]
                else:
                    lst.append(hit)
                n += 1
                last = phys
        if n:
            self.entries += n
            self.last_update_ts, self.last_update_phys = ts, last

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int, min_phys: int) -> list[tuple[int, int, int]]:
        """Newest `max_num` (phys, size, storeTs) with begin <= storeTs <= end, returned oldest first."""
        lst = self.table.get(f"{topic}#{key}")
        if not lst:
            return []
        out = []
        for phys, size, ts in reversed(lst):
            if phys < min_phys:
                break
            if begin <= ts <= end:
                out.append((phys, size, ts))
                if len(out) >= max_num:
                    break
        out.reverse()
        return out

    def take_pending(self) -> bytes:
        """Entries not yet written (call on the loop thread; write them with `write`)."""
        data, self._pending = bytes(self._pending), bytearray()
        return data

    def flush(self) -> None:
        self.write(self.take_pending())

    def write(self, data: bytes) -> None:
        if not data:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)
            os.fdatasync(fd)
        finally:
            os.close(fd)
