"""The broker's components start in order and stop in reverse, each stop on its own; and a real broker's
component list is that order (tables and store first, the ports after the services they serve)."""

from __future__ import annotations

import pytest

from server.lifecycle import Lifecycle


async def test_start_in_order_stop_in_reverse_each_step_on_its_own():
    calls: list[str] = []

    async def async_stop() -> None:
        calls.append("-b")

    def failing_stop() -> None:
        calls.append("-c")
        raise OSError("disk full")

    life = Lifecycle()
    life.add("a", start=lambda: calls.append("+a"), stop=lambda: calls.append("-a"))
    life.add("b", start=lambda: calls.append("+b"), stop=async_stop)
    life.add("c", stop=failing_stop)
    life.add("d", start=lambda: calls.append("+d"))
    await life.start()
    assert life.started == ["a", "b", "c", "d"]
    await life.stop()
    # c's failure is logged; b and a still stop
    assert calls == ["+a", "+b", "+d", "-c", "-b", "-a"]
    assert life.started == []
    with pytest.raises(ValueError, match="added twice"):
        life.add("a")


async def test_a_stop_that_never_finishes_is_abandoned_and_the_rest_still_stop():
    import asyncio

    calls: list[str] = []
    stuck = asyncio.Event()  # never set: a service whose stop hangs

    life = Lifecycle(stop_timeout_s=0.2)
    life.add("store", stop=lambda: calls.append("-store"))
    life.add("hung", stop=stuck.wait)
    await life.start()
    await life.stop()
    assert calls == ["-store"] and life.started == []


async def test_a_start_that_fails_leaves_only_the_ones_before_it_to_stop():
    calls: list[str] = []

    def refuse() -> None:
        raise OSError("port taken")

    life = Lifecycle()
    life.add("a", start=lambda: calls.append("+a"), stop=lambda: calls.append("-a"))
    life.add("b", start=refuse, stop=lambda: calls.append("-b"))
    life.add("c", start=lambda: calls.append("+c"), stop=lambda: calls.append("-c"))
    with pytest.raises(OSError, match="port taken"):
        await life.start()
    await life.stop()
    assert calls == ["+a", "-a"]


async def test_a_broker_starts_its_parts_in_the_assembly_order(broker_ctl):
    names = broker_ctl.lifecycle.started
    assert names == [c.name for c in broker_ctl.lifecycle.components]
    assert names.index("tables") < names.index("store") < names.index("delay_service") < names.index("remoting")
    assert names.index("replica") < names.index("remoting") < names.index("pull_hold")  # drained before HA stops
    assert broker_ctl.runtime_view is not None and broker_ctl.metrics_view is not None
    assert [name for name, _ in broker_ctl.runtime_view.sources][-1] == "replica"
