"""SendMessage's hot path builds the send's SendMessageHeader directly (`service_send.send_header`); the
reference is the SEND_MESSAGE request a 4.x producer would make (`service_send.send_command`) read back by
the send path's own parser (`server.header_parsers.parse_send`). They must give the same header for every
kind of 5.x message the endpoint converts."""

from __future__ import annotations

import pytest

from codec.properties import properties_to_string
from server.grpc import convert
from server.grpc.service_send import SentOk, send_command, send_header, send_response, send_response_reference
from server.grpc.status import Code, status
from server.grpc.v2 import definition_pb2 as pb
from server.header_parsers import parse_send

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
    born = NOW - 3
    cmd = send_command("FastHeaderTopic", qid, props, sys_flag, msg.body, born, 8)
    fast = send_header("FastHeaderTopic", qid, properties_to_string(props), sys_flag, born, 8)
    assert fast.__dict__ == parse_send(cmd.ext_fields, False).__dict__
    assert type(fast) is type(parse_send(cmd.ext_fields, False))


def test_a_message_without_properties_has_none_as_the_parser_gives() -> None:
    cmd = send_command("T", 0, {}, 0, b"x", NOW, 4)
    assert send_header("T", 0, "", 0, NOW, 4).__dict__ == parse_send(cmd.ext_fields, False).__dict__


@pytest.mark.parametrize("entries", [
    [SentOk("01AA", 0, "", "")],
    [SentOk("01AB", 12345678901, "0A0B-7", "djEgVCBiIDEgMDFBQg==")],
    [SentOk("01AC", 3, "", "handle")],
    [status(Code.MESSAGE_BODY_EMPTY, "message body is empty")],
    [SentOk("01AD", 1, "", ""), status(Code.ILLEGAL_MESSAGE_TAG, "bad tag")],
    [SentOk("01AE", 1, "", ""), SentOk("01AF", 2, "", "")],
    [],
])
def test_the_response_from_a_template_is_the_constructed_reference(entries) -> None:
    fast, ref = send_response(entries), send_response_reference(entries)
    assert fast == ref
    assert fast.SerializeToString(deterministic=True) == ref.SerializeToString(deterministic=True)


def test_a_template_response_is_a_fresh_message_each_time() -> None:
    a = send_response([SentOk("01A1", 1, "", "")])
    b = send_response([SentOk("01B2", 2, "", "")])
    assert (a.entries[0].message_id, b.entries[0].message_id) == ("01A1", "01B2")
    assert a.status.code == Code.OK and a.entries[0].status.message == "OK"
