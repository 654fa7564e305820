"""What a delay level reports of its deliveries (`LevelReporter`, hung off the delivery strategies of
scheduler.delay_sync / scheduler.delay_async): the due / delivered events (what they carry from each
schedule record of a delivery batch, column by column, handed to listeners as
scheduler.events.EventColumns), the level's stats (delivered count, lateness) and the puts counted per
real topic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from codec.buffers import BytesLike
from codec.delivery_batch import DeliveryBatch
from codec.record import BORN_AND_STORE_TS, POS_BORN_TS, POS_SYS_FLAG
from scheduler.events import EventColumns, EventListener, PutObserver, count_puts, fire_columns
from scheduler.stats import LevelStats
from storage.store_types import PutStatus

PUT_OK = PutStatus.PUT_OK
_BORN_STORE_TS = BORN_AND_STORE_TS  # from POS_BORN_TS, by the BORNHOST_V6 bit


class DeliveryInfo(NamedTuple):
    """What one message's events carry from its schedule record."""

    store_ts: int  # the schedule record's store timestamp
    uniq_key: str
    born_ts: int


class EventInfos:
    """What the due / delivered events need from each delivery j of a batch (in `batch.source` order),
    column by column: real topic, schedule record store timestamp, UNIQ_KEY (bytes or None), born
    timestamp. `infos[j]` is one message's DeliveryInfo, for the per-message paths."""

    __slots__ = ("topics", "store_ts", "uniqs", "born_ts")

    def __init__(self, topics: list[str], store_ts: list[int], uniqs: list[bytes | None], born_ts: list[int]) -> None:
        self.topics, self.store_ts, self.uniqs, self.born_ts = topics, store_ts, uniqs, born_ts

    def __getitem__(self, j: int) -> DeliveryInfo:
        u = self.uniqs[j]
        return DeliveryInfo(self.store_ts[j], u.decode("utf-8", "replace") if u else "", self.born_ts[j])


def event_infos(raws: Sequence[BytesLike | None], batch: DeliveryBatch) -> EventInfos:
    """The event columns of a delivery batch, read once per message from its schedule record."""
    ts = _BORN_STORE_TS
    # (born, store) timestamps from 40; where STORETIMESTAMP is depends on SYSFLAG's BORNHOST_V6 bit
    pairs = [ts[(raw[POS_SYS_FLAG + 3] & 0x10) >> 4].unpack_from(raw, POS_BORN_TS)  # type: ignore[index, arg-type]  # batch.source names only records that were built (never None)
             for raw in map(raws.__getitem__, batch.source)]
    return EventInfos([d[0] for d in batch.dests], [p[1] for p in pairs], batch.uniqs, [p[0] for p in pairs])


@dataclass(frozen=True, slots=True)
class LevelEventHooks:
    """What every level reports to (scheduler.delay_service.DelayLevelService owns them)."""

    listeners: list[EventListener]  # the service's list: listeners added later are seen
    fire: Callable[..., None]  # one single event ("idle", "resend") to every listener: fire(event, **fields)
    msg_id_prefix: Callable[[], str]  # the store-host hex part of this broker's offset msgIds
    on_put: PutObserver  # deliveries count as puts of their real topics


class LevelReporter:
    """One level's stats, events and put counts."""

    __slots__ = ("level", "stats", "listeners", "fire", "on_put", "_msg_id_prefix")

    def __init__(self, level: int, hooks: LevelEventHooks) -> None:
        self.level = level
        self.stats = LevelStats(level)
        self.listeners = hooks.listeners
        self.fire = hooks.fire
        self.on_put = hooks.on_put
        self._msg_id_prefix = hooks.msg_id_prefix

    def event(self, event: str, **fields: Any) -> None:
        """A single event ("idle", "resend"), only when someone listens."""
        if self.listeners:
            self.fire(event, level=self.level, **fields)

    def delivered_run(self, dues: list[int], store_ts: int, phys: list[int], infos: EventInfos | None) -> None:
        """A run of messages stored whole at `store_ts` (dues and phys in delivery order)."""
        st = self.stats
        st.add_delivered(len(dues))
        st.observe_lateness([store_ts - due for due in dues])
        if infos is not None:
            self.fire_delivered(infos.topics, phys, infos, dues, store_ts)

    def delivered(self, due: int, info: DeliveryInfo | None, store_ts: int, phys: int, topic: str) -> None:
        """One delivered message; `info` = (schedule store ts, uniqKey, bornTs) with event listeners."""
        st = self.stats
        st.add_delivered(1)
        st.record_lateness(store_ts - due)
        if info is not None:
            self.fire_one(due, info, store_ts, phys, topic)

    def fire_one(self, due: int, info: DeliveryInfo, store_ts: int, phys: int, topic: str) -> None:
        stored, uniq, born = info
        fire_columns(self.listeners, "delivered", EventColumns(
            "level", self.level, self._msg_id_prefix(), [topic], [phys], [uniq], [born], [stored], [due], store_ts))

    def fire_delivered(self, topics: list[str], phys: list[int], infos: EventInfos, dues: list[int],
                       store_ts: int) -> None:
        """One "delivered" event per message of a run stored at `store_ts`, handed over as columns."""
        fire_columns(self.listeners, "delivered", EventColumns(
            "level", self.level, self._msg_id_prefix(), topics, phys, infos.uniqs, infos.born_ts,
            infos.store_ts, dues, store_ts))

    def fire_due(self, batch: DeliveryBatch, phys: list[int], dues: list[int], infos: EventInfos) -> None:
        src = batch.source
        fire_columns(self.listeners, "due", EventColumns(
            "level", self.level, self._msg_id_prefix(), infos.topics, [phys[i] for i in src], infos.uniqs,
            infos.born_ts, infos.store_ts, [dues[i] for i in src], 0))

    def count_puts(self, batch: DeliveryBatch, statuses: list[PutStatus] | None) -> None:
        """The deliveries one put_batch stored count as puts of their real topics (on_put)."""
        starts, dests = batch.starts, batch.dests
        ok: Sequence[int]
        if statuses is None:
            first = dests[0]
            if dests.count(first) == len(dests):  # one destination (the usual run): one call, no per-record work
                self.on_put(first[0], len(dests), starts[-1] - starts[0])
                return
            ok = range(len(dests))
        else:
            ok = [j for j, s in enumerate(statuses) if s is PUT_OK]
        count_puts(self.on_put, [dests[j][0] for j in ok], [starts[j + 1] - starts[j] for j in ok])
