"""Plain ACL over raw requests: address whitelists, admin codes, NO_PERMISSION remarks, hot reload."""

from __future__ import annotations

import time

import pytest

from tests.security.conftest import ADMIN_AK, ADMIN_SK, SUBONLY_AK, SUBONLY_SK, USER_AK, USER_SK
from tests.security.helpers import call

pytestmark = pytest.mark.process

GET_MAX_OFFSET, UPDATE_AND_CREATE_TOPIC, GET_ROUTEINFO_BY_TOPIC, PULL_MESSAGE = 30, 17, 105, 11
NO_PERMISSION = 16
TOPIC = {"topic": "TopicA", "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
         "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
MAXOFF = {"topic": "TopicA", "queueId": 0}


def test_unsigned_request_refused_unless_globally_whitelisted(acl_broker):
    r = call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF)
    assert (r.code, r.remark) == (NO_PERMISSION, "No accessKey is configured")
    # 127.0.0.{200,201} is in globalWhiteRemoteAddresses: no signature needed (even for admin codes)
    assert call(acl_broker.addr, UPDATE_AND_CREATE_TOPIC, TOPIC, source="127.0.0.201").code == 0
    assert call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, source="127.0.0.200").code == 0
    assert call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, source="127.0.0.202").code == NO_PERMISSION
    # name-server codes carry no ACL (as RocketMQ 4.x's name server)
    assert call(acl_broker.addr, GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).code == 0


def test_account_white_address_skips_signature(acl_broker):
    bad_sk = "not-the-secret"
    assert call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, source="127.0.0.55", ak=USER_AK, sk=bad_sk).code == 0
    r = call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, source="127.0.0.61", ak=USER_AK, sk=bad_sk)
    assert r.code == NO_PERMISSION and r.remark == f"Check signature failed for accessKey={USER_AK}"
    assert USER_SK not in r.remark


def test_admin_codes_and_resource_remarks(acl_broker):
    r = call(acl_broker.addr, UPDATE_AND_CREATE_TOPIC, TOPIC, ak=USER_AK, sk=USER_SK)
    assert r.code == NO_PERMISSION
    assert r.remark == f"Need admin permission for request code=17, but accessKey={USER_AK} is not"
    assert call(acl_broker.addr, UPDATE_AND_CREATE_TOPIC, TOPIC, ak=ADMIN_AK, sk=ADMIN_SK).code == 0
    pull = {"consumerGroup": "GID_denied", "topic": "TopicA", "queueId": 0, "queueOffset": 0, "maxMsgNums": 1,
            "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}
    r = call(acl_broker.addr, PULL_MESSAGE, pull, ak=USER_AK, sk=USER_SK)
    assert r.code == NO_PERMISSION and r.remark == f"No SUB permission for group=GID_denied, accessKey={USER_AK}"
    r = call(acl_broker.addr, PULL_MESSAGE, dict(pull, consumerGroup="GID_ok"), ak=USER_AK, sk=USER_SK)
    assert r.code != NO_PERMISSION, r
    # a tampered body or field breaks the signature
    r = call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, ak=SUBONLY_AK, sk=SUBONLY_SK[:-1] + "X")
    assert r.code == NO_PERMISSION and SUBONLY_SK not in (r.remark or "")


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)  # the broker re-checks the file at most once a second, on request


def test_acl_file_change_is_picked_up(acl_broker, acl_file):
    assert call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, ak="freshKey01", sk="freshSecret01").code == NO_PERMISSION
    acl_file.write_text(acl_file.read_text() + "  - accessKey: freshKey01\n    secretKey: freshSecret01\n"
                        "    defaultTopicPerm: SUB\n")  # a topic's offsets are a GET on it (PUB or SUB)
    wait_for(lambda: call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, ak="freshKey01", sk="freshSecret01").code == 0,
             10, "the new account to be accepted")
    # a broken file keeps the accounts that were loaded
    acl_file.write_text("accounts: [ {accessKey: x\n")
    r = None
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        r = call(acl_broker.addr, GET_MAX_OFFSET, MAXOFF, ak="freshKey01", sk="freshSecret01")
        assert r.code == 0, r
        time.sleep(0.2)
    wait_for(lambda: "acl.reload_failed" in acl_broker.stderr_path.read_text(), 5, "the reload failure log line")
