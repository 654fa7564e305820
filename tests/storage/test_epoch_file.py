"""storage.epoch_file: the epochFileCheckpoint of controller mode on real files (Apache's layout, .bak
fallback), the master's new epoch, the slave's appends, and the consistent point a slave truncates to."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from codec.autoswitch_ha import EPOCH_FILE, EpochEntry
from storage.epoch_file import NO_END, EpochFile, consistent_point

E = EpochEntry


def test_entries_survive_a_restart_in_apaches_layout(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path))
    assert f.load() == [] and f.last_epoch == -1
    assert not os.path.exists(tmp_path / EPOCH_FILE)
    f.begin_epoch(1, 0)
    assert f.append(E(3, 2048))
    assert (tmp_path / EPOCH_FILE).read_text() == "2\n1516950403\n1-0\n3-2048\n"  # as Apache's CheckpointFile writes
    g = EpochFile(str(tmp_path))
    assert g.load() == [E(1, 0), E(3, 2048)]
    assert g.end_of(1) == 2048 and g.end_of(3) == NO_END
    assert g.find_by_offset(0) == E(1, 0) and g.find_by_offset(2047) == E(1, 0) and g.find_by_offset(2048) == E(3, 2048)
    assert g.next_after(1) == E(3, 2048) and g.next_after(3) is None


def test_a_damaged_file_falls_back_to_the_previous_copy(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path))
    f.begin_epoch(1, 0)
    f.append(E(2, 100))  # the previous content (1 entry) is now the .bak
    (tmp_path / EPOCH_FILE).write_text("2\n99\n1-0\n2-100\n")  # wrong CRC
    assert EpochFile(str(tmp_path)).load() == [E(1, 0)]


def test_appends_refuse_older_epochs_and_replace_an_empty_one(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path))
    assert f.append(E(2, 100))
    assert not f.append(E(1, 200))  # older epoch
    assert not f.append(E(3, 50))  # starts before the last
    assert f.append(E(2, 100))  # the same entry again: nothing to do
    assert f.append(E(4, 100))  # epoch 2 held no byte: replaced
    assert f.load() == [E(4, 100)]


def test_becoming_master_drops_epochs_not_older_and_truncation_drops_the_tail(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path))
    for e in (E(1, 0), E(2, 100), E(5, 300)):
        assert f.append(e)
    f.begin_epoch(5, 400)  # master of the last epoch again: the epoch keeps its start
    assert f.entries == [E(1, 0), E(2, 100), E(5, 300)]
    f.begin_epoch(2, 400)  # an older epoch named again: what came after it goes
    assert f.entries == [E(1, 0), E(2, 400)]
    f.begin_epoch(5, 400)  # (the entry of 2 held no byte: replaced)
    assert f.entries == [E(1, 0), E(5, 400)]
    f.begin_epoch(6, 500)
    assert f.entries == [E(1, 0), E(5, 400), E(6, 500)]
    f.truncate_suffix_by_offset(100)
    assert f.load() == [E(1, 0)]
    f.truncate_suffix_by_offset(0)
    assert f.entries == [] and not os.path.exists(tmp_path / EPOCH_FILE)


def test_consistent_point() -> None:
    # the old master wrote 1000..1500 in epoch 2 after the slave (now master of 3 from 1000) last acked
    old = [E(1, 0), E(2, 500)]
    new = [E(1, 0), E(2, 500), E(3, 1000)]
    assert consistent_point(old, 1500, new, 1800) == 1000
    # a slave behind its master in the same epoch keeps everything
    assert consistent_point(new, 1200, new, 1800) == 1200
    # the same epoch number with another start is not the same epoch
    assert consistent_point([E(1, 0), E(2, 600)], 900, new, 1800) == 500
    assert consistent_point([E(7, 0)], 10, new, 1800) == -1
    # a slave elected before it held a byte replaces the epoch it followed (1 at 0) with its own (2 at 0): the
    # old master rejoining finds no common epoch; holding nothing, it is consistent at 0 (the README's
    # controller recipe: kill -9 of a master that had taken no message)
    assert consistent_point([E(1, 0)], 0, [E(2, 0)], 0) == 0
    # ... and holding bytes the new master never had, it cuts them all and replicates from 0
    assert consistent_point([E(1, 0)], 50, [E(2, 0)], 80) == 0
    # but never for a master whose log does not start at 0, or that is not newer than the slave
    assert consistent_point([E(1, 0)], 50, [E(2, 40)], 80) == -1
    assert consistent_point([E(3, 0)], 50, [E(2, 0)], 80) == -1


epoch_lists = st.lists(st.integers(1, 50), min_size=1, max_size=8, unique=True).flatmap(
    lambda ids: st.lists(st.integers(1, 100), min_size=len(ids), max_size=len(ids)).map(
        lambda steps: [E(e, sum(steps[:i])) for i, e in enumerate(sorted(ids))]))


@given(epoch_lists, st.integers(0, 200), st.integers(0, 100))
def test_a_shared_history_is_kept_to_the_shorter_end(entries: list[EpochEntry], extra_a: int, extra_b: int) -> None:
    end_a = entries[-1].start_offset + extra_a
    end_b = entries[-1].start_offset + extra_b
    assert consistent_point(entries, end_a, entries, end_b) == min(end_a, end_b)
    # a master that went on to a newer epoch: the slave keeps its last epoch up to where the master's ended
    newer = [*entries, E(entries[-1].epoch + 1, end_b)]
    assert consistent_point(entries, end_a, newer, end_b + 10) == min(end_a, end_b)
