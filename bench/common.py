"""Shared bench plumbing: broker launcher, /proc sampling, percentiles, result files.

The broker always runs as its own process (`python -m server`); load generators run in other
processes (see `bench.workers`). Everything binds 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
HOST = "127.0.0.1"
READY_RE = re.compile(r"delaymq broker ready on (\S+):(\d+)")
SERVING_PID_RE = re.compile(r"\(envoy pid (\d+)\)")  # grpcServerStack=envoy: the broker runs in Envoy's process
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- machine / results

def machine_info() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    try:
        import uvloop
        uv = uvloop.__version__
    except ImportError:  # pragma: no cover
        uv = None
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem_kb / 1048576, 1),
            "kernel": platform.release(), "python": sys.version.split()[0], "uvloop": uv,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "store_base": store_base(),
            "store_fs_used_ratio": round(_used_ratio(store_base()), 3),
            "loadavg_at_write": Path("/proc/loadavg").read_text().split()[:3]}


def percentiles(values, ps=(50, 90, 99, 99.9)) -> dict:
    """Nearest-rank percentiles of a list of numbers (plus min/max/mean/count)."""
    v = sorted(values)
    n = len(v)
    if not n:
        return {"count": 0}
    out = {"count": n, "min": v[0], "max": v[-1], "mean": sum(v) / n}
    for p in ps:
        k = max(0, min(n - 1, int(-(-p * n // 100)) - 1))
        out[f"p{p:g}"] = v[k]
    return {k: (round(x, 3) if isinstance(x, float) else x) for k, x in out.items()}


def write_result(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {"name": name, "machine": machine_info(), **payload}
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


# ---------------------------------------------------------------- /proc sampling

def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process in seconds (/proc/<pid>/stat fields 14 and 15)."""
    data = Path(f"/proc/{pid}/stat").read_text()
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_mem_mb(pid: int) -> dict:
    """VmRSS split into RssAnon (heap) and RssFile/RssShmem (touched pages of mmapped store files)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k = line.split(":", 1)[0]
        if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[k] = round(int(line.split()[1]) / 1024.0, 1)
    return out


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


class CpuMeter:
    """CPU seconds a process burns between start() and stop()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = self.c0 = 0.0

    def start(self) -> CpuMeter:
        self.t0, self.c0 = time.monotonic(), proc_cpu_s(self.pid)
        return self

    def stop(self) -> dict:
        wall = time.monotonic() - self.t0
        cpu = proc_cpu_s(self.pid) - self.c0
        return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "cpu_util": round(cpu / wall, 3) if wall else 0}


class CpuSampler:
    """Samples (wall ms, cpu s) of a process every `interval` s from a thread, from the moment the
    process is spawned, so CPU can be attributed to a window found afterwards (e.g. a drain)."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()

    def attach(self, pid: int) -> None:
        self.samples = []
        self._stop.clear()

        def run():
            while not self._stop.is_set():
                try:
                    self.samples.append((time.time() * 1000, proc_cpu_s(pid)))
                except (OSError, ValueError):
                    return
                self._stop.wait(self.interval)

        threading.Thread(target=run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def cpu_between(self, t0_ms: float, t1_ms: float) -> float:
        """CPU seconds between two wall-clock instants (nearest samples outside the window)."""
        before = [c for t, c in self.samples if t <= t0_ms]
        after = [c for t, c in self.samples if t >= t1_ms]
        c0 = before[-1] if before else (self.samples[0][1] if self.samples else 0.0)
        c1 = after[0] if after else (self.samples[-1][1] if self.samples else 0.0)
        return c1 - c0


# ---------------------------------------------------------------- broker process

def _used_ratio(path: str) -> float:
    st = os.statvfs(path)
    return 1.0 - st.f_bavail / st.f_blocks if st.f_blocks else 1.0


def store_base() -> str:
    """Where broker stores go: $BENCH_STORE_DIR, else the temp dir unless its filesystem is over 80 %
    used by the broker's own measure (1 - f_bavail/f_blocks; the store refuses puts above 90 %), else
    /dev/shm. The choice is recorded in every result file."""
    env = os.environ.get("BENCH_STORE_DIR")
    if env:
        return env
    tmp = tempfile.gettempdir()
    if _used_ratio(tmp) <= 0.80 or not os.path.isdir("/dev/shm"):
        return tmp
    return "/dev/shm"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def pick_port() -> int:
    """A port P with P-2 (the VIP channel) and P+1 (haListenPort) also free."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if 1026 < port < 65535 and _port_free(port) and _port_free(port - 2) and _port_free(port + 1):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")


class Broker:
    """`python -m server` on a private store; start/stop (SIGTERM, exit 0 required) keep store and port."""

    def __init__(self, config: dict | None = None, store_root: Path | None = None) -> None:
        self.work = Path(store_root or tempfile.mkdtemp(prefix="delaymq-bench-", dir=store_base()))
        self.store = self.work / "store"
        self.config = {"grpcListenPort": 0, **dict(config or {})}  # gRPC off unless a benchmark asks for it
        self.port = pick_port()
        self.proc: subprocess.Popen | None = None
        self.ready_at = 0.0
        self.started_at = 0.0
        self.sampler: CpuSampler | None = None
        self.serving_pid: int | None = None  # grpcServerStack=envoy: the Envoy child the whole broker runs in

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> Broker:
        conf = self.work / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
        argv = [sys.executable, "-m", "server", "--store", str(self.store), "--port", str(self.port),
                "--config", str(conf), "--log-level", "warning"]
        ready = threading.Event()
        err = open(self.work / "broker.stderr", "ab")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=err, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        err.close()
        if self.sampler is not None:
            self.sampler.attach(self.proc.pid)

        def reader(proc=self.proc):
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                if READY_RE.search(line):
                    envoy = SERVING_PID_RE.search(line)
                    self.serving_pid = int(envoy.group(1)) if envoy else None
                    self.ready_at = time.monotonic()
                    ready.set()
            ready.set()

        threading.Thread(target=reader, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError(f"broker did not start; stderr tail:\n{self.stderr_tail()}")
        return self

    def stop(self, timeout: float = 120.0) -> float:
        """SIGTERM and wait; returns the seconds the shutdown took."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("broker ignored SIGTERM") from None
        if rc != 0:
            raise RuntimeError(f"broker exited {rc} on SIGTERM; stderr tail:\n{self.stderr_tail()}")
        return time.monotonic() - t0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            return (self.work / "broker.stderr").read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except RuntimeError:
                self.kill()
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


def start_broker_under(wrap: list[str], py_args: list[str], work: str, port: int, conf: str,
                       ) -> subprocess.Popen[bytes]:
    """`python -m server` on `work`/store and `port` with `conf`, run under `wrap` (valgrind; may be empty)
    with `py_args` for the interpreter (`-m cProfile -o F`; may be empty), its stderr in
    `work`/broker.stderr; returns once it printed ready. Raises RuntimeError if it exits first (the
    stderr file is left for the caller to keep)."""
    argv = [*wrap, sys.executable, *py_args, "-m", "server", "--store", os.path.join(work, "store"), "--port", str(port),
            "--config", conf, "--log-level", "warning"]
    with open(os.path.join(work, "broker.stderr"), "wb") as err:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
    assert p.stdout is not None
    for line in p.stdout:
        if b"ready" in line:
            return p
    p.wait()
    raise RuntimeError(f"the broker exited before it was ready (its stderr: {work}/broker.stderr)")
