"""Request dispatch over real sockets: correlation, oneway, unknown codes, errors, serialize type."""

from __future__ import annotations

import asyncio
import random

from codec.command import RemotingCommand
from remoting.client import RemotingClient
from tests.remoting.raw import RawPeer, json_frame, rocketmq_frame

ECHO, SLOW, BOOM, LATER, GATED = 100, 101, 102, 103, 104


def echo(conn, cmd):
    return cmd.response(0, None, {"n": cmd.ext_fields.get("n", ""), "peer": conn.remote_addr[0]}, body=cmd.body)


def boom(conn, cmd):
    raise RuntimeError("kaput " + cmd.ext_fields.get("n", ""))


async def test_many_concurrent_invokes_answered_out_of_order_are_correlated(make_server):
    gates: dict[str, asyncio.Future] = {}
    all_in = asyncio.get_running_loop().create_future()
    n = 200

    async def gated(conn, cmd):
        fut = gates[cmd.ext_fields["n"]] = asyncio.get_running_loop().create_future()
        if len(gates) == n and not all_in.done():
            all_in.set_result(None)
        await fut
        return cmd.response(0, None, {"n": cmd.ext_fields["n"]}, body=cmd.ext_fields["n"].encode() * 3)

    s = await make_server({GATED: gated})
    client = RemotingClient()
    try:
        calls = [asyncio.ensure_future(client.invoke(s.addr, RemotingCommand.request(GATED, {"n": i}), 10.0))
                 for i in range(n)]
        await asyncio.wait_for(all_in, 30)
        order = list(gates)
        random.Random(7).shuffle(order)
        for key in order:  # answer in a random order, not the order sent
            gates[key].set_result(None)
        replies = await asyncio.gather(*calls)
        for i, r in enumerate(replies):
            assert r.is_response and r.code == 0
            assert r.ext_fields["n"] == str(i)
            assert r.body_bytes() == str(i).encode() * 3
        assert len({r.opaque for r in replies}) == n
        assert len(client._conns) == 1  # one reused connection for all of them
    finally:
        client.close()


async def test_plain_processor_answers_inline_with_request_opaque(make_server):
    s = await make_server({ECHO: echo})
    peer = await RawPeer.connect(s.port)
    peer.send(json_frame(ECHO, 4242, 0, {"n": "x"}, b"payload"))
    f = await peer.read_frame()
    assert (f.ser_type, f.code, f.opaque, f.flag & 1) == (0, 0, 4242, 1)
    assert f.ext == {"n": "x", "peer": "127.0.0.1"} and f.body == b"payload"
    peer.close()


async def test_oneway_requests_get_no_response_not_even_errors(make_server):
    seen = []

    def record(conn, cmd):
        seen.append(cmd.opaque)
        return cmd.response(0)

    s = await make_server({ECHO: record, BOOM: boom})
    peer = await RawPeer.connect(s.port)
    # oneway to a processor that answers, one that raises, and an unknown code; then a normal request
    peer.send(json_frame(ECHO, 1, 2) + json_frame(BOOM, 2, 2) + json_frame(999, 3, 2) + json_frame(ECHO, 4, 0))
    f = await peer.read_frame()
    # the stream is ordered and the server handles one connection's requests in order: had any
    # oneway been answered, its response would have come first
    assert f.opaque == 4 and f.code == 0
    assert seen == [1, 4]
    peer.close()


async def test_unknown_code_gets_3_with_java_remark(make_server):
    s = await make_server({ECHO: echo})
    peer = await RawPeer.connect(s.port)
    f = await peer.request(777, 9)
    assert (f.code, f.opaque, f.flag & 1) == (3, 9, 1)
    assert f.remark == " request type 777 not supported"
    peer.close()


async def test_processor_exception_gets_1_with_exception_text(make_server):
    async def async_boom(conn, cmd):
        await asyncio.sleep(0)
        raise ValueError("bad async")

    s = await make_server({BOOM: boom, SLOW: async_boom})
    peer = await RawPeer.connect(s.port)
    f = await peer.request(BOOM, 10, {"n": "7"})
    assert (f.code, f.opaque) == (1, 10) and "kaput 7" in (f.remark or "") and "RuntimeError" in (f.remark or "")
    f = await peer.request(SLOW, 11)
    assert (f.code, f.opaque) == (1, 11) and "bad async" in (f.remark or "")
    # the connection survives processor errors
    f = await peer.request(777, 12)
    assert f.code == 3
    peer.close()


async def test_response_uses_the_request_serialize_type(make_server):
    s = await make_server({ECHO: echo, BOOM: boom})
    peer = await RawPeer.connect(s.port)
    peer.send(rocketmq_frame(ECHO, 77, 0, {"n": "bin"}, b"B"))
    f = await peer.read_frame()
    assert f.ser_type == 1, "a ROCKETMQ request must be answered in ROCKETMQ"
    assert (f.code, f.opaque, f.flag, f.ext["n"], f.body) == (0, 77, 1, "bin", b"B")
    for code in (BOOM, 4321):  # error responses too
        peer.send(rocketmq_frame(code, 78))
        f = await peer.read_frame()
        assert f.ser_type == 1 and f.opaque == 78 and f.code in (1, 3)
    f = await peer.request(ECHO, 79, {"n": "json"})
    assert f.ser_type == 0 and f.ext["n"] == "json"
    peer.close()


async def test_processor_may_answer_later_with_send_response(make_server):
    held = []

    def hold(conn, cmd):
        held.append((conn, cmd))
        return None  # answer later, like a held pull

    s = await make_server({LATER: hold, ECHO: echo})
    peer = await RawPeer.connect(s.port)
    peer.send(json_frame(LATER, 500))
    f = await peer.request(ECHO, 501)  # the held request does not block the next one
    assert f.opaque == 501
    conn, cmd = held[0]
    assert conn.send_response(cmd.response(0, None, {"late": "yes"}))
    f = await peer.read_frame()
    assert (f.opaque, f.ext) == (500, {"late": "yes"})
    peer.close()


async def test_before_request_hook_short_circuits(make_server):
    called = []

    def proc(conn, cmd):
        called.append(cmd.opaque)
        return cmd.response(0)

    s = await make_server({ECHO: proc})

    def acl(conn, cmd):
        if cmd.ext_fields.get("AccessKey") != "ok":
            return cmd.response(16, "no permission")
        return None

    s.server.before_request = acl
    peer = await RawPeer.connect(s.port)
    f = await peer.request(ECHO, 1, {"AccessKey": "nope"})
    assert (f.code, f.remark) == (16, "no permission")
    f = await peer.request(ECHO, 2, {"AccessKey": "ok"})
    assert f.code == 0
    assert called == [2]
    peer.close()


async def test_listens_on_several_ports_with_one_table(make_server):
    s = await make_server({ECHO: echo}, ports=(0, 0))
    assert len(s.server.ports) == 2 and s.server.ports[0] != s.server.ports[1]
    for port in s.server.ports:
        peer = await RawPeer.connect(port)
        f = await peer.request(ECHO, 3, {"n": str(port)})
        assert f.ext["n"] == str(port)
        peer.close()


async def test_drain_waits_for_inflight_requests(make_server):
    release = asyncio.get_running_loop().create_future()

    async def slow(conn, cmd):
        await release
        return cmd.response(0)

    s = await make_server({SLOW: slow})
    peer = await RawPeer.connect(s.port)
    peer.send(json_frame(SLOW, 1))
    conn = await s.next_conn()
    await asyncio.wait_for(_until_inflight(conn), 30)
    s.server.stop_accepting()
    assert await s.server.drain(0.05) is False
    asyncio.get_running_loop().call_soon(release.set_result, None)
    assert await s.server.drain(5) is True
    f = await peer.read_frame()
    assert f.opaque == 1 and f.code == 0
    peer.close()


async def _until_inflight(conn) -> None:
    while conn.inflight == 0:
        await asyncio.sleep(0.001)


async def test_runs_on_uvloop():
    import uvloop

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


async def test_body_slices_are_sent_as_given(make_server):
    store = bytearray(b"0123456789" * 10000)  # stands in for mmap'd CommitLog records
    mv = memoryview(store)

    def pull(conn, cmd):
        return cmd.response(0, body=[mv[0:10], mv[50000:50005], b"tail", mv[99990:100000]])

    s = await make_server({ECHO: pull})
    peer = await RawPeer.connect(s.port)
    peer.send(rocketmq_frame(ECHO, 8))
    f = await peer.read_frame()
    assert f.ser_type == 1 and f.body == b"0123456789" + b"01234" + b"tail" + b"0123456789"
    peer.close()


async def test_batch_entries_may_be_encoded_frames(make_server):
    """A batch processor may answer a run with frames it encoded itself (a bytes entry, written as
    it is), next to ordinary responses; the ACL hook still runs per request."""
    from codec.frame import encode_frame_bytes

    runs = []

    def proc(conn, cmd):
        return cmd.response(0, None, {"n": cmd.ext_fields.get("n", "")})

    def batch(conn, cmds):
        runs.append([c.opaque for c in cmds])
        out: list[bytes | RemotingCommand | None] = [None] * len(cmds)
        out[0] = b"".join(encode_frame_bytes(proc(conn, c)) for c in cmds[:-1])
        out[-1] = proc(conn, cmds[-1])
        return out

    s = await make_server()
    s.server.register(ECHO, proc, batch=batch)
    s.server.before_request = lambda conn, cmd: cmd.response(16, "no") if cmd.ext_fields.get("n") == "2" else None
    peer = await RawPeer.connect(s.port)
    peer.send(b"".join(rocketmq_frame(ECHO, i, 0, {"n": str(i)}) for i in range(1, 6)))
    got = {}
    for _ in range(5):
        f = await peer.read_frame()
        got[f.opaque] = (f.code, f.ext.get("n"))
    assert got == {1: (0, "1"), 2: (16, None), 3: (0, "3"), 4: (0, "4"), 5: (0, "5")}
    assert runs == [[1, 3, 4, 5]]
    peer.close()
