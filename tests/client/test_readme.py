"""README.md's examples run as written (issue 29 item 1): every code block marked `<!-- readme-test: NAME -->`
is taken from README.md itself and executed against brokers this test starts, and what it prints is checked.

The README writes its examples for `make run`'s ports (9876, 8081) and, in the cluster recipe, 9876 / 10911 /
10921. A test cannot count on those being free on a shared host, so it **substitutes** free ports for them,
visibly: `substitute` prints every replacement, and nothing else in a block is changed. The programs run with
PYTHONPATH at this checkout, so `.venv/bin/...` runs this tree's code (the shared .venv's editable install may
point at another checkout).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.grpc.conftest import RMQ5_PYTHON, grpc_broker
from tests.helpers.broker import REPO_ROOT, pick_broker_run, pick_port_pair, pick_port_with_grpc
from tests.helpers.checks import present
from tests.helpers.java import ROCKETMQ_JAVA, mqadmin, requires_java
from tests.helpers.rocketmq5 import ROCKETMQ5, requires_rocketmq5

README = REPO_ROOT / "README.md"
MARKED = {"cpp", "rmq5-python", "node", "cli", "cluster", "failover", "export-config", "mqadmin", "analytics", "controller", "up"}
# Fence languages that are commands or programs: each such block is marked (run below) or has a reason here.
RUNNABLE_LANGUAGES = {"sh", "bash", "shell", "console", "python", "py", "js", "javascript", "ts", "typescript"}
SUITE = "a command of this test suite itself: running the suite inside the suite would only recurse"
NOT_RUN = {  # the first line of an unmarked runnable block -> why this test does not execute it, on purpose
    "make run     # creates .venv, installs, starts the broker in the foreground with the store in ./store":
        "`make run` installs into the shared .venv (setup) and serves fixed ports in the foreground (the same "
        "broker command runs here on free ports through every other block); its `make test` line is " + SUITE,
    'P=".venv/bin/python -m pytest -q -p no:cacheprovider"': SUITE,
    "$P tests/server/test_quarantine.py tests/server/test_scheduled_counts.py tests/storage/test_supervisor.py": SUITE,
    "make test                                                                        # the whole suite": SUITE,
}
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TZ": "UTC"}

pytestmark = pytest.mark.process


def readme_blocks() -> dict[str, str]:
    """NAME -> the body of the fenced block right after `<!-- readme-test: NAME -->`."""
    text = README.read_text()
    return {m.group(1): m.group(2) for m in
            re.finditer(r"<!-- readme-test: ([\w-]+) -->\n```\w*\n(.*?)^```", text, re.S | re.M)}


def fenced_blocks() -> list[tuple[str, str, str]]:
    """Every fenced block of README.md as (marker name or "", fence language, body)."""
    text = README.read_text()
    return [(m.group(1) or "", m.group(2), m.group(3)) for m in
            re.finditer(r"(?:<!-- readme-test: ([\w-]+) -->\n)?^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def substitute(block: str, replacements: dict[str, str]) -> str:
    """Each README address/port replaced by the test's in one pass (a new port never gets replaced again),
    printed so the run log shows what changed."""
    for old, new in replacements.items():
        assert old in block, f"the README block no longer contains {old!r}"
        print(f"README test: {old} -> {new}")
    pattern = re.compile("|".join(re.escape(old) for old in sorted(replacements, key=len, reverse=True)))
    return pattern.sub(lambda m: replacements[m.group(0)], block)


def run(argv: list[str], cwd: Path, timeout: float, home: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run to completion in its own session (HOME=`home`: the clients' logs); on a timeout, and after it ends,
    whatever is left of its process group (what it started in the background too) is killed."""
    with subprocess.Popen(argv, cwd=cwd, env={**ENV, "HOME": str(home)}, text=True, start_new_session=True,
                          stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"{argv[0]} timed out after {timeout}s\nstdout:\n{out[-3000:]}\n"
                                 f"stderr:\n{err[-3000:]}") from None
        finally:
            try:  # what a block started in the background and left running when it failed: its session only
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_readme_marks_every_example_that_must_run():
    assert set(readme_blocks()) == MARKED
    unexplained, reasons_used = [], set()
    for name, language, body in fenced_blocks():
        if name or language not in RUNNABLE_LANGUAGES:
            continue
        first = body.splitlines()[0] if body else ""
        if first in NOT_RUN:
            reasons_used.add(first)
        else:
            unexplained.append(first)
    assert not unexplained, ("README blocks neither marked `<!-- readme-test: NAME -->` (and run here) nor "
                             f"given a reason in NOT_RUN: {unexplained}")
    assert reasons_used == set(NOT_RUN), f"NOT_RUN entries for blocks no longer in README.md: {set(NOT_RUN) - reasons_used}"


def test_export_config_example(broker, tmp_path):
    """Run while the broker runs (as the README says it may be), on the broker's store: the default
    directory and an OUT_DIR both get RocketMQ's four JSON files, the topic the test created included."""
    r = run([sys.executable, "-m", "client.cli", "topic", "create", "-n", broker.namesrv, "-t", "ExportedT"],
            REPO_ROOT, 60, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    block = substitute(readme_blocks()["export-config"], {"./store": str(broker.store)})
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    r = run(["bash", "-e", "-c", block], tmp_path, 120, tmp_path)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    files = {"topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json"}
    for where, shown in ((broker.store / "config", str(broker.store / "config")), (tmp_path / "json", "./json")):
        assert {f"{shown}/{f}" for f in files} <= set(r.stdout.split()), r.stdout  # each prints what it wrote
        assert files <= {f.name for f in where.iterdir()}, where
        assert "ExportedT" in (where / "topics.json").read_text()


def test_cpp_example(broker, tmp_path):
    block = substitute(readme_blocks()["cpp"], {"127.0.0.1:9876": broker.namesrv})
    r = run([sys.executable, "-"], tmp_path, 120, tmp_path, stdin=block)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SendStatus.OK" in r.stdout or "SEND_OK" in r.stdout, r.stdout
    # on_message printed the delivered message (10 s later: delay level 3) within the consumer's 15 s
    assert re.search(r"^\S+ b?'?close'? b'close unpaid order 42'$", r.stdout, re.M), r.stdout


def test_rocketmq5_python_example(broker_factory, tmp_path):
    if not RMQ5_PYTHON.exists():
        pytest.fail(".venv-rmq5 is missing: run `make setup` (it installs rocketmq-python-client 5.1.2 there)")
    b = grpc_broker(broker_factory)
    block = substitute(readme_blocks()["rmq5-python"], {"127.0.0.1:8081": b.grpc_addr})
    r = run([str(RMQ5_PYTHON), "-"], tmp_path, 120, tmp_path, stdin=block)
    assert r.returncode == 0, r.stderr[-3000:]
    sent = present(re.search(r"^sent (\S+)$", r.stdout, re.M), f"the 'sent' line in {r.stdout!r}").group(1)
    # the scheduled message, received once due, on its first delivery attempt
    assert f"received {sent} 1 b'close unpaid order 42'" in r.stdout.splitlines(), r.stdout


def test_node_example(broker_factory, tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("`node` is not on PATH (the README's Node example needs Node.js >= 16.19)")
    b = grpc_broker(broker_factory)
    block = substitute(readme_blocks()["node"], {"127.0.0.1:8081": b.grpc_addr})
    demo = REPO_ROOT / f".readme-test-{os.getpid()}-{tmp_path.name}.js"  # in the checkout, as the README says
    demo.write_text(block)
    try:
        r = run([node, str(demo)], REPO_ROOT, 120, tmp_path)
    finally:
        demo.unlink()
    assert r.returncode == 0, r.stderr[-3000:]
    m = present(re.search(r"^sent (\S+) recalled (\S+)$", r.stdout, re.M), f"the 'sent' line in {r.stdout!r}")
    kept, recalled = m.group(1), m.group(2)
    assert recalled != kept  # recallMessage answered (a refused recall throws: exit 1)
    received = re.findall(r"^received (\S+) (.*)$", r.stdout, re.M)
    assert received == [(kept, "order 42")], r.stdout


def test_cli_examples(broker, tmp_path):
    block = readme_blocks()["cli"]
    delaymq = Path(sys.executable).with_name("delaymq")
    script = substitute(block, {"export NAMESRV_ADDR=127.0.0.1:9876": f"export NAMESRV_ADDR={broker.namesrv}",
                                "D=.venv/bin/delaymq": f"D={delaymq}"})
    lines = [ln for ln in script.splitlines() if ln.strip()]
    # each line echoed before it runs: a failure names its line
    traced = "\n".join(f"echo '>>> {i}' >&2\n{ln}" for i, ln in enumerate(lines))
    r = run(["bash", "-e", "-o", "pipefail", "-c", traced], REPO_ROOT, 240, tmp_path)
    failed = re.findall(r">>> (\d+)", r.stderr)
    where = lines[int(failed[-1])] if failed else "?"
    assert r.returncode == 0, f"README line failed: {where}\n{r.stderr[-3000:]}"
    assert r.stdout.count('"topic": "Orders"') >= 100  # the consume line printed its 100 messages
    assert "cancelled: timer message" in r.stdout
    assert "#Lateness p99 (ms)" in r.stdout  # the scheduled levels / timers tables


@requires_java
@pytest.mark.java
def test_mqadmin_example(broker, tmp_path):
    """Apache's mqadmin 4.9.7 (skipped, saying so, without ../shared/rocketmq-java or java): clusterList shows
    the broker, updateBrokerConfig changes fileReservedTime in the running broker (read back with
    getBrokerConfig)."""
    block = substitute(readme_blocks()["mqadmin"], {"../shared/rocketmq-java": str(ROCKETMQ_JAVA),
                                                    "127.0.0.1:9876": broker.addr})
    r = run(["bash", "-e", "-o", "pipefail", "-c", block], tmp_path, 180, tmp_path)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert broker.addr in r.stdout, r.stdout  # clusterList's broker row
    assert "update broker config success" in r.stdout, r.stdout
    conf = mqadmin("getBrokerConfig", "-n", broker.namesrv, "-b", broker.addr)
    assert re.search(r"^fileReservedTime\s*=\s*48\s*$", conf.stdout, re.M), conf.stdout + conf.stderr


@pytest.mark.skipif(shutil.which("java") is None, reason="no `java` on PATH: Spark (the analytics report) needs Java 17")
@pytest.mark.spark
def test_analytics_report_example(broker_factory, tmp_path):
    """A broker's exports (delay-level messages delivered and consumed, then a clean stop that flushes them),
    reported by Spark in local mode from `store/export`: the page and its tables are written."""
    b = broker_factory({"messageDelayLevel": "200ms 400ms", "metricsExportIntervalMs": 200})
    cli = [sys.executable, "-m", "client.cli"]
    r = run([*cli, "produce", "-n", b.namesrv, "-t", "Orders", "--count", "20", "--delay-level", "2"],
            REPO_ROOT, 60, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run([*cli, "consume", "-n", b.namesrv, "-g", "analysts", "-t", "Orders", "--from-where", "first",
             "--max", "20", "--idle-timeout", "30"], REPO_ROOT, 60, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert b.stop() == 0  # flushes the exports
    block = readme_blocks()["analytics"]
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    (tmp_path / "store").symlink_to(b.store)  # the README's store/export: the broker's
    r = run(["bash", "-e", "-c", block], tmp_path, 300, tmp_path)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    html = (tmp_path / "report" / "report.html").read_text()
    assert "L2 · 400ms" in html and "data:image/png;base64," in html  # the level's delivered messages, charted
    assert any((tmp_path / "report" / "tables").iterdir())


def test_cluster_recipe(tmp_path):
    """A name server and two brokers, each given only its --port: both start (distinct derived gRPC, HA and
    VIP ports), register, share the topic; `kill %1 %2 %3` stops all three with exit 0 (the test adds
    `wait` after the block so it ends when they have)."""
    ns, a, b = pick_port_pair(), pick_port_with_grpc(), pick_port_with_grpc()
    block = substitute(readme_blocks()["cluster"], {"9876": str(ns), "10911": str(a), "10921": str(b)})
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")  # the recipe's B=.venv/bin, from a fresh directory
    r = run(["bash", "-e", "-c", block + "\nwait\n"], tmp_path, 180, tmp_path)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    status = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("broker-")]
    assert {row[0] for row in status} == {"broker-a", "broker-b"}, r.stdout  # the topic's queues on both
    assert sum(int(row[3]) for row in status) == 100, r.stdout  # max offsets: every message stored once
    for name, port in (("broker-a", a), ("broker-b", b)):
        out = (tmp_path / f"{name}.out").read_text()
        assert f"delaymq broker ready on 127.0.0.1:{port}" in out


def test_up_recipe(tmp_path):
    """`delaymq up --brokers 2 --proxies 2`: the table names every process, the topic's 100 messages are
    spread over both brokers, and `kill -INT %1` stops everything with exit 0 (the test adds `wait`, so
    it ends when `up` has reaped every child); each PID the table printed is gone."""
    ns, base, grpc = pick_port_pair(), pick_broker_run(2), pick_port_pair()
    block = substitute(readme_blocks()["up"], {"9876": str(ns), "10911": str(base), "8081": str(grpc)})
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    r = run(["bash", "-e", "-c", block + "\nwait\n"], tmp_path, 240, tmp_path)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    rows = [ln.split() for ln in r.stdout.splitlines() if re.match(r"(namesrv|broker|proxy) ", ln)]
    assert [row[1] for row in rows] == ["namesrv", "broker-0", "broker-1", "proxy-0", "proxy-1"], r.stdout
    status = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("broker-")]
    assert {row[0] for row in status} == {"broker-0", "broker-1"}, r.stdout
    assert sum(int(row[3]) for row in status) == 100, r.stdout
    assert r.stderr.count(" stopped, exit code 0") == 5, r.stderr
    for pid in (int(row[2]) for row in rows):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_failover_walk_through(tmp_path):
    """The master/slave walk-through: a SYNC_MASTER acks 1,000 delay-level-3 sends (a new topic, auto-created
    by them), is killed with -9 within the slave's 10 s topic-sync interval, the slave is promoted, and a
    consumer through the name server gets all 1,000 from it (the slave learned the topic from the replicated
    records; without that the consumer got code 17 and the block hung); the old master rejoins as a slave.
    Each `until` has the run's 240 s bound, the consumer its --idle-timeout; `kill %1 %3 %4` stops what is
    left (the test adds `wait`)."""
    ns, m, s = pick_port_pair(), pick_port_with_grpc(), pick_port_with_grpc()
    block = substitute(readme_blocks()["failover"], {"9876": str(ns), "10911": str(m), "10921": str(s)})
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    r = run(["bash", "-e", "-c", block + "\nwait\n"], tmp_path, 240, tmp_path)
    logs = "".join(f"\n--- {n}:\n" + (tmp_path / n).read_text()[-2000:]
                   for n in ("m.log", "s.log", "m2.log") if (tmp_path / n).exists())
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}{logs}"
    out = r.stdout.split()
    assert out[0] == "1000", r.stdout  # produce: 1000 SEND_OK (each on the slave too)
    assert f"promoted 127.0.0.1:{s}: brokerRole=ASYNC_MASTER brokerId=0" in r.stdout, r.stdout
    assert "1000" in out[1:], r.stdout  # consume: every acknowledged message, from the promoted slave
    assert out[-1] == "ha.rejoin", r.stdout


@requires_rocketmq5
@pytest.mark.java
@pytest.mark.timeout(480)
def test_controller_mode_recipe(tmp_path):
    """Apache 5.1.3's controller (skipped, saying so, without ../shared/rocketmq5 or java), a name server and
    two brokers of one group: the first is master (controller id 1), the second its slave (id 2); both reach
    the SyncStateSet; kill -9 of the master makes the slave brokerId 0 at the name server; the old master,
    restarted, rejoins the set; electMaster hands the group back to id 1. Each `until` is bounded by the
    run's 400 s; tests/cluster/test_controller_mode.py checks the same steps message by message."""
    ns, ctrl, peer = pick_port_pair(), pick_port_pair(), pick_port_pair()
    a, b = pick_port_with_grpc(), pick_port_with_grpc()
    block = substitute(readme_blocks()["controller"], {
        "../shared/rocketmq5": str(ROCKETMQ5), "9876": str(ns), "9877": str(ctrl), "9878": str(peer),
        "10911": str(a), "10921": str(b)})
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    r = run(["bash", "-e", "-o", "pipefail", "-c", block + "\nwait\n"], tmp_path, 400, tmp_path)
    logs = "".join(f"\n--- {n}:\n" + (tmp_path / n).read_text()[-2000:]
                   for n in ("ctrl.out", "c1.log", "c2.log", "c1b.log") if (tmp_path / n).exists())
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}{logs}"
    assert (tmp_path / "c1" / "brokerIdentity").read_text() == "DefaultCluster#broker-a#1"
    assert (tmp_path / "c2" / "brokerIdentity").read_text() == "DefaultCluster#broker-a#2"
    assert re.search(r"^#SyncStateSetNums\t2$", r.stdout, re.M), r.stdout  # getSyncStateSet: both in sync
    assert re.search(rf"^#MasterAddr\t127.0.0.1:{a}$", r.stdout, re.M), r.stdout
    assert re.search(rf"^#BrokerMasterAddr\t127.0.0.1:{a}$", r.stdout, re.M), r.stdout  # electMaster: back to id 1
