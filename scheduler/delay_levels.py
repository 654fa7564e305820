"""Delay-level messages: the put hook (`transform_delay`) and the service entry point.

`transform_delay` is the write path of scheduled-messages.md §1.2: a message whose DELAY
property is L > 0 (transaction type NOT or COMMIT) is moved to SCHEDULE_TOPIC_XXXX queue L-1 with
REAL_TOPIC / REAL_QID, L clamped to the highest level. The returned delay becomes the
ConsumeQueue tagsCode offset (tagsCode = storeTimestamp + delay = the deliver timestamp).
`transform_delay_properties` is the same rewrite on a properties string (the send's plain path, which
never decodes the properties into a dict); a level it cannot take there (one to clamp, which edits
DELAY itself) it hands back to the dict path.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

from codec.codes import SysFlag
from codec.properties import MessageConst, property_token
from scheduler.delay_config import DelayConfig
from scheduler.delay_service import DelayLevelService
from scheduler.levels import SCHEDULE_TOPIC, parse_delay_levels

# property names, bound once for the per-message path (codec.properties.MessageConst)
_DELAY = MessageConst.DELAY
_REAL_QID = MessageConst.REAL_QID
_REAL_TOPIC = MessageConst.REAL_TOPIC
_TIMER_DELAY_MS = MessageConst.TIMER_DELAY_MS
_TIMER_DELAY_SEC = MessageConst.TIMER_DELAY_SEC
_TIMER_DELIVER_MS = MessageConst.TIMER_DELIVER_MS
_REAL_TOPIC_TOKEN, _REAL_QID_TOKEN = property_token(_REAL_TOPIC), property_token(_REAL_QID)  # "\x02NAME\x01"

if TYPE_CHECKING:
    from codec.record import MessageRecord

__all__ = ["DelayConfig", "DelayLevelService", "DelayedSend", "ON_DICT", "SCHEDULE_TOPIC", "level_of",
           "parse_delay_levels", "schedules", "transform_delay", "transform_delay_properties"]

_TRANSACTION_MASK, _TRANSACTION_COMMIT = SysFlag.TRANSACTION_MASK, SysFlag.TRANSACTION_COMMIT_TYPE
_TIMER_KEYS = (_TIMER_DELIVER_MS, _TIMER_DELAY_SEC, _TIMER_DELAY_MS)


def delay_level_of(props: dict[str, str]) -> int:
    """The DELAY property as an int; absent or unparsable counts as 0 (an ordinary message)."""
    return level_of(props.get(_DELAY))


def level_of(raw: str | None) -> int:
    """A DELAY property value as an int; absent, empty or unparsable counts as 0."""
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        return 0


def schedules(sys_flag: int) -> bool:
    """Whether a message of this transaction type may be scheduled (NOT or COMMIT; §1.2)."""
    return sys_flag & _TRANSACTION_MASK in (0, _TRANSACTION_COMMIT)


def transform_delay(record: MessageRecord, levels_ms: Sequence[int]) -> int | None:
    """Rewrite `record` (codec.record.MessageRecord) in place; the deliver delay in ms, or None."""
    if not schedules(record.sys_flag):
        return None
    props = record.properties
    level = delay_level_of(props)
    if level <= 0:
        return None
    max_level = len(levels_ms)
    if level > max_level:
        level = max_level
        props[_DELAY] = str(level)
    for key in _TIMER_KEYS:  # a delay level wins over timer properties (§4.2)
        props.pop(key, None)
    props[_REAL_TOPIC] = record.topic
    props[_REAL_QID] = str(record.queue_id)
    record.topic = SCHEDULE_TOPIC
    record.queue_id = level - 1
    return levels_ms[level - 1]


class DelayedSend(NamedTuple):
    """A delay-level message as it is stored (`transform_delay_properties`)."""

    properties: str  # the sent properties with REAL_TOPIC and REAL_QID appended
    topic: str  # SCHEDULE_TOPIC_XXXX
    queue_id: int  # level - 1
    delay_ms: int  # the level's delay: tagsCode = storeTimestamp + delay_ms


_new_delayed = tuple.__new__


class _OnDict(enum.Enum):
    ON_DICT = "on_dict"


ON_DICT: Final = _OnDict.ON_DICT  # `transform_delay_properties`: rewrite this one with `transform_delay` on the dict


def transform_delay_properties(properties: str, delay: str | None, topic: str, queue_id: int, sys_flag: int,
                               levels_ms: Sequence[int]) -> DelayedSend | Literal[_OnDict.ON_DICT] | None:
    """`transform_delay` on a properties string that holds no REAL_TOPIC, REAL_QID or TIMER_* key,
    `delay` being its DELAY value: the stored form, None for a message not scheduled (no level, or a
    transaction type that is not scheduled), or ON_DICT for a level above the highest (clamping it
    edits DELAY: the dict path does that)."""
    if not delay:
        return None
    try:  # level_of and schedules, inlined (every delayed send comes here)
        level = int(delay)
    except ValueError:
        return None
    if level <= 0 or sys_flag & _TRANSACTION_MASK not in (0, _TRANSACTION_COMMIT):
        return None
    if level > len(levels_ms):
        return ON_DICT
    # every delayed send comes here: built as NamedTuple._make does, without the Python-level __new__
    return _new_delayed(DelayedSend, (f"{properties}{_REAL_TOPIC_TOKEN}{topic}{_REAL_QID_TOKEN}{queue_id}",
                                      SCHEDULE_TOPIC, level - 1, levels_ms[level - 1]))
