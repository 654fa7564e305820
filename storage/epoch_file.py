"""The epoch file of RocketMQ 5's controller mode (`epochFileCheckpoint` in the store root; Apache's
EpochFileCache, cluster-ha.md §4.6): one entry (epoch, startOffset) per master term, in order, each
epoch's CommitLog range ending where the next begins (the last one at the CommitLog end).

- A broker becoming master appends (masterEpoch, its CommitLog end), after dropping entries of that
  epoch or later (`begin_epoch`).
- A slave appends the master's (epoch, epochStartOffset) when a transfer header names a new epoch
  (`append`), and after the handshake cuts its CommitLog to `consistent_point(mine, my end, master's,
  master's end)` -- the end of the newest epoch both hold with the same start -- and its entries past it
  (`truncate_suffix_by_offset`).

The file is the codec's layout (codec.autoswitch_ha) written atomically with a `.bak` of the previous
one, which is read when the file is missing or damaged, as Apache does. No network, no scheduler.
"""

from __future__ import annotations

import os

import structlog

from codec.autoswitch_ha import EPOCH_FILE, EpochEntry, decode_epoch_file, encode_epoch_file
from codec.errors import CodecError
from storage.config_store import atomic_write_bytes

log = structlog.get_logger(__name__)

NO_END = (1 << 63) - 1  # Long.MAX_VALUE: the open end of the last epoch


def consistent_point(local: list[EpochEntry], local_end: int, master: list[EpochEntry], master_end: int) -> int:
    """findConsistentPoint: walking the local epochs newest first, the first one the master holds with
    the same start offset gives min(its local end, its master end); -1 when there is none.

    Two cases where there is no common epoch but a safe point (Apache refuses both; its new master keeps an
    epoch that holds no byte instead of replacing it, `EpochFile.begin_epoch` replaces it): a slave holding
    no byte is consistent at 0, and so is any slave whose every epoch is older than the master's newest
    when the master's log starts at 0 (the master's first epoch replaced one that held no byte there, so
    none of the slave's bytes are the master's: all are cut and replicated again)."""
    if local_end == 0:
        return 0
    m_index = {e.epoch: i for i, e in enumerate(master)}
    for i in range(len(local) - 1, -1, -1):
        e = local[i]
        j = m_index.get(e.epoch)
        if j is None or master[j].start_offset != e.start_offset:
            continue
        l_end = local[i + 1].start_offset if i + 1 < len(local) else local_end
        m_end = master[j + 1].start_offset if j + 1 < len(master) else master_end
        return min(l_end, m_end)
    if master and master[0].start_offset == 0 and local and local[-1].epoch < master[-1].epoch:
        return 0
    return -1


class EpochFile:
    def __init__(self, store_root: str) -> None:
        self.path = os.path.join(store_root, EPOCH_FILE)
        self.entries: list[EpochEntry] = []

    def load(self) -> list[EpochEntry]:
        for path in (self.path, self.path + ".bak"):
            try:
                with open(path, encoding="utf-8") as f:
                    entries = decode_epoch_file(f.read())
            except FileNotFoundError:
                continue
            except (CodecError, OSError, UnicodeDecodeError) as e:
                log.warning("epoch_file.unreadable", file=path, error=str(e))
                continue
            if entries:
                self.entries = entries
                return entries
        self.entries = []
        return self.entries

    def _flush(self) -> None:
        if self.entries:  # Apache writes nothing for an empty cache
            atomic_write_bytes(self.path, encode_epoch_file(self.entries).encode())

    # ---- reads ---------------------------------------------------------------------------------
    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else -1

    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    def first(self) -> EpochEntry | None:
        return self.entries[0] if self.entries else None

    def get(self, epoch: int) -> EpochEntry | None:
        for e in self.entries:
            if e.epoch == epoch:
                return e
        return None

    def end_of(self, epoch: int) -> int:
        """Where `epoch`'s range ends: the next entry's start, NO_END for the last (or an unknown) one."""
        for i, e in enumerate(self.entries):
            if e.epoch == epoch:
                return self.entries[i + 1].start_offset if i + 1 < len(self.entries) else NO_END
        return NO_END

    def next_after(self, epoch: int) -> EpochEntry | None:
        for e in self.entries:
            if e.epoch > epoch:
                return e
        return None

    def find_by_offset(self, offset: int) -> EpochEntry | None:
        """The epoch whose range [start, end) holds `offset`."""
        for i, e in enumerate(self.entries):
            end = self.entries[i + 1].start_offset if i + 1 < len(self.entries) else NO_END
            if e.start_offset <= offset < end:
                return e
        return None

    # ---- writes --------------------------------------------------------------------------------
    def append(self, entry: EpochEntry) -> bool:
        """Add a newer epoch starting at or past the last one's start (one starting at the same offset
        replaces it: that epoch holds no byte); False (nothing written) otherwise."""
        last = self.last()
        if last == entry:
            return True
        if last is not None and (last.epoch >= entry.epoch or last.start_offset > entry.start_offset):
            log.error("epoch_file.append_refused", entry=tuple(entry), last=tuple(last))
            return False
        if last is not None and last.start_offset == entry.start_offset:
            self.entries.pop()
        self.entries.append(entry)
        self._flush()
        return True

    def begin_epoch(self, epoch: int, start_offset: int) -> None:
        """changeToMaster: entries of `epoch` or later go, then (epoch, start_offset) is appended (an
        entry starting at the same offset as the new one is replaced: that epoch wrote nothing). The
        master of the last epoch again (a restart the controller did not see) keeps that epoch's start:
        its bytes from there are that epoch's, as its slaves' files say."""
        last = self.last()
        if last is not None and last.epoch == epoch and last.start_offset <= start_offset:
            return
        self.entries = [e for e in self.entries if e.epoch < epoch and e.start_offset < start_offset]
        self.entries.append(EpochEntry(epoch, start_offset))
        self._flush()

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Entries starting at or past `offset` go (the CommitLog was cut there)."""
        kept = [e for e in self.entries if e.start_offset < offset]
        if kept != self.entries:
            self.entries = kept
            self._flush_or_remove()

    def _flush_or_remove(self) -> None:
        if self.entries:
            self._flush()
            return
        for path in (self.path, self.path + ".bak"):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
