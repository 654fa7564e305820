"""SendMessage's hot path builds the send's SendMessageHeader directly (`service_send.send_header`); the
reference is the SEND_MESSAGE request a 4.x producer would make (`service_send.send_command`) read back by
the send path's own parser (`server.header_parsers.parse_send`). They must give the same header for every
kind of 5.x message the endpoint converts."""

from __future__ import annotations

import pytest

from codec.properties import properties_to_string
from server.grpc import convert
from server.grpc.service_send import send_command, send_header
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
