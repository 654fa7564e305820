"""The stored message record (MessageDecoder layout): CommitLog bytes == pull wire bytes.

TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST
STORETIMESTAMP STOREHOST RECONSUMETIMES PREPAREDTXOFFSET BODYLEN BODY TOPICLEN(1) TOPIC PROPLEN(2) PROPS

Hosts are 4+4 bytes (IPv4) or 16+4 (IPv6, sysFlag 0x10 born / 0x20 store). Field positions after
BORNHOST depend on those bits; helpers below compute them so storage and the scheduler can patch
or rewrite a record without decoding it.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from codec.buffers import BytesLike
from codec.codes import SysFlag
from codec.errors import CodecError
from codec.properties import MessageConst, parse_properties, properties_to_string

MAGIC_CODE = -626843481  # 0xDAA320A7
MAGIC_CODE_V2 = -626843477  # 5.x, 2-byte topic length
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_HEAD = struct.Struct(">iiiiiqqiq")  # total magic crc queueId flag queueOffset physOffset sysFlag bornTs
HEAD_SIZE = _HEAD.size  # 48: BORNHOST starts here

# fixed positions (independent of host sizes)
POS_TOTAL = 0
POS_MAGIC = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_FLAG = 16
POS_QUEUE_OFFSET = 20
POS_PHYS_OFFSET = 28
POS_SYS_FLAG = 36
POS_BORN_TS = 40
POS_BORN_HOST = 48
POS_SYS_FLAG_LOW = POS_SYS_FLAG + 3  # SYSFLAG's low byte (big-endian), which holds BORNHOST_V6 (0x10)


def _host_len(v6: bool) -> int:
    return 20 if v6 else 8


def store_timestamp_pos(sys_flag: int) -> int:
    return POS_BORN_HOST + _host_len(bool(sys_flag & SysFlag.BORNHOST_V6))


# STORETIMESTAMP's position in a record, indexed by SYSFLAG's BORNHOST_V6 bit (0 or 1): the per-record
# hot paths pick it with `(sys_flag & SysFlag.BORNHOST_V6) != 0` (or the low byte's `& 0x10) >> 4`)
STORE_TS_POS = (store_timestamp_pos(0), store_timestamp_pos(SysFlag.BORNHOST_V6))
# (BORNTIMESTAMP, STORETIMESTAMP) read together from POS_BORN_TS, indexed like STORE_TS_POS
BORN_AND_STORE_TS = tuple(struct.Struct(f">q{_host_len(v6)}xq") for v6 in (False, True))
# QUEUEOFFSET and PHYSICALOFFSET, adjacent from POS_QUEUE_OFFSET (patched together at append)
QUEUE_AND_PHYS_OFFSET = struct.Struct(">qq")
# TOTALSIZE and MAGICCODE from a record's start; also the CommitLog's END-OF-FILE blank
# ([int32 bytes left in the segment][int32 BLANK_MAGIC_CODE])
TOTAL_AND_MAGIC = struct.Struct(">ii")


def store_host_pos(sys_flag: int) -> int:
    return store_timestamp_pos(sys_flag) + 8


def reconsume_times_pos(sys_flag: int) -> int:
    return store_host_pos(sys_flag) + _host_len(bool(sys_flag & SysFlag.STOREHOST_V6))


def body_len_pos(sys_flag: int) -> int:
    return reconsume_times_pos(sys_flag) + 4 + 8


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    return body_len_pos(sys_flag) + 4 + body_len + 1 + topic_len + 2 + props_len


@dataclass(slots=True)
class MessageRecord:
    topic: str
    body: bytes = b""
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commitlog_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = 0
    store_size: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)


def body_crc(body: BytesLike) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


@lru_cache(maxsize=1024)
def _ip_forms(ip: str) -> tuple[bool, bytes | None, bytes]:
    """(is a real IPv6 host, 4-byte form or None, 16-byte form), cached: hosts repeat per connection."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError as e:
        raise CodecError(f"bad host address {ip!r}") from e
    if addr.version == 4:
        return False, addr.packed, ipaddress.IPv6Address(f"::ffff:{addr}").packed
    mapped = addr.ipv4_mapped
    if mapped is not None:
        return False, mapped.packed, addr.packed
    return True, None, addr.packed


def _pack_host(host: tuple[str, int], v6: bool) -> bytes:
    ip, port = host
    _, raw4, raw16 = _ip_forms(ip)
    if v6:
        raw = raw16
    elif raw4 is None:
        raise CodecError(f"IPv6 host {ip} needs the V6 sysFlag bit")
    else:
        raw = raw4
    return raw + _I32.pack(int(port))


def _is_v6(ip: str) -> bool:
    try:
        return _ip_forms(ip)[0]
    except CodecError:
        return False


_V6_BITS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
_TAIL_FIXED = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLEN


@lru_cache(maxsize=1024)
def _host_field(host: tuple[str, int]) -> tuple[bool, bytes]:
    """(is IPv6, the record's host field: 4- or 16-byte address + port) of an (ip, port) pair;
    cached: a connection's born host and the broker's store host repeat on every record."""
    ip, port = host
    v6, raw4, raw16 = _ip_forms(ip)
    raw = raw16 if v6 or raw4 is None else raw4  # raw4 is None only for a real IPv6 host (v6)
    try:
        return v6, raw + _I32.pack(int(port))
    except struct.error as e:
        raise CodecError(f"port out of range: {port!r}") from e


@lru_cache(maxsize=4096)
def topic_field(topic: str) -> bytes:
    """A record's topic field: the length byte + UTF-8 topic (cached: topics repeat)."""
    tb = topic.encode("utf-8", "replace")
    if len(tb) > MAX_TOPIC_BYTES:
        raise CodecError(f"topic longer than {MAX_TOPIC_BYTES} bytes")
    return bytes((len(tb),)) + tb


def encode_record(rec: MessageRecord, properties_bytes: bytes | None = None) -> bytearray:
    """Encode a record; BODYCRC and TOTALSIZE are computed. IPv6 flags follow the host addresses."""
    props = properties_bytes if properties_bytes is not None else properties_to_string(rec.properties).encode("utf-8", "replace")
    return encode_message(rec.topic, rec.body, rec.queue_id, rec.flag, rec.sys_flag, rec.born_timestamp,
                          (rec.born_host[0], rec.born_host[1]), (rec.store_host[0], rec.store_host[1]), rec.reconsume_times, props,
                          rec.queue_offset, rec.commitlog_offset, rec.store_timestamp,
                          rec.prepared_transaction_offset)


def encode_message(topic: str, body: BytesLike, queue_id: int, flag: int, sys_flag: int, born_timestamp: int,
                   born_host: tuple[str, int], store_host: tuple[str, int], reconsume_times: int,
                   properties: bytes, queue_offset: int = 0, commitlog_offset: int = 0, store_timestamp: int = 0,
                   prepared_transaction_offset: int = 0) -> bytearray:
    """`encode_record` from the fields themselves (the send path builds no MessageRecord)."""
    return bytearray(encode_message_bytes(topic, body, queue_id, flag, sys_flag, born_timestamp, born_host,
                                          store_host, reconsume_times, properties, queue_offset, commitlog_offset,
                                          store_timestamp, prepared_transaction_offset))


def encode_message_bytes(topic: str, body: BytesLike, queue_id: int, flag: int, sys_flag: int, born_timestamp: int,
                         born_host: tuple[str, int], store_host: tuple[str, int], reconsume_times: int,
                         properties: bytes, queue_offset: int = 0, commitlog_offset: int = 0,
                         store_timestamp: int = 0, prepared_transaction_offset: int = 0) -> bytes:
    """`encode_message` as immutable bytes (a run of sends joins its records into one buffer)."""
    born_v6, born = _host_field(born_host)
    store_v6, store = _host_field(store_host)
    sys_flag &= ~_V6_BITS
    if born_v6:
        sys_flag |= SysFlag.BORNHOST_V6
    if store_v6:
        sys_flag |= SysFlag.STOREHOST_V6
    tf = topic_field(topic)
    if len(properties) > MAX_PROPERTIES_BYTES:
        raise CodecError(f"properties longer than {MAX_PROPERTIES_BYTES} bytes")
    if not isinstance(body, bytes | bytearray):
        body = bytes(body)
    total = HEAD_SIZE + len(born) + 8 + len(store) + _TAIL_FIXED.size + len(body) + len(tf) + 2 + len(properties)
    try:
        return b"".join((
            _HEAD.pack(total, MAGIC_CODE, body_crc(body), queue_id, flag, queue_offset, commitlog_offset,
                       sys_flag, born_timestamp),
            born, _I64.pack(store_timestamp), store,
            _TAIL_FIXED.pack(reconsume_times, prepared_transaction_offset, len(body)),
            body, tf, _I16.pack(len(properties)), properties))
    except struct.error as e:
        raise CodecError(f"record field out of range: {e}") from None


@lru_cache(maxsize=1024)
def _ip_text(raw: bytes) -> str:
    return str(ipaddress.ip_address(raw))


def _unpack_host(mv: memoryview, pos: int, v6: bool) -> tuple[tuple[str, int], int]:
    n = 16 if v6 else 4
    raw = bytes(mv[pos:pos + n])
    if len(raw) != n:
        raise CodecError("record truncated inside a host address")
    ip = _ip_text(raw)
    (port,) = _I32.unpack_from(mv, pos + n)
    return (ip, port), pos + n + 4


def decode_record(buf: BytesLike, pos: int = 0, decompress: bool = False) -> tuple[MessageRecord, int]:
    """Decode the record at `pos`; returns (record, next position). Raises CodecError."""
    mv = memoryview(buf)
    n = len(mv)
    if n - pos < HEAD_SIZE:
        raise CodecError("record truncated before its fixed header")
    total, magic, crc, qid, flag, qoff, phys, sys_flag, born_ts = _HEAD.unpack_from(mv, pos)
    if magic != MAGIC_CODE:
        raise CodecError(f"bad record magic {magic:#x}" if magic >= 0 else f"bad record magic {magic}")
    if total < HEAD_SIZE or pos + total > n:
        raise CodecError(f"record size {total} out of range")
    end = pos + total
    try:
        p = pos + POS_BORN_HOST
        born_host, p = _unpack_host(mv, p, bool(sys_flag & SysFlag.BORNHOST_V6))
        (store_ts,) = _I64.unpack_from(mv, p)
        store_host, p = _unpack_host(mv, p + 8, bool(sys_flag & SysFlag.STOREHOST_V6))
        (reconsume,) = _I32.unpack_from(mv, p)
        (prepared,) = _I64.unpack_from(mv, p + 4)
        (blen,) = _I32.unpack_from(mv, p + 12)
        p += 16
        if blen < 0 or p + blen > end:
            raise CodecError("record body length out of range")
        body = bytes(mv[p:p + blen])
        p += blen
        tlen = mv[p]
        if tlen > 127:
            raise CodecError("record topic length negative")
        topic = bytes(mv[p + 1:p + 1 + tlen]).decode("utf-8")
        p += 1 + tlen
        (plen,) = _I16.unpack_from(mv, p)
        p += 2
        if plen < 0 or p + plen != end:
            raise CodecError("record properties length does not match its total size")
        props = parse_properties(bytes(mv[p:p + plen]))
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, CodecError):
            raise
        raise CodecError(f"malformed record: {e}") from None
    if decompress and sys_flag & SysFlag.COMPRESSED:
        body = decompress_body(body)
    rec = MessageRecord(topic=topic, body=body, queue_id=qid, flag=flag, queue_offset=qoff, commitlog_offset=phys,
                        sys_flag=sys_flag, born_timestamp=born_ts, born_host=born_host, store_timestamp=store_ts,
                        store_host=store_host, reconsume_times=reconsume, prepared_transaction_offset=prepared,
                        properties=props, body_crc=crc, store_size=total)
    return rec, end


def iter_records(buf: BytesLike, decompress: bool = False) -> Iterator[MessageRecord]:
    pos, n = 0, len(memoryview(buf))
    while pos < n:
        rec, pos = decode_record(buf, pos, decompress)
        yield rec


def decompress_body(body: bytes, max_size: int = 64 << 20) -> bytes:
    """zlib-inflate a COMPRESSED body (all 4.x clients use zlib), bounded against zip bombs."""
    try:
        d = zlib.decompressobj()
        out = d.decompress(body, max_size)
        if d.unconsumed_tail:
            raise CodecError("decompressed body too large")
        if not d.eof:
            raise CodecError("compressed body is truncated")
        return out
    except zlib.error as e:
        raise CodecError(f"bad compressed body: {e}") from None


# ------------------------------------------------------------ no-decode access

def read_total_size(buf: BytesLike, pos: int = 0) -> int:
    v: int
    (v,) = _I32.unpack_from(buf, pos + POS_TOTAL)
    return v


def read_magic(buf: BytesLike, pos: int = 0) -> int:
    v: int
    (v,) = _I32.unpack_from(buf, pos + POS_MAGIC)
    return v


def read_queue_id(buf: BytesLike, pos: int = 0) -> int:
    v: int
    (v,) = _I32.unpack_from(buf, pos + POS_QUEUE_ID)
    return v


def read_sys_flag(buf: BytesLike, pos: int = 0) -> int:
    v: int
    (v,) = _I32.unpack_from(buf, pos + POS_SYS_FLAG)
    return v


def read_store_timestamp(buf: BytesLike, pos: int = 0) -> int:
    v: int
    (v,) = _I64.unpack_from(buf, pos + store_timestamp_pos(read_sys_flag(buf, pos)))
    return v


def read_born_timestamp(buf: BytesLike, pos: int = 0) -> int:
    v: int
    (v,) = _I64.unpack_from(buf, pos + POS_BORN_TS)
    return v


def _tail_positions(buf: BytesLike, pos: int) -> tuple[int, int, int, int]:
    """(body_pos, body_len, topic_len_pos, props_len_pos) of the record at pos; CodecError when a
    length field points outside `buf` (a truncated or damaged record)."""
    try:
        sf = read_sys_flag(buf, pos)
        bl = pos + body_len_pos(sf)
        (blen,) = _I32.unpack_from(buf, bl)
        tpos = bl + 4 + blen
        if blen < 0:
            raise IndexError
        tlen = buf[tpos]
    except (struct.error, IndexError):
        raise CodecError("truncated record: a length field points outside it") from None
    return bl + 4, blen, tpos, tpos + 1 + tlen


def read_topic(buf: BytesLike, pos: int = 0) -> str:
    _, _, tpos, _ = _tail_positions(buf, pos)
    return bytes(buf[tpos + 1:tpos + 1 + buf[tpos]]).decode("utf-8")


def read_body(buf: BytesLike, pos: int = 0) -> bytes:
    bpos, blen, _, _ = _tail_positions(buf, pos)
    return bytes(buf[bpos:bpos + blen])


def read_properties_bytes(buf: BytesLike, pos: int = 0) -> bytes:
    _, _, _, ppos = _tail_positions(buf, pos)
    try:
        (plen,) = _I16.unpack_from(buf, ppos)
    except struct.error:
        raise CodecError("truncated record: no properties length") from None
    if plen < 0 or ppos + 2 + plen > len(buf):
        raise CodecError("truncated record: properties length out of range")
    return bytes(buf[ppos + 2:ppos + 2 + plen])


def read_properties(buf: BytesLike, pos: int = 0) -> dict[str, str]:
    return parse_properties(read_properties_bytes(buf, pos))


def verify_record(buf: BytesLike, pos: int, limit: int | None = None) -> int:
    """Recovery check of the record at pos: magic, size consistency and BODYCRC.

    Returns its size, 0 for a BLANK (end-of-file) marker, and raises CodecError otherwise."""
    n = len(buf) if limit is None else limit
    if n - pos < 8:
        raise CodecError("no room for a record header")
    total: int
    magic: int
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return 0
    if magic != MAGIC_CODE:
        raise CodecError("bad magic")
    if total < HEAD_SIZE or pos + total > n:
        raise CodecError("size out of range")
    try:
        bpos, blen, tpos, ppos = _tail_positions(buf, pos)
        (plen,) = _I16.unpack_from(buf, ppos)
    except (struct.error, IndexError):
        raise CodecError("truncated record") from None
    if blen < 0 or plen < 0 or ppos + 2 + plen - pos != total:
        raise CodecError("record length fields do not add up")
    (crc,) = _I32.unpack_from(buf, pos + POS_BODY_CRC)
    if body_crc(memoryview(buf)[bpos:bpos + blen]) != crc:
        raise CodecError("BODYCRC mismatch")
    return total
