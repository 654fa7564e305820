"""What pop consumption hands out and reads back (server.pop.service): the in-broker gRPC receipt handles
(`qid:offset:seq`; over remoting the receipt is Apache's extraInfo, codec.pop_receipt), TAG filter
expressions, a delivery, the failures a pop request meets (`PopError`: each front end maps its `Failure`
to its own code), and RocketMQ's averaging allocation that decides which queues of a mixed 4.x/5.x
group the 5.x members pop from."""

from __future__ import annotations

import enum
from typing import TypeAlias

from codec.properties import MessageConst as K
from codec.record import MessageRecord
from codec.sql92 import Selector


class Failure(enum.Enum):
    GROUP_NOT_FOUND = "group not found"
    FORBIDDEN = "forbidden"
    TOPIC_NOT_FOUND = "topic not found"
    BAD_REQUEST = "bad request"
    INVALID_RECEIPT = "invalid receipt"
    INTERNAL = "internal"


class PopError(Exception):
    """A pop request the broker refuses: the gRPC endpoint answers a proto Code, the remoting
    processors a ResponseCode, both with `message`."""

    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


def allocate_averagely(current_cid: str, queues: list[int], cids: list[str]) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragely (the 4.x default) over one broker's queue ids: the
    queues a 4.x client's rebalance gives `current_cid`. tests/grpc/test_mixed_group.py checks it
    against client.rebalance.allocate_averagely (the client side's copy) case by case."""
    mq_all, cid_all = sorted(queues), sorted(cids)
    if current_cid not in cid_all or not mq_all:
        return []
    index, n, c = cid_all.index(current_cid), len(mq_all), len(cid_all)
    mod = n % c
    avg = 1 if n <= c else (n // c + 1 if mod > 0 and index < mod else n // c)
    start = index * avg if (mod > 0 and index < mod) else index * avg + mod
    return [mq_all[(start + i) % n] for i in range(max(min(avg, n - start), 0))]


def encode_handle(qid: int, offset: int, seq: int) -> str:
    return f"{qid}:{offset}:{seq}"


def decode_handle(handle: str) -> tuple[int, int, int]:
    try:
        qid, offset, seq = (int(x) for x in handle.split(":"))
    except ValueError:
        raise PopError(Failure.INVALID_RECEIPT, f"receipt handle {handle!r} is not one of this broker's") from None
    return qid, offset, seq


class TagFilter:
    """A TAG filter expression: `*` / empty = everything, else tags joined by `||`."""

    def __init__(self, expression: str) -> None:
        tags = {t.strip() for t in (expression or "").split("||") if t.strip()}
        self.tags = None if not tags or "*" in tags else tags

    def accepts(self, rec: MessageRecord) -> bool:
        return self.tags is None or rec.properties.get(K.TAGS) in self.tags


class SqlFilter:
    """A SQL92 filter expression (FilterType.SQL), compiled by the broker's SubscriptionFilters. The pop path has
    the record decoded already, so it evaluates on the decoded properties (the reference evaluator)."""

    def __init__(self, selector: Selector) -> None:
        self.selector = selector

    def accepts(self, rec: MessageRecord) -> bool:
        return self.selector.matches_properties(rec.properties)


MessageFilter: TypeAlias = "TagFilter | SqlFilter"


class Delivery:
    """One message handed out: invisible from `pop_time` (wall-clock ms) for `invisible_ms`."""

    __slots__ = ("rec", "qid", "offset", "seq", "attempt", "invisible_ms", "pop_time")

    def __init__(self, rec: MessageRecord, qid: int, offset: int, seq: int, attempt: int,
                 invisible_ms: int, pop_time: int) -> None:
        self.rec, self.qid, self.offset, self.seq = rec, qid, offset, seq
        self.attempt, self.invisible_ms, self.pop_time = attempt, invisible_ms, pop_time

    @property
    def handle(self) -> str:
        return encode_handle(self.qid, self.offset, self.seq)
