"""Private fast accessors on a stored schedule record (no full decode, no per-message dict).

`DeliveryFields.parse(raw)` finds REAL_TOPIC, REAL_QID, TAGS, KEYS and UNIQ_KEY with bytes.find on
the properties bytes; `build_delivery(raw)` gives what messageTimeup needs (§1.5): the rewritten
record (codec.record.rewrite_for_delivery keeps body, flag, sysFlag, born/store host, born ts,
reconsumeTimes and the properties string byte for byte, so DELAY/REAL_TOPIC/REAL_QID stay in it),
the real topic/queue, tagsCode = hash(TAGS) and the index keys.
"""

from __future__ import annotations

import struct

from codec.record import body_len_pos, rewrite_for_delivery, store_timestamp_pos
from codec.tags import java_hash

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_POS_SYS_FLAG = 36
_POS_BORN_TS = 40

K_REAL_TOPIC = b"REAL_TOPIC\x01"
K_REAL_QID = b"REAL_QID\x01"
K_TAGS = b"TAGS\x01"
K_KEYS = b"KEYS\x01"
K_UNIQ = b"UNIQ_KEY\x01"

_tags_cache: dict[bytes, int] = {}


# BODYLEN position by the two host-address V6 bits of sysFlag (0x10 born, 0x20 store)
_BODY_LEN_POS = {sf: body_len_pos(sf) for sf in (0, 0x10, 0x20, 0x30)}


def properties_bytes(raw) -> bytes:
    sf = _I32.unpack_from(raw, _POS_SYS_FLAG)[0]
    bl = _BODY_LEN_POS[sf & 0x30]
    tpos = bl + 4 + _I32.unpack_from(raw, bl)[0]
    ppos = tpos + 1 + raw[tpos]
    plen = _I16.unpack_from(raw, ppos)[0]
    return bytes(raw[ppos + 2:ppos + 2 + plen])


def prop(pb: bytes, key: bytes) -> bytes | None:
    """Value of `key` (given with its trailing \\x01) in a properties string, or None."""
    i = pb.find(key)
    if i < 0:
        return None
    while i > 0 and pb[i - 1] != 2:  # inside another value or key: look further
        i = pb.find(key, i + 1)
        if i < 0:
            return None
    start = i + len(key)
    end = pb.find(b"\x02", start)
    return pb[start:] if end < 0 else pb[start:end]


def tags_code(tags: bytes | None) -> int:
    if not tags:
        return 0
    code = _tags_cache.get(tags)
    if code is None:
        if len(_tags_cache) > 4096:
            _tags_cache.clear()
        code = _tags_cache[tags] = java_hash(tags.decode("utf-8", "replace"))
    return code


def index_keys(pb: bytes) -> tuple[str, ...]:
    keys = prop(pb, K_KEYS)
    uniq = prop(pb, K_UNIQ)
    if not keys:
        return (uniq.decode("utf-8", "replace"),) if uniq else ()
    out = [k for k in keys.decode("utf-8", "replace").split(" ") if k]
    if uniq:
        out.append(uniq.decode("utf-8", "replace"))
    return tuple(out)


def store_timestamp(raw) -> int:
    sf = _I32.unpack_from(raw, _POS_SYS_FLAG)[0]
    return _I64.unpack_from(raw, store_timestamp_pos(sf))[0]


def born_timestamp(raw) -> int:
    return _I64.unpack_from(raw, _POS_BORN_TS)[0]


def build_delivery(raw) -> tuple[bytearray, str, int, int, tuple[str, ...]] | None:
    """(record, real topic, real queue id, tagsCode, index keys), or None without REAL_TOPIC."""
    pb = properties_bytes(raw)
    real_topic = prop(pb, K_REAL_TOPIC)
    if not real_topic:
        return None
    qid_b = prop(pb, K_REAL_QID)
    try:
        qid = int(qid_b) if qid_b else 0
    except ValueError:
        qid = 0
    topic = _topic_str(real_topic)
    record = rewrite_for_delivery(raw, topic, qid)  # properties copied as stored (pb came from raw)
    return record, topic, qid, tags_code(prop(pb, K_TAGS)), index_keys(pb)


_topic_strs: dict[bytes, str] = {}


def _topic_str(b: bytes) -> str:
    t = _topic_strs.get(b)
    if t is None:
        if len(_topic_strs) > 4096:
            _topic_strs.clear()
        t = _topic_strs[b] = b.decode("utf-8", "replace")
    return t
