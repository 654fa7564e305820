"""kill -9 of a broker subprocess in the middle of a burst of UPDATE_AND_CREATE_TOPIC and
UPDATE_CONSUMER_OFFSET requests: after the restart every acknowledged change is there, and the
tables load (no torn state). ASYNC_FLUSH, the weaker policy: a response means "committed to meta.db's
WAL", which a process crash cannot take back."""

from __future__ import annotations

import asyncio

import pytest

from codec import admin_bodies as AB
from tests.helpers.checks import present
from tests.server.raw import RawClient

pytestmark = pytest.mark.process

CREATE_TOPIC, QUERY_OFFSET, UPDATE_OFFSET, GET_ALL_TOPIC_CONFIG = 17, 14, 15, 21
GROUPS, QUEUES, PER_ROUND = 12, 4, 48  # 48 creates + one commit for each (group, queue) per round


def _create(topic: str) -> tuple[int, dict, bytes, bool]:
    return (CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
                           "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"},
            b"", False)


async def test_kill9_during_a_burst_of_creates_and_offset_commits_loses_no_acknowledged_change(broker_factory):
    b = broker_factory({"flushDiskType": "ASYNC_FLUSH"})
    c = await RawClient.connect(b.addr)
    acked_topics: set[str] = set()
    acked_offsets: dict[tuple[str, int], int] = {}
    enough = asyncio.Event()

    async def burst() -> None:
        rnd = 0
        while True:
            rnd += 1
            reqs = [_create(f"K9-{rnd}-{i}") for i in range(PER_ROUND)]
            reqs += [(UPDATE_OFFSET, {"consumerGroup": f"G{g}", "topic": "K9-offsets", "queueId": str(q),
                                      "commitOffset": str(rnd)}, b"", False)
                     for g in range(GROUPS) for q in range(QUEUES)]
            futs = c.pipeline(reqs)
            for req, fut in zip(reqs, futs, strict=True):
                try:
                    r = await present(fut)
                except ConnectionError:
                    return
                assert r.code == 0, r.remark
                ext = req[1]
                if req[0] == CREATE_TOPIC:
                    acked_topics.add(ext["topic"])
                else:
                    acked_offsets[(ext["consumerGroup"], int(ext["queueId"]))] = rnd
            if len(acked_topics) >= 3000:
                enough.set()

    task = asyncio.ensure_future(burst())
    await asyncio.wait_for(enough.wait(), 60)
    b.kill()  # requests of the current round are in flight
    await asyncio.wait_for(task, 30)
    await c.close()
    assert len(acked_topics) >= 3000 and len(acked_offsets) == GROUPS * QUEUES

    b.start()
    c = await RawClient.connect(b.addr)
    try:
        r = await c.invoke(GET_ALL_TOPIC_CONFIG, {})
        assert r.code == 0, r.remark
        table = AB.decode_table(r.body, "topicConfigTable")
        missing = acked_topics - set(table)
        assert not missing, f"{len(missing)} acknowledged topics lost, e.g. {sorted(missing)[:5]}"
        assert table[next(iter(acked_topics))]["writeQueueNums"] == 4
        for (group, qid), rnd in sorted(acked_offsets.items()):
            r = await c.invoke(QUERY_OFFSET, {"consumerGroup": group, "topic": "K9-offsets", "queueId": str(qid)})
            assert r.code == 0 and int(r.ext["offset"]) >= rnd, (group, qid, rnd, r.code, r.ext)
    finally:
        await c.close()


async def test_a_pipelined_run_of_offset_commits_is_answered_after_one_commit(broker_factory):
    b = broker_factory()
    c = await RawClient.connect(b.addr)
    try:
        reqs = [(UPDATE_OFFSET, {"consumerGroup": "RunG", "topic": "RunT", "queueId": str(i % 4),
                                 "commitOffset": str(i)}, b"", i % 5 == 0) for i in range(40)]
        reqs.insert(7, (UPDATE_OFFSET, {"consumerGroup": "RunG", "topic": "RunT", "commitOffset": "1"}, b"", False))
        reqs.insert(9, (UPDATE_OFFSET, {"consumerGroup": "RunG", "topic": "RunT", "queueId": "x",
                                        "commitOffset": "1"}, b"", False))
        futs = c.pipeline(reqs)
        replies = [await f for f in futs if f is not None]
        codes = [r.code for r in replies]
        assert codes.count(1) == 2 and codes.count(0) == len(replies) - 2
        bad = [r.remark or "" for r in replies if r.code == 1]
        assert "queueId" in bad[0] and "queueId" in bad[1]
        for q in range(4):
            r = await c.invoke(QUERY_OFFSET, {"consumerGroup": "RunG", "topic": "RunT", "queueId": str(q)})
            assert r.code == 0 and int(r.ext["offset"]) == 36 + q  # the last commit of each queue (oneway too)
    finally:
        await c.close()
