import inspect
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.codes import SEND_MESSAGE_REQUEST_HEADER_V2, create_send_message_request_header_v2
from server import header_codegen
from server import header_parsers as P
from server import headers as H
from server.header_spec import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    SMALL_INTS,
    USUAL_BOOLS,
    Header,
    HeaderError,
    HeaderSpec,
    Long,
)


def test_v2_short_names_map_to_v1_fields():
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": 4, "e": "-1", "f": 0, "g": "1700000000000", "h": 0,
           "i": "TAGS\x01x\x02", "m": "true", "k": False}
    h = H.SEND_MESSAGE.parse(ext, v2=True)
    assert (h.producerGroup, h.topic, h.defaultTopicQueueNums, h.queueId) == ("PG", "T", 4, -1)
    assert h.bornTimestamp == 1700000000000 and h.batch is True and h.unitMode is False
    assert h.reconsumeTimes is None


def test_send_spec_takes_its_v2_names_from_the_codec_table():
    """One declaration of SendMessageRequestHeaderV2: the spec's letters are codec's, and a V2 ext built
    from long names with codec's helper parses into the record the long-name (SEND_MESSAGE) ext gives."""
    assert [(name, short) for name, _, _, short in H.SEND_MESSAGE.fields] == [
        (name, SEND_MESSAGE_REQUEST_HEADER_V2[name]) for name, *_ in H.SEND_MESSAGE.fields]
    assert sorted(SEND_MESSAGE_REQUEST_HEADER_V2.values()) == list("abcdefghijklmn")
    long_form = {"producerGroup": "PG", "topic": "%RETRY%CG", "defaultTopic": "TBW102",
                 "defaultTopicQueueNums": "4", "queueId": "3", "sysFlag": "0", "bornTimestamp": "1700000000000",
                 "flag": "0", "properties": "WAIT\x01true", "reconsumeTimes": "2", "unitMode": "false",
                 "maxReconsumeTimes": "16", "batch": "true", "bname": "broker-a"}
    v2 = create_send_message_request_header_v2(long_form)
    assert v2 == {"a": "PG", "b": "%RETRY%CG", "c": "TBW102", "d": "4", "e": "3", "f": "0",
                  "g": "1700000000000", "h": "0", "i": "WAIT\x01true", "j": "2", "k": "false", "l": "16",
                  "m": "true", "n": "broker-a"}
    assert P.parse_send(v2, True).__dict__ == H.SEND_MESSAGE.parse(long_form).__dict__
    assert P.parse_send(long_form, False).__dict__ == H.SEND_MESSAGE.parse(long_form).__dict__
    with pytest.raises(TypeError, match="no V2 short name for onlyHere"):
        HeaderSpec(type("Odd", (Header,), {"__annotations__": {"topic": str, "onlyHere": str}}),
                     v2_names=SEND_MESSAGE_REQUEST_HEADER_V2)
    with pytest.raises(KeyError):
        create_send_message_request_header_v2({"group": "PG"})


def test_missing_required_field_is_named():
    with pytest.raises(HeaderError, match=r"the custom field <consumerGroup> is null"):
        H.GROUP_TOPIC_QUEUE.parse({"topic": "T", "queueId": "1"})
    with pytest.raises(HeaderError, match=r"<consumerGroup> is null"):  # empty counts as missing
        H.GROUP_TOPIC_QUEUE.parse({"consumerGroup": "", "topic": "T", "queueId": "1"})


def test_unparsable_number_names_the_field():
    with pytest.raises(HeaderError, match="queueId"):
        H.TOPIC_QUEUE.parse({"topic": "T", "queueId": "x1"})
    with pytest.raises(HeaderError, match="queueId"):
        H.TOPIC_QUEUE.parse({"topic": "T", "queueId": str(1 << 40)})  # int overflow


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_long_fields_round_trip(v):
    assert H.VIEW_MESSAGE.parse({"offset": str(v)}).offset == v


@given(st.text(max_size=20))
def test_garbage_never_raises_anything_but_header_error(s):
    try:
        H.PULL_MESSAGE.parse({k: s for k, *_ in H.PULL_MESSAGE.fields})
    except HeaderError:
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
    except HeaderError as e:
        return ("error", str(e))


@given(st.dictionaries(st.sampled_from(_SEND_KEYS + "x"), _send_values), st.booleans())
def test_parse_send_equals_the_generic_send_spec(ext, v2):
    """The send fast lane gives the generic parse's Header, or its HeaderError, for any ext."""
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _outcome(P.parse_send, ext, v2) == _outcome(H.SEND_MESSAGE.parse, ext, v2)


@given(st.fixed_dictionaries({k: _send_values for k in _SEND_KEYS}))
def test_parse_send_equals_the_generic_send_spec_all_keys(ext):
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _outcome(P.parse_send, ext, True) == _outcome(H.SEND_MESSAGE.parse, ext, True)


def test_parse_send_fast_lane_on_a_java_send():
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
           "i": "WAIT\x01true", "j": "0", "k": "false", "l": "16", "m": "false"}
    assert P.parse_send(ext, True).__dict__ == H.SEND_MESSAGE.parse(ext, True).__dict__


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
    assert _outcome(P.parse_send, ext, True) == _outcome(H.SEND_MESSAGE.parse, ext, True)


_PULL_KEYS = [name for name, *_ in H.PULL_MESSAGE.fields]
_pull_num = st.one_of(st.sampled_from(["0", "4", "-1", "32", " 7 ", "1_0", "+3", "007", "x", "", str(1 << 31),
                                       str(-(1 << 31) - 1), str((1 << 63) - 1), str(1 << 63), "1024", "1025"]),
                      st.integers(-(1 << 64), 1 << 64).map(str))


def _pull_outcome(fn, ext):
    """The Header's fields with their types and order, or the HeaderError text."""
    try:
        return ("ok", [(k, type(v), v) for k, v in fn(ext).__dict__.items()])
    except HeaderError as e:
        return ("error", str(e))


@given(st.dictionaries(st.sampled_from(_PULL_KEYS + ["x"]), st.one_of(_send_values, _pull_num)))
def test_parse_pull_equals_the_generic_pull_spec(ext):
    """The pull fast lane gives the generic parse's Header, or its HeaderError, for any ext."""
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _pull_outcome(P.parse_pull, ext) == _pull_outcome(H.PULL_MESSAGE.parse, ext)


_pull_mostly_valid = st.fixed_dictionaries(
    {"consumerGroup": st.sampled_from(["CG", " ", ""]), "topic": st.sampled_from(["T", "%RETRY%CG"]),
     "queueId": _pull_num, "queueOffset": _pull_num, "maxMsgNums": _pull_num, "sysFlag": _pull_num,
     "commitOffset": _pull_num, "suspendTimeoutMillis": _pull_num, "subVersion": _pull_num},
    optional={"subscription": st.sampled_from(["", "*", "a || b", 5]),
              "expressionType": st.sampled_from(["", "TAG", "SQL92", None, True])})


@given(_pull_mostly_valid)
def test_parse_pull_equals_the_generic_pull_spec_mostly_valid(ext):
    assert _pull_outcome(P.parse_pull, ext) == _pull_outcome(H.PULL_MESSAGE.parse, ext)


def test_parse_pull_fast_lane_on_a_java_pull():
    ext = {"consumerGroup": "CG", "topic": "T", "queueId": "3", "queueOffset": "1700000", "maxMsgNums": "32",
           "sysFlag": "6", "commitOffset": "1699990", "suspendTimeoutMillis": "15000", "subscription": "*",
           "subVersion": "1763938000123", "expressionType": "TAG"}
    assert _pull_outcome(P.parse_pull, ext) == _pull_outcome(H.PULL_MESSAGE.parse, ext)
    assert P.parse_pull(ext).subVersion == 1763938000123
    with pytest.raises(HeaderError, match=r"<queueOffset> is not a valid long"):
        P.parse_pull({**ext, "queueOffset": "x"})
    with pytest.raises(HeaderError, match=r"<maxMsgNums> is null"):
        P.parse_pull({**ext, "maxMsgNums": ""})


# ---- the straight-line parsers are generated from the declaration, not a second copy of it ----------

def _no_fallback(*args):
    raise AssertionError(f"the usual shape fell back to the generic parse: {args!r}")


def _generated(spec, v2=False, fallback=None):
    """What `make headers` would write for `spec`, compiled here (for declarations only a test makes)."""
    source = header_codegen.parser_source(spec, "parse", v2, "_fallback")
    namespace = {"_fallback": fallback or spec.parse, spec.record.__name__: spec.record, "INT_MIN": INT_MIN,
                 "INT_MAX": INT_MAX, "LONG_MIN": LONG_MIN, "LONG_MAX": LONG_MAX, "SMALL_INTS": SMALL_INTS,
                 "USUAL_BOOLS": USUAL_BOOLS, "Mapping": Mapping, "Any": Any}
    exec(compile(source, f"<generated parse of {spec.record.__name__}>", "exec"), namespace)
    return namespace["parse"]


_JAVA_SEND = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
              "i": "WAIT\x01true", "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a"}
_JAVA_PULL = {"consumerGroup": "CG", "topic": "T", "queueId": "3", "queueOffset": "1700000", "maxMsgNums": "32",
              "sysFlag": "6", "commitOffset": "1699990", "suspendTimeoutMillis": "15000", "subscription": "*",
              "subVersion": "1763938000123", "expressionType": "TAG", "bname": "broker-a"}


def test_hot_path_parsers_read_exactly_the_declared_fields():
    """parse_send / parse_pull are the specs' generated parsers: on a Java client's header they take the
    fast lane (no fallback) and fill every declared field, in declaration order, as the spec does."""
    send = _generated(H.SEND_MESSAGE, True, _no_fallback)(_JAVA_SEND, True)
    assert list(send.__dict__) == [name for name, *_ in H.SEND_MESSAGE.fields]
    assert send.__dict__ == H.SEND_MESSAGE.parse(_JAVA_SEND, True).__dict__ == P.parse_send(_JAVA_SEND, True).__dict__
    pull = _generated(H.PULL_MESSAGE, False, _no_fallback)(_JAVA_PULL)
    assert list(pull.__dict__) == [name for name, *_ in H.PULL_MESSAGE.fields]
    assert _pull_outcome(lambda e: pull, _JAVA_PULL) == _pull_outcome(H.PULL_MESSAGE.parse, _JAVA_PULL)
    assert _pull_outcome(P.parse_pull, _JAVA_PULL) == _pull_outcome(H.PULL_MESSAGE.parse, _JAVA_PULL)
    # the generated code is an ordinary module: inspect (and tracebacks) find its text
    assert "topic = _get('b')" in inspect.getsource(P.parse_send)
    assert "subVersion = _get('subVersion')" in inspect.getsource(P.parse_pull)


class _SendWithBrokerName(H.SendMessageHeader):
    """SendMessageRequestHeaderV2's n (bname, the broker name), which the broker does not read: one more
    declared field."""

    bname: str | None


class _EveryKind(Header):
    name: str
    count: int
    offset: Long
    enabled: bool
    note: str | None
    limit: int | None
    since: Long | None
    strict: bool | None


def test_a_field_added_to_the_declaration_is_read_by_the_generated_parser():
    spec = HeaderSpec(_SendWithBrokerName, v2_names=SEND_MESSAGE_REQUEST_HEADER_V2)
    h = _generated(spec, True, _no_fallback)(_JAVA_SEND, True)
    assert h.bname == "broker-a" and h.topic == "T" and h.bornTimestamp == 1700000000000
    assert h.__dict__ == spec.parse(_JAVA_SEND, True).__dict__
    every = HeaderSpec(_EveryKind)
    ext = {"name": "n", "count": "7", "offset": str(1 << 40), "enabled": "true", "note": "x", "limit": "2000",
           "since": "-3", "strict": "false"}
    e = _generated(every, False, _no_fallback)(ext)
    assert e.__dict__ == every.parse(ext).__dict__ == {
        "name": "n", "count": 7, "offset": 1 << 40, "enabled": True, "note": "x", "limit": 2000, "since": -3,
        "strict": False}
    assert _generated(every, False, _no_fallback)({**ext, "note": "", "limit": "", "strict": ""}).__dict__ == {
        "name": "n", "count": 7, "offset": 1 << 40, "enabled": True, "note": None, "limit": None, "since": -3,
        "strict": None}


_EVERY_KIND = HeaderSpec(_EveryKind)
_EVERY_KIND_FAST = _generated(_EVERY_KIND)


@given(st.dictionaries(st.sampled_from([name for name, *_ in _EVERY_KIND.fields] + ["x"]),
                       st.one_of(_send_values, _pull_num)))
def test_generated_parser_equals_the_generic_spec_for_every_kind(ext):
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _pull_outcome(_EVERY_KIND_FAST, ext) == _pull_outcome(_EVERY_KIND.parse, ext)


_bool_text = st.sampled_from(["", "true", "false", "True", "1", "yes", " true"])
_valid_num = st.integers(-(1 << 31), (1 << 31) - 1).map(str)


@given(st.fixed_dictionaries(
    {"name": st.sampled_from(["n", "n", "", " "]), "count": st.one_of(_valid_num, _pull_num),
     "offset": st.one_of(_valid_num, _pull_num), "enabled": st.one_of(st.sampled_from(["true", "false"]), _bool_text)},
    optional={"note": st.sampled_from(["", "x", 5]), "limit": st.one_of(_valid_num, _pull_num),
              "since": st.one_of(_valid_num, _pull_num), "strict": _bool_text}))
def test_generated_parser_equals_the_generic_spec_for_every_kind_mostly_valid(ext):
    assert _pull_outcome(_EVERY_KIND_FAST, ext) == _pull_outcome(_EVERY_KIND.parse, ext)


def test_generated_parser_refuses_what_it_cannot_write():
    class Clash(Header):
        ext: str

    with pytest.raises(TypeError, match="Clash.ext"):
        _generated(HeaderSpec(Clash))
