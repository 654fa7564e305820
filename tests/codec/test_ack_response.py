"""codec.ack_response.ok_frame agrees with its maintained reference, the generic encoder (ok_frame_reference),
byte for byte."""

from __future__ import annotations

import pytest

from codec.ack_response import ok_frame, ok_frame_reference
from codec.codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from codec.command import RemotingCommand
from codec.frame import FrameDecoder, encode_frame_bytes


@pytest.mark.parametrize("ser", [SERIALIZE_JSON, SERIALIZE_ROCKETMQ])
@pytest.mark.parametrize("opaque", [0, 1, 77, 2**31 - 1, 2**31, 2**32 - 1, -5])
def test_ok_frame_equals_encode_frame_bytes_of_the_response(ser, opaque):
    req = RemotingCommand.request(15, {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "3"})
    req.opaque, req.serialize_type = opaque, ser
    assert ok_frame(opaque, ser) == ok_frame_reference(opaque, ser) == encode_frame_bytes(req.response())
    [back] = FrameDecoder().feed(ok_frame(opaque, ser))
    assert back.is_response and back.code == 0 and back.ext_fields == {} and back.remark is None
