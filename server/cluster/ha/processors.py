"""Requests served for HA: what a slave pulls from its master (GET_ALL_DELAY_OFFSET 45, GET_TIMER_CHECK_POINT
60; 21, 43 and 201 are in processors.admin_stats, built from the tables' cached fragments / in slices) and
delaymq's own PROMOTE_BROKER (3101, admin under ACL), GET_SCHEDULER_PROGRESS (3102), GET_HA_EPOCH (3103); and
RocketMQ 5's EXCHANGE_BROKER_HA_INFO (906) in the form a slave asks its master with (its HA address)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.codes import RequestCode as RC
from codec.codes import ResponseCode as RS
from codec.command import RemotingCommand
from codec.controller import ExchangeHAInfoRequestHeader, ExchangeHAInfoResponseHeader
from codec.errors import CodecError
from codec.timer_layout import CHECK
from remoting.dispatch import Response
from server.processors import Peer, Registrar, error, guarded, ok, request_body
from storage.meta_schema import format_delay_offsets

if TYPE_CHECKING:
    from scheduler.delay_service import DelayLevelService
    from scheduler.timer import TimerMessageStore
    from server.cluster.ha.service import ReplicaRole
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)

TIMER_CHECK_BODY = CHECK  # cluster-ha.md §3.5, 56 bytes: the timercheck file's layout


@dataclass(frozen=True, slots=True)
class HaDeps:
    """What the HA requests use (built by server.processor_wiring)."""

    config: BrokerConfig
    store: MessageStore
    replica: ReplicaRole
    delay_service: DelayLevelService
    timer_service: TimerMessageStore | None  # None: timerWheelEnable=false


def register(server: Registrar, deps: HaDeps) -> None:
    role = deps.replica

    @guarded
    def all_delay_offsets(conn: Peer, cmd: RemotingCommand) -> Response:
        svc = deps.delay_service
        table = svc.progress() if not role.is_slave else dict(svc.offsets.offsets)
        return ok(cmd, body=format_delay_offsets(table))

    @guarded
    def timer_check_point(conn: Peer, cmd: RemotingCommand) -> Response:
        t = deps.timer_service
        if t is None or t.checkpoint is None:
            return error(cmd, RS.SYSTEM_ERROR, "timer wheel is disabled (timerWheelEnable=false)")
        cp = t.checkpoint
        body = TIMER_CHECK_BODY.pack(t.commit_read_ms, cp.last_timerlog_flush_pos, t.commit_queue_offset,
                                     t.commit_queue_offset, cp.state_version, int(time.time() * 1000),
                                     cp.data_counter)
        return ok(cmd, body=body)

    @guarded
    def scheduler_progress(conn: Peer, cmd: RemotingCommand) -> Response:
        if role.is_slave:
            return error(cmd, RS.SYSTEM_ERROR, "this broker is a SLAVE: it delivers no scheduled messages")
        try:
            from_q = int(cmd.ext_fields.get("timerQueueOffset", "-1"))
        except ValueError:
            return error(cmd, RS.SYSTEM_ERROR, "timerQueueOffset must be an integer")
        return ok(cmd, body=role.progress(from_q).to_bytes())

    @guarded
    def ha_epoch(conn: Peer, cmd: RemotingCommand) -> Response:
        doc = {"epoch": role.epoch, "startOffset": role.epoch_start,
               "maxOffset": deps.store.commitlog_max_offset(), "brokerRole": deps.config.broker_role}
        return ok(cmd, body=json.dumps(doc).encode())

    @guarded
    def exchange_ha_info(conn: Peer, cmd: RemotingCommand) -> Response:
        """Apache's updateBrokerHaInfo, the asking form: a master answers where its slaves replicate from
        (brokerIP2:haListenPort, which need not be listenPort + 1); any other broker answers nothing set."""
        try:
            h = ExchangeHAInfoRequestHeader.from_ext(cmd.ext_fields)
        except CodecError as e:
            return error(cmd, RS.SYSTEM_ERROR, f"bad EXCHANGE_BROKER_HA_INFO header: {e}")
        if h.masterHaAddress is not None:
            return error(cmd, RS.SYSTEM_ERROR, "EXCHANGE_BROKER_HA_INFO with masterHaAddress (a master pushing its "
                         "address, slaveActingMaster) is not served: a delaymq slave asks its master")
        cfg = deps.config
        if cfg.broker_id != 0 or role.is_slave or role.fenced:
            return ok(cmd)
        return ok(cmd, ext_fields=ExchangeHAInfoResponseHeader(cfg.ha_server_addr, role.init_max_offset,
                                                               cfg.broker_addr).to_ext())

    @guarded
    async def promote(conn: Peer, cmd: RemotingCommand) -> Response:
        body = request_body(cmd)
        try:
            req = json.loads(body) if body else {}
            new_role = str(req.get("brokerRole") or "ASYNC_MASTER").upper()
        except (ValueError, AttributeError) as e:
            return error(cmd, RS.SYSTEM_ERROR, f"bad promote body: {e}")
        if new_role not in ("ASYNC_MASTER", "SYNC_MASTER"):
            return error(cmd, RS.SYSTEM_ERROR, f"brokerRole must be ASYNC_MASTER or SYNC_MASTER, got {new_role}")
        if not role.is_slave:
            return error(cmd, RS.SYSTEM_ERROR, f"this broker is already a master ({deps.config.broker_role})")
        info = await role.promote(new_role)
        return ok(cmd, body=json.dumps(info).encode())

    for code, fn in ((RC.GET_ALL_DELAY_OFFSET, all_delay_offsets),
                     (RC.GET_TIMER_CHECK_POINT, timer_check_point), (RC.GET_SCHEDULER_PROGRESS, scheduler_progress),
                     (RC.GET_HA_EPOCH, ha_epoch), (RC.PROMOTE_BROKER, promote),
                     (RC.EXCHANGE_BROKER_HA_INFO, exchange_ha_info)):
        server.register(int(code), fn)
