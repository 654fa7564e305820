"""The SQL92 bitmap pre-filter on pop (server/pop/service.py, enableCalcFilterBitMap=true): a POP_MESSAGE with a
1 %-selective SQL92 expression gets exactly the matching messages, as with the bitmap off, and the broker reads
only the matching records from the CommitLog (GET_BROKER_RUNTIME_INFO's popCommitLogBytesRead and
filterBitmapSkipped), where without the bitmap it reads every record."""

from __future__ import annotations

import json

import pytest

from codec.codes import RequestCode, ResponseCode
from tests.server.helpers import send
from tests.server.raw import RawClient, decode_records
from tests.server.test_pop_remoting import POP, create_topic

pytestmark = pytest.mark.process

N, EVERY = 500, 100  # 1 % of the messages match
EXPRESSION = "region = 'eu' AND amount >= 0"


async def runtime_table(c: RawClient) -> dict[str, str]:
    r = await c.invoke(RequestCode.GET_BROKER_RUNTIME_INFO, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    table: dict[str, str] = json.loads(r.body)["table"]
    return table


async def sql_pop(c: RawClient, group: str, topic: str) -> list[bytes]:
    r = await c.invoke(POP, {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "32",
                             "invisibleTime": "60000", "pollTime": "0", "bornTime": "0", "initMode": "0",
                             "expType": "SQL92", "exp": EXPRESSION})
    if r.code == ResponseCode.POLLING_TIMEOUT:
        return []
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return [rec["body"] for rec in decode_records(r.body)]


async def test_pop_with_the_bitmap_reads_only_the_matching_records(broker_factory) -> None:
    read: dict[bool, int] = {}
    for on in (False, True):
        b = broker_factory({"enablePropertyFilter": "true", "enableCalcFilterBitMap": str(on).lower()})
        c = await RawClient.connect(b.addr)
        try:
            await create_topic(c, "PopBm", queues=2)
            assert await sql_pop(c, "GBm", "PopBm") == []  # registers the group's expression (bitmap on)
            for i in range(N):
                r = await send(c, "PopBm", f"m{i}".encode(), qid=i % 2, region="eu" if i % EVERY == 0 else "us",
                               amount=str(i))
                assert r.code == 0, r.remark
            got: list[bytes] = []
            while batch := await sql_pop(c, "GBm", "PopBm"):
                got += batch
            assert sorted(got) == sorted(f"m{i}".encode() for i in range(0, N, EVERY))
            table = await runtime_table(c)
            read[on] = int(table["popCommitLogBytesRead"])
            if on:
                assert int(table["filterBitmapSkipped"]) == N - N // EVERY
            else:
                assert "filterBitmapSkipped" not in table
        finally:
            await c.close()
    assert read[False] > 0
    # with the bitmap only the 5 matching records are read: 1 % of the bytes, the target is <= 5 %
    assert read[True] * 20 <= read[False], read
