"""END_TRANSACTION (37): a producer commits or rolls back a half message (server.transactions).

Clients send it oneway, so the reply is usually dropped; a pending (UNKNOW, 0) state gets no reply
at all, as in RocketMQ's EndTransactionProcessor, and the half waits for its check-back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from server.header_spec import Header, HeaderSpec, Long
from server.processors import Peer, Registrar, error, guarded, ok
from server.transactions import COMMIT, ROLLBACK

if TYPE_CHECKING:
    from server.transactions import TransactionService

log = structlog.get_logger(__name__)

class EndTransactionHeader(Header):
    producerGroup: str
    tranStateTableOffset: Long
    commitLogOffset: Long
    commitOrRollback: int
    fromTransactionCheck: bool | None
    msgId: str | None
    transactionId: str | None


END_TRANSACTION_HEADER = HeaderSpec(EndTransactionHeader)


def register(server: Registrar, transactions: TransactionService) -> None:
    """END_TRANSACTION needs the transaction service alone."""

    @guarded
    async def end_transaction(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        h = END_TRANSACTION_HEADER.parse(cmd.ext_fields)
        if h.commitOrRollback not in (COMMIT, ROLLBACK):
            log.info("transactions.end_pending_state", group=h.producerGroup, offset=h.tranStateTableOffset,
                     state=h.commitOrRollback, from_check=bool(h.fromTransactionCheck), remark=cmd.remark)
            return None
        code, remark = await transactions.end(h.producerGroup, h.tranStateTableOffset, h.commitLogOffset,
                                              h.commitOrRollback)
        if code != ResponseCode.SUCCESS:
            log.warning("transactions.end_refused", group=h.producerGroup, offset=h.tranStateTableOffset,
                        code=code, remark=remark)
            return error(cmd, code, remark or "end transaction failed")
        return ok(cmd)

    server.register(RequestCode.END_TRANSACTION, end_transaction)
