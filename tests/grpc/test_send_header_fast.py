"""SendMessage's hot paths and their references.

The in-broker backend builds a send's SendMessageHeader directly (`local_backend.send_header`); the reference
is the SEND_MESSAGE request a 4.x producer would make (`local_backend.send_command`) read back by the send
path's own parser (`server.header_parsers.parse_send`): the same header for every kind of 5.x message.
The usual answer (one message, stored) comes from a serialized template (`convert.sent_ok_response`): the
same message as building it field by field (`convert.sent_ok_response_reference`). A name or value is checked
for control characters by `str.isprintable` first (`convert._has_control`): the same verdict as the
per-character reference (`convert.has_control_reference`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.grpc import convert
from server.grpc.backend import Outgoing
from server.grpc.local_backend import send_command, send_header
from server.grpc.status import Code, GrpcError
from server.grpc.v2 import definition_pb2 as pb
from server.header_parsers import parse_send
from tests.codec.strategies import BOUNDED

LEVELS = [1000, 5000, 10000]
NOW = 1_700_000_000_000


def _message(kind: str) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name="FastHeaderTopic"), body=b"body")
    sp = m.system_properties
    sp.message_id = "01AABBCCDDEEFF00112233445566"
    sp.message_type = pb.NORMAL
    if kind == "tagged":
        sp.tag = "TagA"
        sp.keys.extend(["k1", "k2"])
        m.user_properties["region"] = "eu"
        m.user_properties["üñí"] = "värde"
    elif kind == "fifo":
        sp.message_type = pb.FIFO
        sp.message_group = "group-1"
    elif kind == "delay":
        sp.message_type = pb.DELAY
        sp.delivery_timestamp.FromMilliseconds(NOW + 5000)
    elif kind == "transaction":
        sp.message_type = pb.TRANSACTION
        sp.orphaned_transaction_recovery_duration.seconds = 30
    elif kind == "gzip":
        sp.body_encoding = pb.GZIP
    return m


@pytest.mark.parametrize("kind", ["plain", "tagged", "fifo", "delay", "transaction", "gzip"])
@pytest.mark.parametrize("timer_wheel", [True, False])
@pytest.mark.parametrize("qid", [-1, 0, 7])
def test_direct_header_is_the_parsed_reference(kind: str, timer_wheel: bool, qid: int) -> None:
    msg = _message(kind)
    props, sys_flag = convert.to_properties(msg, "FastHeaderTopic", NOW, timer_wheel, LEVELS)
    m = Outgoing(props, sys_flag, msg.body, NOW - 3)
    cmd = send_command("FastHeaderTopic", qid, m, 8)
    fast = send_header("FastHeaderTopic", qid, m, 8)
    assert fast.__dict__ == parse_send(cmd.ext_fields, False).__dict__
    assert type(fast) is type(parse_send(cmd.ext_fields, False))


def test_a_message_without_properties_has_none_as_the_parser_gives() -> None:
    m = Outgoing({}, 0, b"x", NOW)
    assert send_header("T", 0, m, 4).__dict__ == parse_send(send_command("T", 0, m, 4).ext_fields, False).__dict__


@pytest.mark.parametrize("fields", [
    ("01AA", 0, "", ""),
    ("01AB", 12345678901, "0A0B-7", "djEgVCBiIDEgMDFBQg=="),
    ("01AC", 3, "", "handle"),
    ("", 0, "", ""),
])
def test_the_response_from_a_template_is_the_constructed_reference(fields) -> None:
    fast, ref = convert.sent_ok_response(*fields), convert.sent_ok_response_reference(*fields)
    assert fast == ref
    assert fast.SerializeToString(deterministic=True) == ref.SerializeToString(deterministic=True)


def test_a_template_response_is_a_fresh_message_each_time() -> None:
    a = convert.sent_ok_response("01A1", 1, "", "")
    b = convert.sent_ok_response("01B2", 2, "", "")
    assert (a.entries[0].message_id, b.entries[0].message_id) == ("01A1", "01B2")
    assert a.status.code == Code.OK and a.entries[0].status.message == "OK"


@BOUNDED
@given(st.text(alphabet=st.characters(max_codepoint=0x3000), max_size=24)
       | st.sampled_from(["", "\t", "a\tb", "TagA", "k\x01", "\x1f", "\x7f", "\u2028", "\xa0", "värde"]))
def test_the_control_character_check_is_the_reference(text: str) -> None:
    assert convert._has_control(text) == convert.has_control_reference(text)


@pytest.mark.parametrize("bad", ["Tag\x01", "Tag\n", "\x00"])
def test_a_tag_with_a_control_character_is_refused(bad: str) -> None:
    msg = _message("plain")
    msg.system_properties.tag = bad
    with pytest.raises(GrpcError) as e:
        convert.to_properties(msg, "FastHeaderTopic", NOW, True, LEVELS)
    assert e.value.code == Code.ILLEGAL_MESSAGE_TAG
