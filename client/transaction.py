"""TransactionProducer: RocketMQ's sendMessageInTransaction for the asyncio client.

The half message (TRAN_MSG=true, PGROUP, sysFlag PREPARED) is sent like any other; then the local
transaction runs and its outcome goes to the broker that took the half as a oneway END_TRANSACTION
(commitLogOffset from the offset msgId, tranStateTableOffset = the half's queue offset). When the
broker asks (CHECK_TRANSACTION_STATE, with the message as body) the `check` callback answers the
same way with fromTransactionCheck=true. Callbacks may be plain functions or coroutines.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Unpack

import structlog

from codec.codes import RequestCode, SysFlag
from codec.command import RemotingCommand
from codec.msgid import decode_offset_msg_id
from codec.properties import MessageConst
from remoting.connection import Connection

from . import _wire as w
from .message import Message, MessageExt, SendResult, SendStatus, decode_messages
from .producer import Producer, ProducerOptions

log = structlog.get_logger(__name__)


class LocalTransactionState(enum.IntEnum):
    """The commitOrRollback values of END_TRANSACTION (MessageSysFlag transaction types)."""

    UNKNOW = 0
    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12


Outcome = LocalTransactionState | Awaitable[LocalTransactionState]


@dataclass(slots=True)
class TransactionSendResult:
    send_result: SendResult
    state: LocalTransactionState


class TransactionProducer(Producer):
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *,
                 execute: Callable[[Message, object], Outcome],
                 check: Callable[[MessageExt], Outcome], **kw: Unpack[ProducerOptions]) -> None:
        super().__init__(group, namesrv, **kw)
        self.execute = execute
        self.check = check
        self._checks: set[asyncio.Task[None]] = set()
        self.instance.remoting.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)

    async def send_in_transaction(self, msg: Message, arg: object = None) -> TransactionSendResult:
        body, sys_flag, props = self._prepare(msg)
        props[MessageConst.TRAN_MSG] = "true"
        props[MessageConst.PGROUP] = self.group
        sent = await self._send(msg, body, sys_flag | SysFlag.TRANSACTION_PREPARED_TYPE, props, None, None, None,
                                None, batch=False)
        state = LocalTransactionState.ROLLBACK_MESSAGE
        if sent.status is SendStatus.SEND_OK:
            try:
                state = await _resolve(self.execute(msg, arg))
            except Exception as e:  # the broker will ask again (check-back)
                log.warning("local transaction failed", msg_id=sent.msg_id, error=repr(e))
                state = LocalTransactionState.UNKNOW
        await self._end(sent.queue.broker_name, sent.offset_msg_id, sent.queue_offset, sent.msg_id, state, False)
        return TransactionSendResult(sent, state)

    async def _end(self, broker_name: str, offset_msg_id: str, table_offset: int, msg_id: str,
                   state: LocalTransactionState, from_check: bool, conn: Connection | None = None) -> None:
        _, _, phys = decode_offset_msg_id(offset_msg_id)
        fields = {"producerGroup": self.group, "tranStateTableOffset": table_offset, "commitLogOffset": phys,
                  "commitOrRollback": int(state), "fromTransactionCheck": "true" if from_check else "false",
                  "msgId": msg_id, "transactionId": msg_id}
        cmd = w.request(RequestCode.END_TRANSACTION, fields)
        if conn is not None:  # answer a check-back on the connection it came from
            conn.invoke_oneway(cmd)
        else:
            await self.instance.oneway_broker(broker_name, cmd)

    def _on_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        task = asyncio.get_running_loop().create_task(self._answer_check(conn, cmd), name="tx-check")
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None  # CHECK_TRANSACTION_STATE is oneway

    async def _answer_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        ext = cmd.ext_fields or {}
        try:
            [msg] = decode_messages(cmd.body)
            state = await _resolve(self.check(msg))
        except Exception as e:
            log.warning("transaction check failed", error=repr(e), msg_id=ext.get("msgId"))
            return
        await self._end(ext.get("brokerName", ""), ext.get("offsetMsgId", ""), int(ext.get("tranStateTableOffset", -1)),
                        ext.get("msgId", ""), state, True, conn=conn)


async def _resolve(v: Outcome) -> LocalTransactionState:
    """The callback's answer, awaited if it is awaitable; a bare int is taken by value (ValueError if
    it is no commitOrRollback value)."""
    if inspect.isawaitable(v):
        v = await v
    return LocalTransactionState(v)
