import pytest
from hypothesis import given
from hypothesis import strategies as st

from server import headers as H


def test_v2_short_names_map_to_v1_fields():
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": 4, "e": "-1", "f": 0, "g": "1700000000000", "h": 0,
           "i": "TAGS\x01x\x02", "m": "true", "k": False}
    h = H.SEND_MESSAGE.parse(ext, v2=True)
    assert (h.producerGroup, h.topic, h.defaultTopicQueueNums, h.queueId) == ("PG", "T", 4, -1)
    assert h.bornTimestamp == 1700000000000 and h.batch is True and h.unitMode is False
    assert h.reconsumeTimes is None


def test_missing_required_field_is_named():
    with pytest.raises(H.HeaderError, match=r"the custom field <consumerGroup> is null"):
        H.GROUP_TOPIC_QUEUE.parse({"topic": "T", "queueId": "1"})
    with pytest.raises(H.HeaderError, match=r"<consumerGroup> is null"):  # empty counts as missing
        H.GROUP_TOPIC_QUEUE.parse({"consumerGroup": "", "topic": "T", "queueId": "1"})


def test_unparsable_number_names_the_field():
    with pytest.raises(H.HeaderError, match="queueId"):
        H.TOPIC_QUEUE.parse({"topic": "T", "queueId": "x1"})
    with pytest.raises(H.HeaderError, match="queueId"):
        H.TOPIC_QUEUE.parse({"topic": "T", "queueId": str(1 << 40)})  # int overflow


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_long_fields_round_trip(v):
    assert H.VIEW_MESSAGE.parse({"offset": str(v)}).offset == v


@given(st.text(max_size=20))
def test_garbage_never_raises_anything_but_header_error(s):
    try:
        H.PULL_MESSAGE.parse({k: s for k, *_ in H.PULL_MESSAGE.fields})
    except H.HeaderError:
        pass
