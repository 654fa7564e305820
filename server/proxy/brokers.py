"""The brokers, as the proxy reaches them: 4.x remoting requests to a broker's master address.

SEND_MESSAGE_V2 (SendMessageRequestHeaderV2's one-letter fields, codec.codes), POP_MESSAGE (queueId -1: every
readable queue of the topic on that broker, long polling for `pollTime`), ACK_MESSAGE and
CHANGE_MESSAGE_INVISIBLETIME with the broker's own receipt (extraInfo, codec.pop_receipt); END_TRANSACTION,
CONSUMER_SEND_MSG_BACK (a DLQ forward, as Apache's proxy does it), the consumer offsets and the queues'
min / max / by-time offsets, and PULL_MESSAGE (long polling with the SUSPEND flag).

Popped records are made the way Apache's client makes them (MQClientAPIImpl.processPopResponse): a delaymq
broker puts each message's POP_CK in the record; an Apache broker does not, and the receipt is built from
the answer's header (startOffsetInfo: the checkpoint's start offset; popTime, invisibleTime, reviveQid) and
the message (its topic's mark, queue, offset), with an orderly pop's delivery count from orderCountInfo.
An ACK / CHANGE of a message popped from the pop retry topic names that topic (ReceiptHandle.getRealTopic).

A pop's `order` is the group's consumeMessageOrderly, which the caller reads from server.proxy.metadata
(the same cached GET_SUBSCRIPTIONGROUP_CONFIG answer a consumer's Settings are built from): an Apache broker
then hands out a FIFO queue's next message only after the previous one is acknowledged."""

from __future__ import annotations

import time
from dataclasses import dataclass

from codec.codes import DEFAULT_TOPIC, PullSysFlag, RequestCode, SysFlag
from codec.codes import SendMessageRequestHeaderV2 as V2
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.pop_receipt import (
    RETRY_TOPIC_MARK,
    ConsumeInitMode,
    ExtraInfo,
    offset_info_key,
    order_count_key,
    parse_offset_info,
    pop_retry_topic,
    topic_mark,
)
from codec.properties import MessageConst as K
from codec.properties import properties_to_string
from codec.record import MessageRecord, iter_records
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from server.grpc.status import Code, GrpcError
from server.proxy.coalesce import SendCoalescer

REQUEST_TIMEOUT_S = 3.0
POLL_MARGIN_S = 2.0  # a POP_MESSAGE's answer may come this long after its pollTime
SEND_MESSAGE_V2 = int(RequestCode.SEND_MESSAGE_V2)  # a command's code is a plain int (RemotingCommand.request)


def _failed(addr: str, e: Exception) -> GrpcError:
    return GrpcError(Code.PROXY_TIMEOUT if isinstance(e, TimeoutError) else Code.INTERNAL_SERVER_ERROR,
                     f"broker {addr}: {type(e).__name__}: {e}")


@dataclass(frozen=True, slots=True)
class Popped:
    """A POP_MESSAGE answer: the records (each with its POP_CK extraInfo) or none (`code` says why)."""

    code: int
    remark: str
    records: list[MessageRecord]
    invisible_ms: int


class RemoteBrokers:
    def __init__(self, client: RemotingClient, default_queue_nums: int = 4, sends: SendCoalescer | None = None) -> None:
        self.client = client
        self.default_queue_nums = default_queue_nums
        self._default_queue_nums = str(default_queue_nums)
        # SEND_MESSAGE_V2 requests through the coalescer (server.proxy.coalesce); None: one write each
        self.sends = sends

    async def _invoke(self, addr: str, cmd: RemotingCommand, timeout: float = REQUEST_TIMEOUT_S,
                      coalesce: bool = False) -> RemotingCommand:
        try:
            if coalesce and self.sends is not None:
                return await self.sends.invoke(addr, cmd, timeout)
            return await self.client.invoke(addr, cmd, timeout)
        except (OSError, RemotingError) as e:
            raise _failed(addr, e) from None

    async def send(self, addr: str, topic: str, qid: int, props: dict[str, str], sys_flag: int, body: bytes,
                   born_ms: int) -> RemotingCommand:
        ext = {V2.producerGroup: topic, V2.topic: topic, V2.defaultTopic: DEFAULT_TOPIC,
               V2.defaultTopicQueueNums: self._default_queue_nums, V2.queueId: str(qid),
               V2.sysFlag: str(sys_flag), V2.bornTimestamp: str(born_ms), V2.flag: "0",
               V2.properties: properties_to_string(props), V2.reconsumeTimes: "0", V2.unitMode: "false",
               V2.batch: "false"}
        # every value is already a str: the command is made as RemotingCommand.request would make it, without
        # its per-field coercion (the hot path of a proxied send)
        cmd = RemotingCommand(SEND_MESSAGE_V2, ext_fields=ext, body=body)
        try:  # `_invoke(addr, cmd, coalesce=True)` written out: one coroutine less per send
            if self.sends is not None:
                return await self.sends.invoke(addr, cmd, REQUEST_TIMEOUT_S)
            return await self.client.invoke(addr, cmd, REQUEST_TIMEOUT_S)
        except (OSError, RemotingError) as e:
            raise _failed(addr, e) from None

    async def pop(self, addr: str, broker_name: str, group: str, topic: str, max_nums: int, invisible_ms: int,
                  poll_ms: int, exp_type: str, exp: str, order: bool = False) -> Popped:
        ext = {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": str(max_nums),
               "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "bornTime": str(int(time.time() * 1000)),
               "initMode": str(ConsumeInitMode.MIN), "expType": exp_type, "exp": exp,
               "order": "true" if order else "false"}
        resp = await self._invoke(addr, RemotingCommand.request(RequestCode.POP_MESSAGE, ext),
                                  poll_ms / 1000 + POLL_MARGIN_S)
        records = list(iter_records(resp.body_bytes())) if resp.body_len() else []
        if records:
            try:
                with_receipts(records, resp.ext_fields, broker_name, order)
            except (CodecError, ValueError) as e:
                raise GrpcError(Code.INTERNAL_SERVER_ERROR, f"broker {addr}: unreadable POP_MESSAGE answer: {e}") from None
        return Popped(resp.code, resp.remark or "", records, int(resp.ext_fields.get("invisibleTime", invisible_ms)))

    async def ack(self, addr: str, group: str, topic: str, receipt: ExtraInfo, text: str) -> RemotingCommand:
        ext = {"consumerGroup": group, "topic": _real_topic(topic, group, receipt), "queueId": str(receipt.queue_id), "extraInfo": text,
               "offset": str(receipt.queue_offset if receipt.queue_offset is not None else receipt.ck_queue_offset)}
        return await self._invoke(addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, ext))

    async def change_invisible(self, addr: str, group: str, topic: str, receipt: ExtraInfo, text: str,
                               invisible_ms: int) -> RemotingCommand:
        ext = {"consumerGroup": group, "topic": _real_topic(topic, group, receipt), "queueId": str(receipt.queue_id), "extraInfo": text,
               "offset": str(receipt.queue_offset if receipt.queue_offset is not None else receipt.ck_queue_offset),
               "invisibleTime": str(invisible_ms)}
        return await self._invoke(addr, RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext))

    async def end_transaction(self, addr: str, producer_group: str, table_offset: int, commitlog_offset: int,
                              commit: bool, msg_id: str, transaction_id: str) -> RemotingCommand:
        ext = {"producerGroup": producer_group, "tranStateTableOffset": str(table_offset),
               "commitLogOffset": str(commitlog_offset), "fromTransactionCheck": "false", "msgId": msg_id,
               "commitOrRollback": str(SysFlag.TRANSACTION_COMMIT_TYPE if commit else SysFlag.TRANSACTION_ROLLBACK_TYPE),
               "transactionId": transaction_id}
        return await self._invoke(addr, RemotingCommand.request(RequestCode.END_TRANSACTION, ext))

    async def send_back(self, addr: str, group: str, commitlog_offset: int, origin_msg_id: str, origin_topic: str,
                        max_reconsume_times: int) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK with delayLevel -1: straight to %DLQ%<group>."""
        ext = {"offset": str(commitlog_offset), "group": group, "delayLevel": "-1", "originMsgId": origin_msg_id,
               "originTopic": origin_topic, "unitMode": "false", "maxReconsumeTimes": str(max_reconsume_times)}
        return await self._invoke(addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext))

    async def update_offset(self, addr: str, group: str, topic: str, qid: int, offset: int) -> RemotingCommand:
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(qid), "commitOffset": str(offset)}
        return await self._invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext))

    async def query_offset(self, addr: str, group: str, topic: str, qid: int) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET with setZeroIfNotFound=false: a group that never committed is QUERY_NOT_FOUND,
        not the broker's new-group offset 0 (a 4.x consumer's starting point, not a committed offset)."""
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(qid), "setZeroIfNotFound": "false"}
        return await self._invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, ext))

    async def queue_offset(self, addr: str, code: int, topic: str, qid: int, at_ms: int = 0) -> RemotingCommand:
        """GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP (then `at_ms`)."""
        ext = {"topic": topic, "queueId": str(qid)}
        if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
            ext["timestamp"] = str(at_ms)
        return await self._invoke(addr, RemotingCommand.request(code, ext))

    async def pull(self, addr: str, group: str, topic: str, qid: int, offset: int, max_nums: int, exp_type: str,
                   exp: str, suspend_ms: int) -> RemotingCommand:
        flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_ms > 0 else 0)
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
               "maxMsgNums": str(max_nums), "sysFlag": str(flag), "commitOffset": "0",
               "suspendTimeoutMillis": str(suspend_ms), "subscription": exp, "subVersion": "0",
               "expressionType": exp_type}
        return await self._invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext),
                                  suspend_ms / 1000 + POLL_MARGIN_S)


def _real_topic(topic: str, group: str, receipt: ExtraInfo) -> str:
    """The topic an ACK / CHANGE names: the pop retry topic for a message popped from it."""
    return pop_retry_topic(topic, group) if receipt.topic_mark == RETRY_TOPIC_MARK else topic


def with_receipts(records: list[MessageRecord], header: dict[str, str], broker_name: str, order: bool) -> None:
    """Give each popped record that has no POP_CK the receipt built from the answer's header, and an orderly
    pop's records their delivery count (reconsume times), as Apache's client does."""
    pop_time, invisible, revive_qid = int(header["popTime"]), int(header["invisibleTime"]), int(header["reviveQid"])
    starts = parse_offset_info(header.get("startOffsetInfo"))
    counts = parse_offset_info(header.get("orderCountInfo")) if order else {}
    for rec in records:
        if K.POP_CK in rec.properties:
            continue
        key = offset_info_key(rec.topic, rec.queue_id)
        start = int(starts[key]) if key in starts else rec.queue_offset
        rec.properties[K.POP_CK] = ExtraInfo(start, pop_time, invisible, revive_qid, topic_mark(rec.topic),
                                             broker_name, rec.queue_id, rec.queue_offset).encode()
        count = counts.get(order_count_key(rec.topic, rec.queue_id, rec.queue_offset), counts.get(key))
        if count is not None and int(count) > 0:
            rec.reconsume_times = int(count)
