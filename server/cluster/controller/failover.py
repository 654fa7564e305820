"""How long a failover took, seen from the broker that became master (issue 25 item 4): from losing its
master (the HA connection to it closed) to becoming master, and from becoming master to its first
scheduled delivery (the first "delivered" event of a delay level or the timer wheel). Each figure is
logged (`controller.failover_master`, `controller.failover_first_delivery`) and exported as a gauge
(delaymq_failover_master_seconds, delaymq_failover_first_delivery_seconds; -1 until measured) with a
counter of promotions (delaymq_controller_promotions_total)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog

from scheduler.events import EventCallback, EventColumns, EventRow

if TYPE_CHECKING:
    from scheduler.delay_service import DelayLevelService
    from scheduler.timer import TimerMessageStore
    from server.observability.registry import Registry

log = structlog.get_logger(__name__)


class _FirstDelivery(EventCallback):
    """Tells the clock about the first "delivered" event, then detaches itself."""

    def __init__(self, clock: FailoverClock) -> None:
        self.clock = clock

    def __call__(self, event: str, **fields: Any) -> None:
        if event == "delivered":
            self.clock.first_delivery(str(fields.get("kind") or ""))

    def many(self, event: str, rows: list[EventRow]) -> None:
        if event == "delivered" and rows:
            self.clock.first_delivery(str(rows[0][0]))

    def columns(self, event: str, cols: EventColumns) -> None:
        if event == "delivered" and len(cols):
            self.clock.first_delivery(cols.kind)


class FailoverClock:
    def __init__(self, registry: Registry) -> None:
        self.master_s = -1.0  # master lost -> master here
        self.first_delivery_s = -1.0  # master here -> first scheduled delivery
        self.epoch = 0
        self._became_at: float | None = None
        self._watching: list[DelayLevelService | TimerMessageStore] = []
        self._listener = _FirstDelivery(self)
        registry.gauge("delaymq_failover_master_seconds", fn=lambda: self.master_s,
                       help="seconds from losing the master (HA connection closed) to this broker becoming master")
        registry.gauge("delaymq_failover_first_delivery_seconds", fn=lambda: self.first_delivery_s,
                       help="seconds from becoming master to the first scheduled (delay level / timer) delivery")
        self.promotions = registry.counter("delaymq_controller_promotions_total",
                                           help="times the controller made this broker the master")

    def became_master(self, epoch: int, master_lost_at: float | None,
                      services: list[DelayLevelService | TimerMessageStore]) -> None:
        """`master_lost_at`: time.monotonic() of the HA connection's loss (None: not known, not measured)."""
        now = time.monotonic()
        self.epoch, self._became_at = epoch, now
        self.promotions.inc()
        self.master_s = round(now - master_lost_at, 4) if master_lost_at is not None else -1.0
        self.first_delivery_s = -1.0
        log.warning("controller.failover_master", master_epoch=epoch, seconds=self.master_s)
        self._detach()
        for svc in services:
            svc.add_listener(self._listener)
            self._watching.append(svc)

    def first_delivery(self, kind: str) -> None:
        if self._became_at is None or self.first_delivery_s >= 0:
            return
        self.first_delivery_s = round(time.monotonic() - self._became_at, 4)
        log.warning("controller.failover_first_delivery", master_epoch=self.epoch, seconds=self.first_delivery_s,
                    kind=kind)
        asyncio.get_running_loop().call_soon(self._detach)  # not while the scheduler walks its listener list

    def _detach(self) -> None:
        for svc in self._watching:
            try:
                svc.remove_listener(self._listener)
            except ValueError:
                pass
        self._watching = []
