"""SQL92 subscriptions on the 4.x remoting path, against an in-process broker over real sockets: PULL_MESSAGE
with a posted subscription or the heartbeat's, CHECK_CLIENT_CONFIG, long polling that wakes for a match only,
delay-level deliveries filtered like any message, and `enablePropertyFilter=false` refusing as Apache does."""

from __future__ import annotations

import asyncio
import json

import pytest

from codec.codes import RequestCode, ResponseCode
from server.broker import BrokerController
from tests.server.helpers import PULL_MESSAGE, pull_ext, send, until
from tests.server.raw import RawClient, Reply, decode_records


async def sql_pull(c: RawClient, group: str, topic: str, offset: int, expression: str | None, qid: int = 0,
                   suspend_ms: int = 0, sub_version: int = 1, timeout: float = 10.0) -> Reply:
    ext = pull_ext(group, topic, qid, offset, expression, suspend_ms=suspend_ms, sub_version=sub_version)
    ext["expressionType"] = "SQL92"
    return await c.invoke(PULL_MESSAGE, ext, timeout=timeout)


def bodies(r: Reply) -> list[bytes]:
    return [m["body"] for m in decode_records(r.body)] if r.code == 0 else []


async def fill(c: RawClient, topic: str) -> None:
    for body, tags, region, amount in [(b"m0", "TagA", "eu", "50"), (b"m1", "TagB", "eu", "150"),
                                      (b"m2", "TagA", "us", "500"), (b"m3", "TagA", None, "900"),
                                      (b"m4", "TagB", "eu", "lots")]:
        extra = {"amount": amount, **({"region": region} if region else {})}
        r = await send(c, topic, body, tags=tags, qid=0, properties=extra)
        assert r.code == 0, r.remark


async def test_pull_with_posted_sql92_subscription_filters_on_properties(make_broker) -> None:
    b: BrokerController = await make_broker(enable_property_filter=True)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await fill(c, "Orders")
        r = await sql_pull(c, "GS", "Orders", 0, "region = 'eu' AND amount > 100")
        assert r.code == 0 and bodies(r) == [b"m1"]  # m4's amount does not parse: no match, no error
        assert r.ext["nextBeginOffset"] == "5"
        assert bodies(await sql_pull(c, "GS", "Orders", 0, "TAGS = 'TagA' AND region IS NULL")) == [b"m3"]
        assert bodies(await sql_pull(c, "GS", "Orders", 0, "amount BETWEEN 100 AND 600")) == [b"m1", b"m2"]
        assert bodies(await sql_pull(c, "GS", "Orders", 0, "region IN ('us') OR TAGS = 'TagB'")) == [
            b"m1", b"m2", b"m4"]
        nothing = await sql_pull(c, "GS", "Orders", 0, "region = 'apac'")
        assert nothing.code == ResponseCode.PULL_RETRY_IMMEDIATELY and nothing.ext["nextBeginOffset"] == "5"
        bad = await sql_pull(c, "GS", "Orders", 0, "region = 'eu' AND amount >")
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "column 27" in (bad.remark or ""), bad.remark
    finally:
        await c.close()


async def test_property_filter_off_refuses_sql92_like_apache(broker_ctl: BrokerController, client: RawClient) -> None:
    await fill(client, "Orders")
    r = await sql_pull(client, "GS", "Orders", 0, "region = 'eu'")
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == "The broker does not support consumer to filter message by SQL92"
    check = await client.invoke(RequestCode.CHECK_CLIENT_CONFIG, {}, check_body("GS", "Orders", "region = 'eu'"))
    assert check.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (check.remark or "")


def check_body(group: str, topic: str, expression: str, expression_type: str = "SQL92") -> bytes:
    return json.dumps({"clientId": "c@1", "group": group, "subscriptionData": {
        "classFilterMode": False, "codeSet": [], "expressionType": expression_type, "subString": expression,
        "subVersion": 1, "tagsSet": [], "topic": topic}}).encode()


def heartbeat(group: str, topic: str, expression: str, version: int) -> bytes:
    return json.dumps({"clientID": "c@1", "consumerDataSet": [{
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY", "groupName": group,
        "messageModel": "CLUSTERING", "unitMode": False, "subscriptionDataSet": [
            {"classFilterMode": False, "codeSet": [], "expressionType": "SQL92", "subString": expression,
             "subVersion": version, "tagsSet": [], "topic": topic}]}], "producerDataSet": []}).encode()


async def test_check_client_config_refuses_a_bad_expression_with_its_position(make_broker) -> None:
    b: BrokerController = await make_broker(enable_property_filter=True)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        ok = await c.invoke(RequestCode.CHECK_CLIENT_CONFIG, {}, check_body("G", "T", "a > 1 AND b IN ('x')"))
        assert ok.code == ResponseCode.SUCCESS
        tag = await c.invoke(RequestCode.CHECK_CLIENT_CONFIG, {}, check_body("G", "T", "a ||", "TAG"))
        assert tag.code == ResponseCode.SUCCESS
        bad = await c.invoke(RequestCode.CHECK_CLIENT_CONFIG, {}, check_body("G", "T", "a > 'x'"))
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert bad.remark == "Invalid MessageSelector: value 'x' cannot be compared at line 1, column 5"
    finally:
        await c.close()


async def test_heartbeat_subscription_drives_pulls_without_a_posted_one(make_broker) -> None:
    b: BrokerController = await make_broker(enable_property_filter=True)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await fill(c, "Orders")
        assert (await c.invoke(RequestCode.HEART_BEAT, {}, heartbeat("GH", "Orders", "amount >= 500", 7))).code == 0
        r = await sql_pull(c, "GH", "Orders", 0, None, sub_version=7)
        assert bodies(r) == [b"m2", b"m3"]
        assert (await c.invoke(RequestCode.HEART_BEAT, {}, heartbeat("GH", "Orders", "amount >", 8))).code == 0
        broken = await sql_pull(c, "GH", "Orders", 0, None, sub_version=8)
        assert broken.code == ResponseCode.FILTER_DATA_NOT_EXIST and "column" in (broken.remark or "")
    finally:
        await c.close()


@pytest.mark.parametrize("bitmap", [False, True])
async def test_held_pull_wakes_only_for_a_matching_message(make_broker, bitmap: bool) -> None:
    b: BrokerController = await make_broker(enable_property_filter=True, enable_calc_filter_bit_map=bitmap)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        assert (await send(c, "Held", b"first", qid=0, channel="web")).code == 0
        held = asyncio.ensure_future(sql_pull(c, "GS", "Held", 1, "channel = 'app'", suspend_ms=60_000,
                                              timeout=90))
        await until(lambda: b.pull_hold.held_count == 1, 30)
        assert (await send(c, "Held", b"web", qid=0, channel="web")).code == 0
        # woken by the non-matching message, it looked, found no match and went back to wait
        await until(lambda: b.pull_hold.woken_by_message == 1 and b.pull_hold.held_count == 1, 30)
        assert not held.done()
        assert (await send(c, "Held", b"app", qid=0, channel="app")).code == 0
        r = await asyncio.wait_for(held, 30)  # < the 60 s suspend: answered by the matching message
        assert r.code == 0 and bodies(r) == [b"app"] and r.ext["nextBeginOffset"] == "3"
    finally:
        await c.close()


async def test_delay_level_deliveries_are_filtered_on_the_real_topic(make_broker) -> None:
    b: BrokerController = await make_broker(enable_property_filter=True)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        for body, channel in [(b"close-web", "web"), (b"close-app", "app")]:
            assert (await send(c, "Pay", body, qid=0, DELAY="1", channel=channel)).code == 0
        # a held pull on the real topic: answered when a delivery matches (level 1 = 1 s)
        r = await sql_pull(c, "GPay", "Pay", 0, "channel = 'app'", suspend_ms=15_000, timeout=20)
        while r.code == ResponseCode.PULL_RETRY_IMMEDIATELY:  # delivered in two passes: the first had no match
            r = await sql_pull(c, "GPay", "Pay", int(r.ext["nextBeginOffset"]), "channel = 'app'",
                               suspend_ms=15_000, timeout=20)
        assert r.code == 0 and bodies(r) == [b"close-app"]
        recs = decode_records(r.body)
        assert recs[0]["props"]["REAL_TOPIC"] == "Pay" and recs[0]["props"]["channel"] == "app"
    finally:
        await c.close()


async def test_retry_topic_filtered_only_with_filter_support_retry(make_broker, tmp_path) -> None:
    """%RETRY%group holds what the group's consumers sent back; Apache re-filters it only with
    filterSupportRetry=true, by the group's subscription to each message's RETRY_TOPIC."""
    for support, want in ((False, [b"r-web", b"r-app", b"r-other-topic"]), (True, [b"r-app", b"r-other-topic"])):
        b: BrokerController = await make_broker(store=tmp_path / f"s{support}", enable_property_filter=True,
                                                filter_support_retry=support)
        c = await RawClient.connect(b.config.broker_addr)
        try:
            assert (await c.invoke(RequestCode.HEART_BEAT, {}, heartbeat("GR", "Orders", "channel = 'app'", 1))).code == 0
            for body, real, channel in [(b"r-web", "Orders", "web"), (b"r-app", "Orders", "app"),
                                        (b"r-other-topic", "Elsewhere", "web")]:
                r = await send(c, "%RETRY%GR", body, qid=0, RETRY_TOPIC=real, channel=channel)
                assert r.code == 0, r.remark
            pulled = await c.invoke(PULL_MESSAGE, pull_ext("GR", "%RETRY%GR", 0, 0, "*"))
            assert bodies(pulled) == want, support
        finally:
            await c.close()


async def test_sql92_answers_equal_the_reference_evaluator_through_the_store(make_broker) -> None:
    """The processor (fast evaluator on the record bytes) writes the very frame the pull reference writes when its
    store lookup filters with the reference evaluator on each record's decoded properties."""
    from codec.record import read_properties
    from codec.sql92 import Selector
    from server.processor_wiring import pull_deps
    from server.processors.pull import PullProcessor
    from server.processors.pull_reference import pull_answer
    from tests.helpers.checks import present
    from tests.server.helpers import LoopbackPeer
    from tests.server.test_pull_frames import request

    b: BrokerController = await make_broker(enable_property_filter=True)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await fill(c, "Frames")
        pp = PullProcessor(pull_deps(b))
        for n, expression in enumerate(["region = 'eu' AND amount > 100", "amount > 100 OR region = 'eu'",
                                        "TAGS NOT IN ('TagB') AND region IS NOT NULL", "region = 'none'"]):
            sel = Selector(expression)

            def by_reference(rec: memoryview, sel: Selector = sel) -> bool:
                return sel.matches_properties(read_properties(rec))
            for offset, max_nums in ((0, 32), (1, 2), (4, 1)):
                cmd = request(0, 500 + n, group="GF", topic="Frames", qid=0, offset=offset, sub=expression,
                              max_nums=max_nums)
                cmd.ext_fields["expressionType"] = "SQL92"
                got = pp(LoopbackPeer(), cmd)
                assert type(got) is list
                want = pull_answer(present(b.store), cmd, "Frames", 0, offset, max_nums, None, by_reference)
                assert b"".join(got) == want, (expression, offset)
    finally:
        await c.close()
