"""gRPC authentication (MQv2-HMAC-SHA1 against the plain-ACL accounts of the remoting port) and TLS."""

from __future__ import annotations

import grpc
import pytest

from server.grpc.auth import sign
from server.grpc.v2 import definition_pb2 as pb
from tests.grpc.conftest import grpc_broker, uniq
from tests.grpc.raw import RawClient
from tests.security.conftest import ACL_YAML, SUBONLY_AK, SUBONLY_SK, USER_AK, USER_SK
from tests.security.helpers import make_cert
from tests.security.test_acl_attacks import ACL as ATTACK_ACL
from tests.security.test_acl_attacks import ADMIN_AK, ADMIN_SK, LOW_AK, LOW_SK, topic_exists

pytestmark = pytest.mark.process


def _auth(ak: str, sk: str) -> list[tuple[str, str]]:
    dt = "20261124T120000Z"
    return [("x-mq-date-time", dt),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign(sk, dt)}")]


def acl_grpc_broker(broker_factory, tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    return grpc_broker(broker_factory, {"aclEnable": "true", "aclFile": str(acl)})


def test_real_client_signed_with_an_account_sends_and_a_wrong_secret_is_refused(broker_factory, tmp_path, agents):
    b = acl_grpc_broker(broker_factory, tmp_path)
    ok = agents.run_rmq5("produce", b, topic="TopicA", count=2, ak=USER_AK, sk=USER_SK)
    assert len(ok.of("sent")) == 2
    bad = agents.rmq5("produce", b, topic="TopicA", count=1, ak=USER_AK, sk="wrongSecret99")
    assert bad.wait_exit(60) != 0 and bad.of("sent") == []
    c = agents.run_rmq5("simple", b, group=uniq("G"), topic="TopicA", until_count=2, ak=USER_AK, sk=USER_SK)
    assert sorted(e["body"] for e in c.of("received")) == ["m0", "m1"]


async def test_codes_for_unsigned_bad_and_unpermitted_calls(broker_factory, tmp_path):
    b = acl_grpc_broker(broker_factory, tmp_path)
    for md, code in (([], pb.UNAUTHORIZED), (_auth(USER_AK, "nope-nope-nope"), pb.UNAUTHORIZED),
                     (_auth("noSuchKey99", "whatever1"), pb.UNAUTHORIZED),
                     (_auth(SUBONLY_AK, SUBONLY_SK), pb.FORBIDDEN),  # topics: SUB only
                     (_auth(USER_AK, USER_SK), pb.OK)):
        c = RawClient(b.grpc_addr, metadata=md)
        try:
            r = await c.send("TopicA", b"x")
            assert r.status.code == code, (md, r.status)
        finally:
            await c.close()


async def test_tls_endpoint_with_the_remoting_keys(broker_factory, broker_stack, tmp_path, agents):
    crt, key = make_cert(tmp_path)
    b = grpc_broker(broker_factory, {"tlsEnable": "true", "tls.server.certPath": str(crt),
                                     "tls.server.keyPath": str(key)}, stack=broker_stack)
    creds = grpc.ssl_channel_credentials(root_certificates=crt.read_bytes())
    c = RawClient(b.grpc_addr, credentials=creds)
    topic, group = uniq("TT"), uniq("GT")
    try:
        assert (await c.send(topic, b"over-tls")).status.code == pb.OK
        code, msgs = await c.receive(group, topic)
        assert [m.body for m in msgs] == [b"over-tls"]
    finally:
        await c.close()
    # Apache's Python client with TLS on, trusting the test certificate
    env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(crt)}
    agents.run_rmq5("produce", b, env=env, topic=topic, count=1, tls=True, body_prefix="py")
    got = agents.run_rmq5("simple", b, env=env, group=group, topic=topic, until_count=1, tls=True)
    assert [e["body"] for e in got.of("received")] == ["py0"]


async def test_tls_client_certificates_required(broker_factory, broker_stack, tmp_path):
    """tls.server.need.client.auth=require on the gRPC port: a client with a certificate the trust bundle holds is
    served, one without any is refused the handshake (grpc.aio's, or Envoy's TLS)."""
    (tmp_path / "server").mkdir()
    (tmp_path / "client").mkdir()
    crt, key = make_cert(tmp_path / "server")
    client_crt, client_key = make_cert(tmp_path / "client", cn="client")
    b = grpc_broker(broker_factory, {"tls.server.mode": "enforcing", "tls.server.certPath": str(crt),
                                     "tls.server.keyPath": str(key), "tls.server.need.client.auth": "require",
                                     "tls.server.trustCertPath": str(client_crt)}, stack=broker_stack)
    topic = uniq("TC")
    with_cert = RawClient(b.grpc_addr, credentials=grpc.ssl_channel_credentials(
        root_certificates=crt.read_bytes(), private_key=client_key.read_bytes(),
        certificate_chain=client_crt.read_bytes()))
    without = RawClient(b.grpc_addr, credentials=grpc.ssl_channel_credentials(root_certificates=crt.read_bytes()))
    try:
        assert (await with_cert.send(topic, b"with-cert")).status.code == pb.OK
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await without.send(topic, b"no-cert")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await with_cert.close()
        await without.close()


def test_real_python_client_with_credentials_cannot_create_a_topic(broker_factory, tmp_path, agents):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ATTACK_ACL)
    b = grpc_broker(broker_factory, {"aclEnable": "true", "aclFile": str(acl)})
    bad = agents.rmq5("produce", b, topic="PyFresh", count=1, ak=LOW_AK, sk=LOW_SK)
    assert bad.wait_exit(90) != 0 and bad.of("sent") == []
    assert not topic_exists(b.addr, "PyFresh")
    ok = agents.run_rmq5("produce", b, topic="PyAdmin", count=2, ak=ADMIN_AK, sk=ADMIN_SK)
    assert len(ok.of("sent")) == 2
