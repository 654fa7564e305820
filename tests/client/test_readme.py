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
from tests.helpers.broker import REPO_ROOT, pick_port_pair, pick_port_with_grpc
from tests.helpers.checks import present

README = REPO_ROOT / "README.md"
MARKED = {"cpp", "rmq5-python", "node", "cli", "cluster", "failover"}
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TZ": "UTC"}

pytestmark = pytest.mark.process


def readme_blocks() -> dict[str, str]:
    """NAME -> the body of the fenced block right after `<!-- readme-test: NAME -->`."""
    text = README.read_text()
    return {m.group(1): m.group(2) for m in
            re.finditer(r"<!-- readme-test: ([\w-]+) -->\n```\w*\n(.*?)^```", text, re.S | re.M)}


def substitute(block: str, replacements: dict[str, str]) -> str:
    """Each README address/port replaced by the test's, printed so the run log shows what changed."""
    for old, new in replacements.items():
        assert old in block, f"the README block no longer contains {old!r}"
        print(f"README test: {old} -> {new}")
        block = block.replace(old, new)
    return block


def run(argv: list[str], cwd: Path, timeout: float, home: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run to completion in its own session (HOME=`home`: the clients' logs); on a timeout the whole group is
    killed (what it started too)."""
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
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_readme_marks_every_example_that_must_run():
    assert set(readme_blocks()) == MARKED


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
