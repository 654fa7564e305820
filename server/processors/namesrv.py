"""Embedded single-process mode (no `namesrvAddr`): the broker answers the name-server requests
itself and every route points at this process.

`LocalRoutes` is this broker's view as a `RouteSource`; the handlers and the route encoding are the
standalone name server's (server/cluster/namesrv/processor.py), so both modes answer alike:
GET_ROUTEINFO_BY_TOPIC (105) for an existing topic is TopicRouteData with `brokerAddrs {brokerId:
ourselves}`, an unknown one 17 TOPIC_NOT_EXIST (a Java producer then asks for TBW102, which exists
with PERM_INHERIT while autoCreateTopicEnable, and the send auto-creates the topic).
"""

from __future__ import annotations

from codec.bodies import BrokerData, QueueData, TopicRouteData
from codec.namesrv_bodies import encode_topic_list
from server.cluster.namesrv.processor import register_route_queries
from server.topics import advertised_perm


class LocalRoutes:
    """The routes of a one-broker cluster made of this process (a RouteSource)."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def _broker_data(self) -> BrokerData:
        cfg = self.broker.config
        return BrokerData(cfg.broker_cluster_name, cfg.broker_name, {cfg.broker_id: cfg.broker_addr})

    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        tc = self.broker.topics.get(topic)
        if tc is None:
            return None
        cfg = self.broker.config
        q = QueueData(cfg.broker_name, tc.read_queue_nums, tc.write_queue_nums,
                      advertised_perm(tc.perm, cfg.broker_permission), tc.topic_sys_flag)
        return TopicRouteData(queue_datas=[q], broker_datas=[self._broker_data()])

    def cluster_info(self) -> tuple[list[BrokerData], dict[str, list[str]]]:
        cfg = self.broker.config
        return [self._broker_data()], {cfg.broker_cluster_name: [cfg.broker_name]}

    async def all_topics_body(self) -> bytes:
        # remembered per data version, built off the loop when large (100,000 topics: no sort, no re-encode)
        return await self.broker.topics.table.topic_list_body()

    async def topics_by_cluster_body(self, cluster: str) -> bytes:
        if cluster != self.broker.config.broker_cluster_name:
            return encode_topic_list([])
        return await self.broker.topics.table.topic_list_body()

    def system_topic_list(self) -> tuple[list[str], str | None]:
        cfg = self.broker.config
        return [cfg.broker_cluster_name, cfg.broker_name], cfg.broker_addr


def register(server, broker) -> None:
    register_route_queries(server, LocalRoutes(broker), broker.kv_config)
