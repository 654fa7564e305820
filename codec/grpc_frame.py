"""gRPC's Length-Prefixed-Message (gRPC over HTTP/2): a compressed flag byte, a 4-byte big-endian length,
the message. grpcio frames its own messages; this is for a server stack that hands the raw HTTP/2 body
to Python (bench.grpc_echo's ASGI candidate)."""

from __future__ import annotations

import struct

MESSAGE_PREFIX = struct.Struct(">BI")  # compressed flag (0 = not), message length


def frame(message: bytes) -> bytes:
    """One uncompressed message with its prefix."""
    return MESSAGE_PREFIX.pack(0, len(message)) + message


def first_message(body: bytes) -> bytes:
    """The first message of a request body (an uncompressed unary request holds one)."""
    _flag, n = MESSAGE_PREFIX.unpack_from(body, 0)
    return body[MESSAGE_PREFIX.size:MESSAGE_PREFIX.size + n]
