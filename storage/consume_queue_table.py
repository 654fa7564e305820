"""The ConsumeQueue table (RocketMQ's consumeQueueTable): every (topic, queue id)'s ConsumeQueue under
`consumequeue/`, and each one's next queue offset (`offsets`, what the next put of that queue gets).
The put paths reserve room (`room`) before anything is stored and write one run of units per queue
(`write_units`); recovery loads and rebuilds it; a deleted topic's queues go with `delete_topic`."""

from __future__ import annotations

import os
import shutil
import time
from typing import Literal, overload

import structlog

from codec.buffers import BytesLike
from codec.consume_queue_unit import UNIT_SIZE
from storage.consume_queue import ConsumeQueue

log = structlog.get_logger(__name__)


class ConsumeQueueTable:
    def __init__(self, root: str, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.offsets: dict[tuple[str, int], int] = {}  # next queue offset per queue
        self._space_logged_at = 0.0  # the last "no room for a ConsumeQueue file" log (rate limit)

    @overload
    def get(self, topic: str, queue_id: int, create: Literal[True]) -> ConsumeQueue: ...

    @overload
    def get(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...

    def get(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None and create:
            cq = ConsumeQueue(self.root, topic, queue_id, self.file_size)
            self.queues[key] = cq
        return cq

    def load(self) -> None:
        """Open every ConsumeQueue found under the root (recovery)."""
        if not os.path.isdir(self.root):
            return
        for topic in sorted(os.listdir(self.root)):
            tdir = os.path.join(self.root, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if not qid.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(self.root, topic, int(qid), self.file_size)
                cq.load()
                self.queues[(topic, int(qid))] = cq

    def reset_offsets(self) -> None:
        """Each queue's next offset from its units (after recovery or a replica cut)."""
        self.offsets = {key: cq.max_offset for key, cq in self.queues.items()}

    def room(self, key: tuple[str, int], first: int, count: int) -> OSError | None:
        """Reserve the ConsumeQueue file `count` units from `first` need (see ConsumeQueue.ensure_room);
        the error when it cannot be made (a full disk)."""
        cq = self.get(key[0], key[1], create=True)
        try:
            cq.ensure_room(first, count)
        except OSError as e:
            now = time.monotonic()
            if now - self._space_logged_at > 10.0:
                self._space_logged_at = now
                log.error("store.consume_queue_no_room", topic=key[0], queue_id=key[1], error=str(e))
            return e
        return None

    def write_units(self, key: tuple[str, int], first: int, buf: BytesLike, max_end: int) -> None:
        """ConsumeQueue units of one put for one queue (one write), then its next offset."""
        cq = self.get(key[0], key[1], create=True)
        try:
            cq.put_units(first, buf, max_end)
        except OSError as e:  # the CommitLog has it; recovery rebuilds the units
            log.error("store.consume_queue_write_failed", topic=key[0], queue_id=key[1], error=str(e))
        self.offsets[key] = first + len(buf) // UNIT_SIZE

    def write_unit(self, key: tuple[str, int], first: int, unit: BytesLike, max_end: int) -> None:
        """`write_units` of one unit (ConsumeQueue.put_unit)."""
        cq = self.queues.get(key)
        if cq is None:
            cq = self.get(key[0], key[1], create=True)
        try:
            cq.put_unit(first, unit, max_end)
        except OSError as e:  # the CommitLog has it; recovery rebuilds the units
            log.error("store.consume_queue_write_failed", topic=key[0], queue_id=key[1], error=str(e))
        self.offsets[key] = first + 1

    def delete_topic(self, topic: str) -> int:
        """Forget a deleted topic's ConsumeQueues and remove their files (RocketMQ's cleanUnusedTopic).
        Returns the number of queues removed."""
        keys = [k for k in self.queues if k[0] == topic]
        for key in keys:
            cq = self.queues.pop(key)
            self.offsets.pop(key, None)
            try:
                cq.close()
            except BufferError:  # a reader still holds a view of its map: unmapped when that goes
                pass
        path = os.path.join(self.root, topic)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        return len(keys)
