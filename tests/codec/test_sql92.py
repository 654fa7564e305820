"""codec.sql92: RocketMQ's SQL92 selectors: known answers from RocketMQ's semantics, refusals with a position,
and the fast evaluator (record bytes) against the reference (decoded property map) on generated expressions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.properties import parse_properties, properties_to_string
from codec.record import encode_message_bytes, read_properties
from codec.sql92 import Selector, SelectorError, parse
from tests.codec.strategies import BOUNDED


def record_with(props: dict[str, str] | bytes) -> bytes:
    raw = props if isinstance(props, bytes) else properties_to_string(props).encode()
    return encode_message_bytes("T", b"body", 0, 0, 0, 1, ("127.0.0.1", 1), ("127.0.0.1", 2), 0, raw)


KNOWN = [
    # (expression, properties, matches)
    ("region = 'eu' AND amount > 100", {"region": "eu", "amount": "200"}, True),
    ("region = 'eu' AND amount > 100", {"region": "eu", "amount": "100"}, False),
    ("region = 'eu' AND amount > 100", {"amount": "200"}, False),  # missing property: NULL, no match
    # a property that does not parse as the number: Java throws, the whole message does not match ...
    ("amount > 100 OR region = 'eu'", {"region": "eu", "amount": "lots"}, False),
    # ... unless OR already decided before reaching it
    ("region = 'eu' OR amount > 100", {"region": "eu", "amount": "lots"}, True),
    ("a = 5", {"a": "05"}, True),  # Integer.valueOf("05")
    ("a = 5", {"a": "5.0"}, False),  # Integer.valueOf fails
    ("a = 5.0", {"a": "5"}, True),  # Double.valueOf
    ("a > 3000000000", {"a": "3000000001"}, True),  # a Long constant parses the property as a long
    ("a > 1", {"a": "3000000001"}, False),  # an Integer constant: out of int's range, no match
    ("a < b", {"a": "2", "b": "10"}, True),  # two strings under < compare as doubles
    ("a = b", {"a": "2", "b": "2.0"}, False),  # ... but = compares strings
    ("a IS NULL", {}, True),
    ("a IS NOT NULL", {"a": "x"}, True),
    ("a BETWEEN 1 AND 5", {"a": "5"}, True),
    ("a NOT BETWEEN 1 AND 5", {"a": "6"}, True),
    ("a NOT BETWEEN 1 AND 5", {}, False),
    ("TAGS IN ('a', 'b')", {"TAGS": "b"}, True),
    ("TAGS NOT IN ('a', 'b')", {"TAGS": "c"}, True),
    ("TAGS NOT IN ('a', 'b')", {}, False),
    ("a CONTAINS 'bc'", {"a": "abcd"}, True),
    ("a NOT CONTAINS 'bc'", {}, False),  # CONTAINS of NULL is FALSE, not NULL ...
    ("NOT (a CONTAINS 'bc')", {}, True),  # ... so its NOT is TRUE
    ("a CONTAINS ''", {"a": "x"}, False),
    ("a STARTSWITH 'ab' AND a ENDSWITH 'cd'", {"a": "abcd"}, True),
    ("a NOT STARTSWITH 'ab'", {"a": "xabcd"}, True),
    ("a NOT ENDSWITH 'cd'", {"a": "abcd"}, False),
    ("TRUE", {}, True),
    ("FALSE OR NULL", {}, False),
    ("a = TRUE", {"a": "TrUe"}, True),  # Boolean.valueOf
    ("a = FALSE", {"a": "anything"}, True),
    ("TRUE = a", {"a": "true"}, False),  # Java's ClassCastException
    ("a", {"a": "true"}, False),  # a bare property is a boolean cast: a String is never TRUE
    ("NOT a = 'x'", {"a": "y"}, False),  # NOT binds tighter: (NOT a) = 'x'
    ("NOT (a = 'x')", {"a": "y"}, True),
    ("a <> 'x'", {}, False),
    ("a > -5", {"a": "-4"}, True),
    ("a = 1.5E1", {"a": "15"}, True),
    ("a > 1", {"a": " 2"}, False),  # Integer.valueOf does not trim ...
    ("a > 1.0", {"a": " 2 "}, True),  # ... Double.valueOf does
    ("a > 1.0", {"a": "2d"}, True),
    ("a > 1.0", {"a": "NaN"}, True),  # Double.compareTo: NaN above everything
    ("a = 1.0", {"a": "0x1p0"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("/* c */ a = 'x' -- tail\n", {"a": "x"}, True),
    ("region = 'eu' and NOT (amount between 10 and 20)", {"region": "eu", "amount": "30"}, True),
]


@pytest.mark.parametrize(("expression", "props", "want"), KNOWN)
def test_known_answers(expression: str, props: dict[str, str], want: bool) -> None:
    sel = Selector(expression)
    assert sel.matches_properties(props) is want
    assert sel.matches_record(record_with(props)) is want


REFUSED = [
    ("a >", "column 4"),
    ("a = NULL", "column 5"),
    ("a > 'x'", "column 5"),
    ("a > TRUE", "column 5"),
    ("a BETWEEN 5 AND 1", "column 1"),
    ("5 IN ('a')", "column 1"),
    ("a = 1 AND 5", "column 11"),
    ("'abc'", "column 1"),
    ("a > 0.0", "column 5"),  # RocketMQ refuses a double below Double.MIN_VALUE, 0.0 included
    ("a = 007", "column 6"),
    ("TRUE = 1", "column 8"),
    ("a = 99999999999999999999", "column 5"),
    ("a != 1", "column 3"),
    ("a = 'x' -- a comment needs its line break", "column 9"),
    ("(a = 1", "column 7"),
    ("a IN ()", "column 7"),
    ("", "end of the expression at line 1, column 1"),
    ("NOT " * 150 + "(a = 1)", "nested deeper"),
]


@pytest.mark.parametrize(("expression", "where"), REFUSED)
def test_refusals_name_the_position(expression: str, where: str) -> None:
    with pytest.raises(SelectorError, match="Invalid MessageSelector") as e:
        parse(expression)
    assert where in str(e.value)


def test_keywords_are_case_insensitive_and_not_prefixes() -> None:
    sel = Selector("notx = 'a' aNd INx in ('b') Or isnull is NoT nUlL")
    assert sel.properties == {"notx", "INx", "isnull"}
    assert sel.matches_properties({"isnull": "1"})
    assert not sel.matches_properties({"notx": "a", "INx": "c"})


def test_last_duplicate_property_wins_as_in_java() -> None:
    raw = b"a\x01x\x02a\x01y"
    sel = Selector("a = 'y'")
    assert parse_properties(raw) == {"a": "y"}
    assert sel.matches_record(record_with(raw)) and sel.matches_properties(parse_properties(raw))


# ---- the fast path against the reference ---------------------------------------------------------------------

NAMES = ["a", "b", "TAGS"]
VALUES = ["1", "2", "05", "-3", "2.5", "1e3", " 7 ", "NaN", "abc", "true", "TRUE", "", "x'y", "3000000000",
          "\u0663", "é", "a\u00e9b"]
literals = st.one_of(
    st.sampled_from(["1", "2", "-3", "0", "2.5", "1e3", "3000000000", "5L", "TRUE", "FALSE", "NULL"]),
    st.sampled_from(VALUES).map(lambda v: "'" + v.replace("'", "''") + "'"))
operands = st.one_of(st.sampled_from(NAMES), literals, st.sampled_from(NAMES).map(lambda n: "-" + n))
strings = st.sampled_from(VALUES + ["b", "TAG"]).map(lambda v: "'" + v.replace("'", "''") + "'")


def _condition() -> st.SearchStrategy[str]:
    cmp = st.tuples(operands, st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), operands).map(" ".join)
    null = st.tuples(operands, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join)
    between = st.tuples(operands, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), operands, operands).map(
        lambda t: f"{t[0]} {t[1]} {t[2]} AND {t[3]}")
    in_ = st.tuples(st.sampled_from(NAMES), st.sampled_from(["IN", "NOT IN"]),
                    st.lists(strings, min_size=1, max_size=3)).map(lambda t: f"{t[0]} {t[1]} ({', '.join(t[2])})")
    text_ops = st.tuples(operands, st.sampled_from(["CONTAINS", "NOT CONTAINS", "STARTSWITH", "ENDSWITH",
                                                    "NOT ENDSWITH"]), strings).map(" ".join)
    leaf = st.one_of(cmp, null, between, in_, text_ops, st.sampled_from(NAMES + ["TRUE", "FALSE"]))
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(" ".join),
        inner.map(lambda c: f"NOT ({c})"),
        inner.map(lambda c: f"({c})")), max_leaves=6)


def _selector_or_none(expression: str) -> Selector | None:
    try:
        return Selector(expression)
    except SelectorError:
        return None


@BOUNDED
@given(expression=_condition(), props=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=3),
       extra=st.dictionaries(st.sampled_from(["ab", "aa", "UNIQ_KEY", "b2"]), st.sampled_from(VALUES), max_size=2))
def test_fast_path_agrees_with_the_reference(expression: str, props: dict[str, str], extra: dict[str, str]) -> None:
    sel = _selector_or_none(expression)
    if sel is None:  # a refused combination (e.g. `'x' > 1`): refusal itself is covered above
        return
    rec = record_with({**extra, **props})
    assert sel.matches_record(rec) == sel.matches_properties(read_properties(rec))


# ---- the literal a scan may search for (Selector.literal, storage get_messages' record_literal) ---------------

@pytest.mark.parametrize(("expression", "literal"), [
    ("region = 'eu'", b"region\x01eu"),
    ("amount > 3 AND region = 'eu' AND a = 'bb'", b"region\x01eu"),  # the longest of an AND chain's
    ("TAGS = 'TagA'", b"TAGS\x01TagA"),
    ("region = 'é'", "region\x01é".encode()),
    ("region = 'eu' OR a = 'x'", None),  # either side may match alone
    ("NOT (region = 'eu')", None),
    ("region <> 'eu'", None),
    ("region = ''", None),  # an empty value names no bytes
    ("region IS NULL", None),
    ("a = 5", None),  # a number: '05' matches too
])
def test_literal_is_named_only_where_every_match_holds_it(expression: str, literal: bytes | None) -> None:
    assert Selector(expression).literal == literal


@BOUNDED
@given(expression=_condition(), props=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=3),
       extra=st.dictionaries(st.sampled_from(["ab", "aa", "UNIQ_KEY", "b2"]), st.sampled_from(VALUES), max_size=2),
       dup=st.sampled_from(["", "\x02a\x01", "\x02a\x01abc", "\x02TAGS\x01"]))
def test_every_match_holds_the_literal(expression: str, props: dict[str, str], extra: dict[str, str],
                                       dup: str) -> None:
    sel = _selector_or_none(expression)
    if sel is None or sel.literal is None:
        return
    raw = (properties_to_string({**extra, **props}) + dup).encode()
    if sel.matches_record(record_with(raw)) or sel.matches_properties(parse_properties(raw)):
        assert sel.literal in raw
