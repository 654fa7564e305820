"""delaymq-proxy in front of a delaymq broker with aclEnable=true: like Apache 5.1.3's proxy in cluster mode
(`enableAclRpcHookForClusterMode`, an AclClientRPCHook with the account of a tools.yml), the proxy signs every
remoting request it sends (codec.acl.SessionCredentials through remoting.client.RemotingClient), so the official
Python client 5.1.2 sends and receives through it; a proxy that does not sign, or signs with a wrong secret, gets
the broker's refusal back as FORBIDDEN with the broker's remark."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from codec.acl import sign_request
from codec.codes import ResponseCode
from server.grpc.v2 import definition_pb2 as pb
from tests.grpc.conftest import uniq
from tests.grpc.raw import RawClient
from tests.grpc.test_delaymq_proxy import Cluster, Endpoint, start_proxy
from tests.helpers.broker import REPO_ROOT
from tests.helpers.cluster import NamesrvProcess, route_brokers, wait_until
from tests.security.conftest import ACL_YAML, ADMIN_AK, ADMIN_SK
from tests.server.raw import RawClient as RemotingRaw

pytestmark = [pytest.mark.process, pytest.mark.interop]
CREATE_TOPIC, CREATE_GROUP, UPDATE_OFFSET = 17, 200, 15


@pytest.fixture
def acl_cluster(tmp_path, broker_factory):
    """A name server and one broker with aclEnable=true (tests/security's accounts; 127.0.0.1 is not white-listed)."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    ns = NamesrvProcess(tmp_path / "namesrv").start()
    try:
        b = broker_factory({"brokerName": "signed", "namesrvAddr": ns.addr, "aclEnable": "true",
                            "aclFile": str(acl)})
        yield Cluster(ns, [b])
    finally:
        ns.stop()


async def signed(addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> None:
    c = await RemotingRaw.connect(addr)
    try:
        r = await c.invoke(code, sign_request(ext, body, ADMIN_AK, ADMIN_SK), body)
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await c.close()


def prepare_signed(c: Cluster) -> tuple[str, str]:
    """The topic (1 queue), the group and its offset 0, made with the admin account's signed requests."""
    topic, group = uniq("SgT"), uniq("SgG")
    addr = c.brokers[0].addr
    asyncio.run(signed(addr, CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1",
                                            "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                            "topicSysFlag": "0", "order": "false",
                                            "attributes": "+message.type=NORMAL"}))
    asyncio.run(signed(addr, CREATE_GROUP, {}, json.dumps({"groupName": group}).encode()))
    asyncio.run(signed(addr, UPDATE_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                             "commitOffset": "0"}))
    wait_until(lambda: route_brokers(c.namesrv.addr, topic) == {"signed"}, 15, "the topic's route")
    return topic, group


def signing_conf(tmp_path, name: str, ak: str, sk: str):
    tools = tmp_path / f"{name}-tools.yml"
    tools.write_text(f"accessKey: {ak}\nsecretKey: {sk}\n")
    conf = tmp_path / f"{name}.conf"
    conf.write_text(f"enableAclRpcHookForClusterMode=true\naclToolsFile={tools}\n")
    return conf


async def raw_send(addr: str, topic: str) -> pb.Status:
    c = RawClient(addr)
    try:
        return (await c.send(topic, b"raw")).status
    finally:
        await c.close()


def test_a_signing_proxy_serves_5x_clients_in_front_of_an_acl_broker(acl_cluster, agents, tmp_path, proxy_stack):
    topic, group = prepare_signed(acl_cluster)
    conf = signing_conf(tmp_path, "good", ADMIN_AK, ADMIN_SK)
    _, addr = start_proxy(agents, acl_cluster, None, "--config", str(conf), stack=proxy_stack)
    proxy = Endpoint(addr)
    sent = agents.run_rmq5("produce", proxy, topic=topic, count=3, timeout=90)
    assert len(sent.of("sent")) == 3
    c = agents.run_rmq5("simple", proxy, group=group, topic=topic, until_count=3, max_seconds=60, timeout=90)
    assert sorted(e["body"] for e in c.of("received")) == ["m0", "m1", "m2"]
    assert len(c.of("acked")) == 3


@pytest.mark.parametrize("how", ["unsigned", "wrong-secret"])
def test_a_proxy_the_acl_broker_refuses_answers_forbidden_with_the_brokers_remark(acl_cluster, agents, tmp_path,
                                                                                   how, proxy_stack):
    topic, _ = prepare_signed(acl_cluster)
    extra = [] if how == "unsigned" else ["--config", str(signing_conf(tmp_path, "bad", ADMIN_AK, "notTheSecret"))]
    _, addr = start_proxy(agents, acl_cluster, None, *extra, stack=proxy_stack)
    st = asyncio.run(raw_send(addr, topic))
    assert st.code == pb.FORBIDDEN, st
    expected = "No accessKey is configured" if how == "unsigned" else f"Check signature failed for accessKey={ADMIN_AK}"
    assert expected in st.message, st


@pytest.mark.parametrize(("tools", "problem"), [
    (None, "cannot read"),
    ("accessKey: onlyTheKey\n", "non-blank accessKey and secretKey"),
])
def test_a_signing_proxy_without_its_account_stops_with_one_line_naming_acl_tools_file(tmp_path, tools, problem):
    path = tmp_path / "tools.yml"
    if tools is not None:
        path.write_text(tools)
    conf = tmp_path / "proxy.conf"
    conf.write_text(f"enableAclRpcHookForClusterMode=true\naclToolsFile={path}\n")
    r = subprocess.run([sys.executable, "-m", "server.proxy", "--namesrv", "127.0.0.1:9", "--grpc-port", "0",
                        "--host", "127.0.0.1", "--config", str(conf)], cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "aclToolsFile" in lines[0] and problem in lines[0], lines
    assert "Traceback" not in r.stderr
