"""Timer wheel counters, lateness histogram and event listeners (RIP-46 metric names where they exist).

Names used by stock 5.x (DefaultStoreMetricsConstant): rocketmq_timer_enqueue_total,
rocketmq_timer_dequeue_total, rocketmq_timer_enqueue_lag, rocketmq_timer_enqueue_latency,
rocketmq_timer_dequeue_lag, rocketmq_timer_dequeue_latency, rocketmq_timing_messages,
rocketmq_timer_message_snapshot, rocketmq_delay_message_latency.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

import structlog

from codec.histogram import Histogram, RecentValues
from scheduler.events import EventListener, fire_rows
from scheduler.stats import LATENESS_WINDOW

log = structlog.get_logger(__name__)

# one message of a "due" / "delivered" batch: (topic, uniqKey, msgId, storeTs, dueTs, deliveredTs)
DeliveryRow = tuple[str, str | None, str, int, int, int]

LATENESS_BUCKETS_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)


class _Rate:
    """Events per second over the last completed ~1 s window (no timer task: rolled on update/read)."""

    __slots__ = ("window_start", "window_count", "rate")

    def __init__(self) -> None:
        self.window_start = time.monotonic()
        self.window_count = 0
        self.rate = 0.0

    def add(self, n: int) -> None:
        self._roll()
        self.window_count += n

    def _roll(self) -> None:
        now = time.monotonic()
        span = now - self.window_start
        if span >= 1.0:
            self.rate = self.window_count / span if span < 2.0 else 0.0
            self.window_start = now
            self.window_count = 0

    def value(self) -> float:
        self._roll()
        return self.rate


class TimerMetrics:
    def __init__(self) -> None:
        self.enqueued = 0  # units written to the timerlog (incl. roll re-entries and markers)
        self.accepted = 0  # first-time timer messages enqueued
        self.delivered = 0  # put to their real topic
        self.rolled = 0
        self.cancelled = 0
        self.markers = 0
        self.cancel_unmatched = 0  # delete markers that found no live timer in their slot (count nothing)
        self.missing = 0  # record gone from the CommitLog
        self.put_failures = 0
        self.rejected = 0  # flow control at the hook
        self.refused_disk_full = 0  # refused at the hook: the timerlog could not take them (TimerMessageStore.admit)
        self.late_bumped = 0  # enqueued after its slot was read: moved to the next slot
        self.enqueue_latency_ms = 0  # store → enqueue of the last batch
        self.dequeue_latency_ms = 0  # due → delivered of the last put
        self.lateness = Histogram(LATENESS_BUCKETS_MS)
        self.recent_lateness = RecentValues(LATENESS_WINDOW)
        self.enqueue_rate = _Rate()
        self.dequeue_rate = _Rate()
        self.listeners: list[EventListener] = []

    def observe_lateness(self, values: Collection[int]) -> None:
        """One put's lateness (ms): the histogram and the window of exact recent values."""
        self.lateness.observe_many(values)
        self.recent_lateness.extend(values)

    def emit(self, event: str, **fields: Any) -> None:
        for fn in self.listeners:
            try:
                fn(event, **fields)
            except Exception as e:  # a listener must never stop the wheel
                log.warning("timer.listener_failed", listener=repr(fn), error=repr(e))

    def emit_many(self, event: str, rows: list[DeliveryRow]) -> None:
        """One `event` per row (topic, uniqKey, msgId, storeTs, dueTs, deliveredTs) of a delivery batch,
        kind="timer", level=0, bornTs=0 (scheduler.events: a listener with `many` gets one call)."""
        if self.listeners:
            fire_rows(self.listeners, event, [("timer", 0, topic, msg_id, uniq, 0, store_ts, due, delivered)
                                              for topic, uniq, msg_id, store_ts, due, delivered in rows])
