"""Run a client agent (C++ client via ctypes, or a node script) as a subprocess speaking JSON lines.

Each stdout line is one JSON object with an "event" key. A reader thread collects them and notifies
a Condition, so tests wait on real conditions (counts, events) with bounded timeouts, never sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.helpers.broker import REPO_ROOT, tail


class AgentProcess:
    def __init__(self, name: str, argv: Sequence[str], work_dir: Path, env: dict[str, str] | None = None,
                 cond: threading.Condition | None = None):
        """`cond`: share one Condition between agents so a wait can span several of them."""
        self.name = name
        self.argv = list(argv)
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = self.work_dir / f"{name}.stderr"
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.events: list[dict[str, Any]] = []
        self.raw_lines: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._cond = cond or threading.Condition()
        self._eof = False
        self._reader: threading.Thread | None = None

    def start(self) -> AgentProcess:
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.argv, cwd=REPO_ROOT, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cond:
                self.raw_lines.append(line)
                try:
                    ev = json.loads(line)
                except ValueError:
                    ev = None
                if isinstance(ev, dict):
                    self.events.append(ev)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    # ---- queries ---------------------------------------------------------------------------
    def of(self, kind: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("event") == kind]

    def wait_for(self, pred: Callable[[AgentProcess], bool], timeout: float, what: str,
                 stop_on_exit: bool = True) -> None:
        """Wait until pred(self) holds; fail with diagnostics on timeout or if the agent exited first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self):
                left = deadline - time.monotonic()
                if self._eof and stop_on_exit:
                    break
                if left <= 0:
                    break
                self._cond.wait(left)
            if pred(self):
                return
        raise AssertionError(f"{self.name}: timed out after {timeout}s (or exited) waiting for {what}\n"
                             + self.diagnostics())

    def wait_event(self, kind: str, timeout: float) -> dict[str, Any]:
        self.wait_for(lambda a: any(e.get("event") == kind for e in a.events), timeout, f"event {kind!r}")
        return self.of(kind)[0]

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name}: still running after {timeout}s\n{self.diagnostics()}") from None
        if self._reader is not None:
            self._reader.join(10)
        return code

    # ---- control ---------------------------------------------------------------------------
    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM (agents shut their client down cleanly on it) and wait."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def diagnostics(self) -> str:
        code = None if self.proc is None else self.proc.poll()
        with self._cond:
            last = self.raw_lines[-15:]
            counts: dict[str, int] = {}
            for e in self.events:
                counts[e.get("event", "?")] = counts.get(e.get("event", "?"), 0) + 1
        logs = ""
        for p in sorted(self.work_dir.rglob("*.log*"))[-2:]:
            logs += f"\n--- {p.name} tail ---\n{tail(p, 3000)}"
        return (f"agent {self.name} exit={code} argv={' '.join(self.argv)}\nevent counts: {counts}\n"
                f"last stdout lines:\n" + "\n".join(last) + f"\n--- stderr tail ---\n{tail(self.stderr_path, 4000)}"
                + logs)


def run_agent(name: str, argv: Sequence[str], work_dir: Path, timeout: float,
              env: dict[str, str] | None = None, expect_code: int | None = 0) -> AgentProcess:
    """Run an agent to completion under a timeout; assert its exit code."""
    agent = AgentProcess(name, argv, work_dir, env).start()
    code = agent.wait_exit(timeout)
    if expect_code is not None and code != expect_code:
        raise AssertionError(f"{name} exited {code}, expected {expect_code}\n{agent.diagnostics()}")
    return agent
