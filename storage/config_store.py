"""Atomic JSON files (RocketMQ ConfigManager style): write a temp file, fsync it, keep the previous
version as `<name>.bak`, rename the temp file into place, fsync the directory. Reads fall back to
`.bak` when the primary file is missing or unreadable."""

from __future__ import annotations

import json
import os
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)  # a full disk: give the partial copy's blocks back; the old file stays
        except OSError:
            pass
        raise
    os.close(fd)
    if os.path.exists(path):
        os.replace(path, f"{path}.bak")
    os.replace(tmp, path)
    _fsync_dir(directory)


def atomic_write_json(path: str, obj: object) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=False).encode("utf-8"))


def read_json(path: str) -> Any:
    """The parsed content of `path`, else of `path.bak`, else None."""
    for candidate in (path, f"{path}.bak"):
        try:
            with open(candidate, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            continue
        try:
            return json.loads(raw)
        except ValueError as e:
            log.warning("config_store.unreadable", path=candidate, error=str(e))
    return None


class ConfigFile:
    """One small JSON state file at `path`: `read()` (the file, else its `.bak`, else None) and
    `write(obj)` (atomic: tmp + fsync + .bak + rename)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> Any:
        return read_json(self.path)

    def write(self, obj: object) -> None:
        atomic_write_json(self.path, obj)
