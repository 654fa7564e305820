"""Name-server request handlers (RocketMQ's DefaultRequestProcessor), in two groups:

- `register_route_queries(server, routes, kv)`: what clients and tools ask (GET_ROUTEINFO_BY_TOPIC 105,
  GET_BROKER_CLUSTER_INFO 106, GET_ALL_TOPIC_LIST_FROM_NAMESERVER 206, GET_TOPICS_BY_CLUSTER 224,
  GET_SYSTEM_TOPIC_LIST_FROM_NS 304, the KV config 100/101/102/219). `routes` is any `RouteSource`:
  the standalone name server's RouteInfoManager, or the broker's embedded single-process view
  (server/processors/namesrv.py) — one copy of the route encoding for both.
- `register_broker_requests(server, manager, kv)`: the standalone name server only (REGISTER_BROKER 103
  in its JSON and compressed forms, UNREGISTER_BROKER 104, QUERY_DATA_VERSION 322, WIPE_/ADD_WRITE_PERM
  205/327, DELETE_TOPIC_IN_NAMESRV 216, the unit-topic lists 311-313).

brokerAddrs ids in a route are quoted for request version >= 401 (V4_9_4) or acceptStandardJsonOnly,
bare (fastjson's Long-key form) otherwise (cluster-ha.md §0.4); ClusterInfo follows the same rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import structlog

from codec.bodies import BrokerData, TopicRouteData, encode_kv_table, encode_topic_route
from codec.codes import RequestCode as RC
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.namesrv_bodies import (
    DataVersion,
    body_crc32,
    decode_register_body,
    encode_cluster_info,
    encode_topic_list,
)
from remoting.dispatch import Response
from server import headers as H
from server.cluster.namesrv.config import NamesrvConfig
from server.cluster.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from server.cluster.namesrv.route_info import FLAG_UNIT, FLAG_UNIT_SUB, RouteInfoManager
from server.config import BrokerConfig, ConfigError, parse_properties
from server.processors import Peer, Registrar, error, guarded, ok

if TYPE_CHECKING:
    from remoting.connection import Connection

log = structlog.get_logger(__name__)

# keys UPDATE_NAMESRV_CONFIG may not change (RocketMQ's configBlackList, plus what is bound at start)
CONFIG_BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome",
                               "listenPort", "listenHost", "maxFrameSize"})
V4_9_4 = 401


class RouteSource(Protocol):
    """What the route queries read (RouteInfoManager, or the embedded broker's own view)."""

    def pickup_topic_route(self, topic: str) -> TopicRouteData | None: ...

    def cluster_info(self) -> tuple[list[BrokerData], dict[str, list[str]]]: ...

    async def all_topics_body(self) -> bytes:
        """TopicList JSON of every topic (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
        ...

    async def topics_by_cluster_body(self, cluster: str) -> bytes:
        """TopicList JSON of the cluster's topics (GET_TOPICS_BY_CLUSTER)."""
        ...

    def system_topic_list(self) -> tuple[list[str], str | None]: ...


def quoted_ids(cmd: RemotingCommand, accept_standard_json_only: bool | None = None) -> bool:
    return bool(accept_standard_json_only) or (cmd.version or 0) >= V4_9_4


def register_route_queries(server: Registrar, routes: RouteSource, kv: KVConfigManager) -> None:
    @guarded
    def get_route(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.ROUTE.parse(cmd.ext_fields)
        route = routes.pickup_topic_route(h.topic)
        if route is None:
            return error(cmd, ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {h.topic}")
        return ok(cmd, body=encode_topic_route(route, quoted_keys=quoted_ids(cmd, h.acceptStandardJsonOnly)))

    @guarded
    def get_cluster_info(conn: Peer, cmd: RemotingCommand) -> Response:
        brokers, clusters = routes.cluster_info()
        return ok(cmd, body=encode_cluster_info(brokers, clusters, quoted_keys=quoted_ids(cmd)))

    @guarded
    async def get_all_topics(conn: Peer, cmd: RemotingCommand) -> Response:
        return ok(cmd, body=await routes.all_topics_body())

    @guarded
    async def get_topics_by_cluster(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.TOPICS_BY_CLUSTER.parse(cmd.ext_fields)
        return ok(cmd, body=await routes.topics_by_cluster_body(h.cluster))

    @guarded
    def get_system_topics(conn: Peer, cmd: RemotingCommand) -> Response:
        topics, addr = routes.system_topic_list()
        return ok(cmd, body=encode_topic_list(topics, addr))

    @guarded
    def put_kv(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.PUT_KV_CONFIG.parse(cmd.ext_fields)
        kv.put(h.namespace, h.key, h.value or "")
        return ok(cmd)

    @guarded
    def get_kv(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.KV_CONFIG.parse(cmd.ext_fields)
        value = kv.get(h.namespace, h.key)
        if value is None:
            return error(cmd, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return ok(cmd, ext_fields={"value": value})

    @guarded
    def delete_kv(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.KV_CONFIG.parse(cmd.ext_fields)
        kv.delete(h.namespace, h.key)
        return ok(cmd)

    @guarded
    def get_kv_list(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.KV_NAMESPACE.parse(cmd.ext_fields)
        table = kv.namespace(h.namespace)
        if table is None:
            return error(cmd, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace}")
        return ok(cmd, body=encode_kv_table(table))

    for code, fn in ((RC.GET_ROUTEINFO_BY_TOPIC, get_route), (RC.GET_BROKER_CLUSTER_INFO, get_cluster_info),
                     (RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, get_all_topics),
                     (RC.GET_TOPICS_BY_CLUSTER, get_topics_by_cluster),
                     (RC.GET_SYSTEM_TOPIC_LIST_FROM_NS, get_system_topics),
                     (RC.PUT_KV_CONFIG, put_kv), (RC.GET_KV_CONFIG, get_kv), (RC.DELETE_KV_CONFIG, delete_kv),
                     (RC.GET_KVLIST_BY_NAMESPACE, get_kv_list)):
        server.register(int(code), fn)


def register_broker_requests(server: Registrar, manager: RouteInfoManager, kv: KVConfigManager) -> None:
    @guarded
    def register_broker(conn: Connection, cmd: RemotingCommand) -> Response:
        h = H.REGISTER_BROKER.parse(cmd.ext_fields)
        raw = cmd.body_bytes()
        if h.bodyCrc32 and raw and body_crc32(raw) != h.bodyCrc32:
            log.warning("namesrv.register_crc_mismatch", broker_addr=h.brokerAddr, peer=conn.peer)
            return error(cmd, ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            body = decode_register_body(raw, bool(h.compressed))
        except CodecError as e:
            log.warning("namesrv.register_bad_body", broker_addr=h.brokerAddr, compressed=bool(h.compressed),
                        error=str(e))
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {e}")
        result = manager.register_broker(h.clusterName, h.brokerAddr, h.brokerName, h.brokerId,
                                         h.haServerAddr, body, conn)
        ext = {}
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        order = kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return ok(cmd, ext_fields=ext or None, body=encode_kv_table(order) if order is not None else b"")

    @guarded
    def unregister_broker(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.BROKER_IDENTITY.parse(cmd.ext_fields)
        manager.unregister_broker(h.clusterName, h.brokerAddr, h.brokerName, h.brokerId)
        return ok(cmd)

    @guarded
    def query_data_version(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.BROKER_IDENTITY.parse(cmd.ext_fields)
        try:
            dv = DataVersion.decode(cmd.body_bytes())
        except CodecError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"bad DataVersion body: {e}")
        changed = manager.is_broker_topic_config_changed(h.brokerAddr, dv)
        if not changed:  # 4.9.8: an unchanged broker is kept alive by the query
            manager.update_broker_info_update_timestamp(h.brokerAddr)
        stored = manager.query_broker_topic_config(h.brokerAddr)
        return ok(cmd, ext_fields={"changed": "true" if changed else "false"},
                  body=stored.encode() if stored is not None else b"")

    @guarded
    def wipe_write_perm(conn: Connection, cmd: RemotingCommand) -> Response:
        h = H.BROKER_NAME.parse(cmd.ext_fields)
        n = manager.wipe_write_perm_of_broker(h.brokerName)
        log.info("namesrv.wipe_write_perm", broker_name=h.brokerName, topics=n, peer=conn.peer)
        return ok(cmd, ext_fields={"wipeTopicCount": str(n)})

    @guarded
    def add_write_perm(conn: Connection, cmd: RemotingCommand) -> Response:
        h = H.BROKER_NAME.parse(cmd.ext_fields)
        n = manager.add_write_perm_of_broker(h.brokerName)
        log.info("namesrv.add_write_perm", broker_name=h.brokerName, topics=n, peer=conn.peer)
        return ok(cmd, ext_fields={"addTopicCount": str(n)})

    @guarded
    def delete_topic(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.DELETE_TOPIC_IN_NAMESRV.parse(cmd.ext_fields)
        manager.delete_topic(h.topic, h.clusterName)
        return ok(cmd)

    def topic_list(want: Callable[[int], bool]) -> Callable[[Peer, RemotingCommand], Response]:
        @guarded
        def handler(conn: Peer, cmd: RemotingCommand) -> Response:
            return ok(cmd, body=encode_topic_list(manager.topics_with_flag(want)))
        return handler

    for code, fn in ((RC.REGISTER_BROKER, register_broker), (RC.UNREGISTER_BROKER, unregister_broker),
                     (RC.QUERY_DATA_VERSION, query_data_version), (RC.WIPE_WRITE_PERM_OF_BROKER, wipe_write_perm),
                     (RC.ADD_WRITE_PERM_OF_BROKER, add_write_perm), (RC.DELETE_TOPIC_IN_NAMESRV, delete_topic),
                     (RC.GET_UNIT_TOPIC_LIST, topic_list(lambda f: bool(f & FLAG_UNIT))),
                     (RC.GET_HAS_UNIT_SUB_TOPIC_LIST, topic_list(lambda f: bool(f & FLAG_UNIT_SUB))),
                     (RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
                      topic_list(lambda f: not f & FLAG_UNIT and bool(f & FLAG_UNIT_SUB)))):
        server.register(int(code), fn)


def register_namesrv_config(server: Registrar, config: NamesrvConfig, manager: RouteInfoManager) -> None:
    """GET_NAMESRV_CONFIG (319): the settings as `key=value` lines; UPDATE_NAMESRV_CONFIG (318): a properties
    body applied at once (NO_PERMISSION for a black-listed key, SYSTEM_ERROR naming a bad value; nothing
    is applied unless every key is acceptable). Not persisted, as in RocketMQ without a config file."""

    def as_text() -> bytes:
        return "".join(f"{BrokerConfig.key_for(f.name)}={getattr(config, f.name)}\n"
                       for f in dataclasses.fields(config)).encode()

    @guarded
    def get_config(conn: Peer, cmd: RemotingCommand) -> Response:
        return ok(cmd, body=as_text())

    @guarded
    def update_config(conn: Connection, cmd: RemotingCommand) -> Response:
        try:
            values = parse_properties(cmd.body_bytes().decode("utf-8"))
        except UnicodeDecodeError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, f"UnsupportedEncodingException {e}")
        if CONFIG_BLACK_LIST & values.keys():
            return error(cmd, ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        trial = dataclasses.replace(config)
        try:
            trial.apply(values, source="UPDATE_NAMESRV_CONFIG")
            trial.validate()
        except ConfigError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        for f in dataclasses.fields(config):
            setattr(config, f.name, getattr(trial, f.name))
        manager.broker_channel_expired_ms = config.broker_channel_expired_time
        log.info("namesrv.config_updated", keys=sorted(values), peer=conn.peer)
        return ok(cmd)

    server.register(int(RC.GET_NAMESRV_CONFIG), get_config)
    server.register(int(RC.UPDATE_NAMESRV_CONFIG), update_config)
