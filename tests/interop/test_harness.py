"""Self-checks of the broker harness against a stand-in broker (a few lines of asyncio below).

They pin what the interop tests rely on: the (P, P-2) port pair, the ready line, SIGTERM => exit 0
required, restart on the same port and store, kill -9, and the set-up wire client's framing.
"""

from __future__ import annotations

import socket
import sys
import textwrap

import pytest

from tests.helpers import wire
from tests.helpers.broker import BrokerProcess
from tests.helpers.checks import present

pytestmark = pytest.mark.process

STAND_IN = textwrap.dedent('''
    import argparse, asyncio, json, os, signal, struct, sys
    p = argparse.ArgumentParser(); p.add_argument("--store"); p.add_argument("--port", type=int)
    p.add_argument("--config"); p.add_argument("--exit-code", type=int, default=0)
    a = p.parse_args()
    os.makedirs(a.store, exist_ok=True)
    with open(os.path.join(a.store, "starts"), "a") as f:
        f.write(open(a.config).read() if a.config else "-\\n")

    async def handle(reader, writer):
        while True:
            try:
                total, hlen = struct.unpack(">ii", await reader.readexactly(8))
            except asyncio.IncompleteReadError:
                return
            hdr = json.loads(await reader.readexactly(hlen)); await reader.readexactly(total - 4 - hlen)
            ext = {"echo": hdr["extFields"].get("topic", "")} if hdr["code"] == 17 else {"n": 1}
            out = json.dumps({"code": 0, "opaque": hdr["opaque"], "flag": 1, "extFields": ext}).encode()
            writer.write(struct.pack(">ii", 4 + len(out), len(out)) + out)

    async def main():
        servers = [await asyncio.start_server(handle, "127.0.0.1", port) for port in (a.port, a.port - 2)]
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print(f"delaymq broker ready on 127.0.0.1:{a.port}", flush=True)
        await stop.wait()
        for s in servers:
            s.close()
        sys.exit(a.exit_code)
    asyncio.run(main())
''')


@pytest.fixture
def stand_in(tmp_path):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    return [sys.executable, str(script)]


def test_start_serves_port_and_vip_port_and_stops_cleanly(tmp_path, stand_in):
    b = BrokerProcess(tmp_path / "b", config={"flushDiskType": "SYNC_FLUSH"}, entry=stand_in).start()
    assert b.ready_line == f"delaymq broker ready on {b.addr}"
    for port in (b.port, b.port - 2):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert (b.store / "starts").read_text() == "grpcListenPort=0\nflushDiskType=SYNC_FLUSH\n"  # the harness turns gRPC off unless asked
    assert b.stop() == 0
    assert not b.running


def test_restart_keeps_port_and_store_and_kill_is_sigkill(tmp_path, stand_in):
    b = BrokerProcess(tmp_path / "b", entry=stand_in).start()
    port = b.port
    b.restart()
    assert b.port == port and b.running
    b.kill()
    assert present(b.proc).returncode == -9
    b.start()
    assert (b.store / "starts").read_text() == "grpcListenPort=0\n" * 3  # the same conf file at every start
    b.stop()


def test_stop_fails_when_exit_code_is_not_zero(tmp_path, stand_in):
    b = BrokerProcess(tmp_path / "b", entry=[*stand_in, "--exit-code", "3"]).start()
    with pytest.raises(AssertionError, match="exited with 3"):
        b.stop()


def test_missing_ready_line_fails_fast_with_the_output(tmp_path):
    b = BrokerProcess(tmp_path / "b", entry=[sys.executable, "-c", "import sys; print('boom', file=sys.stderr)"],
                      ready_timeout=10)
    with pytest.raises(AssertionError, match="boom"):
        b.start()


def test_wire_client_round_trip_and_strict_string_headers(tmp_path, stand_in):
    b = BrokerProcess(tmp_path / "b", entry=stand_in).start()
    reply = wire.invoke(b.addr, wire.UPDATE_AND_CREATE_TOPIC, {"topic": "T1"})
    assert (reply.code, reply.ext) == (0, {"echo": "T1"})
    b.create_topic("T2", 4)
    with pytest.raises(wire.WireError, match="non-string"):
        wire.invoke(b.vip_addr, wire.GET_MAX_OFFSET, {"topic": "T1", "queueId": 0})
    b.stop()
