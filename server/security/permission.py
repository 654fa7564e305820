"""RocketMQ plain-ACL permissions: bits, parsing and the check (what each request needs: resources.py).

Bits as in RocketMQ's Permission: DENY=1, ANY=2, PUB=4, SUB=8. Group permissions are kept under the
group's retry topic name (`%RETRY%<group>`), which is also how requests name the group they touch.
"""

from __future__ import annotations

from codec.codes import RETRY_PREFIX

DENY, ANY, PUB, SUB = 1, 2, 4, 8

_PERM_NAMES = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def parse_perm(text: object) -> int:
    """RocketMQ's parsePermFromString: unknown or missing → DENY."""
    if text is None:
        return DENY
    return _PERM_NAMES.get(str(text).strip(), DENY)


def perm_name(perm: int) -> str:
    if perm & ANY:
        return "PUB or SUB"
    names = [n for n, b in (("PUB", PUB), ("SUB", SUB)) if perm & b]
    return "|".join(names) or "DENY"


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str | None) -> str:
    return RETRY_PREFIX + (group or "")


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_PREFIX)


def describe(resource: str) -> str:
    if is_group_resource(resource):
        return f"group={resource[len(RETRY_PREFIX):]}"
    return f"topic={resource}"
