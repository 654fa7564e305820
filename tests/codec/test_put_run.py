"""codec.put_run: the fast `put_run` agrees with its one-record-at-a-time reference, and each column
says what the records say (STORETIMESTAMP found at ts_pos whatever the born host's address length)."""

from hypothesis import given
from hypothesis import strategies as st

from codec.put_run import PutRun, put_run, put_run_one, put_run_reference, store_ts_pos
from codec.record import encode_record, read_store_timestamp
from tests.codec.strategies import BOUNDED
from tests.codec.test_record_rewrite import schedule_records

_COLUMNS = PutRun.__slots__


def _columns(run: PutRun) -> dict[str, object]:
    return {name: getattr(run, name) for name in _COLUMNS}


@BOUNDED
@given(st.lists(st.tuples(schedule_records(), st.integers(0, 7), st.integers(-(2**63), 2**63 - 1),
                          st.lists(st.binary(min_size=1, max_size=8), max_size=3),
                          st.none() | st.integers(-1, 10_000)), min_size=1, max_size=6))
def test_put_run_matches_reference(rows):
    records = [encode_record(r) for r, *_ in rows]
    dests = [(r.topic, qid) for r, qid, *_ in rows]
    tags_codes = [tc for _, _, tc, _, _ in rows]
    keys = [tuple(k) for _, _, _, k, _ in rows]
    delays = None if all(d is None for *_, d in rows) else [-1 if d is None else d for *_, d in rows]
    fast = put_run(records, list(dests), list(tags_codes), list(keys), delays)
    ref = put_run_reference(records, dests, tags_codes, keys, delays)
    assert _columns(fast) == _columns(ref)
    assert len(fast) == len(rows) and fast.starts[-1] == len(fast.buf)
    for j, (r, *_) in enumerate(rows):
        rec = fast.record(j)
        assert rec == records[j]
        ts = fast.ts_pos[j]
        assert ts == store_ts_pos(fast.buf, fast.starts[j])
        assert int.from_bytes(fast.buf[ts:ts + 8], "big", signed=True) == read_store_timestamp(rec) == r.store_timestamp
    if delays is None or max(delays) < 0:
        assert fast.deliver_delays is None  # no record with a delay: put_batch takes the no-delay path
    else:
        assert fast.deliver_delays == delays


@BOUNDED
@given(schedule_records(), st.integers(0, 7), st.integers(-(2**63), 2**63 - 1),
       st.lists(st.binary(min_size=1, max_size=8), max_size=3), st.integers(-1, 10_000))
def test_put_run_one_matches_put_run(r, qid, tags_code, keys, delay):
    """A run of one record built by `put_run_one` is the one `put_run` builds (every column)."""
    rec = encode_record(r)
    one = put_run_one(rec, (r.topic, qid), tags_code, tuple(keys), delay)
    assert _columns(one) == _columns(put_run([rec], [(r.topic, qid)], [tags_code], [tuple(keys)], [delay]))
    assert one.buf == rec and one.buf is not rec  # a copy: put_batch patches it


def test_empty_run_is_empty():
    run = PutRun()
    assert len(run) == 0 and run.starts == [0] and run.buf == bytearray() and run.deliver_delays is None
