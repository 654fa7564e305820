"""scheduleProgress (scheduler.progress_file): the file's records survive a reopen, levels added later
start as never written, the timer's open does not shrink the level table, and snapshot/restore carry
the whole state."""

from __future__ import annotations

from scheduler.progress_file import NO_PHYS, ProgressFile


def test_records_survive_a_reopen_and_the_timer_open_keeps_the_levels(tmp_path):
    d = str(tmp_path / "config")
    p = ProgressFile(d, 4)
    assert not p.existed
    assert p.level(2).end == -1 and p.level(2).phys == NO_PHYS  # never written
    begin, commit = p.level_writer(2)
    begin(1000)
    assert p.level(2).phys == 1000  # a put in flight
    commit(17, 1234)
    assert tuple(p.level(2)) == (17, NO_PHYS, 1234)
    p.timer_begin(555)
    p.timer_commit(9000, 9042, 104, 520, 1300)
    p.close()

    t = ProgressFile(d, 0)  # the timer opens the same file without knowing the levels
    assert t.existed and t.levels == 4
    assert tuple(t.timer()) == (9000, 9042, 104, 520, NO_PHYS, 1300)
    assert tuple(t.level(2)) == (17, NO_PHYS, 1234)
    t.close()

    q = ProgressFile(d, 6)  # two levels added to messageDelayLevel
    assert tuple(q.level(2)) == (17, NO_PHYS, 1234) and q.level(6).end == -1
    data = q.snapshot()
    q.close()

    mem = ProgressFile(None, 6)  # no config dir: in memory
    mem.restore(data)
    assert tuple(mem.level(2)) == (17, NO_PHYS, 1234) and tuple(mem.timer())[:4] == (9000, 9042, 104, 520)


def test_a_file_of_another_kind_is_started_afresh(tmp_path):
    d = tmp_path / "config"
    d.mkdir()
    (d / "scheduleProgress").write_bytes(b"garbage" * 10)
    p = ProgressFile(str(d), 2)
    assert not p.existed and p.level(1).end == -1 and p.timer().end == -1
    p.close()
