"""Plain ACL (RocketMQ 4.x plain_acl.yml): accounts, validation of each request, hot reload.

Flow per request (RocketMQ's PlainPermissionManager.validate):
  remote host in globalWhiteRemoteAddresses → allowed (no signature needed);
  no AccessKey → refused; unknown AccessKey → refused;
  host in the account's whiteRemoteAddress → allowed;
  Signature must match HmacSHA1 over the request (codec.acl); then admin codes need admin=true and
  every resource the request touches needs the permission (explicit topicPerms/groupPerms, else the
  account's defaultTopicPerm/defaultGroupPerm). A PUB on RMQ_SYS_TRACE_TOPIC needs no permission.
Refusals are AclDenied with a remark that names what was missing, never a secret.

The file is re-read when its (mtime, size, inode) changes, checked at most once per second and
only when a request arrives (one stat call); a file that fails to parse keeps the previous accounts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog
import yaml

from codec.acl import ACCESS_KEY, signature_matches
from codec.buffers import Body
from codec.codes import TRACE_TOPIC
from server.security.address import Matcher, compile_pattern
from server.security.permission import (
    ADMIN_CODES,
    PUB,
    check_permission,
    describe,
    is_group_resource,
    needed_resources,
    parse_perm,
    perm_name,
    retry_topic,
)

log = structlog.get_logger(__name__)

RELOAD_CHECK_INTERVAL_S = 1.0


class AclDenied(Exception):
    """A request the ACL refuses; str(e) is the remark sent back (never contains a secret)."""


class AclConfigError(ValueError):
    """plain_acl.yml is missing or malformed."""


@dataclass(slots=True)
class Account:
    access_key: str
    secret_key: str
    white: Matcher
    admin: bool = False
    default_topic_perm: int = 1
    default_group_perm: int = 1
    perms: dict[str, int] = field(default_factory=dict)  # topic or %RETRY%group → perm


@dataclass(slots=True)
class AclConfig:
    global_white: list[Matcher]
    accounts: dict[str, Account]


def _resource_perms(entries: Iterable[object] | None, is_topic: bool, ak: str, out: dict[str, int]) -> None:
    for entry in entries or []:
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip() or "=" in perm:
            kind = "topic" if is_topic else "group"
            raise AclConfigError(f"account {ak}: bad {kind} permission entry {entry!r} (want NAME=PUB|SUB)")
        key = name.strip() if is_topic else retry_topic(name.strip())
        out[key] = parse_perm(perm)


def parse_acl(data: object) -> AclConfig:
    """Build the config from the parsed YAML document (RocketMQ's plain_acl.yml keys)."""
    if not isinstance(data, dict):
        raise AclConfigError("plain_acl.yml must be a mapping with `accounts` and/or `globalWhiteRemoteAddresses`")
    try:
        global_white = [compile_pattern(str(p)) for p in data.get("globalWhiteRemoteAddresses") or []]
    except ValueError as e:
        raise AclConfigError(f"globalWhiteRemoteAddresses: {e}") from None
    accounts: dict[str, Account] = {}
    for i, acc in enumerate(data.get("accounts") or []):
        if not isinstance(acc, dict):
            raise AclConfigError(f"accounts[{i}] is not a mapping")
        ak, sk = acc.get("accessKey"), acc.get("secretKey")
        if not ak or not sk:
            raise AclConfigError(f"accounts[{i}]: accessKey and secretKey are required")
        ak, sk = str(ak), str(sk)
        if len(ak) <= 6 or len(sk) <= 6:
            raise AclConfigError(f"account {ak}: accessKey and secretKey must be longer than 6 characters (as RocketMQ requires)")
        if ak in accounts:
            raise AclConfigError(f"accessKey {ak} is configured twice")
        try:
            white = compile_pattern(acc.get("whiteRemoteAddress"))
        except ValueError as e:
            raise AclConfigError(f"account {ak}: whiteRemoteAddress: {e}") from None
        perms: dict[str, int] = {}
        _resource_perms(acc.get("topicPerms"), True, ak, perms)
        _resource_perms(acc.get("groupPerms"), False, ak, perms)
        admin = acc.get("admin")
        accounts[ak] = Account(ak, sk, white, admin is True or str(admin).lower() == "true",
                               parse_perm(acc.get("defaultTopicPerm")), parse_perm(acc.get("defaultGroupPerm")),
                               perms)
    return AclConfig(global_white, accounts)


def load_acl_file(path: str) -> AclConfig:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise AclConfigError(f"ACL file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise AclConfigError(f"ACL file {path} is not valid YAML: {e}") from None
    return parse_acl(data)


class PlainAclValidator:
    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic,
                 record_topic: Callable[[int], str | None] | None = None) -> None:
        self.path = path
        self.record_topic = record_topic  # offset -> topic of the stored record (VIEW_MESSAGE_BY_ID)
        self._clock = clock
        self._stamp = self._file_stamp()
        self.config = load_acl_file(path)
        self._next_check = clock() + RELOAD_CHECK_INTERVAL_S
        self.reloads = 0
        log.info("acl.loaded", path=path, accounts=len(self.config.accounts),
                 global_white=len(self.config.global_white))

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def maybe_reload(self) -> None:
        now = self._clock()
        if now < self._next_check:
            return
        self._next_check = now + RELOAD_CHECK_INTERVAL_S
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self.config = load_acl_file(self.path)
        except AclConfigError as e:
            log.error("acl.reload_failed", path=self.path, error=str(e), kept_accounts=len(self.config.accounts))
            return
        self.reloads += 1
        log.info("acl.reloaded", path=self.path, accounts=len(self.config.accounts))

    def validate(self, host: str, code: int, ext: dict[str, str], body: Body) -> None:
        """Raise AclDenied unless the request from `host` is allowed."""
        self.maybe_reload()
        cfg = self.config
        for match in cfg.global_white:
            if match(host):
                return
        ak = ext.get(ACCESS_KEY)
        if not ak:
            raise AclDenied("No accessKey is configured")
        acc = cfg.accounts.get(ak)
        if acc is None:
            raise AclDenied(f"No acl config for {ak}")
        if acc.white(host):
            return
        if not signature_matches(ext, body, acc.secret_key):
            raise AclDenied(f"Check signature failed for accessKey={ak}")
        self.check_perm(acc, code, ext, body, self.record_topic)

    @staticmethod
    def check_perm(acc: Account, code: int, ext: dict[str, str], body: Body,
                   record_topic: Callable[[int], str | None] | None = None) -> None:
        if code in ADMIN_CODES and not acc.admin:
            raise AclDenied(f"Need admin permission for request code={code}, but accessKey={acc.access_key} is not")
        try:
            needed = needed_resources(code, ext, body, record_topic)
        except ValueError as e:
            raise AclDenied(f"cannot tell the resources of request code={code}: {e}") from None
        PlainAclValidator.check_resources(acc, needed)

    @staticmethod
    def check_resources(acc: Account, needed: dict[str, int]) -> None:
        """AclDenied unless the account owns each (resource -> PUB/SUB/ANY) permission; groups are
        named by their retry topic (`%RETRY%<group>`). Remoting requests and gRPC RPCs both end here."""
        if not needed or needed.get(TRACE_TOPIC) == PUB:
            return
        for resource, perm in needed.items():
            owned = acc.perms.get(resource)
            if owned is None:  # no explicit entry: the account's default for topics / groups
                owned = acc.default_group_perm if is_group_resource(resource) else acc.default_topic_perm
            if check_permission(perm, owned):  # an explicit entry is authoritative (4.x before 4.9.4)
                continue
            raise AclDenied(f"No {perm_name(perm)} permission for {describe(resource)}, accessKey={acc.access_key}")
