"""GET_TOPIC_CONFIG (351) and GET_SUBSCRIPTIONGROUP_CONFIG (352): one topic's / one group's config, as
RocketMQ 5 brokers answer them (AdminBrokerProcessor). Apache's 5.x proxy in cluster mode reads a topic's
message type from the first (TopicConfigAndQueueMapping: the TopicConfig fields and the topic's attributes
(server.topic_attributes), no queue mapping here; no `message.type` attribute means NORMAL) and a group's settings (FIFO, retry policy) from the second."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.fastjson import dumps
from remoting.dispatch import Response
from server import headers as H
from server.processors import Peer, Registrar, error, guarded, ok

if TYPE_CHECKING:
    from server.topic_attributes import TopicAttributes
    from server.topics import TopicManager
    from storage.subscription_group import SubscriptionGroupTable


@dataclass(frozen=True, slots=True)
class TopicGroupConfigDeps:
    topics: TopicManager
    groups: SubscriptionGroupTable
    attributes: TopicAttributes


def register(server: Registrar, deps: TopicGroupConfigDeps) -> None:
    @guarded
    def topic_config(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.GET_TOPIC_CONFIG.parse(cmd.ext_fields)
        tcfg = deps.topics.get(h.topic)
        if tcfg is None:
            return error(cmd, ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {h.topic}")
        attributes = deps.attributes.get(h.topic)
        return ok(cmd, body=dumps({**tcfg.to_json(), **({"attributes": attributes} if attributes else {})}))

    @guarded
    def group_config(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.GET_SUBSCRIPTIONGROUP_CONFIG.parse(cmd.ext_fields)
        gcfg = deps.groups.table.get(h.group)  # as Apache: never auto-created by a read
        if gcfg is None:
            return error(cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"The consumer group {h.group} does not exist on this broker")
        return ok(cmd, body=dumps(gcfg.to_json()))

    server.register(RequestCode.GET_TOPIC_CONFIG, topic_config)
    server.register(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, group_config)
