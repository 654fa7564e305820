"""Making the scheduler's mapped files durable without holding the event loop.

`mmap.flush()` (msync) keeps the GIL for the whole call, so an msync that waits on the disk (a journal
commit: tens of ms) stalls the loop even from an executor thread. `os.fdatasync` releases the GIL, and
on Linux it writes back the same dirty pages of a shared file mapping (msync(MS_SYNC) is a range fsync
there). A flush therefore takes `dup`s of the files' descriptors on the loop (so a file closed or
deleted meanwhile cannot turn the descriptor into another file's) and syncs them in a thread.
"""

from __future__ import annotations

import os


def sync_and_close(fds: list[int]) -> None:
    """fdatasync each descriptor, then close it (all are closed, even after a failure; the first
    failure is raised)."""
    try:
        for fd in fds:
            os.fdatasync(fd)
    finally:
        for fd in fds:
            os.close(fd)
