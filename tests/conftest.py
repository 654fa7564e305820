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

import itertools
import shutil

import pytest

from tests.helpers.broker import BrokerProcess

TEST_COMMITLOG_SEGMENT = 32 * 1024 * 1024


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
        b = BrokerProcess(tmp_path / f"broker{next(counter)}", config=config, ready_timeout=ready_timeout)
        register_diagnostics(request, f"broker {b.addr}", b.diagnostics)
        made.append(b)
        return b.start()

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
