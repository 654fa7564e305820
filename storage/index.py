"""Message key index for QUERY_MESSAGE: `topic#key` -> records (KEYS split on spaces, and UNIQ_KEY).

An on-disk hash index in the spirit of RocketMQ's IndexFile (layout: storage/index_file.py). Files
`<store>/index/<yyyyMMddHHmmssSSS>` (UTC creation time), each with `maxHashSlotNum` hash slots and room
for `maxIndexNum` index entries; when the active file is full the next one is created. Nothing per key
lives in Python memory: a key costs one 24-byte entry in a mapped file.

- Hash: zlib.crc32 of `topic#key` in UTF-8 (stable across processes; the CRC of `topic#` is cached per
  topic and continued over the key). The slot is `hash % hashSlotNum`.
- Add (`add_batch`, called by `put`/`put_batch` on the loop thread): per key one CRC, one slot read and
  write (memoryview cast('I') of the slot region) and one packed entry appended to a bytearray; the
  batch's entries go into the mapping with one slice assignment, then the header.
- Query: hash the key, walk the slot's chain newest first in each file (newest file first), keep
  entries with that hash, then read each candidate record through `read_record` (the CommitLog) and
  keep it only if its topic matches and its KEYS/UNIQ_KEY hold the key: collisions never leak.
  Duplicates (a key listed twice in KEYS) collapse by physical offset.
- Durability: the logics flush (`take_pending` on the loop thread, `write` in the flush thread)
  fdatasyncs every file written since the last flush, so the checkpoint's `indexOffset` (the CommitLog
  max offset snapshotted before) stays true: entries for every record below it are on disk.
- Recovery (`load(commitlog_max, crashed)`): entries whose record is not wholly below `commitlog_max`
  are cut, files left empty are deleted; after a crash, or when anything was cut, the last file's slots
  and chains are rebuilt from its valid entries, so no slot points at a cut entry. Crash recovery then
  re-adds keys for records past `last_update_phys` (storage.recovery._redispatch).
- Made ahead (RocketMQ's AllocateMappedFileService, storage.allocate): once the active file is half
  full (and at load when there is none, `allocate_ahead`) the next one is made on the store's allocate
  pool as `index/next.ahead.spare` (header and slot pages and the first entry chunk reserved), so the
  put that rotates only renames it and writes its header. One not ready in time is made inline
  (`ahead.missed`); `load` removes a leftover; a pool failure (full disk) is left to the inline creation.
- Truncation (`truncate`): a replica whose CommitLog is cut back (a former master rejoining) cuts the
  entries of the cut records the same way recovery does.
- Retention (`delete_below`): a file whose endPhyOffset is below the CommitLog min offset is deleted
  (never the active one).
- Migration: an `index/keys.idx` of the previous format (an append-only list read into a dict) is
  re-added into IndexFiles at load and then removed (storage/index_migrate.py).

Records parked in the scheduler's system topics (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer) are indexed
under those topics (`scheduled cancel --id UNIQ_KEY` finds a pending message by its key); the copy
delivered into the real topic is indexed again under the real topic when it is put.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from zlib import crc32

import numpy as np
import structlog

from codec.errors import CodecError
from codec.properties import MessageConst, index_keys
from storage import _record as R
from storage.allocate import AHEAD_SUFFIX, AllocateAhead
from storage.index_file import ENTRY, IndexFile, file_name, is_index_file_name, name_ms
from storage.index_migrate import OLD_NAME, migrate
from storage.store_types import IndexEntry, IndexKeys

# property names, bound once for the per-message path (codec.properties.MessageConst)
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_KEY

ReadRecord = Callable[[int, int], memoryview | None]

log = structlog.get_logger(__name__)

DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000
SWEEP_INTERVAL_S = 5.0
_PHYS = struct.Struct("<q")
_MAX_NUM = (1 << 31) - 1  # slot values and prevIndex are u32 entry numbers; header counts are i32
NEXT = 0  # the key of the next IndexFile asked for ahead (there is one next file; named when it is taken)
AHEAD_NAME = "next" + AHEAD_SUFFIX
_NEVER = 1 << 62


VECTOR_MIN = 128  # keys in a batch from which numpy chains and packs the entries (below: one by one)
_ENTRY_DTYPE = np.dtype([("hash", "<u4"), ("phys", "<i8"), ("tdiff", "<i4"), ("prev", "<u4"), ("size", "<i4")])
assert _ENTRY_DTYPE.itemsize == ENTRY.size  # == index_file.ENTRY, packed


class _NoRoom(Exception):
    """The index cannot take more entries now (disk full); the rest of the batch goes unindexed."""


class IndexService:
    def __init__(self, store_path: str, read_record: ReadRecord | None = None, max_hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
                 max_index_num: int = DEFAULT_INDEX_NUM, allocator: Executor | None = None) -> None:
        """`allocator`: where the next IndexFile is made ahead of need (None: each made when needed)."""
        self.directory = os.path.join(store_path, "index")
        self.read_record = read_record  # (phys, size) -> record buffer | None: verifies query hits
        self.slot_num = min(max(1, int(max_hash_slot_num)), _MAX_NUM)
        self.index_num = min(max(1, int(max_index_num)), _MAX_NUM)
        self.files: list[IndexFile] = []
        self.last_update_ts = 0
        self.last_update_phys = 0
        self.entries = 0
        self._crcs: dict[str, int] = {}
        self._swept_at = time.monotonic()
        self._room_error_at = 0.0
        self.ahead: AllocateAhead[IndexFile] = AllocateAhead(allocator, IndexFile.destroy, self.directory)
        self._ahead_at = _NEVER  # the active file's entry count from which `allocate_ahead` asks

    # ---- load -----------------------------------------------------------------------------------
    def load(self, commitlog_max: int, crashed: bool = False) -> None:
        """Open the IndexFiles (migrating an old keys.idx first); cut entries whose record is not wholly
        below `commitlog_max`; after a crash rebuild the last file's slots from its valid entries."""
        os.makedirs(self.directory, exist_ok=True)
        for name in os.listdir(self.directory):
            if name.endswith(AHEAD_SUFFIX):  # made ahead by a run killed before it was needed
                os.unlink(os.path.join(self.directory, name))
        old = os.path.join(self.directory, OLD_NAME)
        if os.path.exists(old):
            stale = self._names()  # left by a migration that did not finish: start it over
            for name in stale:
                os.unlink(os.path.join(self.directory, name))
            if stale:
                log.warning("index.unfinished_migration_restarted", files=stale)
            migrate(self, old, commitlog_max)
            return
        for name in self._names():
            path = os.path.join(self.directory, name)
            f = IndexFile.open(path)
            if f is None:
                log.warning("index.invalid_file_deleted", file=path, size=os.path.getsize(path))
                os.unlink(path)
                continue
            self.files.append(f)
        self._recover(commitlog_max, crashed)
        self.entries = sum(f.count for f in self.files)
        self._set_last()

    def truncate(self, offset: int) -> int:
        """A replica's CommitLog cut back to `offset` (storage.replica.truncate_replica): every entry whose
        record is not wholly below it goes, as at recovery: the file holding the cut keeps its first
        entries with its slots and chains rebuilt from them (no slot points at a cut entry), later files
        are deleted. So a query by key never walks to bytes that are gone or were written again since,
        and the entries the replica re-adds for the new bytes are the only ones there. Returns the
        entries cut."""
        before = self.entries
        self._recover(offset, crashed=False)
        self.entries = sum(f.count for f in self.files)
        self._set_last()
        return before - self.entries

    def _names(self) -> list[str]:
        return sorted(n for n in os.listdir(self.directory) if is_index_file_name(n))

    def _recover(self, commitlog_max: int, crashed: bool) -> None:
        files = self.files
        while files:
            f = files[-1]
            last = f.last_entry()
            past = last is not None and last[1] + last[4] > commitlog_max
            if not (crashed or past or f.count == 0):
                return
            keep = f.valid_prefix(commitlog_max)
            if keep:
                if keep < f.count or crashed:
                    cut_from = f.entry(keep + 1)[1] if keep < f.count else None
                    if keep < f.count:
                        log.warning("index.entries_cut", file=f.path, entries=f.count - keep, kept=keep,
                                    from_phys=cut_from, commitlog_max=commitlog_max)
                    f.cut_and_rebuild(keep)
                return
            log.warning("index.file_cut", file=f.path, entries=f.count, commitlog_max=commitlog_max)
            f.destroy()
            files.pop()

    def _set_last(self) -> None:
        f = self.files[-1] if self.files else None
        if f is None or not f.count:
            self.last_update_ts = self.last_update_phys = 0
            return
        self.last_update_phys, self.last_update_ts = f.end_phys, f.end_ts

    # ---- add ------------------------------------------------------------------------------------
    def add(self, topic: str, keys: IndexKeys, phys: int, size: int, ts: int) -> None:
        self.add_batch(((topic, keys, phys, size),), ts)

    def add_batch(self, entries: Iterable[IndexEntry], ts: int) -> None:
        """Entries (topic, keys, phys, size) stored at `ts` (ms); keys are non-empty str or UTF-8 bytes.
        Every key's hash first (the one per-key Python step); then a batch that fits the allocated
        entries of the current file is chained and packed with numpy (`_add_vector`), anything else
        (a small batch, a chunk boundary, a rotation) one entry at a time (`_add_loop`)."""
        crcs = self._crcs
        hashes: list[int] = []
        physs: list[int] = []
        sizes: list[int] = []
        for topic, keys, phys, size in entries:
            c = crcs.get(topic)
            if c is None:
                c = self._topic_crc(topic)
            if c < 0:
                continue
            for k in keys:
                hashes.append(crc32(k.encode() if k.__class__ is str else k, c))  # type: ignore[arg-type]  # str is encoded; mypy does not narrow on `__class__ is` (kept: cheaper than isinstance per key)
                physs.append(phys)
                sizes.append(size)
        n = len(hashes)
        if not n:
            return
        f = self.files[-1] if self.files else None
        if n >= VECTOR_MIN and f is not None and f.count + n <= f.allocated:
            self._add_vector(f, hashes, physs, sizes, ts)
        else:
            self._add_loop(f, hashes, physs, sizes, ts)

    def add_one(self, topic: str, keys: IndexKeys, phys: int, size: int, ts: int) -> None:
        """`add_batch` of one record's keys (its reference; a run of one send): when they fit the allocated
        entries of the current file, packed and committed here, without the batch's columns; anything
        else (no file yet, a chunk boundary, a rotation) through `add_batch`."""
        c = self._crcs.get(topic)
        if c is None:
            c = self._topic_crc(topic)
        if c < 0:
            return
        files = self.files
        f = files[-1] if files else None
        if f is None or f.count + len(keys) > f.allocated or not keys:
            self.add_batch(((topic, keys, phys, size),), ts)
            return
        slots, nslots, cnt = f.slots, f.slot_num, f.count
        tdiff = (ts - f.begin_ts) // 1000
        buf = bytearray()
        pack = ENTRY.pack
        for k in keys:
            h = crc32(k.encode() if k.__class__ is str else k, c)  # type: ignore[arg-type]  # as in add_batch
            s = h % nslots
            cnt += 1
            buf += pack(h, phys, tdiff, slots[s], size)
            slots[s] = cnt
        self.entries += cnt - f.count  # `_commit`, the batch's last phys being `phys`
        f.commit(buf, cnt, phys, ts)
        self.last_update_ts, self.last_update_phys = ts, phys
        if cnt >= self._ahead_at:
            self.allocate_ahead()

    def _add_loop(self, f: IndexFile | None, hashes: list[int], physs: list[int], sizes: list[int], ts: int) -> None:
        slots: memoryview  # f is None: bound by the first `_room` (cnt == limit == 0)
        if f is None:
            nslots, cnt, limit, tdiff = 1, 0, 0, 0
        else:
            slots, nslots, cnt, limit = f.slots, f.slot_num, f.count, f.allocated
            tdiff = (ts - f.begin_ts) // 1000
        buf = bytearray()
        pack = ENTRY.pack
        try:
            for h, phys, size in zip(hashes, physs, sizes, strict=True):
                if cnt == limit:  # the allocated entries are used up: allocate more, or rotate
                    f, cnt, limit = self._room(f, buf, cnt, ts, phys)
                    slots, nslots, tdiff = f.slots, f.slot_num, (ts - f.begin_ts) // 1000
                s = h % nslots
                cnt += 1
                buf += pack(h, phys, tdiff, slots[s], size)
                slots[s] = cnt
        except _NoRoom:
            pass
        if f is not None and cnt > f.count:
            self._commit(f, buf, cnt, ts)

    def _add_vector(self, f: IndexFile, hashes: list[int], physs: list[int], sizes: list[int], ts: int) -> None:
        """What `_add_loop` writes, for a batch that fits the allocated entries: entry k (number
        f.count + 1 + k) chains to the newest earlier entry of its slot (in this batch, else the
        slot's current head) and each touched slot ends at its batch's newest entry."""
        n = len(hashes)
        h = np.array(hashes, dtype=np.uint32)
        nums = np.arange(f.count + 1, f.count + 1 + n, dtype=np.uint32)
        slot = (h % f.slot_num).astype(np.intp)
        order = np.argsort(slot, kind="stable")  # by slot, batch order within a slot
        by_slot = slot[order]
        nums_by_slot = nums[order]
        first = np.empty(n, dtype=bool)
        first[0] = True
        np.not_equal(by_slot[1:], by_slot[:-1], out=first[1:])
        last = np.empty(n, dtype=bool)
        last[-1] = True
        last[:-1] = first[1:]
        heads = np.frombuffer(f.slots, dtype=np.uint32)  # the file's slot table, in place
        prev_by_slot = np.empty(n, dtype=np.uint32)
        prev_by_slot[1:] = nums_by_slot[:-1]
        prev_by_slot[first] = heads[by_slot[first]]
        e = np.empty(n, dtype=_ENTRY_DTYPE)
        e["hash"] = h
        e["phys"] = physs
        e["tdiff"] = (ts - f.begin_ts) // 1000
        e["prev"][order] = prev_by_slot
        e["size"] = sizes
        heads[by_slot[last]] = nums_by_slot[last]
        del heads
        self._commit(f, e.tobytes(), f.count + n, ts)

    def _commit(self, f: IndexFile, buf: bytes | bytearray, cnt: int, ts: int) -> None:
        """The batch's entries (buf, numbered f.count + 1 .. cnt) into `f`; its end phys is the last one's."""
        last: int
        (last,) = _PHYS.unpack_from(buf, len(buf) - ENTRY.size + 4)
        self.entries += cnt - f.count
        f.commit(buf, cnt, last, ts)
        self.last_update_ts, self.last_update_phys = ts, last
        if cnt >= self._ahead_at:
            self.allocate_ahead()

    def _topic_crc(self, topic: str) -> int:
        crcs = self._crcs
        if len(crcs) > 4096:
            crcs.clear()
        c = crcs[topic] = crc32(f"{topic}#".encode())
        return c

    def _room(self, f: IndexFile | None, buf: bytearray, cnt: int, ts: int, phys: int) -> tuple[IndexFile, int, int]:
        """Commit what the batch wrote so far, then allocate the next chunk of `f` or rotate to a new
        IndexFile. Returns (file, count, allocated)."""
        if f is not None and cnt > f.count:
            self._commit(f, buf, cnt, ts)
            del buf[:]
        try:
            if f is not None and f.allocated < f.capacity:
                return f, cnt, f.allocate_more()
            nf = self._create(ts, phys)
            if not nf.allocated:  # (one made ahead has its first chunk)
                nf.allocate_more()
        except OSError as e:
            now = time.monotonic()
            if now - self._room_error_at > 60.0:
                self._room_error_at = now
                log.error("index.no_room", error=str(e), directory=self.directory)
            raise _NoRoom from e
        if f is not None:
            log.info("index.file_rotated", full=f.path, entries=f.count, new=nf.path)
        return nf, 0, nf.allocated

    def _create(self, ts: int, phys: int) -> IndexFile:
        """The next IndexFile: the one made ahead if it is ready (renamed, its header written), else made
        here. Raises OSError (ENOSPC on a full disk)."""
        ms = int(time.time() * 1000)
        if self.files:
            ms = max(ms, name_ms(os.path.basename(self.files[-1].path)) + 1)
        path = os.path.join(self.directory, file_name(ms))
        f = self.ahead.take(NEXT)
        if f is None:
            f = IndexFile.create(path, self.slot_num, self.index_num, ts, phys)
        else:
            try:
                os.rename(f.path, path)
            except BaseException:
                f.destroy()
                raise
            f.path = path
            f.begin_ts = f.end_ts = ts
            f.begin_phys = f.end_phys = phys
            f.write_header()
        self.files.append(f)
        self._ahead_at = f.capacity >> 1 if self.ahead.pool is not None else _NEVER
        return f

    def allocate_ahead(self) -> None:
        """Ask for the next IndexFile to be made on the pool: now when there is no file or the active one
        is half full, else once it is (`_commit` checks `_ahead_at`). Called after load and by `_commit`."""
        f = self.files[-1] if self.files else None
        if self.ahead.pool is None:
            self._ahead_at = _NEVER
        elif f is not None and f.count < f.capacity >> 1:
            self._ahead_at = f.capacity >> 1
        else:
            self._ahead_at = _NEVER  # asked for: again once the next file is the active one (`_create`)
            path, slots, num = os.path.join(self.directory, AHEAD_NAME), self.slot_num, self.index_num
            self.ahead.request(NEXT, lambda: _make_ahead(path, slots, num))

    # ---- query ----------------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_num: int, begin: int, end: int, min_phys: int) -> list[tuple[int, int, int]]:
        """Newest `max_num` (phys, size, storeTs) with begin <= storeTs <= end, returned oldest first."""
        h = crc32(f"{topic}#{key}".encode())
        out: list[tuple[int, int, int]] = []
        seen: set[int] = set()
        for f in reversed(self.files):
            if f.end_phys < min_phys:
                break
            base = f.begin_ts
            for phys, size, tdiff in f.chain(h):
                if phys < min_phys:
                    break
                t0 = base + tdiff * 1000  # the entry's store second: [t0, t0 + 999]
                if t0 > end or t0 + 999 < begin or phys in seen:
                    continue
                seen.add(phys)
                ts = self._verify(phys, size, topic, key)
                if ts is not None and begin <= ts <= end:
                    out.append((phys, size, ts))
                    if len(out) >= max_num:
                        out.reverse()
                        return out
        out.reverse()
        return out

    def _verify(self, phys: int, size: int, topic: str, key: str) -> int | None:
        """The store timestamp of the record at `phys` if it is in `topic` and carries `key`."""
        if self.read_record is None:
            return None
        try:
            view = self.read_record(phys, size)
            if view is None or R.read_topic(view) != topic:
                return None
            props = R.parse_properties(R.read_properties_bytes(view))
            if key not in index_keys(props.get(_KEYS), props.get(_UNIQ_KEY)):
                return None
            return R.read_store_timestamp(view)
        except (CodecError, struct.error, ValueError, IndexError):
            return None

    # ---- flush ----------------------------------------------------------------------------------
    def take_pending(self) -> list[tuple[IndexFile, int, bool]]:
        """On the loop thread: the flush plan, (file, entry count, no longer written) for every file
        written since its last flush. Make it durable with `write` (any thread)."""
        files = self.files
        active = files[-1] if files else None
        return [(f, f.count, f is not active) for f in files if f.count > f.flushed_count]

    def write(self, plan: list[tuple[IndexFile, int, bool]]) -> None:
        """fdatasync the planned files and drop their flushed entry pages from this process (rotated
        files entirely); every SWEEP_INTERVAL_S also pages that queries faulted back in."""
        now = time.monotonic()
        sweep = now - self._swept_at >= SWEEP_INTERVAL_S
        if sweep:
            self._swept_at = now
        for f, count, done in plan:
            f.sync(count, done, sweep)

    def flush(self) -> None:
        self.write(self.take_pending())

    # ---- retention / close ------------------------------------------------------------------------
    def delete_below(self, min_phys: int) -> list[str]:
        """Delete the IndexFiles (not the active one) whose every entry points below `min_phys`."""
        gone = []
        while len(self.files) > 1 and self.files[0].end_phys < min_phys:
            f = self.files.pop(0)
            self.entries -= f.count
            f.destroy()
            gone.append(f.path)
        if gone:
            log.info("retention.index_deleted", files=gone, commitlog_min_offset=min_phys)
        return gone

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
        self.ahead.close()  # waits for the pool: a file it made and nobody took is removed


def _make_ahead(path: str, slot_num: int, index_num: int) -> IndexFile:
    """On the allocate pool: an IndexFile with its header and slot pages and first entry chunk reserved;
    its name, begin timestamp and begin offset are set when it is taken (`IndexService._create`)."""
    f = IndexFile.create(path, slot_num, index_num, 0, 0)
    try:
        f.allocate_more()
    except BaseException:
        f.destroy()
        raise
    return f
