import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
