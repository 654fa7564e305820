"""tagsCode: Java `String.hashCode()` over UTF-16 code units, sign-extended to a long; and the tag form for a
message with several tags.

A message's TAGS holds one tag, as Apache's clients send it, and its tagsCode is Apache's exactly. A message with
several tags sends them joined by `||` (TAG_SEPARATOR, the separator of RocketMQ's subscription expressions);
its tagsCode is the bitwise OR of each trimmed tag's hash (the seed's form: each tag hashed to a long, the index
holds the OR). The OR of sign-extended ints is itself one, so the unit keeps Apache's range of tag codes. On a
topic whose topicFilterType is MULTI_TAG a subscription's tag matches a unit when the AND of its hash with the
unit's code is its hash (`MultiTagCodes`), and the message's tags decide exactly (`tags_match`); elsewhere a
pull compares codes for equality as Apache does.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from functools import lru_cache
from typing import Final

TAG_SEPARATOR: Final = "||"
MULTI_TAG: Final = "MULTI_TAG"  # a topic's topicFilterType whose pulls use the several-tags form


@lru_cache(maxsize=4096)
def java_hash(s: str) -> int:
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def split_tags(tags: str) -> list[str]:
    """The tags of a TAGS value: split on `||`, trimmed, empty ones dropped (FilterAPI's rule for expressions)."""
    return [t for t in (p.strip() for p in tags.split(TAG_SEPARATOR)) if t]


@lru_cache(maxsize=4096)
def tags_hash(tags: str) -> int:
    """The tagsCode of a non-empty TAGS value: one tag's String.hashCode, several tags' OR of their hashes."""
    if TAG_SEPARATOR not in tags:
        return java_hash(tags)
    joined = 0
    for t in split_tags(tags):
        joined |= java_hash(t)
    return joined


def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tagsCode of a message's TAGS property (0 when absent or empty)."""
    return tags_hash(tags) if tags else 0


def tags_code_reference(tags: str | None) -> int:
    """`tags_code` spelled out, for the differential test: no cache, no shortcut for one tag."""
    joined = 0
    for t in ([tags] if tags and TAG_SEPARATOR not in tags else split_tags(tags or "")):
        joined |= java_hash(t)
    return joined


class MultiTagCodes:
    """What a pull on a MULTI_TAG topic gives the store's unit check in place of the set of codes: a unit's code
    is 'in' it when, for one of the subscription's hashes, code AND hash == hash (may match; exact decides)."""

    __slots__ = ("hashes",)

    def __init__(self, hashes: Iterable[int]) -> None:
        self.hashes = tuple(hashes)

    def __contains__(self, code: object) -> bool:
        return isinstance(code, int) and any(code & h == h for h in self.hashes)


def tags_match(tags: str | None, wanted: Collection[str]) -> bool:
    """Exact match of a message's TAGS against a subscription's tags: one of the message's tags is wanted."""
    if not tags:
        return False
    if tags in wanted:
        return True
    return TAG_SEPARATOR in tags and any(t in wanted for t in split_tags(tags))
