"""One-time migration of the previous key index format into IndexFiles (storage/index.py).

The old `<store>/index/keys.idx` was an append-only list of entries
`[int64 physOffset][int32 size][int64 storeTimestamp][int16 keyLen][key UTF-8 "topic#key"]` in CommitLog
order, read whole into a dict at every load. `migrate` streams it into the IndexService (entries with the
same store time in one `add_batch`), stopping at the first torn entry or the first one whose record is
not wholly below the CommitLog end, makes the new files durable, then removes keys.idx. A crash before
the removal leaves keys.idx in place: the next load deletes the half-built IndexFiles and starts over.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import structlog

from storage.store_types import IndexEntry

log = structlog.get_logger(__name__)

OLD_NAME = "keys.idx"
_HEAD = struct.Struct(">qiqh")
_CHUNK = 16 << 20


def _entries(path: str, commitlog_max: int, stats: dict[str, str]) -> Iterator[tuple[str, bytes, int, int, int]]:
    """(topic, key bytes, phys, size, ts) of the old file's sound entries, in order."""
    head, hsize = _HEAD.unpack_from, _HEAD.size
    with open(path, "rb") as fh:
        data = b""
        done = 0
        while True:
            more = fh.read(_CHUNK)
            data = data[done:] + more
            done, n = 0, len(data)
            while done + hsize <= n:
                phys, size, ts, klen = head(data, done)
                end = done + hsize + klen
                if klen < 0 or phys < 0 or size <= 0 or phys + size > commitlog_max:
                    stats["stopped"] = "entry past the CommitLog end" if klen >= 0 else "bad entry"
                    return
                if end > n:
                    break
                key = data[done + hsize:end]
                i = key.find(b"#")
                if i > 0:
                    yield key[:i].decode("utf-8", "replace"), key[i + 1:], phys, size, ts
                done = end
            if not more:
                if done < n:
                    stats["stopped"] = "torn tail"
                return


class MigrationTarget(Protocol):
    """What the migration adds the old entries to (storage.index.IndexService)."""

    @property
    def entries(self) -> int: ...

    @property
    def files(self) -> Sequence[object]: ...

    def add_batch(self, entries: Iterable[IndexEntry], ts: int) -> None: ...

    def flush(self) -> None: ...


def migrate(index: MigrationTarget, path: str, commitlog_max: int) -> int:
    """Re-add the entries of the old keys.idx at `path` into `index`, flush, remove the file."""
    t0 = time.monotonic()
    stats: dict[str, str] = {}
    n = 0
    batch: list[IndexEntry] = []
    batch_ts = 0  # the batch's store time (read only once the batch holds an entry)
    for topic, key, phys, size, ts in _entries(path, commitlog_max, stats):
        if ts != batch_ts and batch:
            index.add_batch(batch, batch_ts)
            batch = []
        batch_ts = ts
        batch.append((topic, (key,), phys, size))
        n += 1
    if batch:
        index.add_batch(batch, batch_ts)
    index.flush()
    os.unlink(path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    log.warning("index.migrated", old_file=path, keys=n, entries=index.entries, files=len(index.files),
                seconds=round(time.monotonic() - t0, 3), **stats)
    return n
