"""CONSUMER_SEND_MSG_BACK (36): a failed message goes to %RETRY%<group> with a delay level, or to
%DLQ%<group> once it has been reconsumed maxReconsumeTimes times (scheduled-messages.md §3,
4.9.8 `asyncConsumerSendMsgBack`, checks in that order).

The retry copy keeps body, flag, sysFlag, born timestamp/host, store host and all properties, gets
reconsumeTimes + 1, RETRY_TOPIC (first value kept) and ORIGIN_MESSAGE_ID (first value kept, else the
offset msgId), then goes through the broker's put hooks, so DELAY=L lands in SCHEDULE_TOPIC_XXXX
queue L-1 with REAL_TOPIC = %RETRY%<group>.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.codes import DLQ_PREFIX, RETRY_PREFIX, PermName, RequestCode, ResponseCode, TopicSysFlag
from codec.command import RemotingCommand
from codec.msgid import offset_msg_id
from codec.properties import MessageConst
from codec.record import MessageRecord, encode_record
from server.header_spec import Header, HeaderSpec, Long
from server.processors import Peer, Registrar, error, guarded
from server.processors.send_common import V3_4_9
from server.wiring import put_request
from storage.store_types import PutStatus

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from server.put_hooks import PutHooks
    from server.topics import TopicManager
    from storage.message_store import MessageStore
    from storage.store_types import PutResult
    from storage.subscription_group import SubscriptionGroupTable

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SendBackDeps:
    """What CONSUMER_SEND_MSG_BACK uses (built by server.processor_wiring)."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupTable
    hooks: PutHooks  # the retry copy's DELAY level
    on_put: Callable[[list[str], list[PutResult]], None]  # stored-message counters

PERM_WRITE, PERM_READ = PermName.WRITE, PermName.READ
TOPIC_UNIT_FLAG = TopicSysFlag.UNIT
SYNC_FLUSH_TIMEOUT_S = 5.0

class ConsumerSendMsgBackHeader(Header):
    offset: Long
    group: str
    delayLevel: int
    originMsgId: str | None
    originTopic: str | None
    unitMode: bool | None
    maxReconsumeTimes: int | None


HEADER = HeaderSpec(ConsumerSendMsgBackHeader)


def retry_level(delay_level: int, reconsume_times: int) -> int:
    """The requested level, or 3 + reconsumeTimes when the client asked for 0."""
    return 3 + reconsume_times if delay_level == 0 else delay_level


def goes_to_dlq(reconsume_times: int, max_reconsume_times: int, delay_level: int) -> bool:
    return reconsume_times >= max_reconsume_times or delay_level < 0


class ConsumerSendBackProcessor:
    def __init__(self, deps: SendBackDeps) -> None:
        self.deps = deps

    async def __call__(self, conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        h = HEADER.parse(cmd.ext_fields)
        b = self.deps
        gcfg = b.groups.find(h.group)
        if gcfg is None:
            return error(cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {h.group}")
        if not b.config.broker_permission & PERM_WRITE:
            return error(cmd, ResponseCode.NO_PERMISSION, f"the broker[{b.config.broker_addr}] sending message is forbidden")
        if gcfg.retry_queue_nums <= 0:
            return cmd.response(code=ResponseCode.SUCCESS)  # RocketMQ answers success and drops the message
        new_topic = RETRY_PREFIX + h.group
        queue_id = random.randrange(1 << 30) % gcfg.retry_queue_nums
        sys_flag = TOPIC_UNIT_FLAG if h.unitMode else 0
        tcfg = b.topics.create_in_send_back(new_topic, gcfg.retry_queue_nums, PERM_READ | PERM_WRITE, sys_flag)
        if tcfg is None:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"topic[{new_topic}] not exist")
        if not tcfg.writeable:
            return error(cmd, ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden")
        msg = b.store.lookup_message_by_offset(h.offset) if h.offset >= 0 else None
        if msg is None:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        props = dict(msg.properties)
        if not props.get(MessageConst.RETRY_TOPIC):
            props[MessageConst.RETRY_TOPIC] = msg.topic
        max_times = gcfg.retry_max_times
        if (cmd.version or 0) >= V3_4_9 and h.maxReconsumeTimes is not None:
            max_times = h.maxReconsumeTimes
        delay_level = h.delayLevel
        if goes_to_dlq(msg.reconsume_times, max_times, delay_level):
            new_topic = DLQ_PREFIX + h.group
            queue_id = 0
            dlq = b.topics.create_in_send_back(new_topic, 1, PERM_READ | PERM_WRITE, 0)
            if dlq is None:
                return error(cmd, ResponseCode.SYSTEM_ERROR, f"topic[{new_topic}] not exist")
            props[MessageConst.DELAY] = "0"
            log.info("send_back.to_dlq", group=h.group, reconsume_times=msg.reconsume_times, max=max_times)
        else:
            props[MessageConst.DELAY] = str(retry_level(delay_level, msg.reconsume_times))
        if not props.get(MessageConst.ORIGIN_MESSAGE_ID):
            host, port = msg.store_host
            props[MessageConst.ORIGIN_MESSAGE_ID] = offset_msg_id(host, port, msg.commitlog_offset)
        rec = MessageRecord(
            topic=new_topic, body=msg.body, queue_id=queue_id, flag=msg.flag, sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
            reconsume_times=msg.reconsume_times + 1, properties=props)
        hooked = b.hooks.apply(rec)
        if isinstance(hooked, tuple):
            return error(cmd, hooked[0], hooked[1])
        raw = encode_record(rec)
        req = put_request(raw, rec.topic, rec.queue_id, rec.properties, hooked)
        [result] = b.store.put([req])
        status = result.status.name
        if result.status is PutStatus.PUT_OK and result.flushed is not None:
            try:
                await asyncio.wait_for(asyncio.shield(result.flushed), SYNC_FLUSH_TIMEOUT_S)
            except TimeoutError:
                status = PutStatus.FLUSH_DISK_TIMEOUT.name
        if status != PutStatus.PUT_OK.name:
            return error(cmd, ResponseCode.SYSTEM_ERROR, status)
        b.on_put([rec.topic], [result])
        return cmd.response(code=ResponseCode.SUCCESS)


def register(server: Registrar, deps: SendBackDeps) -> None:
    server.register(RequestCode.CONSUMER_SEND_MSG_BACK, guarded(ConsumerSendBackProcessor(deps).__call__))
