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


_SEND_KEYS = "abcdefghijklm"
_send_values = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "4", " 7 ", "true", "false", "TRUE", "1_0", "x", "PG", "TBW102",
                     str(1 << 31), str(-(1 << 31)), str((1 << 31) - 1), str(1 << 63), str((1 << 63) - 1),
                     "1700000000000", "UNIQ_KEY\x01abc\x02WAIT\x01true"]),
    st.text(max_size=6), st.integers(-5, 5), st.booleans(), st.none())


def _outcome(fn, ext, v2):
    try:
        return ("ok", fn(ext, v2).__dict__)
    except H.HeaderError as e:
        return ("error", str(e))


@given(st.dictionaries(st.sampled_from(_SEND_KEYS + "x"), _send_values), st.booleans())
def test_parse_send_equals_the_generic_send_spec(ext, v2):
    """The send fast lane gives the generic parse's Header, or its HeaderError, for any ext."""
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _outcome(H.parse_send, ext, v2) == _outcome(H.SEND_MESSAGE.parse, ext, v2)


@given(st.fixed_dictionaries({k: _send_values for k in _SEND_KEYS}))
def test_parse_send_equals_the_generic_send_spec_all_keys(ext):
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _outcome(H.parse_send, ext, True) == _outcome(H.SEND_MESSAGE.parse, ext, True)


def test_parse_send_fast_lane_on_a_java_send():
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
           "i": "WAIT\x01true", "j": "0", "k": "false", "l": "16", "m": "false"}
    assert H.parse_send(ext, True).__dict__ == H.SEND_MESSAGE.parse(ext, True).__dict__


_num = st.one_of(st.sampled_from(["0", "4", "-1", " 7 ", "1_0", "+3", str(1 << 31), str((1 << 63) - 1)]),
                 st.integers(-(1 << 64), 1 << 64).map(str))
_mostly_valid = st.fixed_dictionaries(
    {"a": st.sampled_from(["PG", " "]), "b": st.sampled_from(["T", "%RETRY%G"]), "c": st.just("TBW102"),
     "d": _num, "e": _num, "f": _num, "g": _num, "h": _num},
    optional={"i": st.sampled_from(["", "TAGS\x01a", "x"]), "j": st.one_of(st.just(""), _num),
              "k": st.sampled_from(["", "true", "false", "True", "1"]), "l": st.one_of(st.just(""), _num),
              "m": st.sampled_from(["", "true", "false", "yes"])})


@given(_mostly_valid)
def test_parse_send_equals_the_generic_send_spec_mostly_valid(ext):
    assert _outcome(H.parse_send, ext, True) == _outcome(H.SEND_MESSAGE.parse, ext, True)


_PULL_KEYS = [name for name, *_ in H.PULL_MESSAGE.fields]
_pull_num = st.one_of(st.sampled_from(["0", "4", "-1", "32", " 7 ", "1_0", "+3", "007", "x", "", str(1 << 31),
                                       str(-(1 << 31) - 1), str((1 << 63) - 1), str(1 << 63), "1024", "1025"]),
                      st.integers(-(1 << 64), 1 << 64).map(str))


def _pull_outcome(fn, ext):
    """The Header's fields with their types and order, or the HeaderError text."""
    try:
        return ("ok", [(k, type(v), v) for k, v in fn(ext).__dict__.items()])
    except H.HeaderError as e:
        return ("error", str(e))


@given(st.dictionaries(st.sampled_from(_PULL_KEYS + ["x"]), st.one_of(_send_values, _pull_num)))
def test_parse_pull_equals_the_generic_pull_spec(ext):
    """The pull fast lane gives the generic parse's Header, or its HeaderError, for any ext."""
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _pull_outcome(H.parse_pull, ext) == _pull_outcome(H.PULL_MESSAGE.parse, ext)


_pull_mostly_valid = st.fixed_dictionaries(
    {"consumerGroup": st.sampled_from(["CG", " ", ""]), "topic": st.sampled_from(["T", "%RETRY%CG"]),
     "queueId": _pull_num, "queueOffset": _pull_num, "maxMsgNums": _pull_num, "sysFlag": _pull_num,
     "commitOffset": _pull_num, "suspendTimeoutMillis": _pull_num, "subVersion": _pull_num},
    optional={"subscription": st.sampled_from(["", "*", "a || b", 5]),
              "expressionType": st.sampled_from(["", "TAG", "SQL92", None, True])})


@given(_pull_mostly_valid)
def test_parse_pull_equals_the_generic_pull_spec_mostly_valid(ext):
    assert _pull_outcome(H.parse_pull, ext) == _pull_outcome(H.PULL_MESSAGE.parse, ext)


def test_parse_pull_fast_lane_on_a_java_pull():
    ext = {"consumerGroup": "CG", "topic": "T", "queueId": "3", "queueOffset": "1700000", "maxMsgNums": "32",
           "sysFlag": "6", "commitOffset": "1699990", "suspendTimeoutMillis": "15000", "subscription": "*",
           "subVersion": "1763938000123", "expressionType": "TAG"}
    assert _pull_outcome(H.parse_pull, ext) == _pull_outcome(H.PULL_MESSAGE.parse, ext)
    assert H.parse_pull(ext).subVersion == 1763938000123
    with pytest.raises(H.HeaderError, match=r"<queueOffset> is not a valid long"):
        H.parse_pull({**ext, "queueOffset": "x"})
    with pytest.raises(H.HeaderError, match=r"<maxMsgNums> is null"):
        H.parse_pull({**ext, "maxMsgNums": ""})
