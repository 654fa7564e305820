"""SlaveSynchronize (cluster-ha.md §2.9) plus delaymq's scheduler-progress sync.

Every slaveSynchronizeIntervalMs the slave asks the master (no header, no body, 3 s timeout) for
GET_ALL_TOPIC_CONFIG (21, on the VIP port), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) and GET_TIMER_CHECK_POINT (60) and applies them as RocketMQ
does: topics and groups replace the local tables, consumer offsets are merged (master wins per key;
only changed rows are staged in the slave's MetaStore),
the delay offsets are written to delayOffset.json, the timer checkpoint is kept for a promotion.

Every schedulerSyncIntervalMs (10 ms; <= 50) it asks a delaymq master for GET_SCHEDULER_PROGRESS (3102):
a `scheduler.progress.SchedulerProgress`. A record is adopted only once this slave's CommitLog holds
everything below the record's `commitlog_offset` (the deliveries it claims are then here too); until
then it waits in `pending_records` (the newest one the replica covers is adopted). A request goes
out every interval without waiting for the previous answer (at most MAX_PROGRESS_IN_FLIGHT). An Apache
master answers 3102 with "request code not supported": the slave then relies on 45 / 60 only
(RocketMQ's own behaviour).

The promise is a record adopted at least every 50 ms. The gap between two adopted records is about
the request period plus the longest stall of either loop (or of replication), so the period is 10 ms:
a 2-vCPU host shared by master, slave and senders stalls a loop for 30 ms now and then, which a 20 ms
period turned into 51 ms gaps. `adopt_gaps_ms` keeps the last minute of gaps whatever the period.
"""

from __future__ import annotations

import asyncio
import collections
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

import structlog

from codec.admin_bodies import decode_table
from codec.codes import RequestCode as RC
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.fastjson import loads_lenient
from scheduler.progress import SchedulerProgress
from storage.meta_schema import parse_delay_offsets
from storage.subscription_group import SubscriptionGroupConfig
from storage.topic_config import TopicConfig

if TYPE_CHECKING:
    from remoting.client import RemotingClient
    from server.cluster.ha.learned import ReplicatedTopics
    from server.cluster.ha.replica_services import ReplicaServices
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)


class SlaveSyncStats(TypedDict):
    """The slave's metadata and scheduler-progress sync figures (`SlaveSynchronize.stats`)."""

    synced_at: float  # Unix seconds of the last metadata sync, 0.0: none yet
    progress_at: float  # Unix seconds of the last scheduler progress adopted, 0.0: none yet
    errors: int
    progress_taken_ms: int
    progress_commitlog_offset: int

TIMEOUT_S = 3.0
MAX_PROGRESS_IN_FLIGHT = 3
GAP_WINDOW_MS = 60_000  # haSchedulerProgressMaxGapMs covers about this long
TIMER_CHECK = struct.Struct(">qqqq")  # lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset


class SlaveSynchronize:
    def __init__(self, config: BrokerConfig, store: MessageStore, services: ReplicaServices, client: RemotingClient,
                 master_addr: Callable[[], str | None], learned: ReplicatedTopics | None = None) -> None:
        self.config = config
        self.learned = learned  # topics learned from replicated records since the last sync
        self.store = store
        self.services = services
        self.client = client
        self.master_addr = master_addr  # fn() -> the master's broker address or None
        self.progress: SchedulerProgress | None = None  # the last record adopted
        self.pending_records: collections.deque[SchedulerProgress] = collections.deque(maxlen=256)
        self.progress_supported = True
        self.timer_checkpoint: tuple[int, int, int, int] | None = None
        self.delay_offsets: dict[int, int] = {}
        self.synced_at = 0.0
        self.progress_at = 0.0
        # the gaps of the last minute of records (a count, so a shorter period does not shorten the window)
        self.adopt_gaps_ms: collections.deque[int] = collections.deque(
            maxlen=max(1000, GAP_WINDOW_MS // config.scheduler_sync_interval_ms))
        self.errors = 0

    # ---- metadata (RocketMQ) --------------------------------------------------------------
    async def sync_all(self) -> None:
        addr = self.master_addr()
        if not addr or addr == self.config.broker_addr:
            return
        host, _, port = addr.rpartition(":")
        vip = f"{host}:{int(port) - 2}"
        b = self.services
        learned_before = self.learned.seq if self.learned is not None else 0
        body = await self._get(vip, RC.GET_ALL_TOPIC_CONFIG)
        if body is not None:
            table = decode_table(body, "topicConfigTable")
            await b.topics.table.replace_all({n: TopicConfig.from_json(n, d) for n, d in table.items()})
            if self.learned is not None:  # what replication taught since the request was sent stays
                self.learned.after_sync(set(table), learned_before)
        body = await self._get(addr, RC.GET_ALL_CONSUMER_OFFSET)
        if body is not None:
            doc = loads_lenient(body)
            b.offsets.merge({str(key): {int(q): int(o) for q, o in queues.items()}
                             for key, queues in (doc.get("offsetTable") or {}).items()})
        body = await self._get(addr, RC.GET_ALL_DELAY_OFFSET)
        if body is not None:
            self.delay_offsets = parse_delay_offsets(body)
            svc = b.delay_service
            if svc is not None and self.progress is None:  # the 50 ms record, when there is one, is newer
                for lv, off in self.delay_offsets.items():
                    svc.offsets.set(lv, off)
                svc.offsets.persist()
        body = await self._get(addr, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if body is not None:
            table = decode_table(body, "subscriptionGroupTable")
            await b.groups.replace_all({n: SubscriptionGroupConfig.from_json(n, d) for n, d in table.items()})
        body = await self._get(vip, RC.GET_TIMER_CHECK_POINT)
        if body is not None and len(body) >= TIMER_CHECK.size:
            self.timer_checkpoint = TIMER_CHECK.unpack_from(body, 0)
        self.synced_at = time.time()

    async def _get(self, addr: str, code: int) -> bytes | None:
        try:
            resp = await self.client.invoke(addr, RemotingCommand.request(int(code), {}), TIMEOUT_S)
        except Exception as e:
            self.errors += 1
            log.info("slave_sync.failed", master=addr, code=int(code), error=repr(e))
            return None
        if resp.code != ResponseCode.SUCCESS:
            log.info("slave_sync.refused", master=addr, code=int(code), response=resp.code, remark=resp.remark)
            return None
        return resp.body_bytes()

    # ---- scheduler progress (delaymq) -----------------------------------------------------
    async def sync_progress(self) -> None:
        addr = self.master_addr()
        if not addr or not self.progress_supported:
            return
        timer = self.services.timer_service
        ext = {"timerQueueOffset": str(timer.commit_queue_offset)} if timer is not None else {}
        try:
            resp = await self.client.invoke(addr, RemotingCommand.request(int(RC.GET_SCHEDULER_PROGRESS), ext),
                                            TIMEOUT_S)
        except Exception as e:
            self.errors += 1
            log.debug("scheduler_sync.failed", master=addr, error=repr(e))
            return
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:  # an Apache master
            self.progress_supported = False
            log.info("scheduler_sync.unsupported", master=addr)
            return
        if resp.code != ResponseCode.SUCCESS:
            return
        try:
            p = SchedulerProgress.from_bytes(resp.body_bytes())
        except ValueError as e:
            self.errors += 1
            log.warning("scheduler_sync.bad_record", master=addr, error=str(e))
            return
        q = self.pending_records
        if q and p.taken_ms <= q[-1].taken_ms:
            return  # an older answer overtaken by a newer one
        q.append(p)
        self.try_adopt(self.store.commitlog_max_offset())

    @property
    def pending(self) -> SchedulerProgress | None:
        """The newest record received and not adopted yet."""
        return self.pending_records[-1] if self.pending_records else None

    def try_adopt(self, replicated_end: int) -> None:
        """Adopt the newest received record whose claims the replica already holds (its CommitLog end
        reached the record's); older ones are dropped, newer ones wait. HA calls this after every
        applied frame too. (Keeping only the newest would starve under load: each new record is a
        little ahead of the replica again.)"""
        q = self.pending_records
        p = None
        while q and q[0].commitlog_offset <= replicated_end:
            p = q.popleft()
        if p is None:
            return
        if self.progress is not None and p.taken_ms < self.progress.taken_ms:
            return
        if self.progress is not None:  # master-clock gap between consecutive adopted records
            self.adopt_gaps_ms.append(p.taken_ms - self.progress.taken_ms)
        self.progress = p
        self.progress_at = time.time()
        timer = self.services.timer_service
        if timer is not None and p.timer is not None:
            timer.follow(p.timer)

    async def run_progress(self) -> None:
        """A request every schedulerSyncIntervalMs, without waiting for the previous answer (at most
        MAX_PROGRESS_IN_FLIGHT outstanding), so a slow answer does not stretch the interval."""
        interval = self.config.scheduler_sync_interval_ms / 1000.0
        loop = asyncio.get_running_loop()
        in_flight: set[asyncio.Task[None]] = set()
        try:
            next_at = loop.time()
            while True:
                if len(in_flight) < MAX_PROGRESS_IN_FLIGHT:
                    t = loop.create_task(self.sync_progress())
                    in_flight.add(t)
                    t.add_done_callback(in_flight.discard)
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - loop.time()))
                next_at = max(next_at, loop.time() - interval)
        finally:
            for t in in_flight:
                t.cancel()

    async def run_metadata(self) -> None:
        interval = self.config.slave_synchronize_interval_ms / 1000.0
        await asyncio.sleep(min(3.0, interval))
        while True:
            await self.sync_all()
            await asyncio.sleep(interval)

    def stats(self) -> SlaveSyncStats:
        p = self.progress
        return {"synced_at": self.synced_at, "progress_at": self.progress_at, "errors": self.errors,
                "progress_taken_ms": p.taken_ms if p else 0,
                "progress_commitlog_offset": p.commitlog_offset if p else 0}
