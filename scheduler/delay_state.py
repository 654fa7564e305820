"""What a delay level's deliverer (scheduler.delay_deliver.LevelDeliverer) and its delivery mixins
(delay_sync: put and resend in order; delay_async: the pending deque's bookkeeping; delay_events:
stats, events and put counts) share: the level's state and the few methods one calls on another,
declared once so each mixin is type-checked against the real types (as storage.store_state does for
the MessageStore). Annotations and type names only: `LevelDeliverer.__init__` assigns every attribute."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codec.delivery_batch import DeliveryBatch
    from scheduler.async_deliver import AsyncLevelHandler
    from scheduler.delay_events import DeliveryInfo, EventInfos
    from scheduler.delay_service import DelayLevelService
    from scheduler.stats import LevelStats
    from scheduler.store_port import StorePort
    from storage.store_types import PutStatus

Raws = list[memoryview | None]  # schedule records read for a pass (None: gone or set aside)
Spans = list[tuple[int, int]]  # (schedule record phys, size) per unit


class LevelState:
    svc: DelayLevelService
    store: StorePort
    level: int
    queue_id: int
    delay_ms: int
    offset: int  # delivered: next schedule-queue offset whose delivery is not confirmed
    scan_offset: int  # next unit to look at (> offset while async deliveries are in flight)
    claimed_offset: int  # units below it were taken by the current pass (cancel: too late)
    stats: LevelStats
    handler: AsyncLevelHandler | None  # async mode only
    stopping: bool
    # scheduler.progress_file (scheduleProgress): begin(CommitLog end) just before a delivery put,
    # commit(next offset not put, CommitLog end) right after it, in the same loop step
    _progress_begin: Callable[[int], None]
    _progress_commit: Callable[[int, int], None]

    if TYPE_CHECKING:  # defined by one part of the deliverer, called by another
        def commit_progress(self, offset: int) -> None: ...

        def put_offset(self, end: int | None = None) -> int: ...

        def quarantine_refused(self, phys: int, size: int, why: str, offset: int) -> bool: ...

        def _delivered(self, due: int, info: DeliveryInfo, store_ts: int, phys: int, topic: str) -> None: ...

        def _count_puts(self, batch: DeliveryBatch, statuses: list[PutStatus] | None) -> None: ...

        def _fire_one(self, due: int, info: DeliveryInfo, store_ts: int, phys: int, topic: str) -> None: ...

        def _fire_delivered(self, topics: list[str], phys: list[int], infos: EventInfos, dues: list[int],
                            store_ts: int) -> None: ...
