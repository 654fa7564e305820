"""codec.send_request writes the very bytes the general path (`encode_frame` of `request_reference`) writes
for every SEND_MESSAGE_V2 the proxy makes, and refuses what it cannot write so (the caller then takes the
general path)."""

from hypothesis import given
from hypothesis import strategies as st

from codec.frame import decode_frame, encode_frame_bytes
from codec.send_request import SendRequestTemplate, frame_pieces, request_reference
from tests.codec.strategies import BOUNDED

# topic and group names (RocketMQ's charset, and anything else but NUL: the template must not rely on it)
names = st.one_of(st.from_regex(r"[%|a-zA-Z0-9_-]{1,64}", fullmatch=True),
                  st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                          min_size=1, max_size=20))
# properties text: every code point but lone surrogates, with the separators the proxy writes
props = st.text(alphabet=st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from("\x01\x02\"\\%")),
                max_size=200)


@BOUNDED
@given(names, names, st.integers(1, 1 << 20), st.integers(0, (1 << 31) - 1), st.integers(0, (1 << 31) - 1),
       st.integers(0, (1 << 63) - 1), props, st.binary(max_size=64), st.integers(-(1 << 31), (1 << 31) - 1))
def test_template_bytes_are_the_general_encoders(group, topic, qnums, qid, sys_flag, born, properties, body,
                                                 opaque):
    head = SendRequestTemplate(group, topic, qnums).head(qid, sys_flag, born, properties)
    assert head is not None
    got = b"".join(frame_pieces(head, opaque, body))
    ref = request_reference(group, topic, qnums, qid, sys_flag, born, properties, body, opaque)
    assert got == encode_frame_bytes(ref)
    cmd = decode_frame(got[4:])
    assert (cmd.code, cmd.opaque, cmd.ext_fields, cmd.body) == (ref.code, opaque, ref.ext_fields, body)


def test_lone_surrogate_takes_the_general_path():
    assert SendRequestTemplate("G", "T", 4).head(0, 0, 1, "KEYS\x01\ud800") is None


def test_nul_in_a_name_is_refused():
    for group, topic in (("G\x00", "T"), ("G", "T\x00")):
        try:
            SendRequestTemplate(group, topic, 4)
        except ValueError:
            continue
        raise AssertionError(f"a template for {group!r}/{topic!r}")
