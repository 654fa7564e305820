"""RemotingClient against a real RemotingServer: reuse, reconnect, timeouts, server-initiated requests."""

from __future__ import annotations

import asyncio

import pytest

from codec.command import RemotingCommand
from remoting.client import RemotingClient, split_addr
from remoting.errors import ConnectionClosedError, RemotingTimeoutError
from tests.remoting.raw import wait_for_condition

ECHO, NEVER = 100, 101
NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO = 40, 307


def echo(conn, cmd):
    return cmd.response(0, None, {"n": cmd.ext_fields.get("n", "")})


@pytest.fixture
async def client():
    c = RemotingClient(connect_timeout=2.0)
    yield c
    c.close()


async def test_server_initiated_requests_over_the_clients_connection(make_server, client):
    s = await make_server({ECHO: echo})
    loop = asyncio.get_running_loop()
    notified = loop.create_future()

    def on_notify(conn, cmd):
        notified.set_result(cmd)

    async def running_info(conn, cmd):
        await asyncio.sleep(0)
        return cmd.response(0, None, {"group": cmd.ext_fields["consumerGroup"]}, body=b"info")

    client.register(NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    client.register(GET_CONSUMER_RUNNING_INFO, running_info)
    assert (await client.invoke(s.addr, RemotingCommand.request(ECHO, {"n": 1}))).ext_fields["n"] == "1"
    conn = await s.next_conn()
    # oneway notify: delivered, never answered
    assert conn.invoke_oneway(RemotingCommand.request(NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"}))
    cmd = await asyncio.wait_for(notified, 30)
    assert cmd.is_oneway and cmd.ext_fields == {"consumerGroup": "G"}
    # request/response from the server side, answered by a coroutine processor of the client
    resp = await s.server.invoke(conn, RemotingCommand.request(GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G"}))
    assert (resp.code, resp.ext_fields, resp.body_bytes()) == (0, {"group": "G"}, b"info")
    # a code the client does not know gets 3, like on the server
    resp = await conn.invoke(RemotingCommand.request(12345), 3.0)
    assert resp.code == 3 and resp.remark == " request type 12345 not supported"
    assert not conn.pending


async def test_connection_is_reused_and_redialled_after_it_closes(make_server, client):
    s = await make_server({ECHO: echo})
    await client.invoke(s.addr, RemotingCommand.request(ECHO))
    first = await client.connection(s.addr)
    assert await client.connection(s.addr) is first
    server_side = await s.next_conn()
    server_side.close()
    await asyncio.wait_for(first.closed, 30)
    r = await client.invoke(s.addr, RemotingCommand.request(ECHO, {"n": "again"}))
    assert r.ext_fields["n"] == "again"
    assert await client.connection(s.addr) is not first


async def test_concurrent_first_calls_share_one_dial(make_server, client):
    s = await make_server({ECHO: echo})
    rs = await asyncio.gather(*(client.invoke(s.addr, RemotingCommand.request(ECHO, {"n": i})) for i in range(20)))
    assert [r.ext_fields["n"] for r in rs] == [str(i) for i in range(20)]
    await s.next_conn()
    assert s.accepted.empty() and len(s.server.connections) == 1


async def test_invoke_timeout_and_close_fail_pending_calls(make_server, client):
    async def never(conn, cmd):
        await asyncio.Event().wait()

    s = await make_server({NEVER: never})
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(RemotingTimeoutError):
        await asyncio.wait_for(client.invoke(s.addr, RemotingCommand.request(NEVER), timeout=0.2), 30)
    assert loop.time() - t0 >= 0.15  # the call's own 0.2 s timeout fired (the 30 s bound is a hang guard)
    conn = await client.connection(s.addr)
    assert not conn.pending  # the timed-out entry is gone
    call = asyncio.ensure_future(client.invoke(s.addr, RemotingCommand.request(NEVER), timeout=30))
    server_side = await s.next_conn()
    await wait_for_condition(lambda: bool(conn.pending), 30, "request sent")
    server_side.close()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(call, 30)


async def test_connect_failure_raises_connection_closed_error(client):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConnectionClosedError):
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO))


async def test_closed_client_refuses_new_calls(make_server, client):
    s = await make_server({ECHO: echo})
    await client.invoke(s.addr, RemotingCommand.request(ECHO))
    conn = await client.connection(s.addr)
    client.close()
    await asyncio.wait_for(conn.closed, 30)
    with pytest.raises(ConnectionClosedError):
        await client.invoke(s.addr, RemotingCommand.request(ECHO))


def test_split_addr():
    assert split_addr("10.0.0.1:10911") == ("10.0.0.1", 10911)
    assert split_addr(" [::1]:9876 ") == ("::1", 9876)
    with pytest.raises(ValueError):
        split_addr("no-port")


async def test_close_during_dial_fails_waiters_with_connection_closed(make_server):
    s = await make_server({ECHO: echo})
    c = RemotingClient()
    call = asyncio.ensure_future(c.invoke(s.addr, RemotingCommand.request(ECHO)))
    await asyncio.sleep(0)  # one loop turn: the call has started its dial task, which has not run yet
    assert c._dialing, "precondition: a dial is under way"
    c.close()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(call, 30)


@pytest.mark.process
async def test_tls_round_trip(make_server, tmp_path):
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(crt), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(crt, key)
    client_ctx = ssl.create_default_context(cafile=str(crt))
    s = await make_server({ECHO: echo}, ssl=server_ctx)
    c = RemotingClient(ssl=client_ctx)
    try:
        r = await c.invoke(s.addr, RemotingCommand.request(ECHO, {"n": "tls"}))
        assert r.ext_fields["n"] == "tls"
        conn = await s.next_conn()
        assert conn.transport.get_extra_info("ssl_object") is not None
    finally:
        c.close()
    plain = RemotingClient(connect_timeout=1.0)  # a plaintext client gets no answer from a TLS port
    try:
        with pytest.raises((RemotingTimeoutError, ConnectionClosedError)):
            await plain.invoke(s.addr, RemotingCommand.request(ECHO), timeout=0.5)
    finally:
        plain.close()
