"""Record rewrites without a full decode (the put and scheduled-delivery hot paths).

`patch_append_fields`: storage fills QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP at append.
`rewrite_for_delivery`: a stored record copied with another topic / queue id (and optionally another
store host, reconsume times or properties). `build_deliveries`: messageTimeup for a whole batch of
schedule records in one loop: the delivery record (head + body and the properties bytes copied as
stored, the real topic in place of SCHEDULE_TOPIC_XXXX), real topic and queue id, tagsCode and the
index keys, found with bytes.find on the properties (no per-message dict, no property decode).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from codec.buffers import BytesLike
from codec.cache import BoundedCache
from codec.codes import SysFlag
from codec.errors import CodecError
from codec.properties import MessageConst, index_keys, property_token, token_value
from codec.record import (
    MAGIC_CODE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    POS_MAGIC,
    POS_QUEUE_ID,
    POS_QUEUE_OFFSET,
    POS_SYS_FLAG,
    POS_TOTAL,
    QUEUE_AND_PHYS_OFFSET,
    STORE_TS_POS,
    _host_len,
    _is_v6,
    _pack_host,
    _tail_positions,
    body_len_pos,
    read_sys_flag,
    reconsume_times_pos,
    store_host_pos,
    topic_field,
)
from codec.tags import tags_hash

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def patch_append_fields(buf: bytearray | memoryview, pos: int, queue_offset: int, phys_offset: int, store_ts: int) -> None:
    """Fill QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP in place (done by storage at append)."""
    QUEUE_AND_PHYS_OFFSET.pack_into(buf, pos + POS_QUEUE_OFFSET, queue_offset, phys_offset)
    born_v6 = (_I32.unpack_from(buf, pos + POS_SYS_FLAG)[0] & SysFlag.BORNHOST_V6) != 0
    _I64.pack_into(buf, pos + STORE_TS_POS[born_v6], store_ts)


def rewrite_for_delivery(raw: BytesLike, topic: str, queue_id: int, store_host: tuple[str, int] | None = None,
                         reconsume_times: int | None = None, properties_bytes: bytes | None = None) -> bytearray:
    """A new record from a stored one with another topic and queue id (the scheduled-delivery hot path).

    Body, flag, sysFlag, born timestamp/host and (unless given) properties are copied byte for byte;
    queue offset, physical offset and store timestamp are left for storage to patch at append."""
    mv = memoryview(raw)
    try:
        if _I32.unpack_from(mv, POS_MAGIC)[0] != MAGIC_CODE:
            raise CodecError("not a stored message record (bad magic)")
        sf = read_sys_flag(mv, 0)
        bpos, blen, tpos, ppos = _tail_positions(mv, 0)
        (plen,) = _I16.unpack_from(mv, ppos)
    except (struct.error, IndexError):
        raise CodecError("truncated record") from None
    if blen < 0 or plen < 0 or ppos + 2 + plen > len(mv):
        raise CodecError("record length fields out of range")
    if store_host is None and reconsume_times is None and properties_bytes is None:
        # the delivery hot path: head + body as they are, the new topic, the properties slice as is
        tb = topic_field(topic)
        out = bytearray(mv[:tpos])
        out += tb
        out += mv[ppos:ppos + 2 + plen]
        _I32.pack_into(out, POS_TOTAL, len(out))
        _I32.pack_into(out, POS_QUEUE_ID, queue_id)
        return out
    props = bytes(mv[ppos + 2:ppos + 2 + plen]) if properties_bytes is None else properties_bytes
    tb = topic.encode("utf-8", "replace")
    if len(tb) > MAX_TOPIC_BYTES:
        raise CodecError("topic too long")
    if len(props) > MAX_PROPERTIES_BYTES:
        raise CodecError(f"properties longer than {MAX_PROPERTIES_BYTES} bytes")
    if store_host is not None and _is_v6(store_host[0]) != bool(sf & SysFlag.STOREHOST_V6):
        sf ^= SysFlag.STOREHOST_V6
    head_end = bpos  # everything up to and including BODYLEN, then body
    new_head = bytearray(mv[:head_end])
    if store_host is not None:
        sh_pos = store_host_pos(sf)
        old_len = _host_len(bool(read_sys_flag(mv, 0) & SysFlag.STOREHOST_V6))
        try:
            packed = _pack_host(store_host, bool(sf & SysFlag.STOREHOST_V6))
        except struct.error:
            raise CodecError(f"bad store host port {store_host[1]!r}") from None
        new_head[sh_pos:sh_pos + old_len] = packed
        _I32.pack_into(new_head, POS_SYS_FLAG, sf)
    out = new_head
    out += mv[bpos:bpos + blen]
    out.append(len(tb))
    out += tb
    out += _I16.pack(len(props))
    out += props
    _I32.pack_into(out, POS_TOTAL, len(out))
    _I32.pack_into(out, POS_QUEUE_ID, queue_id)
    if reconsume_times is not None:
        _I32.pack_into(out, reconsume_times_pos(sf), reconsume_times)
    return out


# ---- batch messageTimeup ------------------------------------------------------------------------
K_REAL_TOPIC = property_token(MessageConst.REAL_TOPIC.encode())
K_REAL_QID = property_token(MessageConst.REAL_QID.encode())
K_TAGS = property_token(MessageConst.TAGS.encode())
K_KEYS = property_token(MessageConst.KEYS.encode())
K_UNIQ = property_token(MessageConst.UNIQ_KEY.encode())
_BODY_LEN_POS = tuple(body_len_pos(sf) for sf in (0, 0x10, 0x20, 0x30))  # by sysFlag bits 0x30 >> 4
_MAGIC_SYS_FLAG = struct.Struct(f">i{POS_SYS_FLAG - POS_MAGIC - 4}xi")  # MAGICCODE .. SYSFLAG


def tail_span(raw: BytesLike) -> tuple[int, int, int]:
    """(position of the topic field, of PROPERTIESLENGTH, end of the properties) of the stored record
    `raw`, every length checked; CodecError if it is not a well-formed record (the batch rewrites'
    common first step: head + body are raw[:tpos], the properties raw[ppos + 2:pend])."""
    try:
        magic, sf = _MAGIC_SYS_FLAG.unpack_from(raw, POS_MAGIC)
        if magic != MAGIC_CODE:
            raise CodecError("not a stored message record (bad magic)")
        bl = _BODY_LEN_POS[(sf & 0x30) >> 4]
        blen = _I32.unpack_from(raw, bl)[0]
        tpos = bl + 4 + blen
        ppos = tpos + 1 + raw[tpos]
        pend = ppos + 2 + _I16.unpack_from(raw, ppos)[0]
    except (struct.error, IndexError):
        raise CodecError("truncated record") from None
    if blen < 0 or pend < ppos + 2 or pend > len(raw):
        raise CodecError("record length fields out of range")
    return tpos, ppos, pend
_topics: BoundedCache[bytes, tuple[str, bytes]] = BoundedCache("delivery.topic", 4096)  # REAL_TOPIC -> (str, field)
_tags: BoundedCache[bytes, int] = BoundedCache("delivery.tags_code", 4096)  # TAGS -> tagsCode
_qids: BoundedCache[bytes, int] = BoundedCache("delivery.queue_id", 4096)  # REAL_QID -> int


def _topic(b: bytes) -> tuple[str, bytes]:
    t = _topics.get(b)
    if t is None:
        s = b.decode("utf-8", "replace")
        t = _topics.remember(b, (s, topic_field(s)))
    return t


def tags_code(tags: bytes | None) -> int:
    """tagsCode of a TAGS value (codec.tags.tags_hash, cached); 0 without tags."""
    if not tags:
        return 0
    code = _tags.get(tags)
    if code is None:
        code = _tags.remember(tags, tags_hash(tags.decode("utf-8", "replace")))
    return code


def _qid(b: bytes | None) -> int:
    """REAL_QID as int, as int() of the decoded str would read it; 0 when absent, not a number, or not a
    queue id (negative, or past a QUEUEID field's int32: a client can write any REAL_QID, and a record must
    never fail its whole batch by it). Cached: deliveries repeat a few values."""
    if not b:
        return 0
    q = _qids.get(b)
    if q is None:
        try:
            q = int(b) if b.isascii() else int(b.decode("utf-8", "replace"))
        except ValueError:
            q = 0
        if not 0 <= q <= _INT32_MAX:
            q = 0
        _qids.remember(b, q)
    return q


_INT32_MAX = 2**31 - 1


class Delivery(NamedTuple):
    """messageTimeup of one schedule record (the reference path's result)."""

    record: bytearray
    topic: str  # the real topic (REAL_TOPIC)
    queue_id: int  # REAL_QID
    tags_code: int
    keys: tuple[bytes, ...]  # index keys: KEYS split on spaces, then UNIQ_KEY
    uniq_key: bytes | None


def build_deliveries(raws: Iterable[BytesLike | None]) -> list[Delivery | None]:
    """For each stored schedule record (a buffer, or None): None when it has no REAL_TOPIC (or was
    None), else (delivery record bytearray, real topic, real queue id, tagsCode, index keys as
    bytes: KEYS split on spaces, then UNIQ_KEY; UNIQ_KEY bytes or None). Raises CodecError on a
    malformed record."""
    out: list[Delivery | None] = []
    append = out.append
    pack_i32 = _I32.pack_into
    get = token_value
    for raw in raws:
        if raw is None:
            append(None)
            continue
        tpos, ppos, pend = tail_span(raw)
        pb = b"\x02" + raw[ppos + 2:pend]  # a leading separator: tokens match at key boundaries only
        rt = get(pb, K_REAL_TOPIC)
        if not rt:
            append(None)
            continue
        topic, field = _topic(rt)
        qid = _qid(get(pb, K_REAL_QID))
        rec = bytearray(raw[:tpos])
        rec += field
        rec += raw[ppos:pend]
        pack_i32(rec, POS_TOTAL, len(rec))
        pack_i32(rec, POS_QUEUE_ID, qid)
        uniq = get(pb, K_UNIQ) or None  # an empty UNIQ_KEY is no UNIQ_KEY (as the batch path reads it)
        append(Delivery(rec, topic, qid, tags_code(get(pb, K_TAGS)), index_keys(get(pb, K_KEYS), uniq), uniq))
    return out
