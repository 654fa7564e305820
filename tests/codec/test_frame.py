import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.buffers import BytesLike
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.frame import MAX_FRAME, FrameDecoder, decode_frame, encode_frame, encode_frame_bytes
from tests.codec.strategies import BOUNDED, commands
from tests.codec.test_command import same_header


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points + [len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


@BOUNDED
@given(st.lists(commands(), min_size=1, max_size=5), st.lists(st.integers(0, 10_000), max_size=12))
def test_frames_survive_any_chunking(cmds, cuts):
    stream = b"".join(encode_frame_bytes(c) for c in cmds)
    dec = FrameDecoder()
    got = []
    for chunk in split(stream, cuts):
        got += dec.feed(chunk)
    assert len(got) == len(cmds)
    for a, b in zip(cmds, got, strict=True):
        same_header(a, b)
        assert b.body == a.body
        assert b.serialize_type == a.serialize_type
    assert dec.buffered() == 0


@BOUNDED
@given(commands())
def test_type_byte_and_lengths(cmd):
    raw = encode_frame_bytes(cmd)
    total, word = struct.unpack_from(">ii", raw)
    assert total == len(raw) - 4
    assert word >> 24 == cmd.serialize_type
    back = decode_frame(raw[4:])
    same_header(cmd, back)
    assert back.body == cmd.body


def test_json_response_to_a_json_request_has_type_byte_zero():
    # C++ and ali-ons read the second int unmasked: a type byte of 1 would look like a 16 MiB header
    req = FrameDecoder().feed(encode_frame_bytes(RemotingCommand.request(34, {"x": 1})))[0]
    raw = encode_frame_bytes(req.response(0))
    assert raw[4] == 0
    req1 = RemotingCommand(code=34, serialize_type=1)
    assert encode_frame_bytes(req1.response(0))[4] == 1


def test_body_parts_are_passed_through_uncopied():
    backing = bytearray(b"0123456789" * 10)
    mv = memoryview(backing)
    parts: list[BytesLike] = [mv[0:30], mv[30:70], b"tail"]
    cmd = RemotingCommand(code=0, flag=1, body=parts)
    pieces = encode_frame(cmd)
    assert pieces[2] is parts[0] and pieces[3] is parts[1] and pieces[4] is parts[2]
    single = RemotingCommand(code=0, body=mv[5:9])
    assert encode_frame(single)[2] is single.body
    back = FrameDecoder().feed(b"".join(pieces))[0]
    assert back.body == bytes(backing[:70]) + b"tail"


def test_empty_body_adds_no_piece():
    assert len(encode_frame(RemotingCommand(code=1))) == 2
    assert len(encode_frame(RemotingCommand(code=1, body=[b"", b""]))) == 2


@pytest.mark.parametrize("length", [MAX_FRAME - 3, 1 << 30, 0x7FFFFFFF, -1, 0, 3])
def test_bad_length_prefix_is_refused_from_the_prefix_alone(length):
    dec = FrameDecoder()
    with pytest.raises(CodecError):
        dec.feed(struct.pack(">i", length))
    assert dec.buffered() == 0
    with pytest.raises(CodecError):  # poisoned: the stream cannot be resynchronised
        dec.feed(encode_frame_bytes(RemotingCommand(code=1)))


def test_prefix_split_across_feeds_is_refused_as_soon_as_complete():
    dec = FrameDecoder()
    assert dec.feed(b"\x7f\xff") == []
    with pytest.raises(CodecError):
        dec.feed(b"\xff\xff")


def test_largest_allowed_frame_is_accepted():
    body = bytes(MAX_FRAME - 4 - 200)
    raw = encode_frame_bytes(RemotingCommand(code=1, body=body))
    assert len(raw) <= MAX_FRAME
    dec = FrameDecoder()
    got = dec.feed(raw[:1000]) + dec.feed(raw[1000:])
    assert len(got) == 1 and len(got[0].body) == len(body)


def test_partial_frame_is_kept_and_compaction_keeps_order():
    frames = [encode_frame_bytes(RemotingCommand(code=i, body=bytes([i]) * 5000)) for i in range(60)]
    stream = b"".join(frames)
    dec = FrameDecoder()
    got = []
    for i in range(0, len(stream), 70_001):
        got += dec.feed(stream[i:i + 70_001])
    assert [c.code for c in got] == list(range(60))
    assert all(c.body == bytes([c.code]) * 5000 for c in got)


def test_small_max_frame():
    dec = FrameDecoder(max_frame=64)
    with pytest.raises(CodecError):
        dec.feed(encode_frame_bytes(RemotingCommand(code=1, body=bytes(100))))


@pytest.mark.parametrize("word", [(2 << 24) | 2, 0xFFFFFF, (0 << 24) | 100])
def test_bad_header_word_raises(word):
    with pytest.raises(CodecError):
        FrameDecoder().feed(struct.pack(">ii", 8, word) + b"{}\x00\x00")


@BOUNDED
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=6))
def test_arbitrary_bytes_raise_only_codec_error(data, cuts):
    dec = FrameDecoder()
    try:
        for chunk in split(data, cuts):
            dec.feed(chunk)
    except CodecError:
        pass
    assert dec.buffered() <= len(data)


@BOUNDED
@given(commands(), st.integers(0, 1000), st.binary(min_size=1, max_size=1))
def test_corrupted_frame_raises_only_codec_error(cmd, at, byte):
    raw = bytearray(encode_frame_bytes(cmd))
    raw[at % len(raw)] = byte[0]
    try:
        FrameDecoder().feed(bytes(raw))
    except CodecError:
        pass


def test_a_pinned_buffer_is_replaced_not_fatal():
    """A memoryview of the decoder's buffer that outlives a feed (garbage awaiting collection) must not
    make the next feed fail with BufferError: the decoder continues in a copy."""
    from codec.command import RemotingCommand
    from codec.frame import FrameDecoder, encode_frame_bytes

    frames = [encode_frame_bytes(RemotingCommand.request(15, {"consumerGroup": f"g{i}", "queueId": "1"}))
              for i in range(6)]
    stream = b"".join(frames)
    d = FrameDecoder()
    got = d.feed(stream[:len(frames[0]) + 7])  # one frame and a partial one: buffered
    pinned = memoryview(d._buf)  # noqa: F841 - held on purpose
    got += d.feed(stream[len(frames[0]) + 7:len(frames[0]) + 20])  # grows the pinned buffer
    got += d.feed(stream[len(frames[0]) + 20:])  # consumes everything: clears it
    pinned2 = memoryview(d._buf)  # noqa: F841
    got += d.feed(frames[0][:3])  # buffered partial frame into a pinned empty buffer
    got += d.feed(frames[0][3:])
    assert [c.ext_fields["consumerGroup"] for c in got] == ["g0", "g1", "g2", "g3", "g4", "g5", "g0"]
    assert d.unpinned >= 2


@BOUNDED
@given(st.lists(commands(), min_size=1, max_size=6), st.integers(1, 64))
def test_feed_decodes_as_decode_frame_the_reference(cmds, step):
    """FrameDecoder decodes JSON and ROCKETMQ frames inline: the same commands as decode_frame, whatever
    the chunking."""
    frames = [encode_frame_bytes(c) for c in cmds]
    want = [decode_frame(f[4:]) for f in frames]
    stream = b"".join(frames)
    dec = FrameDecoder()
    got = []
    for i in range(0, len(stream), step):
        got += dec.feed(stream[i:i + step])
    assert got == want
    assert FrameDecoder().feed(stream) == want


def test_a_budget_bounds_each_feed_and_the_first_frame_always_goes():
    """feed(data, budget): decoding stops before the frame that would take header bytes + FRAME_COST per
    frame past the budget (`more`), never before the first; `cost` is what the call decoded; feed(b"", ...)
    goes on from there; no budget decodes everything."""
    from codec.frame import FRAME_COST

    cmds = [RemotingCommand.request(10 + i, {"k": "v" * (100 * i)}) for i in range(6)]
    frames = [encode_frame_bytes(c) for c in cmds]
    hlens = [struct.unpack_from(">i", f, 4)[0] & 0xFFFFFF for f in frames]
    costs = [h + FRAME_COST for h in hlens]
    stream = b"".join(frames)
    dec = FrameDecoder()
    assert [c.code for c in dec.feed(stream)] == [c.code for c in cmds] and not dec.more
    assert dec.cost == sum(costs)
    budget = costs[0] + costs[1] + costs[2] - 1  # the third frame would go past it
    dec = FrameDecoder()
    got = dec.feed(stream, budget)
    assert [c.code for c in got] == [10, 11] and dec.more and dec.cost == costs[0] + costs[1]
    got = dec.feed(b"", 1)  # over budget at once: the first frame still goes
    assert [c.code for c in got] == [12] and dec.more and dec.cost == costs[2]
    got = dec.feed(b"", sum(costs))
    assert [c.code for c in got] == [13, 14, 15] and not dec.more and dec.cost == sum(costs[3:])
    assert dec.feed(b"", 0) == [] and not dec.more and dec.cost == 0
