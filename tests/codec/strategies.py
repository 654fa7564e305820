"""Hypothesis strategies shared by the codec tests."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

from hypothesis import settings
from hypothesis import strategies as st

from codec.codes import LanguageCode
from codec.command import RemotingCommand

BOUNDED = settings(max_examples=200, deadline=None)
FEW = settings(max_examples=60, deadline=None)

# text that survives UTF-8 both ways (no lone surrogates)
text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
ext_fields = st.dictionaries(text, text, max_size=8)
languages = st.sampled_from([m.name for m in LanguageCode])
bodies = st.binary(max_size=300)


@st.composite
def commands(draw, serialize_type=None):
    ser = draw(st.sampled_from([0, 1])) if serialize_type is None else serialize_type
    return RemotingCommand(
        code=draw(st.integers(-32768, 32767)),
        opaque=draw(st.integers(-(1 << 31), (1 << 31) - 1)),
        flag=draw(st.integers(0, 3)),
        language=draw(languages),
        version=draw(st.integers(-32768, 32767)),
        remark=draw(st.none() | text.filter(bool)),
        ext_fields=draw(ext_fields),
        body=draw(bodies),
        serialize_type=ser,
    )


ipv4 = st.ip_addresses(v=4).map(str)


def _not_v4_mapped(a: IPv4Address | IPv6Address) -> bool:
    return isinstance(a, IPv6Address) and a.ipv4_mapped is None


ipv6 = st.ip_addresses(v=6).filter(_not_v4_mapped).map(str)
ports = st.integers(0, 65535)
hosts = st.tuples(ipv4 | ipv6, ports)
prop_key = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x01\x02"),
                   min_size=1, max_size=12)
prop_value = prop_key
properties = st.dictionaries(prop_key, prop_value, max_size=6)
