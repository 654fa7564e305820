"""TLS on the broker port over an ssl.MemoryBIO, so one port can serve TLS and plain clients.

`TlsTransport` sits between the raw TCP transport and the remoting Connection: bytes from the
socket go through the SSLObject into `Connection.data_received`; the Connection's writes are
encrypted and written to the socket. Modes (RocketMQ's tls.server.mode):
  permissive  the first byte decides: 0x16 (a TLS handshake record) → TLS, anything else → plain
  enforcing   TLS only: a connection whose first byte is not 0x16 is closed
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
_READ_CHUNK = 256 * 1024


# Forward secrecy only: TLS 1.3 suites are all ephemeral; for TLS 1.2 only ECDHE / DHE key exchange
# with AEAD ciphers (no static-RSA key exchange, no CBC, no RC4/3DES/NULL/export).
FORWARD_SECRET_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS"


def server_context(cert_path: str, key_path: str, verify: ssl.VerifyMode = ssl.CERT_NONE,
                   trust_path: str | None = None) -> ssl.SSLContext:
    """TLS >= 1.2 with forward-secret AEAD suites; `verify` CERT_OPTIONAL / CERT_REQUIRED checks
    client certificates against `trust_path` (RocketMQ's tls.server.need.client.auth)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(FORWARD_SECRET_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_SINGLE_ECDH_USE
    ctx.load_cert_chain(cert_path, key_path)
    if verify != ssl.CERT_NONE:
        ctx.load_verify_locations(cafile=trust_path)
        ctx.verify_mode = verify
    return ctx


class TlsTransport(asyncio.Transport):
    """A transport façade: plaintext in and out for the protocol, TLS records on `raw`."""

    def __init__(self, raw: asyncio.Transport, ctx: ssl.SSLContext, protocol: asyncio.Protocol, peer: str) -> None:
        super().__init__()
        self._raw = raw
        self._ctx = ctx
        self._protocol = protocol
        self._peer = peer
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ssl = ctx.wrap_bio(self._in, self._out, server_side=True)
        self._handshaken = False
        self._closed = False
        self._early: list[bytes] = []

    # ---- socket side ------------------------------------------------------------------------
    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._in.write(data)
        if not self._handshaken:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                return
            except (ssl.SSLError, OSError) as e:
                log.warning("tls.handshake_failed", peer=self._peer, error=str(e))
                self._flush()
                self._raw.abort()
                return
            self._handshaken = True
            log.debug("tls.handshake_done", peer=self._peer, version=self._ssl.version(), cipher=self._ssl.cipher())
            early, self._early = self._early, []
            for chunk in early:
                self._encrypt(chunk)
        while not self._closed:
            try:
                chunk = self._ssl.read(_READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.close()
                break
            except (ssl.SSLError, OSError) as e:
                log.warning("tls.read_failed", peer=self._peer, error=str(e))
                self._raw.abort()
                return
            if not chunk:
                break
            self._protocol.data_received(chunk)
        self._flush()

    def _flush(self) -> None:
        if self._out.pending:
            data = self._out.read()
            if not self._raw.is_closing():
                self._raw.write(data)

    def _encrypt(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            n = self._ssl.write(view)
            view = view[n:]
        self._flush()

    # ---- protocol side (asyncio.Transport) -----------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            return
        if not self._handshaken:
            self._early.append(bytes(data))
            return
        try:
            self._encrypt(data)
        except (ssl.SSLError, OSError) as e:
            log.warning("tls.write_failed", peer=self._peer, error=str(e))
            self._raw.abort()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._handshaken:
            try:
                self._ssl.unwrap()
            except (ssl.SSLError, OSError):
                pass
            self._flush()
        self._raw.close()

    def abort(self) -> None:
        self._closed = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closed or self._raw.is_closing()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._ssl
        if name == "sslcontext":
            return self._ctx
        if name == "peercert":
            return self._ssl.getpeercert() if self._handshaken else default
        if name == "cipher":
            return self._ssl.cipher() if self._handshaken else default
        return self._raw.get_extra_info(name, default)
