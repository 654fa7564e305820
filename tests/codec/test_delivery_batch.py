"""codec.delivery_batch.build_delivery_batch: the one-buffer batch agrees with build_deliveries."""

from hypothesis import given
from hypothesis import strategies as st

from codec.delivery_batch import build_delivery_batch
from codec.put_run import PutRun, put_run_reference
from codec.record import MessageRecord, encode_record, read_store_timestamp
from codec.record_rewrite import build_deliveries, tail_span
from tests.codec.strategies import BOUNDED
from tests.codec.test_record_rewrite import schedule_records
from tests.helpers.checks import present


@BOUNDED
@given(st.lists(schedule_records(), min_size=1, max_size=6))
def test_batch_matches_build_deliveries(recs):
    raws = [memoryview(encode_record(r)) for r in recs]
    one = build_deliveries([*raws, None])
    batch = build_delivery_batch([*raws, None])
    kept = [i for i, b in enumerate(one) if b is not None]
    assert batch.source == kept
    assert batch.dropped == [i for i, b in enumerate(one) if b is None]
    assert batch.starts[0] == 0 and batch.starts[-1] == len(batch.buf) and len(batch) == len(kept)
    # laid piece by piece, the run is the one codec.put_run's reference builds of the whole records
    ref = put_run_reference([batch.record(j) for j in range(len(batch))], batch.dests, batch.tags_codes, batch.keys)
    assert [getattr(batch, name) for name in PutRun.__slots__] == [getattr(ref, name) for name in PutRun.__slots__]
    for j, i in enumerate(kept):
        record, topic, qid, tags_code, keys, uniq = present(one[i])
        assert batch.record(j) == record
        assert batch.dests[j] == (topic, qid)
        assert batch.tags_codes[j] == tags_code and batch.keys[j] == keys and batch.uniqs[j] == uniq
        # ts_pos points at STORETIMESTAMP of record j
        assert read_store_timestamp(batch.record(j)) == int.from_bytes(
            batch.buf[batch.ts_pos[j]:batch.ts_pos[j] + 8], "big", signed=True)


def test_drop_topic_and_key_inside_a_value():
    half = MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=b"h",
                         properties={"REAL_TOPIC": "RMQ_SYS_TRANS_HALF_TOPIC", "REAL_QID": "0"})
    tricky = MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=b"b", properties={
        "X": "aREAL_TOPIC\x01", "REAL_TOPIC": "Real", "REAL_QID": "3", "Y": "TAGS\x01no"})
    batch = build_delivery_batch([encode_record(half), encode_record(tricky)], "RMQ_SYS_TRANS_HALF_TOPIC")
    assert batch.dropped == [0] and batch.source == [1]
    assert batch.dests == [("Real", 3)] and batch.tags_codes == [0] and batch.keys == [()]


def test_any_key_may_come_first_whatever_the_properties_length():
    """Keys are searched in place, from the low byte of PROPERTIESLENGTH on: a key that is the first
    property (no \\x02 before it) is still found, also when that length byte happens to be \\x02, and
    the result is the per-record rewrite's (build_deliveries) every time."""
    keys = ["REAL_TOPIC", "TAGS", "UNIQ_KEY", "KEYS"]
    values = {"REAL_TOPIC": "Real", "REAL_QID": "5", "TAGS": "TagA", "UNIQ_KEY": "U" * 32, "KEYS": "k1 k2"}
    raws = []
    for first in keys:
        for pad in range(0, 300):
            props = {first: values[first], "PAD": "p" * pad}
            props.update((k, v) for k, v in values.items() if k != first)
            raws.append(encode_record(MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=b"b", properties=props)))
    one = build_deliveries(raws)
    batch = build_delivery_batch(raws)
    assert batch.dropped == [] and len(batch) == len(raws)
    low_is_separator = 0
    for j, (record, topic, qid, tags_code, keys_, uniq) in enumerate(map(present, one)):
        assert batch.record(j) == record
        assert batch.dests[j] == (topic, qid) == ("Real", 5)
        assert batch.tags_codes[j] == tags_code != 0
        assert batch.keys[j] == keys_ == (b"k1", b"k2", b"U" * 32) and batch.uniqs[j] == uniq
        _, ppos, _ = tail_span(raws[j])
        low_is_separator += raws[j][ppos + 1] == 2
    assert low_is_separator  # the case where the length's low byte is \x02 was met


def test_a_real_qid_that_is_no_queue_id_is_read_as_queue_0_by_both_paths():
    """Found by the 'delivery' fuzz target: REAL_QID past int32 made both paths raise struct.error for
    the whole batch. A client can write any REAL_QID; it must not fail the batch."""
    recs = [encode_record(MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=b"b",
                                        properties={"REAL_TOPIC": "Real", "REAL_QID": q}))
            for q in ("99999999999", "-3", "5")]
    one = build_deliveries(recs)
    batch = build_delivery_batch(recs)
    assert [d[2] for d in one if d is not None] == [0, 0, 5]
    assert [qid for _, qid in batch.dests] == [0, 0, 5]
