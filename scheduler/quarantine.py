"""Poison scheduled records are set aside, never allowed to stop the others.

A schedule or timer record that cannot be converted (a malformed record, properties over 32,767
bytes once delivery adds its own, a non-numeric TIMER_ROLL_TIMES, an absurd TIMER_OUT_MS, ...) or
that the store refuses for good (MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED: e.g. a body that
exceeds maxMessageSize only with the real topic and the delivery's properties) is copied to
rmq_sys_SCHEDULE_QUARANTINE queue 0 (codec.quarantine: the reason and stage as properties), logged
once (`schedule.quarantined`) and counted per stage (`delaymq_schedule_quarantined_total{stage}`);
the rest of its batch and slot go on. `set_aside` returns False only when the quarantine put itself
failed for a reason that may pass (disk full, store not running): the caller keeps the record and
tries again later, so nothing is lost.
"""

from __future__ import annotations

import structlog

from codec.buffers import BytesLike
from codec.codes import SCHEDULE_QUARANTINE_TOPIC
from codec.quarantine import build_quarantine_record
from scheduler.store_port import StorePort
from storage.store_types import PutRequest, PutStatus

log = structlog.get_logger(__name__)

LEVEL, TIMER_ENQUEUE, TIMER_DEQUEUE = "level", "timer_enqueue", "timer_dequeue"
GIVE_UP = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED})  # a retry cannot help


class Quarantine:
    def __init__(self, store: StorePort) -> None:
        self.store = store
        self.counts: dict[str, int] = {LEVEL: 0, TIMER_ENQUEUE: 0, TIMER_DEQUEUE: 0}
        self.lost = 0  # records even the quarantine copy could not be stored for (logged)

    def set_aside(self, raw: BytesLike, reason: str, stage: str, origin_offset: int, **context: object) -> bool:
        """Put the quarantine copy of `raw` (True when stored, or when it never can be: logged and
        counted as lost); False when the put failed for a reason that may pass: try again later."""
        rec, keys = build_quarantine_record(raw, reason, stage, origin_offset, self.store.config.max_message_size)
        [res] = self.store.put([PutRequest(rec, SCHEDULE_QUARANTINE_TOPIC, 0, 0, keys, -1)])
        if res.status is PutStatus.PUT_OK:
            self.counts[stage] = self.counts.get(stage, 0) + 1
            log.error("schedule.quarantined", stage=stage, reason=reason, origin_offset=origin_offset,
                      quarantine_offset=res.phys_offset, **context)
            return True
        if res.status in GIVE_UP:
            self.lost += 1
            log.error("schedule.quarantine_refused", stage=stage, reason=reason, origin_offset=origin_offset,
                      status=res.status.name, **context)
            return True
        log.warning("schedule.quarantine_put_failed", stage=stage, origin_offset=origin_offset,
                    status=res.status.name, **context)
        return False

    def stats(self) -> dict[str, int]:
        """Records set aside, by stage: open-ended (only the stages that have set some aside appear; the
        exporters label a sample per key)."""
        return dict(self.counts)
