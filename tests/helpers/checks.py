"""Small typed checks for tests: narrowing an Optional with an assertion that names what was missing."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None, what: str = "value") -> T:
    """`value`, asserted not None (a failed test says which `what` was missing instead of an AttributeError)."""
    assert value is not None, f"{what} is None"
    return value
