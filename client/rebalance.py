"""Queue allocation (AllocateMessageQueueAveragely) and the broker calls rebalancing needs."""

from __future__ import annotations

from collections.abc import Sequence

from . import _wire as w
from .instance import ClientInstance
from .message import MessageQueue


def allocate_averagely(current_cid: str, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> list[MessageQueue]:
    """RocketMQ's AllocateMessageQueueAveragely over sorted queues and sorted client ids."""
    mq_all, cid_all = sorted(mqs), sorted(cids)
    if current_cid not in cid_all or not mq_all:
        return []
    index = cid_all.index(current_cid)
    n, c = len(mq_all), len(cid_all)
    mod = n % c
    if n <= c:
        avg = 1
    elif mod > 0 and index < mod:
        avg = n // c + 1
    else:
        avg = n // c
    start = index * avg if (mod > 0 and index < mod) else index * avg + mod
    rng = min(avg, n - start)
    return [mq_all[(start + i) % n] for i in range(max(rng, 0))]


async def consumer_ids(instance: ClientInstance, group: str, broker_name: str) -> list[str]:
    resp = await instance.invoke_broker(broker_name, w.request(w.GET_CONSUMER_LIST_BY_GROUP,
                                                               {"consumerGroup": group}))
    w.check(resp, f"consumer list of {group}")
    if not resp.body:
        return []
    return list(w.loads_lenient(resp.body_bytes()).get("consumerIdList") or [])


def _lock_body(group: str, client_id: str, mqs: Sequence[MessageQueue]) -> bytes:
    return w.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": [m.to_json() for m in mqs]})


async def lock_batch(instance: ClientInstance, group: str, broker_name: str,
                     mqs: Sequence[MessageQueue]) -> set[MessageQueue]:
    """LOCK_BATCH_MQ: returns the queues this client now holds."""
    resp = await instance.invoke_broker(broker_name, w.request(
        w.LOCK_BATCH_MQ, {}, _lock_body(group, instance.client_id, mqs)))
    w.check(resp, "lock batch mq")
    if not resp.body:
        return set()
    return {MessageQueue.from_json(d) for d in w.loads_lenient(resp.body_bytes()).get("lockOKMQSet") or []}


async def unlock_batch(instance: ClientInstance, group: str, broker_name: str,
                       mqs: Sequence[MessageQueue]) -> None:
    resp = await instance.invoke_broker(broker_name, w.request(
        w.UNLOCK_BATCH_MQ, {}, _lock_body(group, instance.client_id, mqs)))
    w.check(resp, "unlock batch mq")


async def query_offset(instance: ClientInstance, code: int, mq: MessageQueue, **extra: object) -> int:
    """GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP → ``offset``."""
    fields = {"topic": mq.topic, "queueId": mq.queue_id, **extra}
    resp = await instance.invoke_broker(mq.broker_name, w.request(code, fields))
    w.check(resp, f"offset query {code} for {mq.topic}/{mq.queue_id}")
    return int((resp.ext_fields or {}).get("offset", 0))
