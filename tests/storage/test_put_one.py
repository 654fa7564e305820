"""A run of ONE record takes `BatchAppend._put_one` (a gRPC send, a sync producer's send); the general loop
`_put_many` is its reference. For the same runs both stores must leave byte-identical CommitLog,
ConsumeQueue and index files and return the same results (segment and ConsumeQueue file ends, index keys,
deliver delays, runs of several records in between)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from codec.put_run import PutRun, put_run
from storage.message_store import MessageStore
from tests.storage.conftest import SEG, open_store, record

_NOW = 1_700_000_000_000
_ROW = st.tuples(st.sampled_from(["T", "U", "SCHEDULE_TOPIC_XXXX"]), st.integers(0, 2),
                 st.sampled_from([0, 1, 100, 3000, SEG // 3]),
                 st.lists(st.text("abcK1", min_size=1, max_size=4), max_size=3),
                 st.integers(-(2**31), 2**31 - 1), st.sampled_from([-1, -1, 0, 5000]))


def _files(root: str) -> dict[str, bytes]:
    """Every CommitLog, ConsumeQueue and index file under the store (path -> bytes), spares left out."""
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for d, _, names in os.walk(os.path.join(root, sub)):
            for n in names:
                if not n.endswith(".spare"):
                    path = os.path.join(d, n)
                    out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


Row = tuple[str, int, int, list[str], int, int]  # topic, queue id, body size, index keys, tagsCode, deliver delay


def _run(rows: list[Row], first: int) -> PutRun:
    recs = [record(t, q, b"x" * size, props={"UNIQ_KEY": f"U{first + i}"}) for i, (t, q, size, *_) in enumerate(rows)]
    return put_run(recs, [(t, q) for t, q, *_ in rows], [tc for *_, tc, _ in rows],
                   [tuple(keys) for _, _, _, keys, _, _ in rows], [d for *_, d in rows])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(_ROW, min_size=1, max_size=3), min_size=1, max_size=16))
def test_one_record_runs_write_what_the_general_loop_writes(runs: list[list[Row]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fast, ref = _open(Path(tmp) / "fast"), _open(Path(tmp) / "ref")
        seen: dict[str, list[tuple[str, int, int]]] = {"fast": [], "ref": []}
        fast.add_dispatch_listener(lambda t, q, m: seen["fast"].append((t, q, m)))
        ref.add_dispatch_listener(lambda t, q, m: seen["ref"].append((t, q, m)))
        try:
            n = 0
            for rows in runs:
                got = fast.put_batch(_run(rows, n))  # a run of one: _put_one
                want = ref.batch._put_many(_run(rows, n))
                assert got == want
                n += len(rows)
            assert seen["fast"] == seen["ref"]
            _same_files(fast, ref)
        finally:
            fast.close()
            ref.close()


def _same_files(fast: MessageStore, ref: MessageStore) -> None:
    """The same files with the same bytes; index files are named by the wall clock at creation, so those
    are compared in name order, without their names."""
    a, b = _files(fast.config.store_path), _files(ref.config.store_path)
    index_a, index_b = ([v for k, v in sorted(f.items()) if k.startswith("index")] for f in (a, b))
    assert len(index_a) == len(index_b) and all(x == y for x, y in zip(index_a, index_b, strict=True))
    a, b = ({k: v for k, v in f.items() if not k.startswith("index")} for f in (a, b))
    assert sorted(a) == sorted(b)
    for path, data in a.items():
        assert data == b[path], path


def _open(path: Path) -> MessageStore:
    """A store with small files: CommitLog segments and ConsumeQueue files end, index files fill up."""
    s = open_store(path, max_index_num=40, max_hash_slot_num=16, mapped_file_size_consume_queue=20 * 4)
    s.now_ms = lambda: _NOW
    return s


def test_one_record_with_no_index_file_yet_and_no_keys(tmp_path: Path) -> None:
    """The first keyed record (no index file yet) and a record without keys go the same way as well."""
    fast, ref = _open(tmp_path / "fast"), _open(tmp_path / "ref")
    try:
        for i, keys in enumerate([[], ["k"], ["k", "k2"], []]):
            rows: list[Row] = [("T", 0, 10, keys, 7, -1)]
            assert fast.put_batch(_run(rows, i)) == ref.batch._put_many(_run(rows, i))
        assert fast.max_offset("T", 0) == 4 and fast.index.entries == 3
        _same_files(fast, ref)
    finally:
        fast.close()
        ref.close()
