"""messageTimeup for a whole batch into ONE buffer (the delay-level drain hot path, sans-io).

`build_delivery_batch(raws)` does what `codec.record_rewrite.build_deliveries` does for each schedule
record (head + body and the stored properties bytes copied as they are, the real topic in place of
SCHEDULE_TOPIC_XXXX, REAL_QID as the queue id, tagsCode of TAGS, index keys from KEYS and UNIQ_KEY), but
the delivery records are laid back to back in one put run (`codec.put_run.PutRun`, its pieces copied
straight into the run's buffer: no whole delivery record is made first), so the store can append the run
with one copy and no per-message request/result objects (`storage.MessageStore.put_batch`).

Property lookups: `codec.properties.token_value` on the properties string with a leading separator
prepended (`\\x02KEY\\x01` can only match at a key boundary), as the reference path does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from codec.buffers import BytesLike
from codec.cache import BoundedCache
from codec.properties import index_keys, token_value
from codec.put_run import PutRun
from codec.record import POS_QUEUE_ID, POS_SYS_FLAG_LOW, STORE_TS_POS
from codec.record_rewrite import (
    K_KEYS,
    K_REAL_QID,
    K_REAL_TOPIC,
    K_TAGS,
    K_UNIQ,
    _qid,
    _topic,
    tags_code,
    tail_span,
)

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_K_TOPIC, _K_QID, _K_TAGS, _K_KEYS, _K_UNIQ = K_REAL_TOPIC, K_REAL_QID, K_TAGS, K_KEYS, K_UNIQ
# properties tail from REAL_TOPIC -> ((topic, qid), topic field)
_dests: BoundedCache[bytes, tuple[tuple[str, int], bytes]] = BoundedCache("delivery.destination", 4096)


class DeliveryBatch(PutRun):
    """A put run (codec.put_run: records back to back in `buf`, `dests`, `tags_codes`, `keys` as bytes,
    `ts_pos`; no `deliver_delays`: deliveries go into real topics) with the delay level's own columns:
    `uniqs[j]` (UNIQ_KEY bytes or None), `source[j]` (index of the schedule record delivery j came from in
    the input); `dropped` lists the input indexes that produced no delivery (None input, no REAL_TOPIC, or
    the `drop_topic`). `dests[j]` is one shared tuple per destination."""

    __slots__ = ("uniqs", "source", "dropped")

    def __init__(self) -> None:
        super().__init__()
        self.uniqs: list[bytes | None] = []
        self.source: list[int] = []
        self.dropped: list[int] = []


def _dest_of_tail(tail: bytes, pb: bytes) -> tuple[tuple[str, int], bytes] | None:
    """((real topic, real queue id), topic field), or None without a REAL_TOPIC value. `tail` is `pb`
    from the first REAL_TOPIC on; it is the cache key when it also holds the first REAL_QID (the put
    hook appends REAL_TOPIC then REAL_QID, so the tail repeats for every message to one queue)."""
    rt = token_value(tail, _K_TOPIC)
    if not rt:
        return None
    qi = pb.find(_K_QID)
    rq = token_value(pb, _K_QID)
    topic, field = _topic(rt)
    d = ((topic, _qid(rq)), field)
    if qi >= len(pb) - len(tail):
        _dests.remember(tail, d)
    return d


def build_delivery_batch(raws: Sequence[BytesLike | None], drop_topic: str | None = None) -> DeliveryBatch:
    """messageTimeup for each stored schedule record (a buffer, or None); see the module docstring.
    Raises CodecError on a malformed record."""
    out = DeliveryBatch()
    buf = out.buf
    starts, dests, tcodes, keys_out, uniqs, ts_pos, source, dropped = (
        out.starts, out.dests, out.tags_codes, out.keys, out.uniqs, out.ts_pos, out.source, out.dropped)
    pack_i32 = _I32.pack_into
    tsp = STORE_TS_POS
    k_topic, k_tags, k_keys, k_uniq = _K_TOPIC, _K_TAGS, _K_KEYS, _K_UNIQ
    cached = _dests.get
    tcode = tags_code
    value = token_value
    pos = 0
    for idx, raw in enumerate(raws):
        if raw is None:
            dropped.append(idx)
            continue
        tpos, ppos, pend = tail_span(raw)
        pb = b"\x02" + raw[ppos + 2:pend]
        i = pb.find(k_topic)
        if i < 0:
            dropped.append(idx)
            continue
        tail = pb[i:]  # "REAL_TOPIC..REAL_QID.." as the put hook appends them: one cached lookup for both
        d = cached(tail)
        if d is None:
            d = _dest_of_tail(tail, pb)
            if d is None:
                dropped.append(idx)
                continue
        dest, field = d
        if dest[0] == drop_topic:
            dropped.append(idx)
            continue
        buf += raw[:tpos]
        buf += field
        buf += raw[ppos:pend]
        end = len(buf)
        pack_i32(buf, pos, end - pos)
        pack_i32(buf, pos + POS_QUEUE_ID, dest[1])
        ts_pos.append(pos + tsp[(raw[POS_SYS_FLAG_LOW] & 0x10) >> 4])  # codec.put_run.store_ts_pos, inlined
        pos = end
        starts.append(end)
        dests.append(dest)
        source.append(idx)
        tags = value(pb, k_tags)
        tcodes.append(tcode(tags) if tags else 0)  # tags_code(None) is 0: no call without TAGS
        uniq = value(pb, k_uniq) or None  # an empty UNIQ_KEY is no UNIQ_KEY
        uniqs.append(uniq)
        keys = value(pb, k_keys)
        keys_out.append(index_keys(keys, uniq) if keys else (uniq,) if uniq else ())  # index_keys(None, uniq)
    return out


__all__ = ["DeliveryBatch", "build_delivery_batch"]
