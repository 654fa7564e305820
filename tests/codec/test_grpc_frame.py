"""codec.grpc_frame: gRPC's Length-Prefixed-Message read back from a body in any chunking, compressed messages,
the per-message limit, and `grpc-timeout`."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.grpc_frame import (
    MESSAGE_PREFIX,
    FrameError,
    MessageReader,
    first_message,
    frame,
    only_message,
    parse_timeout,
)

MESSAGES = [b"", b"a", b"hello world" * 30, bytes(range(256))]


def test_every_split_of_a_body_gives_back_its_messages_in_order():
    body = b"".join(frame(m) for m in MESSAGES)
    for cut in range(len(body) + 1):
        r = MessageReader()
        got = r.feed(body[:cut]) + r.feed(body[cut:])
        assert got == MESSAGES, cut
        assert r.pending == 0
    r = MessageReader()
    assert [m for i in range(len(body)) for m in r.feed(body[i:i + 1])] == MESSAGES  # one byte at a time


def test_an_unfinished_message_is_held_and_counted_as_pending():
    r = MessageReader()
    assert r.feed(frame(b"abcdef")[:-2]) == []
    assert r.pending == MESSAGE_PREFIX.size + 4


def test_compressed_messages_are_decompressed_by_the_requests_encoding():
    for encoding, pack in (("gzip", gzip.compress), ("deflate", zlib.compress)):
        data = pack(b"payload" * 10)
        r = MessageReader(encoding)
        assert r.feed(MESSAGE_PREFIX.pack(1, len(data)) + data + frame(b"plain")) == [b"payload" * 10, b"plain"]
    with pytest.raises(FrameError, match="identity"):
        MessageReader("").feed(MESSAGE_PREFIX.pack(1, 1) + b"x")


def test_a_message_over_the_limit_is_refused_before_it_is_buffered():
    with pytest.raises(FrameError, match="exceeds"):
        MessageReader(max_bytes=10).feed(MESSAGE_PREFIX.pack(0, 11))


def test_first_message_of_a_unary_body():
    assert first_message(frame(b"one") + frame(b"two")) == b"one"


def test_grpc_timeout_units_and_refusals():
    assert parse_timeout("1H") == 3600
    assert parse_timeout("2M") == 120
    assert parse_timeout("3S") == 3
    assert parse_timeout("2999m") == pytest.approx(2.999)
    assert parse_timeout("5u") == pytest.approx(5e-6)
    assert parse_timeout("99999999n") == pytest.approx(0.099999999)
    for bad in ("", "S", "123456789S", "10x", "-1S", "1.5S"):
        with pytest.raises(FrameError):
            parse_timeout(bad)


def _reference(body: bytes, max_bytes: int) -> list[bytes] | str:
    r = MessageReader("", max_bytes)
    try:
        got = r.feed(body)
    except FrameError:
        return "FrameError"
    return got if not r.pending else "pending"


def _agree(body: bytes, max_bytes: int) -> None:
    """`only_message` answers only a body the reference reads as exactly one message, and answers that one."""
    fast = only_message(body, max_bytes)
    if fast is not None:
        assert _reference(body, max_bytes) == [fast]
    else:
        ref = _reference(body, max_bytes)
        assert not (isinstance(ref, list) and len(ref) == 1 and body[:1] == b"\0"), (body, ref)


def test_only_message_takes_exactly_one_uncompressed_message_within_the_limit():
    for m in MESSAGES:
        assert only_message(frame(m), 1 << 20) == m
        _agree(frame(m), 1 << 20)
    for body in [b"", b"\0\0\0\0", frame(b"ab") + frame(b"c"), frame(b"abc")[:-1], frame(b"abc") + b"x",
                 MESSAGE_PREFIX.pack(1, 3) + b"abc", frame(b"x" * 11)]:
        assert only_message(body, 10) is None
        _agree(body, 10)


@given(st.lists(st.binary(max_size=40), max_size=3), st.binary(max_size=8), st.integers(0, 1), st.integers(0, 64))
def test_only_message_and_the_reader_agree(messages, tail, flag, max_bytes):
    body = b"".join(MESSAGE_PREFIX.pack(flag, len(m)) + m for m in messages) + tail
    _agree(body, max_bytes)
    _agree(tail, max_bytes)
