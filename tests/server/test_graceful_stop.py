"""Issue 26 item 5: a graceful stop answers what it stored.

A broker process with flushDiskType=SYNC_FLUSH takes a bounded pipelined load of sends on several raw
connections (each writing its requests back to back while a thread reads the answers) and gets SIGTERM
in the middle. Every request is answered, or the connection closes before the broker read it: after a
restart the stored messages are exactly those answered SEND_OK (nothing stored and left unanswered, as
17 were before; nothing answered OK and missing)."""

from __future__ import annotations

import json
import socket
import struct
import threading

import pytest

from tests.helpers import wire
from tests.helpers.broker import BrokerProcess
from tests.server.helpers import send_ext
from tests.server.raw import props
from tests.server.test_start_safety import pull_bodies

pytestmark = pytest.mark.process

SEND_MESSAGE = 10
_LEN = struct.Struct(">ii")
CONNECTIONS, PER_CONNECTION = 4, 3000


def send_frame(opaque: int, topic: str, qid: int, body: bytes) -> bytes:
    header = json.dumps({"code": SEND_MESSAGE, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 0,
                         "extFields": send_ext(topic, props(WAIT="true"), qid, v2=False)}).encode()
    return _LEN.pack(4 + len(header) + len(body), len(header)) + header + body


class Pipeline:
    """One connection: a thread writes every request back to back, this one reads answers until EOF."""

    def __init__(self, addr: str, frames: list[bytes]) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.frames = frames
        self.answers: dict[int, int] = {}  # opaque -> response code
        self.reset = False
        self.first = threading.Event()  # some answers came: the load is on
        self.writer = threading.Thread(target=self._write, daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)

    def start(self) -> None:
        self.writer.start()
        self.reader.start()

    def _write(self) -> None:
        try:
            for f in self.frames:
                self.sock.sendall(f)
        except OSError:
            pass  # the broker closed the connection: the rest was never read by it

    def _read(self) -> None:
        f = self.sock.makefile("rb")
        while True:
            try:
                head = f.read(8)
            except ConnectionResetError:
                self.reset = True  # a reset may have dropped answers sent before it
                return
            if len(head) < 8:
                return  # EOF: the broker closed the connection
            total, word = _LEN.unpack(head)
            hdr = json.loads(f.read(word & 0xFFFFFF))
            f.read(total - 4 - (word & 0xFFFFFF))
            self.answers[hdr["opaque"]] = hdr["code"]
            if len(self.answers) >= 50:
                self.first.set()


def test_sigterm_under_sync_flush_load_answers_every_stored_send(tmp_path):
    b = BrokerProcess(tmp_path / "b", config={"flushDiskType": "SYNC_FLUSH"})
    b.start()
    try:
        wire.create_topic(b.addr, "StopT", CONNECTIONS)
        bodies: dict[int, bytes] = {}
        pipes = []
        opaque = 1
        for c in range(CONNECTIONS):
            frames = []
            for _ in range(PER_CONNECTION):
                body = b"stop-%07d" % opaque
                bodies[opaque] = body
                frames.append(send_frame(opaque, "StopT", c, body))
                opaque += 1
            pipes.append(Pipeline(b.addr, frames))
        for p in pipes:
            p.start()
        for p in pipes:
            assert p.first.wait(30), b.diagnostics()
        assert b.stop(60) == 0  # SIGTERM in the middle of the load; a clean exit
        for p in pipes:
            p.reader.join(30)
            assert not p.reader.is_alive()
            p.writer.join(30)
            p.sock.close()
        ok = {bodies[o] for p in pipes for o, code in p.answers.items() if code == 0}
        answered = sum(len(p.answers) for p in pipes)
        assert 0 < answered < CONNECTIONS * PER_CONNECTION, answered  # SIGTERM came mid-load
        b.start()
        stored = set()
        for c in range(CONNECTIONS):
            n = wire.max_offset(b.addr, "StopT", c)
            stored.update(pull_bodies(b.addr, "StopT", c, n) if n else [])
        assert ok <= stored, f"{len(ok - stored)} answered SEND_OK but missing after restart"
        assert stored <= ok, f"{len(stored - ok)} stored but never answered"
        b.stop()
    finally:
        if b.running:
            b.kill()
