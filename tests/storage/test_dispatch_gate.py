"""storage.dispatch.DispatchGate through a real store: with a dispatch limit (RocketMQ 5's confirmOffset) a
put's records past it are stored but not dispatched -- pulls answer "no new message", unit reads, max
offsets, key queries and the dispatch listeners see nothing of them -- until the limit passes their end;
then the listeners hear each queue once, in the same call. No limit: as before. A slave's reput is gated the
same way; a truncation drops held writes; a flood of held writes is bounded."""

from __future__ import annotations

from codec.put_run import put_run
from storage.dispatch import MAX_HELD_WRITES
from storage.message_store import GetStatus, MessageStore, PutStatus
from tests.storage.conftest import open_store, record, request


def put(store: MessageStore, topic: str, qid: int, key: str) -> int:
    [r] = store.put([request(topic, qid, key.encode(), keys=key)])
    assert r.status is PutStatus.PUT_OK
    return r.phys_offset + r.size


def heard(store: MessageStore) -> list[tuple[str, int, int]]:
    calls: list[tuple[str, int, int]] = []
    store.add_dispatch_listener(lambda t, q, m: calls.append((t, q, m)))
    return calls


def test_held_past_the_limit_then_released_by_the_limit(tmp_path) -> None:
    s = open_store(tmp_path / "s")
    calls = heard(s)
    e0 = put(s, "T", 0, "a")
    assert calls == [("T", 0, 1)]  # no limit: dispatched at once
    s.set_dispatch_limit(e0)
    e1 = put(s, "T", 0, "b")
    e2 = put(s, "T", 1, "c")
    run = put_run([record("T", 0, b"d"), record("U", 0, b"e")], [("T", 0), ("U", 0)], [0, 0], [(), ()])
    assert s.put_batch(run).count == 2
    e3 = s.commitlog_max_offset()
    assert calls == [("T", 0, 1)]  # stored, not dispatched
    assert s.get_messages("T", 0, 1, 32).status is GetStatus.OFFSET_OVERFLOW_ONE  # "no new message"
    assert s.max_offset("T", 0) == 1 and s.max_offset("T", 1) == 0 and s.max_offset("U", 0) == 0
    assert len(s.read_units("T", 0, 0, 100) or b"") == 20
    assert s.read_units("T", 1, 0, 100) is None
    assert s.query_by_key("T", "b", 4).buffers == [] and len(s.query_by_key("T", "a", 4).buffers) == 1

    s.set_dispatch_limit(e1)  # b is confirmed: only b
    assert calls[1:] == [("T", 0, 2)]
    got = s.get_messages("T", 0, 1, 32)
    assert got.status is GetStatus.FOUND and len(got.buffers) == 1 and got.max_offset == 2
    assert s.max_offset("T", 1) == 0
    s.set_dispatch_limit(e1 - 1)  # a lower limit hides nothing already dispatched
    assert s.max_offset("T", 0) == 2
    s.set_dispatch_limit(e3)  # c and the batch: each queue once, with its max
    assert sorted(calls[2:]) == [("T", 0, 3), ("T", 1, 1), ("U", 0, 1)]
    assert (s.max_offset("T", 0), s.max_offset("T", 1), s.max_offset("U", 0)) == (3, 1, 1)
    assert len(s.query_by_key("T", "c", 4).buffers) == 1
    assert s.gate.held == {} and not s.gate.writes and e2 < e3

    put(s, "T", 0, "f")  # past the limit again; None lifts it
    assert s.max_offset("T", 0) == 3
    s.set_dispatch_limit(None)
    assert s.max_offset("T", 0) == 4 and calls[-1] == ("T", 0, 4)
    put(s, "T", 0, "g")
    assert s.max_offset("T", 0) == 5 and calls[-1] == ("T", 0, 5)
    s.close()


def test_a_slave_reput_is_gated_and_a_cut_drops_held_writes(tmp_path) -> None:
    m, s = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    s.start_replica()
    s.set_dispatch_limit(0)
    calls = heard(s)
    ends = [put(m, "T", 0, f"k{i}") for i in range(4)]
    for lo, hi in zip([0] + ends, ends, strict=False):  # one reput per record: four held writes
        s.append_replica(lo, bytes(m.replica_data(lo, hi - lo) or b""))
        s.reput()
    assert calls == [] and s.max_offset("T", 0) == 0
    s.set_dispatch_limit(ends[1])
    assert calls == [("T", 0, 2)] and s.max_offset("T", 0) == 2
    s.truncate_replica(ends[2])  # the last record goes: its held write with it
    assert len(s.gate.writes) == 1
    s.set_dispatch_limit(ends[3])
    assert calls[-1] == ("T", 0, 3) and s.max_offset("T", 0) == 3 and s.gate.held == {}
    m.close()
    s.close()


def test_held_writes_are_bounded(tmp_path) -> None:
    s = open_store(tmp_path / "s")
    s.set_dispatch_limit(0)
    calls = heard(s)
    ends = [put(s, "T", i % 2, f"k{i}") for i in range(MAX_HELD_WRITES + 50)]
    assert len(s.gate.writes) == MAX_HELD_WRITES  # the last ones share one entry
    s.set_dispatch_limit(ends[-10])  # inside the shared entry: released up to before it, never past the limit
    assert s.max_offset("T", 0) + s.max_offset("T", 1) == MAX_HELD_WRITES - 1
    s.set_dispatch_limit(ends[-1])
    assert (s.max_offset("T", 0), s.max_offset("T", 1)) == ((MAX_HELD_WRITES + 50) // 2,) * 2
    assert sorted(calls[-2:]) == [("T", 0, (MAX_HELD_WRITES + 50) // 2), ("T", 1, (MAX_HELD_WRITES + 50) // 2)]
    assert s.gate.held == {}
    s.close()


def test_a_topic_listener_hears_its_topic_only(tmp_path) -> None:
    """A listener added for one topic (the delay levels', the timer's, the half and trace topics') hears that
    topic's queues only: through put, a run's put_batch, a one-record put_batch and a held write's release;
    removed, it hears nothing."""
    s = open_store(tmp_path / "s")
    every = heard(s)
    own: list[tuple[str, int, int]] = []

    def on_u(t: str, q: int, m: int) -> None:
        own.append((t, q, m))

    s.add_dispatch_listener(on_u, "U")
    put(s, "T", 0, "a")
    put(s, "U", 1, "b")
    run = put_run([record("T", 0, b"c"), record("U", 0, b"d")], [("T", 0), ("U", 0)], [0, 0], [(), ()])
    assert s.put_batch(run).count == 2
    assert s.put_batch(put_run([record("U", 1, b"e")], [("U", 1)], [0], [()])).count == 1
    s.set_dispatch_limit(s.commitlog_max_offset())
    put(s, "T", 0, "f")
    put(s, "U", 0, "g")
    assert own == [("U", 1, 1), ("U", 0, 1), ("U", 1, 2)]
    s.set_dispatch_limit(None)
    assert own[3:] == [("U", 0, 2)]
    assert [c for c in every if c[0] == "U"] == own and len(every) == len(own) + 3
    s.remove_dispatch_listener(on_u)
    put(s, "U", 0, "h")
    assert len(own) == 4 and every[-1] == ("U", 0, 3)
    s.close()
