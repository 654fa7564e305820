"""Shared fixtures: a real delaymq broker subprocess (see tests/helpers/broker.py).

On a failing test every broker (and any registered agent) used by it appends its log tail to the
report, so the failure explains itself without re-running.
"""

from __future__ import annotations

import os

# The suite shares its disk with whatever else runs on the machine (benchmarks, other checkouts);
# RocketMQ's 90% "disk full" refusal would then fail unrelated tests, so it is off here (a real
# ENOSPC still fails loudly). Tests that exercise the refusal set the ratio explicitly. Broker
# subprocesses inherit this.
os.environ.setdefault("DELAYMQ_DISK_MAX_USED_RATIO", "1.0")

import asyncio
import itertools
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers.broker import BrokerProcess

# Property tests check what holds, not how fast: hypothesis's default 200 ms deadline per example and its
# too-slow health check fail them on a loaded host (a shared machine, CI beside other work) while the code
# is right. Speed is the benchmarks' business.
settings.register_profile("delaymq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("delaymq")

TEST_COMMITLOG_SEGMENT = 32 * 1024 * 1024
# a broker start that lost one of the harness-picked ports to another process is tried again on new ports
HARNESS_PORT_ATTEMPTS = 3


# Tests that start another process (a broker, a name server, a client agent, Java, Spark, the CLI) carry
# one of these markers; `make check` leaves them out. The guard below keeps the markers honest: a test
# without one that starts a process fails at once, naming the marker to add.
PROCESS_MARKERS = ("process", "java", "interop", "spark")


@pytest.fixture(autouse=True)
def _processes_only_where_marked(request, monkeypatch):
    if any(request.node.get_closest_marker(m) for m in PROCESS_MARKERS):
        return
    nodeid = request.node.nodeid

    def refuse(self, *args, **kwargs):
        raise RuntimeError(f"{nodeid} starts a process: mark it (or its module) pytest.mark.process")

    async def refuse_async(*args, **kwargs):
        refuse(None)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    # uvloop spawns through libuv, not Popen
    monkeypatch.setattr(asyncio, "create_subprocess_exec", refuse_async)
    monkeypatch.setattr(asyncio, "create_subprocess_shell", refuse_async)


def _diagnostics(item) -> list:
    return item.__dict__.setdefault("_delaymq_diagnostics", [])


def register_diagnostics(request, title: str, fn) -> None:
    """Attach `fn() -> str` to the running test; called only if the test fails."""
    _diagnostics(request.node).append((title, fn))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    item.__dict__[f"_delaymq_rep_{rep.when}"] = rep
    if rep.failed and rep.when in ("call", "setup"):
        for title, fn in _diagnostics(item):
            try:
                rep.sections.append((title, fn()))
            except Exception as exc:  # diagnostics must never mask the real failure
                rep.sections.append((title, f"<diagnostics failed: {exc!r}>"))


@pytest.fixture
def broker_factory(tmp_path, request):
    """`make(config=None, ready_timeout=30) -> BrokerProcess`, started; stopped (exit 0 asserted) at teardown.

    `config` is written as key=value lines to a broker.conf passed with --config, e.g.
    {"flushDiskType": "SYNC_FLUSH", "messageDelayLevel": "200ms 400ms 1s"}.
    """
    made: list[BrokerProcess] = []
    counter = itertools.count()

    def make(config=None, ready_timeout: float = 30.0) -> BrokerProcess:
        # The store reserves (fallocates) whole CommitLog segments; 1 GiB per test broker would fill
        # a shared disk over a full run, so tests use small segments unless they ask otherwise.
        config = {"mappedFileSizeCommitLog": TEST_COMMITLOG_SEGMENT, **(config or {})}
        for attempt in range(HARNESS_PORT_ATTEMPTS):
            b = BrokerProcess(tmp_path / f"broker{next(counter)}", config=config, ready_timeout=ready_timeout)
            register_diagnostics(request, f"broker {b.addr}", b.diagnostics)
            made.append(b)
            try:
                return b.start()
            except AssertionError:
                # the ports the harness picked were free when picked; another process (an outgoing connection's
                # ephemeral port, a parallel worker) may bind one before the broker does: new ports, not a failure
                if attempt + 1 == HARNESS_PORT_ATTEMPTS or not b.lost_harness_port():
                    raise
        raise AssertionError("unreachable")

    yield make
    errors = []
    for b in made:
        if b.running:
            try:
                b.stop()
            except AssertionError as exc:
                errors.append(str(exc))
    if errors:
        pytest.fail("broker did not stop cleanly:\n" + "\n".join(errors))
    call = request.node.__dict__.get("_delaymq_rep_call")
    if call is not None and call.passed:
        for b in made:  # a passed test's store is dead weight (segments are reserved on disk)
            shutil.rmtree(b.store, ignore_errors=True)


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    """A broker on a fresh store with default configuration."""
    return broker_factory()
