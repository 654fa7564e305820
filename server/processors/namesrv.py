"""Embedded single-process mode (no `namesrvAddr`): the broker answers the name-server requests
itself and every route points at this process.

`LocalRoutes` is this broker's view as a `RouteSource`; the handlers and the route encoding are the
standalone name server's (server/cluster/namesrv/processor.py), so both modes answer alike:
GET_ROUTEINFO_BY_TOPIC (105) for an existing topic is TopicRouteData with `brokerAddrs {brokerId:
ourselves}`, an unknown one 17 TOPIC_NOT_EXIST (a Java producer then asks for TBW102, which exists
with PERM_INHERIT while autoCreateTopicEnable, and the send auto-creates the topic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from codec.bodies import BrokerData, QueueData, TopicRouteData
from codec.namesrv_bodies import encode_topic_list
from server.cluster.namesrv.processor import register_route_queries
from server.processors import Registrar
from server.topics import advertised_perm

if TYPE_CHECKING:
    from server.cluster.namesrv.kv_config import KVConfigManager
    from server.config import BrokerConfig
    from server.topics import TopicManager


@dataclass(frozen=True, slots=True)
class NamesrvDeps:
    """What the embedded name server uses (built by server.processor_wiring)."""

    config: BrokerConfig
    topics: TopicManager
    kv_config: KVConfigManager


class LocalRoutes:
    """The routes of a one-broker cluster made of this process (a RouteSource)."""

    def __init__(self, config: BrokerConfig, topics: TopicManager) -> None:
        self.config = config
        self.topics = topics

    def _broker_data(self) -> BrokerData:
        cfg = self.config
        return BrokerData(cfg.broker_cluster_name, cfg.broker_name, {cfg.broker_id: cfg.broker_addr})

    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        tc = self.topics.get(topic)
        if tc is None:
            return None
        cfg = self.config
        q = QueueData(cfg.broker_name, tc.read_queue_nums, tc.write_queue_nums,
                      advertised_perm(tc.perm, cfg.broker_permission), tc.topic_sys_flag)
        return TopicRouteData(queue_datas=[q], broker_datas=[self._broker_data()])

    def cluster_info(self) -> tuple[list[BrokerData], dict[str, list[str]]]:
        cfg = self.config
        return [self._broker_data()], {cfg.broker_cluster_name: [cfg.broker_name]}

    async def all_topics_body(self) -> bytes:
        # remembered per data version, built off the loop when large (100,000 topics: no sort, no re-encode)
        return await self.topics.table.topic_list_body()

    async def topics_by_cluster_body(self, cluster: str) -> bytes:
        if cluster != self.config.broker_cluster_name:
            return encode_topic_list([])
        return await self.topics.table.topic_list_body()

    def system_topic_list(self) -> tuple[list[str], str | None]:
        cfg = self.config
        return [cfg.broker_cluster_name, cfg.broker_name], cfg.broker_addr


def register(server: Registrar, deps: NamesrvDeps) -> None:
    register_route_queries(server, LocalRoutes(deps.config, deps.topics), deps.kv_config)
