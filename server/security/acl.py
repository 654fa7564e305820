"""Plain ACL (RocketMQ 4.x plain_acl.yml): accounts, validation of each request, hot reload.

Flow per request (RocketMQ's PlainPermissionManager.validate):
  remote host in globalWhiteRemoteAddresses → allowed (no signature needed);
  no AccessKey → refused; unknown AccessKey → refused;
  host in the account's whiteRemoteAddress → allowed;
  Signature must match HmacSHA1 over the request (codec.acl); then Apache's admin codes need admin=true,
  and every need of the request (server.security.resources: kind, action, name) must be allowed
  (`allowed`: explicit topicPerms/groupPerms, else the account's defaultTopicPerm/defaultGroupPerm;
  cluster needs, and topic or group CREATE/DELETE, need admin=true; a topic CREATE also passes with an
  explicit PUB entry for that topic). As Apache 4.9.x, an admin account with no topicPerms and no
  groupPerms passes every resource check; a PUB on RMQ_SYS_TRACE_TOPIC needs no permission.
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
from server.security.permission import ANY, PUB, SUB, check_permission, parse_perm, retry_topic
from server.security.resources import REMOTING, Action, Kind, Lookups, Need, remoting_needs

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
                 lookups: Lookups = Lookups()) -> None:
        self.path = path
        self.lookups = lookups  # the store's answers the resolver needs (record topics, topic existence)
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
        acc = self.authenticate(host, ext, body)
        if acc is not None:
            self.check_perm(acc, code, ext, body, self.lookups)

    def authenticate(self, host: str, ext: dict[str, str], body: Body) -> Account | None:
        """The signed account (None: the host is white-listed, nothing more is checked), else AclDenied."""
        self.maybe_reload()
        cfg = self.config
        for match in cfg.global_white:
            if match(host):
                return None
        ak = ext.get(ACCESS_KEY)
        if not ak:
            raise AclDenied("No accessKey is configured")
        acc = cfg.accounts.get(ak)
        if acc is None:
            raise AclDenied(f"No acl config for {ak}")
        if acc.white(host):
            return None
        if not signature_matches(ext, body, acc.secret_key):
            raise AclDenied(f"Check signature failed for accessKey={ak}")
        return acc

    @staticmethod
    def check_perm(acc: Account, code: int, ext: dict[str, str], body: Body, lookups: Lookups = Lookups()) -> None:
        rule = REMOTING.get(code)
        if rule is not None and rule.admin:  # Apache's ADMIN_CODE rows: admin=true, nothing else
            if not acc.admin:
                raise AclDenied(f"Need admin permission for request code={code}, but accessKey={acc.access_key} is not")
            return
        try:
            needs = remoting_needs(code, ext, body, lookups)
        except ValueError as e:
            raise AclDenied(f"cannot tell the resources of request code={code}: {e}") from None
        PlainAclValidator.authorize(acc, needs, f"request code={code}")

    @staticmethod
    def authorize(acc: Account, needs: Iterable[Need], what: str) -> None:
        """AclDenied unless the account may do every need (module docstring: how ACL 2.0 actions map
        onto plain_acl.yml). Remoting requests and gRPC calls both end here."""
        needs = list(needs)
        if acc.admin and not acc.perms:  # Apache: an admin without topicPerms/groupPerms skips the resource check
            return
        if any(n.kind is Kind.TOPIC and n.action is Action.PUB and n.name == TRACE_TOPIC for n in needs):
            return  # Apache: a PUB on RMQ_SYS_TRACE_TOPIC is free
        for need in needs:
            if not allowed(acc, need):
                if need.kind is Kind.CLUSTER:
                    raise AclDenied(f"No {need.action} permission for cluster ({what}): needs admin, "
                                    f"accessKey={acc.access_key}")
                raise AclDenied(f"No {need.action} permission for {need.kind}={need.name}, "
                                f"accessKey={acc.access_key}")


_BITS = {Action.PUB: PUB, Action.SUB: SUB, Action.GET: ANY, Action.LIST: ANY}


def allowed(acc: Account, need: Need) -> bool:
    """One need against one account. cluster: admin. topic/group CREATE, UPDATE (topic), DELETE: admin, or
    (topic CREATE) an explicit PUB entry for that topic in topicPerms. PUB / SUB: those bits; GET / LIST:
    PUB or SUB; group UPDATE / GET / SUB: the group's SUB (plain ACL groups have SUB only)."""
    if need.kind is Kind.CLUSTER:
        return acc.admin
    if need.kind is Kind.TOPIC:
        resource = need.name
        if need.action is Action.CREATE:
            explicit = acc.perms.get(resource)
            return acc.admin or (explicit is not None and check_permission(PUB, explicit))
        if need.action in (Action.UPDATE, Action.DELETE):
            return acc.admin
        bits = _BITS[need.action]
        default = acc.default_topic_perm
    else:
        resource = retry_topic(need.name)
        if need.action in (Action.CREATE, Action.DELETE):
            return acc.admin
        bits = ANY if need.action in (Action.GET, Action.LIST) else SUB
        default = acc.default_group_perm
    owned = acc.perms.get(resource)
    # an explicit entry is authoritative (4.x before 4.9.4), else the account's default
    return check_permission(bits, default if owned is None else owned)
