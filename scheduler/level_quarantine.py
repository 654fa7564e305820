"""A delay level's poison schedule records (scheduler.quarantine, stage "level"): a record the delivery
batch cannot be built from, a readable one without REAL_TOPIC, and a delivery the store refuses for
good (GIVE_UP) are set aside in rmq_sys_SCHEDULE_QUARANTINE; a half message or an unreadable record is
skipped (as RocketMQ does)."""

from __future__ import annotations

import structlog

from codec.codes import RMQ_SYS_TRANS_HALF_TOPIC
from codec.delivery_batch import DeliveryBatch, build_delivery_batch
from codec.errors import CodecError
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes
from scheduler.quarantine import LEVEL, Quarantine
from scheduler.stats import LevelStats
from scheduler.store_port import StorePort
from storage.store_types import PutStatus

log = structlog.get_logger(__name__)

Raws = list[memoryview | None]  # schedule records read for a pass (None: gone or set aside)
HALF_TOPIC = RMQ_SYS_TRANS_HALF_TOPIC
_REAL_TOPIC = MessageConst.REAL_TOPIC


class LevelQuarantine:
    __slots__ = ("level", "quarantine", "store", "stats")

    def __init__(self, level: int, quarantine: Quarantine, store: StorePort, stats: LevelStats) -> None:
        self.level = level
        self.quarantine = quarantine
        self.store = store
        self.stats = stats

    def build(self, raws: Raws, phys: list[int], base: int) -> DeliveryBatch:
        """The delivery batch of a pass (codec.delivery_batch: unreadable, no REAL_TOPIC, half message:
        dropped), with its poison records set aside and its dropped ones skipped or set aside; a record
        set aside while building becomes None in `raws` (the pass's own list)."""
        try:
            batch = build_delivery_batch(raws, HALF_TOPIC)
        except CodecError:  # a malformed record: set it aside, the rest of the batch goes on
            batch = self._isolate(raws, phys, base)
        if batch.dropped:
            self._drop(batch, raws, phys, base)
        return batch

    def _isolate(self, raws: Raws, phys: list[int], base: int) -> DeliveryBatch:
        """build_delivery_batch failed on the batch: quarantine each record it fails on, build the rest."""
        for i, raw in enumerate(raws):
            if raw is None:
                continue
            try:
                build_delivery_batch((raw,))
            except CodecError as e:
                self._set_aside(raw, f"cannot convert: {e}", phys[i], base + i)
                raws[i] = None
                self.stats.quarantined += 1
        return build_delivery_batch(raws, HALF_TOPIC)

    def _drop(self, batch: DeliveryBatch, raws: Raws, phys: list[int], base: int) -> None:
        """Dropped records: a half message or an unreadable one is skipped (as RocketMQ does); a
        readable record without REAL_TOPIC cannot be delivered anywhere and is quarantined."""
        skipped = 0
        for i in batch.dropped:
            raw = raws[i]
            if raw is None:
                skipped += 1
                continue
            if parse_properties(read_properties_bytes(raw, 0)).get(_REAL_TOPIC):
                skipped += 1  # a transactional half message: never delivered from a delay level
                continue
            self._set_aside(raw, "no REAL_TOPIC", phys[i], base + i)
            self.stats.quarantined += 1
        if skipped:
            self.stats.skipped += skipped
            log.warning("delay.skip_unreadable", level=self.level, count=skipped, offset=base)

    def _set_aside(self, raw: memoryview, reason: str, phys: int, offset: int) -> None:
        """Quarantine one schedule record; a quarantine put that may pass later (disk full) raises,
        so the supervisor backs off and the pass is tried again (nothing was put for it yet)."""
        if not self.quarantine.set_aside(raw, reason, LEVEL, phys, level=self.level, offset=offset):
            raise RuntimeError(f"quarantine put failed for schedule offset {offset}: try again")

    def refused(self, raw: memoryview, status: PutStatus, phys: int, topic: str) -> bool:
        """A delivery of `raw` the store refused for good (`status` in GIVE_UP): True when set aside;
        False (the quarantine put failed too): keep resending."""
        if self.quarantine.set_aside(raw, f"delivery refused by the store: {status.name}", LEVEL, phys,
                                     level=self.level, topic=topic):
            self.stats.quarantined += 1
            return True
        return False

    def refused_at(self, phys: int, size: int, why: str, offset: int) -> bool:
        """Quarantine the schedule record at `phys` that cannot be delivered (True when set aside;
        False: keep resending, e.g. the quarantine put hit a full disk)."""
        raw = self.store.read_record(phys, size)
        if raw is None:
            return False
        if self.quarantine.set_aside(raw, why, LEVEL, phys, level=self.level, offset=offset):
            self.stats.quarantined += 1
            return True
        return False
