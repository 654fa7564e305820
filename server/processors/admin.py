"""Admin and lookup requests: UPDATE_AND_CREATE_TOPIC (17), VIEW_MESSAGE_BY_ID (33),
QUERY_MESSAGE (12), GET_BROKER_RUNTIME_INFO (28), CHECK_CLIENT_CONFIG (46)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.bodies import parse_check_client_body
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from remoting.dispatch import Response
from server import headers as H
from server.processors import Peer, Registrar, committed, error, guarded, json_body, ok
from server.topic_attributes import TopicAttributeError
from server.topics import TopicConfig, is_system_topic, topic_error

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from server.subscription_filter import SubscriptionFilters
    from server.topic_attributes import TopicAttributes
    from server.topics import TopicManager
    from storage.message_store import MessageStore
    from storage.meta_store import MetaStore

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class AdminDeps:
    """What the admin and lookup requests use (built by server.processor_wiring)."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    meta: MetaStore  # UPDATE_AND_CREATE_TOPIC answers once committed
    runtime_info: Callable[[], dict[str, object]]  # GET_BROKER_RUNTIME_INFO's table
    attributes: TopicAttributes  # RocketMQ 5 topic attributes (message.type)
    filters: SubscriptionFilters  # CHECK_CLIENT_CONFIG: does this broker take the subscription's expression


def register(server: Registrar, deps: AdminDeps) -> None:
    store = deps.store

    @guarded
    def create_topic(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.CREATE_TOPIC.parse(cmd.ext_fields)
        problem = topic_error(h.topic)
        if problem:
            return error(cmd, ResponseCode.SYSTEM_ERROR, problem)
        if is_system_topic(h.topic):
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"The topic[{h.topic}] is conflict with system topic.")
        if h.topic == deps.config.broker_cluster_name:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is conflict with system reserved words.")
        if h.readQueueNums <= 0 or h.writeQueueNums <= 0:
            return error(cmd, ResponseCode.SYSTEM_ERROR, "queue nums must be positive")
        filter_type = h.topicFilterType if h.topicFilterType in ("SINGLE_TAG", "MULTI_TAG") else "SINGLE_TAG"
        try:
            deps.attributes.modify(h.topic, h.attributes)
        except TopicAttributeError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        deps.topics.put(TopicConfig(h.topic, h.readQueueNums, h.writeQueueNums, h.perm, filter_type,
                                      h.topicSysFlag or 0, bool(h.order)))
        return committed(deps.meta, cmd)

    @guarded
    def view_message(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.VIEW_MESSAGE.parse(cmd.ext_fields)
        try:
            rec = store.read_record(h.offset) if h.offset >= 0 else None
        except (ValueError, IndexError, OSError):  # offset outside every CommitLog file, or not a record
            rec = None
        if rec is None or len(rec) == 0:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return ok(cmd, body=rec)

    @guarded
    def query_message(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.QUERY_MESSAGE.parse(cmd.ext_fields)
        max_num = h.maxNum
        if str((cmd.ext_fields or {}).get("_UNIQUE_KEY_QUERY", "")).lower() == "true":
            max_num = deps.config.default_query_max_num
        res = store.query_by_key(h.topic, h.key, max(1, max_num), h.beginTimestamp, h.endTimestamp)
        if not res.buffers:
            return error(cmd, ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        return ok(cmd, {"indexLastUpdateTimestamp": str(res.index_last_update_timestamp),
                        "indexLastUpdatePhyoffset": str(res.index_last_update_phy_offset)}, body=[*res.buffers])

    @guarded
    def runtime_info(conn: Peer, cmd: RemotingCommand) -> Response:
        table = {k: str(v) for k, v in deps.runtime_info().items()}
        return ok(cmd, body=json_body({"table": table}))

    @guarded
    def check_client_config(conn: Peer, cmd: RemotingCommand) -> Response:
        """A consumer's start() asks before it subscribes with a non-TAG expression (SQL92)."""
        if not cmd.body:
            return ok(cmd)
        sub = parse_check_client_body(cmd.body_bytes()).subscription
        if sub is None:
            return ok(cmd)
        refused = deps.filters.check(sub.expression_type, sub.sub_string)
        if refused is not None:
            log.info("check_client_config.refused", expression=sub.sub_string, remark=refused[1])
            return error(cmd, *refused)
        return ok(cmd)

    server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic)
    server.register(RequestCode.VIEW_MESSAGE_BY_ID, view_message)
    server.register(RequestCode.QUERY_MESSAGE, query_message)
    server.register(RequestCode.GET_BROKER_RUNTIME_INFO, runtime_info)
    server.register(RequestCode.CHECK_CLIENT_CONFIG, check_client_config)

