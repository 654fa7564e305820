"""Apache RocketMQ 5.1.3 from `../shared/rocketmq5` (see its README) as a test counterpart: the standalone
controller (`mqcontroller`), name server and broker, and the 5.x mqadmin. Without the directory or java,
tests marked `requires_rocketmq5` are skipped with a reason saying so (the suite runs with -rs). Every
process is started in its own session and stopped by its own PID only."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.helpers.java import SHARED_DIR, JavaServer, _env

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


class Rmq5Process(JavaServer):
    """`bin/<kind> -c FILE` of Apache RocketMQ 5.1.3 (controller, name server or broker): a JavaServer of that
    distribution."""

    def __init__(self, kind: str, workdir: Path, config: Mapping[str, object], port: int,
                 ready_timeout: float = 90.0) -> None:
        assert kind in KINDS
        super().__init__(kind, workdir, config, port, ready_timeout, distribution=ROCKETMQ5)


def standalone_controller(workdir: Path, **extra: object) -> tuple[Rmq5Process, str]:
    """A one-node standalone `mqcontroller` (not started yet) and the address brokers' `controllerAddr`
    names: its DLedger peer address, where it serves the controller codes. `extra`: more config keys
    (e.g. enableElectUncleanMaster)."""
    from tests.helpers.broker import pick_port_pair
    ctrl_port, peer_port = pick_port_pair(), pick_port_pair()
    ctrl = f"127.0.0.1:{peer_port}"
    conf: dict[str, object] = {
        "controllerDLegerGroup": "g1", "controllerDLegerPeers": f"n0-{ctrl}", "controllerDLegerSelfId": "n0",
        "controllerStorePath": str(workdir / "store"), "listenPort": ctrl_port, **extra}
    return Rmq5Process("mqcontroller", workdir, conf, peer_port), ctrl
