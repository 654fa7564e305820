"""The Prometheus page (`GET /metrics`): RocketMQ 5 (RIP-46) metric names, base units, HELP and TYPE.

Everything is read at scrape time from what the broker already keeps (counters on the registry, the
scheduler services' `stats()`, the client manager, the offset table, /proc/self); nothing is pushed
from the hot paths but the RPC latency histograms (two clock readings per request or run of requests).
Every family carries `cluster`, `node_type="broker"`, `node_id` (the broker name). Counters end in
`_total` and are never rates; latencies are in seconds, sizes in bytes. `promtool check metrics` is
clean on this page (tests/observability/test_promtool.py). The msgpack exports keep their own names
(`server.observability.export`).
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.observability.registry import (
    SLICE,
    Registry,
    RpcLatency,
    Sample,
    _fmt_labels,
    _fmt_num,
)
from server.observability.telemetry import CONSUMER_LAG, consumer_lags
from server.runtime_info import earliest_store_time

if TYPE_CHECKING:
    from scheduler.delay_service import DelayLevelService
    from scheduler.timer import TimerMessageStore
    from server.client_manager import ClientManager
    from server.config import BrokerConfig
    from server.observability.traffic import TrafficCounters
    from server.offsets_table import ConsumerOffsetManager
    from server.topics import TopicManager
    from server.transactions import TransactionService
    from storage.message_store import MessageStore


@dataclass(frozen=True)
class MetricsView:
    """What the /metrics page reads of the broker (built by the broker's assembly)."""

    config: BrokerConfig
    registry: Registry  # delaymq_* metrics, task restarts, ...
    counters: TrafficCounters  # messages / bytes in and out
    clients: ClientManager  # connections
    offsets: ConsumerOffsetManager  # lags, groups
    topics: TopicManager
    store: MessageStore
    rpc_latency: RpcLatency
    delay_service: DelayLevelService | None
    timer_service: TimerMessageStore | None
    transactions: TransactionService | None

# delaymq_* names the registry holds that this page re-expresses under RocketMQ's names, or leaves to the
# msgpack export only (pre-computed rates and _ms histograms have no place on a Prometheus page)
_TRANSLATED = frozenset({
    "delaymq_put_messages_total", "delaymq_put_bytes_total", "delaymq_pull_messages_total", CONSUMER_LAG,
    "delaymq_schedule_pending", "delaymq_schedule_delivered_total", "delaymq_schedule_next_due_ms",
    "delaymq_schedule_deliver_rate", "delaymq_schedule_lateness_ms", "delaymq_schedule_delay_seconds",
    "delaymq_timer_pending", "delaymq_timer_enqueue_total", "delaymq_timer_dequeue_total", "delaymq_timer_enqueue_rate",
    "delaymq_timer_dequeue_rate", "delaymq_timer_enqueue_lag", "delaymq_timer_dequeue_lag_ms",
    "delaymq_timer_next_due_slot_ms", "delaymq_timer_lateness_ms",
})


def _clean(s: Sample) -> bool:
    """A registry sample Prometheus' linter accepts: counters end in _total, nothing is a rate or in ms."""
    if s.type == "counter":
        return s.name.endswith("_total")
    return not s.name.endswith(("_rate", "_ms"))


@dataclass(slots=True)
class Family:
    name: str
    type: str  # counter | gauge | histogram
    help: str
    samples: list[Sample] = field(default_factory=list)
    # (labels, value) rows not yet made Samples (`collect(..., lazy=True)`): render_sliced makes them a
    # slice at a time (10,000 groups' lag samples made at once were a 60 ms loop stall)
    rows: Iterable[tuple[dict[str, str], float]] | None = None


def _hist_ms_to_s(name: str, labels: dict[str, str], h: Mapping[str, Any]) -> Sample | None:
    buckets = h.get("buckets") or []
    if not buckets:
        return None
    count = int(h.get("count", buckets[-1][1]))
    out = [(float(le) / 1000.0 if le != math.inf else math.inf, int(c)) for le, c in buckets]
    if out[-1][0] != math.inf:
        out.append((math.inf, count))
    return Sample(name, "histogram", labels, float(count), out, float(h.get("sum", 0.0)) / 1000.0, count)


def _process_families() -> list[Family]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    fams = [Family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
                   [Sample("process_cpu_seconds_total", "counter", {}, ru.ru_utime + ru.ru_stime)])]
    try:
        with open("/proc/self/statm") as f:
            vm_pages, rss_pages = (int(x) for x in f.read().split()[:2])
        page = os.sysconf("SC_PAGE_SIZE")
        fams.append(Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                           [Sample("process_resident_memory_bytes", "gauge", {}, float(rss_pages * page))]))
        fams.append(Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                           [Sample("process_virtual_memory_bytes", "gauge", {}, float(vm_pages * page))]))
        fams.append(Family("process_open_fds", "gauge", "Number of open file descriptors.",
                           [Sample("process_open_fds", "gauge", {}, float(len(os.listdir("/proc/self/fd"))))]))
    except OSError:
        pass
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fams.append(Family("process_max_fds", "gauge", "Maximum number of open file descriptors.",
                       [Sample("process_max_fds", "gauge", {}, float(soft))]))
    return fams


def lag_pairs(view: MetricsView, keys: Iterable[str] | None = None) -> list[tuple[str, str, int]]:
    """(topic, group, lag) of each topic@group of `keys` (default: all, in the table's order: sorting
    10,000 keys on the loop was a few ms of the scrape, and Prometheus does not need an order)."""
    return list(consumer_lags(view.offsets.table, view.store.max_offset, keys))


async def lag_pairs_sliced(view: MetricsView, slice_n: int = 1000) -> list[tuple[str, str, int]]:
    """`lag_pairs` yielding to the loop every `slice_n` keys (10,000 groups: ~40 ms in one piece)."""
    keys = list(view.offsets.table)
    out: list[tuple[str, str, int]] = []
    for i in range(0, len(keys), slice_n):
        if i:
            await asyncio.sleep(0)
        out.extend(lag_pairs(view, keys[i:i + slice_n]))
    return out


async def page_sliced(view: MetricsView, slice_n: int = 500) -> str:
    """The /metrics page without a long stall: lags and rendering in slices with yields between."""
    lags = await lag_pairs_sliced(view)
    registry_fams = await _registry_families_sliced(view.registry)  # without its lag collector: lags are above
    return await render_sliced(collect(view, lags, lazy=True, registry_families=registry_fams), slice_n)


def collect(view: MetricsView, lags: list[tuple[str, str, int]] | None = None,
            lazy: bool = False, registry_families: list[Family] | None = None) -> list[Family]:
    """Every family; `lags` as `lag_pairs` gives them (computed here when not given). `lazy`: the
    per-topic/group families keep their rows (`Family.rows`, the tables read now, the samples made
    while render_sliced renders them)."""
    cfg = view.config
    base = {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name}

    def L(**kw: object) -> dict[str, str]:  # noqa: N802
        return {**base, **{k: str(v) for k, v in kw.items()}}

    fams: list[Family] = []

    def fam(name: str, kind: str, help: str, samples: Iterable[tuple[dict[str, str], float]]) -> None:
        if lazy:
            fams.append(Family(name, kind, help, rows=samples))
        else:
            fams.append(Family(name, kind, help, [Sample(name, kind, lab, float(v)) for lab, v in samples]))

    puts = dict(view.counters.put_counters)
    fam("rocketmq_messages_in_total", "counter", "Messages stored, by the topic they were stored in.",
        ((L(topic=t), c[0].value) for t, c in puts.items()))
    fam("rocketmq_throughput_in_total", "counter", "Bytes stored (whole records), by topic.",
        ((L(topic=t), c[1].value) for t, c in puts.items()))
    fam("rocketmq_messages_out_total", "counter", "Messages returned to consumers by PULL_MESSAGE.",
        ((L(topic=t, consumer_group=g), c.value) for (t, g), c in list(view.counters.pull_counters.items())))
    clients = view.clients
    fam("rocketmq_producer_connections", "gauge", "Producer connections (heartbeating producers).",
        [(L(), sum(len(ch) for ch in clients.producers.values()))])
    fam("rocketmq_consumer_connections", "gauge", "Consumer connections, by consumer group.",
        ((L(consumer_group=g), len(info.channels)) for g, info in list(clients.consumers.items())))
    fam("rocketmq_consumer_lag_messages", "gauge", "Messages stored but not yet committed by the group.",
        ((L(topic=topic, consumer_group=group), lag)
         for topic, group, lag in (lag_pairs(view) if lags is None else lags)))
    fam("rocketmq_topic_number", "gauge", "Topics on this broker.", [(L(), len(view.topics.topics))])
    fam("rocketmq_consumer_group_number", "gauge", "Consumer groups with committed offsets or online consumers.",
        [(L(), len({k.partition("@")[2] for k in view.offsets.table} | set(clients.consumers)))])
    fam("rocketmq_broker_permission", "gauge", "brokerPermission (6 = read and write).",
        [(L(), cfg.broker_permission)])
    store = view.store
    fam("rocketmq_storage_size", "gauge", "Bytes of CommitLog data held (max offset - min offset).",
        [(L(), store.commitlog_max_offset() - store.commitlog_min_offset())])
    fam("rocketmq_storage_disk_ratio", "gauge", "Used fraction (0..1) of the disk holding the store.",
        [(L(), store.disk_used_ratio())])
    fam("rocketmq_storage_message_reserve_time_seconds", "gauge", "Age of the oldest message in the CommitLog.",
        [(L(), max(0.0, time.time() - (earliest_store_time(store) or time.time() * 1000) / 1000.0))])

    rpc = Family("rocketmq_rpc_latency_seconds", "histogram", "Time to handle a remoting request, by request code.")
    for code, h in sorted(view.rpc_latency.by_code.items()):
        rpc.samples.append(Sample(rpc.name, "histogram", L(request_code=code), float(h.count), h.cumulative(),
                                  h.sum, h.count))
    fams.append(rpc)

    delay = view.delay_service
    if delay is not None:
        levels = (delay.stats().get("levels") or {})
        rows = sorted(levels.items())
        fam("rocketmq_delay_messages", "gauge", "Delay-level messages waiting in SCHEDULE_TOPIC_XXXX, by level.",
            ((L(level=lv), s.get("pending", 0)) for lv, s in rows))
        fam("rocketmq_delay_delivered_messages_total", "counter", "Delay-level messages delivered, by level.",
            ((L(level=lv), s.get("delivered_total", 0)) for lv, s in rows))
        fam("rocketmq_delay_next_due_timestamp_seconds", "gauge",
            "Deliver time of the level's next message (0: none waiting), Unix seconds.",
            ((L(level=lv), (s.get("next_due_ms") or 0) / 1000.0) for lv, s in rows))
        lat = Family("rocketmq_delay_message_latency_seconds", "histogram",
                     "How late delay-level messages were delivered (store time of the delivery - due time).")
        for lv, s in rows:
            smp = _hist_ms_to_s(lat.name, L(level=lv), s.get("lateness_ms") or {})
            if smp is not None:
                lat.samples.append(smp)
        fams.append(lat)
        fam("rocketmq_delay_cancelled_messages_total", "counter", "Delay-level messages skipped because cancelled.",
            [(L(), delay.cancels.cancelled_total)])
    timer = view.timer_service
    if timer is not None:
        st = timer.stats()
        fam("rocketmq_timing_messages", "gauge", "Timer messages waiting in the time wheel.", [(L(), st["pending"])])
        fam("rocketmq_timer_enqueue_total", "counter", "Timer messages entered into the time wheel.",
            [(L(), st["enqueued"])])
        fam("rocketmq_timer_dequeue_total", "counter", "Timer messages delivered to their real topic.",
            [(L(), st["delivered"])])
        fam("rocketmq_timer_cancelled_total", "counter", "Timer messages cancelled before delivery.",
            [(L(), st["cancelled"])])
        fam("rocketmq_timer_enqueue_lag", "gauge", "rmq_sys_wheel_timer messages not yet in the wheel.",
            [(L(), st["enqueue_lag"])])
        fam("rocketmq_timer_dequeue_lag_seconds", "gauge", "How far the wheel's read clock is behind due slots.",
            [(L(), st["dequeue_lag_ms"] / 1000.0)])
        lat = Family("rocketmq_timer_message_latency_seconds", "histogram",
                     "How late timer messages were delivered.")
        buckets = st.get("lateness_buckets") or []
        if buckets:
            smp = _hist_ms_to_s(lat.name, L(), {"buckets": buckets, "count": buckets[-1][1],
                                                "sum": timer.metrics.lateness.sum})
            if smp is not None:
                lat.samples.append(smp)
        fams.append(lat)
    tx = view.transactions
    if tx is not None:
        info = tx.runtime_info()
        fam("rocketmq_half_messages", "gauge", "Transactional half messages awaiting commit or rollback.",
            [(L(), info["transactionHalfPending"])])
        fam("rocketmq_commit_messages_total", "counter", "Transactional messages committed.",
            [(L(), info["transactionCommitted"])])
        fam("rocketmq_rollback_messages_total", "counter", "Transactional messages rolled back.",
            [(L(), info["transactionRolledBack"])])
        fam("rocketmq_transaction_checks_total", "counter", "CHECK_TRANSACTION_STATE requests sent to producers.",
            [(L(), info["transactionChecksSent"])])
    fams.extend(_registry_families(view.registry) if registry_families is None else registry_families)
    fams.extend(_process_families())
    return fams


def _registry_families(registry: Registry) -> list[Family]:
    """The registry's other delaymq_* metrics (task restarts, quarantined records, ...) as they are; names
    that are not Prometheus-clean (a counter without _total, a rate, an _ms) are left out rather than
    published wrong."""
    by_name: dict[str, Family] = {}
    for s in registry.collect(without=_TRANSLATED):
        _add_registry_sample(registry, by_name, s)
    return list(by_name.values())


async def _registry_families_sliced(registry: Registry) -> list[Family]:
    """`_registry_families` yielding to the loop every SLICE samples."""
    by_name: dict[str, Family] = {}
    for i, s in enumerate(registry.collect(without=_TRANSLATED), 1):
        _add_registry_sample(registry, by_name, s)
        if i % SLICE == 0:
            await asyncio.sleep(0)
    return list(by_name.values())


def _add_registry_sample(registry: Registry, by_name: dict[str, Family], s: Sample) -> None:
    if not _clean(s):  # (the _TRANSLATED names are left out by registry.collect, some never computed)
        return
    f = by_name.get(s.name)
    if f is None:
        f = by_name[s.name] = Family(s.name, s.type, registry.help_of(s.name) or s.name.replace("_", " "))
    f.samples.append(s)


def _esc_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _sample_lines(lines: list[str], f: Family, s: Sample) -> None:
    if f.type == "histogram":
        for bound, acc in s.buckets or []:
            lines.append(f"{f.name}_bucket{_fmt_labels(s.labels, ('le', _fmt_num(bound)))} {acc}")
        lines.append(f"{f.name}_sum{_fmt_labels(s.labels)} {_fmt_num(s.sum)}")
        lines.append(f"{f.name}_count{_fmt_labels(s.labels)} {s.count}")
    else:
        lines.append(f"{f.name}{_fmt_labels(s.labels)} {_fmt_num(s.value)}")


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for f in families:
        if not f.samples:
            continue
        lines.append(f"# HELP {f.name} {_esc_help(f.help)}")
        lines.append(f"# TYPE {f.name} {f.type}")
        for s in f.samples:
            _sample_lines(lines, f, s)
    return "\n".join(lines) + "\n"


async def render_sliced(families: Iterable[Family], slice_n: int = 500) -> str:
    """`render` (the same text) yielding to the loop every `slice_n` samples."""
    lines: list[str] = []
    chunks: list[str] = []  # each slice's lines joined in its own turn: the last turn joins a few big strings
    done = 0
    for f in families:
        samples: Iterable[Sample] = f.samples if f.rows is None else \
            (Sample(f.name, f.type, lab, float(v)) for lab, v in f.rows)
        head = False
        for s in samples:
            if not head:  # a family without samples gets no HELP/TYPE lines (as in `render`)
                head = True
                lines.append(f"# HELP {f.name} {_esc_help(f.help)}")
                lines.append(f"# TYPE {f.name} {f.type}")
            _sample_lines(lines, f, s)
            done += 1
            if done % slice_n == 0:
                chunks.append("\n".join(lines))
                lines.clear()
                await asyncio.sleep(0)
    if lines:
        chunks.append("\n".join(lines))
    return "\n".join(chunks) + "\n"
