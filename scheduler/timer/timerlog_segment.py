"""One timerlog segment file (scheduler/timer/timerlog.py holds the layout and the log): a
`<root>/timerlog/<20-digit start offset>` file with its blocks reserved, mapped whole; `zero_tail`
cuts a torn tail without copying it."""

from __future__ import annotations

import mmap
import os

import structlog

from storage.mapped_file import reserve_blocks

log = structlog.get_logger(__name__)


class Segment:
    __slots__ = ("start", "path", "fd", "mm", "dropped", "reserved")

    def __init__(self, path: str, start: int, size: int, create: bool = False) -> None:
        self.start = start
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_EXCL if create else 0), 0o644)
        self.reserved = True
        try:
            try:
                reserve_blocks(self.fd, size)
            except OSError:
                if create or os.fstat(self.fd).st_size != size:
                    raise
                # an existing file written sparse (before blocks were reserved) on a full disk: it can
                # be read; `reserve` is retried before anything is appended to it
                self.reserved = False
                log.warning("timerlog.segment_not_reserved", file=path)
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            if create:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise
        self.dropped = 0  # bytes already advised away

    def close(self) -> None:
        try:
            self.mm.close()
        finally:
            os.close(self.fd)

    def destroy(self) -> None:
        """Close and remove (a segment made ahead that nobody took)."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def zero_tail(seg: Segment, rel: int, size: int, step: int = 1 << 20) -> int:
    """Zero the non-zero bytes of seg from `rel` on, a chunk at a time (never a copy of the whole
    tail), with pwrite (a failed write is an OSError, not a SIGBUS). Returns the non-zero bytes."""
    cut = 0
    p = rel
    while p < size:
        n = min(step, size - p)
        with memoryview(seg.mm)[p:p + n] as chunk:
            zeros = bytes(chunk).count(0)
        if zeros != n:
            cut += n - zeros
            os.pwrite(seg.fd, bytes(n), p)
        p += n
    return cut


def segment_name(start: int) -> str:
    return f"{start:020d}"
