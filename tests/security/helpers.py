"""Test helpers for security tests: a blocking JSON-header remoting call that can sign its request
(codec.acl) and pick its source address (127.0.0.x) or wrap the socket in TLS; cert generation."""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import ssl
import struct
import subprocess
from pathlib import Path

from codec.acl import sign_request
from tests.helpers.wire import Reply, WireError, _recv_exact

_LEN = struct.Struct(">ii")
_opaques = itertools.count(1)


def frame(code: int, ext: dict[str, str], body: bytes = b"", opaque: int | None = None) -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 409, "opaque": opaque or next(_opaques),
                         "flag": 0, "extFields": ext, "serializeTypeCurrentRPC": "JSON"}).encode()
    return _LEN.pack(4 + len(header) + len(body), len(header)) + header + body


def read_reply(sock) -> Reply:
    total, word = _LEN.unpack(_recv_exact(sock, 8))
    hlen = word & 0xFFFFFF
    hdr = json.loads(_recv_exact(sock, hlen))
    body = _recv_exact(sock, total - 4 - hlen)
    return Reply(hdr["code"], hdr.get("remark"), hdr.get("extFields") or {}, body)


def connect(addr: str, source: str | None = None, tls: ssl.SSLContext | None = None, timeout: float = 5.0):
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout,
                                    source_address=(source, 0) if source else None)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname=host)
    return sock


def call(addr: str, code: int, ext: dict | None = None, body: bytes = b"", *, ak: str | None = None,
         sk: str | None = None, channel: str | None = None, source: str | None = None,
         tls: ssl.SSLContext | None = None, timeout: float = 5.0) -> Reply:
    """One request on a fresh connection; signed when `ak`/`sk` are given."""
    fields = {k: str(v) for k, v in (ext or {}).items()}
    if ak is not None:
        sign_request(fields, body, ak, sk or "", channel)
    with connect(addr, source, tls, timeout) as sock:
        sock.sendall(frame(code, fields, body))
        reply = read_reply(sock)
    if any(not isinstance(v, str) for v in reply.ext.values()):
        raise WireError(f"non-string extFields in {reply}")
    return reply


def make_cert(dir_: Path, cn: str = "localhost") -> tuple[Path, Path]:
    """A throw-away self-signed certificate for 127.0.0.1/localhost (never committed)."""
    cert, key = dir_ / "cert.pem", dir_ / "key.pem"
    try:
        from cryptography import x509  # noqa: F401
    except ImportError:
        openssl = shutil.which("openssl")
        if openssl is None:
            raise RuntimeError("neither the cryptography package nor the openssl CLI is available") from None
        subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={cn}",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, capture_output=True, timeout=60)
        return cert, key
    return _make_cert_cryptography(cert, key, cn)


def _make_cert_cryptography(cert: Path, key: Path, cn: str) -> tuple[Path, Path]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    pk = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    c = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(pk.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
         .sign(pk, hashes.SHA256()))
    key.write_bytes(pk.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))
    cert.write_bytes(c.public_bytes(serialization.Encoding.PEM))
    return cert, key


def client_context(cert: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(cert))
    return ctx


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")
