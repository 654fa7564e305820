import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import codec.command as command_module
from codec.command import (
    RemotingCommand,
    decode_json_header,
    decode_rocketmq_header,
    encode_json_header,
    encode_rocketmq_header,
)
from codec.errors import CodecError
from tests.codec.strategies import BOUNDED, commands

FIELDS = ("code", "opaque", "flag", "language", "version", "remark", "ext_fields")


def same_header(a: RemotingCommand, b: RemotingCommand) -> None:
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f


@BOUNDED
@given(commands(serialize_type=0))
def test_json_header_round_trip(cmd):
    back = decode_json_header(encode_json_header(cmd))
    same_header(cmd, back)
    assert back.serialize_type == 0


@BOUNDED
@given(commands(serialize_type=1))
def test_rocketmq_header_round_trip(cmd):
    # a zero-length remark decodes as null (Java rule)
    back = decode_rocketmq_header(encode_rocketmq_header(cmd))
    same_header(cmd, back)
    assert back.serialize_type == 1


def test_response_matches_the_reference_example():
    # remoting-protocol.md §2.1, typical send response
    req = decode_json_header(b'{"code":310,"extFields":{"a":"G"},"flag":0,"language":"CPP","opaque":42,'
                             b'"serializeTypeCurrentRPC":"JSON","version":333}')
    ext = {"queueId": 1, "msgId": "0A0B0C0D00002A9F0000000000000F3E", "queueOffset": 7,
           "MSG_REGION": "DefaultRegion", "TRACE_ON": True}
    resp = req.response(0, ext_fields=ext)
    got = encode_json_header(resp)
    assert got == (b'{"code":0,"extFields":{"queueId":"1","msgId":"0A0B0C0D00002A9F0000000000000F3E",'
                   b'"queueOffset":"7","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,'
                   b'"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":409}')


@BOUNDED
@given(st.dictionaries(st.text(max_size=8),
                       st.integers() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=8),
                       max_size=6))
def test_response_ext_fields_are_always_strings(ext):
    resp = RemotingCommand.request(10).response(0, ext_fields=ext)
    d = json.loads(encode_json_header(resp))
    assert all(isinstance(v, str) for v in d.get("extFields", {}).values())
    assert list(d) == sorted(d)  # fastjson sorts top-level keys
    assert "remark" not in d
    for k, v in ext.items():
        if isinstance(v, bool):
            assert d["extFields"][k] == ("true" if v else "false")


def test_lenient_request_parsing_of_cpp_and_node_values():
    raw = json.dumps({"code": 11, "language": 1, "version": 333, "opaque": 7, "flag": 0, "remark": "",
                      "extFields": {"queueId": 3, "maxMsgNums": 32, "k": False, "unitMode": True,
                                    "queueOffset": 12345678901, "Signature": "", "x": None,
                                    "f": 1.0}}).encode()
    cmd = decode_json_header(raw)
    assert cmd.language == "CPP"
    assert cmd.ext_fields == {"queueId": "3", "maxMsgNums": "32", "k": "false", "unitMode": "true",
                              "queueOffset": "12345678901", "Signature": "", "f": "1"}
    assert cmd.remark == ""


def test_language_by_name_or_ordinal():
    assert decode_json_header(b'{"code":1,"language":"NODE_JS"}').language == "NODE_JS"
    assert decode_json_header(b'{"code":1,"language":9}').language == "GO"
    assert decode_json_header(b'{"code":1,"language":99}').language == "OTHER"


def test_oneway_and_response_bits():
    req = RemotingCommand.request(15, {"a": 1}, oneway=True)
    assert req.is_oneway and not req.is_response
    resp = RemotingCommand(code=11, opaque=9, serialize_type=1).response(19, remark="PULL_NOT_FOUND")
    assert resp.is_response and not resp.is_oneway
    assert (resp.opaque, resp.serialize_type, resp.remark) == (9, 1, "PULL_NOT_FOUND")


@pytest.mark.parametrize("raw", [
    b"", b"[]", b"{", b'{"code":"x"}', b'{"code":1e999}', b'{"extFields":[1]}', b"\xff\xfe",
    b'{"code":99999999999}', b"[" * 100000, b'{"opaque":"nan"}',
])
def test_bad_json_headers_raise_codec_error(raw):
    with pytest.raises(CodecError):
        decode_json_header(raw)


@BOUNDED
@given(st.binary(max_size=200))
def test_arbitrary_bytes_into_header_decoders_raise_only_codec_error(raw):
    for dec in (decode_json_header, decode_rocketmq_header):
        try:
            dec(raw)
        except CodecError:
            pass


@BOUNDED
@given(commands(serialize_type=1), st.data())
def test_truncated_rocketmq_header_raises_codec_error(cmd, data):
    raw = encode_rocketmq_header(cmd)
    cut = data.draw(st.integers(0, len(raw) - 1))  # every proper prefix loses a declared length
    with pytest.raises(CodecError):
        decode_rocketmq_header(raw[:cut])


def test_rocketmq_header_refuses_a_length_past_its_end():
    raw = bytearray(encode_rocketmq_header(RemotingCommand(code=1, remark="abc", ext_fields={"k": "v"})))
    raw[13:17] = (10_000).to_bytes(4, "big")  # remark length
    with pytest.raises(CodecError):
        decode_rocketmq_header(bytes(raw))


def test_encode_rejects_values_the_binary_header_cannot_hold():
    with pytest.raises(CodecError):
        encode_rocketmq_header(RemotingCommand(code=70000))


# ---- the extFields shape cache (codec.command._ExtLayout) -----------------------------------------

def _ext_block_header(ext: dict[str, str], opaque: int = 7) -> bytes:
    cmd = RemotingCommand(code=310, opaque=opaque, ext_fields=ext, serialize_type=1)
    return encode_rocketmq_header(cmd)


@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=4), st.text(max_size=6), max_size=5),
                min_size=1, max_size=12),
       st.data())
def test_shape_cache_agrees_with_the_validating_parser(exts, data):
    """Blocks decoded through a learned shape equal what the field-by-field parser returns, also
    when blocks of one byte length but another shape alternate, and a block whose key or length
    bytes were changed is never read through a shape it no longer has."""
    for ext in exts:
        raw = _ext_block_header(ext)
        for _ in range(2):  # the second decode goes through the shape learned by the first
            assert decode_rocketmq_header(raw).ext_fields == ext
        if len(raw) > 21:
            i = data.draw(st.integers(21, len(raw) - 1))
            bad = bytearray(raw)
            bad[i] ^= data.draw(st.integers(1, 255))
            try:
                got = decode_rocketmq_header(bytes(bad))
            except CodecError:
                continue
            command_module._LAYOUTS.clear()  # what the validating parser alone makes of it
            assert decode_rocketmq_header(bytes(bad)).ext_fields == got.ext_fields


def test_same_length_blocks_of_different_shapes_are_told_apart():
    a = {"a": "12", "b": "x"}
    b = {"a": "1", "b": "xy"}  # same block length, other value lengths
    c = {"c": "12", "b": "x"}  # same lengths, other key
    ra, rb, rc = (_ext_block_header(e) for e in (a, b, c))
    assert len(ra) == len(rb) == len(rc)
    for _ in range(3):
        assert decode_rocketmq_header(ra).ext_fields == a
        assert decode_rocketmq_header(rb).ext_fields == b
        assert decode_rocketmq_header(rc).ext_fields == c
