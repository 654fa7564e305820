"""codec.send_response writes the very bytes its maintained reference, the generic path
(SendResponseFrames.frame_reference: cmd.response + encode_frame), writes."""

from hypothesis import given
from hypothesis import strategies as st

from codec.codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from codec.frame import decode_frame
from codec.msgid import offset_msg_id
from codec.send_response import SendResponseFrames
from tests.codec.strategies import BOUNDED

EXTRA = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}


@BOUNDED
@given(st.sampled_from([("10.1.2.3", 10911), ("127.0.0.1", 1), ("::1", 10911), ("fe80::1:2", 65535)]),
       st.integers(-(1 << 31), (1 << 32) - 1), st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
       st.integers(0, (1 << 63) - 1), st.integers(0, (1 << 31) - 1), st.integers(0, (1 << 63) - 1))
def test_frame_equals_the_generic_response(host, opaque, ser, phys, qid, qoff):
    prefix = offset_msg_id(host[0], host[1], 0)[:-16]
    enc = SendResponseFrames(prefix, EXTRA)
    msg_id = offset_msg_id(host[0], host[1], phys)
    assert enc.msg_id(phys) == msg_id
    got = enc.frame(opaque, ser, phys, qid, qoff)
    assert got == enc.frame_reference(opaque, ser, phys, qid, qoff)
    cmd = decode_frame(got[4:])
    assert (cmd.code, cmd.is_response, cmd.serialize_type) == (0, True, ser)
    assert cmd.ext_fields["queueOffset"] == str(qoff)


def test_extra_fields_with_json_specials():
    extra = {"A": 'q"uo\\te', "B%d": "100%"}
    enc = SendResponseFrames("0A010203", extra)
    for ser in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        assert enc.frame(7, ser, 5, 1, 2) == enc.frame_reference(7, ser, 5, 1, 2)
