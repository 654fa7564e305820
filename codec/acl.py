"""RocketMQ 4.x plain-ACL request signature (sans-io; shared by the broker and our client).

The signed content is the UTF-8 concatenation of the request's extFields VALUES in the order of
their KEYS (Java TreeMap order), leaving out `Signature` itself and `_UNIQUE_KEY_QUERY`, followed
by the raw request body. The signature is Base64(HmacSHA1(secretKey, content)).

A signing client adds `AccessKey` (and the C++ client `OnsChannel`) to extFields before signing,
so those values are part of the content; it then adds `Signature`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from codec.buffers import Body, BytesLike

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"

_EXCLUDED = frozenset((SIGNATURE, UNIQUE_KEY_QUERY))


def _utf16_key(key: str) -> list[int]:
    # Java's String.compareTo orders by UTF-16 code units; differs from code point order only
    # for characters above U+FFFF against U+E000..U+FFFF.
    if key.isascii():
        return list(key.encode())
    data = key.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def _body_parts(body: Body | None) -> list[BytesLike]:
    if body is None:
        return []
    if isinstance(body, list | tuple):
        return [p for p in body if len(p)]
    return [body] if len(body) else []


def content_to_sign(ext_fields: Mapping[str, str] | None, body: Body | None = b"") -> bytes:
    """The exact bytes RocketMQ signs for a request with these extFields and body."""
    out = bytearray()
    if ext_fields:
        keys = [k for k in ext_fields if k not in _EXCLUDED and ext_fields[k] is not None]
        if all(k.isascii() for k in keys):
            keys.sort()
        else:
            keys.sort(key=_utf16_key)
        for k in keys:
            v = ext_fields[k]
            out += (v if isinstance(v, str) else str(v)).encode("utf-8")
    for part in _body_parts(body):
        out += part
    return bytes(out)


def sign(ext_fields: Mapping[str, str] | None, body: Body | None, secret_key: str) -> str:
    """Base64(HmacSHA1(secret_key, content_to_sign(ext_fields, body)))."""
    mac = hmac.new(secret_key.encode("utf-8"), content_to_sign(ext_fields, body), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_matches(ext_fields: Mapping[str, str], body: Body | None, secret_key: str) -> bool:
    """Constant-time comparison of the request's `Signature` with the one computed here."""
    given = ext_fields.get(SIGNATURE)
    if not given:
        return False
    return hmac.compare_digest(sign(ext_fields, body, secret_key).encode(), str(given).encode())


def sign_request(ext_fields: dict[str, str], body: Body | None, access_key: str, secret_key: str,
                 channel: str | None = None) -> dict[str, str]:
    """Client side: add AccessKey (and OnsChannel if given), then Signature, in place; returns ext_fields."""
    ext_fields[ACCESS_KEY] = access_key
    if channel is not None:
        ext_fields[ONS_CHANNEL] = channel
    ext_fields.pop(SIGNATURE, None)
    ext_fields[SIGNATURE] = sign(ext_fields, body, secret_key)
    return ext_fields


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """RocketMQ's AclClientRPCHook with its SessionCredentials: every request a client sends is signed with one
    account's keys (delaymq-proxy's requests to brokers with aclEnable, as Apache's proxy in cluster mode)."""

    access_key: str
    secret_key: str

    def sign(self, ext_fields: dict[str, str], body: Body | None) -> None:
        sign_request(ext_fields, body, self.access_key, self.secret_key)
