"""codec.ha: RocketMQ 4.x HA frames, any chunking; the master keeps the newest complete report."""

import random
import struct

import pytest

from codec.errors import CodecError
from codec.ha import ReportDecoder, TransferDecoder, encode_header, encode_report


def test_reports_any_chunking_newest_complete_wins():
    stream = b"".join(encode_report(v) for v in (0, 4096, 1 << 40))
    d = ReportDecoder()
    assert d.feed(stream[:5]) is None
    assert d.feed(stream[5:12]) == 0  # 12 bytes in: one complete report (the 2nd is partial)
    assert d.feed(stream[12:]) == 1 << 40  # the rest: two complete ones, the newest wins
    with pytest.raises(CodecError):
        ReportDecoder().feed(struct.pack(">q", -1))


def test_transfer_frames_survive_any_chunking():
    frames = [(0, b""), (0, b"a" * 100), (100, b"b" * 7), (107, b"")]
    stream = b"".join(encode_header(o, len(b)) + b for o, b in frames)
    rng = random.Random(7)
    for _ in range(50):
        d, got, pos = TransferDecoder(), [], 0
        while pos < len(stream):
            n = rng.randint(1, 20)
            got += d.feed(stream[pos:pos + n])
            pos += n
        assert got == frames


def test_bad_transfer_header_is_an_error():
    with pytest.raises(CodecError):
        TransferDecoder().feed(struct.pack(">qi", 0, -5))
    with pytest.raises(CodecError):
        TransferDecoder().feed(struct.pack(">qi", -1, 0))
