"""The metadata store through a broker process: a store written by the JSON-file tables is migrated at
start, and `delaymq-broker --export-config` writes RocketMQ's JSON files while the broker runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from server.broker import BrokerController
from storage.config_store import atomic_write_json
from tests.helpers.broker import REPO_ROOT
from tests.server.raw import RawClient

QUERY_OFFSET, UPDATE_OFFSET, ROUTE, CREATE_TOPIC = 14, 15, 105, 17


@pytest.mark.process
async def test_old_json_store_is_migrated_at_start_and_exported_while_running(tmp_path):
    from tests.helpers.broker import BrokerProcess, pick_port_pair

    work = tmp_path / "b"
    cfg = work / "store" / "config"
    cfg.mkdir(parents=True)
    atomic_write_json(str(cfg / "topics.json"), {"topicConfigTable": {"Legacy": {
        "topicName": "Legacy", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6, "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0, "order": False}}, "dataVersion": {"counter": 5, "timestamp": 1}})
    atomic_write_json(str(cfg / "consumerOffset.json"), {"offsetTable": {"Legacy@LG": {"0": 17, "2": 4}}})
    atomic_write_json(str(cfg / "subscriptionGroup.json"), {"subscriptionGroupTable": {
        "LG": {"groupName": "LG", "retryMaxTimes": 2}}})
    (cfg / "delayOffset.json").write_text('{"offsetTable":{1:0,2:0}}')
    b = BrokerProcess(work, config={"mappedFileSizeCommitLog": 32 << 20}, port=pick_port_pair()).start()
    try:
        c = await RawClient.connect(b.addr)
        r = await c.invoke(ROUTE, {"topic": "Legacy"})
        assert r.code == 0 and json.loads(r.body)["queueDatas"][0]["writeQueueNums"] == 3
        r = await c.invoke(QUERY_OFFSET, {"consumerGroup": "LG", "topic": "Legacy", "queueId": "0"})
        assert r.code == 0 and r.ext["offset"] == "17"
        assert (await c.invoke(UPDATE_OFFSET, {"consumerGroup": "LG", "topic": "Legacy", "queueId": "2",
                                               "commitOffset": "9"})).code == 0
        assert (await c.invoke(CREATE_TOPIC, {"topic": "Fresh", "defaultTopic": "TBW102", "readQueueNums": "2",
                                              "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                              "order": "false"})).code == 0
        await c.close()
        assert (cfg / "topics.json.migrated").exists() and not (cfg / "topics.json").exists()

        out = tmp_path / "export"
        res = subprocess.run([sys.executable, "-m", "server", "--store", str(work / "store"), "--export-config",
                              str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert sorted(p.rsplit("/", 1)[1] for p in res.stdout.split()) == [
            "consumerOffset.json", "delayOffset.json", "subscriptionGroup.json", "topics.json"]
        topics = json.loads((out / "topics.json").read_text())
        assert {"Legacy", "Fresh", "TBW102"} <= set(topics["topicConfigTable"])
        assert topics["dataVersion"]["counter"] > 5
        offsets = json.loads((out / "consumerOffset.json").read_text())["offsetTable"]
        assert offsets["Legacy@LG"] == {"0": 17, "2": 9}  # the acknowledged commit is in the export
        groups = json.loads((out / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
        assert groups["LG"]["retryMaxTimes"] == 2
        assert "offsetTable" in (out / "delayOffset.json").read_text()
    finally:
        b.stop()


def _heartbeat(client_id: str, group: str, topics: list[str], sub: str = "*") -> bytes:
    return json.dumps({"clientID": client_id, "consumerDataSet": [{
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY", "groupName": group,
        "messageModel": "CLUSTERING", "unitMode": False, "subscriptionDataSet": [
            {"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": sub, "subVersion": 1,
             "tagsSet": [] if sub == "*" else sub.split("||"), "topic": t} for t in topics]}],
        "producerDataSet": []}).encode()


async def test_heartbeats_with_many_subscriptions_repeated_and_changed(broker_ctl: BrokerController, client: RawClient):
    from codec import admin_bodies as AB

    heart_beat, connections = 34, 203
    topics = [f"hb-{i:05d}" for i in range(2000)]
    for _ in range(2):  # the second, identical body takes the remembered parsed form
        assert (await client.invoke(heart_beat, {}, _heartbeat("c1", "HBG", topics))).code == 0
    cc = AB.decode_consumer_connection((await client.invoke(connections, {"consumerGroup": "HBG"})).body)
    assert set(cc.subscriptions) == set(topics)
    changed = _heartbeat("c1", "HBG", topics[:10], "a||b")
    assert (await client.invoke(heart_beat, {}, changed)).code == 0
    cc = AB.decode_consumer_connection((await client.invoke(connections, {"consumerGroup": "HBG"})).body)
    assert set(cc.subscriptions) == set(topics[:10]) and cc.subscriptions["hb-00003"]["subString"] == "a||b"
    assert (await client.invoke(heart_beat, {}, b"{not json")).code == 1  # a bad body is still refused
    assert "%RETRY%HBG" in broker_ctl.topics.topics


async def test_metrics_page_in_slices_equals_the_one_piece_page(broker_ctl: BrokerController):
    from server.observability import prometheus

    for i in range(2500):
        broker_ctl.offsets.commit(f"cg-{i:04d}", f"T{i % 7}", i % 4, i)
    view = broker_ctl.metrics_view
    assert view is not None
    sliced = await prometheus.page_sliced(view, slice_n=100)
    whole = prometheus.render(prometheus.collect(view))

    def stable(page):  # process CPU / RSS / clock families move between the two calls
        return [line for line in page.splitlines() if not line.startswith(("process_", "# ", "rocketmq_storage_"))]

    assert stable(sliced) == stable(whole)
    lags = [line for line in sliced.splitlines() if line.startswith("rocketmq_consumer_lag_messages{")]
    assert len(lags) == 2500
    lazy = {f.name: f for f in prometheus.collect(view, lazy=True)}
    lag = lazy["rocketmq_consumer_lag_messages"]
    assert lag.samples == [] and lag.rows is not None  # made while rendering, a slice per loop turn
