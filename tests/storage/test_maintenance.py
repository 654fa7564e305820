"""Retention, disk-full refusal, the fault seam and atomic JSON files (the config tables: test_meta_store)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from structlog.testing import capture_logs

from storage.config_store import atomic_write_json, read_json
from storage.message_store import GetStatus, PutStatus
from tests.storage.conftest import open_store, request


def test_retention_deletes_expired_segments_and_advances_cq_min(tmp_path):
    s = open_store(tmp_path, mapped_file_size_consume_queue=20 * 10, file_reserved_time_hours=1)
    res = s.put([request(body=b"r" * 3000, keys="k") for _ in range(70)])
    files = list(s.commitlog.queue.files)
    assert len(files) >= 4
    old = time.time() - 2 * 3600
    for mf in files[:2]:
        os.utime(mf.path, (old, old))
    deleted = s.clean_expired()
    assert deleted == [files[0].path, files[1].path]
    assert not os.path.exists(files[0].path) and s.commitlog.min_offset == files[2].file_from_offset
    first_kept = next(i for i, r in enumerate(res) if r.phys_offset >= files[2].file_from_offset)
    assert s.min_offset("T", 0) == first_kept
    cq_files = sorted(os.listdir(os.path.join(s.queues.root, "T", "0")))
    assert int(cq_files[0]) // 20 <= first_kept < int(cq_files[0]) // 20 + 10  # CQ files wholly below are gone
    g = s.get_messages("T", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, first_kept)
    assert len(s.query_by_key("T", "k", 1000).buffers) == 70 - first_kept
    # everything old: the active segment is never deleted
    for mf in s.commitlog.queue.files:
        os.utime(mf.path, (old, old))
    s.clean_expired()
    assert len(s.commitlog.queue.files) == 1 and s.put([request()])[0].status is PutStatus.PUT_OK
    min_before, max_before = s.min_offset("T", 0), s.max_offset("T", 0)
    s.close()
    s = open_store(tmp_path, mapped_file_size_consume_queue=20 * 10)
    assert (s.min_offset("T", 0), s.max_offset("T", 0)) == (min_before, max_before)
    assert max_before == 71 and 0 < min_before < 70
    s.close()


def test_disk_over_ratio_refuses_without_damage(tmp_path):
    s = open_store(tmp_path)
    ok = s.put([request(body=b"before")])[0]
    s.config.disk_max_used_ratio = 0.0  # below any real usage
    s.disk.recheck()
    res = s.put([request(), request()])
    assert [r.status for r in res] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
    assert "disk full" in (res[0].remark or "")
    assert s.max_offset("T", 0) == 1 and s.commitlog.max_offset == ok.phys_offset + ok.size
    s.config.disk_max_used_ratio = 1.0
    s.disk.recheck()
    assert s.put([request()])[0].queue_offset == 1
    s.close()


def _make_dir_unwritable(path: str) -> tuple[list[str], list[str]] | None:
    """A real OS refusal to create files in `path` (chmod for users, chattr +i for root)."""
    if os.geteuid() != 0:
        os.chmod(path, 0o500)
        return ["chmod", "500", path], ["chmod", "755", path]
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", path], capture_output=True).returncode == 0:
        return ["chattr", "+i", path], ["chattr", "-i", path]
    return None


@pytest.mark.process
def test_segment_creation_failure_refuses_rest_of_batch(tmp_path):
    s = open_store(tmp_path)
    s.put([request(body=b"f" * 60_000)])
    undo = _make_dir_unwritable(s.commitlog.directory)
    if undo is None:
        s.close()
        pytest.skip("cannot make a directory unwritable here")
    try:
        with capture_logs() as logs:
            res = s.put([request(body=b"a" * 1000), request(body=b"b" * 5000), request(body=b"c")])
    finally:
        subprocess.run(undo[1], check=True)
    assert res[0].status is PutStatus.PUT_OK
    assert res[1].status is PutStatus.CREATE_MAPPED_FILE_FAILED and res[2].status is res[1].status
    assert any(e["event"] == "commitlog.create_segment_failed" for e in logs)
    assert s.max_offset("T", 0) == 2  # queue offsets not consumed by the failed puts
    r = s.put([request(body=b"d" * 5000)])[0]
    assert r.status is PutStatus.PUT_OK and r.queue_offset == 2 and r.phys_offset == 65536
    s.close()
    s = open_store(tmp_path)
    assert s.max_offset("T", 0) == 3
    s.close()


def test_fault_injector_next_n_and_while_enabled(store):
    store.faults.fail_next(2, PutStatus.OS_PAGE_CACHE_BUSY)
    res = store.put([request(), request(), request()])
    assert [r.status for r in res] == [PutStatus.OS_PAGE_CACHE_BUSY] * 2 + [PutStatus.PUT_OK]
    assert res[2].queue_offset == 0
    store.faults.fail_while_enabled(PutStatus.UNKNOWN_ERROR, lambda req: req.topic == "X")
    res = store.put([request(topic="X"), request(topic="T")])
    assert [r.status for r in res] == [PutStatus.UNKNOWN_ERROR, PutStatus.PUT_OK]
    store.faults.disable()
    assert store.put([request(topic="X")])[0].status is PutStatus.PUT_OK


def test_atomic_json_write_and_bak_fallback(tmp_path):
    p = str(tmp_path / "config" / "x.json")
    atomic_write_json(p, {"v": 1})
    atomic_write_json(p, {"v": 2})
    assert read_json(p) == {"v": 2} and read_json(p + ".bak") == {"v": 1}
    assert not os.path.exists(p + ".tmp")
    with open(p, "w") as f:
        f.write('{"v": 3')  # torn primary
    assert read_json(p) == {"v": 1}
    os.unlink(p)
    assert read_json(p) == {"v": 1}
    assert read_json(str(tmp_path / "missing.json")) is None
