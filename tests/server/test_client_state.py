"""Client manager, rebalance locks and long-poll hold on a real event loop (no broker needed)."""

import asyncio

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
    waiter = asyncio.ensure_future(ph.wait("T", 0, 5, 120.0))
    other = asyncio.ensure_future(ph.wait("T", 1, 0, 0.05))
    await asyncio.sleep(0)
    assert ph.held_count == 2
    ph.on_dispatch("T", 0, 5)  # max offset 5 == waiting offset: nothing new yet
    await asyncio.sleep(0)
    assert not waiter.done()
    ph.on_dispatch("T", 0, 6)
    assert await asyncio.wait_for(waiter, 30) is True  # True: woken by the dispatch (its own timeout is 120 s)
    assert await asyncio.wait_for(other, 30) is False  # False: its 0.05 s timeout ran out
    assert loop.time() - t0 >= 0.05 and ph.woken_by_timeout == 1  # it waited its timeout out
    assert ph.held_count == 0
    late = asyncio.ensure_future(ph.wait("T", 0, 9, 120.0))
    await asyncio.sleep(0)
    ph.shutdown()
    assert await asyncio.wait_for(late, 30) is False  # answered by the shutdown, long before its 120 s
