"""tagsCode: Java `String.hashCode()` over UTF-16 code units, sign-extended to a long."""

from functools import lru_cache


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


def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tagsCode of a message's TAGS property (0 when absent or empty)."""
    return java_hash(tags) if tags else 0
