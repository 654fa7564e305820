"""How a delay level delivers one pass's due batch: the interface of the two strategies,
scheduler.delay_sync.SyncDelivery (enableScheduleAsyncDeliver=false: put, wait, resend the failed ones
before the offset moves) and scheduler.delay_async.AsyncDelivery (true: put, hand the outcome to the
pending deque, whose handler moves the offset in order), and the batch they are given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from codec.delivery_batch import DeliveryBatch
    from scheduler.delay_events import EventInfos
    from scheduler.level_quarantine import Raws


@dataclass(slots=True)
class DueBatch:
    """One pass's due messages, schedule offsets [base, end): message k is the k-th unit from `base`
    that no operator cancel took out (offset base + k when none did)."""

    batch: DeliveryBatch  # the deliveries (codec.delivery_batch; `batch.source[j]` = k of delivery j)
    raws: Raws  # the schedule records (None: unreadable or set aside)
    phys: list[int]  # per message k: its schedule record's CommitLog offset
    sizes: list[int]  # and size
    dues: list[int]  # and the ms it became due
    infos: EventInfos | None  # the events' columns, per delivery j (None: nobody listens)
    base: int
    end: int  # the next schedule offset after the pass (cancelled messages are not in the batch)


class LevelDelivery(Protocol):
    def room(self, limit: int) -> int:
        """How many of `limit` due messages this pass may take (0: `wait_space` first)."""
        ...

    async def wait_space(self) -> None: ...

    async def deliver(self, due: DueBatch) -> None:
        """Put the batch and move the level's cursor: scan_offset to `due.end` at once, the delivered
        offset once confirmed; the progress file in the same step as each put."""
        ...

    def has_pending(self) -> bool:
        """Deliveries put and not yet confirmed (the delivered offset stays behind scan_offset)."""
        ...

    def in_flight(self) -> int: ...

    def blocked(self) -> bool: ...

    def stop(self) -> None: ...
