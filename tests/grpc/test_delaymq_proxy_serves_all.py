"""delaymq-proxy serves what the broker's own gRPC endpoint serves (one MessagingService, server/grpc/service.py,
over the proxy's RemoteBackend), in front of TWO delaymq brokers: transactional commit / rollback and the
check-back relayed from the broker (CHECK_TRANSACTION_STATE -> RecoverOrphanedTransactionCommand), recall of a
scheduled message, ForwardMessageToDeadLetterQueue (CONSUMER_SEND_MSG_BACK), the offset RPCs and PullMessage,
ACL (the brokers' plain_acl.yml accounts) and TLS, driven by the official Python client 5.1.2 where it has
the call and by the generated stubs (tests/grpc/raw.py) where it has not."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from codec.codes import RequestCode
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from tests.grpc.conftest import uniq
from tests.grpc.raw import RawClient
from tests.grpc.test_delaymq_proxy import Cluster, Endpoint, topic_on_both
from tests.grpc.test_lite_and_dlq import set_retry_max_times, settings_answer
from tests.grpc.test_security import _auth
from tests.helpers import wire
from tests.helpers.broker import REPO_ROOT, pick_port_pair
from tests.helpers.cluster import NamesrvProcess
from tests.security.conftest import SUBONLY_AK, SUBONLY_SK, USER_AK, USER_SK
from tests.security.helpers import make_cert

pytestmark = [pytest.mark.process, pytest.mark.interop]


@contextmanager
def two_brokers(tmp_path, broker_factory, config: dict[str, object]) -> Iterator[Cluster]:
    ns = NamesrvProcess(tmp_path / "namesrv").start()
    brokers = []
    try:
        for name in ("proxied-a", "proxied-b"):
            brokers.append(broker_factory({"brokerName": name, "namesrvAddr": ns.addr, **config}))
        yield Cluster(ns, brokers)
    finally:
        for b in brokers:
            if b.running:
                b.stop()
        ns.stop()


@pytest.fixture
def tx_cluster(tmp_path, broker_factory):
    """Two brokers that check a half message back after one second."""
    with two_brokers(tmp_path, broker_factory, {"transactionTimeOut": 1000, "transactionCheckInterval": 1000}) as c:
        yield c


@pytest.fixture
def cluster_plain(tmp_path, broker_factory):
    with two_brokers(tmp_path, broker_factory, {}) as c:
        yield c


def start_proxy(agents, c: Cluster, *extra: str, stack: str = "grpcio"):
    """`stack`: grpcServerStack (tests/grpc/conftest.py's proxy_stack)."""
    port = pick_port_pair()
    p = agents._start("delaymq-proxy", [sys.executable, "-m", "server.proxy", "--namesrv", c.namesrv.addr,
                                        "--grpc-port", str(port), "--host", "127.0.0.1",
                                        "--grpc-server-stack", stack, *extra])
    p.wait_for(lambda a: any("delaymq proxy ready on" in line for line in a.raw_lines), 30, "delaymq-proxy to start")
    return p, f"127.0.0.1:{port}"


def bodies(agent) -> list[str]:
    return [e["body"] for e in agent.of("received")]


def test_transactions_commit_rollback_and_the_brokers_check_back_through_the_proxy(tx_cluster, agents, proxy_stack):
    topic, group = topic_on_both(tx_cluster, "TRANSACTION")
    _, addr = start_proxy(agents, tx_cluster, stack=proxy_stack)
    proxy = Endpoint(addr)
    agents.run_rmq5("transaction", proxy, topic=topic, count=2, end="commit", body_prefix="c", timeout=90)
    agents.run_rmq5("transaction", proxy, topic=topic, count=2, end="rollback", body_prefix="r", timeout=90)
    # nobody ends this one: its broker asks the proxy (the topic's producer group), the proxy asks the client
    checked = agents.run_rmq5("transaction", proxy, topic=topic, count=1, end="none", check="commit",
                              body_prefix="u", linger=30, until_checks=1, timeout=90)
    assert checked.of("checked")[0]["id"] == checked.of("sent")[0]["id"]
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=3, max_seconds=30, timeout=90)
    assert sorted(bodies(c)) == ["c0", "c1", "u0"]


def test_recall_of_a_scheduled_message_through_the_proxy(tx_cluster, agents, proxy_stack):
    topic, group = topic_on_both(tx_cluster, "DELAY")
    _, addr = start_proxy(agents, tx_cluster, stack=proxy_stack)
    proxy = Endpoint(addr)
    # 5.1.2 sends delivery_timestamp as epoch seconds; 30 s: room for three agent starts on a loaded machine
    at = int(time.time()) + 30
    keep = agents.run_rmq5("produce", proxy, topic=topic, count=1, deliver_at=at, body_prefix="keep", timeout=90)
    drop = agents.run_rmq5("produce", proxy, topic=topic, count=1, deliver_at=at, body_prefix="drop", timeout=90)
    handle = drop.of("sent")[0]["recall"]
    assert handle and keep.of("sent")[0]["recall"]
    r = agents.run_rmq5("recall", proxy, topic=topic, handle=handle, timeout=90)
    assert r.of("recalled") and r.of("recalled")[0]["id"] == drop.of("sent")[0]["id"]
    # the consumer runs until 6 s past the delivery time: the kept message arrives, the recalled one never
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=2,
                        max_seconds=max(6.0, at + 6 - time.time()), expect_code=3, timeout=120)
    got = c.of("received")
    assert [e["body"] for e in got] == ["keep0"]
    assert got[0]["t"] >= at * 1000


def _dlq_count(c: Cluster, group: str) -> int:
    n = 0
    for b in c.brokers:
        reply = wire.invoke(b.addr, int(RequestCode.GET_MAX_OFFSET), {"topic": "%DLQ%" + group, "queueId": 0})
        if reply.code == 0:
            n += int(reply.ext["offset"])
    return n


def test_forward_to_dead_letter_queue_after_max_attempts_through_the_proxy(tx_cluster, agents, proxy_stack):
    topic, group = topic_on_both(tx_cluster)
    for b in tx_cluster.brokers:
        set_retry_max_times(b, group, 1)  # 2 delivery attempts
    _, addr = start_proxy(agents, tx_cluster, stack=proxy_stack)
    asyncio.run(_forward_to_dlq(tx_cluster, addr, topic, group))


async def _forward_to_dlq(cluster: Cluster, addr: str, topic: str, group: str) -> None:
    c = RawClient(addr)
    try:
        sent = await c.send(topic, b"poison")
        assert sent.status.code == pb.OK, sent.status
        attempts: list[pb.Message] = []
        deadline = time.monotonic() + 40
        while len(attempts) < 2 and time.monotonic() < deadline:
            _code, msgs = await c.receive(group, topic, invisible_s=1, poll_s=3)  # never acked
            attempts += msgs
        assert [m.system_properties.delivery_attempt for m in attempts] == [1, 2]
        last = attempts[-1].system_properties
        # the client's last attempt failed: it forwards the message to the group's DLQ (as a push consumer does)
        fwd = await c.stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=last.receipt_handle,
            message_id=last.message_id, delivery_attempt=2, max_delivery_attempts=2), timeout=10)
        assert fwd.status.code == pb.OK, fwd.status
        assert _dlq_count(cluster, group) == 1
        code, msgs = await c.receive(group, topic, invisible_s=1, poll_s=3)
        assert code == pb.MESSAGE_NOT_FOUND and msgs == []  # acknowledged by the forward: not delivered again
        bad = await c.stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle="garbage",
            message_id="x", max_delivery_attempts=2), timeout=10)
        assert bad.status.code == pb.INVALID_RECEIPT_HANDLE, bad.status
    finally:
        await c.close()


def _mq(topic: str, broker: str, qid: int) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=qid, broker=pb.Broker(name=broker))


def test_offsets_and_pull_message_through_the_proxy_reach_the_brokers_tables(tx_cluster, agents, proxy_stack):
    topic, group = topic_on_both(tx_cluster)
    _, addr = start_proxy(agents, tx_cluster, stack=proxy_stack)
    asyncio.run(_offsets_and_pull(tx_cluster, addr, topic, group))


async def _offsets_and_pull(cluster: Cluster, addr: str, topic: str, group: str) -> None:
    c = RawClient(addr)
    try:
        for i in range(8):  # round robin over both brokers' queues
            assert (await c.send(topic, f"p{i}".encode())).status.code == pb.OK
        a, b = cluster.brokers
        mq = _mq(topic, "proxied-b", 0)
        end = await c.stub.QueryOffset(spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END),
                                       timeout=10)
        begin = await c.stub.QueryOffset(spb.QueryOffsetRequest(message_queue=mq,
                                                                query_offset_policy=pb.BEGINNING), timeout=10)
        # 8 sends round robin over the two brokers' one queue each: 4 on each
        assert (end.status.code, end.offset, begin.offset) == (pb.OK, 4, 0), (end, begin)
        ts = spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.TIMESTAMP)
        at = int(time.time() * 1000) + 60_000
        ts.timestamp.FromMilliseconds(at)
        later = await c.stub.QueryOffset(ts, timeout=10)
        own = wire.invoke(b.addr, int(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP),
                          {"topic": topic, "queueId": 0, "timestamp": at})
        assert own.code == 0 and (later.status.code, later.offset) == (pb.OK, int(own.ext["offset"])), (later, own)

        # a group that never committed (not `group`: prepare() committed its 0): OFFSET_NOT_FOUND, as the in-broker
        # endpoint answers, though the broker's 4.x answer for a new group is offset 0 (its first message is in
        # memory); the proxy asks with 5.x's setZeroIfNotFound=false
        fresh = uniq("DpNever")
        query = {"consumerGroup": fresh, "topic": topic, "queueId": 0}
        as_4x = wire.invoke(b.addr, int(RequestCode.QUERY_CONSUMER_OFFSET), query)
        assert (as_4x.code, as_4x.ext.get("offset")) == (0, "0"), as_4x
        as_5x = wire.invoke(b.addr, int(RequestCode.QUERY_CONSUMER_OFFSET), {**query, "setZeroIfNotFound": "false"})
        assert as_5x.code == 22 and "do not set to zero" in (as_5x.remark or ""), as_5x
        never = await c.stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name=fresh), message_queue=mq),
                                       timeout=10)
        assert never.status.code == pb.OFFSET_NOT_FOUND, never.status
        upd = await c.stub.UpdateOffset(spb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=mq,
                                                                offset=1), timeout=10)
        assert upd.status.code == pb.OK, upd.status
        got = await c.stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq),
                                     timeout=10)
        assert (got.status.code, got.offset) == (pb.OK, 1)
        # the offset is broker b's own table, as a 4.x consumer's commit would be; broker a has none
        on_b = wire.invoke(b.addr, int(RequestCode.QUERY_CONSUMER_OFFSET),
                           {"consumerGroup": group, "topic": topic, "queueId": 0})
        assert on_b.code == 0 and on_b.ext["offset"] == "1", on_b
        on_a = wire.invoke(a.addr, int(RequestCode.QUERY_CONSUMER_OFFSET),
                           {"consumerGroup": group, "topic": topic, "queueId": 0})
        assert (on_a.code, on_a.ext.get("offset")) != (0, "1"), on_a

        req = spb.PullMessageRequest(group=pb.Resource(name=group), message_queue=mq, offset=0, batch_size=8,
                                     filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
        req.long_polling_timeout.FromMilliseconds(500)
        code, msgs, nxt = None, [], None
        async for r in c.stub.PullMessage(req, timeout=10):
            kind = r.WhichOneof("content")
            if kind == "status":
                code = r.status.code
            elif kind == "message":
                msgs.append(r.message)
            elif kind == "next_offset":
                nxt = r.next_offset
        assert code == pb.OK and len(msgs) == 4 and nxt == 4, (code, msgs, nxt)
        assert sorted(m.body for m in msgs) == [b"p1", b"p3", b"p5", b"p7"]  # b's half (a took the first)
    finally:
        await c.close()


def test_acl_the_proxy_checks_5x_clients_against_the_brokers_accounts(cluster_plain, agents, tmp_path, proxy_stack):
    topic, group = topic_on_both(cluster_plain)
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(f"""\
accounts:
  - accessKey: {USER_AK}
    secretKey: {USER_SK}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {topic}=PUB|SUB
  - accessKey: {SUBONLY_AK}
    secretKey: {SUBONLY_SK}
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
""")
    conf = tmp_path / "proxy.conf"
    conf.write_text(f"aclEnable=true\naclFile={acl}\n")
    _, addr = start_proxy(agents, cluster_plain, "--config", str(conf))
    proxy = Endpoint(addr)
    ok = agents.run_rmq5("produce", proxy, topic=topic, count=2, ak=USER_AK, sk=USER_SK, timeout=90)
    assert len(ok.of("sent")) == 2
    bad = agents.rmq5("produce", proxy, topic=topic, count=1, ak=USER_AK, sk="wrongSecret99")
    assert bad.wait_exit(90) != 0 and bad.of("sent") == []

    async def raw() -> None:
        for md, code in (([], pb.UNAUTHORIZED), (_auth(USER_AK, "nope-nope-nope"), pb.UNAUTHORIZED),
                         (_auth(SUBONLY_AK, SUBONLY_SK), pb.FORBIDDEN), (_auth(USER_AK, USER_SK), pb.OK)):
            c = RawClient(addr, metadata=md)
            try:
                r = await c.send(topic, b"x")
                assert r.status.code == code, (md, r.status)
            finally:
                await c.close()
    asyncio.run(raw())
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=3, ak=USER_AK, sk=USER_SK,
                        max_seconds=30, timeout=90)
    assert sorted(bodies(c)) == ["m0", "m1", "x"]


def test_tls_the_proxy_serves_over_tls_with_its_keys(cluster_plain, agents, tmp_path, proxy_stack):
    crt, key = make_cert(tmp_path)
    topic, group = topic_on_both(cluster_plain)
    _, addr = start_proxy(agents, cluster_plain, "--tls-cert", str(crt), "--tls-key", str(key))
    asyncio.run(_tls_raw(addr, crt, topic))
    env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(crt)}
    proxy = Endpoint(addr)
    agents.run_rmq5("produce", proxy, env=env, topic=topic, count=1, tls=True, body_prefix="py", timeout=90)
    got = agents.run_rmq5("simple", proxy, env=env, group=group, topic=topic, until_count=2, tls=True,
                          max_seconds=30, timeout=90)
    assert sorted(bodies(got)) == ["over-tls", "py0"]


async def _tls_raw(addr: str, crt: Path, topic: str) -> None:
    c = RawClient(addr, credentials=grpc.ssl_channel_credentials(root_certificates=crt.read_bytes()))
    try:
        assert (await c.send(topic, b"over-tls")).status.code == pb.OK
    finally:
        await c.close()
    plain = RawClient(addr)  # cleartext to a TLS port: no answer
    try:
        with pytest.raises(grpc.aio.AioRpcError):
            await plain.send(topic, b"cleartext")
    finally:
        await plain.close()



@pytest.mark.parametrize(("args", "conf", "key"), [
    (["--tls-cert", "/no/such.crt"], "", "tls.server.keyPath"),
    ([], "aclEnable=true\n", "aclFile"),
    ([], "aclEnable=true\naclFile=/no/such/plain_acl.yml\n", "aclFile"),
])
def test_a_bad_acl_or_tls_setting_stops_the_proxy_with_one_line_naming_the_key(tmp_path, args, conf, key,
                                                                                proxy_stack):
    cfg = tmp_path / "proxy.conf"
    cfg.write_text(conf)
    r = subprocess.run([sys.executable, "-m", "server.proxy", "--namesrv", "127.0.0.1:9", "--grpc-port", "0",
                        "--host", "127.0.0.1", "--config", str(cfg), "--grpc-server-stack", proxy_stack, *args],
                       cwd=REPO_ROOT, capture_output=True, timeout=60, text=True)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert key in line and "Traceback" not in r.stderr


def test_a_topics_message_type_and_a_groups_retries_and_order_come_from_the_brokers(cluster_plain, agents, proxy_stack):
    topic, group = topic_on_both(cluster_plain, "FIFO")
    body = json.dumps({"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
                       "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 2, "brokerId": 0,
                       "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
                       "consumeMessageOrderly": True}).encode()
    for b in cluster_plain.brokers:  # what `mqadmin updateSubGroup -r 2 -o true` sends
        reply = wire.invoke(b.addr, int(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP), {}, body)
        assert reply.code == 0, reply.remark
    _, addr = start_proxy(agents, cluster_plain, stack=proxy_stack)

    async def probe() -> None:
        c = RawClient(addr)
        try:
            r = await c.stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10)
            assert r.status.code == pb.OK and r.message_queues, r.status
            assert {tuple(q.accept_message_types) for q in r.message_queues} == {(pb.FIFO,)}
            settings = await settings_answer(c, group, topic)
            assert settings.backoff_policy.max_attempts == 3  # retryMaxTimes 2: three delivery attempts
            assert settings.subscription.fifo
            plain = await settings_answer(c, uniq("GPlain"), topic)  # a group no broker has: the defaults
            assert plain.backoff_policy.max_attempts == 17 and not plain.subscription.fifo
        finally:
            await c.close()
    asyncio.run(probe())
