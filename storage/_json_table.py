"""Shared base of the persistent config tables: `{<root>: {...}, "dataVersion": {...}}` files written
atomically (config_store) under `<store>/config/`, with RocketMQ's DataVersion shape."""

from __future__ import annotations

import errno
import os
import time

import structlog

from storage.config_store import atomic_write_json, read_json

log = structlog.get_logger(__name__)


class JsonTableFile:
    def __init__(self, store_path: str, file_name: str, root_key: str) -> None:
        self.path = os.path.join(store_path, "config", file_name)
        self.root_key = root_key
        self.counter = 0
        self.timestamp = 0

    def read(self) -> dict:
        doc = read_json(self.path)
        if not isinstance(doc, dict):
            return {}
        dv = doc.get("dataVersion") or {}
        self.counter = int(dv.get("counter") or 0)
        self.timestamp = int(dv.get("timestamp") or 0)
        table = doc.get(self.root_key)
        return table if isinstance(table, dict) else {}

    def bump(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def write(self, table: dict, extra: dict | None = None) -> None:
        doc = {self.root_key: table}
        if extra:
            doc.update(extra)
        doc["dataVersion"] = {"counter": self.counter, "timestamp": self.timestamp}
        try:
            atomic_write_json(self.path, doc)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # a full disk: the table keeps serving from memory, the previous file stays whole, and the
            # next write (any change, or shutdown) writes it all again
            log.error("config_table.write_failed", path=self.path, error=str(e))
