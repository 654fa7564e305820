"""The stock Java mqadmin 4.9.7 against a delaymq broker holding many topics (20,000 here to stay bounded
in time; the 100,000 run is `bench meta_scale`): `topicList` lists every one, `consumerProgress` shows a
group's per-queue progress and finds the group among them without `-g`."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.helpers.checks import present
from tests.helpers.java import mqadmin, requires_java
from tests.server.helpers import send
from tests.server.raw import RawClient

pytestmark = [requires_java, pytest.mark.java]

CREATE_TOPIC, UPDATE_OFFSET = 17, 15
N_TOPICS = 20_000


def _create(topic: str, queues: int = 4) -> tuple[int, dict, bytes, bool]:
    return (CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                           "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
                           "topicSysFlag": "0", "order": "false"}, b"", False)


async def _fill(addr: str) -> None:
    c = await RawClient.connect(addr)
    try:
        for start in range(0, N_TOPICS, 500):
            replies = await asyncio.gather(*map(present, c.pipeline([_create(f"tenant-{i:05d}") for i in range(start, start + 500)])))
            assert all(r.code == 0 for r in replies), [r.remark for r in replies if r.code][:3]
        assert (await asyncio.gather(*map(present, c.pipeline([_create("%RETRY%ProgressCG", 1)]))))[0].code == 0
        for q in range(4):
            for i in range(q + 2):
                assert (await send(c, "tenant-00007", b"m%d" % i, qid=q)).code == 0
            r = await c.invoke(UPDATE_OFFSET, {"consumerGroup": "ProgressCG", "topic": "tenant-00007",
                                               "queueId": str(q), "commitOffset": "1"})
            assert r.code == 0, r.remark
    finally:
        await c.close()


async def test_topic_list_and_consumer_progress_with_20000_topics(broker):
    await _fill(broker.addr)
    listed = await asyncio.to_thread(mqadmin, "topicList", "-n", broker.namesrv, timeout=120)
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    names = set(listed.stdout.split())
    missing = [f"tenant-{i:05d}" for i in range(N_TOPICS) if f"tenant-{i:05d}" not in names]
    assert not missing, f"{len(missing)} topics missing from topicList, e.g. {missing[:5]}"

    progress = await asyncio.to_thread(mqadmin, "consumerProgress", "-n", broker.namesrv, "-g", "ProgressCG",
                                       timeout=120)
    out = progress.stdout
    assert progress.returncode == 0, out[-2000:] + progress.stderr[-2000:]
    rows = [line.split() for line in out.splitlines() if line.startswith("tenant-00007")]
    # topic, broker name, queue id, broker offset, consumer offset, client ip, diff, last time
    assert sorted((int(r[2]), int(r[3]), int(r[4])) for r in rows) == [(q, q + 2, 1) for q in range(4)], out
    assert re.search(r"Diff Total:\s*10\b", out), out  # (2-1) + (3-1) + (4-1) + (5-1)

    every = await asyncio.to_thread(mqadmin, "consumerProgress", "-n", broker.namesrv, timeout=180)
    assert every.returncode == 0, every.stdout[-2000:] + every.stderr[-2000:]
    assert any(line.split()[:1] == ["ProgressCG"] for line in every.stdout.splitlines()), every.stdout[-3000:]
