"""RocketMQ 5's pop consumption over remoting (Apache 5.1.3's broker codes, what a stateless proxy such as
Apache's `mqproxy -pm cluster` sends): POP_MESSAGE (long polling, orderly pops, initMode, TAG
and SQL92 expressions), ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE, NOTIFICATION, POLLING_INFO.

The engine is the broker's `server.pop.PopService`, shared with the in-broker gRPC endpoint: same state,
same semantics, same crash safety. A POP_MESSAGE answer's body is the pull wire format (the stored
records back to back), each record re-encoded with its delivery attempt as reconsumeTimes and its
receipt as the POP_CK property: Apache's extraInfo (codec.pop_receipt) naming the queue, the offset and
the delivery's popTime + invisibleTime, which is how ACK / CHANGE find the delivery in pop's durable
state (`PopService.ack_by_visible`). Nothing found before pollTime: POLLING_TIMEOUT, as Apache answers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.pop_receipt import (
    NORMAL_TOPIC_MARK,
    POP_ORDER_REVIVE_QUEUE,
    RETRY_TOPIC_MARK,
    ExtraInfo,
    decode_batch_ack,
    join_offset_info,
    offset_info_entry,
    parse_extra_info,
)
from codec.pop_receipt import ConsumeInitMode as InitMode
from codec.properties import MessageConst as K
from codec.record import encode_record
from codec.sql92 import EXPRESSION_TYPE as SQL92
from remoting.dispatch import Response
from server import headers as H
from server.pop.model import Delivery, Failure, MessageFilter, PopError, SqlFilter, TagFilter
from server.processors import Peer, Registrar, error, guarded, ok, request_body
from server.subscription_filter import unsupported_remark

if TYPE_CHECKING:
    from server.pop.service import PopService
    from server.subscription_filter import SubscriptionFilters

MAX_POP_NUMS = 32  # Apache: "pop message's num is greater than 32"
MAX_POLL_MS = 60_000  # a pollTime longer than this waits this long

_CODES: dict[Failure, int] = {
    Failure.GROUP_NOT_FOUND: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    Failure.FORBIDDEN: ResponseCode.NO_PERMISSION,
    Failure.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Failure.BAD_REQUEST: ResponseCode.SYSTEM_ERROR,
    Failure.INVALID_RECEIPT: ResponseCode.NO_MESSAGE,
    Failure.INTERNAL: ResponseCode.SYSTEM_ERROR,
}


@dataclass(frozen=True, slots=True)
class PopProcessorDeps:
    """What the remoting pop processors use (built by server.processor_wiring)."""

    pop: PopService
    broker_name: str  # the extraInfo's brokerName: a proxy routes the ack back by it
    filters: SubscriptionFilters  # SQL92 expressions (enablePropertyFilter) and their compiled selectors


def refused(cmd: RemotingCommand, e: PopError) -> RemotingCommand | None:
    return error(cmd, _CODES[e.failure], e.message)


def _deadline(poll_ms: int) -> float:
    return asyncio.get_running_loop().time() + max(0, min(poll_ms, MAX_POLL_MS)) / 1000


def pop_body(deliveries: list[Delivery], broker_name: str, order: bool) -> tuple[bytes, dict[str, str]]:
    """The POP_MESSAGE answer: the records (pull wire format, POP_CK and reconsumeTimes set) and the
    response header's receipt fields."""
    out = bytearray()
    starts: dict[int, int] = {}
    offsets: dict[int, list[int]] = {}
    revive_qid = POP_ORDER_REVIVE_QUEUE if order else 0
    for d in deliveries:
        receipt = ExtraInfo(d.offset, d.pop_time, d.invisible_ms, revive_qid, NORMAL_TOPIC_MARK, broker_name,
                            d.qid, d.offset)
        rec = d.rec
        rec.properties[K.POP_CK] = receipt.encode()
        rec.reconsume_times = d.attempt - 1
        out += encode_record(rec)
        starts.setdefault(d.qid, d.offset)
        offsets.setdefault(d.qid, []).append(d.offset)
    first = deliveries[0]
    header = {
        "popTime": str(first.pop_time), "invisibleTime": str(first.invisible_ms), "reviveQid": str(revive_qid),
        "startOffsetInfo": join_offset_info([offset_info_entry(False, q, str(o)) for q, o in starts.items()]),
        "msgOffsetInfo": join_offset_info([offset_info_entry(False, q, ",".join(map(str, offs)))
                                           for q, offs in offsets.items()]),
    }
    if order:  # one entry per queue: the attempts before this one of its first message
        per_queue: dict[int, int] = {}
        for d in deliveries:
            per_queue.setdefault(d.qid, d.attempt - 1)
        header["orderCountInfo"] = join_offset_info([offset_info_entry(False, q, str(c)) for q, c in per_queue.items()])
    return bytes(out), header


def register(server: Registrar, deps: PopProcessorDeps) -> None:
    pop = deps.pop

    @guarded
    async def pop_message(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.POP_MESSAGE.parse(cmd.ext_fields)
        if h.maxMsgNums > MAX_POP_NUMS or h.maxMsgNums <= 0:
            return error(cmd, ResponseCode.SYSTEM_ERROR,
                         f"pop message's num {h.maxMsgNums} is not in [1, {MAX_POP_NUMS}]")
        if h.invisibleTime <= 0:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"invisibleTime {h.invisibleTime} must be positive")
        accept: MessageFilter = TagFilter(h.exp or "*")
        if (h.expType or "TAG").upper() == SQL92:
            if not deps.filters.enabled:
                return error(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, unsupported_remark(SQL92))
            sel = deps.filters.selector(h.consumerGroup, h.topic, 0, SQL92, h.exp)
            if isinstance(sel, str):
                return error(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, sel)
            accept = SqlFilter(sel)
        if h.initMode not in (InitMode.MIN, InitMode.MAX):
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"initMode {h.initMode} is neither 0 (MIN) nor 1 (MAX)")
        order = bool(h.order)
        try:
            deliveries = await pop.receive(h.consumerGroup, h.topic, h.queueId, h.maxMsgNums, h.invisibleTime,
                                           accept, _deadline(h.pollTime), order=order,
                                           init_mode=h.initMode)
        except PopError as e:
            return refused(cmd, e)
        order = order or pop.is_fifo(h.consumerGroup)
        if not deliveries:
            return cmd.response(code=ResponseCode.POLLING_TIMEOUT, remark="NO_MESSAGE_IN_QUEUE", ext_fields={
                "popTime": "0", "invisibleTime": str(h.invisibleTime), "reviveQid": "0", "restNum": "0"})
        body, header = pop_body(deliveries, deps.broker_name, order)
        header["restNum"] = str(pop.rest_num(h.consumerGroup, h.topic, h.queueId))
        return cmd.response(code=ResponseCode.SUCCESS, remark="FOUND", ext_fields=header, body=body)

    @guarded
    def ack_message(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.ACK_MESSAGE.parse(cmd.ext_fields)
        try:
            receipt = parse_extra_info(h.extraInfo)
            if receipt.topic_mark != NORMAL_TOPIC_MARK:
                raise PopError(Failure.INVALID_RECEIPT, f"extraInfo names a pop retry topic: {h.extraInfo!r}")
            pop.ack_by_visible(h.consumerGroup, h.topic, h.queueId, h.offset, receipt.visible_ms)
        except ValueError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        except PopError as e:
            return refused(cmd, e)
        return ok(cmd)

    @guarded
    def batch_ack_message(conn: Peer, cmd: RemotingCommand) -> Response:
        """Every ack of the body is tried; like Apache, the answer is SUCCESS unless the body is bad
        (an ack of an expired or unknown delivery changes nothing)."""
        try:
            _, acks = decode_batch_ack(request_body(cmd))
        except CodecError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        for a in acks:
            if a.retry == RETRY_TOPIC_MARK:
                continue
            for offset in a.offsets:
                try:
                    pop.ack_by_visible(a.consumer_group, a.topic, a.queue_id, offset, a.visible_ms)
                except PopError:
                    continue
        return ok(cmd)

    @guarded
    def change_invisible_time(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.CHANGE_INVISIBLE_TIME.parse(cmd.ext_fields)
        if h.invisibleTime < 0:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"invisibleTime {h.invisibleTime} must not be negative")
        try:
            receipt = parse_extra_info(h.extraInfo)
            if receipt.topic_mark != NORMAL_TOPIC_MARK:
                raise PopError(Failure.INVALID_RECEIPT, f"extraInfo names a pop retry topic: {h.extraInfo!r}")
            pop_time = pop.change_by_visible(h.consumerGroup, h.topic, h.queueId, h.offset, receipt.visible_ms,
                                             h.invisibleTime)
        except ValueError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        except PopError as e:
            return refused(cmd, e)
        return ok(cmd, {"popTime": str(pop_time), "invisibleTime": str(h.invisibleTime),
                        "reviveQid": str(receipt.revive_qid)})

    @guarded
    def peek_message(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.PEEK_MESSAGE.parse(cmd.ext_fields)
        if h.maxMsgNums > MAX_POP_NUMS or h.maxMsgNums <= 0:
            return error(cmd, ResponseCode.SYSTEM_ERROR,
                         f"peek message's num {h.maxMsgNums} is not in [1, {MAX_POP_NUMS}]")
        try:
            records = pop.peek(h.consumerGroup, h.topic, h.queueId, h.maxMsgNums)
        except PopError as e:
            return refused(cmd, e)
        if not records:
            return error(cmd, ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE")
        return ok(cmd, {"popTime": "0", "invisibleTime": "0", "reviveQid": "0",
                        "restNum": str(pop.rest_num(h.consumerGroup, h.topic, h.queueId))}, b"".join(records))

    @guarded
    async def notification(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.NOTIFICATION.parse(cmd.ext_fields)
        try:
            has = await pop.wait_for_message(h.consumerGroup, h.topic, h.queueId, _deadline(h.pollTime))
        except PopError as e:
            return refused(cmd, e)
        return ok(cmd, {"hasMsg": "true" if has else "false"})

    @guarded
    def polling_info(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.POLLING_INFO.parse(cmd.ext_fields)
        try:
            pop.group_config(h.consumerGroup)
            pop.read_queue_ids(h.topic)
        except PopError as e:
            return refused(cmd, e)
        return ok(cmd, {"pollingNum": str(pop.polling_count(h.topic))})

    server.register(RequestCode.POP_MESSAGE, pop_message)
    server.register(RequestCode.ACK_MESSAGE, ack_message)
    server.register(RequestCode.BATCH_ACK_MESSAGE, batch_ack_message)
    server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change_invisible_time)
    server.register(RequestCode.PEEK_MESSAGE, peek_message)
    server.register(RequestCode.NOTIFICATION, notification)
    server.register(RequestCode.POLLING_INFO, polling_info)
