"""PULL_MESSAGE (11) with long polling.

Validation and subscription rules follow remoting-protocol.md §8.2. A PULL_NOT_FOUND with the
SUSPEND flag parks in `PullHoldService` until the store's dispatch listener reports a new max
offset for that queue or the suspend timeout passes, then the request re-runs once without
suspend and is answered. The body is the store's list of memoryview slices (never copied here).
The usual answer (a store lookup's status) is encoded straight to frame pieces
(`codec.pull_response`); error answers are RemotingCommands.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, cast

import structlog

from codec.cache import BoundedCache
from codec.codes import PullSysFlag, RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.pull_response import pull_response_frame
from codec.tags import MULTI_TAG, MultiTagCodes, java_hash
from remoting.dispatch import Response
from server.client_manager import SubscriptionData
from server.header_parsers import parse_pull
from server.header_spec import Long
from server.processors import Peer, Registrar, guarded
from server.subscription_filter import (
    RecordFilter,
    SubscriptionFilters,
    both,
    is_tag_type,
    tags_filter,
    unsupported_remark,
)
from storage.store_types import GetStatus

if TYPE_CHECKING:
    from codec.buffers import BytesLike
    from server.client_manager import ClientManager
    from server.cluster.ha.service import ReplicaRole
    from server.config import BrokerConfig
    from server.filter_bitmap import FilterBitmaps, UnitGate
    from server.headers import PullMessageHeader
    from server.offsets_table import ConsumerOffsetManager
    from server.pull_hold import PullHoldService
    from server.topics import TopicManager
    from storage.message_store import MessageStore
    from storage.subscription_group import SubscriptionGroupTable

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class PullDeps:
    """What PULL_MESSAGE uses (built by server.processor_wiring)."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupTable
    clients: ClientManager  # the group's subscription when the pull carries none
    offsets: ConsumerOffsetManager  # FLAG_COMMIT_OFFSET
    replica: ReplicaRole  # a slave never moves a consumer
    pull_hold: PullHoldService  # long polling
    on_pull: Callable[[str, str, int], None]  # (topic, group, n) pulled-message counters
    filters: SubscriptionFilters  # enablePropertyFilter, compiled SQL92 selectors
    bitmaps: FilterBitmaps | None  # enableCalcFilterBitMap: the SQL92 bitmap pre-filter

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = PullSysFlag.COMMIT_OFFSET, PullSysFlag.SUSPEND, PullSysFlag.SUBSCRIPTION


def parse_subscription(topic: str, sub_string: str | None, expression_type: str | None = None,
                       sub_version: int = 0) -> SubscriptionData:
    """FilterAPI.build: a TAG expression → SubscriptionData (split on `||`, trim, hash each tag; `*`/empty =
    all); any other type keeps its expression as is (SQL92 is compiled by `SubscriptionFilters`)."""
    if not is_tag_type(expression_type):
        assert expression_type is not None
        return SubscriptionData(topic, sub_string or "", (), frozenset(), sub_version, expression_type)
    s = (sub_string or "").strip()
    if s in ("", "*"):
        return SubscriptionData(topic, "*", (), frozenset(), sub_version, "TAG")
    tags = tuple(t.strip() for t in s.split("||") if t.strip())
    if not tags:
        raise ValueError(f"bad subscription expression {sub_string!r}")
    return SubscriptionData(topic, s, tags, frozenset(java_hash(t) for t in tags), sub_version, "TAG")


def status_to_code(status: str, request_offset: int) -> int:
    if status == "FOUND":
        return ResponseCode.SUCCESS
    if status in ("NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING"):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in ("NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE"):
        return ResponseCode.PULL_OFFSET_MOVED if request_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status in ("OFFSET_FOUND_NULL", "OFFSET_OVERFLOW_ONE"):
        return ResponseCode.PULL_NOT_FOUND
    if status in ("OFFSET_OVERFLOW_BADLY", "OFFSET_TOO_SMALL"):
        return ResponseCode.PULL_OFFSET_MOVED
    return ResponseCode.SYSTEM_ERROR


# store status -> (name, code at request offset 0, code at any other offset)
_STATUSES: BoundedCache[GetStatus, tuple[str, int, int]] = BoundedCache("pull.status", 64)


def _status(status: GetStatus, request_offset: int) -> tuple[str, int]:
    """(status name, response code): `status_to_code` remembered per status."""
    e = _STATUSES.get(status)
    if e is None:
        name = status.name
        e = (name, status_to_code(name, 0), status_to_code(name, 1))
        _STATUSES.remember(status, e)
    return e[0], (e[1] if request_offset == 0 else e[2])


_SUBS_MAX = 4096


# the pull's answer: frame pieces (codec.pull_response) or an error RemotingCommand; None for a oneway request
PullAnswer: TypeAlias = "list[BytesLike] | RemotingCommand | None"


class _Run(NamedTuple):
    """One run of a pull: its answer (None: hold it) and what a held pull needs to decide whether to hold on."""

    answer: PullAnswer
    code: int
    status: str  # the store's status name ("" for an error answer)
    next_begin_offset: int
    max_offset: int
    filtered: bool  # a tag or SQL92 filter applied (NO_MATCHED_MESSAGE can mean: nothing new matched)


class PullProcessor:
    def __init__(self, deps: PullDeps) -> None:
        self.deps = deps
        # (topic, subscription, expressionType, subVersion) -> SubscriptionData or the parse error:
        # a consumer that posts its subscription sends the same one with every pull (held pulls parse twice)
        self._subs: dict[tuple[str, str | None, str | None, int], SubscriptionData | str] = {}

    def __call__(self, conn: Peer, cmd: RemotingCommand) -> Response:
        """The response when it can be given now (messages found, or an error): inline, no task.
        A PULL_NOT_FOUND with SUSPEND returns the coroutine that holds it (the dispatcher runs it
        as a task)."""
        h = parse_pull(cmd.ext_fields)
        resp, code = self.process(cmd, h, first=True)
        if resp is not None or cmd.is_oneway:
            return resp
        return self._hold(cmd, h)

    async def _hold(self, cmd: RemotingCommand, h: PullMessageHeader) -> PullAnswer:
        """Hold, then answer by re-running without suspend."""
        cfg = self.deps.config
        timeout_ms: int
        if cfg.long_polling_enable:
            timeout_ms = h.suspendTimeoutMillis
        else:
            timeout_ms = cfg.short_polling_time_mills
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000.0
        while True:
            await self.deps.pull_hold.wait(h.topic, h.queueId, h.queueOffset, max(0.0, deadline - loop.time()))
            run = self._run(cmd, h, first=False)
            # a filtered pull whose new messages all failed its filter holds on past them (Apache's
            # notifyMessageArriving matches the filter before waking a held pull): it wakes for a match only
            if run.status != "NO_MATCHED_MESSAGE" or not run.filtered or loop.time() >= deadline:
                return run.answer
            h = copy.copy(h)
            h.queueOffset = Long(run.next_begin_offset)
            if run.next_begin_offset < run.max_offset:  # more than one scan's worth arrived: go on scanning
                await asyncio.sleep(0)

    def _err(self, cmd: RemotingCommand, code: int, remark: str) -> tuple[RemotingCommand, int]:
        return cmd.response(code=code, remark=remark, ext_fields={
            "suggestWhichBrokerId": "0", "nextBeginOffset": "0", "minOffset": "0", "maxOffset": "0"}), code

    def _fail(self, cmd: RemotingCommand, code: int, remark: str) -> _Run:
        answer, code = self._err(cmd, code, remark)
        return _Run(answer, code, "", 0, 0, False)

    def process(self, cmd: RemotingCommand, h: PullMessageHeader, first: bool) -> tuple[PullAnswer, int]:
        """(response, code); response None means: hold this request (first run only)."""
        run = self._run(cmd, h, first)
        return run.answer, run.code

    def _run(self, cmd: RemotingCommand, h: PullMessageHeader, first: bool) -> _Run:
        b = self.deps
        if not b.config.broker_permission & 4:
            return self._fail(cmd, ResponseCode.NO_PERMISSION, f"the broker[{b.config.broker_ip1}] pulling message is forbidden")
        gcfg = b.groups.find(h.consumerGroup)
        if gcfg is None:
            return self._fail(cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                             f"subscription group [{h.consumerGroup}] does not exist")
        if not gcfg.consume_enable:
            return self._fail(cmd, ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumerGroup}")
        tcfg = b.topics.get(h.topic)
        if tcfg is None:
            return self._fail(cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        if not tcfg.readable:
            return self._fail(cmd, ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if h.queueId < 0 or h.queueId >= tcfg.read_queue_nums:
            return self._fail(cmd, ResponseCode.SYSTEM_ERROR, f"queueId[{h.queueId}] is illegal, topic:[{h.topic}] "
                                                f"topicConfig.readQueueNums:[{tcfg.read_queue_nums}] "
                                                f"consumer:[{h.consumerGroup}]")
        sys_flag = h.sysFlag
        sub: SubscriptionData | str | None
        if sys_flag & FLAG_SUBSCRIPTION:
            key = (h.topic, h.subscription, h.expressionType, h.subVersion)
            sub = self._subs.get(key)
            if sub is None:
                try:
                    sub = parse_subscription(h.topic, h.subscription, h.expressionType, h.subVersion)
                except ValueError as e:
                    sub = str(e)
                if len(self._subs) >= _SUBS_MAX:
                    self._subs.clear()
                self._subs[key] = sub
            if isinstance(sub, str):
                return self._fail(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {sub}")
            sub_version: int = h.subVersion
        else:
            info = b.clients.consumer_group(h.consumerGroup)
            if info is None:
                return self._fail(cmd, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                 f"the consumer's group info not exist, group: {h.consumerGroup}")
            if info.message_model == "BROADCASTING" and not gcfg.consume_broadcast_enable:
                return self._fail(cmd, ResponseCode.NO_PERMISSION,
                                 f"the consumer group[{h.consumerGroup}] can not consume by broadcast way")
            sub = info.subscriptions.get(h.topic)
            if sub is None:
                return self._fail(cmd, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                 f"the consumer's subscription not exist, group: {h.consumerGroup}")
            if sub.sub_version < h.subVersion:
                return self._fail(cmd, ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            sub_version = sub.sub_version
        record_filter: RecordFilter | None
        literal: bytes | None = None  # bytes every record the SQL92 selector matches holds (a scan pre-filter)
        gate: UnitGate | None = None
        codes: Container[int] | None
        if is_tag_type(sub.expression_type):
            codes = None if sub.match_all else set(sub.code_set)
            record_filter = b.filters.retry_filter(h.consumerGroup, h.topic, self._group_subscription)
            if codes is not None and tcfg.topic_filter_type == MULTI_TAG:  # codes AND-ed, the tags decide (codec.tags)
                codes = MultiTagCodes(sub.code_set)
                record_filter = both(tags_filter(frozenset(sub.tags)), record_filter)
        else:  # SQL92: the record's properties decide (after the bitmap pre-filter, when on)
            sel = b.filters.selector(h.consumerGroup, h.topic, sub_version, sub.expression_type, sub.sub_string)
            if isinstance(sel, str):
                if sys_flag & FLAG_SUBSCRIPTION:
                    return self._fail(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                      f"parse the consumer's subscription failed: {sel}")
                return self._fail(cmd, ResponseCode.FILTER_DATA_NOT_EXIST,
                                  f"The broker's consumer filter data is not exist! Your expression may be wrong: {sel}")
            if not b.filters.enabled:
                return self._fail(cmd, ResponseCode.SYSTEM_ERROR, unsupported_remark(sub.expression_type))
            codes, record_filter, literal = None, sel.matches_record, sel.literal
            if b.bitmaps is not None:
                gate = b.bitmaps.gate(h.consumerGroup, h.topic, h.queueId, sub_version, sel)
        res = b.store.get_messages(h.topic, h.queueId, h.queueOffset, max(1, h.maxMsgNums), codes, record_filter,
                                   None, literal, None if gate is None else gate.flags)
        if gate is not None and b.bitmaps is not None:
            gate.scanned_to(res.next_begin_offset)
            b.bitmaps.count_skipped(gate)
        status, code = _status(res.status, h.queueOffset)
        slave = b.replica.is_slave
        if slave and code == ResponseCode.PULL_OFFSET_MOVED:  # a slave never moves a consumer (offsetCheckInSlave=false)
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        if first and sys_flag & FLAG_COMMIT_OFFSET and not slave:  # a slave stores no offset from a pull
            b.offsets.commit(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        filtered = codes is not None or record_filter is not None
        if code == ResponseCode.PULL_NOT_FOUND and first and sys_flag & FLAG_SUSPEND:
            return _Run(None, code, status, res.next_begin_offset, res.max_offset, filtered)
        body: list[BytesLike]
        if code == ResponseCode.SUCCESS:
            body, body_len = cast("list[BytesLike]", res.buffers), res.buffer_total_size
            b.on_pull(h.topic, h.consumerGroup, len(body))
        else:
            body, body_len = [], 0
        return _Run(pull_response_frame(cmd.opaque, cmd.serialize_type, code, status, res.next_begin_offset,
                                        res.min_offset, res.max_offset, body, body_len),
                    code, status, res.next_begin_offset, res.max_offset, filtered)

    def _group_subscription(self, group: str, topic: str) -> tuple[str, str, int] | None:
        """(expressionType, expression, subVersion) of `group`'s heartbeat subscription to `topic`."""
        info = self.deps.clients.consumer_group(group)
        sub = info.subscriptions.get(topic) if info is not None else None
        return None if sub is None else (sub.expression_type, sub.sub_string, sub.sub_version)


def register(server: Registrar, deps: PullDeps) -> None:
    server.register(RequestCode.PULL_MESSAGE, guarded(PullProcessor(deps).__call__))
