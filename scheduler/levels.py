"""Delay levels (scheduled-messages.md §1.1): level/queue mapping, deliver times and the store's tagsCode
rule for schedule records. `messageDelayLevel` is parsed by codec.durations (re-exported here). Level L
lives in SCHEDULE_TOPIC_XXXX queue L-1.
"""

from __future__ import annotations

from codec.codes import SCHEDULE_TOPIC as SCHEDULE_TOPIC  # the scheduler's names (explicit re-exports)
from codec.durations import DEFAULT_DELAY_LEVELS as DEFAULT_DELAY_LEVELS
from codec.durations import parse_delay_levels as parse_delay_levels
from codec.properties import MessageConst
from storage.store_types import TagsCodeOf, tags_hash_code


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def compute_deliver_timestamp(levels_ms: list[int], level: int, store_ts: int) -> int:
    """§1.3: store timestamp + the level's delay (1000 ms for a level not in the table)."""
    if 0 < level <= len(levels_ms):
        return store_ts + levels_ms[level - 1]
    return store_ts + 1000


def correct_deliver_timestamp(now: int, deliver_ts: int, delay_ms: int) -> int:
    """§1.4: a deliver timestamp further away than the level's delay (clock jump, corrupt value) is now."""
    return now if deliver_ts > now + delay_ms else deliver_ts


def schedule_tags_code(levels_ms: list[int]) -> TagsCodeOf:
    """The store's tagsCode rule with delay levels: a SCHEDULE_TOPIC_XXXX record's unit holds its deliver
    time (store timestamp + the level's delay, levels past the table clamped to the last), any other
    record's the TAGS hash. Given to the MessageStore for the units recovery and replication rebuild."""

    def tags_code_of(topic: str, props: dict[str, str], store_ts: int) -> int:
        if topic == SCHEDULE_TOPIC and levels_ms:
            try:
                level = int(props.get(MessageConst.DELAY, "0"))
            except ValueError:
                level = 0
            if level > 0:
                return store_ts + levels_ms[min(level, len(levels_ms)) - 1]
        return tags_hash_code(topic, props, store_ts)

    return tags_code_of
