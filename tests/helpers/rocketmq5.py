"""Apache RocketMQ 5.1.3 from `../shared/rocketmq5` (see its README) as a test counterpart: the standalone
controller (`mqcontroller`), name server and broker, and the 5.x mqadmin. Without the directory or java,
tests marked `requires_rocketmq5` are skipped with a reason saying so (the suite runs with -rs). Every
process is started in its own session and stopped by its own PID only."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.helpers.java import SHARED_DIR, _env, wait_port

ROCKETMQ5 = SHARED_DIR / "rocketmq5"
KINDS = ("mqcontroller", "mqnamesrv", "mqbroker")


def rocketmq5_available() -> bool:
    return (ROCKETMQ5 / "bin" / "mqcontroller").is_file() and shutil.which("java") is not None


requires_rocketmq5 = pytest.mark.skipif(
    not rocketmq5_available(), reason=f"no Apache RocketMQ 5.1.3 at {ROCKETMQ5} (../shared absent) or no java on PATH")


def mqadmin5(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run the 5.x `mqadmin ARGS` (stdout and stderr captured as text)."""
    home = Path(tempfile.mkdtemp(prefix="mqadmin5-home-"))
    try:
        return subprocess.run([str(ROCKETMQ5 / "bin" / "mqadmin"), *args], env=_env(home), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, cwd=home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


class Rmq5Process:
    """`bin/<kind> -c FILE` with a conf written from `config`; ready once `port` accepts connections."""

    def __init__(self, kind: str, workdir: Path, config: Mapping[str, object], port: int,
                 ready_timeout: float = 90.0) -> None:
        assert kind in KINDS
        self.kind, self.workdir, self.port, self.ready_timeout = kind, Path(workdir), port, ready_timeout
        self.config = dict(config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.workdir / f"{kind}.out"

    def start(self) -> Rmq5Process:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / f"{self.kind}.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([str(ROCKETMQ5 / "bin" / self.kind), "-c", str(conf)], env=_env(home),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            wait_port(self.port, self.proc, self.ready_timeout, self.log)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
