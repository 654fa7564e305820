"""timercheck: `<storeRoot>/config/timercheck`, 4096 bytes mmapped (scheduled-messages.md §4.4).

The fields (lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset and
dataVersion's stateVersion, timestamp, counter) are laid out by codec.timer_layout.CHECK.
"""

from __future__ import annotations

import mmap
import os

from codec.timer_layout import CHECK, CHECK_FIELD
from storage.mapped_file import reserve_blocks

FILE_SIZE = 4096



def checkpoint_path(root: str) -> str:
    return os.path.join(root, "config", "timercheck")

class TimerCheckpoint:
    def __init__(self, root: str) -> None:
        self.path = checkpoint_path(root)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.existed = os.fstat(fd).st_size == FILE_SIZE
            reserve_blocks(fd, FILE_SIZE)  # written through the map: blocks first (no SIGBUS)
            self.mm = mmap.mmap(fd, FILE_SIZE)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd  # kept for fdatasync (scheduler.durable)
        (self.last_read_time_ms, self.last_timerlog_flush_pos, self.last_timer_queue_offset,
         self.master_timer_queue_offset, self.state_version, self.data_timestamp,
         self.data_counter) = CHECK.unpack_from(self.mm, 0)

    def write(self, read_time_ms: int, flush_pos: int, queue_offset: int, now_ms: int) -> None:
        """Record and make durable (the flush in a thread: `record`, then sync_and_close([sync_fd()]))."""
        self.record(read_time_ms, flush_pos, queue_offset, now_ms)
        os.fdatasync(self.fd)

    def record(self, read_time_ms: int, flush_pos: int, queue_offset: int, now_ms: int) -> None:
        """Write the fields into the mapping (a kill -9 keeps them; a power loss needs the sync)."""
        self.last_read_time_ms = read_time_ms
        self.last_timerlog_flush_pos = flush_pos
        self.last_timer_queue_offset = queue_offset
        self.master_timer_queue_offset = queue_offset
        self.data_counter += 1
        self.data_timestamp = now_ms
        CHECK.pack_into(self.mm, 0, read_time_ms, flush_pos, queue_offset, queue_offset, self.state_version,
                        now_ms, self.data_counter)

    def sync_fd(self) -> int:
        return os.dup(self.fd)

    def set_read_time(self, read_time_ms: int) -> None:
        """Record the read clock in the mapping at once (survives kill -9; msync'd by the next write)."""
        self.last_read_time_ms = read_time_ms
        CHECK_FIELD.pack_into(self.mm, 0, read_time_ms)

    def close(self) -> None:
        try:
            self.mm.close()
        finally:
            os.close(self.fd)
