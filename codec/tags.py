"""tagsCode: Java `String.hashCode()` over UTF-16 code units, sign-extended to a long."""


def java_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h
