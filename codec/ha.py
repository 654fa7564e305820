"""RocketMQ 4.x HA stream frames (cluster-ha.md §2.3), sans-io.

Slave → master: a report, the slave's max CommitLog offset as int64 BE (8 bytes, back to back; the
master takes the last complete one it has). Master → slave: `[phyOffset int64][size int32][size bytes
of raw CommitLog]`, size 0 = heartbeat. No magic, version or checksum. Big-endian throughout.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from codec.buffers import BytesLike
from codec.errors import CodecError

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size  # 12
MAX_BODY = 64 << 20  # a body larger than this is not a CommitLog transfer (Apache caps at 32 KiB)


def encode_report(max_offset: int) -> bytes:
    return REPORT.pack(max_offset)


def encode_header(phys_offset: int, size: int) -> bytes:
    return HEADER.pack(phys_offset, size)


class ReportDecoder:
    """Master side: bytes from a slave → the newest complete report (None until 8 bytes came)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: BytesLike) -> int | None:
        buf = self._buf
        buf += data
        n = len(buf) - len(buf) % 8
        if n == 0:
            return None
        value: int
        (value,) = REPORT.unpack_from(buf, n - 8)
        del buf[:n]
        if value < 0:
            raise CodecError(f"negative HA report offset {value}")
        return value


class TransferDecoder:
    """Slave side: bytes from the master → [(phys_offset, body bytes)] (heartbeats have b"")."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: BytesLike) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        while n - pos >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(buf, pos)
            if size < 0 or size > MAX_BODY or offset < 0:
                raise CodecError(f"bad HA transfer header offset={offset} size={size}")
            if n - pos - HEADER_SIZE < size:
                break
            start = pos + HEADER_SIZE
            out.append((offset, bytes(buf[start:start + size])))
            pos = start + size
        if pos:
            del buf[:pos]
        return out


# ---- HA authentication (ours; off unless haAuthSecret is set on both sides) -------------------------------
# Master → slave, first and before any HA byte: `[magic 8 bytes][nonce 32 bytes]`; slave → master: HMAC-SHA256
# (key = the shared secret, message = AUTH_LABEL + nonce), 32 bytes, then its reports as usual. The master
# drops a peer whose proof is wrong or late; it sends nothing else before the proof checks out.
AUTH_MAGIC = b"DMQHAUTH"
AUTH_NONCE_SIZE = 32
AUTH_CHALLENGE_SIZE = len(AUTH_MAGIC) + AUTH_NONCE_SIZE  # 40
AUTH_PROOF_SIZE = 32
AUTH_LABEL = b"delaymq-ha-auth-v1:"


def encode_challenge(nonce: bytes) -> bytes:
    if len(nonce) != AUTH_NONCE_SIZE:
        raise ValueError(f"an HA challenge nonce is {AUTH_NONCE_SIZE} bytes, got {len(nonce)}")
    return AUTH_MAGIC + nonce


def decode_challenge(data: BytesLike) -> bytes:
    """The nonce of a complete challenge (AUTH_CHALLENGE_SIZE bytes); CodecError if it is not one."""
    raw = bytes(data)
    if len(raw) != AUTH_CHALLENGE_SIZE or not raw.startswith(AUTH_MAGIC):
        raise CodecError("the master did not send an HA authentication challenge (is haAuthSecret set on it?)")
    return raw[len(AUTH_MAGIC):]


def auth_proof(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, AUTH_LABEL + nonce, hashlib.sha256).digest()


def proof_matches(secret: bytes, nonce: bytes, proof: BytesLike) -> bool:
    return hmac.compare_digest(auth_proof(secret, nonce), bytes(proof))
