"""A delaymq name server subprocess (`python -m server.cluster.namesrv`) and small probes of what a name
server answers, through the independent test wire client (tests/helpers/wire.py)."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import wire
from tests.helpers.broker import HOST, REPO_ROOT, pick_port_pair, tail

READY_RE = re.compile(r"delaymq namesrv ready on (\S+):(\d+)")
GET_BROKER_CLUSTER_INFO = 106


class NamesrvProcess:
    def __init__(self, work_dir: Path, config: dict[str, object] | None = None, port: int | None = None,
                 ready_timeout: float = 20.0) -> None:
        self.work_dir = Path(work_dir)
        self.config = dict(config or {})
        self.port = port or pick_port_pair()
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self.stdout_path = self.work_dir / "namesrv.stdout"
        self.stderr_path = self.work_dir / "namesrv.stderr"

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    namesrv = addr  # the agents' fixtures read `.namesrv`

    def start(self) -> NamesrvProcess:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "server.cluster.namesrv", "--port", str(self.port)]
        for k, v in self.config.items():
            argv += ["--set", f"{k}={v}"]
        self._ready.clear()
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        if not self._ready.wait(self.ready_timeout) or self.proc.poll() is not None:
            self.kill()
            raise AssertionError(f"namesrv not ready in {self.ready_timeout}s\n{self.diagnostics()}")
        return self

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with open(self.stdout_path, "ab") as out:
            for raw in proc.stdout:
                out.write(raw)
                out.flush()
                if READY_RE.search(raw.decode("utf-8", "replace")):
                    self._ready.set()
        self._ready.set()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"namesrv ignored SIGTERM\n{self.diagnostics()}") from None
        code = self.proc.returncode if self.proc else 0
        assert code == 0, f"namesrv exited with {code}\n{self.diagnostics()}"
        return code

    def kill(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def diagnostics(self) -> str:
        return (f"namesrv {self.addr}\n--- stderr tail ---\n{tail(self.stderr_path)}\n"
                f"--- stdout tail ---\n{tail(self.stdout_path, 2000)}")


def fastjson_loads(body: bytes) -> Any:
    """json.loads after quoting fastjson's bare integer map keys (`{0:"addr"}`, cluster-ha.md §0.4)."""
    return json.loads(re.sub(r'([{,])(-?\d+):', r'\1"\2":', body.decode()))


def cluster_brokers(namesrv: str) -> dict[str, dict[str, str]]:
    """brokerName -> {brokerId: addr} from GET_BROKER_CLUSTER_INFO (ids quoted or not)."""
    reply = wire.invoke(namesrv, GET_BROKER_CLUSTER_INFO)
    assert reply.code == 0, reply
    return {name: b["brokerAddrs"] for name, b in fastjson_loads(reply.body)["brokerAddrTable"].items()}


def route(namesrv: str, topic: str) -> dict[str, Any] | None:
    reply = wire.invoke(namesrv, wire.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if reply.code == 17:
        return None
    assert reply.code == 0, reply
    return fastjson_loads(reply.body)


def topic_route(namesrv: str, topic: str) -> dict[str, Any]:
    """`route`, asserted to exist (the name server knows the topic)."""
    r = route(namesrv, topic)
    assert r is not None, f"no route for {topic} on {namesrv}"
    return r


def route_brokers(namesrv: str, topic: str) -> set[str]:
    r = route(namesrv, topic)
    return {q["brokerName"] for q in r["queueDatas"]} if r else set()


def wait_until(pred: Callable[[], bool], timeout: float, what: str, diagnostics: Callable[[], str] = str) -> None:
    """Poll an observable state of a separate process (there is no event to wait on across processes)."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{diagnostics()}")
        time.sleep(0.05)


class Session:
    """One kept-open connection speaking JSON-header requests (a stand-in broker's registration channel)."""

    def __init__(self, addr: str, timeout: float = 5.0) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._opaque = itertools.count(1)

    def invoke(self, code: int, ext: dict[str, str], body: bytes = b"", version: int = 409) -> wire.Reply:
        opaque = next(self._opaque)
        header = json.dumps({"code": code, "language": "JAVA", "version": version, "opaque": opaque, "flag": 0,
                             "extFields": ext, "serializeTypeCurrentRPC": "JSON"}).encode()
        self.sock.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body)
        total, hdr_len = struct.unpack(">ii", wire._recv_exact(self.sock, 8))
        hdr = json.loads(wire._recv_exact(self.sock, hdr_len & 0xFFFFFF))
        payload = wire._recv_exact(self.sock, total - 4 - (hdr_len & 0xFFFFFF))
        assert hdr["opaque"] == opaque
        return wire.Reply(hdr["code"], hdr.get("remark"), hdr.get("extFields") or {}, payload)

    def closed_by_peer(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()
