"""SYNC_FLUSH group commit, ASYNC_FLUSH periodic flush, and a real SIGKILL crash."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from storage.message_store import MessageStore, PutStatus
from tests.helpers.checks import present
from tests.storage.conftest import config, open_store, request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def test_group_commit_resolves_all_with_fewer_flushes(tmp_path):
    s = open_store(tmp_path, flush_disk_type="SYNC_FLUSH")
    s.start()
    results = await asyncio.gather(*(s.put_async([request(body=b"%d" % i)]) for i in range(200)))
    assert all(r[0].status is PutStatus.PUT_OK for r in results)
    assert all((f := present(r[0].flushed)).done() and f.result() is True for r in results)
    assert 1 <= s.flush_count < 200
    assert s.commitlog.flushed_offset == s.commitlog.max_offset
    await s.shutdown()


async def test_sync_put_future_resolves_after_flush(tmp_path):
    s = open_store(tmp_path, flush_disk_type="SYNC_FLUSH")
    s.start()
    r = s.put([request(), request()])
    flushed = present(r[0].flushed)
    assert r[1].flushed is flushed and not flushed.done()
    assert s.commitlog.flushed_offset < r[1].phys_offset + r[1].size
    await asyncio.wait_for(flushed, 30)
    assert s.commitlog.flushed_offset >= r[1].phys_offset + r[1].size
    await s.shutdown()


async def test_async_flush_periodic_and_checkpoint(tmp_path):
    s = open_store(tmp_path, flush_interval_ms=20, flush_consume_queue_interval_ms=20)
    s.start()
    r = s.put([request(keys="k")])[0]
    assert r.flushed is None
    end = r.phys_offset + r.size
    cp = None
    async with asyncio.timeout(30):
        while True:  # bounded wait on the real condition: the checkpoint file records the flush
            cp = s.checkpoint.read()
            if cp is not None and cp.commitlog_flushed_offset >= end and cp.index_offset >= end:
                break
            await asyncio.sleep(0.02)
    assert s.commitlog.flushed_offset >= end
    await s.shutdown()
    doc = json.loads((tmp_path / "checkpoint").read_text())
    assert doc["commitlogFlushedOffset"] == end and not (tmp_path / "abort").exists()


@pytest.mark.process
def test_sigkill_keeps_every_acknowledged_record(tmp_path):
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {ROOT!r})
        from tests.storage.conftest import open_store, request
        async def main():
            s = open_store({str(tmp_path)!r}, flush_disk_type="SYNC_FLUSH")
            s.start()
            i = 0
            while True:
                rs = await s.put_async([request(body=b"rec-%d|" % (i + j) + b"p" * 300) for j in range(3)])
                for r in rs:
                    assert r.status.name == "PUT_OK"
                    print(r.phys_offset, r.size, r.queue_offset, flush=True)
                i += 3
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    acked = []
    try:
        for line in proc.stdout:
            acked.append(tuple(int(x) for x in line.split()))
            if len(acked) >= 600:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    acked += [tuple(int(x) for x in line.split()) for line in proc.stdout.read().splitlines() if line.strip()]
    assert len(acked) >= 600
    assert (tmp_path / "abort").exists()
    s = MessageStore(config(tmp_path))
    s.load()
    from codec.record import decode_record
    for phys, size, qoff in acked:
        raw = s.read_record(phys, size)
        assert raw is not None
        rec = decode_record(raw, 0)[0]
        assert rec.body == b"rec-%d|" % qoff + b"p" * 300 and rec.queue_offset == qoff
    assert s.max_offset("T", 0) >= len(acked)
    assert len(s.commitlog.queue.files) > 1  # the run crossed segment boundaries
    s.close()


async def test_shutdown_while_periodic_flush_runs(tmp_path):
    for _ in range(5):
        s = open_store(tmp_path, flush_interval_ms=1, flush_consume_queue_interval_ms=1)
        s.start()
        for i in range(20):
            s.put([request(body=b"%d" % i, keys="k")])
            await asyncio.sleep(0)  # let the 1 ms flushers interleave with puts
        await s.shutdown()  # must not race the flusher's checkpoint write
        assert not (tmp_path / "abort").exists()
    s = open_store(tmp_path)
    assert s.max_offset("T", 0) == 100 and len(s.query_by_key("T", "k", 1000).buffers) == 100
    info = s.runtime_info()
    assert info["commitLogMaxOffset"] == str(s.commitlog.max_offset) and info["commitLogMinOffset"] == "0"
    assert all(isinstance(v, str) for v in info.values())
    s.close()
