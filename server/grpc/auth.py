"""RocketMQ 5 request authentication against the same plain-ACL accounts as the remoting port.

Every 5.x client signs each call with the metadata
  authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>
  x-mq-date-time: 20261124T134500Z
where Signature = hex(HMAC-SHA1(secretKey, x-mq-date-time)). With aclEnable the account must exist,
the signature match (or the peer be white-listed, globally or for the account) and the account own
the RPC's needs (its row in `server.security.resources.GRPC`, authorized by
`server.security.acl.PlainAclValidator.authorize`). Without aclEnable nothing is checked.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from server.grpc.status import Code, GrpcError
from server.security.acl import AclDenied, PlainAclValidator
from server.security.resources import grpc_needs

_AUTH = re.compile(r"^MQv2-HMAC-SHA1\s+Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9A-Fa-f]+)\s*$")


def sign(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def needs(topic: str | None = None, group: str | None = None) -> dict[str, str]:
    """The names an RPC's request gives its table row (`server.security.resources.GRPC`)."""
    out: dict[str, str] = {}
    if topic:
        out["topic"] = topic
    if group:
        out["group"] = group
    return out


class Authenticator:
    def __init__(self, validator: PlainAclValidator | None) -> None:
        self.validator = validator

    def check(self, metadata: dict[str, str], peer_host: str, method: str, names: dict[str, str]) -> None:
        """GrpcError(UNAUTHORIZED / FORBIDDEN) unless the call may go on."""
        v = self.validator
        if v is None:
            return
        v.maybe_reload()
        cfg = v.config
        for match in cfg.global_white:
            if match(peer_host):
                return
        header = metadata.get("authorization")
        if not header:
            raise GrpcError(Code.UNAUTHORIZED, "no authorization metadata (aclEnable=true)")
        m = _AUTH.match(header)
        if m is None:
            raise GrpcError(Code.UNAUTHORIZED, "authorization is not 'MQv2-HMAC-SHA1 Credential=<ak>, "
                                               "SignedHeaders=x-mq-date-time, Signature=<hex>'")
        ak, signed, signature = m.groups()
        acc = cfg.accounts.get(ak)
        if acc is None:
            raise GrpcError(Code.UNAUTHORIZED, f"No acl config for {ak}")
        if not acc.white(peer_host):
            if signed.lower() != "x-mq-date-time":
                raise GrpcError(Code.UNAUTHORIZED, f"SignedHeaders {signed!r} is not x-mq-date-time")
            date_time = metadata.get("x-mq-date-time", "")
            if not date_time or not hmac.compare_digest(sign(acc.secret_key, date_time), signature.lower()):
                raise GrpcError(Code.UNAUTHORIZED, f"Check signature failed for accessKey={ak}")
        try:
            PlainAclValidator.authorize(acc, grpc_needs(method, names, v.lookups), f"rpc {method}")
        except AclDenied as e:
            raise GrpcError(Code.FORBIDDEN, str(e)) from None

