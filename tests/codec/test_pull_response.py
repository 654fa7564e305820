"""codec.pull_response writes the very bytes its maintained reference, the generic path
(pull_response_frame_reference: cmd.response + encode_frame), writes."""

from hypothesis import given
from hypothesis import strategies as st

from codec.buffers import BytesLike
from codec.codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from codec.command import RemotingCommand
from codec.frame import decode_frame, encode_frame
from codec.pull_response import pull_response_frame, pull_response_frame_reference
from tests.codec.strategies import BOUNDED

STATUSES = ["FOUND", "NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL", "OFFSET_OVERFLOW_BADLY",
            "OFFSET_OVERFLOW_ONE", "OFFSET_TOO_SMALL", "NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE"]


offsets = st.integers(-(1 << 63), (1 << 63) - 1)
bodies = st.lists(st.binary(max_size=64).flatmap(
    lambda b: st.sampled_from([b, memoryview(b), bytearray(b)])), max_size=6)


@BOUNDED
@given(st.integers(-(1 << 31), (1 << 32) - 1), st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
       st.sampled_from([0, 1, 19, 20, 21]), st.one_of(st.sampled_from(STATUSES), st.text(max_size=20)),
       offsets, offsets, offsets, bodies)
def test_frame_equals_the_generic_response(opaque, ser, code, remark, nxt, lo, hi, body):
    pieces = pull_response_frame(opaque, ser, code, remark, nxt, lo, hi, body)
    got = b"".join(pieces)
    assert got == pull_response_frame_reference(opaque, ser, code, remark, nxt, lo, hi, body)
    # the body slices go out uncopied, as encode_frame's do
    assert [p for p in pieces[1:]] == [p for p in body if len(p)]
    assert all(a is b for a, b in zip(pieces[1:], [p for p in body if len(p)], strict=True))
    # the caller's byte count (the store's lookup) gives the same frame
    size = sum(memoryview(p).nbytes for p in body)
    assert b"".join(pull_response_frame(opaque, ser, code, remark, nxt, lo, hi, body, size)) == got


def test_decodes_back():
    body: list[BytesLike] = [memoryview(b"abc"), b"", b"defg"]
    for ser in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        got = b"".join(pull_response_frame(42, ser, 0, "FOUND", 17, 3, 99, body))
        cmd = decode_frame(got[4:])
        assert (cmd.code, cmd.opaque, cmd.is_response, cmd.serialize_type, cmd.remark) == (0, 42, True, ser, "FOUND")
        assert cmd.ext_fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": "17", "minOffset": "3",
                                  "maxOffset": "99"}
        assert cmd.body == b"abcdefg"
        req = RemotingCommand(11, opaque=42, serialize_type=ser)
        want = encode_frame(req.response(0, "FOUND", {"suggestWhichBrokerId": "0", "nextBeginOffset": "17",
                                                     "minOffset": "3", "maxOffset": "99"}, body))
        assert got == b"".join(want)


def test_remark_with_json_specials_and_a_lone_surrogate():
    for remark in ('q"uo\\te %d %s', "\ud800x", "é\n\t"):
        for ser in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
            got = b"".join(pull_response_frame(-5, ser, 20, remark, 1, 2, 3, []))
            assert got == pull_response_frame_reference(-5, ser, 20, remark, 1, 2, 3, [])
