"""Plain ACL proven with the official C++ client (set_session_credentials) against a broker process."""

from __future__ import annotations

import uuid

import pytest

from tests.helpers.broker import tail
from tests.security.conftest import ADMIN_AK, ADMIN_SK, SUBONLY_AK, SUBONLY_SK, USER_AK, USER_SK
from tests.security.helpers import call

pytestmark = pytest.mark.interop
UPDATE_AND_CREATE_TOPIC, GET_MAX_OFFSET = 17, 30


def create_topic(broker, topic: str) -> None:
    r = call(broker.addr, UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}, ak=ADMIN_AK, sk=ADMIN_SK)
    assert r.code == 0, r


def stored(broker, topic: str) -> int:
    total = 0
    for q in range(4):
        r = call(broker.addr, GET_MAX_OFFSET, {"topic": topic, "queueId": q}, ak=ADMIN_AK, sk=ADMIN_SK)
        assert r.code == 0, r
        total += int(r.ext["offset"])
    return total


def test_signed_cpp_producer_and_consumer_pass(acl_broker, cpp_signed):
    create_topic(acl_broker, "TopicA")
    prod = cpp_signed("produce", acl_broker, USER_AK, USER_SK, topic="TopicA", count=5, stop_on_error=True)
    assert prod.wait_exit(60) == 0
    assert len(prod.of("sent")) == 5 and not prod.of("send_error"), prod.diagnostics()
    group = f"GID_acl_{uuid.uuid4().hex[:8]}"
    cons = cpp_signed("consume", acl_broker, USER_AK, USER_SK, topic="TopicA", group=group,
                      until_count=5, timeout=60)
    assert cons.wait_exit(90) == 0, cons.diagnostics()
    bodies = {e["body"] for e in cons.of("received")}
    assert bodies >= {e["body"] for e in prod.of("sent")}
    assert "acl.denied" not in tail(acl_broker.stderr_path, 200_000)


@pytest.mark.parametrize("ak,sk,reason", [
    (USER_AK, "wrongSecret9", "Check signature failed for accessKey=" + USER_AK),
    ("unknownKey7", USER_SK, "No acl config for unknownKey7"),
    (SUBONLY_AK, SUBONLY_SK, "No PUB permission for topic=TopicA"),
    (USER_AK, USER_SK, "No PUB permission for topic=TopicDenied"),
])
def test_refused_cpp_sends_store_nothing(acl_broker, cpp_signed, ak, sk, reason):
    topic = "TopicDenied" if "TopicDenied" in reason else "TopicA"
    create_topic(acl_broker, topic)
    prod = cpp_signed("produce", acl_broker, ak, sk, topic=topic, count=2, stop_on_error=True, send_timeout_ms=3000)
    assert prod.wait_exit(60) == 0
    assert prod.of("send_error") and not prod.of("sent"), prod.diagnostics()
    log = tail(acl_broker.stderr_path, 200_000)
    assert reason in log, f"broker log lacks {reason!r}"
    assert sk not in log and "wrongSecret9" not in log
    assert stored(acl_broker, topic) == 0


def test_admin_without_topic_permissions_sends_with_the_cpp_client(acl_broker, cpp_signed):
    # admin: true and no topicPerms/groupPerms passes every resource check, as Apache 4.9.7's
    # PlainPermissionManager (a plain_acl.yml copied from a real cluster keeps its admin working)
    prod = cpp_signed("produce", acl_broker, ADMIN_AK, ADMIN_SK, topic="AdminOnlyTopic", count=3, stop_on_error=True)
    assert prod.wait_exit(60) == 0
    assert len(prod.of("sent")) == 3 and not prod.of("send_error"), prod.diagnostics()
    assert stored(acl_broker, "AdminOnlyTopic") == 3
