"""The tag form for messages with several tags (codec/tags.py): one tag keeps Apache's tagsCode (String.hashCode),
several `||`-joined tags give the OR of their hashes (the seed's form); the cached `tags_code` agrees with the
reference spelling; a subscription's hash AND-ed against the code never rules out a message carrying its tag;
the exact match decides."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codec.record_rewrite import tags_code as tags_code_of_bytes
from codec.tags import MultiTagCodes, java_hash, split_tags, tags_code, tags_code_reference, tags_match

TAG = st.text(st.characters(blacklist_characters="|", blacklist_categories=["Cs"]), min_size=1, max_size=12).filter(
    lambda t: t.strip() == t and t != "")


def test_one_tag_keeps_apaches_tags_code() -> None:
    # message-format.md §8's examples: String.hashCode, sign-extended
    assert tags_code("TagA") == 2598919 and tags_code("hello world") == 1794106052 and tags_code("*") == 42
    assert tags_code("") == tags_code(None) == 0


def test_several_tags_or_their_hashes() -> None:
    assert tags_code("TagA||TagB") == java_hash("TagA") | java_hash("TagB")
    assert tags_code(" TagA || TagB ||") == java_hash("TagA") | java_hash("TagB")
    assert split_tags("a|| b ||||c") == ["a", "b", "c"]
    assert tags_code("TagA||TagA") == java_hash("TagA")


@given(st.lists(TAG, min_size=1, max_size=5))
def test_the_code_agrees_with_the_reference_and_never_rules_out_a_carried_tag(tags: list[str]) -> None:
    joined = "||".join(tags)
    code = tags_code(joined)
    assert code == tags_code_reference(joined) == tags_code_of_bytes(joined.encode())
    assert -(1 << 31) <= code < (1 << 31)  # a sign-extended int: Apache's range of tag codes, never a CQ-ext address
    for t in tags:
        assert code in MultiTagCodes([java_hash(t)])
        assert tags_match(joined, {t})
    if len(tags) == 1:
        assert code == java_hash(tags[0])


def test_the_exact_match_decides() -> None:
    assert tags_match("a||b", {"b"}) and tags_match("a", {"a", "z"})
    assert not tags_match("a||b", {"c"}) and not tags_match(None, {"a"}) and not tags_match("ab", {"a"})
    # a code may pass the AND for a tag the message does not carry (bits are shared): only the tags say no
    a, b = java_hash("a"), java_hash("b")
    assert (a | b) in MultiTagCodes([a]) and 0 not in MultiTagCodes([a])
