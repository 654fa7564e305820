"""TLS on the broker port: permissive (TLS and plain on one port) and enforcing (plain refused)."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from codec.command import RemotingCommand
from remoting.client import RemotingClient
from tests.helpers.checks import present
from tests.security.helpers import call, client_context, connect, frame, make_cert, read_reply

pytestmark = pytest.mark.process

SEND_MESSAGE, PULL_MESSAGE, GET_MAX_OFFSET = 10, 11, 30


@pytest.fixture
def cert(tmp_path):
    return make_cert(tmp_path)


def tls_broker(broker_factory, cert, mode: str):
    crt, key = cert
    return broker_factory({"tlsEnable": "true", "tls.server.mode": mode, "tls.server.certPath": str(crt),
                           "tls.server.keyPath": str(key), "autoCreateTopicEnable": "true"})


def send_header(topic: str) -> dict:
    return {"producerGroup": "PG_tls", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
            "properties": "", "reconsumeTimes": "0"}


def pull_header(topic: str) -> dict:
    return {"consumerGroup": "GID_tls", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}


async def send_and_pull_over_tls(addr: str, ctx: ssl.SSLContext, topic: str, bodies: list[bytes]) -> bytes:
    client = RemotingClient(ssl=ctx)
    try:
        for body in bodies:
            r = await client.invoke(addr, RemotingCommand.request(SEND_MESSAGE, send_header(topic), body), 5)
            assert r.code == 0, (r.code, r.remark)
        conn = await client.connection(addr)
        assert present(conn.transport).get_extra_info("ssl_object") is not None
        r = await client.invoke(addr, RemotingCommand.request(PULL_MESSAGE, pull_header(topic)), 5)
        assert r.code == 0, (r.code, r.remark)
        return r.body_bytes()
    finally:
        client.close()


async def test_permissive_serves_tls_and_plain_on_one_port(broker_factory, cert):
    b = tls_broker(broker_factory, cert, "permissive")
    bodies = [f"tls-{i}".encode() for i in range(5)]
    got = await send_and_pull_over_tls(b.addr, client_context(cert[0]), "TopicTls", bodies)
    assert all(x in got for x in bodies)
    plain = await asyncio.to_thread(call, b.addr, GET_MAX_OFFSET, {"topic": "TopicTls", "queueId": 0})
    assert plain.code == 0 and plain.ext["offset"] == "5"
    # a TLS client that does not trust the broker's certificate fails the handshake, the broker lives on
    with pytest.raises(ssl.SSLError):
        await asyncio.to_thread(call, b.addr, GET_MAX_OFFSET, {"topic": "TopicTls", "queueId": 0},
                                tls=ssl.create_default_context())
    assert (await asyncio.to_thread(call, b.addr, GET_MAX_OFFSET, {"topic": "TopicTls", "queueId": 0})).code == 0


async def test_enforcing_refuses_plain_and_serves_tls(broker_factory, cert):
    b = tls_broker(broker_factory, cert, "enforcing")

    def plain_attempt():
        with connect(b.addr) as sock:
            sock.sendall(frame(GET_MAX_OFFSET, {"topic": "T", "queueId": "0"}))
            try:
                data = sock.recv(1)
            except ConnectionResetError:
                return b""
            return data

    assert await asyncio.to_thread(plain_attempt) == b"", "enforcing mode answered a plain client"
    ctx = client_context(cert[0])
    got = await send_and_pull_over_tls(b.addr, ctx, "TopicEnf", [b"enforced-1", b"enforced-2"])
    assert b"enforced-1" in got and b"enforced-2" in got

    def tls_pipeline():  # many frames in one TLS stream, answered in order
        with connect(b.addr, tls=ctx) as sock:
            sock.sendall(b"".join(frame(GET_MAX_OFFSET, {"topic": "TopicEnf", "queueId": "0"}, opaque=i + 1)
                                  for i in range(50)))
            return [read_reply(sock) for _ in range(50)]

    replies = await asyncio.to_thread(tls_pipeline)
    assert [r.ext.get("offset") for r in replies] == ["2"] * 50
    assert "tls.plain_connection_refused" in b.stderr_path.read_text()


def test_tls_mode_without_cert_fails_start(tmp_path):
    from tests.helpers.broker import BrokerProcess
    b = BrokerProcess(tmp_path / "nocert", config={"tls.server.mode": "enforcing"}, ready_timeout=30)
    with pytest.raises(AssertionError, match="did not print its ready line"):
        b.start()
    assert "tls.server.certPath" in b.stderr_path.read_text()
