"""The message types a topic's message.type attribute lets its route accept (server.grpc.backend.accepted_types,
the one declaration the broker's endpoint and delaymq-proxy both answer QueryRoute with)."""

from __future__ import annotations

from server.grpc.backend import accepted_types
from server.grpc.v2 import definition_pb2 as pb


def test_a_message_type_attribute_narrows_the_accepted_types_and_none_accepts_every_type() -> None:
    every = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
    assert accepted_types("DELAY") == (pb.DELAY,)
    assert accepted_types("FIFO") == (pb.FIFO,)
    assert accepted_types("TRANSACTION") == (pb.TRANSACTION,)
    assert accepted_types("NORMAL") == (pb.NORMAL,)
    for none in ("", "UNSPECIFIED", "LITE"):
        assert accepted_types(none) == every
