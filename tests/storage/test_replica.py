"""storage.replica: a slave's CommitLog fed with the master's raw bytes in arbitrary pieces is
byte-identical, its ConsumeQueues (tagsCode included) and keys are rebuilt, a torn record waits for its
rest, a wrong offset is refused, and truncation cuts CommitLog and ConsumeQueues together."""

from __future__ import annotations

import random

import pytest

from storage.message_store import PutStatus
from storage.replica import ReplicaError
from storage.store_types import tags_hash_code
from tests.helpers.checks import present
from tests.storage.conftest import SEG, open_store, request


def schedule_rule(topic: str, props: dict[str, str], store_ts: int) -> int:
    """A stand-in for the scheduler's tagsCode rule (storage applies what the composition root gives)."""
    return store_ts + 1000 if topic == "SCHEDULE_TOPIC_XXXX" else tags_hash_code(topic, props, store_ts)


def fill(master, n: int) -> None:
    for i in range(n):
        [r] = master.put([request("T", i % 3, b"m%04d" % i + b"x" * (i % 50), tags=f"t{i % 4}", keys=f"k{i}")])
        assert r.status is PutStatus.PUT_OK
    [d] = master.put([request("SCHEDULE_TOPIC_XXXX", 0, b"d", props={"DELAY": "1", "REAL_TOPIC": "T"},
                              uniq="U-pending", deliver_delay_ms=1000)])
    assert d.status is PutStatus.PUT_OK


def replicate(master, slave, rng: random.Random) -> None:
    off = slave.commitlog_max_offset() or 0
    end = master.commitlog_max_offset()
    while off < end:
        data = bytes(master.replica_data(off, rng.randint(1, 3000)))
        off = slave.append_replica(off, data)
        slave.reput()


def test_byte_identical_queues_rebuilt_any_chunking(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s", tags_code_of=schedule_rule)
    slave.start_replica()
    fill(master, 900)  # > one 64 KiB segment: the END-OF-FILE blank is replicated as bytes
    assert master.commitlog_max_offset() > SEG
    replicate(master, slave, random.Random(3))
    assert slave.commitlog_max_offset() == master.commitlog_max_offset()
    for mf_m, mf_s in zip(master.commitlog.queue.files, slave.commitlog.queue.files, strict=True):
        assert bytes(mf_m.mm) == bytes(mf_s.mm)
    for key in list(master.queues.queues):
        assert bytes(present(master.read_units(*key, 0, 10_000))) == bytes(present(slave.read_units(*key, 0, 10_000))), key
    assert len(slave.query_by_key("T", "k17", 4, 0, 1 << 62).buffers) == 1
    assert slave.query_by_key("T", "nope", 4, 0, 1 << 62).buffers == []
    # a pending scheduled message is indexed under the schedule topic on the slave as on the master, so
    # `scheduled cancel --id` finds it on a promoted slave
    for store in (master, slave):
        assert len(store.query_by_key("SCHEDULE_TOPIC_XXXX", "U-pending", 4, 0, 1 << 62).buffers) == 1
    assert slave.put([request("T")])[0].status is PutStatus.SERVICE_NOT_AVAILABLE  # read-only
    master.close()
    slave.close()


def test_torn_record_waits_wrong_offset_refused_truncate(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    slave.start_replica()
    fill(master, 10)
    end = master.commitlog_max_offset()
    data = bytes(present(master.replica_data(0, end)))
    slave.append_replica(0, data[:-10])  # the last record is torn
    slave.reput()
    assert slave.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 0 and slave.max_offset("T", 0) == 4
    with pytest.raises(ReplicaError):
        slave.append_replica(end, b"zz")  # not the CommitLog end
    slave.append_replica(end - 10, data[-10:])
    slave.reput()
    assert slave.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 1
    cut_at = present(master.read_units("T", 0, 2, 1))
    import struct
    phys = struct.unpack_from(">q", cut_at, 0)[0]
    assert slave.truncate_replica(phys) == end - phys
    assert slave.commitlog_max_offset() == phys and slave.max_offset("T", 0) == 2
    assert slave.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 0
    slave.stop_replica()  # promotion: writable again, appends continue at the cut
    [r] = slave.put([request("T", 0, b"new")])
    assert r.status is PutStatus.PUT_OK and r.phys_offset == phys and r.queue_offset == 2
    master.close()
    slave.close()


def test_a_slave_asks_for_its_next_segment_ahead_as_the_master_does(tmp_path):
    """The replicated run that passes half of the active segment asks for the next one (storage's
    AllocateMappedFileService), so the run that rolls over does not create 1 GiB inline."""
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    while master.commitlog_max_offset() < SEG * 5 // 4:
        master.put([request("T", 0, b"y" * 900) for _ in range(8)])
    half = SEG // 2 + 1000
    off = slave.append_replica(0, bytes(present(master.replica_data(0, half))))
    assert slave.commitlog.queue.ahead.start == SEG
    end = master.commitlog_max_offset()
    while off < end:
        off = slave.append_replica(off, bytes(present(master.replica_data(off, end - off))))
    q = slave.commitlog.queue
    assert [f.file_from_offset for f in q.files] == [0, SEG]
    assert q.ahead.used + q.ahead.missed == 2  # the first segment (asked for at load) and the second
    assert bytes(present(slave.replica_data(SEG, 100))) == bytes(present(master.replica_data(SEG, 100)))
    master.close()
    slave.close()


def test_reput_reports_where_replicated_records_go_later(tmp_path):
    """The replica destination listeners get the (REAL_TOPIC, REAL_QID) pairs of a reput pass's records
    (a slave learns those topics before a delivery there); a record without REAL_TOPIC names none, a
    listener that raises does not stop the reput."""
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s", tags_code_of=schedule_rule)
    slave.start_replica()
    passes: list[set[tuple[str, int]]] = []

    def broken(dests: set[tuple[str, int]]) -> None:
        raise RuntimeError("a listener's bug")

    slave.add_replica_destination_listener(broken)
    slave.add_replica_destination_listener(passes.append)
    for topic, props in (("SCHEDULE_TOPIC_XXXX", {"DELAY": "1", "REAL_TOPIC": "Later", "REAL_QID": "5"}),
                         ("SCHEDULE_TOPIC_XXXX", {"DELAY": "2", "REAL_TOPIC": "%RETRY%G", "REAL_QID": "x"}),
                         ("Plain", {})):
        [r] = master.put([request(topic, 0, b"m", props=props)])
        assert r.status is PutStatus.PUT_OK
    off = slave.append_replica(0, bytes(present(master.replica_data(0, 1 << 20))))
    assert off == master.commitlog_max_offset()
    assert slave.reput() == 3
    assert passes == [{("Later", 5), ("%RETRY%G", 0)}]
    assert slave.max_offset("Plain", 0) == 1  # the reput went on past the failing listener
    slave.remove_replica_destination_listener(passes.append)
    [r] = master.put([request("SCHEDULE_TOPIC_XXXX", 0, b"m", props={"DELAY": "1", "REAL_TOPIC": "Y"})])
    slave.append_replica(off, bytes(present(master.replica_data(off, 1 << 20))))
    assert slave.reput() == 1 and passes == [{("Later", 5), ("%RETRY%G", 0)}]
    master.close()
    slave.close()


def index_entries(store) -> list[tuple[int, int, int]]:
    """(keyHash, phyOffset, size) of every index entry, oldest first, over all IndexFiles."""
    out = []
    for f in store.index.files:
        for n in range(1, f.count + 1):
            h, phys, _tdiff, _prev, size = f.entry(n)
            out.append((h, phys, size))
    return out


def test_truncation_cuts_the_index_so_no_query_reaches_a_cut_record(tmp_path):
    """A former master (x) holds a tail the new master (y) does not: x's tail is cut, y's records are
    replicated into the same offsets. x's index then holds exactly y's entries (the cut spans IndexFiles:
    40 entries each), a key only the cut tail had finds nothing, the keys y wrote there find y's record
    once; after a restart too."""
    small = {"max_index_num": 40}
    x, y = open_store(tmp_path / "x", **small), open_store(tmp_path / "y", **small)
    y.start_replica()
    for i in range(30):
        assert x.put([request("T", i % 2, b"c%03d" % i, keys=f"common{i} same{i}")])[0].status is PutStatus.PUT_OK
    common_end = x.commitlog_max_offset()
    y.append_replica(0, bytes(present(x.replica_data(0, common_end))))
    y.reput()
    for i in range(45):  # x's own tail: never replicated
        assert x.put([request("T", i % 2, b"old%03d" % i + b"o" * 40, keys=f"old{i} same{i}")])[0].status is PutStatus.PUT_OK
    assert len(x.index.files) >= 3
    y.stop_replica()  # y elected: its own records go where x's tail was
    for i in range(20):
        assert y.put([request("T", i % 2, b"new%03d" % i, keys=f"new{i} same{i}")])[0].status is PutStatus.PUT_OK

    x.start_replica()
    assert x.truncate_replica(common_end) > 0
    assert x.index.entries == 60 and index_entries(x) == index_entries(y)[:60]
    assert x.query_by_key("T", "old3", 4).buffers == []
    y_end = y.commitlog_max_offset()
    x.append_replica(common_end, bytes(present(y.replica_data(common_end, y_end - common_end))))
    x.reput()
    assert index_entries(x) == index_entries(y)

    def found(store, key: str) -> list[bytes]:
        return sorted(bytes(b) for b in store.query_by_key("T", key, 8).buffers)

    for store in (x, y):
        assert found(store, "old3") == [] and found(store, "old40") == []
        same = found(store, "same3")  # the common record and y's, never x's cut one
        assert len(same) == 2 and not any(b"old003" in r for r in same) and any(b"new003" in r for r in same)
        assert len(found(store, "new7")) == 1 and found(store, "same25") == found(y, "same25")
    x.close()
    x = open_store(tmp_path / "x", **small)
    assert index_entries(x) == index_entries(y)
    assert x.query_by_key("T", "old3", 4).buffers == [] and len(x.query_by_key("T", "same3", 4).buffers) == 2
    x.close()
    y.close()
