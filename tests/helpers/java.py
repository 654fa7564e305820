"""The stock Apache RocketMQ 4.9.7 jars in `../shared/rocketmq-java` as test counterparts.

`shared/` sits beside the repository (CI clones next to it); `DELAYMQ_SHARED` overrides the place. Without
it every test marked `requires_java` is skipped with a reason that says so (visible in the summary: the
suite runs with `-rs`). Nothing here decides a skip from what a broker does: only the jars' absence.

- `mqadmin(*args, timeout)`: run one mqadmin command, `CompletedProcess` with text output.
- `JavaServer`: an Apache NameServer (`mqnamesrv`) or broker (`mqbroker`) subprocess with its own
  `RMQ_USER_HOME` and conf file; ready when its port accepts; stopped by its own PID only.
- `compile_java(src, out_dir)` / `java_command(main_class, classes_dir, *args)`: small Java programs
  against the stock client jars (`DefaultMQProducer`, `DefaultMQPushConsumer`, ...).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DIR = Path(os.environ.get("DELAYMQ_SHARED") or REPO_ROOT.parent / "shared")
ROCKETMQ_JAVA = SHARED_DIR / "rocketmq-java"
HOST = "127.0.0.1"


def java_available() -> bool:
    return (ROCKETMQ_JAVA / "bin" / "mqadmin").is_file() and shutil.which("java") is not None


requires_java = pytest.mark.skipif(
    not java_available(),
    reason=f"no Apache RocketMQ 4.9.7 jars at {ROCKETMQ_JAVA} (../shared absent) or no java on PATH",
)


def _env(user_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["RMQ_USER_HOME"] = str(user_home)
    env.setdefault("RMQ_HEAP", "-Xms128m -Xmx384m")
    return env


def mqadmin(*args: str, timeout: float = 60.0, user_home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `mqadmin ARGS`; stdout and stderr are both captured as text (mqadmin prints errors to stdout)."""
    home = user_home or Path(tempfile.mkdtemp(prefix="mqadmin-home-"))
    try:
        return subprocess.run(
            [str(ROCKETMQ_JAVA / "bin" / "mqadmin"), *args],
            env=_env(home), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
            cwd=home,  # commands that write files (consumerStatus) write them here, never in the repository
        )
    finally:
        if user_home is None:
            shutil.rmtree(home, ignore_errors=True)


def wait_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float, log: Path | None = None) -> None:
    """Return once HOST:port accepts a connection; fail at once if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"java process exited with {proc.returncode} before port {port} opened: "
                               f"{log.read_text(errors='replace')[-4000:] if log else ''}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)  # polling a port that is not there yet: there is no event to wait on
    raise TimeoutError(f"port {port} did not open within {timeout}s")


class JavaServer:
    """`bin/<kind> -c FILE` of an Apache distribution (4.9.7's by default: `mqnamesrv` or `mqbroker`) with a
    conf file written from `config`; ready once `port` accepts connections; a context manager."""

    def __init__(self, kind: str, workdir: Path, config: Mapping[str, object], port: int,
                 ready_timeout: float = 90.0, distribution: Path = ROCKETMQ_JAVA) -> None:
        assert (distribution / "bin" / kind).name == kind
        self.distribution = distribution
        self.kind, self.workdir, self.port, self.ready_timeout = kind, Path(workdir), port, ready_timeout
        self.config = dict(config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.workdir / f"{kind}.out"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    # an mqnamesrv stands where a NamesrvProcess does: `cluster_broker` and the agents read `.addr` / `.namesrv`
    namesrv = addr

    def start(self) -> JavaServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / f"{self.kind}.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(self.distribution / "bin" / self.kind), "-c", str(conf)], env=_env(home),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
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

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def __enter__(self) -> JavaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def classpath() -> str:
    return os.pathsep.join(str(p) for p in sorted((ROCKETMQ_JAVA / "lib").glob("*.jar")))


def compile_java(sources: list[Path], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "-cp", classpath(), "-d", str(out_dir), *map(str, sources)],
                   check=True, capture_output=True, text=True, timeout=180)
    return out_dir


AGENT_SOURCE = REPO_ROOT / "tests" / "java" / "agent" / "JavaAgent.java"


def java_agent_classes() -> Path:
    """JavaAgent.java compiled against the stock client jars, once per source version (kept in the temp dir)."""
    digest = hashlib.sha256(AGENT_SOURCE.read_bytes()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"delaymq-java-agent-{digest}"
    done = out / ".compiled"
    if done.exists():
        return out
    staging = Path(tempfile.mkdtemp(prefix="delaymq-java-agent-"))
    compile_java([AGENT_SOURCE], staging)
    (staging / ".compiled").touch()
    try:
        staging.rename(out)  # atomic: a parallel run either wins or finds the finished directory
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def java_command(main_class: str, classes_dir: Path, *args: str) -> list[str]:
    """argv for a compiled test program on the stock client's classpath (Java 17 opens included)."""
    opens = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
             "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.util=ALL-UNNAMED"]
    return ["java", "-Xmx256m", *opens, "-cp", f"{classes_dir}{os.pathsep}{classpath()}", main_class, *args]
