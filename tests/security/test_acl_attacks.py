"""Issue 26's attacks by a signed low-privilege account (defaultTopicPerm=DENY, defaultGroupPerm=DENY, PUB on
one topic, SUB on its own group), each refused with NO_PERMISSION naming the resource and action, through
signed remoting requests against a broker process (and a standalone name server, and gRPC); the admin account
(admin: true, no permissions) sends, as in Apache 4.9.7."""

from __future__ import annotations

import json
import time

import pytest

from codec.codes import SCHEDULE_TOPIC
from codec.msgid import decode_offset_msg_id
from server.grpc.auth import sign
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from tests.grpc.conftest import grpc_broker
from tests.grpc.raw import RawClient
from tests.helpers.wire import Reply
from tests.security.helpers import call

pytestmark = pytest.mark.process

NO_PERMISSION = 16
ADMIN_AK, ADMIN_SK = "tenantAdmin1", "tenantAdminSecret1"
LOW_AK, LOW_SK = "lowPrivKey1", "lowPrivSecret1"
CONS_AK, CONS_SK = "consumerKey1", "consumerSecret1"  # the victim's own consumer account
ACL = f"""\
accounts:
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
  - accessKey: {LOW_AK}
    secretKey: {LOW_SK}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Mine=PUB
    groupPerms:
      - GID_low=SUB
  - accessKey: {CONS_AK}
    secretKey: {CONS_SK}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Secret=PUB|SUB
    groupPerms:
      - GID_victim=SUB
"""
SEND, SEND_V2, SEND_BACK, LOCK, GET_MAX_OFFSET, PULL = 10, 310, 36, 41, 30, 11


@pytest.fixture
def broker(broker_factory, tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    return broker_factory({"aclEnable": "true", "aclFile": str(acl)})


def _auth(ak: str, sk: str) -> list[tuple[str, str]]:
    dt = "20261128T120000Z"
    return [("x-mq-date-time", dt),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign(sk, dt)}")]


def send(addr: str, topic: str, body: bytes, group: str = "PID_t", *, ak: str, sk: str) -> Reply:
    return call(addr, SEND, {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102",
                             "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
                             "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": "",
                             "reconsumeTimes": 0}, body, ak=ak, sk=sk)


def topic_exists(addr: str, topic: str) -> bool:
    r = call(addr, 105, {"topic": topic})  # GET_ROUTEINFO_BY_TOPIC: TOPIC_NOT_EXIST (17) when absent
    assert r.code in (0, 17), r
    return r.code == 0


def refused(r, *words: str) -> None:
    assert r.code == NO_PERMISSION, r
    for w in words:
        assert w in (r.remark or ""), (w, r.remark)


def stored(addr: str, topic: str, queues: int = 4) -> int:
    total = 0
    for q in range(queues):
        r = call(addr, GET_MAX_OFFSET, {"topic": topic, "queueId": q}, ak=ADMIN_AK, sk=ADMIN_SK)
        total += int(r.ext["offset"]) if r.code == 0 else 0
    return total


def test_admin_without_permissions_sends_and_the_low_account_only_where_allowed(broker):
    r = send(broker.addr, "Secret", b"the victim's secret", ak=ADMIN_AK, sk=ADMIN_SK)  # admin: true, no topicPerms: as Apache
    assert r.code == 0, r
    assert send(broker.addr, "Mine", b"mine", ak=LOW_AK, sk=LOW_SK).code == 0  # an explicit PUB entry may create its topic
    refused(send(broker.addr, "Fresh", b"x", ak=LOW_AK, sk=LOW_SK), "topic=Fresh")  # default DENY: no PUB, no CREATE
    refused(send(broker.addr, "Secret", b"x", ak=LOW_AK, sk=LOW_SK), "No PUB permission for topic=Secret")


def test_send_back_of_a_denied_record_is_refused_and_nothing_is_copied(broker):
    r = send(broker.addr, "Secret", b"the victim's secret", ak=ADMIN_AK, sk=ADMIN_SK)
    assert r.code == 0, r
    offset = decode_offset_msg_id(r.ext["msgId"])[2]
    back = {"offset": offset, "group": "GID_low", "delayLevel": 0, "originMsgId": r.ext["msgId"],
            "originTopic": "Mine", "unitMode": "false", "maxReconsumeTimes": 16}
    scheduled = stored(broker.addr, SCHEDULE_TOPIC, 18)  # a send-back waits there, then goes to %RETRY%
    refused(call(broker.addr, SEND_BACK, back, ak=LOW_AK, sk=LOW_SK), "No SUB permission for topic=Secret", LOW_AK)
    assert stored(broker.addr, "%RETRY%GID_low", 1) == 0 and stored(broker.addr, SCHEDULE_TOPIC, 18) == scheduled
    # the victim's own consumer (SUB on Secret and its group) may send its record back
    ok = call(broker.addr, SEND_BACK, dict(back, group="GID_victim", originTopic="Secret"), ak=CONS_AK, sk=CONS_SK)
    assert ok.code == 0, ok
    assert stored(broker.addr, SCHEDULE_TOPIC, 18) == scheduled + 1


def test_send_to_another_groups_retry_or_dlq_topic_is_refused(broker):
    for topic in ("%RETRY%GID_victim", "%DLQ%GID_victim"):
        refused(send(broker.addr, topic, b"poison", group="GID_low", ak=LOW_AK, sk=LOW_SK), "No SUB permission for group=GID_victim")
        assert stored(broker.addr, topic, 1) == 0
    assert send(broker.addr, "%RETRY%GID_low", b"own", group="GID_low", ak=LOW_AK, sk=LOW_SK).code == 0


def test_group_scoped_codes_for_another_group_are_refused(broker):
    assert send(broker.addr, "Secret", b"s", ak=ADMIN_AK, sk=ADMIN_SK).code == 0
    a = broker.addr
    refused(call(a, 222, {"topic": "Secret", "group": "GID_victim", "timestamp": 0, "isForce": "true"}, ak=LOW_AK, sk=LOW_SK),
            "permission for group=GID_victim")
    refused(call(a, 222, {"topic": "Secret", "group": "GID_low", "timestamp": 0, "isForce": "true"}, ak=LOW_AK, sk=LOW_SK),
            "No SUB permission for topic=Secret")
    lock = json.dumps({"consumerGroup": "GID_victim", "clientId": "evil",
                       "mqSet": [{"topic": "Secret", "brokerName": "b", "queueId": 0}]}).encode()
    refused(call(a, LOCK, {}, lock, ak=LOW_AK, sk=LOW_SK), "No SUB permission for group=GID_victim")
    refused(call(a, 42, {}, lock, ak=LOW_AK, sk=LOW_SK), "No SUB permission for group=GID_victim")
    refused(call(a, 307, {"consumerGroup": "GID_victim", "clientId": "c", "jstackEnable": "false"}, ak=LOW_AK, sk=LOW_SK),
            "permission for group=GID_victim")
    for code, ext in ((14, {"consumerGroup": "GID_victim", "topic": "Mine", "queueId": 0}),
                      (15, {"consumerGroup": "GID_victim", "topic": "Mine", "queueId": 0, "commitOffset": 0}),
                      (38, {"consumerGroup": "GID_victim"}),
                      (220, {"topic": "Secret", "group": "GID_victim", "timestamp": 0}),
                      (PULL, {"consumerGroup": "GID_victim", "topic": "Secret", "queueId": 0, "queueOffset": 0,
                              "maxMsgNums": 1, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
                              "subscription": "*", "subVersion": 0})):
        refused(call(a, code, ext, ak=LOW_AK, sk=LOW_SK), "GID_victim" if code != PULL else "topic=Secret")
    hb = json.dumps({"clientID": "evil", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "GID_victim", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [], "unitMode": False}]}).encode()
    refused(call(a, 34, {}, hb, ak=LOW_AK, sk=LOW_SK), "No SUB permission for group=GID_victim")


@pytest.mark.parametrize("code,ext", [
    (21, {}), (43, {}), (45, {}), (28, {}), (201, {}), (300, {"topic": "Secret"}), (3102, {}), (26, {}),
    (206, {}), (106, {}), (224, {"cluster": "DefaultCluster"}), (101, {"namespace": "ns", "key": "k"}),
])
def test_all_tenant_metadata_reads_need_admin(broker, code, ext):
    refused(call(broker.addr, code, ext, ak=LOW_AK, sk=LOW_SK), "needs admin" if code != 26 else "Need admin", LOW_AK)
    assert call(broker.addr, code, ext, ak=ADMIN_AK, sk=ADMIN_SK).code != NO_PERMISSION


def test_topic_stats_of_a_denied_topic_are_refused(broker):
    assert send(broker.addr, "Secret", b"s", ak=ADMIN_AK, sk=ADMIN_SK).code == 0
    refused(call(broker.addr, 202, {"topic": "Secret"}, ak=LOW_AK, sk=LOW_SK), "No GET permission for topic=Secret")
    assert call(broker.addr, 202, {"topic": "Secret"}, ak=ADMIN_AK, sk=ADMIN_SK).code == 0


def name_server_writes(addr: str) -> None:
    for code, ext in ((100, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Secret", "value": "b:1"}),
                      (102, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Secret"}),
                      (216, {"topic": "Secret"})):
        refused(call(addr, code, ext, ak=LOW_AK, sk=LOW_SK), LOW_AK)
    assert call(addr, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Secret"}, ak=ADMIN_AK, sk=ADMIN_SK).code != 0  # not put
    assert call(addr, 100, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Secret", "value": "b:1"}, ak=ADMIN_AK, sk=ADMIN_SK).code == 0
    # a route lookup needs no account (clients resolve routes first; Apache's name server checks nothing)
    assert call(addr, 105, {"topic": "NoSuchTopic"}).code != NO_PERMISSION


def test_name_server_writes_need_admin_on_the_embedded_name_server(broker):
    name_server_writes(broker.addr)


def test_name_server_writes_need_admin_on_delaymq_namesrv(tmp_path):
    from tests.helpers.cluster import NamesrvProcess
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = NamesrvProcess(tmp_path / "ns", {"aclEnable": "true", "aclFile": str(acl)}).start()
    try:
        name_server_writes(ns.addr)
        refused(call(ns.addr, 206, {}, ak=LOW_AK, sk=LOW_SK), "needs admin")
    finally:
        ns.stop()


async def test_grpc_query_route_does_not_create_a_topic_without_create(broker_factory, tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    b = grpc_broker(broker_factory, {"aclEnable": "true", "aclFile": str(acl)})
    for auth, code in ((_auth(LOW_AK, LOW_SK), pb.FORBIDDEN), (_auth(ADMIN_AK, ADMIN_SK), pb.OK)):
        c = RawClient(b.grpc_addr, metadata=auth)
        try:
            r = await c.stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="RouteFresh")),
                                        metadata=c.metadata, timeout=10)
            assert r.status.code == code, r.status
            if code == pb.FORBIDDEN:
                assert "RouteFresh" in r.status.message
                assert not topic_exists(b.addr, "RouteFresh")
                sent = await c.send("%RETRY%GID_victim", b"x")  # another group's retry topic
                assert sent.status.code == pb.FORBIDDEN and "GID_victim" in sent.status.message, sent.status
        finally:
            await c.close()
    assert topic_exists(b.addr, "RouteFresh")  # the admin's QueryRoute created it
