"""delaymq-proxy's metadata cache (server.proxy.brokers.Expiring: a group's settings, a topic's message type):
entries expire after their TTL and the cache never holds more than its limit; and the accepted message types a
message.type attribute gives (server.grpc.backend.accepted_types, shared by the broker's endpoint and the proxy)."""

from __future__ import annotations

from server.grpc.backend import accepted_types
from server.grpc.v2 import definition_pb2 as pb
from server.proxy.brokers import Expiring


def test_an_entry_is_reused_until_its_ttl_then_asked_again() -> None:
    cache: Expiring[str, bool] = Expiring(10.0, 4)
    cache.put("g", True, now=100.0)
    assert cache.get("g", now=109.9) is True
    assert cache.get("g", now=110.0) is None  # expired: the caller asks the broker again
    assert len(cache) == 0


def test_the_cache_is_bounded_and_drops_the_least_recently_stored() -> None:
    cache: Expiring[int, int] = Expiring(10.0, 3)
    for i in range(5):
        cache.put(i, i * 10, now=1.0)
    assert len(cache) == 3
    assert [cache.get(i, now=2.0) for i in range(5)] == [None, None, 20, 30, 40]
    cache.put(2, 21, now=3.0)  # stored again: now the most recent
    cache.put(5, 50, now=3.0)
    assert [cache.get(i, now=4.0) for i in (2, 3, 4, 5)] == [21, None, 40, 50]


def test_a_message_type_attribute_narrows_the_accepted_types_and_none_accepts_every_type() -> None:
    every = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
    assert accepted_types("DELAY") == (pb.DELAY,)
    assert accepted_types("FIFO") == (pb.FIFO,)
    assert accepted_types("TRANSACTION") == (pb.TRANSACTION,)
    assert accepted_types("NORMAL") == (pb.NORMAL,)
    for none in (None, "", "UNSPECIFIED"):
        assert accepted_types(none) == every
