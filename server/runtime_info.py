"""GET_BROKER_RUNTIME_INFO's table: RocketMQ's keys (mqadmin clusterList / brokerStatus and the Dashboard read
them; thread-pool figures are 0: requests run on the event loop, not in pools), the store's and each
service's own (`RuntimeInfoSource`s, named one by one by the broker's assembly). `RuntimeInfoView` is what
the table reads of the broker, declared; its `table` is what GET_BROKER_RUNTIME_INFO answers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from codec.codes import BROKER_VERSION, RequestCode
from codec.record import read_store_timestamp

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from server.observability.broker_stats import BrokerStats
    from server.observability.registry import RpcLatency
    from server.observability.traffic import TrafficCounters
    from server.pull_hold import PullHoldService
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)

# a service's own runtime figures (DelayLevelService.runtime_info, GrpcEndpoint.stats, ...)
RuntimeInfoSource = Callable[[], Mapping[str, object]]
_SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


def earliest_store_time(store: MessageStore) -> int:
    """STORETIMESTAMP of the oldest record still in the CommitLog (0: none, or not a record there)."""
    try:
        raw = store.read_record(store.commitlog_min_offset())
    except (ValueError, IndexError, OSError):
        return 0
    return read_store_timestamp(raw) if raw is not None and len(raw) > 64 else 0


@dataclass(frozen=True)
class RuntimeInfoView:
    """What GET_BROKER_RUNTIME_INFO's table reads of the broker. `sources`: each running service's own
    figures, by name, in the order the assembly built them (a service not built is not there)."""

    config: BrokerConfig
    store: MessageStore
    stats: BrokerStats
    counters: TrafficCounters
    pull_hold: PullHoldService
    rpc_latency: RpcLatency
    boot_ms: int
    sources: list[tuple[str, RuntimeInfoSource]] = field(default_factory=list)

    def table(self) -> dict[str, object]:
        return broker_runtime_info(self)


def broker_runtime_info(b: RuntimeInfoView) -> dict[str, object]:
    cfg, stats, counters = b.config, b.stats, b.counters
    store = b.store
    now = int(time.time() * 1000)
    puts, gets = stats.tps(now)
    info: dict[str, object] = {
        "brokerVersion": BROKER_VERSION, "brokerVersionDesc": "V4_9_8",
        "msgPutTotalTodayNow": counters.put_total, "msgGetTotalTodayNow": counters.get_total,
        "msgPutTotalTodayMorning": stats.today_morning[0],
        "msgGetTotalTodayMorning": stats.today_morning[1],
        "msgPutTotalYesterdayMorning": stats.yesterday_morning[0],
        "msgGetTotalYesterdayMorning": stats.yesterday_morning[1],
        "putTps": " ".join(f"{v:.2f}" for v in puts),
        "getTransferedTps": " ".join(f"{v:.2f}" for v in gets),
        "commitLogMinOffset": store.commitlog_min_offset(), "commitLogMaxOffset": store.commitlog_max_offset(),
        "bootTimestamp": b.boot_ms, "runtime": f"{(now - b.boot_ms) // 1000}s",
        "startAcceptSendRequestTimeStamp": 0,
        "flushDiskType": cfg.flush_disk_type, "brokerName": cfg.broker_name,
        "pullHoldCount": b.pull_hold.held_count,
        "brokerRole": cfg.broker_role, "brokerId": cfg.broker_id,
        "pageCacheLockTimeMills": 0, "dispatchBehindBytes": 0,
        "remainHowManyDataToFlush": "0 B", "remainTransientStoreBufferNumbs": 0,
        "EndTransactionQueueSize": 0, "EndTransactionThreadPoolQueueCapacity": 0,
    }
    for pool in ("send", "pull", "query"):
        info[f"{pool}ThreadPoolQueueSize"] = 0
        info[f"{pool}ThreadPoolQueueCapacity"] = 0
        info[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = 0
    info.update(store.runtime_info())
    info.update(disk_info(cfg.store_path_root_dir))
    info["earliestMessageTimeStamp"] = earliest_store_time(store) or b.boot_ms
    info["consumeQueueDiskRatio"] = info.get("commitLogDiskRatio", "0")  # one disk holds the whole store
    sends = [h for code, h in b.rpc_latency.by_code.items() if code in _SEND_CODES]
    n = sum(h.count for h in sends)
    if n:  # upper bounds of the buckets holding the quantiles, in ms (RocketMQ's putLatency99/999)
        for key, q in (("putLatency99", 0.99), ("putLatency999", 0.999)):
            info[key] = f"{max(h.quantile(q) for h in sends if h.count) * 1000:.2f}"
    for name, source in b.sources:
        try:
            info.update({str(k): v for k, v in source().items()})
        except Exception as e:
            log.warning("broker.runtime_info_failed", service=name, error=repr(e))
    return info


def disk_info(path: str) -> dict[str, str]:
    """commitLogDirCapacity as RocketMQ words it."""
    try:
        st = os.statvfs(path)
    except OSError:
        return {}
    gib = 1024 ** 3
    return {"commitLogDirCapacity": f"Total : {st.f_blocks * st.f_frsize / gib:.1f} GiB, "
                                    f"Free : {st.f_bavail * st.f_frsize / gib:.1f} GiB."}
