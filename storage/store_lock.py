"""The store lock: one broker per store directory (RocketMQ's `<storePathRootDir>/lock`).

`StoreLock(root).acquire()` takes an exclusive, non-blocking fcntl (POSIX record) lock on
`<root>/lock` and writes `pid=<pid> host=<hostname>` into it; the lock lives as long as the file
descriptor (the kernel drops it when the process dies, kill -9 included, so there is no stale-lock
cleanup). A second process on the same store gets `StoreLockedError` naming the holder read from the
file, before it has opened or touched anything else of the store (the `abort` marker included).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket

LOCK_NAME = "lock"


class StoreLockedError(RuntimeError):
    """Another process holds the store lock; `holder` is what it wrote into the lock file."""

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(f"store {os.path.dirname(path)} is locked by another broker ({holder or 'holder unknown'});"
                         f" lock file {path}")
        self.path = path
        self.holder = holder


class StoreLock:
    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, LOCK_NAME)
        self.fd = -1

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def acquire(self) -> None:
        if self.fd >= 0:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = ""
            try:
                holder = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
            except OSError:
                pass
            os.close(fd)
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise StoreLockedError(self.path, holder) from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode(), 0)
        except OSError:
            pass  # a full disk must not stop the start: the lock itself is what matters
        self.fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays: a holder's contents are only informative)."""
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        try:
            fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
