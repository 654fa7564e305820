"""Subscriptions' message filters: which expression types a broker takes and their compiled SQL92 selectors.

One `SubscriptionFilters` per broker, shared by everything that holds a subscription (PULL_MESSAGE with or
without a posted subscription, CHECK_CLIENT_CONFIG, the gRPC endpoint's receive and telemetry). RocketMQ's
rules: `enablePropertyFilter` (default false) gates SQL92; a TAG subscription never reaches here; an
expression is compiled once per (group, topic, subVersion, expression) into a `codec.sql92.Selector`
(bounded cache: a new subVersion from a consumer compiles once more, garbage keys cost one clear per
`max_size`), a refusal is remembered the same way.

`record_filter` is what the store's pull lookup takes (`get_messages(..., record_filter=)`): a predicate on a
stored record's bytes. With `filterSupportRetry` (default false, as in Apache) a group's `%RETRY%` topic is
filtered too: each retried message by the group's SQL92 subscription to the topic it was first sent to (its
RETRY_TOPIC property); otherwise a retry topic delivers what it holds, as Apache does.

`tags_filter` is the exact tag match of a TAG subscription on a MULTI_TAG topic (codec.tags: a unit's code only
says the message may carry a wanted tag; its TAGS decide).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from codec.cache import BoundedCache
from codec.codes import RETRY_PREFIX, ResponseCode
from codec.properties import MessageConst
from codec.sql92 import EXPRESSION_TYPE as SQL92
from codec.sql92 import Selector, SelectorError, properties_text
from codec.tags import tags_match

TAG: Final = "TAG"

RecordFilter = Callable[[memoryview], bool]
GroupSubscription = Callable[[str, str], "tuple[str, str, int] | None"]  # (group, topic) -> (type, expr, version)


def is_tag_type(expression_type: str | None) -> bool:
    """ExpressionType.isTagType: no type (old clients) or TAG."""
    return not expression_type or expression_type == TAG


def unsupported_remark(expression_type: str) -> str:
    return f"The broker does not support consumer to filter message by {expression_type}"


class SubscriptionFilters:
    def __init__(self, enable_property_filter: bool, filter_support_retry: bool = False,
                 max_size: int = 1024) -> None:
        self.enabled = enable_property_filter
        self.filter_support_retry = filter_support_retry
        # (group, topic, subVersion, expressionType, expression) -> Selector, or the refusal's remark
        self._selectors: BoundedCache[tuple[str, str, int, str, str], Selector | str] = BoundedCache(
            "sql92.selectors", max_size)

    def selector(self, group: str, topic: str, sub_version: int, expression_type: str,
                 expression: str | None) -> Selector | str:
        """The compiled selector, or why the expression is refused (SelectorError's remark, with the position)."""
        key = (group, topic, sub_version, expression_type, expression or "")
        hit = self._selectors.get(key)
        if hit is not None:
            return hit
        made: Selector | str
        if expression_type != SQL92:
            made = f"expression type {expression_type} is not supported"
        else:
            try:
                made = Selector(expression or "")
            except SelectorError as e:
                made = str(e)
        return self._selectors.remember(key, made)

    def check(self, expression_type: str | None, expression: str | None) -> tuple[int, str] | None:
        """CHECK_CLIENT_CONFIG's answer for one subscription: None when it is accepted, else (code, remark)."""
        if is_tag_type(expression_type):
            return None
        assert expression_type is not None
        if not self.enabled:
            return ResponseCode.SYSTEM_ERROR, unsupported_remark(expression_type)
        made = self.selector("", "", 0, expression_type, expression)
        return (ResponseCode.SUBSCRIPTION_PARSE_FAILED, made) if isinstance(made, str) else None

    def retry_filter(self, group: str, topic: str, subscription_of: GroupSubscription) -> RecordFilter | None:
        """filterSupportRetry: the filter of a pull from `%RETRY%group` (None: deliver everything)."""
        if not (self.enabled and self.filter_support_retry and topic.startswith(RETRY_PREFIX)):
            return None
        token = b"\x02" + MessageConst.RETRY_TOPIC.encode() + b"\x01"

        def matches(record: memoryview) -> bool:
            try:
                text = properties_text(record)
            except (ValueError, IndexError):
                return False
            i = text.rfind(token)
            if i < 0:
                return True
            e = text.find(b"\x02", i + len(token))
            real = text[i + len(token):(len(text) if e < 0 else e)].decode("utf-8", "replace")
            sub = subscription_of(group, real)
            if sub is None or is_tag_type(sub[0]):
                return True
            sel = self.selector(group, real, sub[2], sub[0], sub[1])
            return True if isinstance(sel, str) else sel.matches_text(text)
        return matches


_TAGS_TOKEN: Final = b"\x02" + MessageConst.TAGS.encode() + b"\x01"


def tags_filter(wanted: frozenset[str]) -> RecordFilter:
    """A record filter: one of the record's TAGS (`||`-joined tags split) is in `wanted`."""
    token, tl = _TAGS_TOKEN, len(_TAGS_TOKEN)

    def matches(record: memoryview) -> bool:
        try:
            text = properties_text(record)
        except (ValueError, IndexError):
            return False
        i = text.rfind(token)
        if i < 0:
            return False
        e = text.find(b"\x02", i + tl)
        return tags_match(text[i + tl:(len(text) if e < 0 else e)].decode("utf-8", "replace"), wanted)
    return matches


def both(first: RecordFilter, then: RecordFilter | None) -> RecordFilter:
    """`first` and, when given, `then`."""
    if then is None:
        return first
    return lambda record: first(record) and then(record)
