"""Issue 12 items 5 and 6 through the real broker subprocess: the store lock, configuration checked
before the store is opened, a CommitLog segment size change that keeps existing segments whole, and
flushIntervalCommitLog."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from tests.conftest import TEST_COMMITLOG_SEGMENT
from tests.helpers import wire
from tests.helpers.broker import REPO_ROOT, BrokerProcess, pick_port_pair
from tests.helpers.checks import present
from tests.server.helpers import pull_ext, send_ext
from tests.server.raw import props

pytestmark = pytest.mark.process

SEND_MESSAGE, PULL_MESSAGE, GET_BROKER_RUNTIME_INFO = 10, 11, 28
MAGIC = (0xDAA320A7, 0xAABBCCDD)


def run_broker(args: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run `python -m server ARGS` to completion (a start that must fail)."""
    return subprocess.run([sys.executable, "-m", "server", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if '"level": "error"' in ln or '"level":"error"' in ln
            or "[error" in ln]


def send(addr: str, topic: str, body: bytes, qid: int = 0) -> wire.Reply:
    return wire.invoke(addr, SEND_MESSAGE, send_ext(topic, props(WAIT="true"), qid, v2=False), body)


def pull_bodies(addr: str, topic: str, qid: int, count: int) -> list[bytes]:
    """Every stored body of the queue from offset 0 (records parsed by the spec's layout)."""
    out: list[bytes] = []
    offset = 0
    while len(out) < count:
        r = wire.invoke(addr, PULL_MESSAGE, pull_ext("G", topic, qid, offset))
        assert r.code == 0, (r.code, r.remark, offset, len(out))
        buf, pos = r.body, 0
        while pos < len(buf):
            total, magic = struct.unpack_from(">iI", buf, pos)
            assert magic in MAGIC
            sys_flag = struct.unpack_from(">i", buf, pos + 36)[0]
            host_len = 20 if sys_flag & 0x10 else 8  # born host then store host (IPv6 flags)
            store_host_len = 20 if sys_flag & 0x20 else 8
            p = pos + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + host_len + 8 + store_host_len + 4 + 8
            (blen,) = struct.unpack_from(">i", buf, p)
            out.append(bytes(buf[p + 4:p + 4 + blen]))
            pos += total
        offset = int(r.ext["nextBeginOffset"])
    return out


# ---- item 5: the store lock -------------------------------------------------------------------
def test_second_broker_on_the_same_store_exits_at_once_naming_the_holder(broker):
    abort = broker.store / "abort"
    assert abort.exists()
    before = abort.stat()
    lock_text = (broker.store / "lock").read_text()
    assert f"pid={broker.proc.pid}" in lock_text
    # exits by itself: run_broker's timeout (a hang guard) fails the test if it waits for the lock
    res = run_broker(["--store", str(broker.store), "--port", str(pick_port_pair())], timeout=60)
    assert res.returncode != 0
    errors = error_lines(res.stderr)
    assert len(errors) == 1, res.stderr
    assert f"pid={broker.proc.pid}" in errors[0] and "locked" in errors[0]
    assert "recovery" not in res.stderr  # it never opened the store
    after = abort.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # the first broker still serves, and stops cleanly (fixture) with its abort file intact until then
    wire.create_topic(broker.addr, "LockT", 1)
    assert send(broker.addr, "LockT", b"x").code == 0


def test_lock_is_released_by_a_kill(tmp_path):
    b = BrokerProcess(tmp_path / "b", config={"mappedFileSizeCommitLog": TEST_COMMITLOG_SEGMENT})
    b.start()
    b.kill()
    b.start()  # the kernel dropped the dead process's lock: no stale-lock cleanup needed
    b.stop()


# ---- item 6: configuration ----------------------------------------------------------------------
BAD_VALUES = [
    ({"flushDiskType": "FAST"}, "flushDiskType"),
    ({"messageDelayLevel": "1s 5x"}, "messageDelayLevel"),
    ({"messageDelayLevel": "1s 0s"}, "messageDelayLevel"),
    ({"autoCreateTopicEnable": "yes"}, "autoCreateTopicEnable"),
    ({"diskMaxUsedSpaceRatio": "101"}, "diskMaxUsedSpaceRatio"),
    ({"flushIntervalCommitLog": "0"}, "flushIntervalCommitLog"),
    ({"mappedFileSizeCommitLog": "-1"}, "mappedFileSizeCommitLog"),
    ({"tls.server.need.client.auth": "maybe"}, "tlsServerNeedClientAuth"),
]


def assert_refused(res: subprocess.CompletedProcess, key: str, store) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    errors = error_lines(res.stderr)
    assert len(errors) == 1 and key in errors[0], res.stderr
    assert "Traceback" not in res.stderr
    assert not (store / "abort").exists() and not (store / "commitlog").exists()


@pytest.mark.parametrize(("values", "key"), BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_invalid_value_stops_the_start_naming_the_key(tmp_path, values, key):
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    store = tmp_path / "store"
    res = run_broker(["--store", str(store), "--port", str(pick_port_pair()), "--config", str(conf)])
    assert_refused(res, key, store)


def test_missing_config_file(tmp_path):
    store = tmp_path / "store"
    res = run_broker(["--store", str(store), "--port", str(pick_port_pair()),
                      "--config", str(tmp_path / "nope.conf")])
    assert_refused(res, "nope.conf", store)


def test_bad_acl_and_tls_files(tmp_path):
    bad_acl = tmp_path / "acl.yml"
    bad_acl.write_text("accounts:\n  - accessKey: short\n")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        ({"aclEnable": "true", "aclFile": str(bad_acl)}, "aclFile"),
        ({"aclEnable": "true", "aclFile": str(tmp_path / "missing.yml")}, "aclFile"),
        ({"tls.server.mode": "enforcing", "tls.server.certPath": str(tmp_path / "missing.pem"),
          "tls.server.keyPath": str(garbage)}, "tls.server.certPath"),
        ({"tls.server.mode": "enforcing", "tls.server.certPath": str(garbage),
          "tls.server.keyPath": str(garbage)}, "tls.server.certPath"),
    ]
    for i, (values, key) in enumerate(cases):
        conf = tmp_path / f"broker{i}.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        store = tmp_path / f"store{i}"
        res = run_broker(["--store", str(store), "--port", str(pick_port_pair()), "--config", str(conf)])
        assert_refused(res, key, store)


def test_commitlog_segment_size_change_keeps_existing_segments(tmp_path):
    """Segments written at 1 MiB stay 1 MiB (every acked message readable) when the setting drops to
    256 KiB; segments created afterwards use 256 KiB."""
    big, small = 1 << 20, 256 << 10
    b = BrokerProcess(tmp_path / "b", config={"mappedFileSizeCommitLog": big})
    b.start()
    wire.create_topic(b.addr, "SizeT", 1)
    bodies = [(b"%05d" % i) * 600 for i in range(900)]  # ~3 KiB records: 600 fill 1.8 of two 1 MiB segments
    try:
        for body in bodies[:600]:
            r = send(b.addr, "SizeT", body)
            assert r.code == 0, r.remark
        b.stop()
        cl = b.store / "commitlog"
        first = {p.name: p.stat().st_size for p in cl.iterdir()}
        assert len(first) == 2 and set(first.values()) == {big}
        b.config["mappedFileSizeCommitLog"] = small
        b.start()
        for body in bodies[600:]:
            r = send(b.addr, "SizeT", body)
            assert r.code == 0, r.remark
        assert pull_bodies(b.addr, "SizeT", 0, len(bodies)) == bodies
        b.stop()
        after = {p.name: p.stat().st_size for p in cl.iterdir()}
        assert {n: after[n] for n in first} == first
        new = sorted(set(after) - set(first))
        assert new and all(after[n] == small for n in new)
        b.start()  # and a third start over mixed sizes reads everything too
        assert pull_bodies(b.addr, "SizeT", 0, len(bodies)) == bodies
    finally:
        if b.running:
            b.stop()


def test_flush_interval_commitlog_is_honoured(tmp_path):
    """With ASYNC_FLUSH the CommitLog is flushed every flushIntervalCommitLog ms: at 10 minutes, two
    checkpoint writes (the logics flush, every flushIntervalConsumeQueue = 100 ms) after a send still
    record the flushed CommitLog offset below the end; at 50 ms it reaches the end."""
    def flushed_after_send(interval_ms: int) -> tuple[int, int]:
        b = BrokerProcess(tmp_path / f"f{interval_ms}", config={
            "mappedFileSizeCommitLog": TEST_COMMITLOG_SEGMENT, "flushIntervalCommitLog": interval_ms,
            "flushIntervalConsumeQueue": 100})
        b.start()
        try:
            wire.create_topic(b.addr, "FlushT", 1)
            assert send(b.addr, "FlushT", b"y" * 100).code == 0
            info = wire.invoke(b.addr, GET_BROKER_RUNTIME_INFO)
            end = int(json.loads(info.body)["table"]["commitLogMaxOffset"])
            assert end > 0
            cp = b.store / "checkpoint"
            seen: list[int] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                doc = json.loads(cp.read_text()) if cp.exists() else {}
                ts = doc.get("timestamp", 0)
                if not seen or ts != seen[-1]:
                    seen.append(ts)
                    if doc.get("commitlogFlushedOffset", 0) >= end or len(seen) >= 4:
                        return doc.get("commitlogFlushedOffset", 0), end
                time.sleep(0.02)  # polling the file for a new checkpoint write
            raise AssertionError(f"checkpoint written {len(seen)} times in 20 s")
        finally:
            b.kill()

    flushed, end = flushed_after_send(600_000)
    assert flushed < end
    flushed, end = flushed_after_send(50)
    assert flushed >= end


def test_lock_file_holder_line_format(tmp_path):
    """The lock file names the holder as pid and host."""
    b = BrokerProcess(tmp_path / "h", config={"mappedFileSizeCommitLog": TEST_COMMITLOG_SEGMENT})
    b.start()
    try:
        text = (b.store / "lock").read_text().strip()
        assert text == f"pid={present(b.proc).pid} host={socket.gethostname()}"
    finally:
        b.stop()
