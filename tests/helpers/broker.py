"""Run the delaymq broker as a real subprocess for end-to-end and interop tests.

`BrokerProcess` starts `python -m server --store DIR --port P [--config broker.conf]`, waits for the
`delaymq broker ready on <host>:<port>` stdout line (event-driven: a reader thread sets an Event),
and offers stop (SIGTERM, exit 0 required), kill (SIGKILL) and restart on the same store and port.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from tests.helpers import wire

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_RE = re.compile(r"delaymq broker ready on (\S+):(\d+)")
SERVING_PID_RE = re.compile(r"\(envoy pid (\d+)\)")  # grpcServerStack=envoy: the broker runs in that process
HOST = "127.0.0.1"


def _port_free(port: int) -> bool:
    if port <= 0:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


_handed_out: set[int] = set()  # every port of every triple this process handed out (none is handed out twice)


def pick_port_pair(attempts: int = 200) -> int:
    """An ephemeral port P on 127.0.0.1 with P, P-2 (the VIP channel) and P+1 (haListenPort, which
    every broker listens on) all free right now and none of them handed out by an earlier call (a test
    that picks a broker's port and, separately, its gRPC port must not get the broker's VIP port)."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        triple = {port - 2, port, port + 1}
        if 1026 < port < 65535 and not triple & _handed_out and all(map(_port_free, triple)):
            _handed_out.update(triple)
            return port
    raise RuntimeError("no free (P-2, P, P+1) ports found on 127.0.0.1")


GRPC_PORT_OFFSET = 1795  # a broker's default grpcListenPort is listenPort - 1795 (server.config)


def pick_port_with_grpc(attempts: int = 50) -> int:
    """A broker port P (as pick_port_pair) whose default gRPC port P - 1795 is free too: for brokers started
    without grpcListenPort, as the README's recipes start them."""
    for _ in range(attempts):
        port = pick_port_pair()
        if port - GRPC_PORT_OFFSET > 1024 and port - GRPC_PORT_OFFSET not in _handed_out \
                and _port_free(port - GRPC_PORT_OFFSET):
            _handed_out.add(port - GRPC_PORT_OFFSET)
            return port
    raise RuntimeError("no broker port with a free default gRPC port found on 127.0.0.1")


def pick_broker_run(brokers: int, step: int = 10, attempts: int = 100) -> int:
    """A port P where `brokers` brokers fit `step` apart, as `delaymq up --broker-port P` lays them out: each
    P + step*i with its -2 (VIP) and +1 (HA) free and none handed out before."""
    for _ in range(attempts):
        port = pick_port_pair()
        rest = {port + step * i + d for i in range(1, brokers) for d in (-2, 0, 1)}
        if not rest & _handed_out and all(map(_port_free, rest)):
            _handed_out.update(rest)
            return port
    raise RuntimeError(f"no room for {brokers} brokers' ports on 127.0.0.1")


def tail(path: Path, max_bytes: int = 8000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return "<no file>"


def wait_pid_gone(pid: int, timeout: float) -> bool:
    """Whether process `pid` (not our child) exited within `timeout` s: a pidfd turns readable when it does."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


class BrokerProcess:
    """One broker subprocess bound to a store directory and a port that survive restarts."""

    def __init__(self, work_dir: Path, config: Mapping[str, object] | None = None,
                 port: int | None = None, ready_timeout: float = 30.0, entry: list[str] | None = None):
        # `entry` replaces `python -m server` (the harness self-test runs a stand-in broker).
        self.entry = list(entry) if entry else [sys.executable, "-m", "server"]
        self.work_dir = Path(work_dir)
        self.store = self.work_dir / "store"
        # the gRPC endpoint (default 8081) stays off unless a test asks for it: parallel brokers must not collide
        self.config = {"grpcListenPort": 0, **dict(config or {})}
        self.port = port or pick_port_pair()
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None
        self.ready_line: str | None = None
        self.serving_pid: int | None = None  # grpcServerStack=envoy: Envoy's pid (the launcher's child)
        self.stdout_path = self.work_dir / "broker.stdout"
        self.stderr_path = self.work_dir / "broker.stderr"

    # ---- addresses -------------------------------------------------------------------------
    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def namesrv(self) -> str:
        """The same process serves the name-server protocol on the broker port."""
        return self.addr

    @property
    def vip_addr(self) -> str:
        return f"{HOST}:{self.port - 2}"

    # ---- lifecycle -------------------------------------------------------------------------
    def argv(self) -> list[str]:
        argv = [*self.entry, "--store", str(self.store), "--port", str(self.port)]
        if self.config:
            conf = self.work_dir / "broker.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
            argv += ["--config", str(conf)]
        return argv

    def start(self) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self._ready.clear()
        self.ready_line = None
        self.serving_pid = None
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # Append across restarts so a failure report shows the whole history.
        with open(self.stderr_path, "ab") as err:
            err.write(f"---- start #{self.starts}: {' '.join(self.argv())}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(self.argv(), cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err)
        self._reader = threading.Thread(target=self._read_stdout, args=(self.proc,), daemon=True)
        self._reader.start()
        if not self._ready.wait(self.ready_timeout) or not self.ready_line:
            code = self.proc.poll()
            if code is None:
                self.kill()
            raise AssertionError(
                f"broker did not print its ready line within {self.ready_timeout}s (exit code {code})\n"
                f"stdout tail:\n{tail(self.stdout_path)}\nstderr tail:\n{tail(self.stderr_path)}")
        return self

    def lost_harness_port(self) -> bool:
        """This start ended with the broker's one-line refusal of a port the harness picked (listenPort or its
        haListenPort, P + 1), not one the test's config chose: the harness may try again on other ports."""
        if self.proc is None or self.proc.poll() is None or {"listenPort", "haListenPort"} & set(self.config):
            return False
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return False
        last = text[text.rfind(f"---- start #{self.starts}:"):]
        return '"broker.cannot_listen"' in last and any(f'"key": "{k}"' in last for k in ("listenPort", "haListenPort"))

    def _read_stdout(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with open(self.stdout_path, "ab") as out:
            for raw in proc.stdout:
                out.write(raw)
                out.flush()
                m = READY_RE.search(raw.decode("utf-8", "replace"))
                if m and not self._ready.is_set():
                    assert int(m.group(2)) == self.port, f"broker ready on {m.group(0)}, asked for {self.port}"
                    self.ready_line = m.group(0)
                    envoy = SERVING_PID_RE.search(raw.decode("utf-8", "replace"))
                    self.serving_pid = int(envoy.group(1)) if envoy else None
                    self._ready.set()
        self._ready.set()  # EOF: unblock a waiter; ready_line tells whether it was really ready

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait, and require a clean exit (code 0)."""
        assert self.proc is not None, "broker was never started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"broker ignored SIGTERM for {timeout}s\n{tail(self.stderr_path)}") from None
        self._join_reader()
        code = self.proc.returncode
        assert code == 0, f"broker exited with {code} on SIGTERM\nstderr tail:\n{tail(self.stderr_path)}"
        return code

    def kill(self) -> None:
        """SIGKILL: no flush, no shutdown hook (crash simulation). On grpcServerStack=envoy the launcher's
        death takes Envoy, the serving process (PR_SET_PDEATHSIG): waited for too, so the store is free."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        if self.serving_pid is not None:
            assert wait_pid_gone(self.serving_pid, 30), f"Envoy (pid {self.serving_pid}) outlived its launcher"
        self._join_reader()

    def restart(self, clean: bool = True) -> BrokerProcess:
        self.stop() if clean else self.kill()
        return self.start()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(10)

    # ---- set-up helpers (our own tiny wire client, not the code under test) ------------------
    def create_topic(self, name: str, queues: int = 4, perm: int = 6, order: bool = False) -> None:
        wire.create_topic(self.addr, name, queues, perm, order)

    def consumer_ids(self, group: str) -> list[str]:
        return wire.consumer_ids(self.addr, group)

    def diagnostics(self) -> str:
        return (f"broker {self.addr} (store {self.store}, starts {self.starts}, "
                f"exit {None if self.proc is None else self.proc.poll()})\n"
                f"--- stderr tail ---\n{tail(self.stderr_path)}\n--- stdout tail ---\n{tail(self.stdout_path, 2000)}")
