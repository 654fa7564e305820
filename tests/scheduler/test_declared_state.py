"""The state the mixins of one object share is declared once (scheduler.delay_state.LevelState,
scheduler.timer.state.TimerState) and mypy checks each mixin against
it; these tests check the other half of that contract on real objects: every declared attribute is
assigned by the constructor, so a declaration can never name state that does
not exist at runtime."""

from __future__ import annotations

from scheduler.delay_levels import DelayLevelService
from scheduler.delay_state import LevelState
from scheduler.timer import TimerConfig, TimerMessageStore
from scheduler.timer.state import TimerState
from tests.scheduler.helpers import delay_config, open_store


def _declared(cls: type) -> list[str]:
    return [name for klass in cls.__mro__ for name in getattr(klass, "__annotations__", {})]


def _missing(obj: object, cls: type) -> list[str]:
    return [name for name in _declared(cls) if not hasattr(obj, name)]


async def test_every_declared_attribute_is_assigned(tmp_path):
    store = open_store(tmp_path)
    try:
        delay = DelayLevelService(store, delay_config(tmp_path))
        assert len(_declared(LevelState)) > 10 and all(_missing(lv, LevelState) == [] for lv in delay.levels)
        timer = TimerMessageStore(store, TimerConfig(precision_ms=100, timerlog_file_size=1 << 20, slots_total=3600))
        assert len(_declared(TimerState)) > 30 and _missing(timer, TimerState) == []
        timer.load()
        files = timer.files()  # the stages' view of the files is the public attributes, once loaded
        assert (files.wheel, files.timerlog, files.checkpoint, files.progress_file) == \
            (timer.wheel, timer.timerlog, timer.checkpoint, timer.progress_file)
        await timer.shutdown()
    finally:
        await store.shutdown()
