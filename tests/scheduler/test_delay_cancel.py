"""The cancel set of the delay levels (scheduler.delay_cancel) is kept where the store says
(`MessageStore.config_file`: `config/delayCancel.json`, atomic, `.bak` fallback) and survives a restart."""

from __future__ import annotations

from scheduler.delay_levels import DelayConfig, DelayLevelService
from scheduler.levels import parse_delay_levels
from tests.scheduler.helpers import FAST_LEVELS, delay_config, open_store


async def test_cancels_survive_a_restart_and_forget_what_was_passed(tmp_path):
    store = open_store(tmp_path)
    try:
        svc = DelayLevelService(store, delay_config(tmp_path))
        svc.load()
        assert svc.cancels.add(2, 7, "U7") and svc.cancels.add(2, 9, "U9") and svc.cancels.add(3, 1, "U1")
        assert not svc.cancels.add(2, 7, "U7")  # already cancelled
        path = tmp_path / "config" / "delayCancel.json"
        assert path.exists()

        again = DelayLevelService(store, delay_config(tmp_path))
        again.load()
        assert again.cancels.by_level == {2: {7: "U7", 9: "U9"}, 3: {1: "U1"}}
        assert again.cancels.passed(2, 8) == 1  # delivery moved past offset 7: persisted without it

        path.write_text("{torn")  # a torn primary: the previous version (.bak) is read
        third = DelayLevelService(store, delay_config(tmp_path))
        third.load()
        assert third.cancels.by_level == {2: {7: "U7", 9: "U9"}, 3: {1: "U1"}}
    finally:
        await store.shutdown()


async def test_no_config_dir_keeps_cancels_in_memory_only(tmp_path):
    store = open_store(tmp_path)
    try:
        svc = DelayLevelService(store, DelayConfig(levels_ms=parse_delay_levels(FAST_LEVELS)))
        svc.load()
        assert svc.cancels.add(1, 0, "U0") and svc.cancels.is_cancelled(1, 0)
        assert not (tmp_path / "config" / "delayCancel.json").exists()
    finally:
        await store.shutdown()
