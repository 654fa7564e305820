"""RocketMQ 5.x controller mode (RIP-44): the request / response headers and bodies a broker exchanges
with Apache's controller, and the broker-identity files it keeps, declared once (cluster-ha.md §4.2-4.3;
checked against rocketmq-all-5.1.3's remoting/protocol/header/controller/**, header/namesrv/
BrokerHeartbeatRequestHeader, header/NotifyBrokerRoleChangedRequestHeader, body/SyncStateSet,
body/ElectMasterResponseBody, body/BrokerReplicasInfo, header/ExchangeHAInfo*Header and
store/ha/autoswitch/*BrokerMetadata).

Headers travel as extFields (every value a string; Java Long / Integer / Boolean as decimal / "true").
Each header is a frozen dataclass whose field names are the Java field names in camelCase: `to_ext()`
writes the fields that are set, `from_ext()` reads them back (a missing optional field is None; a
malformed number raises CodecError). Bodies are JSON (fastjson on the Java side). Sans-io.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from codec.autoswitch_ha import EpochEntry
from codec.errors import CodecError
from codec.fastjson import loads_lenient

LONG_MAX = (1 << 63) - 1  # Java's Long.MAX_VALUE: an epoch entry not ended yet


class _Header:
    """extFields <-> dataclass fields of str / int / bool (optional when the default is None)."""

    def to_ext(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is None:
                continue
            out[f.name] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return out

    @classmethod
    def from_ext(cls, ext: Mapping[str, str] | None) -> Self:
        ext = ext or {}
        hints = typing.get_type_hints(cls)
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            raw = ext.get(f.name)
            if raw is None or raw == "":
                if f.default is dataclasses.MISSING:
                    raise CodecError(f"{cls.__name__}: missing header field {f.name}")
                continue
            kind = _base_type(hints[f.name])
            try:
                if kind is bool:
                    kw[f.name] = str(raw).lower() == "true"
                elif kind is int:
                    kw[f.name] = int(raw)
                else:
                    kw[f.name] = str(raw)
            except ValueError as e:
                raise CodecError(f"{cls.__name__}.{f.name}: not a number: {raw!r}") from e
        return cls(**kw)


def _base_type(hint: Any) -> type:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return typing.cast(type, args[0])
    return typing.cast(type, hint)


# ---- broker -> controller ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GetNextBrokerIdRequestHeader(_Header):
    """CONTROLLER_GET_NEXT_BROKER_ID (1012)."""

    clusterName: str
    brokerName: str


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdResponseHeader(_Header):
    clusterName: str | None = None
    brokerName: str | None = None
    nextBrokerId: int | None = None


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdRequestHeader(_Header):
    """CONTROLLER_APPLY_BROKER_ID (1013); registerCheckCode = "<brokerAddr>;<currentTimeMillis>"."""

    clusterName: str
    brokerName: str
    appliedBrokerId: int
    registerCheckCode: str


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdResponseHeader(_Header):
    clusterName: str | None = None
    brokerName: str | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerRequestHeader(_Header):
    """CONTROLLER_REGISTER_BROKER (1003)."""

    clusterName: str
    brokerName: str
    brokerId: int
    brokerAddress: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerResponseHeader(_Header):
    """The master fields are there only when the set has a live master; body: SyncStateSet."""

    clusterName: str | None = None
    brokerName: str | None = None
    masterBrokerId: int | None = None
    masterAddress: str | None = None
    masterEpoch: int | None = None
    syncStateSetEpoch: int | None = None


@dataclass(frozen=True, slots=True)
class GetReplicaInfoRequestHeader(_Header):
    """CONTROLLER_GET_REPLICA_INFO (1004)."""

    brokerName: str


@dataclass(frozen=True, slots=True)
class GetReplicaInfoResponseHeader(_Header):
    """Body: SyncStateSet."""

    masterBrokerId: int | None = None
    masterAddress: str | None = None
    masterEpoch: int | None = None


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequestHeader(_Header):
    """BROKER_HEARTBEAT (904), oneway to every controller."""

    clusterName: str
    brokerAddr: str
    brokerName: str
    brokerId: int | None = None
    epoch: int | None = None
    maxOffset: int | None = None
    confirmOffset: int | None = None
    heartbeatTimeoutMills: int | None = None
    electionPriority: int | None = None


@dataclass(frozen=True, slots=True)
class ElectMasterRequestHeader(_Header):
    """CONTROLLER_ELECT_MASTER (1002): a broker asking for a first election, or an admin's `electMaster`."""

    clusterName: str
    brokerName: str
    brokerId: int
    designateElect: bool = False


@dataclass(frozen=True, slots=True)
class ElectMasterResponseHeader(_Header):
    """Body: ElectMasterResponseBody. Answered SUCCESS or CONTROLLER_MASTER_STILL_EXIST."""

    masterBrokerId: int | None = None
    masterAddress: str | None = None
    masterEpoch: int | None = None
    syncStateSetEpoch: int | None = None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequestHeader(_Header):
    """CONTROLLER_ALTER_SYNC_STATE_SET (1001); body: the proposed SyncStateSet with the current epoch."""

    brokerName: str
    masterBrokerId: int
    masterEpoch: int


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetResponseHeader(_Header):
    """Body: the new SyncStateSet."""

    newSyncStateSetEpoch: int | None = None


@dataclass(frozen=True, slots=True)
class GetMetaDataResponseHeader(_Header):
    """CONTROLLER_GET_METADATA_INFO (1005) has no request header."""

    group: str | None = None
    controllerLeaderId: str | None = None
    controllerLeaderAddress: str | None = None
    isLeader: bool | None = None
    peers: str | None = None


# ---- controller -> broker ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NotifyBrokerRoleChangedRequestHeader(_Header):
    """NOTIFY_BROKER_ROLE_CHANGED (1008), pushed after an election; body: SyncStateSet."""

    masterAddress: str | None = None
    masterEpoch: int | None = None
    syncStateSetEpoch: int | None = None
    masterBrokerId: int | None = None


# ---- broker -> broker (header/ExchangeHAInfo*Header) ---------------------------------------------
@dataclass(frozen=True, slots=True)
class ExchangeHAInfoRequestHeader(_Header):
    """EXCHANGE_BROKER_HA_INFO (906). Nothing set: a slave asks its master for its HA address (Apache's
    retrieveBrokerHaInfo, a slave of a master it learned from the controller or a name server); set: a
    master pushes it to a slave (slaveActingMaster)."""

    masterHaAddress: str | None = None
    masterFlushOffset: int | None = None
    masterAddress: str | None = None


@dataclass(frozen=True, slots=True)
class ExchangeHAInfoResponseHeader(_Header):
    """A master's answer (brokerId 0): its `brokerIP2:haListenPort`, its CommitLog end when it started
    (brokerInitMaxOffset) and its address; a broker that is not a master answers SUCCESS with none set."""

    masterHaAddress: str | None = None
    masterFlushOffset: int | None = None
    masterAddress: str | None = None


# ---- bodies ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SyncStateSet:
    """`{"syncStateSet":[1,2],"syncStateSetEpoch":3}` (body/SyncStateSet)."""

    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def encode(self) -> bytes:
        return json.dumps({"syncStateSet": sorted(self.sync_state_set),
                           "syncStateSetEpoch": self.sync_state_set_epoch}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes | None) -> SyncStateSet:
        if not body:
            return cls()
        doc = _json_object(body, "SyncStateSet")
        return cls(frozenset(int(i) for i in doc.get("syncStateSet") or ()), int(doc.get("syncStateSetEpoch") or 0))


@dataclass(frozen=True, slots=True)
class ElectMasterResponseBody:
    """`{"brokerMemberGroup":{"cluster","brokerName","brokerAddrs":{id:addr}},"syncStateSet":[ids]}`."""

    cluster: str = ""
    broker_name: str = ""
    broker_addrs: Mapping[int, str] = field(default_factory=dict)
    sync_state_set: frozenset[int] = frozenset()

    @classmethod
    def decode(cls, body: bytes | None) -> ElectMasterResponseBody:
        if not body:
            return cls()
        doc = _json_object(body, "ElectMasterResponseBody")
        group = doc.get("brokerMemberGroup") or {}
        addrs = {int(k): str(v) for k, v in (group.get("brokerAddrs") or {}).items()}
        return cls(str(group.get("cluster") or ""), str(group.get("brokerName") or ""), addrs,
                   frozenset(int(i) for i in doc.get("syncStateSet") or ()))


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool


@dataclass(frozen=True, slots=True)
class SyncStateInfo:
    """One broker set of BrokerReplicasInfo (CONTROLLER_GET_SYNC_STATE_DATA's answer, mqadmin getSyncStateSet)."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set_epoch: int | None
    in_sync_replicas: tuple[ReplicaIdentity, ...]
    not_in_sync_replicas: tuple[ReplicaIdentity, ...]


def decode_broker_replicas_info(body: bytes | None) -> dict[str, SyncStateInfo]:
    """`{"replicasInfoTable":{brokerName:{masterBrokerId,masterAddress,masterEpoch,syncStateSetEpoch,
    inSyncReplicas:[{brokerName,brokerId,brokerAddress,alive}],notInSyncReplicas:[...]}}}`."""
    doc = _json_object(body or b"{}", "BrokerReplicasInfo")

    def replicas(rows: Any) -> tuple[ReplicaIdentity, ...]:
        return tuple(ReplicaIdentity(str(r.get("brokerName") or ""), int(r.get("brokerId") or 0),
                                     str(r.get("brokerAddress") or ""), bool(r.get("alive")))
                     for r in rows or ())

    def opt_int(v: Any) -> int | None:
        return None if v is None else int(v)

    out: dict[str, SyncStateInfo] = {}
    for name, info in (doc.get("replicasInfoTable") or {}).items():
        out[str(name)] = SyncStateInfo(opt_int(info.get("masterBrokerId")), info.get("masterAddress"),
                                       opt_int(info.get("masterEpoch")), opt_int(info.get("syncStateSetEpoch")),
                                       replicas(info.get("inSyncReplicas")), replicas(info.get("notInSyncReplicas")))
    return out


@dataclass(frozen=True, slots=True)
class EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE's answer (body/EpochEntryCache, mqadmin getBrokerEpoch):
    `{"brokerId","brokerName","clusterName","epochList":[{"endOffset","epoch","startOffset"}],"maxOffset"}`.
    The entries are the epoch file's (codec.autoswitch_ha.EpochEntry: epoch, start); each one's endOffset is
    the next one's start, the last one's Long.MAX_VALUE (Apache's EpochEntry default)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    epoch_list: tuple[EpochEntry, ...]
    max_offset: int

    def encode(self) -> bytes:
        ends = [e.start_offset for e in self.epoch_list[1:]] + [LONG_MAX]
        return json.dumps({"brokerId": self.broker_id, "brokerName": self.broker_name, "clusterName": self.cluster_name,
                           "epochList": [{"endOffset": end, "epoch": e.epoch, "startOffset": e.start_offset}
                                         for e, end in zip(self.epoch_list, ends, strict=True)],
                           "maxOffset": self.max_offset}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes | None) -> EpochEntryCache:
        doc = _json_object(body or b"{}", "EpochEntryCache")
        try:
            entries = tuple(EpochEntry(int(e["epoch"]), int(e["startOffset"])) for e in doc.get("epochList") or ())
            return cls(str(doc.get("clusterName") or ""), str(doc.get("brokerName") or ""),
                       int(doc.get("brokerId") or 0), entries, int(doc.get("maxOffset") or 0))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CodecError(f"bad EpochEntryCache: {e!r}") from None


def encode_broker_names(names: list[str]) -> bytes:
    """CONTROLLER_GET_SYNC_STATE_DATA's request body: a JSON list of brokerNames."""
    return json.dumps(names).encode()


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        doc = loads_lenient(body)
    except (ValueError, CodecError) as e:
        raise CodecError(f"{what}: bad JSON body: {e}") from e
    if not isinstance(doc, dict):
        raise CodecError(f"{what}: expected a JSON object")
    return doc


# ---- the broker-identity files (store/ha/autoswitch/BrokerMetadata, TempBrokerMetadata) ----------
BROKER_IDENTITY_FILE = "brokerIdentity"  # under storePathRootDir: "cluster#brokerName#brokerId"
BROKER_IDENTITY_TEMP_FILE = "brokerIdentity-temp"  # "cluster#brokerName#brokerId#registerCheckCode"
EPOCH_FILE = "epochFileCheckpoint"  # AutoSwitch HA's epoch entries (not written yet: issue 25 item 2)
IDENTITY_SEPARATOR = "#"
FIRST_BROKER_CONTROLLER_ID = 1  # MixAll.FIRST_BROKER_CONTROLLER_ID


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """The content of brokerIdentity (register_check_code None) or brokerIdentity-temp (set)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str | None = None

    def encode(self) -> str:
        parts = [self.cluster_name, self.broker_name, str(self.broker_id)]
        if self.register_check_code is not None:
            parts.append(self.register_check_code)
        return IDENTITY_SEPARATOR.join(parts)

    @classmethod
    def decode(cls, text: str, temp: bool = False) -> BrokerIdentity:
        parts = text.strip().split(IDENTITY_SEPARATOR)
        if len(parts) != (4 if temp else 3):
            raise CodecError(f"broker identity: expected {4 if temp else 3} '#'-separated fields, got {text!r}")
        try:
            broker_id = int(parts[2])
        except ValueError as e:
            raise CodecError(f"broker identity: brokerId is not a number: {parts[2]!r}") from e
        return cls(parts[0], parts[1], broker_id, parts[3] if temp else None)


def register_check_code(broker_addr: str, now_ms: int) -> str:
    """TempBrokerMetadata's registerCheckCode; the controller takes the address from before the ';'."""
    return f"{broker_addr};{now_ms}"

