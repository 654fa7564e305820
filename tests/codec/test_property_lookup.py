"""codec.properties.value_span / token_value: the one property lookup every rewriter uses agrees with
reading the properties segment by segment (the first `name\\x01value` segment wins), for any bytes,
well-formed or not, and for str."""

from hypothesis import given
from hypothesis import strategies as st

from codec.properties import property_token, token_value, value_span
from tests.codec.strategies import BOUNDED

_names = st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"REAL_TOPIC", b"A"])
# properties-like bytes: names, values and stray separators in any order
_pieces = st.lists(st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"REAL_TOPIC", b"A", b"x", b"",
                                    b"\x01", b"\x02", b"TAGS\x01", b"\x02KEYS\x01v"]), max_size=12)


def _by_segments(pb: bytes, name: bytes) -> bytes | None:
    for seg in pb.split(b"\x02"):
        if seg.startswith(name + b"\x01"):
            return seg[len(name) + 1:]
    return None


@BOUNDED
@given(_pieces, _names)
def test_lookup_agrees_with_segments(pieces, name):
    pb = b"".join(pieces)
    text = b"\x02" + pb
    token = property_token(name)
    want = _by_segments(pb, name)
    assert token_value(text, token) == want
    span = value_span(text, token)
    assert (None if span is None else text[span[0]:span[1]]) == want
    s = text.decode("latin-1")
    sspan = value_span(s, property_token(name.decode()))
    assert (None if sspan is None else s[sspan[0]:sspan[1]].encode("latin-1")) == want


def test_a_name_inside_a_value_is_not_a_key():
    text = b"\x02X\x01aTAGS\x01no\x02TAGS\x01yes"
    assert token_value(text, property_token(b"TAGS")) == b"yes"
    assert token_value(text, property_token(b"KEYS")) is None
    assert token_value(b"\x02TAGS\x01", property_token(b"TAGS")) == b""
