"""The mechanism behind server/headers.py: a request custom header (extFields) declared as a record
class, parsed with RocketMQ's error texts.

Each request header is a record class (a `Header` subclass) whose annotations ARE its layout: the field
names are Java's, `str` / `int` (a Java int, 32-bit) / `Long` (a Java long, 64-bit) / `bool` the kind, and
`X | None` an optional field (None when absent); a required field is never None. `HeaderSpec(Record)`
derives the parse plan from those annotations once, at import; `spec.parse(ext, v2)` returns a `Record`,
so processors see `h.queueId: int`, `h.topic: str`. Empty strings count as absent. A missing required
field raises `HeaderError("the custom field <name> is null")`; an unparsable or out-of-range number raises
`HeaderError` naming the field. Processors answer both with code 1 SYSTEM_ERROR.

`spec.straight_line()` / `straight_line_v2()` generate the hot paths' unrolled parsers from the same
declaration (see "straight-line parsers" below); anything but the usual shape falls back to
`spec.parse`, the maintained reference.
"""

from __future__ import annotations

import linecache
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, NewType, TypeVar

STR, INT, LONG, BOOL = "str", "int", "long", "bool"
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

Long = NewType("Long", int)
"""A header field that is a Java long (64-bit range); a plain `int` field is a Java int (32-bit)."""


class HeaderError(ValueError):
    """A request header the broker cannot use; answered with SYSTEM_ERROR and this message as remark."""


class Header:
    """A parsed request header; subclasses declare the fields (see the module docstring). The values live
    in the instance `__dict__`, filled by `HeaderSpec.parse` (or the straight-line parsers generated
    from the same declaration, `parse_send` / `parse_pull`) in declaration order."""

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
                if v is not None and (_INT_MIN <= v <= _INT_MAX if kind is INT else _LONG_MIN <= v <= _LONG_MAX):
                    d[name] = v
                else:
                    d[name] = _convert(name, kind, raw)  # raises the error naming the field
            else:
                d[name] = _convert(name, kind, raw)
        return h

    def straight_line(self, fallback: Callable[[Mapping[str, str] | None], H] | None = None,
                      ) -> Callable[[Mapping[str, str] | None], H]:
        """This layout's parser generated as straight-line code (see `_straight_line_source`): the same
        record as `parse(ext)`, or `fallback(ext)` (default `parse`) when the ext has not the usual shape."""
        return _straight_line(self, False, fallback)

    def straight_line_v2(self, fallback: Callable[[Mapping[str, str] | None, bool], H] | None = None,
                         ) -> Callable[[Mapping[str, str] | None, bool], H]:
        """`straight_line` reading the V2 short names; `(ext, v2)`, and `fallback(ext, v2)` when not v2."""
        if not any(short for *_, short in self.fields):
            raise TypeError(f"{self.record.__name__} declares no V2 short names")
        return _straight_line(self, True, fallback)


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
    lo, hi = (_INT_MIN, _INT_MAX) if kind == INT else (_LONG_MIN, _LONG_MAX)
    if not lo <= v <= hi:
        raise HeaderError(f"the custom field <{name}> is out of {kind} range: {s[:64]!r}")
    return v


# ---- straight-line parsers, generated from a spec ----------------------------------------------
#
# `spec.parse` walks its plan field by field. For the two headers on the hot paths (a send, a pull) the
# loop and its per-field branches are most of the cost, so `HeaderSpec.straight_line` writes the
# unrolled parser for the declared fields once, at import (as `dataclasses` writes `__init__`): every
# field read into a local of its Java name, one check that the usual shape holds (required fields
# non-empty strings, optional ones strings or absent, booleans "true"/"false"), numbers through a
# small-int table or int(), one range check, the record filled in declaration order. Whatever does not
# have the usual shape goes to `spec.parse`, which gives the same record or names the offending field;
# so the declaration is the only copy of the layout, and a field added to a record is read by both.
# `inspect.getsource(parse_send)` shows the generated code.

_BOOLS = {None: None, "": None, "false": False, "true": True}  # what a usual boolean field holds
_SMALL_INTS = {str(v): v for v in range(-1, 1025)}  # queue ids, flags, counts: a lookup instead of int()
_RESERVED = {"ext", "v2", "int", "type", "str"}  # names the generated code uses; no field may take them


def _straight_line_source(spec: HeaderSpec[Any], v2: bool, fname: str) -> str:
    """The source of `def fname(...)`, `spec`'s straight-line parser (see above); V2 short names if `v2`."""
    fields = spec.fields
    for name, *_ in fields:
        if name in _RESERVED or name.startswith("_"):
            raise TypeError(f"{spec.record.__name__}.{name}: a name the generated parser uses itself")
    numbers = [(name, kind, req) for name, kind, req, _ in fields if kind is INT or kind is LONG]
    args, fallback = ("ext, v2", "_fallback(ext, v2)") if v2 else ("ext", "_fallback(ext)")
    out = [f"def {fname}({args}):",
           f"    if {'not v2 or ' if v2 else ''}not ext:",
           f"        return {fallback}",
           "    _get = ext.get"]
    out += [f"    {name} = _get({(short if v2 else name)!r})" for name, _, _, short in fields]
    shape = []  # any of these true: not the usual shape
    required = [name for name, _, req, _ in fields if req]
    if required:
        shape.append(f"not ({' and '.join(required)})")
    strings = [name for name, kind, req, _ in fields if req and kind is not BOOL]
    if strings:
        shape.append(f"not ({' is '.join(f'type({n})' for n in strings)} is str)")
    shape += [f"({name} is not None and type({name}) is not str)"
              for name, kind, req, _ in fields if not req and kind is not BOOL]
    shape += [f"{name} not in _BOOLS" for name, kind, _, _ in fields if kind is BOOL]
    out.append("    try:  # TypeError: an unhashable value in a hand-made ext")
    if shape:
        out.append("        if (" + "\n                or ".join(shape) + "):")
        out.append(f"            return {fallback}")
    for name, _, req in numbers:
        conv = f"_small[{name}] if {name} in _small else int({name})"
        out.append(f"        {name} = {conv}" if req else f"        {name} = ({conv}) if {name} else None")
    if not shape and not numbers:
        out.append("        pass")
    out += ["    except (ValueError, TypeError):", f"        return {fallback}"]
    ranges = []
    for name, kind, req in numbers:
        lo, hi = ("_INT_MIN", "_INT_MAX") if kind is INT else ("_LONG_MIN", "_LONG_MAX")
        ranges.append(f"{lo} <= {name} <= {hi}" if req else f"({name} is None or {lo} <= {name} <= {hi})")
    if ranges:
        out += [f"    if not ({' and '.join(ranges)}):", f"        return {fallback}"]
    values = []
    for name, kind, req, _ in fields:
        value = f"_BOOLS[{name}]" if kind is BOOL else name if req or kind is not STR else f"{name} or None"
        values.append(f"{name!r}: {value}")
    out += ["    _h = _record()", f"    _h.__dict__ = {{{', '.join(values)}}}", "    return _h"]
    return "\n".join(out) + "\n"


def _straight_line(spec: HeaderSpec[H], v2: bool, fallback: Callable[..., H] | None) -> Callable[..., H]:
    fname = f"parse_{spec.record.__name__}{'_v2' if v2 else ''}"
    source = _straight_line_source(spec, v2, fname)
    filename = f"<straight-line parse of {spec.record.__name__}{' (V2 names)' if v2 else ''}>"
    namespace: dict[str, Any] = {  # the generated code's globals; __name__: a function of the module declaring the record
        "__name__": spec.record.__module__, "_fallback": fallback or spec.parse, "_record": spec.record, "_BOOLS": _BOOLS,
        "_small": _SMALL_INTS, "_INT_MIN": _INT_MIN, "_INT_MAX": _INT_MAX, "_LONG_MIN": _LONG_MIN,
        "_LONG_MAX": _LONG_MAX}
    exec(compile(source, filename, "exec"), namespace)  # our own text, written from the declaration
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for inspect, tracebacks
    fn: Callable[..., H] = namespace[fname]
    fn.__doc__ = (f"`{spec.record.__name__}`'s spec.parse(ext{', v2' if v2 else ''}) (the same record or the same "
                  "HeaderError), straight-line for the usual shape; generated from the declaration.")
    return fn
