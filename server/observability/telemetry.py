"""Wires the broker's components into metrics, exports and traces (names: `server.observability.export`).

- gauges/histograms read the delay-level and timer services' `stats()` at collection time;
- consumer lag per group/topic from the offset table and the store's max offsets;
- scheduled-message events (accepted/due/delivered) go to `store/export/traces`;
- records clients send to RMQ_SYS_TRACE_TOPIC are copied to `store/export/rmq_trace` as they
  are dispatched (the store's dispatch listener wakes the copier; no polling).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from codec.codes import TRACE_TOPIC
from codec.record import read_body, read_store_timestamp
from server.observability.export import MetricsExporter, RotatingMsgpackWriter, TraceWriter
from server.observability.registry import Registry, Sample

if TYPE_CHECKING:
    from scheduler.delay_service import DelayLevelService
    from scheduler.timer import TimerMessageStore
    from server.config import BrokerConfig
    from server.offsets_table import ConsumerOffsetManager
    from storage.message_store import MessageStore
    from storage.supervisor import Supervisor

log = structlog.get_logger(__name__)
_UNIT = 20


def _delay_samples(svc: DelayLevelService) -> list[Sample]:
    out: list[Sample] = []
    try:
        st = svc.stats()
    except Exception:
        return out
    for level, s in (st.get("levels") or {}).items():
        lab = {"level": str(level)}
        # the broker's delay table at export time: the report names level L by its delay ("L3 · 10s")
        out.append(Sample("delaymq_schedule_delay_seconds", "gauge", lab, float(s.get("delay_ms", 0)) / 1000.0))
        out.append(Sample("delaymq_schedule_pending", "gauge", lab, float(s.get("pending", 0))))
        out.append(Sample("delaymq_schedule_delivered_total", "counter", lab, float(s.get("delivered_total", 0))))
        out.append(Sample("delaymq_schedule_next_due_ms", "gauge", lab, float(s.get("next_due_ms") or 0)))
        out.append(Sample("delaymq_schedule_deliver_rate", "gauge", lab, float(s.get("deliver_rate", 0.0))))
        h = s.get("lateness_ms") or {}
        if h:
            out.append(Sample("delaymq_schedule_lateness_ms", "histogram", lab, float(h.get("count", 0)),
                              [(float(b), int(c)) for b, c in h.get("buckets", [])], float(h.get("sum", 0.0)),
                              int(h.get("count", 0))))
    return out


def _timer_samples(svc: TimerMessageStore) -> list[Sample]:
    try:
        st = svc.stats()
    except Exception:
        return []
    out = [
        Sample("delaymq_timer_pending", "gauge", {}, float(st.get("pending", 0))),
        Sample("delaymq_timer_enqueue_total", "counter", {}, float(st.get("enqueued", 0))),
        Sample("delaymq_timer_dequeue_total", "counter", {}, float(st.get("delivered", 0))),
        Sample("delaymq_timer_enqueue_rate", "gauge", {}, float(st.get("enqueue_rate", 0.0))),
        Sample("delaymq_timer_dequeue_rate", "gauge", {}, float(st.get("dequeue_rate", 0.0))),
        Sample("delaymq_timer_enqueue_lag", "gauge", {}, float(st.get("enqueue_lag", 0))),
        Sample("delaymq_timer_dequeue_lag_ms", "gauge", {}, float(st.get("dequeue_lag_ms", 0))),
        Sample("delaymq_timer_next_due_slot_ms", "gauge", {}, float(st.get("next_due_slot_ms", -1))),
    ]
    buckets = st.get("lateness_buckets") or []
    if buckets:
        count = int(buckets[-1][1])
        out.append(Sample("delaymq_timer_lateness_ms", "histogram", {}, float(count),
                          [(float(b), int(c)) for b, c in buckets], 0.0, count))
    return out


def _supervisor_samples(sup: Supervisor) -> list[Sample]:
    """delaymq_task_restarts_total{task}: failures of background work (each logged, backed off, restarted)."""
    return [Sample("delaymq_task_restarts_total", "counter", {"task": name}, float(n))
            for name, n in sorted(sup.stats().items())]


def _quarantine_samples(*services: DelayLevelService | TimerMessageStore | None) -> list[Sample]:
    """delaymq_schedule_quarantined_total{stage}: records set aside in rmq_sys_SCHEDULE_QUARANTINE."""
    per: dict[str, int] = {}
    for svc in services:
        if svc is not None:
            for stage, n in svc.quarantine.stats().items():
                per[stage] = per.get(stage, 0) + n
    return [Sample("delaymq_schedule_quarantined_total", "counter", {"stage": stage}, float(n))
            for stage, n in sorted(per.items())]


CONSUMER_LAG = "delaymq_consumer_lag"


def consumer_lags(table: Mapping[str, Mapping[Any, Any]], max_offset: Callable[[str, int], int],
                  keys: Iterable[str] | None = None) -> Iterator[tuple[str, str, int]]:
    """(topic, group, lag) of each topic@group of the offset table's `keys` (default: a snapshot of all,
    in the table's order), lazily: each key's queues are read when it gets there, so a caller may yield
    to the loop between keys. The lag is the messages stored but not committed, summed over the queues."""
    for key in list(table) if keys is None else keys:
        queues = table.get(key)
        if queues is None:
            continue
        topic, _, group = key.partition("@")
        lag = 0
        for qid, off in list(queues.items()):
            lag += max(0, max_offset(topic, int(qid)) - int(off))
        yield topic, group, lag


def _lag_samples(offsets: ConsumerOffsetManager, store: MessageStore) -> Iterator[Sample]:
    """One lag sample per topic@group, lazily (the sliced exporters yield to the loop between samples)."""
    for topic, group, lag in consumer_lags(offsets.table, store.max_offset):
        yield Sample(CONSUMER_LAG, "gauge", {"group": group, "topic": topic}, float(lag))


class TraceTopicExporter:
    """Copies what clients send to RMQ_SYS_TRACE_TOPIC into msgpack export files."""

    def __init__(self, store: MessageStore, writer: RotatingMsgpackWriter) -> None:
        self.store = store
        self.writer = writer
        self.offsets: dict[int, int] = {}

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic != TRACE_TOPIC:
            return
        off = self.offsets.get(queue_id, self.store.min_offset(topic, queue_id))
        while off < max_offset:
            units = self.store.read_units(topic, queue_id, off, min(256, max_offset - off))
            if units is None:  # no such queue, or `off` outside [min, max): below min once the files were cleaned
                low = self.store.min_offset(topic, queue_id)
                if off < low:
                    off = low
                    continue
                break
            n = len(units) // _UNIT
            if n == 0:
                break
            for i in range(n):
                phys = int.from_bytes(units[i * _UNIT:i * _UNIT + 8], "big", signed=True)
                size = int.from_bytes(units[i * _UNIT + 8:i * _UNIT + 12], "big", signed=True)
                rec = self.store.read_record(phys, size)
                if rec is None:
                    continue
                self.writer.write({"v": 1, "storeTs": read_store_timestamp(rec), "topic": topic,
                                   "body": read_body(rec).decode("utf-8", "replace")})
            off += n
        self.offsets[queue_id] = off


class Telemetry:
    """The exported files (metrics, delivery traces, the RocketMQ trace topic) and the collectors of the
    scheduled services' figures."""

    def __init__(self, config: BrokerConfig, metrics: Registry, store: MessageStore, offsets: ConsumerOffsetManager,
                 delay_service: DelayLevelService | None, timer_service: TimerMessageStore | None,
                 export_interval_s: float | None = None) -> None:
        self.metrics = metrics
        self.store = store
        self.offsets = offsets
        self.delay_service = delay_service
        self.timer_service = timer_service
        root = os.path.join(config.store_path_root_dir, "export")
        self.metrics_writer = RotatingMsgpackWriter(os.path.join(root, "metrics"), "metrics")
        self.trace_writer = RotatingMsgpackWriter(os.path.join(root, "traces"), "traces")
        self.rmq_trace_writer = RotatingMsgpackWriter(os.path.join(root, "rmq_trace"), "rmq_trace")
        interval = export_interval_s or config.metrics_export_interval_ms / 1000.0
        self.exporter = MetricsExporter(metrics, self.metrics_writer, interval,
                                        also_flush=[self.trace_writer, self.rmq_trace_writer])
        self.trace = TraceWriter(self.trace_writer)

    def start(self) -> None:
        reg, store, delay, timer = self.metrics, self.store, self.delay_service, self.timer_service
        if delay is not None:
            reg.add_collector(lambda: _delay_samples(delay))
            delay.add_listener(self.trace)
        if timer is not None:
            reg.add_collector(lambda: _timer_samples(timer))
            timer.add_listener(self.trace)
        # declared, so that the /metrics page (which has its own lag family) does not compute them again
        reg.add_collector(lambda: _lag_samples(self.offsets, store), provides=frozenset({CONSUMER_LAG}))
        reg.describe("delaymq_task_restarts_total",
                     "Failures of background tasks (each logged, backed off and restarted), by task.")
        reg.describe("delaymq_schedule_quarantined_total",
                     "Scheduled records set aside in rmq_sys_SCHEDULE_QUARANTINE, by stage.")
        reg.add_collector(lambda: _supervisor_samples(store.supervisor))
        reg.add_collector(lambda: _quarantine_samples(delay, timer))
        store.add_dispatch_listener(TraceTopicExporter(store, self.rmq_trace_writer).on_dispatch, TRACE_TOPIC)
        self.exporter.start(store.supervisor)

    async def shutdown(self) -> None:
        await self.exporter.shutdown()
