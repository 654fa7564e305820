"""Store checkpoint and the clean-shutdown marker.

`<store>/checkpoint` (JSON, atomic): `commitlogFlushedOffset` (every byte below it was fsynced),
`logicsFlushedOffset` (ConsumeQueue units for every record below it were flushed), `indexOffset`
(index entries for every record below it are in the IndexFiles, fdatasynced), `timestamp`.
`<store>/abort` exists while the store is open; finding it at load means the last run crashed
(RocketMQ's `abort` file), so recovery scans instead of trusting the checkpoint.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from storage.config_store import atomic_write_json, read_json


@dataclass(slots=True)
class Checkpoint:
    commitlog_flushed_offset: int = 0
    logics_flushed_offset: int = 0
    index_offset: int = 0
    timestamp: int = 0


class CheckpointFile:
    def __init__(self, store_path: str) -> None:
        self.path = os.path.join(store_path, "checkpoint")
        self.abort_path = os.path.join(store_path, "abort")
        self._lock = threading.Lock()  # the periodic flusher writes from an executor thread

    def read(self) -> Checkpoint | None:
        doc = read_json(self.path)
        if not isinstance(doc, dict):
            return None
        return Checkpoint(int(doc.get("commitlogFlushedOffset", 0)), int(doc.get("logicsFlushedOffset", 0)),
                          int(doc.get("indexOffset", 0)), int(doc.get("timestamp", 0)))

    def write(self, cp: Checkpoint) -> None:
        cp.timestamp = int(time.time() * 1000)
        with self._lock:
            self._write(cp)

    def _write(self, cp: Checkpoint) -> None:
        atomic_write_json(self.path, {
            "commitlogFlushedOffset": cp.commitlog_flushed_offset,
            "logicsFlushedOffset": cp.logics_flushed_offset,
            "indexOffset": cp.index_offset,
            "timestamp": cp.timestamp,
        })

    # ---- abort marker ---------------------------------------------------------------------------
    def crashed_last_time(self) -> bool:
        return os.path.exists(self.abort_path)

    def mark_running(self) -> None:
        fd = os.open(self.abort_path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mark_clean(self) -> None:
        try:
            os.unlink(self.abort_path)
        except FileNotFoundError:
            pass
