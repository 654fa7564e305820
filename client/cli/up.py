"""`delaymq up --brokers N --proxies M --store DIR`: a whole RocketMQ topology on one host, one process per core.

Parts, each with one job:
- `plan` (pure): the layout. A name server on `--namesrv-port`; broker i (`broker-i`, cluster DefaultCluster,
  all masters) on `--broker-port + 10*i` (it also opens that port -2, the VIP channel, and +1, HA), its own
  gRPC endpoint on `--broker-grpc-port + 10*i` (0: off), its store in DIR/broker-i; M `delaymq-proxy`
  processes sharing `--grpc-port` (SO_REUSEPORT, `--reuse-port`; the kernel spreads 5.x clients' connections
  over them; `--grpc-server-stack` envoy, the proxies' default: each proxy's gRPC port an Envoy
  process with the proxy's Python embedded, stopped and killed with it; or grpcio). Every process logs to
  DIR/logs/<name>.out (stdout) and .log (stderr).
- `check_ports`: every port of the plan is distinct and free before anything starts; a taken one stops
  `up` with one line naming the key (the broker.conf / proxy key and the flag that chose it).
- `Child`: one process, started with `sys.executable -m <module>` in its own session (so a terminal's
  Ctrl-C reaches `up` only and the stop is ordered), with PR_SET_PDEATHSIG so that even a kill -9 of `up`
  leaves no orphan; ready when its log shows its ready line.
- `Fleet`: starts the tiers in order (name server, brokers, proxies; a tier's processes in parallel), prints
  progress on stderr and the endpoints as a table on stdout, waits for SIGINT / SIGTERM (or a child that
  dies), then stops the tiers in reverse order (SIGTERM, SIGKILL after `STOP_TIMEOUT_S`) and reaps each.

Only subprocesses: the client package imports nothing of the server's (tests/test_import_direction.py)."""

from __future__ import annotations

import argparse
import ctypes
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .parse import non_negative_int, positive_int

BROKER_PORT_STEP = 10  # broker i listens on --broker-port + 10*i (and that -2, +1)
STOP_TIMEOUT_S = 30.0  # SIGTERM, then SIGKILL: a broker flushes its store on the way out
READY_TIMEOUT_S = 120.0
POLL_S = 0.05
PR_SET_PDEATHSIG = 1
SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGCHLD}


class UpError(Exception):
    """Why `up` cannot start (one line)."""


@dataclass(frozen=True, slots=True)
class Port:
    key: str  # the key that sets it, e.g. "listenPort of broker-1 (--broker-port + 10)"
    port: int
    shared: bool = False  # one port several processes of the plan share (SO_REUSEPORT): listed once


@dataclass(frozen=True, slots=True)
class ChildSpec:
    role: str  # namesrv / broker / proxy
    name: str
    module: str  # run as `python -m module`
    args: tuple[str, ...]
    ready_text: str  # the line its ready line starts with
    address: str  # remoting address ("-": none)
    grpc: str  # gRPC endpoint ("-": none)
    store: str  # store directory ("-": none)
    ports: tuple[Port, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    host: str
    tiers: tuple[tuple[ChildSpec, ...], ...]  # started in this order, stopped in reverse
    logs: Path

    @property
    def children(self) -> list[ChildSpec]:
        return [c for tier in self.tiers for c in tier]


def plan(args: argparse.Namespace) -> Plan:
    host: str = args.host
    store = Path(args.store).absolute()
    ns_addr = f"{host}:{args.namesrv_port}"
    ns = ChildSpec("namesrv", "namesrv", "server.cluster.namesrv",
                   ("--port", str(args.namesrv_port), "--host", host), "delaymq namesrv ready on", ns_addr, "-", "-",
                   (Port("listenPort of the name server (--namesrv-port)", args.namesrv_port),))
    brokers = []
    for i in range(args.brokers):
        name = f"broker-{i}"
        port = args.broker_port + BROKER_PORT_STEP * i
        grpc = args.broker_grpc_port + BROKER_PORT_STEP * i if args.broker_grpc_port else 0
        step = f" + {BROKER_PORT_STEP * i}" if i else ""
        ports = [Port(f"listenPort of {name} (--broker-port{step})", port),
                 Port(f"listenPort-2 (VIP channel) of {name} (--broker-port{step} - 2)", port - 2),
                 Port(f"haListenPort of {name} (--broker-port{step} + 1)", port + 1)]
        if grpc:
            ports.append(Port(f"grpcListenPort of {name} (--broker-grpc-port{step})", grpc))
        brokers.append(ChildSpec(
            "broker", name, "server",
            ("--store", str(store / name), "--port", str(port), "--host", host, "--broker-ip", host,
             "--set", f"namesrvAddr={ns_addr}", "--set", f"brokerName={name}",
             "--set", "brokerClusterName=DefaultCluster", "--set", f"grpcListenPort={grpc}"),
            "delaymq broker ready on", f"{host}:{port}", f"{host}:{grpc}" if grpc else "-", str(store / name),
            tuple(ports)))
    proxies = [ChildSpec("proxy", f"proxy-{j}", "server.proxy",
                         ("--namesrv", ns_addr, "--grpc-port", str(args.grpc_port), "--host", host, "--reuse-port",
                          "--grpc-server-stack", args.grpc_server_stack),
                         "delaymq proxy ready on", "-", f"{host}:{args.grpc_port}", "-",
                         (Port("grpcServerPort of the proxies (--grpc-port)", args.grpc_port, shared=True),))
               for j in range(args.proxies)]
    tiers = tuple(t for t in ((ns,), tuple(brokers), tuple(proxies)) if t)
    return Plan(host, tiers, store / "logs")


def check_ports(p: Plan) -> None:
    """Every port of the plan in range, distinct, and free now; UpError naming the key otherwise."""
    seen: dict[int, str] = {}
    ports: list[Port] = []
    for child in p.children:
        for port in child.ports:
            if port.shared and seen.get(port.port) == port.key:
                continue
            if not 0 < port.port < 65536:
                raise UpError(f"{port.key}: {port.port} is not a port")
            if port.port in seen:
                raise UpError(f"{port.key}: {port.port} is also {seen[port.port]}")
            seen[port.port] = port.key
            ports.append(port)
    for port in ports:
        family = socket.AF_INET6 if ":" in p.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT remnant is no clash
            try:
                s.bind((p.host, port.port))
            except OSError as e:
                raise UpError(f"{port.key}: cannot listen on {p.host}:{port.port}: {e.strerror or e}") from None


def _child_setup() -> None:
    """In the child between fork and exec: take SIGINT / SIGTERM again (`up` blocks them to sigwait), and
    die with `up` (SIGTERM when its parent dies, Linux)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


@dataclass
class Child:
    spec: ChildSpec
    logs: Path
    proc: subprocess.Popen[bytes] | None = None
    ready: bool = False
    started_at: float = 0.0
    _files: list[IO[bytes]] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return self.logs / f"{self.spec.name}.out"

    @property
    def err(self) -> Path:
        return self.logs / f"{self.spec.name}.log"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self) -> None:
        out, err = open(self.out, "wb"), open(self.err, "wb")
        self._files = [out, err]
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", self.spec.module, *self.spec.args],
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                                     preexec_fn=_child_setup)

    def check_ready(self) -> bool:
        if not self.ready:
            try:
                self.ready = any(ln.startswith(self.spec.ready_text)
                                 for ln in self.out.read_text(errors="replace").splitlines())
            except OSError:
                self.ready = False
        return self.ready

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def why(self) -> str:
        return _last_line(self.err) or _last_line(self.out) or "no output"

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def reap(self, timeout: float) -> int | None:
        """Wait for the exit (after `signal`); SIGKILL past `timeout`. The exit code (None: never started)."""
        if self.proc is None:
            return None
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        for f in self._files:
            f.close()
        return rc


class Fleet:
    def __init__(self, p: Plan, log: IO[str], out: IO[str]) -> None:
        self.plan = p
        self.log = log  # progress (stderr)
        self.out = out  # the table (stdout)
        self.tiers = [[Child(spec, p.logs) for spec in tier] for tier in p.tiers]

    def _say(self, text: str) -> None:
        self.log.write(f"up: {text}\n")
        self.log.flush()

    def _wait(self, timeout: float) -> int | None:
        """A pending SIGINT / SIGTERM (the signal) within `timeout`, else None; SIGCHLD just returns early."""
        info = signal.sigtimedwait(SIGNALS, timeout)
        if info is not None and info.si_signo in (signal.SIGINT, signal.SIGTERM):
            return info.si_signo
        return None

    def _start_tier(self, tier: list[Child]) -> int | None:
        """Start a tier's processes and wait until each printed its ready line. A signal meanwhile: returned.
        A process that exits first, or the time running out: UpError."""
        for c in tier:
            c.start()
            self._say(f"starting {c.spec.name} (pid {c.pid}) ...")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            for c in tier:
                if not c.ready and c.check_ready():
                    self._say(f"{c.spec.name} ready on {c.spec.address if c.spec.address != '-' else c.spec.grpc} "
                              f"({time.monotonic() - c.started_at:.1f} s)")
                rc = c.exited()
                if rc is not None:
                    raise UpError(f"{c.spec.name} exited with code {rc} while starting: {c.why()}")
            if all(c.ready for c in tier):
                return None
            if time.monotonic() > deadline:
                late = [c.spec.name for c in tier if not c.ready]
                raise UpError(f"{', '.join(late)} not ready within {READY_TIMEOUT_S:.0f} s (logs: {self.plan.logs})")
            sig = self._wait(POLL_S)
            if sig is not None:
                return sig

    def table(self) -> str:
        rows = [("ROLE", "NAME", "PID", "REMOTING (4.x)", "GRPC (5.x)", "STORE")]
        rows += [(c.spec.role, c.spec.name, str(c.pid), c.spec.address, c.spec.grpc, c.spec.store)
                 for tier in self.tiers for c in tier]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)

    def run(self) -> int:
        self.plan.logs.mkdir(parents=True, exist_ok=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        rc = 0
        try:
            for tier in self.tiers:
                sig = self._start_tier(tier)
                if sig is not None:
                    self._say(f"{signal.Signals(sig).name} while starting: stopping")
                    return self.stop()
            ns = self.plan.tiers[0][0].address
            proxies = sorted({c.grpc for c in self.plan.children if c.role == "proxy"})
            self.out.write(self.table() + "\n")
            self.out.write(f"delaymq up: ready. 4.x clients: -n {ns}"
                           + (f"; 5.x clients: endpoint {proxies[0]}" if proxies else "")
                           + f"; logs in {self.plan.logs}; Ctrl-C stops everything\n")
            self.out.flush()
            while True:
                sig = self._wait(1.0)
                if sig is not None:
                    self._say(f"{signal.Signals(sig).name}: stopping proxies, then brokers, then the name server")
                    return self.stop()
                dead = [c for tier in self.tiers for c in tier if c.exited() is not None]
                if dead:
                    for c in dead:
                        self._say(f"{c.spec.name} (pid {c.pid}) exited with code {c.exited()}: {c.why()}")
                    rc = 1
                    break
        except UpError as e:
            self._say(f"error: {e}")
            rc = 1
        except BaseException:
            self.stop()
            raise
        self.stop()
        return rc

    def stop(self) -> int:
        """Reverse tier order: SIGTERM to a tier's processes, reap each (SIGKILL past STOP_TIMEOUT_S)."""
        worst = 0
        for tier in reversed(self.tiers):
            started = [c for c in tier if c.proc is not None]
            for c in started:
                c.signal(signal.SIGTERM)
            for c in started:
                rc = c.reap(STOP_TIMEOUT_S)
                self._say(f"{c.spec.name} (pid {c.pid}) stopped, exit code {rc}")
                if rc not in (0, None, -signal.SIGTERM):
                    worst = 1
        return worst


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--brokers", type=positive_int, default=1, help="broker processes (masters broker-0 .. broker-N-1)")
    p.add_argument("--proxies", type=non_negative_int, default=1,
                   help="delaymq-proxy processes sharing --grpc-port (SO_REUSEPORT); 0: none")
    p.add_argument("--store", required=True, help="root directory: DIR/broker-i are the stores, DIR/logs the logs")
    p.add_argument("--host", default="127.0.0.1", help="listen and advertised host of every process")
    p.add_argument("--namesrv-port", type=int, default=9876, help="the name server's listenPort")
    p.add_argument("--broker-port", type=int, default=10911,
                   help=f"broker-0's listenPort; broker i: + {BROKER_PORT_STEP}*i (each also uses port-2 and port+1)")
    p.add_argument("--broker-grpc-port", type=int, default=0,
                   help=f"broker-0's own grpcListenPort, broker i: + {BROKER_PORT_STEP}*i (0: off, 5.x clients "
                        "go through the proxies)")
    p.add_argument("--grpc-port", type=int, default=8081, help="the proxies' shared gRPC port (grpcServerPort)")
    p.add_argument("--grpc-server-stack", choices=("grpcio", "envoy"), default="envoy",
                   help="the proxies' gRPC server (grpcServerStack): envoy (an Envoy process with the proxy's Python "
                        "embedded, the default) or grpcio (grpc.aio in the proxy's process)")


def run(args: argparse.Namespace, log: IO[str] | None = None, out: IO[str] | None = None) -> int:
    log = log or sys.stderr
    try:
        p = plan(args)
        check_ports(p)
    except UpError as e:
        log.write(f"delaymq up: error: {e}\n")
        return 1
    return Fleet(p, log, out or sys.stdout).run()

