"""codec.controller: the controller-mode headers, bodies and identity files as Apache 5.1.3 writes them."""

from __future__ import annotations

import pytest

from codec.autoswitch_ha import EpochEntry
from codec.codes import RequestCode, ResponseCode
from codec.controller import (
    ApplyBrokerIdRequestHeader,
    BrokerIdentity,
    ElectMasterResponseBody,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
    decode_broker_replicas_info,
    register_check_code,
)
from codec.errors import CodecError


def test_codes_are_apaches() -> None:
    codes = [int(c) for c in (RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                              RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ResponseCode.CONTROLLER_NOT_LEADER,
                              ResponseCode.CONTROLLER_MASTER_STILL_EXIST)]
    assert codes == [904, 1012, 1008, 2007, 2011]


def test_header_round_trip_and_optional_fields() -> None:
    h = ApplyBrokerIdRequestHeader("c", "b", 2, register_check_code("127.0.0.1:10911", 5))
    assert h.to_ext() == {"clusterName": "c", "brokerName": "b", "appliedBrokerId": "2",
                          "registerCheckCode": "127.0.0.1:10911;5"}
    assert ApplyBrokerIdRequestHeader.from_ext(h.to_ext()) == h
    # no live master: the controller leaves the master fields out
    r = RegisterBrokerToControllerResponseHeader.from_ext({"clusterName": "c", "brokerName": "b"})
    assert r.masterBrokerId is None and r.masterEpoch is None
    assert GetMetaDataResponseHeader.from_ext({"isLeader": "true"}).isLeader is True


def test_bad_header_raises_codec_error() -> None:
    with pytest.raises(CodecError, match="masterEpoch"):
        NotifyBrokerRoleChangedRequestHeader.from_ext({"masterEpoch": "x"})
    with pytest.raises(CodecError, match="appliedBrokerId"):
        ApplyBrokerIdRequestHeader.from_ext({"clusterName": "c", "brokerName": "b", "registerCheckCode": "x"})


def test_bodies() -> None:
    s = SyncStateSet(frozenset({2, 1}), 3)
    assert s.encode() == b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}'
    assert SyncStateSet.decode(s.encode()) == s and SyncStateSet.decode(b"") == SyncStateSet()
    body = ElectMasterResponseBody.decode(
        b'{"brokerMemberGroup":{"cluster":"c","brokerName":"b","brokerAddrs":{1:"h:1",2:"h:2"}},"syncStateSet":[2]}')
    assert body.broker_addrs == {1: "h:1", 2: "h:2"} and body.sync_state_set == {2}
    info = decode_broker_replicas_info(
        b'{"replicasInfoTable":{"b":{"masterBrokerId":1,"masterAddress":"h:1","masterEpoch":2,"syncStateSetEpoch":3,'
        b'"inSyncReplicas":[{"brokerName":"b","brokerId":1,"brokerAddress":"h:1","alive":true}],'
        b'"notInSyncReplicas":[{"brokerName":"b","brokerId":2,"brokerAddress":"h:2","alive":false}]}}}')
    assert info["b"].master_epoch == 2 and info["b"].not_in_sync_replicas[0].alive is False
    with pytest.raises(CodecError):
        SyncStateSet.decode(b"[1]")


def test_epoch_entry_cache_is_apaches_json() -> None:
    """GET_BROKER_EPOCH_CACHE (1007, mqadmin getBrokerEpoch): fastjson's sorted keys; the open last entry
    ends at Long.MAX_VALUE."""
    assert int(RequestCode.GET_BROKER_EPOCH_CACHE) == 1007
    c = EpochEntryCache("C", "b", 0, (EpochEntry(1, 0), EpochEntry(3, 4096)), 9000)
    assert c.encode() == (b'{"brokerId":0,"brokerName":"b","clusterName":"C","epochList":[{"endOffset":4096,"epoch":1,'
                          b'"startOffset":0},{"endOffset":9223372036854775807,"epoch":3,"startOffset":4096}],'
                          b'"maxOffset":9000}')
    assert EpochEntryCache.decode(c.encode()) == c
    with pytest.raises(CodecError):
        EpochEntryCache.decode(b'{"epochList":[{"epoch":"x","startOffset":0}]}')


def test_identity_files() -> None:
    assert BrokerIdentity("c", "b", 1).encode() == "c#b#1"
    temp = BrokerIdentity("c", "b", 2, "h:1;7")
    assert temp.encode() == "c#b#2#h:1;7"
    assert BrokerIdentity.decode(temp.encode(), temp=True) == temp
    with pytest.raises(CodecError):
        BrokerIdentity.decode("c#b")
