"""Name-server requests answered by the broker itself: every route points at this process.

GET_ROUTEINFO_BY_TOPIC (105): an existing topic → TopicRouteData with `brokerAddrs {0: ourselves}`;
an unknown one → 17 TOPIC_NOT_EXIST without body (a Java producer then asks for TBW102, which
exists with PERM_INHERIT while autoCreateTopicEnable, and the send auto-creates the topic).
brokerAddrs keys are unquoted (fastjson's Long-key form) for request version < 401 without
acceptStandardJsonOnly, quoted otherwise.
"""

from __future__ import annotations

import json

from server import headers as H
from server.processors import error, guarded, ok

GET_KV_CONFIG, GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO = 101, 105, 106
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
TOPIC_NOT_EXIST, QUERY_NOT_FOUND = 17, 22
V4_9_4 = 401


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def broker_data_json(broker, quoted: bool) -> str:
    cfg = broker.config
    addrs = f'{{{"0" if not quoted else chr(34) + "0" + chr(34)}:{_dumps(cfg.broker_addr)}}}'
    return (f'{{"brokerAddrs":{addrs},"brokerName":{_dumps(cfg.broker_name)},'
            f'"cluster":{_dumps(cfg.broker_cluster_name)}}}')


def route_body(broker, topic_cfg, quoted: bool) -> bytes:
    perm = topic_cfg.perm & broker.config.broker_permission | (topic_cfg.perm & 1)
    queue = {"brokerName": broker.config.broker_name, "perm": perm,
             "readQueueNums": topic_cfg.read_queue_nums, "topicSysFlag": topic_cfg.topic_sys_flag,
             "writeQueueNums": topic_cfg.write_queue_nums}
    return (f'{{"brokerDatas":[{broker_data_json(broker, quoted)}],"filterServerTable":{{}},'
            f'"queueDatas":[{_dumps(queue)}]}}').encode()


def register(server, broker) -> None:
    @guarded
    def get_route(conn, cmd):
        h = H.ROUTE.parse(cmd.ext_fields)
        cfg = broker.topics.get(h.topic)
        if cfg is None:
            return error(cmd, TOPIC_NOT_EXIST,
                         f"No topic route info in name server for the topic: {h.topic}")
        quoted = bool(h.acceptStandardJsonOnly) or (cmd.version or 0) >= V4_9_4
        return ok(cmd, body=route_body(broker, cfg, quoted))

    @guarded
    def get_kv_config(conn, cmd):
        h = H.KV_CONFIG.parse(cmd.ext_fields)
        value = broker.kv_config.get(h.namespace, {}).get(h.key)
        if value is None:
            return error(cmd, QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return ok(cmd, ext_fields={"value": value})

    @guarded
    async def get_all_topics(conn, cmd):
        return ok(cmd, body=await broker.topics.table.topic_list_body())  # remembered per data version

    @guarded
    def get_cluster_info(conn, cmd):
        cfg = broker.config
        quoted = (cmd.version or 0) >= V4_9_4
        body = (f'{{"brokerAddrTable":{{{_dumps(cfg.broker_name)}:{broker_data_json(broker, quoted)}}},'
                f'"clusterAddrTable":{{{_dumps(cfg.broker_cluster_name)}:[{_dumps(cfg.broker_name)}]}}}}')
        return ok(cmd, body=body.encode())

    server.register(GET_ROUTEINFO_BY_TOPIC, get_route)
    server.register(GET_KV_CONFIG, get_kv_config)
    server.register(GET_ALL_TOPIC_LIST_FROM_NAMESERVER, get_all_topics)
    server.register(GET_BROKER_CLUSTER_INFO, get_cluster_info)
