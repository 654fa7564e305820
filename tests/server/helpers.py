"""Request builders shared by the server tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from codec.codes import create_send_message_request_header_v2
from tests.server.raw import RawClient, Reply, props

SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH = 10, 310, 320
PULL_MESSAGE = 11


def send_ext(topic: str, properties: str = "", qid: int = -1, v2: bool = True, batch: bool = False,
             sys_flag: int = 0, reconsume: int | None = None, max_reconsume: int | None = None,
             group: str = "PG") -> dict[str, str]:
    v1 = {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
          "queueId": str(qid), "sysFlag": str(sys_flag), "bornTimestamp": str(int(time.time() * 1000)),
          "flag": "0", "properties": properties, "batch": "true" if batch else "false"}
    if reconsume is not None:
        v1["reconsumeTimes"] = str(reconsume)
    if max_reconsume is not None:
        v1["maxReconsumeTimes"] = str(max_reconsume)
    if not v2:
        return v1
    return create_send_message_request_header_v2(v1)


class LoopbackPeer:
    """The `Peer` (server.processors.Peer) of a processor called directly, without a connection."""

    remote_addr = ("127.0.0.1", 0)


async def send(c: RawClient, topic: str, body: bytes, tags: str | None = None, keys: str | None = None,
               qid: int = -1, code: int = SEND_MESSAGE_V2, properties: Mapping[str, object] | None = None,
               **extra_props: object) -> Reply:
    """SEND_MESSAGE(_V2) with TAGS, KEYS, `properties` and the `extra_props` keywords as properties (WAIT true
    unless given)."""
    p = {}
    if tags:
        p["TAGS"] = tags
    if keys:
        p["KEYS"] = keys
    p.update({k: str(v) for k, v in {**(properties or {}), **extra_props}.items()})
    p.setdefault("WAIT", "true")
    return await c.invoke(code, send_ext(topic, props(**p), qid, v2=code != SEND_MESSAGE), body)


def pull_ext(group: str, topic: str, qid: int, offset: int, sub: str | None = "*", max_nums: int = 32,
             suspend_ms: int = 0, commit_offset: int | None = None, sub_version: int = 0) -> dict[str, str]:
    flag = 0
    if commit_offset is not None:
        flag |= 1
    if suspend_ms:
        flag |= 2
    if sub is not None:
        flag |= 4
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
           "maxMsgNums": str(max_nums), "sysFlag": str(flag), "commitOffset": str(commit_offset or 0),
           "suspendTimeoutMillis": str(suspend_ms), "subVersion": str(sub_version), "expressionType": "TAG"}
    if sub is not None:
        ext["subscription"] = sub
    return ext


async def pull(c: RawClient, group: str, topic: str, qid: int, offset: int, sub: str | None = "*",
               max_nums: int = 32, suspend_ms: int = 0, commit_offset: int | None = None, sub_version: int = 0,
               timeout: float = 10.0) -> Reply:
    return await c.invoke(PULL_MESSAGE, pull_ext(group, topic, qid, offset, sub, max_nums, suspend_ms, commit_offset,
                                                 sub_version), timeout=timeout)


async def until(pred: Callable[[], object], timeout: float) -> None:
    """Wait for a broker-side condition (in-process state) with a bounded timeout."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        await asyncio.sleep(0.005)
