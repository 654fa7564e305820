"""Sans-io parts: the signature content, address patterns, permission rules."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.acl import content_to_sign, sign, sign_request, signature_matches
from server.security.acl import AclConfigError, AclDenied, parse_acl
from server.security.address import compile_pattern
from server.security.permission import DENY, PUB, SUB, check_permission, parse_perm
from server.security.resources import Action, Kind, Lookups, Need, remoting_needs


def test_content_is_values_sorted_by_key_then_body():
    ext = {"b": "2", "a": "1", "Signature": "zzz", "_UNIQUE_KEY_QUERY": "q", "AccessKey": "ak", "OnsChannel": "LOCAL"}
    assert content_to_sign(ext, b"BODY") == b"akLOCAL12BODY"
    expect = base64.b64encode(hmac.new(b"sk", b"akLOCAL12BODY", hashlib.sha1).digest()).decode()
    assert sign(ext, b"BODY", "sk") == expect
    assert content_to_sign(ext, [b"BO", memoryview(b"DY")]) == b"akLOCAL12BODY"


fields = st.dictionaries(st.text("abcXYZ_", min_size=1, max_size=5), st.text(max_size=8), max_size=6)


@given(fields, st.binary(max_size=32))
def test_signed_request_verifies_and_any_change_breaks_it(ext, body):
    signed = sign_request(dict(ext), body, "myAccessKey", "mySecretKey")
    assert signature_matches(signed, body, "mySecretKey")
    assert not signature_matches(signed, body, "mySecretKeY")
    assert not signature_matches(signed, body + b"x", "mySecretKey")
    assert not signature_matches(dict(signed, extra="1"), body, "mySecretKey")


@pytest.mark.parametrize("pattern,yes,no", [
    ("*", ["1.2.3.4", "::1"], []),
    ("", [], ["127.0.0.1"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
    ("192.168.*.*", ["192.168.0.1", "192.168.255.9"], ["192.169.0.1"]),
    ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100"], ["192.168.1.101", "192.168.2.5"]),
    ("10.*", ["10.0.0.1"], ["11.0.0.1"]),
    ("127.0.0.1,10.0.0.3", ["127.0.0.1", "10.0.0.3", "::ffff:127.0.0.1"], ["10.0.0.4"]),
    ("::1", ["0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
])
def test_address_patterns(pattern, yes, no):
    m = compile_pattern(pattern)
    assert all(m(h) for h in yes) and not any(m(h) for h in no)


@pytest.mark.parametrize("bad", ["192.168.1.300", "192.168.1.100-1", "hello", "1.2.{}"])
def test_bad_patterns_are_refused(bad):
    with pytest.raises(ValueError):
        compile_pattern(bad)


def test_permission_rules():
    assert parse_perm("PUB|SUB") == PUB | SUB and parse_perm("junk") == DENY and parse_perm(None) == DENY
    assert check_permission(PUB, PUB | SUB) and not check_permission(PUB, SUB) and not check_permission(SUB, DENY)
    # a send to %RETRY%G needs group G's permission, whatever producer group it names
    assert remoting_needs(310, {"a": "P", "b": "%RETRY%G"}, b"", Lookups()) == [Need(Kind.GROUP, Action.SUB, "G")]
    assert remoting_needs(11, {"topic": "T", "consumerGroup": "G"}, b"", Lookups()) == [
        Need(Kind.TOPIC, Action.SUB, "T"), Need(Kind.GROUP, Action.SUB, "G")]
    hb = b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T"}]}]}'
    assert remoting_needs(34, {}, hb, Lookups()) == [Need(Kind.GROUP, Action.SUB, "G"), Need(Kind.TOPIC, Action.SUB, "T")]
    # a send to a topic that does not exist creates it: CREATE too
    absent = Lookups(topic_exists=lambda t: False)
    assert remoting_needs(310, {"a": "P", "b": "New"}, b"", absent) == [
        Need(Kind.TOPIC, Action.PUB, "New"), Need(Kind.TOPIC, Action.CREATE, "New")]


def test_config_errors_name_the_account_and_trace_topic_is_free():
    with pytest.raises(AclConfigError, match="longer than 6"):
        parse_acl({"accounts": [{"accessKey": "short", "secretKey": "1234567"}]})
    with pytest.raises(AclConfigError, match="bad topic permission"):
        parse_acl({"accounts": [{"accessKey": "abcdefg", "secretKey": "1234567", "topicPerms": ["T"]}]})
    cfg = parse_acl({"accounts": [{"accessKey": "abcdefg", "secretKey": "1234567"}]})
    from server.security.acl import PlainAclValidator
    acc = cfg.accounts["abcdefg"]
    PlainAclValidator.check_perm(acc, 310, {"b": "RMQ_SYS_TRACE_TOPIC"}, b"")
    with pytest.raises(AclDenied, match="No PUB permission for topic=T,"):
        PlainAclValidator.check_perm(acc, 310, {"b": "T"}, b"")
