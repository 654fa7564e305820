"""The fast JSON header parser (orjson, then the reference for what it refuses) and the reference
(stdlib json) agree on every input: the same RemotingCommand, or CodecError from both."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.buffers import BytesLike
from codec.command import (
    RemotingCommand,
    decode_json_header,
    decode_json_header_reference,
    encode_json_header,
    encode_json_header_reference,
    parse_json_reference,
)
from codec.errors import CodecError
from tests.codec.strategies import BOUNDED, commands
from tests.fuzz.targets import seeds


def _outcome(decode, raw: BytesLike) -> RemotingCommand | str:
    try:
        return decode(raw)
    except CodecError:
        return "CodecError"


def _agree(raw: bytes) -> None:
    assert _outcome(decode_json_header, raw) == _outcome(decode_json_header_reference, raw)
    assert _outcome(decode_json_header, memoryview(raw)) == _outcome(decode_json_header_reference, raw)


# what the lenient decoder has to take (clients other than Java), and what orjson refuses but the
# reference accepts or refuses in its own way
LENIENT = [
    b'{"code":11,"language":1,"version":333,"opaque":7,"flag":0,"remark":"","extFields":'
    b'{"queueId":3,"sysFlag":0,"unitMode":false,"maxMsgNums":32.0,"topic":"T","x":null,"d":{"a":1},"l":[1,2]}}',
    b'{"code":1,"language":"NODE_JS"}', b'{"code":1,"language":9}', b'{"code":1,"language":99}',
    b'{"code":1,"language":true}', b'{"code":1,"language":null}', b'{"code":1,"language":1.5}',
    b'{"code":"12","opaque":"7","flag":"1","version":"409"}', b'{"code":true,"opaque":false}',
    b'{"code":1,"remark":5}', b'{"code":1,"remark":null}', b'{"code":1,"remark":["r"]}',
    b'{"code":1,"extFields":{"k":"\\ud800"}}', b'{"code":1,"extFields":{"\\udc00":"v"}}',  # lone surrogates
    b'{"code":1,"extFields":{"k":"\\ud83d\\ude00"}}',  # a surrogate pair: one code point
    b'{"code":1,"extFields":{"k":NaN}}', b'{"code":1,"extFields":{"k":Infinity,"j":-Infinity}}',
    b'{"code":1,"extFields":{"k":123456789012345678901234567890}}', b'{"code":1,"opaque":18446744073709551616}',
    b'{"code":1,"extFields":{"k":1e400}}', b'{"code":1e999}', b'{"code":1.0,"opaque":2.5}', b'{"code":-0}',
    b'{"code":1,"code":2}', b'{"code":1,"extFields":{"a":"1","a":"2"}}', b'{"code":1,"extFields":null}',
    b'{"code":1,"extFields":{}}', b'{"code":1,"extFields":[]}', b'{"code":1,"extFields":""}',
    b' \t\r\n{"code":1} \n', b'\xef\xbb\xbf{"code":1}', b'{"code":1,"extFields":{"k":"a\x01b"}}',
    b'{"code":1,"extFields":{"k":"\xc3\xa9\xe2\x82\xac"}}', b'{"code":1,"extFields":{"k":"\xed\xa0\x80"}}',
    b'{"code":1,"extFields":{"k":"\\u0000"}}', b'{"code":1}x', b"[" * 2000 + b"]" * 2000,
    b'{"a":' * 1100 + b"1" + b"}" * 1100, b'{"code":1,"extFields":{"k":' + b"[" * 1030 + b"]" * 1030 + b"}}",
    b"", b"[]", b"{", b'{"code":"x"}', b'{"extFields":[1]}', b"\xff\xfe", b'{"code":99999999999}',
    b'{"opaque":"nan"}', b"null", b"1", b'"s"', b'{"code":1,}', b"{'code':1}", b'{"code":01}',
    b'{"code":1,"opaque":4294967295}', b'{"code":1,"opaque":4294967296}', b'{"code":-2147483649}',
]


@pytest.mark.parametrize("raw", LENIENT)
def test_fast_and_reference_decoders_agree_on_lenient_and_bad_headers(raw):
    _agree(raw)


def test_fast_and_reference_decoders_agree_on_the_fuzz_seeds():
    for raw in seeds("json_header"):
        _agree(raw)


def _has_float(v) -> bool:
    if isinstance(v, dict):
        return any(_has_float(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_float(x) for x in v)
    return isinstance(v, float) or (isinstance(v, int) and not -(1 << 63) <= v < (1 << 64))


def test_the_lenient_cases_really_take_both_paths():
    """Some of the inputs above are refused by orjson and decided by the reference (else this file would
    not test the fallback), and the common header is orjson's."""
    refused = 0
    for raw in LENIENT:
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError:
            refused += 1
    assert refused >= 10
    cmd = decode_json_header(b'{"code":1,"extFields":{"k":"\\ud800","n":NaN}}')
    assert cmd.ext_fields == {"k": "\ud800", "n": "nan"}


@BOUNDED
@given(commands(serialize_type=0))
def test_fast_and_reference_decoders_agree_on_encoded_commands(cmd):
    _agree(encode_json_header(cmd))


@BOUNDED
@given(commands(serialize_type=0))
def test_fast_and_reference_encoders_write_the_same_bytes(cmd):
    assert encode_json_header(cmd) == encode_json_header_reference(cmd)


def test_encoders_agree_on_every_code_point_and_what_orjson_refuses():
    """Each code point in a value and in a key (controls escaped, the rest as UTF-8), and what only the
    reference writes: lone surrogates (as '?', as Java would) and integers past 64 bits, non-str values."""
    for cp in [*range(0xD800), *range(0xE000, 0x10000), 0x10000, 0x1F600, 0x10FFFF]:
        c = chr(cp)
        cmd = RemotingCommand(code=310, remark=c, ext_fields={"k" + c: c + "v"})
        assert encode_json_header(cmd) == encode_json_header_reference(cmd), hex(cp)
    for cmd in [RemotingCommand(code=1, ext_fields={"k": "\ud800x"}), RemotingCommand(code=1, remark="\udc00"),
                RemotingCommand(code=1, opaque=1 << 70), RemotingCommand(code=1, ext_fields={"n": 5, "b": True})]:  # type: ignore[dict-item]
        assert encode_json_header(cmd) == encode_json_header_reference(cmd)
    assert encode_json_header(RemotingCommand(code=1, remark="\ud800")).count(b'"remark":"?"') == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@BOUNDED
@given(st.dictionaries(st.sampled_from(["code", "opaque", "flag", "version", "language", "remark", "extFields",
                                        "serializeTypeCurrentRPC", "x"]), json_values, max_size=8),
       st.booleans())
def test_fast_and_reference_decoders_agree_on_arbitrary_json_objects(d, ascii_only):
    raw = json.dumps(d, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    _agree(raw)
    try:
        ref = parse_json_reference(raw)
    except CodecError:
        return
    if type(ref) is dict and not _has_float(ref):  # orjson reads an integer past 64 bits as a float
        try:
            fast = orjson.loads(raw)
        except orjson.JSONDecodeError:  # stricter: the reference decides (as above)
            return
        assert fast == ref


@BOUNDED
@given(st.binary(max_size=200))
def test_fast_and_reference_decoders_agree_on_arbitrary_bytes(raw):
    _agree(raw)
    _agree(b'{"code":1,"extFields":{"k":"' + raw + b'"}}')
