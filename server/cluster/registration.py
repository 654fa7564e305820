"""The broker's side of the name-server protocol (RocketMQ's BrokerOuterAPI + the registration
schedule, cluster-ha.md §1.7): with `namesrvAddr=a:p;b:p` the broker

- registers with every name server at start (REGISTER_BROKER 103, all topics, awaited up to
  `registerBrokerTimeoutMills` so a started broker is routable),
- then every `registerNameServerPeriod` after `registerNameServerInitialDelay`: unless `forceRegister`,
  it first asks each name server QUERY_DATA_VERSION (322) and re-sends its topic table only if one of
  them has a different DataVersion (or fails to answer); the query alone keeps it alive there,
- registers at once (coalesced) when its topic table changes (`topics_changed()`),
- registers again at once when its connection to a name server closes (that name server has just
  dropped it from the routes),
- unregisters (UNREGISTER_BROKER 104) from every name server on shutdown,
- while an answer is wanted (`want_answer_while`: a slave that does not know its master yet) registers
  in full every ANSWER_WANTED_PERIOD_S whatever `forceRegister` says: only REGISTER_BROKER's answer names
  the master, so a slave started before (or with) its master would otherwise wait for the next forced
  round, which with `forceRegister=false` comes only when its own topic table changes.

Each registration carries brokerId and haServerAddr; a slave's answers (its master's address and HA
address) go to the listeners added with `add_result_listener` (the HA room follows its master with it).
One supervised task runs the schedule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypedDict

import structlog

from codec.bodies import decode_kv_table
from codec.codes import RequestCode as RC
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.namesrv_bodies import DataVersion, body_crc32
from remoting.client import RemotingClient
from remoting.connection import Connection
from server.cluster.tasks import Supervised
from server.config import BrokerConfig
from storage.supervisor import Supervisor

log = structlog.get_logger(__name__)


class RegistrationStats(TypedDict):
    """The REGISTER_BROKER loop's figures (in GET_BROKER_RUNTIME_INFO, Java-style names)."""

    namesrvRegistrations: int  # REGISTER_BROKER requests answered SUCCESS
    namesrvRegisterSkipped: int  # rounds where every name server had our DataVersion
    namesrvRegisterFailures: int
    registerTaskFailures: int  # the supervised loop's restarts

UNREGISTER_TIMEOUT_S = 3.0
MIN_FORCED_GAP_S = 0.2  # change- and connection-triggered rounds: at most 5 a second, however many triggers
ANSWER_WANTED_PERIOD_S = 1.0  # the period while a slave does not know its master yet


@dataclass(slots=True)
class RegisterResult:
    namesrv: str
    master_addr: str | None = None
    ha_server_addr: str | None = None
    order_topic_config: dict[str, str] | None = None


# (compressed) -> (the topic table's DataVersion, its REGISTER_BROKER body in that form)
TopicSnapshot = Callable[[bool], Awaitable[tuple[DataVersion, bytes]]]
ResultListener = Callable[[RegisterResult], None]


class BrokerRegistrar:
    def __init__(self, config: BrokerConfig, snapshot: TopicSnapshot, client: RemotingClient | None = None,
                 supervisor: Supervisor | None = None) -> None:
        self.config = config
        self.supervisor = supervisor  # storage.supervisor (the broker's); None: one of its own
        self.snapshot = snapshot
        self.client = client or RemotingClient(connect_timeout=3.0)
        self.namesrvs = config.namesrv_addr_list
        self._listeners: list[ResultListener] = []
        self._changed = asyncio.Event()
        self._task: Supervised | None = None
        self.registrations = 0  # REGISTER_BROKER requests answered SUCCESS
        self.skipped = 0  # periodic rounds where every name server had our DataVersion
        self.failures = 0
        self.last_result: RegisterResult | None = None
        self._watched: set[object] = set()  # name-server connections whose loss triggers a registration
        self._stopping = False
        self._last_forced = 0.0
        self._last_round = time.monotonic()  # the start's registration counts as a round
        self._answer_wanted: Callable[[], bool] = lambda: False

    @property
    def period_s(self) -> float:
        return max(1000, min(self.config.register_name_server_period, 60000)) / 1000.0

    @property
    def timeout_s(self) -> float:
        return max(100, self.config.register_broker_timeout_mills) / 1000.0

    def add_result_listener(self, fn: ResultListener) -> None:
        self._listeners.append(fn)

    def want_answer_while(self, wanted: Callable[[], bool]) -> None:
        """While `wanted()` is true, every round registers in full, every ANSWER_WANTED_PERIOD_S."""
        self._answer_wanted = wanted

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.register_all(force=True)
        self._task = Supervised("broker.register_namesrv", self._schedule, supervisor=self.supervisor,
                                namesrvs=self.namesrvs).start()

    def topics_changed(self) -> None:
        """The topic table changed: register with every name server now (coalesced with others)."""
        self._changed.set()

    async def shutdown(self) -> None:
        self._stopping = True
        if self._task is not None:
            await self._task.stop()
        await self.unregister_all()
        self.client.close()

    async def _schedule(self) -> None:
        wait = self.config.register_name_server_initial_delay / 1000.0
        next_round = time.monotonic() + wait
        while True:
            if self._answer_wanted():
                next_round = min(next_round, self._last_round + ANSWER_WANTED_PERIOD_S)
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.0, next_round - time.monotonic()))
            except TimeoutError:
                pass
            if self._changed.is_set():
                await asyncio.sleep(max(0.0, self._last_forced + MIN_FORCED_GAP_S - time.monotonic()))
                self._changed.clear()
                self._last_forced = time.monotonic()
                await self.register_all(force=True)
                continue
            next_round = time.monotonic() + self.period_s
            self._last_round = time.monotonic()
            await self.register_all(force=self.config.force_register or self._answer_wanted())

    # ---- requests --------------------------------------------------------------------------
    def _identity(self) -> dict[str, str]:
        cfg = self.config
        return {"brokerName": cfg.broker_name, "brokerAddr": cfg.broker_addr,
                "clusterName": cfg.broker_cluster_name, "brokerId": str(cfg.broker_id)}

    async def register_all(self, force: bool) -> list[RegisterResult]:
        """One round: REGISTER_BROKER to every name server in parallel (after QUERY_DATA_VERSION says
        something changed, unless `force`). Failures are logged and counted, never raised."""
        if not self.namesrvs:
            return []
        compressed = self.config.compressed_register
        dv, body = await self.snapshot(compressed)
        if not force and not await self._need_register(dv):
            self.skipped += 1
            return []
        ext = {**self._identity(), "haServerAddr": self.config.ha_server_addr,
               "compressed": "true" if compressed else "false",
               "bodyCrc32": str(body_crc32(body))}
        outcomes = await asyncio.gather(*(self._register_one(ns, ext, body) for ns in self.namesrvs))
        results = [r for r in outcomes if r is not None]
        first = next((r for r in results if r.master_addr or r.ha_server_addr), results[0] if results else None)
        if first is not None:
            self.last_result = first
            for fn in self._listeners:
                try:
                    fn(first)
                except Exception:
                    log.exception("broker.register_listener_failed", listener=repr(fn))
        return results

    async def _register_one(self, namesrv: str, ext: dict[str, str], body: bytes) -> RegisterResult | None:
        cmd = RemotingCommand.request(int(RC.REGISTER_BROKER), dict(ext), body)
        try:
            resp = await self.client.invoke(namesrv, cmd, self.timeout_s)
        except Exception as e:
            self.failures += 1
            log.warning("broker.register_failed", namesrv=namesrv, error=repr(e))
            return None
        if resp.code != ResponseCode.SUCCESS:
            self.failures += 1
            log.warning("broker.register_refused", namesrv=namesrv, code=resp.code, remark=resp.remark)
            return None
        self.registrations += 1
        await self._watch(namesrv)
        fields = resp.ext_fields or {}
        result = RegisterResult(namesrv, fields.get("masterAddr") or None, fields.get("haServerAddr") or None)
        raw = resp.body_bytes()
        if raw:
            try:
                result.order_topic_config = decode_kv_table(raw)
            except CodecError as e:
                log.warning("broker.register_bad_kv_body", namesrv=namesrv, error=str(e))
        log.debug("broker.registered", namesrv=namesrv, master_addr=result.master_addr,
                  ha_server_addr=result.ha_server_addr)
        return result

    async def _watch(self, namesrv: str) -> None:
        """A name server drops a broker whose registration connection closes; when ours to `namesrv` closes
        (the name server restarted, expired us, or the network cut it) register again at once rather than
        at the next period. Not while shutting down; a name server that is down is retried by the period."""
        conn = await self.client.connection(namesrv)
        if conn in self._watched:
            return
        self._watched.add(conn)

        def lost(_f: object, conn: Connection = conn) -> None:
            self._watched.discard(conn)
            if not self._stopping:
                log.info("broker.namesrv_connection_lost", namesrv=namesrv)
                self._changed.set()

        conn.closed.add_done_callback(lost)

    async def _need_register(self, dv: DataVersion) -> bool:
        answers = await asyncio.gather(*(self._query_one(ns, dv) for ns in self.namesrvs))
        return any(answers)

    async def _query_one(self, namesrv: str, dv: DataVersion) -> bool:
        """True if this name server's DataVersion of us differs from `dv` (or it did not answer)."""
        cmd = RemotingCommand.request(int(RC.QUERY_DATA_VERSION), self._identity(), dv.encode())
        try:
            resp = await self.client.invoke(namesrv, cmd, self.timeout_s)
        except Exception as e:
            log.warning("broker.query_data_version_failed", namesrv=namesrv, error=repr(e))
            return True
        if resp.code != ResponseCode.SUCCESS:
            return True
        changed = (resp.ext_fields or {}).get("changed")
        if changed is None or str(changed).lower() == "true":
            return True
        raw = resp.body_bytes()
        try:
            return not raw or DataVersion.decode(raw) != dv
        except CodecError:
            return True

    async def unregister_all(self) -> None:
        async def one(ns: str) -> None:
            try:
                resp = await self.client.invoke(ns, RemotingCommand.request(int(RC.UNREGISTER_BROKER),
                                                                            self._identity()), UNREGISTER_TIMEOUT_S)
                log.info("broker.unregistered", namesrv=ns, code=resp.code)
            except Exception as e:
                log.warning("broker.unregister_failed", namesrv=ns, error=repr(e))

        await asyncio.gather(*(one(ns) for ns in self.namesrvs))

    def stats(self) -> RegistrationStats:
        return {"namesrvRegistrations": self.registrations, "namesrvRegisterSkipped": self.skipped,
                "namesrvRegisterFailures": self.failures,
                "registerTaskFailures": self._task.failures if self._task else 0}
