"""Transactional messages (RocketMQ 4.x TransactionalMessageService, event-driven).

A send with TRAN_MSG=true is a half message: the put hook (`to_half`) stores it in
RMQ_SYS_TRANS_HALF_TOPIC queue 0 with REAL_TOPIC / REAL_QID / __transactionId__, transaction bits
cleared, so no consumer sees it. END_TRANSACTION (37) commits it (the record goes to its real
topic through the ordinary put hooks, so a DELAY or TIMER_* property still applies; REAL_TOPIC,
REAL_QID and TRAN_MSG are removed, sysFlag carries COMMIT) or rolls it back; either way an op record
(tag "d", body = the half queue offset) goes to RMQ_SYS_TRANS_OP_HALF_TOPIC, which is what restart
reads to know which halves are finished.

A half nobody ends is checked back: CHECK_TRANSACTION_STATE (39, oneway, body = the message with its
real topic) goes to a live producer of its group once `transactionTimeOut` (or the message's
CHECK_IMMUNITY_TIME_IN_SECONDS) has passed since it was born, then every `transactionCheckInterval`;
after `transactionCheckMax` checks it is moved to TRANS_CHECK_MAX_TIME_TOPIC and dropped. Unlike
RocketMQ, a round with no producer of the group connected does not count as a check (a producer
fleet being down for a restart should not discard its open transactions). One
`loop.call_at` wakes the service at the earliest due check; nothing polls. Ending a transaction that
is already ended is answered SUCCESS and changes nothing (RocketMQ would commit it twice).
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.codes import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    RequestCode,
    ResponseCode,
    SysFlag,
)
from codec.command import RemotingCommand
from codec.consume_queue_unit import UNIT_HEAD, UNIT_SIZE
from codec.errors import CodecError
from codec.msgid import offset_msg_id
from codec.properties import MessageConst
from codec.record import MessageRecord, decode_record, encode_record

if TYPE_CHECKING:
    from server.client_manager import ClientManager
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

# put_record(record, hooks) -> (response code, remark): a broker-made record stored as a send would be
# (BrokerController.put_record: put hooks when `hooks`, SYNC_FLUSH / SYNC_MASTER waits)
PutRecord = Callable[[MessageRecord, bool], Awaitable[tuple[int, str | None]]]

log = structlog.get_logger(__name__)

HALF_TOPIC, OP_TOPIC = RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
MAX_TIME_TOPIC = TRANS_CHECK_MAX_TIME_TOPIC
REMOVE_TAG = "d"
TRANSACTION_ID = MessageConst.TRANSACTION_ID
IMMUNITY_KEY = MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS
NOT_TYPE, PREPARED, COMMIT, ROLLBACK, TX_MASK = (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_PREPARED_TYPE,
                                               SysFlag.TRANSACTION_COMMIT_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE,
                                               SysFlag.TRANSACTION_MASK)
_SCAN_BATCH = 256


def is_half(props: Mapping[str, str], reconsume_times: int) -> bool:
    """RocketMQ's test: TRAN_MSG=true, except a retry that carries a delay level."""
    if str(props.get(MessageConst.TRAN_MSG, "")).lower() != "true":
        return False
    try:
        delayed = int(props.get(MessageConst.DELAY) or 0) > 0
    except ValueError:
        delayed = False
    return not (reconsume_times > 0 and delayed)


def to_half(rec: MessageRecord) -> None:
    """parseHalfMessageInner: park the message in the half topic, remembering where it belongs."""
    props = rec.properties
    uniq = props.get(MessageConst.UNIQ_KEY)
    if uniq:
        props[TRANSACTION_ID] = uniq
    props[MessageConst.REAL_TOPIC] = rec.topic
    props[MessageConst.REAL_QID] = str(rec.queue_id)
    rec.sys_flag &= ~TX_MASK
    rec.topic, rec.queue_id = HALF_TOPIC, 0


@dataclass(slots=True)
class HalfEntry:
    offset: int      # half queue offset (tranStateTableOffset)
    phys: int        # CommitLog offset
    size: int
    group: str       # PGROUP
    due_ms: int      # next check-back
    checks: int = 0


class TransactionService:
    def __init__(self, config: BrokerConfig, store: MessageStore, clients: ClientManager, put_record: PutRecord,
                 store_host: tuple[str, int]) -> None:
        """`put_record(record, hooks)`: store a broker-made record as a send would (the commit's real
        message with the put hooks; op records and check-back copies without); `clients`: the producers
        a check-back goes to."""
        self.config = config
        self.store = store
        self.clients = clients
        self.put_record = put_record
        self.store_host = store_host
        cfg = config
        self.timeout_ms = cfg.transaction_time_out
        self.check_max = cfg.transaction_check_max
        self.interval_ms = cfg.transaction_check_interval
        self.pending: dict[int, HalfEntry] = {}
        self._heap: list[tuple[int, int]] = []   # (due_ms, offset), stale entries skipped lazily
        self._scanned = 0                         # next half queue offset to look at
        self._timer: asyncio.TimerHandle | None = None
        self._armed_ms = 0
        self.running = False  # check-backs: a master's (start / stop)
        self.committed = self.rolled_back = self.checks_sent = self.discarded = 0

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Rebuilt from the store each time (a demoted master elected again: what it tracked before may
        have been cut from its CommitLog since)."""
        self.pending.clear()
        self._heap.clear()
        self.running = True
        done = self._read_op_offsets()
        self._scanned = max(0, self.store.min_offset(HALF_TOPIC, 0))
        self._scan(done)
        self.store.add_dispatch_listener(self._on_dispatch, HALF_TOPIC)
        if self.pending:
            log.info("transactions.recovered", pending=len(self.pending), ended=len(done))
        self._arm()

    def stop(self) -> None:
        self.running = False
        self.store.remove_dispatch_listener(self._on_dispatch)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ---- half messages -------------------------------------------------------------------
    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == HALF_TOPIC and queue_id == 0 and max_offset > self._scanned:
            self._scan(())
            self._arm()

    def _scan(self, done: Collection[int]) -> None:
        store = self.store
        end = store.max_offset(HALF_TOPIC, 0)
        while self._scanned < end:
            units = store.read_units(HALF_TOPIC, 0, self._scanned, _SCAN_BATCH)
            if not units:
                break
            for i in range(len(units) // UNIT_SIZE):
                offset = self._scanned + i
                if offset in done:
                    continue
                phys, size = UNIT_HEAD.unpack_from(units, i * UNIT_SIZE)
                rec = self._record(phys, size)
                if rec is None or rec.topic != HALF_TOPIC:
                    continue
                self._track(HalfEntry(offset, phys, size, rec.properties.get(MessageConst.PGROUP, ""),
                                      rec.born_timestamp + self._immunity_ms(rec)))
            self._scanned += len(units) // UNIT_SIZE

    def _immunity_ms(self, rec: MessageRecord) -> int:
        try:
            secs = int(rec.properties.get(IMMUNITY_KEY) or 0)
        except ValueError:
            secs = 0
        return secs * 1000 if secs > 0 else self.timeout_ms

    def _track(self, e: HalfEntry) -> None:
        self.pending[e.offset] = e
        heapq.heappush(self._heap, (e.due_ms, e.offset))

    def _record(self, phys: int, size: int | None = None) -> MessageRecord | None:
        try:
            raw = self.store.read_record(phys, size)
            if raw is None or len(raw) == 0:
                return None
            return decode_record(raw)[0]
        except (CodecError, ValueError, IndexError, OSError):
            return None

    def _read_op_offsets(self) -> set[int]:
        """Half offsets already committed or rolled back (op record bodies: offsets, comma-separated)."""
        done: set[int] = set()
        store = self.store
        off, end = max(0, store.min_offset(OP_TOPIC, 0)), store.max_offset(OP_TOPIC, 0)
        while off < end:
            units = store.read_units(OP_TOPIC, 0, off, _SCAN_BATCH)
            if not units:
                break
            for i in range(len(units) // UNIT_SIZE):
                rec = self._record(*UNIT_HEAD.unpack_from(units, i * UNIT_SIZE))
                if rec is not None and rec.properties.get(MessageConst.TAGS) == REMOVE_TAG:
                    done.update(int(x) for x in rec.body.decode("ascii", "replace").split(",") if x.strip().isdigit())
            off += len(units) // UNIT_SIZE
        return done

    # ---- END_TRANSACTION -----------------------------------------------------------------
    async def end(self, group: str, table_offset: int, phys: int, kind: int) -> tuple[int, str | None]:
        """Commit or roll back; (code, remark) for the response. Checks as EndTransactionProcessor does."""
        rec = self._record(phys)
        if rec is None or rec.topic != HALF_TOPIC:
            return ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
        if rec.properties.get(MessageConst.PGROUP, "") != group:
            return ResponseCode.SYSTEM_ERROR, "The producer group wrong"
        if rec.queue_offset != table_offset:
            return ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
        if rec.commitlog_offset != phys:
            return ResponseCode.SYSTEM_ERROR, "The commit log offset wrong"
        if table_offset not in self.pending:
            log.info("transactions.already_ended", offset=table_offset, kind=kind)
            return ResponseCode.SUCCESS, None
        if kind == COMMIT:
            final = _end_message(rec)
            code, remark = await self.put_record(final, True)
            if code != ResponseCode.SUCCESS:
                return code, remark
            self.committed += 1
        else:
            self.rolled_back += 1
        await self._remove(table_offset)
        return ResponseCode.SUCCESS, None

    async def _remove(self, offset: int) -> None:
        self.pending.pop(offset, None)
        code, remark = await self.put_record(self._op_record(offset), False)
        if code != ResponseCode.SUCCESS:  # the half is finished in memory; a restart may check it back once more
            log.error("transactions.op_write_failed", offset=offset, code=code, remark=remark)

    def _op_record(self, offset: int) -> MessageRecord:
        host = self.store_host
        now = int(time.time() * 1000)
        return MessageRecord(topic=OP_TOPIC, body=str(offset).encode(), queue_id=0, born_timestamp=now,
                             born_host=host, store_host=host, properties={MessageConst.TAGS: REMOVE_TAG})

    # ---- check-back ----------------------------------------------------------------------
    def _arm(self) -> None:
        heap = self._heap
        while heap and (heap[0][1] not in self.pending or self.pending[heap[0][1]].due_ms != heap[0][0]):
            heapq.heappop(heap)
        if not heap:
            return
        due = heap[0][0]
        if self._timer is not None:
            if self._armed_ms <= due:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._armed_ms = due
        self._timer = loop.call_at(loop.time() + max(0.0, (due - time.time() * 1000) / 1000), self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = int(time.time() * 1000)
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, offset = heapq.heappop(heap)
            e = self.pending.get(offset)
            if e is None or e.due_ms != due:
                continue
            if e.checks >= self.check_max:
                self.store.supervisor.run_once("tx-discard", self._discard(e), offset=offset)
                continue
            try:
                if self._check(e):
                    e.checks += 1
            except Exception as exc:  # one broken half must not stop the check-back of the others
                self.store.supervisor.failed("tx-check-back", exc, offset=offset, group=e.group)
            e.due_ms = now + self.interval_ms
            heapq.heappush(heap, (e.due_ms, offset))
        self._arm()

    def _check(self, e: HalfEntry) -> bool:
        """Ask one live producer of the group; False (not counted) when none is connected."""
        rec = self._record(e.phys, e.size)
        if rec is None:
            return False
        channels = self.clients.producers.get(e.group) or {}
        conn = next(iter(channels), None)
        if conn is None:
            log.warning("transactions.no_producer_to_check", group=e.group, offset=e.offset)
            return False
        uniq = rec.properties.get(MessageConst.UNIQ_KEY, "")
        host, port = self.store_host
        ext = {"topic": rec.properties.get(MessageConst.REAL_TOPIC, ""), "tranStateTableOffset": e.offset,
               "commitLogOffset": e.phys, "msgId": uniq, "transactionId": uniq,
               "offsetMsgId": offset_msg_id(host, port, e.phys),
               "brokerName": self.config.broker_name}
        rec.topic = rec.properties.get(MessageConst.REAL_TOPIC, rec.topic)
        rec.queue_id = _int(rec.properties.get(MessageConst.REAL_QID))
        conn.invoke_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, bytes(encode_record(rec)),
                                                   oneway=True))
        self.checks_sent += 1
        log.info("transactions.check_sent", group=e.group, offset=e.offset, checks=e.checks + 1)
        return True

    async def _discard(self, e: HalfEntry) -> None:
        rec = self._record(e.phys, e.size)
        if rec is not None:
            rec.topic, rec.queue_id = MAX_TIME_TOPIC, 0
            await self.put_record(rec, False)
        self.discarded += 1
        log.warning("transactions.discarded_after_max_checks", group=e.group, offset=e.offset, checks=e.checks)
        await self._remove(e.offset)

    def runtime_info(self) -> dict[str, int]:
        return {"transactionHalfPending": len(self.pending), "transactionCommitted": self.committed,
                "transactionRolledBack": self.rolled_back, "transactionChecksSent": self.checks_sent,
                "transactionDiscarded": self.discarded}


def _end_message(rec: MessageRecord) -> MessageRecord:
    """endMessageTransaction: the half's body and headers in its real topic/queue, marked COMMIT."""
    props = dict(rec.properties)
    topic = props.pop(MessageConst.REAL_TOPIC, rec.topic)
    qid = _int(props.pop(MessageConst.REAL_QID, None))
    props.pop(MessageConst.TRAN_MSG, None)
    return MessageRecord(topic=topic, body=rec.body, queue_id=qid, flag=rec.flag,
                         sys_flag=(rec.sys_flag & ~TX_MASK) | COMMIT, born_timestamp=rec.born_timestamp,
                         born_host=rec.born_host, store_host=rec.store_host, reconsume_times=rec.reconsume_times,
                         prepared_transaction_offset=rec.commitlog_offset, properties=props)


def _int(v: str | None) -> int:
    try:
        return int(v or 0)
    except ValueError:
        return 0
