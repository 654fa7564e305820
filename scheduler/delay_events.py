"""What a delay level's due / delivered events carry from each schedule record of a delivery batch,
column by column (handed to listeners as scheduler.events.EventColumns)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from codec.buffers import BytesLike
from codec.delivery_batch import DeliveryBatch
from codec.record import POS_SYS_FLAG

_BORN_STORE_TS = (struct.Struct(">q8xq"), struct.Struct(">q20xq"))  # from 40, by the BORNHOST_V6 bit


class EventInfos:
    """What the due / delivered events need from each delivery j of a batch (in `batch.source` order),
    column by column: real topic, schedule record store timestamp, UNIQ_KEY (bytes or None), born
    timestamp. `infos[j]` is one message's (store ts, uniqKey, bornTs), for the per-message paths."""

    __slots__ = ("topics", "store_ts", "uniqs", "born_ts")

    def __init__(self, topics: list[str], store_ts: list[int], uniqs: list[bytes | None], born_ts: list[int]) -> None:
        self.topics, self.store_ts, self.uniqs, self.born_ts = topics, store_ts, uniqs, born_ts

    def __getitem__(self, j: int) -> tuple[int, str, int]:
        u = self.uniqs[j]
        return (self.store_ts[j], u.decode("utf-8", "replace") if u else "", self.born_ts[j])


def event_infos(raws: Sequence[BytesLike | None], batch: DeliveryBatch) -> EventInfos:
    """The event columns of a delivery batch, read once per message from its schedule record."""
    ts = _BORN_STORE_TS
    # (born, store) timestamps from 40; where STORETIMESTAMP is depends on SYSFLAG's BORNHOST_V6 bit
    pairs = [ts[(raw[POS_SYS_FLAG + 3] & 0x10) >> 4].unpack_from(raw, 40)  # type: ignore[index, arg-type]  # batch.source names only records that were built (never None)
             for raw in map(raws.__getitem__, batch.source)]
    return EventInfos([d[0] for d in batch.dests], [p[1] for p in pairs], batch.uniqs, [p[0] for p in pairs])
