"""Client manager, rebalance locks and long-poll hold on a real event loop (no broker needed)."""

import asyncio

from server.client_manager import ClientManager, SubscriptionData, enum_name
from server.pull_hold import PullHoldService
from server.rebalance_lock import RebalanceLockManager


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Conn:
    def __init__(self, name):
        self.name = name
        self.closed = False

    def close(self):
        self.closed = True


def test_enum_names_accept_names_and_ordinals():
    from server.client_manager import CONSUME_FROM, MESSAGE_MODELS
    assert enum_name(1, MESSAGE_MODELS, "?") == "CLUSTERING"
    assert enum_name("0", MESSAGE_MODELS, "?") == "BROADCASTING"
    assert enum_name("CONSUME_FROM_FIRST_OFFSET", CONSUME_FROM, "?") == "CONSUME_FROM_FIRST_OFFSET"
    assert enum_name(None, MESSAGE_MODELS, "CLUSTERING") == "CLUSTERING"


async def test_membership_changes_notify_every_channel_of_the_group():
    notified = []
    cm = ClientManager(lambda conn, group: notified.append((conn.name, group)))
    a, b = Conn("a"), Conn("b")
    sub = SubscriptionData("T", "*", sub_version=1)
    assert cm.register_consumer("G", a, "cid-a", subscriptions=[sub]) is True
    assert notified == [("a", "G")]
    assert cm.register_consumer("G", a, "cid-a", subscriptions=[sub]) is False  # refresh: no notify
    assert len(notified) == 1
    cm.register_consumer("G", b, "cid-b", subscriptions=[sub])
    assert sorted(notified[1:]) == [("a", "G"), ("b", "G")]
    assert sorted(cm.consumer_ids("G")) == ["cid-a", "cid-b"]
    notified.clear()
    cm.channel_closed(b)
    assert notified == [("a", "G")] and cm.consumer_ids("G") == ["cid-a"]
    cm.unregister_consumer("G", client_id="cid-a")
    assert cm.consumer_ids("G") == [] and cm.consumer_group("G") is None
    cm.shutdown()


async def test_newer_sub_version_replaces_subscription():
    cm = ClientManager()
    c = Conn("a")
    cm.register_consumer("G", c, "x", subscriptions=[SubscriptionData("T", "A", ("A",), frozenset({65}), 5)])
    cm.register_consumer("G", c, "x", subscriptions=[SubscriptionData("T", "B", ("B",), frozenset({66}), 6)])
    assert cm.find_subscription("G", "T").sub_version == 6
    cm.shutdown()


async def test_silent_channel_expires_via_its_timer():
    loop = asyncio.get_running_loop()
    clock = Clock()
    notified = []
    cm = ClientManager(lambda conn, g: notified.append(conn.name), expired_timeout_s=0.05, clock=clock)
    a, b = Conn("a"), Conn("b")
    closed = loop.create_future()
    a.close = lambda: closed.done() or closed.set_result(True)
    cm.register_consumer("G", a, "a")
    cm.register_consumer("G", b, "b")
    clock.t += 0.04
    cm.register_consumer("G", b, "b")  # b heartbeats; its timer re-arms lazily when it fires
    clock.t += 0.02  # a has now been silent 0.06 s > 0.05 s, b only 0.02 s
    await asyncio.wait_for(closed, 5)
    assert cm.consumer_ids("G") == ["b"]
    assert notified[-1] == "b"
    assert not b.closed
    cm.shutdown()


def test_locks_belong_to_one_client_and_expire():
    clock = Clock()
    lm = RebalanceLockManager(60000, clock)
    mq0, mq1 = ("T", "broker-a", 0), ("T", "broker-a", 1)
    assert lm.try_lock_batch("G", [mq0, mq1], "c1") == [mq0, mq1]
    assert lm.try_lock_batch("G", [mq0, mq1], "c2") == []
    assert lm.try_lock_batch("G", [mq0], "c1") == [mq0]  # renewal by the owner
    lm.unlock_batch("G", [mq1], "c2")  # not the owner: no effect
    assert lm.owner("G", mq1) == "c1"
    lm.unlock_batch("G", [mq1], "c1")
    assert lm.try_lock_batch("G", [mq1], "c2") == [mq1]
    clock.t += 61
    assert lm.try_lock_batch("G", [mq0], "c2") == [mq0]


async def test_pull_hold_wakes_on_dispatch_and_times_out():
    ph = PullHoldService()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    waiter = asyncio.ensure_future(ph.wait("T", 0, 5, 10.0))
    other = asyncio.ensure_future(ph.wait("T", 1, 0, 0.05))
    await asyncio.sleep(0)
    assert ph.held_count == 2
    ph.on_dispatch("T", 0, 5)  # max offset 5 == waiting offset: nothing new yet
    await asyncio.sleep(0)
    assert not waiter.done()
    ph.on_dispatch("T", 0, 6)
    assert await asyncio.wait_for(waiter, 1) is True
    assert await asyncio.wait_for(other, 1) is False
    assert loop.time() - t0 < 5
    assert ph.held_count == 0
    late = asyncio.ensure_future(ph.wait("T", 0, 9, 30.0))
    await asyncio.sleep(0)
    ph.shutdown()
    assert await asyncio.wait_for(late, 1) is False
