"""codec.properties.rewrite_sent_properties (the plain-send fast path) against its maintained reference, the
dict path (codec.properties.rewrite_sent_properties_reference)."""

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from codec.properties import (
    parse_properties,
    parse_sent_properties,
    rewrite_sent_properties,
    rewrite_sent_properties_reference,
)
from tests.helpers.checks import present

MARKS = ("TIMER_", "TRAN_MSG")
_ids = itertools.count()


def new_uniq() -> str:
    return f"U{next(_ids):031d}"


key = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "a", "DELAY", "TRAN_MSG", "TIMER_DELAY_MS",
                       "CLUSTER", "x y"])
value = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=8)
noise = st.sampled_from(["", "\x01", "\x02", "\x02\x02", "k\x01", "\x01v", "kv"])


@given(st.lists(st.tuples(key, value), max_size=6), noise, st.booleans())
@example([("WAIT", "false"), ("TAGS", "t")], "", False)
@example([("UNIQ_KEY", "u1"), ("KEYS", "a  b")], "", True)
@example([("TAGS", "0\x020"), ("KEYS", "")], "\x01v", False)  # a segment with no separator: parsed alike, kept or not
def test_fast_path_equals_the_dict_path_or_declines(pairs, extra, trailing):
    text = "\x02".join(f"{k}\x01{v}" for k, v in pairs) + extra + ("\x02" if trailing and pairs else "")
    fixed = new_uniq()
    fast = rewrite_sent_properties(text, "DefaultCluster", lambda: fixed, MARKS)
    if fast is None:
        return
    assert not any(m in text for m in MARKS)
    slow = rewrite_sent_properties_reference(text, "DefaultCluster", lambda: fixed)
    assert fast[1:] == slow[1:]
    assert parse_properties(fast[0]) == parse_properties(slow[0])
    well_formed = not any(c in v for _, v in pairs for c in "\x01\x02") and extra == ""
    if well_formed and len({k for k, _ in pairs}) == len(pairs):  # no repeated key, no junk: the very same bytes
        assert fast[0] == slow[0]


def test_common_client_strings_take_the_fast_path():
    java = "UNIQ_KEY\x017F00000100002A9F0000000000000001\x02WAIT\x01true\x02TAGS\x01TagA\x02KEYS\x01order-1 order-2"
    stored, wait, tags, keys, delay = present(rewrite_sent_properties(java, "C", new_uniq, MARKS))
    assert stored == "UNIQ_KEY\x017F00000100002A9F0000000000000001\x02TAGS\x01TagA\x02KEYS\x01order-1 order-2\x02CLUSTER\x01C"
    assert wait is True and tags == "TagA" and keys == ("order-1", "order-2", "7F00000100002A9F0000000000000001")
    assert delay is None
    assert rewrite_sent_properties("", "C", lambda: "NEW", MARKS) == (
        "CLUSTER\x01C\x02UNIQ_KEY\x01NEW", True, None, ("NEW",), None)
    assert rewrite_sent_properties("DELAY\x013\x02WAIT\x01true", "C", lambda: "N", MARKS) == (
        "DELAY\x013\x02CLUSTER\x01C\x02UNIQ_KEY\x01N", True, None, ("N",), "3")
    assert present(rewrite_sent_properties("WAIT\x01false\x02", "C", lambda: "N", MARKS))[:2] == ("CLUSTER\x01C\x02UNIQ_KEY\x01N", False)


def test_the_dict_path_edits():
    """parse_sent_properties (the send's full path): WAIT dropped and returned, CLUSTER set (a client's
    replaced), UNIQ_KEY kept, or made when absent or empty."""
    assert parse_sent_properties("WAIT\x01False\x02UNIQ_KEY\x01\x02CLUSTER\x01x\x02TIMER_DELAY_MS\x015", "C",
                                 lambda: "N") == ({"UNIQ_KEY": "N", "CLUSTER": "C", "TIMER_DELAY_MS": "5"}, False)
    props, wait = parse_sent_properties("UNIQ_KEY\x01U1\x02TAGS\x01t", "C", lambda: pytest.fail("UNIQ_KEY was sent"))
    assert props == {"UNIQ_KEY": "U1", "TAGS": "t", "CLUSTER": "C"} and wait is True


def test_marked_or_irregular_strings_decline():
    for text in ("DELAY\x01", "DELAY\x011\x02DELAY\x012", "TIMER_DELAY_MS\x011000", "TRAN_MSG\x01true", "CLUSTER\x01x",
                 "TAGS\x01a\x02TAGS\x01b", "TAGS\x01", "a\x01b\x02\x02c\x01d", "ab"):
        assert rewrite_sent_properties(text, "C", new_uniq, MARKS) is None, repr(text)


# ---- rewrite_sent_properties_cached: the same result as the uncached function, every time ----------

from codec import properties as P  # noqa: E402

uniq_value = st.one_of(st.sampled_from(["7F0000010B5C2A139A5F4B1E2E3C0000", "AC1100020001", "", "a\x00b", "TIMER_",
                                        "x\x01y", "q KEY", "u"]), value)
any_marks = st.one_of(st.just(MARKS), st.just(("TIMER_", "TRAN_MSG", "REAL_TOPIC", "REAL_QID")),
                      st.lists(st.sampled_from(["TIMER_", "Y\x017F", "\x00", "KEY\x01", "DELAY\x01", "Q_K"]),
                               max_size=3).map(tuple))


def _both(text, cluster, marks):
    fixed = new_uniq()
    return (P.rewrite_sent_properties_cached(text, cluster, lambda: fixed, marks),
            rewrite_sent_properties(text, cluster, lambda: fixed, marks))


@given(st.lists(st.tuples(key, value), max_size=5), st.lists(st.tuples(key, value), max_size=5), noise, noise,
       st.lists(uniq_value, min_size=1, max_size=4), st.sampled_from(["DefaultCluster", "C\x00", "c\x02"]),
       any_marks, st.booleans())
@example([("WAIT", "true"), ("TAGS", "TagA")], [("KEYS", "a b")], "", "", ["7F01", "7F02", "7F03"],
         "DefaultCluster", MARKS, False)
def test_cached_equals_uncached(before, after, noise1, noise2, uniqs, cluster, marks, clear):
    if clear:
        P._REWRITES.clear()
    head = "".join(f"{k}\x01{v}\x02" for k, v in before) + noise1
    tail = noise2 + "".join(f"\x02{k}\x01{v}" for k, v in after)
    for u in uniqs * 3:  # first, second, later sightings of the shape
        text = f"{head}UNIQ_KEY\x01{u}{tail}"
        cached, plain = _both(text, cluster, marks)
        assert cached == plain, repr(text)


@given(st.lists(st.tuples(key, value), max_size=6), noise, st.booleans(), any_marks)
def test_cached_equals_uncached_on_any_string(pairs, extra, trailing, marks):
    text = "\x02".join(f"{k}\x01{v}" for k, v in pairs) + extra + ("\x02" if trailing and pairs else "")
    for _ in range(3):
        cached, plain = _both(text, "DefaultCluster", marks)
        assert cached == plain, repr(text)


def test_cached_takes_the_template_for_a_java_producer():
    P._REWRITES.clear()
    marks = ("TIMER_", "TRAN_MSG", "REAL_TOPIC", "REAL_QID")
    for n in range(5):
        text = f"UNIQ_KEY\x017F00000100002A9F00000000000000{n:02d}\x02WAIT\x01true\x02TAGS\x01TagA"
        cached, plain = _both(text, "C", marks)
        assert cached == plain
    assert len(P._REWRITES) == 1 and type(next(iter(P._REWRITES.values()))) is tuple


def test_cached_bound():
    P._REWRITES.clear()
    for n in range(P._REWRITES.max_size + 10):
        _both(f"KEYS\x01k{n}\x02UNIQ_KEY\x01AB", "C", MARKS)
    assert len(P._REWRITES) <= P._REWRITES.max_size
