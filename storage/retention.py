"""Retention (`Retention`, a part of MessageStore): delete CommitLog segments older than `file_reserved_time_hours`
(by the segment's last modification, i.e. its last store time), oldest first, never the active one;
then advance ConsumeQueue min offsets past the new CommitLog min and delete CQ files wholly below it,
and delete the IndexFiles whose endPhyOffset is below it (queries skip older entries of the others). Files kept
beside a ConsumeQueue (its `queue_listeners`) are told its new min offset."""

from __future__ import annotations

import time

import structlog

from storage.commitlog import CommitLog
from storage.consume_queue_table import ConsumeQueueTable
from storage.index import IndexService
from storage.store_status import RunState
from storage.store_types import QueueFilesListener, StoreConfig

log = structlog.get_logger(__name__)


class Retention:
    def __init__(self, config: StoreConfig, commitlog: CommitLog, queues: ConsumeQueueTable, index: IndexService,
                 run: RunState) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.run = run
        self.queue_listeners: list[QueueFilesListener] = []  # files beside the ConsumeQueue (storage.filter_bitmap)

    def clean_expired(self, now: float | None = None) -> list[str]:
        """Delete expired segments; `now` is epoch seconds (default: the current time). Returns the
        deleted CommitLog file paths."""
        if not self.run.loaded:
            return []
        now = time.time() if now is None else now
        keep_s = self.config.file_reserved_time_hours * 3600.0
        files = self.commitlog.queue.files
        expired = 0
        for mf in files[:-1]:  # never the active segment
            if now - mf.last_modified() < keep_s:
                break
            if mf.flushed_pos < mf.wrote_pos:
                mf.flush()
            expired += 1
        if not expired:
            return []
        deleted = self.commitlog.queue.delete_first(expired)
        new_min = self.commitlog.min_offset
        for cq in self.queues.queues.values():
            before = cq.min_offset
            cq.correct_min_offset(new_min)
            if cq.min_offset != before:
                log.info("retention.consume_queue_min_advanced", topic=cq.topic, queue_id=cq.queue_id,
                         min_offset=cq.min_offset)
                for listener in self.queue_listeners:
                    listener.trimmed(cq.topic, cq.queue_id, cq.min_offset)
        log.info("retention.commitlog_deleted", files=deleted, commitlog_min_offset=new_min)
        self.index.delete_below(new_min)
        return deleted
