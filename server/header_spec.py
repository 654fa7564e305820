"""The mechanism behind server/headers.py: a request custom header (extFields) declared as a record
class, parsed with RocketMQ's error texts.

Each request header is a record class (a `Header` subclass) whose annotations ARE its layout: the field
names are Java's, `str` / `int` (a Java int, 32-bit) / `Long` (a Java long, 64-bit) / `bool` the kind, and
`X | None` an optional field (None when absent); a required field is never None. `HeaderSpec(Record)`
derives the parse plan from those annotations once, at import; `spec.parse(ext, v2)` returns a `Record`,
so processors see `h.queueId: int`, `h.topic: str`. Empty strings count as absent. A missing required
field raises `HeaderError("the custom field <name> is null")`; an unparsable or out-of-range number raises
`HeaderError` naming the field. Processors answer both with code 1 SYSTEM_ERROR.

The hot paths' unrolled parsers (`server.header_parsers.parse_send` / `parse_pull`) are written from
the same declarations by `server.header_codegen` at build time (`make headers`) into a committed module;
anything but the usual shape falls back to `spec.parse`, the maintained reference. `SMALL_INTS`,
`USUAL_BOOLS` and the Java ranges below are what that generated code reads.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Generic, NewType, TypeVar

STR, INT, LONG, BOOL = "str", "int", "long", "bool"
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1  # a Java int
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1  # a Java long
USUAL_BOOLS = {None: None, "": None, "false": False, "true": True}  # what a usual boolean field holds
SMALL_INTS = {str(v): v for v in range(-1, 1025)}  # queue ids, flags, counts: a lookup instead of int()

Long = NewType("Long", int)
"""A header field that is a Java long (64-bit range); a plain `int` field is a Java int (32-bit)."""


class HeaderError(ValueError):
    """A request header the broker cannot use; answered with SYSTEM_ERROR and this message as remark."""


class Header:
    """A parsed request header; subclasses declare the fields (see the module docstring). The values live
    in the instance `__dict__`, filled by `HeaderSpec.parse` (or the straight-line parsers generated
    from the same declaration, `server.header_parsers`) in declaration order."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__!r})"


H = TypeVar("H", bound=Header)

_KINDS: dict[object, str] = {str: STR, int: INT, Long: LONG, bool: BOOL}


def _layout(record: type[Header]) -> list[tuple[str, str, bool]]:
    """(name, kind, required) per annotated field of `record`, in declaration order."""
    out = []
    for name, tp in typing.get_type_hints(record).items():
        args = typing.get_args(tp)
        optional = (typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 2
                    and type(None) in args)
        base = next(a for a in args if a is not type(None)) if optional else tp
        kind = _KINDS.get(base)
        if kind is None:
            raise TypeError(f"{record.__name__}.{name}: a header field is str, int, Long or bool "
                            f"(or X | None), not {tp!r}")
        out.append((name, kind, not optional))
    return out


class HeaderSpec(Generic[H]):
    """The parser of one request header layout (`record`, a `Header` subclass). `v2_names`: the V2 short
    name of each field (codec.codes.SEND_MESSAGE_REQUEST_HEADER_V2 for SEND_MESSAGE_V2's a..n); every
    declared field must have one, the table may name fields the record does not read."""

    __slots__ = ("record", "fields", "_plan", "_plan_v2")

    def __init__(self, record: type[H], v2_names: Mapping[str, str] | None = None) -> None:
        layout = _layout(record)
        if v2_names is not None:
            missing = [name for name, _, _ in layout if name not in v2_names]
            if missing:
                raise TypeError(f"{record.__name__}: no V2 short name for {', '.join(missing)}")
        self.record = record
        # (name, kind, required, V2 short name or None); kind is one of the STR/INT/LONG/BOOL objects
        # (parse compares with `is`)
        self.fields = tuple((name, kind, req, v2_names[name] if v2_names is not None else None)
                            for name, kind, req in layout)
        # (ext key to read, name, kind, required) for the long and the V2 short names
        self._plan = tuple((name, name, kind, req) for name, kind, req, _ in self.fields)
        self._plan_v2 = tuple((short or name, name, kind, req) for name, kind, req, short in self.fields)

    def parse(self, ext: Mapping[str, object] | None, v2: bool = False) -> H:
        get = (ext or {}).get
        h = self.record()
        d = h.__dict__
        for key, name, kind, required in (self._plan_v2 if v2 else self._plan):
            raw = get(key)
            if raw is None or raw == "":
                if required:
                    raise HeaderError(f"the custom field <{name}> is null")
                d[name] = None
            elif type(raw) is str and kind is not BOOL:
                if kind is STR:
                    d[name] = raw
                    continue
                try:  # int() strips the same whitespace str.strip() does
                    v = int(raw)
                except ValueError:
                    v = None
                if v is not None and (INT_MIN <= v <= INT_MAX if kind is INT else LONG_MIN <= v <= LONG_MAX):
                    d[name] = v
                else:
                    d[name] = _convert(name, kind, raw)  # raises the error naming the field
            else:
                d[name] = _convert(name, kind, raw)
        return h


def _convert(name: str, kind: str, raw: object) -> object:
    if kind == STR:
        return raw if isinstance(raw, str) else str(raw)
    if kind == BOOL:
        if isinstance(raw, bool):
            return raw
        # Java's Boolean.parseBoolean accepts only "true"; the C++ 1.x client (PyPI rocketmq 0.4.x)
        # sends batch sends as code 10 with "batch":"1", so "1" counts as true too.
        return str(raw).strip().lower() in ("true", "1")
    s = str(raw).strip()
    try:
        v = int(s)
    except ValueError:
        raise HeaderError(f"the custom field <{name}> is not a valid {kind}: {s[:64]!r}") from None
    lo, hi = (INT_MIN, INT_MAX) if kind == INT else (LONG_MIN, LONG_MAX)
    if not lo <= v <= hi:
        raise HeaderError(f"the custom field <{name}> is out of {kind} range: {s[:64]!r}")
    return v
