"""codec.autoswitch_ha: RocketMQ 5's AutoSwitch HA frames and epoch file. Golden bytes are written out
field by field from the layouts in Apache 5.1.3's AutoSwitchHAClient / AutoSwitchHAConnection
(cluster-ha.md §4.6); every frame survives any chunking; the epoch file round-trips and refuses a
wrong count or CRC."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.autoswitch_ha import (
    EpochEntry,
    MasterFrameDecoder,
    MasterHandshake,
    MasterTransfer,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    decode_epoch_file,
    encode_epoch_file,
    encode_master_handshake,
    encode_master_transfer,
    encode_slave_ack,
    encode_slave_handshake,
)
from codec.errors import CodecError


def test_slave_frames_golden() -> None:
    # state HANDSHAKE(1) | isSyncFromLastFile=1 (short) | isAsyncLearner=0 (short) | slaveBrokerId=2 (long)
    assert encode_slave_handshake(SlaveHandshake(2, True, False)).hex() == (
        "00000001" "0001" "0000" "0000000000000002")
    # state TRANSFER(2) | maxPhyOffset (long)
    assert encode_slave_ack(0x1_0000_0001).hex() == "00000002" "0000000100000001"


def test_master_frames_golden() -> None:
    h = MasterHandshake(4096, 3, (EpochEntry(1, 0), EpochEntry(3, 2048)))
    # state 1 | bodySize 24 | maxPhyOffset 4096 | lastEpoch 3 | (1, 0) | (3, 2048)
    assert encode_master_handshake(h).hex() == (
        "00000001" "00000018" "0000000000001000" "00000003"
        "00000001" "0000000000000000" "00000003" "0000000000000800")
    t = MasterTransfer(2048, 3, 2048, 1024, b"\xab\xcd")
    # state 2 | bodySize 2 | startOffset | epoch | epochStartOffset | confirmOffset | data
    assert encode_master_transfer(t).hex() == (
        "00000002" "00000002" "0000000000000800" "00000003" "0000000000000800" "0000000000000400" "abcd")


def test_epoch_file_golden() -> None:
    # the bytes Apache 5.1.3's own CheckpointFile.write wrote for these two entries (run once with its jars)
    text = encode_epoch_file([EpochEntry(1, 0), EpochEntry(3, 2048)])
    assert text == "2\n1516950403\n1-0\n3-2048\n"
    assert decode_epoch_file(text) == [EpochEntry(1, 0), EpochEntry(3, 2048)]
    assert decode_epoch_file("2\n0\n1-0\n3-2048\n") == [EpochEntry(1, 0), EpochEntry(3, 2048)]  # CRC 0: unchecked
    assert decode_epoch_file("2\r\n1516950403\r\n1-0\r\n3-2048\r\n") == [EpochEntry(1, 0), EpochEntry(3, 2048)]


@pytest.mark.parametrize("text", ["", "2\n1516950403\n1-0\n", "2\n12345\n1-0\n3-2048\n", "x\n0\n", "1\n0\n1-y\n"])
def test_epoch_file_refuses_damage(text: str) -> None:
    with pytest.raises(CodecError):
        decode_epoch_file(text)


epochs = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**62)), max_size=20).map(
    lambda xs: [EpochEntry(e, o) for e, o in xs])


@given(epochs)
def test_epoch_file_round_trip(entries: list[EpochEntry]) -> None:
    assert decode_epoch_file(encode_epoch_file(entries)) == entries


slave_frames = st.lists(st.one_of(
    st.builds(SlaveHandshake, st.integers(-2**63, 2**63 - 1), st.booleans(), st.booleans()),
    st.builds(SlaveAck, st.integers(0, 2**63 - 1))), max_size=10)
master_frames = st.lists(st.one_of(
    st.builds(MasterHandshake, st.integers(-1, 2**62), st.integers(-1, 2**31 - 1), epochs.map(tuple)),
    st.builds(MasterTransfer, st.integers(-1, 2**62), st.integers(-1, 2**31 - 1), st.integers(0, 2**62),
              st.integers(0, 2**62), st.binary(max_size=64))), max_size=10)


def _chunks(stream: bytes, seed: int) -> list[bytes]:
    rng, out, pos = random.Random(seed), [], 0
    while pos < len(stream):
        n = rng.randint(1, 40)
        out.append(stream[pos:pos + n])
        pos += n
    return out


@given(slave_frames, st.integers(0, 1000))
def test_slave_frames_round_trip_any_chunking(frames: list[SlaveHandshake | SlaveAck], seed: int) -> None:
    stream = b"".join(encode_slave_handshake(f) if isinstance(f, SlaveHandshake) else encode_slave_ack(f.max_offset)
                      for f in frames)
    d = SlaveFrameDecoder()
    got = [x for c in _chunks(stream, seed) for x in d.feed(c)]
    assert got == frames


@given(master_frames, st.integers(0, 1000))
def test_master_frames_round_trip_any_chunking(frames: list[MasterHandshake | MasterTransfer], seed: int) -> None:
    stream = b"".join(encode_master_handshake(f) if isinstance(f, MasterHandshake) else encode_master_transfer(f)
                      for f in frames)
    d = MasterFrameDecoder()
    got = [x for c in _chunks(stream, seed) for x in d.feed(c)]
    assert got == frames


def test_unknown_states_are_errors() -> None:
    with pytest.raises(CodecError):
        SlaveFrameDecoder().feed(b"\x00\x00\x00\x03" + bytes(12))
    with pytest.raises(CodecError):
        MasterFrameDecoder().feed(b"\x00\x00\x00\x00" + bytes(16))
    with pytest.raises(CodecError):  # a handshake body that is not whole entries
        MasterFrameDecoder().feed(b"\x00\x00\x00\x01\x00\x00\x00\x05" + bytes(12))
    with pytest.raises(CodecError):
        SlaveFrameDecoder().feed(encode_slave_ack(0)[:4] + b"\xff" * 8)
