"""Issue 12 item 7: unauthenticated input costs bounded work. A header over maxHeaderSize closes that
connection as soon as its length word arrives; VIEW_MESSAGE_BY_ID needs SUB on the record's topic;
GET_BROKER_CONFIG is admin-only and never shows key or ACL paths; TLS offers forward-secret AEAD
suites only and can require client certificates (tls.server.need.client.auth)."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

import pytest

from tests.helpers.wire import WireError
from tests.security.conftest import ADMIN_AK, ADMIN_SK, SUBONLY_AK, SUBONLY_SK, USER_AK, USER_SK
from tests.security.helpers import call, client_context, connect, frame, make_cert, read_reply

pytestmark = pytest.mark.process

SEND_MESSAGE, GET_MAX_OFFSET, GET_BROKER_CONFIG, VIEW_MESSAGE_BY_ID = 10, 30, 26, 33
UPDATE_AND_CREATE_TOPIC = 17
NO_PERMISSION = 16
WHITELISTED = "127.0.0.200"  # globalWhiteRemoteAddresses in the test plain_acl.yml


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the peer closes the connection (EOF or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# ---- header limit ------------------------------------------------------------------------------
def test_oversized_header_closes_that_connection_before_it_is_sent(broker):
    """A 10 MiB header announced in the length words: the broker closes the connection after the
    first 8 bytes, without waiting for (or parsing) the header; another client is served meanwhile."""
    hlen = 10 << 20
    with connect(broker.addr) as bad:
        bad.sendall(struct.pack(">ii", 4 + hlen, hlen) + b"{" * 1000)
        with connect(broker.addr) as good:
            good.sendall(frame(GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"}))
            assert read_reply(good).code == 0
        assert closed_within(bad, 10.0)
    assert "header length" in broker.stderr_path.read_text()


def test_max_header_size_is_configurable(broker_factory):
    b = broker_factory({"maxHeaderSize": 4096})
    ok = {"topic": "TBW102", "queueId": "0", "pad": "x" * 2000}
    assert call(b.addr, GET_MAX_OFFSET, ok).code == 0
    with connect(b.addr) as sock:
        sock.sendall(frame(GET_MAX_OFFSET, dict(ok, pad="x" * 5000)))
        assert closed_within(sock, 10.0)


# ---- ACL ---------------------------------------------------------------------------------------
def send_whitelisted(addr: str, topic: str, body: bytes) -> int:
    """Store one message from the globally whitelisted address; returns its CommitLog offset."""
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": "", "reconsumeTimes": "0"}
    r = call(addr, SEND_MESSAGE, ext, body, source=WHITELISTED)
    assert r.code == 0, (r.code, r.remark)
    return int(r.ext["msgId"][-16:], 16)


def test_view_message_by_id_needs_sub_on_the_records_topic(acl_broker):
    for topic in ("TopicDenied", "TopicA"):
        r = call(acl_broker.addr, UPDATE_AND_CREATE_TOPIC,
                 {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}, ak=ADMIN_AK, sk=ADMIN_SK)
        assert r.code == 0, r
    secret = send_whitelisted(acl_broker.addr, "TopicDenied", b"secret-body")
    public = send_whitelisted(acl_broker.addr, "TopicA", b"public-body")
    r = call(acl_broker.addr, VIEW_MESSAGE_BY_ID, {"offset": secret}, ak=USER_AK, sk=USER_SK)
    assert r.code == NO_PERMISSION and b"secret-body" not in r.body
    assert "TopicDenied" in (r.remark or "")
    r = call(acl_broker.addr, VIEW_MESSAGE_BY_ID, {"offset": public}, ak=USER_AK, sk=USER_SK)
    assert r.code == 0 and b"public-body" in r.body
    r = call(acl_broker.addr, VIEW_MESSAGE_BY_ID, {"offset": secret}, ak=SUBONLY_AK, sk=SUBONLY_SK)
    assert r.code == 0 and b"secret-body" in r.body


def test_get_broker_config_is_admin_only_and_hides_paths(acl_broker, acl_file):
    r = call(acl_broker.addr, GET_BROKER_CONFIG, ak=USER_AK, sk=USER_SK)
    assert r.code == NO_PERMISSION and str(acl_file) not in (r.remark or "")
    admin: list[dict[str, Any]] = [{"ak": ADMIN_AK, "sk": ADMIN_SK}, {"source": WHITELISTED}]
    for kw in admin:
        r = call(acl_broker.addr, GET_BROKER_CONFIG, **kw)
        assert r.code == 0, r
        text = r.body.decode()
        assert "aclEnable=true" in text and "\naclFile=\n" in text
        assert str(acl_file) not in text


# ---- TLS ---------------------------------------------------------------------------------------
@pytest.fixture
def cert(tmp_path):
    (tmp_path / "server").mkdir()
    return make_cert(tmp_path / "server")


def test_tls_offers_forward_secret_aead_suites_only(broker_factory, cert):
    crt, key = cert
    b = broker_factory({"tls.server.mode": "enforcing", "tls.server.certPath": str(crt),
                        "tls.server.keyPath": str(key)})
    ctx = client_context(crt)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with connect(b.addr, tls=ctx) as sock:
        name, version, _bits = sock.cipher()
        assert version == "TLSv1.2" and name.startswith("ECDHE-") and ("GCM" in name or "CHACHA20" in name)
    # a client offering only a CBC suite (forward secret, but not AEAD) is refused
    cbc = client_context(crt)
    cbc.maximum_version = ssl.TLSVersion.TLSv1_2
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-RSA-AES128-SHA256")
    with pytest.raises(ssl.SSLError):
        with connect(b.addr, tls=cbc):
            pass
    # TLS 1.3 (all of its suites are ephemeral) still works
    with connect(b.addr, tls=client_context(crt)) as sock:
        assert sock.version() == "TLSv1.3"
        sock.sendall(frame(GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"}))
        assert read_reply(sock).code == 0


def test_tls_server_need_client_auth_require(broker_factory, cert, tmp_path):
    crt, key = cert
    (tmp_path / "client").mkdir()
    client_crt, client_key = make_cert(tmp_path / "client", cn="client")
    (tmp_path / "stranger").mkdir()
    other_crt, other_key = make_cert(tmp_path / "stranger", cn="stranger")
    b = broker_factory({"tls.server.mode": "enforcing", "tls.server.certPath": str(crt),
                        "tls.server.keyPath": str(key), "tls.server.need.client.auth": "require",
                        "tls.server.trustCertPath": str(client_crt)})
    req = {"topic": "TBW102", "queueId": "0"}
    with_cert = client_context(crt)
    with_cert.load_cert_chain(str(client_crt), str(client_key))
    assert call(b.addr, GET_MAX_OFFSET, req, tls=with_cert).code == 0
    stranger = client_context(crt)
    stranger.load_cert_chain(str(other_crt), str(other_key))
    for ctx in (client_context(crt), stranger):  # no certificate; one the broker does not trust
        with pytest.raises((ssl.SSLError, ConnectionError, WireError)):
            call(b.addr, GET_MAX_OFFSET, req, tls=ctx)
    assert call(b.addr, GET_MAX_OFFSET, req, tls=with_cert).code == 0


def test_client_auth_without_trust_bundle_refuses_to_start(tmp_path, cert):
    import subprocess
    import sys

    from tests.helpers.broker import REPO_ROOT, pick_port_pair
    crt, key = cert
    conf = tmp_path / "b.conf"
    conf.write_text(f"tls.server.mode=enforcing\ntls.server.certPath={crt}\ntls.server.keyPath={key}\n"
                    "tls.server.need.client.auth=require\n")
    res = subprocess.run([sys.executable, "-m", "server", "--store", str(tmp_path / "s"), "--port",
                          str(pick_port_pair()), "--config", str(conf)], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2, res.stderr
    assert "tls.server.need.client.auth" in res.stderr and "trustCertPath" in res.stderr


async def test_grpc_endpoint_requires_client_certificates_too(broker_factory, cert, tmp_path):
    import grpc

    from server.grpc.v2 import definition_pb2 as pb
    from tests.grpc.conftest import grpc_broker
    from tests.grpc.raw import RawClient

    crt, key = cert
    (tmp_path / "client").mkdir()
    client_crt, client_key = make_cert(tmp_path / "client", cn="client")
    b = grpc_broker(broker_factory, {"tls.server.mode": "enforcing", "tls.server.certPath": str(crt),
                                     "tls.server.keyPath": str(key), "tls.server.need.client.auth": "require",
                                     "tls.server.trustCertPath": str(client_crt)})
    good = RawClient(b.grpc_addr, grpc.ssl_channel_credentials(
        root_certificates=crt.read_bytes(), private_key=client_key.read_bytes(),
        certificate_chain=client_crt.read_bytes()))
    try:
        assert (await good.send("TopicG", b"with-cert")).status.code == pb.OK
    finally:
        await good.close()
    bad = RawClient(b.grpc_addr, grpc.ssl_channel_credentials(root_certificates=crt.read_bytes()))
    try:
        with pytest.raises(grpc.aio.AioRpcError):
            await bad.send("TopicG", b"no-cert")
    finally:
        await bad.close()
