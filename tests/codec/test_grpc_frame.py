"""codec.grpc_frame: gRPC's Length-Prefixed-Message read back from a body in any chunking, compressed messages,
the per-message limit, and `grpc-timeout`."""

from __future__ import annotations

import gzip
import zlib

import pytest

from codec.grpc_frame import MESSAGE_PREFIX, FrameError, MessageReader, first_message, frame, parse_timeout

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
