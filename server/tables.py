"""Persistent broker tables under `<store>/config/` (RocketMQ file names and shapes).

`JsonTable(path, root_key)` loads/saves `{root_key: {...}, "dataVersion": {...}}` atomically
(temp file, fsync, rename). Used for topics.json, subscriptionGroup.json and consumerOffset.json
unless storage provides its own table.
"""

from __future__ import annotations

import json
import os
import time

import structlog

log = structlog.get_logger(__name__)


def atomic_write_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    data = json.dumps(obj, sort_keys=True, indent=1).encode()
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path):
        try:
            os.replace(path, f"{path}.bak")
        except OSError:
            pass
    os.replace(tmp, path)


def read_json(path: str):
    for p in (path, f"{path}.bak"):
        try:
            with open(p, "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            continue
        except ValueError as e:
            log.warning("tables.corrupt_file", path=p, error=str(e))
            continue
    return None


class JsonTable:
    def __init__(self, path: str, root_key: str) -> None:
        self.path = path
        self.root_key = root_key
        self.counter = 0

    def load(self) -> dict:
        doc = read_json(self.path)
        if not isinstance(doc, dict):
            return {}
        self.counter = int((doc.get("dataVersion") or {}).get("counter") or 0)
        table = doc.get(self.root_key)
        return table if isinstance(table, dict) else {}

    def save(self, table: dict) -> None:
        self.counter += 1
        atomic_write_json(self.path, {
            self.root_key: table,
            "dataVersion": {"counter": self.counter, "timestamp": int(time.time() * 1000)},
        })
