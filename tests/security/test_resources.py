"""The resource/action table (server.security.resources): total over every request code and gRPC method,
and how its needs are decided for a plain_acl.yml account (Apache 4.9.x's admin rule included)."""

from __future__ import annotations

import pytest

from codec.codes import RequestCode
from codec.errors import CodecError
from codec.ha import (
    AUTH_CHALLENGE_SIZE,
    AUTH_NONCE_SIZE,
    auth_proof,
    decode_challenge,
    encode_challenge,
    proof_matches,
)
from server.grpc.v2 import service_pb2_grpc as sgrpc
from server.security.acl import AclDenied, PlainAclValidator, allowed, parse_acl
from server.security.resources import GRPC, REMOTING, Action, Kind, Lookups, Need, grpc_needs, remoting_needs


def test_every_request_code_and_grpc_method_has_a_row():
    missing = [c.name for c in RequestCode if int(c) not in REMOTING]
    assert not missing, f"request codes without a resource/action row: {missing}"
    methods = {n for n in vars(sgrpc.MessagingServiceServicer) if n[:1].isupper()}
    assert methods, "no gRPC methods found"
    assert sorted(methods - set(GRPC)) == [], "gRPC methods without a resource/action row"
    assert set(GRPC) <= methods, f"rows for methods that do not exist: {set(GRPC) - methods}"
    for rule in list(REMOTING.values()) + list(GRPC.values()):
        for g in rule.grants:
            assert isinstance(g.kind, Kind) and isinstance(g.action, Action)


ACCOUNTS = parse_acl({"accounts": [
    {"accessKey": "adminOnly1", "secretKey": "secret0001", "admin": True},
    {"accessKey": "adminPerms", "secretKey": "secret0002", "admin": True, "defaultTopicPerm": "DENY",
     "topicPerms": ["Mine=PUB"]},
    {"accessKey": "lowPriv001", "secretKey": "secret0003", "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
     "topicPerms": ["Mine=PUB"], "groupPerms": ["GID_mine=SUB"]},
]}).accounts


def test_admin_rule_is_apaches():
    # admin=true and no topicPerms/groupPerms: every resource passes (Apache 4.9.x PlainPermissionManager.checkPerm)
    PlainAclValidator.check_perm(ACCOUNTS["adminOnly1"], 310, {"a": "P", "b": "Anything"}, b"")
    PlainAclValidator.check_perm(ACCOUNTS["adminOnly1"], 17, {"topic": "T"}, b"")
    # admin=true with perms: the perms decide resources, the admin codes pass
    PlainAclValidator.check_perm(ACCOUNTS["adminPerms"], 17, {"topic": "T"}, b"")
    with pytest.raises(AclDenied, match="No PUB permission for topic=Other"):
        PlainAclValidator.check_perm(ACCOUNTS["adminPerms"], 310, {"a": "P", "b": "Other"}, b"")


def test_low_privilege_account_needs():
    low = ACCOUNTS["lowPriv001"]
    assert allowed(low, Need(Kind.TOPIC, Action.PUB, "Mine"))
    assert allowed(low, Need(Kind.TOPIC, Action.CREATE, "Mine"))  # an explicit PUB entry may create its topic
    assert not allowed(low, Need(Kind.TOPIC, Action.CREATE, "Other"))
    assert not allowed(low, Need(Kind.TOPIC, Action.SUB, "Mine"))
    assert allowed(low, Need(Kind.GROUP, Action.UPDATE, "GID_mine"))
    assert not allowed(low, Need(Kind.GROUP, Action.SUB, "victim"))
    assert not allowed(low, Need(Kind.CLUSTER, Action.LIST))
    # the scheduled-message listing: one topic's page needs SUB on it; the all-tenant page needs admin
    assert remoting_needs(3111, {"topic": "Mine"}, b"", Lookups()) == [Need(Kind.TOPIC, Action.SUB, "Mine")]
    assert remoting_needs(3111, {}, b"", Lookups()) == [Need(Kind.CLUSTER, Action.LIST)]
    with pytest.raises(AclDenied, match="needs admin"):
        PlainAclValidator.check_perm(ACCOUNTS["lowPriv001"], 3111, {}, b"")
    # 36 names a record: SUB on its topic
    lookups = Lookups(record_topic=lambda off: "Secret" if off == 7 else None)
    with pytest.raises(AclDenied, match="No SUB permission for topic=Secret"):
        PlainAclValidator.check_perm(low, 36, {"group": "GID_mine", "offset": "7", "originTopic": "Mine"}, b"", lookups)
    # the record in the group's own retry topic is the group's
    assert remoting_needs(36, {"group": "G", "offset": "7"}, b"", Lookups(lambda off: "%RETRY%G")) == [
        Need(Kind.GROUP, Action.SUB, "G"), Need(Kind.GROUP, Action.SUB, "G")]
    body = b'{"consumerGroup":"victim","clientId":"c","mqSet":[{"topic":"Mine","brokerName":"b","queueId":0}]}'
    with pytest.raises(AclDenied, match="No SUB permission for group=victim"):
        PlainAclValidator.check_perm(low, 41, {}, body)
    # a default PUB|SUB does not create topics (CREATE: admin, or an explicit PUB entry for that topic)
    open_acc = parse_acl({"accounts": [{"accessKey": "openAcc01", "secretKey": "secret0004",
                                        "defaultTopicPerm": "PUB|SUB"}]}).accounts["openAcc01"]
    with pytest.raises(AclDenied, match="No CREATE permission for topic=Fresh"):
        PlainAclValidator.authorize(open_acc, grpc_needs("QueryRoute", {"topic": "Fresh"},
                                                    Lookups(topic_exists=lambda t: False)), "rpc QueryRoute")


def test_ha_challenge_layout():
    nonce = bytes(range(AUTH_NONCE_SIZE))
    frame = encode_challenge(nonce)
    assert len(frame) == AUTH_CHALLENGE_SIZE and decode_challenge(frame) == nonce
    proof = auth_proof(b"0123456789abcdef", nonce)
    assert proof_matches(b"0123456789abcdef", nonce, proof)
    assert not proof_matches(b"0123456789abcdeX", nonce, proof)
    with pytest.raises(CodecError):
        decode_challenge(b"\0" * AUTH_CHALLENGE_SIZE)
