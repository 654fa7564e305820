"""gRPC over HTTP/2 (the PROTOCOL-HTTP2 document of grpc/grpc): the Length-Prefixed-Message (a compressed flag
byte, a 4-byte big-endian length, the message), the `grpc-timeout` header, and the status codes a server
answers in its `grpc-status` trailer. grpcio frames its own messages; this is for a server stack that hands the
raw HTTP/2 body to Python (server.grpc.asgi_endpoint on Envoy, bench.grpc_echo's ASGI candidates)."""

from __future__ import annotations

import enum
import struct
import zlib

MESSAGE_PREFIX = struct.Struct(">BI")  # compressed flag (0 = not), message length


class GrpcStatus(enum.IntEnum):
    """gRPC's status codes (grpc/grpc doc/statuscodes.md), the value of the `grpc-status` trailer."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class FrameError(ValueError):
    """A request body that is not a sequence of Length-Prefixed-Messages gRPC's server can read."""


def frame(message: bytes) -> bytes:
    """One uncompressed message with its prefix."""
    return MESSAGE_PREFIX.pack(0, len(message)) + message


def first_message(body: bytes) -> bytes:
    """The first message of a request body (an uncompressed unary request holds one)."""
    _flag, n = MESSAGE_PREFIX.unpack_from(body, 0)
    return body[MESSAGE_PREFIX.size:MESSAGE_PREFIX.size + n]


def only_message(body: bytes, max_bytes: int) -> bytes | None:
    """The message of a whole body that is exactly one uncompressed message of at most `max_bytes` (a unary
    request's usual body, handed over at once); None for any other body, which `MessageReader` (the
    reference) reads or refuses. tests/codec/test_grpc_frame.py holds the two equal."""
    if len(body) < 5 or body[0]:
        return None
    n = int.from_bytes(body[1:5], "big")
    if n != len(body) - 5 or n > max_bytes:
        return None
    return body[5:]


def decompress(payload: bytes, encoding: str) -> bytes:
    """A compressed message's bytes under the request's `grpc-encoding` (gzip or deflate)."""
    if encoding == "gzip":
        return zlib.decompress(payload, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompress(payload)
    raise FrameError(f"compressed message under grpc-encoding {encoding or 'identity'!r}")


class MessageReader:
    """Length-Prefixed-Messages out of a request body that arrives in chunks (a stream's, or a unary body
    split by HTTP/2 DATA frames). `max_bytes` bounds one message."""

    __slots__ = ("_buf", "encoding", "max_bytes")

    def __init__(self, encoding: str = "", max_bytes: int = 4 * 1024 * 1024) -> None:
        self._buf = b""
        self.encoding = encoding
        self.max_bytes = max_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """The messages `chunk` completes (uncompressed), in order."""
        buf = self._buf + chunk if self._buf else chunk
        out: list[bytes] = []
        pos, size, end = 0, MESSAGE_PREFIX.size, len(buf)
        while end - pos >= size:
            flag, n = MESSAGE_PREFIX.unpack_from(buf, pos)
            if n > self.max_bytes:
                raise FrameError(f"message of {n} bytes exceeds the limit of {self.max_bytes}")
            if end - pos - size < n:
                break
            payload = buf[pos + size:pos + size + n]
            out.append(decompress(payload, self.encoding) if flag else payload)
            pos += size + n
        self._buf = buf[pos:]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held (a body that ends with some is malformed)."""
        return len(self._buf)


_TIMEOUT_UNIT_S = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout(value: str) -> float:
    """`grpc-timeout` (TimeoutValue, at most 8 digits, then H M S m u n) in seconds."""
    digits, unit = value[:-1], value[-1:]
    if not digits.isdigit() or len(digits) > 8 or unit not in _TIMEOUT_UNIT_S:
        raise FrameError(f"grpc-timeout {value!r} is not 1-8 digits and one of H M S m u n")
    return int(digits) * _TIMEOUT_UNIT_S[unit]
