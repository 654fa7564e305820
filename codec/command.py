"""RemotingCommand and its two header codecs (JSON and the binary ROCKETMQ form).

Requests are parsed leniently (clients send numbers and booleans in extFields; C++ sends the
language as a name, others as an ordinal); responses are emitted strictly: every extFields value
is a string, top-level keys sorted as fastjson writes them, `remark` omitted when None.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson

from codec.buffers import Body
from codec.cache import BoundedCache
from codec.codes import (
    BROKER_VERSION,
    RPC_ONEWAY,
    RPC_TYPE_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    LanguageCode,
    ResponseCode,
)
from codec.errors import CodecError

_LANG_BY_ORDINAL = {m.value: m.name for m in LanguageCode}
_LANG_BY_NAME = {m.name: m.value for m in LanguageCode}
_orjson_loads = orjson.loads
_orjson_dumps = orjson.dumps
_OrjsonError = orjson.JSONDecodeError
_json_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=False).encode


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "JAVA"
    version: int = BROKER_VERSION
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: Body = b""
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    @classmethod
    def request(cls, code: int, ext_fields: dict[str, Any] | None = None, body: Body = b"",
                oneway: bool = False) -> RemotingCommand:
        return cls(code=int(code), flag=RPC_ONEWAY if oneway else 0,
                   ext_fields={k: _to_str(v) for k, v in (ext_fields or {}).items() if v is not None},
                   body=body)

    def response(self, code: int = ResponseCode.SUCCESS, remark: str | None = None, ext_fields: dict[str, Any] | None = None,
                 body: Body = b"") -> RemotingCommand:
        """A response to this request: same opaque, same serialize type, response bit set."""
        return RemotingCommand(
            code=int(code), opaque=self.opaque, flag=RPC_TYPE_RESPONSE, language="JAVA",
            version=BROKER_VERSION, remark=remark,
            ext_fields={k: _to_str(v) for k, v in (ext_fields or {}).items() if v is not None},
            body=body, serialize_type=self.serialize_type,
        )

    def body_bytes(self) -> bytes:
        b = self.body
        if isinstance(b, list | tuple):
            return b"".join(bytes(p) for p in b)
        return bytes(b)

    def body_len(self) -> int:
        b = self.body
        if isinstance(b, list | tuple):
            return sum(len(p) if not isinstance(p, memoryview) else p.nbytes for p in b)
        return b.nbytes if isinstance(b, memoryview) else len(b)


def _to_str(v: Any) -> str:
    """fastjson's coercion of an extFields value into a Java String."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if v is None:
        return ""
    if isinstance(v, dict | list):
        return _json_dumps(v)
    return str(v)


# ---------------------------------------------------------------- JSON header

_ONLY_STR = {str}


def _all_str(ext: dict[str, Any]) -> bool:
    """Every value a str (what Java clients send), so nothing to coerce; checked in C, not per field.
    (JSON object keys are always str; the encoder passes keys through either way.)"""
    return set(map(type, ext.values())) <= _ONLY_STR

def encode_json_header(cmd: RemotingCommand) -> bytes:
    """`encode_json_header_reference`'s bytes, written by orjson (C, UTF-8 at once; it escapes exactly as the
    stdlib's encoder with ensure_ascii=False: tests/codec/test_json_header_parsers.py holds them equal); what
    orjson refuses (a lone surrogate, an integer past 64 bits) is written by the reference."""
    try:
        return _orjson_dumps(_header_dict(cmd))
    except TypeError:  # orjson.JSONEncodeError
        return encode_json_header_reference(cmd)


def encode_json_header_reference(cmd: RemotingCommand) -> bytes:
    """The reference encoder of a JSON header (the stdlib's)."""
    # Java's String.getBytes(UTF_8) writes '?' for a lone surrogate; never fail on the way out
    return _json_dumps(_header_dict(cmd)).encode("utf-8", "replace")


def _header_dict(cmd: RemotingCommand) -> dict[str, Any]:
    d: dict[str, Any] = {"code": cmd.code}
    ext = cmd.ext_fields
    if ext:
        d["extFields"] = ext if _all_str(ext) else {k: _to_str(v) for k, v in ext.items()}
    d["flag"] = cmd.flag
    d["language"] = cmd.language if isinstance(cmd.language, str) else _LANG_BY_ORDINAL.get(cmd.language, "JAVA")
    d["opaque"] = cmd.opaque
    if cmd.remark is not None:
        d["remark"] = cmd.remark
    d["serializeTypeCurrentRPC"] = "JSON"
    d["version"] = cmd.version
    return d


def _int_field(d: dict[str, Any], key: str, default: int = 0) -> int:
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError) as e:
        raise CodecError(f"header field {key} is not an integer: {v!r}") from e


def parse_json_reference(data: bytes | memoryview) -> object:
    """The maintained reference parser of a JSON header: the stdlib's, lenient as fastjson-era clients
    need (NaN, lone-surrogate escapes, integers of any size are accepted here)."""
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CodecError(f"bad JSON header: {e}") from None


def decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    """The fast path: orjson parses the header (an offset commit's in ~0.8 us against ~2.6 us), and a
    header it parses to plain values (the four numbers ints, language/remark a str, int or null, every
    extFields value a str: what Java clients send) is decoded from that. Anything else is decided by the
    reference, `decode_json_header_reference`: what orjson refuses (it is stricter than the stdlib:
    NaN/Infinity, lone-surrogate escapes, nesting past 1024, invalid UTF-8) and any float, since orjson
    reads an integer past 64 bits as a float. Both agree on every input
    (tests/codec/test_json_header_parsers.py)."""
    try:
        d = _orjson_loads(data)
    except _OrjsonError:
        return decode_json_header_reference(data)
    if type(d) is dict:
        get = d.get
        code, opaque, flag, version = get("code"), get("opaque"), get("flag"), get("version")
        lang, remark, ext = get("language", "JAVA"), get("remark"), get("extFields")
        if type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int \
                and type(lang) is str and (remark is None or type(remark) is str) \
                and (ext is None or (type(ext) is dict and _all_str(ext))) \
                and -(1 << 31) <= code < (1 << 31) and -(1 << 31) <= opaque < (1 << 32):
            return RemotingCommand(code, opaque, flag, lang, version, remark, ext or {}, b"", SERIALIZE_JSON)
        if (ext is None or (type(ext) is dict and _all_str(ext))) and _PLAIN.issuperset(
                (type(code), type(opaque), type(flag), type(version), type(lang), type(remark))):
            return command_from_json(d)  # plain values of unusual types (a language ordinal, numbers as strings)
    return decode_json_header_reference(data)


_PLAIN = frozenset({int, str, bool, type(None)})


def decode_json_header_reference(data: bytes | memoryview) -> RemotingCommand:
    """`decode_json_header` through the reference parser (what the differential test compares against)."""
    return command_from_json(parse_json_reference(data))


def command_from_json(d: object) -> RemotingCommand:
    """A RemotingCommand from a parsed JSON header, leniently (see the module docstring)."""
    if type(d) is not dict:
        raise CodecError("JSON header is not an object")
    get = d.get
    lang = get("language", "JAVA")
    if type(lang) is not str:
        if isinstance(lang, int) and not isinstance(lang, bool):
            lang = _LANG_BY_ORDINAL.get(lang, "OTHER")
        elif not isinstance(lang, str):
            lang = "OTHER"
    ext = get("extFields") or {}
    if type(ext) is not dict:
        raise CodecError("extFields is not an object")
    remark = get("remark")
    # the four numbers are plain ints in every client's header: _int_field only for anything else
    code, opaque, flag, version = get("code"), get("opaque"), get("flag"), get("version")
    if type(code) is not int:
        code = _int_field(d, "code")
    if type(opaque) is not int:
        opaque = _int_field(d, "opaque")
    if type(flag) is not int:
        flag = _int_field(d, "flag")
    if type(version) is not int:
        version = _int_field(d, "version")
    if not (-(1 << 31) <= code < (1 << 31)) or not (-(1 << 31) <= opaque < (1 << 32)):
        raise CodecError("code or opaque out of range")
    return RemotingCommand(
        code, opaque, flag, lang, version,
        remark if remark is None or type(remark) is str else str(remark),
        ext if _all_str(ext) else {str(k): _to_str(v) for k, v in ext.items() if v is not None},
        b"", SERIALIZE_JSON,
    )


# ---------------------------------------------------------- ROCKETMQ header

# The ROCKETMQ binary header, declared once (the fast encoders in codec.ack_response, send_response and
# pull_response build their frame heads from it with `rocketmq_head`): code, language ordinal, version,
# opaque, flag, remark length; then the remark, the extFields length and the extFields (key: short
# length + UTF-8, value: int length + UTF-8). opaque and flag are Java ints: written through java_int.
ROCKETMQ_FIXED_FIELDS = "hBhiii"
FRAME_PREFIX_FIELDS = "ii"  # the frame's total length, serialize type << 24 | header length
_FIXED_RLEN = struct.Struct(">" + ROCKETMQ_FIXED_FIELDS)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def rocketmq_head(ext_length: bool) -> struct.Struct:
    """The frame prefix and the header's fixed fields (and the extFields length word when the remark
    is empty, `ext_length`) as one Struct: a fast encoder's frame head."""
    return struct.Struct(">" + FRAME_PREFIX_FIELDS + ROCKETMQ_FIXED_FIELDS + ("i" if ext_length else ""))


def java_int(v: int) -> int:
    """`v` as the Java int with the same low 32 bits (an opaque or flag from a JSON header may be
    written unsigned)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


# ext-field keys repeat on every request/response (short V2 names, msgId, queueId...): the decoder
# maps key bytes to interned str, the encoder maps str to its length-prefixed bytes (both bounded)
_KEYS: BoundedCache[bytes, str] = BoundedCache("rocketmq_header.key", 4096)
_KEY_HEADS: BoundedCache[str, bytes] = BoundedCache("rocketmq_header.key_head", 4096)


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    lang = _LANG_BY_NAME.get(cmd.language, 0) if isinstance(cmd.language, str) else int(cmd.language)
    try:
        remark = (cmd.remark or "").encode("utf-8", "replace")
        parts = [_FIXED_RLEN.pack(cmd.code, lang, cmd.version, java_int(cmd.opaque), java_int(cmd.flag),
                                  len(remark)), remark, b""]
        elen = 0
        key_heads = _KEY_HEADS
        pack32 = _I32.pack
        for k, v in cmd.ext_fields.items():
            if k is None or v is None:
                continue
            kh = key_heads.get(k)
            if kh is None:
                kb = str(k).encode("utf-8", "replace")
                kh = _I16.pack(len(kb)) + kb
                if type(k) is str:
                    key_heads.remember(k, kh)
            vb = (v if type(v) is str else _to_str(v)).encode("utf-8", "replace")
            parts += (kh, pack32(len(vb)), vb)
            elen += len(kh) + 4 + len(vb)
    except struct.error as e:
        raise CodecError(f"field out of range for the ROCKETMQ header: {e}") from None
    parts[2] = _I32.pack(elen)
    return b"".join(parts)


def decode_rocketmq_header(data: bytes | memoryview) -> RemotingCommand:
    b = data if type(data) is bytes else bytes(data)  # one copy; slices of bytes decode fastest
    n = len(b)
    if n < _FIXED_RLEN.size + 4:
        raise CodecError("ROCKETMQ header too short")
    code, lang, version, opaque, flag, rlen = _FIXED_RLEN.unpack_from(b, 0)
    pos = _FIXED_RLEN.size
    if rlen < 0 or pos + rlen > n:
        raise CodecError("ROCKETMQ header remark length out of range")
    try:
        remark = b[pos:pos + rlen].decode("utf-8") if rlen else None
        pos += rlen
        if pos + 4 > n:
            raise CodecError("ROCKETMQ header truncated before extFields")
        (elen,) = _I32.unpack_from(b, pos)
        pos += 4
        if elen < 0 or pos + elen > n:
            raise CodecError("ROCKETMQ header extFields length out of range")
        layout = _LAYOUTS.get(elen)
        if layout is not None and layout.check.unpack_from(b, pos) == layout.expect:
            ext = dict(zip(layout.keys, map(_utf8, layout.values.unpack_from(b, pos)), strict=True))
        else:
            ext = _decode_ext(b, pos, pos + elen)
            _learn_layout(b, pos, elen, len(ext))
    except UnicodeDecodeError as e:
        raise CodecError(f"ROCKETMQ header string is not UTF-8: {e}") from None
    return RemotingCommand(code, opaque, flag, _LANG_BY_ORDINAL.get(lang, "OTHER"), version, remark, ext, b"",
                           SERIALIZE_ROCKETMQ)


_utf8 = bytes.decode  # UTF-8, strict


def _decode_ext(b: bytes, pos: int, end: int) -> dict[str, str]:
    """The extFields block, field by field, every length checked (the validating parser)."""
    ext: dict[str, str] = {}
    keys = _KEYS
    i16, i32 = _I16.unpack_from, _I32.unpack_from
    while pos < end:
        if pos + 2 > end:
            raise CodecError("ROCKETMQ header ext key truncated")
        klen = i16(b, pos)[0]
        pos += 2
        if klen < 0 or pos + klen + 4 > end:
            raise CodecError("ROCKETMQ header ext key length out of range")
        kb = b[pos:pos + klen]
        k = keys.get(kb)
        if k is None:
            k = keys.remember(kb, kb.decode("utf-8"))
        pos += klen
        vlen = i32(b, pos)[0]
        pos += 4
        if vlen < 0 or pos + vlen > end:
            raise CodecError("ROCKETMQ header ext value length out of range")
        ext[k] = b[pos:pos + vlen].decode("utf-8")
        pos += vlen
    return ext


class _ExtLayout:
    """The shape of one extFields block: its keys in order and every value's length.

    Requests pipelined by one client repeat a shape (same keys, same value lengths: a send differs
    in the digits of bornTimestamp or queueId, not their count). `check` unpacks, in one call, every
    key-length / key / value-length of a block; when that equals `expect`, the block has exactly
    this shape (each length and key byte compared, so no field can be misread) and `values` unpacks
    all values in one call. A block of another shape goes through `_decode_ext`, which validates it
    and teaches its shape (blocks are keyed by their byte length, one shape per length)."""

    __slots__ = ("check", "expect", "values", "keys")

    def __init__(self, fields: list[tuple[int, bytes, int]]) -> None:
        self.check = struct.Struct(">" + "".join(f"H{kl}sI{vl}x" for kl, _, vl in fields))
        self.expect = tuple(x for kl, kb, vl in fields for x in (kl, kb, vl))
        self.values = struct.Struct(">" + "".join(f"{kl + 6}x{vl}s" for kl, _, vl in fields))
        self.keys = tuple(_KEYS.get(kb) or kb.decode("utf-8") for _, kb, _ in fields)


_LAYOUTS: BoundedCache[int, _ExtLayout] = BoundedCache("rocketmq_header.layout", 256)
_LAYOUT_MAX_FIELDS = 64
_LAYOUT_MAX_BYTES = 65536


def _learn_layout(b: bytes, pos: int, elen: int, nfields: int) -> None:
    """Remember the shape of a block `_decode_ext` just accepted (so its lengths are valid)."""
    if nfields == 0 or nfields > _LAYOUT_MAX_FIELDS or elen > _LAYOUT_MAX_BYTES:
        return
    end = pos + elen
    fields = []
    while pos < end:
        klen = _I16.unpack_from(b, pos)[0]
        vlen = _I32.unpack_from(b, pos + 2 + klen)[0]
        fields.append((klen, b[pos + 2:pos + 2 + klen], vlen))
        pos += 6 + klen + vlen
    if len(fields) != nfields:
        return  # a repeated key: the dict kept one value, a shape would return both
    _LAYOUTS.remember(elen, _ExtLayout(fields))


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SERIALIZE_ROCKETMQ:
        return encode_rocketmq_header(cmd)
    return encode_json_header(cmd)
