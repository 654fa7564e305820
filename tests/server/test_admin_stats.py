"""Operator requests (mqadmin topicStatus / consumerProgress / consumerConnection / ...) over real sockets.

Bodies are checked in the fastjson shape Java tools parse (MessageQueue objects as map keys).
"""

import json

from codec import admin_bodies as AB
from server.broker import BrokerController
from tests.server.helpers import send
from tests.server.raw import RawClient
from tests.server.test_broker_clients import heartbeat

GET_ALL_TOPIC_CONFIG, GET_BROKER_CONFIG, UPDATE_GROUP, ALL_GROUPS = 21, 26, 200, 201
TOPIC_STATS, CONSUMER_CONNECTIONS, DELETE_GROUP, CONSUME_STATS = 202, 203, 207, 208
TOPICS_BY_CLUSTER, CONSUMED_BY_WHO = 224, 300
HEART_BEAT, UPDATE_OFFSET, CREATE_TOPIC = 34, 15, 17


async def _topic(client, topic: str, queues: int = 2) -> None:
    r = await client.invoke(CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
                                           "writeQueueNums": queues, "perm": 6, "topicFilterType": "SINGLE_TAG",
                                           "order": "false"})
    assert r.code == 0, r.remark


async def test_topic_stats_reports_min_max_and_last_store_time_per_queue(broker_ctl: BrokerController, client: RawClient):
    await _topic(client, "ST")
    stamps = [(await send(client, "ST", b"m%d" % i, qid=1)) for i in range(3)]
    assert all(s.code == 0 for s in stamps)
    r = await client.invoke(TOPIC_STATS, {"topic": "ST"})
    assert r.code == 0, r.remark
    raw = bytes(r.body).decode()
    assert raw.startswith('{"offsetTable":{{"brokerName":') and '"topicPutTps":' in raw  # fastjson's layout
    rows, _ = AB.decode_topic_stats(r.body)
    assert [(o.mq.queue_id, o.min_offset, o.max_offset) for o in rows] == [(0, 0, 0), (1, 0, 3)]
    assert rows[0].last_update_timestamp == 0
    assert rows[1].last_update_timestamp > 0 and rows[1].mq.broker_name == broker_ctl.config.broker_name
    missing = await client.invoke(TOPIC_STATS, {"topic": "NoSuchTopic"})
    assert missing.code == 17 and "NoSuchTopic" in (missing.remark or "")
    assert (await client.invoke(TOPIC_STATS, {})).code == 1  # required header named in the remark


async def test_consume_stats_shows_lag_per_queue_and_who_consumes(broker_ctl: BrokerController, client: RawClient):
    await _topic(client, "CS")
    for i in range(5):
        assert (await send(client, "CS", b"x%d" % i, qid=0)).code == 0
    assert (await send(client, "CS", b"y", qid=1)).code == 0
    r = await client.invoke(UPDATE_OFFSET, {"consumerGroup": "G1", "topic": "CS", "queueId": 0, "commitOffset": 2})
    assert r.code == 0
    stats = await client.invoke(CONSUME_STATS, {"consumerGroup": "G1"})  # topics from the group's offsets
    assert stats.code == 0, stats.remark
    rows, tps = AB.decode_consume_stats(stats.body)
    by_q = {o.mq.queue_id: o for o in rows}
    assert (by_q[0].broker_offset, by_q[0].consumer_offset, by_q[0].diff) == (5, 2, 3)
    assert (by_q[1].broker_offset, by_q[1].consumer_offset, by_q[1].diff) == (1, 0, 1)
    assert by_q[0].last_timestamp > 0 and by_q[1].last_timestamp == 0 and tps == 0.0
    one = AB.decode_consume_stats((await client.invoke(CONSUME_STATS, {"consumerGroup": "G1", "topic": "CS"})).body)
    assert len(one[0]) == 2
    who = await client.invoke(CONSUMED_BY_WHO, {"topic": "CS"})
    assert who.code == 0 and AB.decode_group_list(who.body) == ["G1"]


async def test_consumer_connection_lists_online_clients_and_subscriptions(broker_ctl: BrokerController, client: RawClient):
    assert (await client.invoke(CONSUMER_CONNECTIONS, {"consumerGroup": "GC"})).code == 206  # not online
    second = await RawClient.connect(broker_ctl.config.broker_addr)
    try:
        assert (await client.invoke(HEART_BEAT, {}, heartbeat("10.0.0.1@1", "GC", "TC", sub="a||b"))).code == 0
        assert (await second.invoke(HEART_BEAT, {}, heartbeat("10.0.0.2@2", "GC", "TC", cpp=True),
                                    language="CPP", version=333)).code == 0
        r = await client.invoke(CONSUMER_CONNECTIONS, {"consumerGroup": "GC"})
        assert r.code == 0, r.remark
        cc = AB.decode_consumer_connection(r.body)
        assert [c.client_id for c in cc.connections] == ["10.0.0.1@1", "10.0.0.2@2"]
        assert all(c.client_addr.startswith("127.0.0.1:") for c in cc.connections)
        assert {c.language for c in cc.connections} == {"JAVA", "CPP"}
        assert cc.message_model == "CLUSTERING" and "TC" in cc.subscriptions
        assert cc.subscriptions["TC"]["topic"] == "TC"
        who = AB.decode_group_list((await client.invoke(CONSUMED_BY_WHO, {"topic": "TC"})).body)
        assert who == ["GC"]
    finally:
        await second.close()


async def test_subscription_groups_create_list_delete_and_survive_restart(make_broker, tmp_path):
    store = tmp_path / "groups-store"
    b = await make_broker(store=store)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        body = json.dumps({"groupName": "GX", "retryQueueNums": 3, "retryMaxTimes": 5,
                           "consumeBroadcastEnable": False}).encode()
        assert (await c.invoke(UPDATE_GROUP, {}, body)).code == 0
        bad = await c.invoke(UPDATE_GROUP, {}, b'{"retryQueueNums": 1}')
        assert bad.code == 1 and "groupName" in (bad.remark or "")
        table = AB.decode_table((await c.invoke(ALL_GROUPS, {})).body, "subscriptionGroupTable")
        assert table["GX"]["retryQueueNums"] == 3 and table["GX"]["retryMaxTimes"] == 5
        assert table["GX"]["consumeBroadcastEnable"] is False
    finally:
        await c.close()
    await b.shutdown()
    b2 = await make_broker(store=store)
    c2 = await RawClient.connect(b2.config.broker_addr)
    try:
        table = AB.decode_table((await c2.invoke(ALL_GROUPS, {})).body, "subscriptionGroupTable")
        assert table["GX"]["retryMaxTimes"] == 5
        assert (await c2.invoke(DELETE_GROUP, {"groupName": "GX", "cleanOffset": "true"})).code == 0
        table = AB.decode_table((await c2.invoke(ALL_GROUPS, {})).body, "subscriptionGroupTable")
        assert "GX" not in table
    finally:
        await c2.close()


async def test_topic_config_table_broker_config_and_topics_by_cluster(broker_ctl: BrokerController, client: RawClient):
    await _topic(client, "TT", queues=3)
    table = AB.decode_table((await client.invoke(GET_ALL_TOPIC_CONFIG, {})).body, "topicConfigTable")
    assert table["TT"]["readQueueNums"] == 3 and table["TT"]["topicName"] == "TT"
    assert "SCHEDULE_TOPIC_XXXX" in table and "TBW102" in table
    conf = await client.invoke(GET_BROKER_CONFIG, {})
    assert conf.code == 0 and json.loads(conf.ext["version"])["timestamp"] == broker_ctl.boot_ms
    props = dict(line.split("=", 1) for line in bytes(conf.body).decode().splitlines())
    assert props["brokerName"] == broker_ctl.config.broker_name
    assert props["listenPort"] == str(broker_ctl.config.listen_port)
    mine = await client.invoke(TOPICS_BY_CLUSTER, {"cluster": broker_ctl.config.broker_cluster_name})
    assert "TT" in json.loads(bytes(mine.body))["topicList"]
    other = await client.invoke(TOPICS_BY_CLUSTER, {"cluster": "NoSuchCluster"})
    assert json.loads(bytes(other.body))["topicList"] == []
