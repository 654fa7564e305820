"""SQL92 message selectors as RocketMQ defines them (expressionType `SQL92`; gRPC FilterType.SQL).

The grammar is the protocol fact of Apache RocketMQ's `filter` module (SelectorParser.jj, 5.x): `OR` < `AND`
< `=` `<>` `IS [NOT] NULL` < `>` `>=` `<` `<=` `[NOT] BETWEEN .. AND ..` `[NOT] IN ('..', ..)`
`[NOT] CONTAINS|STARTSWITH|ENDSWITH '..'` < unary `+` `-` `NOT` < literals, properties and parentheses.
Keywords are case-insensitive; `--` comments end at a line break, `/* */` comments anywhere. Note that, as in
RocketMQ, unary `NOT` binds tighter than a comparison: `NOT a = 'x'` is `(NOT a) = 'x'` (never true); write
`NOT (a = 'x')`.

Parsing uses `lark` (LALR): the grammar is declared once below as data, lark gives positions for a refusal.
The parse tree becomes `Node`s while the checks RocketMQ makes at compile time run (a comparison with a string
or boolean constant, `= NULL`, `IN` on a non-property, a reversed constant `BETWEEN`, literals out of range, a
non-boolean where a condition is needed): each raises `SelectorError` naming line and column.

Evaluation follows RocketMQ's semantics over a message's properties (all values are strings; `TAGS` is the
tags property): three-valued logic (a missing property gives NULL, NULL is no match), `convertStringExpressions`
on (a string property compared with a number is parsed as that number's Java type), and an error while
evaluating (a property that does not parse as the number it is compared with) makes the whole message not
match, never an error at pull time.

Two evaluators, kept in agreement by tests/codec/test_sql92.py (hypothesis, differential):
- `Selector.matches_properties(props)`: the reference, a plain walk of the tree over a decoded property dict;
- `Selector.matches_record(record)`: the fast path over a stored record's bytes: no record decode, the
  properties section is searched (`\\x02name\\x01`) only for the names the expression uses, AND/OR chains are
  flat, and `prop = 'literal'` / `prop IN (..)` compare raw bytes without decoding the value.
`Selector.literal` (`required_literal`) names bytes every matching record holds, so a scan can pass over records
without them uncalled (storage get_messages' `record_literal`; tests/storage/test_store_literal_scan.py runs the
scan with and without it).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, cast

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from codec.buffers import BytesLike
from codec.codes import SysFlag
from codec.properties import parse_properties
from codec.record import POS_SYS_FLAG, body_len_pos

EXPRESSION_TYPE: Final = "SQL92"  # SubscriptionData.expressionType / PULL_MESSAGE expressionType
MAX_DEPTH: Final = 100  # nesting this deep is refused (Apache has no limit; Python's stack has one)

GRAMMAR: Final = r"""
start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: eq_expr (_AND eq_expr)*
?eq_expr: cmp_expr
    | eq_expr "=" cmp_expr                       -> eq
    | eq_expr "<>" cmp_expr                      -> ne
    | eq_expr _IS _NULL                          -> is_null
    | eq_expr _IS _NOT _NULL                     -> is_not_null
?cmp_expr: unary
    | cmp_expr ">" unary                         -> gt
    | cmp_expr ">=" unary                        -> ge
    | cmp_expr "<" unary                         -> lt
    | cmp_expr "<=" unary                        -> le
    | cmp_expr _CONTAINS string                  -> contains
    | cmp_expr _NOT _CONTAINS string             -> not_contains
    | cmp_expr _STARTSWITH string                -> startswith
    | cmp_expr _NOT _STARTSWITH string           -> not_startswith
    | cmp_expr _ENDSWITH string                  -> endswith
    | cmp_expr _NOT _ENDSWITH string             -> not_endswith
    | cmp_expr _BETWEEN unary _AND unary         -> between
    | cmp_expr _NOT _BETWEEN unary _AND unary    -> not_between
    | cmp_expr _IN "(" string ("," string)* ")"  -> in_
    | cmp_expr _NOT _IN "(" string ("," string)* ")" -> not_in
?unary: primary
    | "+" unary                                  -> pos
    | "-" unary                                  -> neg
    | _NOT unary                                 -> not_
?primary: literal
    | ID                                         -> prop
    | "(" or_expr ")"
?literal: string
    | DECIMAL                                    -> decimal
    | FLOAT                                      -> float_
    | _TRUE                                      -> true
    | _FALSE                                     -> false
    | _NULL                                      -> null
string: STRING

_NOT: "NOT"i
_AND: "AND"i
_OR: "OR"i
_BETWEEN: "BETWEEN"i
_IN: "IN"i
_TRUE: "TRUE"i
_FALSE: "FALSE"i
_NULL: "NULL"i
_IS: "IS"i
_CONTAINS: "CONTAINS"i
_STARTSWITH: "STARTSWITH"i
_ENDSWITH: "ENDSWITH"i
DECIMAL: /(0|[1-9][0-9]*)[lL]?/
FLOAT.2: /([0-9]+\.[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)/
STRING: /'([^']|'')*'/
ID: /[a-zA-Z_$][a-zA-Z0-9_$]*/
%ignore /[ \t\n\r\f]+/
%ignore /--[^\n\r]*(\r\n|\n|\r)/
%ignore /\/\*[^*]*\*+([^*\/][^*]*\*+)*\//
"""

_PARSER: Final = Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
_DOUBLE_MAX: Final = 1.7976931348623157e308
_DOUBLE_MIN: Final = 5e-324  # Java's Double.MIN_VALUE


class SelectorError(ValueError):
    """An expression RocketMQ refuses at subscription time; the message names line and column."""


class Long(int):
    """A Java Long (a decimal literal outside int's range, or with an `L`); plain `int` is a Java Integer."""

    __slots__ = ()


# Java values an expression handles: NULL, Boolean, Integer, Long, Double, String
Value: TypeAlias = "None | bool | int | float | str"


class EvalError(Exception):
    """Java threw while evaluating (NumberFormatException, ClassCastException): the message does not match."""


# ---- the expression tree --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Const:
    value: Value
    boolean: bool = False  # TRUE / FALSE / NULL literals are boolean expressions in RocketMQ


@dataclass(frozen=True, slots=True)
class Prop:
    name: str


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class BoolCast:  # a bare property where a condition is needed: TRUE only for a Boolean value (never a string)
    operand: Node


@dataclass(frozen=True, slots=True)
class AnyOf:  # a OR b OR ..., left to right
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class AllOf:  # a AND b AND ..., left to right
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Compare:  # op: "=" (also IS NULL, against Const(None)), ">", ">=", "<", "<="
    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class InList:
    prop: Prop
    values: frozenset[str]
    negated: bool


@dataclass(frozen=True, slots=True)
class StringTest:  # op: "contains", "startswith", "endswith"
    op: str
    operand: Node
    search: str
    negated: bool


Node: TypeAlias = "Const | Prop | Negate | Not | BoolCast | AnyOf | AllOf | Compare | InList | StringTest"

_NULL = Const(None, True)


def _is_boolean(n: Node) -> bool:
    return isinstance(n, (Not, BoolCast, AnyOf, AllOf, Compare, InList, StringTest)) or (
        isinstance(n, Const) and n.boolean)


# ---- Java conversions --------------------------------------------------------------------------------------

_JAVA_TRIM: Final = "".join(map(chr, range(33)))  # String.trim(): every char <= ' '
_INT_RE: Final = re.compile(r"[+-]?\d+")  # Integer.parseInt / Long.parseLong: any Unicode decimal digit
_DOUBLE_RE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)")


def java_parse_int(s: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """Integer.valueOf / Long.valueOf(s) (bounds lo..hi); EvalError as Java's NumberFormatException."""
    if _INT_RE.fullmatch(s) is None:
        raise EvalError(f"for input string: {s!r}")
    v = int(s)
    if not lo <= v <= hi:
        raise EvalError(f"for input string: {s!r}")
    return v


def java_parse_double(s: str) -> float:
    """Double.valueOf(s): trimmed of chars <= ' ', decimal / hex / NaN / Infinity, an optional f/d suffix."""
    t = s.strip(_JAVA_TRIM)
    if _DOUBLE_RE.fullmatch(t) is None:
        raise EvalError(f"for input string: {s!r}")
    if t[-1] in "fFdD":  # a float/double suffix (after a hex exponent too: it is decimal digits)
        t = t[:-1]
    if "x" in t.lower():
        try:
            return float.fromhex(t)
        except OverflowError:
            return -math.inf if t.startswith("-") else math.inf
    return float(t)


def _double_compare(a: float, b: float) -> int:
    """Double.compareTo: -0.0 < 0.0, NaN equal to itself and above everything."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
            return (sa > sb) - (sa < sb)
        return 0
    an, bn = a != a, b != b
    return 0 if an and bn else (1 if an else -1)


def java_compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.__compare with convertStringExpressions on (both non-NULL)."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:
                raise EvalError("ClassCastException: Boolean to String")
            return -1
        if lc is int:
            if rc is float:
                lv = float(cast(int, lv))
            elif rc is str:
                rv = java_parse_int(cast(str, rv))
            elif rc is not Long:
                return -1
        elif lc is Long:
            if rc is float:
                lv = float(cast(int, lv))
            elif rc is str:
                rv = java_parse_int(cast(str, rv), LONG_MIN, LONG_MAX)
            elif rc is not int:
                return -1
        elif lc is float:
            if rc is int or rc is Long:
                rv = float(cast(int, rv))
            elif rc is str:
                rv = java_parse_double(cast(str, rv))
            else:
                return -1
        elif lc is str:
            s = cast(str, lv)
            if rc is bool:
                lv = s.lower() == "true"
            elif rc is int:
                lv = java_parse_int(s)
            elif rc is Long:
                lv = java_parse_int(s, LONG_MIN, LONG_MAX)
            elif rc is float:
                lv = java_parse_double(s)
            else:
                return -1
        else:
            return -1
    if type(lv) is float:
        return _double_compare(lv, cast(float, rv))
    a, b = cast(Any, lv), cast(Any, rv)  # the same Java type by now: Boolean, Integer/Long or String
    return int((a > b) - (a < b))


def _as_boolean(op: str, c: int) -> bool:
    if op == "=":
        return c == 0
    if op == ">":
        return c > 0
    if op == ">=":
        return c >= 0
    if op == "<":
        return c < 0
    return c <= 0


def compare_values(op: str, lv: Value, rv: Value) -> bool | None:
    """One comparison of two evaluated operands, RocketMQ's way (NULL rules, string-vs-string as doubles)."""
    if op == "=":
        if lv is None or rv is None:
            return True if lv is None and rv is None else (None if lv is None else False)
        return java_compare(lv, rv) == 0
    if lv is None or rv is None:
        return None
    if type(lv) is str and type(rv) is str:
        return _as_boolean(op, _double_compare(java_parse_double(lv), java_parse_double(rv)))
    return _as_boolean(op, java_compare(lv, rv))


def string_test(op: str, v: Value, search: str, negated: bool) -> bool:
    if not search or type(v) is not str:
        return False
    if op == "contains":
        hit = search in v
    elif op == "startswith":
        hit = v.startswith(search)
    else:
        hit = v.endswith(search)
    return hit ^ negated


# ---- parse: lark tree -> Node, with RocketMQ's compile-time checks -------------------------------------------

def _where(t: Tree[Token] | Token) -> str:
    if isinstance(t, Token):
        return f"line {t.line}, column {t.column}"
    meta = t.meta
    return f"line {meta.line}, column {meta.column}" if not meta.empty else "the end"


def _fail(at: Tree[Token] | Token, msg: str) -> SelectorError:
    return SelectorError(f"Invalid MessageSelector: {msg} at {_where(at)}")


def _string(t: Tree[Token] | Token) -> str:
    tok = t.children[0] if isinstance(t, Tree) else t
    raw = str(tok)
    return raw[1:-1].replace("''", "'")


def _render(n: Node) -> str:
    if isinstance(n, Const):
        v = n.value
        if v is None or type(v) is bool:
            return {None: "NULL", True: "TRUE", False: "FALSE"}[v]
        return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else str(v)
    if isinstance(n, Prop):
        return n.name
    return "(expression)"


class _Builder:
    def __init__(self) -> None:
        self.depth = 0

    def boolean(self, t: Tree[Token] | Token) -> Node:
        """asBooleanExpression: a condition, or a bare property (cast), else refused."""
        n = self.build(t)
        if _is_boolean(n):
            return n
        if isinstance(n, Prop):
            return BoolCast(n)
        raise _fail(t, f"expression will not result in a boolean value: {_render(n)}")

    def less_operand(self, t: Tree[Token] | Token) -> Node:
        n = self.build(t)
        if (isinstance(n, Const) and (type(n.value) not in (int, Long, float))) or _is_boolean(n):
            raise _fail(t, f"value {_render(n)} cannot be compared")
        return n

    def build(self, t: Tree[Token] | Token) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _fail(t, f"expression nested deeper than {MAX_DEPTH}")
        try:
            return self._build(t)
        finally:
            self.depth -= 1

    def _build(self, t: Tree[Token] | Token) -> Node:  # noqa: C901 - one branch per grammar rule
        if isinstance(t, Token):  # pragma: no cover - every token is wrapped by a rule
            raise _fail(t, f"unexpected {t!s}")
        kind, ch = t.data, t.children
        if kind == "start":
            return self.boolean(ch[0])
        if kind == "or_expr":
            return AnyOf(tuple(self.boolean(c) for c in ch))
        if kind == "and_expr":
            return AllOf(tuple(self.boolean(c) for c in ch))
        if kind in ("eq", "ne"):
            left, right = self.build(ch[0]), self.build(ch[1])
            for side, n in ((ch[0], left), (ch[1], right)):
                if isinstance(n, Const) and n.value is None:
                    raise _fail(side, "NULL cannot be compared (use IS NULL)")
            if isinstance(left, Const) and isinstance(right, Const) and left.boolean and not right.boolean:
                raise _fail(ch[1], f"{_render(left)} cannot be compared with {_render(right)}")
            eq = Compare("=", left, right)
            return eq if kind == "eq" else Not(eq)
        if kind == "is_null":
            return Compare("=", self.build(ch[0]), _NULL)
        if kind == "is_not_null":
            return Not(Compare("=", self.build(ch[0]), _NULL))
        if kind in ("gt", "ge", "lt", "le"):
            op = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}[kind]
            return Compare(op, self.less_operand(ch[0]), self.less_operand(ch[1]))
        if kind in ("between", "not_between"):
            value, low, high = self.build(ch[0]), self.build(ch[1]), self.build(ch[2])
            if isinstance(low, Const) and isinstance(high, Const):
                if low.value is None or high.value is None:
                    raise _fail(t, "illegal values of BETWEEN: they can not be NULL")
                try:
                    reversed_ = java_compare(high.value, low.value) < 0
                except EvalError as e:
                    raise _fail(t, f"illegal values of BETWEEN: {e}") from None
                if reversed_:
                    raise _fail(t, f"illegal values of BETWEEN: {_render(low)} is greater than {_render(high)}")
            for side in (ch[0], ch[1], ch[2]):
                self.less_operand(side)
            if kind == "between":
                return AllOf((Compare(">=", value, low), Compare("<=", value, high)))
            return AnyOf((Compare("<", value, low), Compare(">", value, high)))
        if kind in ("in_", "not_in"):
            left = self.build(ch[0])
            if not isinstance(left, Prop):
                raise _fail(ch[0], f"expected a property for IN, got {_render(left)}")
            return InList(left, frozenset(_string(c) for c in ch[1:]), kind == "not_in")
        if kind in ("contains", "not_contains", "startswith", "not_startswith", "endswith", "not_endswith"):
            neg = kind.startswith("not_")
            return StringTest(kind.removeprefix("not_"), self.build(ch[0]), _string(ch[1]), neg)
        if kind == "pos":
            return self.build(ch[0])
        if kind == "neg":
            return Negate(self.build(ch[0]))
        if kind == "not_":
            return Not(self.boolean(ch[0]))
        if kind == "prop":
            return Prop(str(ch[0]))
        if kind == "string":
            return Const(_string(t))
        if kind == "decimal":
            text = str(ch[0]).rstrip("lL")
            v = int(text)
            if v > LONG_MAX:
                raise _fail(t, f"{ch[0]} is out of the range of a long")
            return Const(v if v <= INT_MAX else Long(v))
        if kind == "float_":
            f = float(str(ch[0]))
            if f > _DOUBLE_MAX:
                raise _fail(t, f"{ch[0]} is greater than {_DOUBLE_MAX}")
            if f < _DOUBLE_MIN:
                raise _fail(t, f"{ch[0]} is less than {_DOUBLE_MIN}")
            return Const(f)
        if kind == "true":
            return Const(True, True)
        if kind == "false":
            return Const(False, True)
        if kind == "null":
            return _NULL
        raise _fail(t, f"unknown rule {kind}")  # pragma: no cover - the grammar has no other rule


def _end_of(expression: str) -> str:
    lines = expression.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return f"line {len(lines)}, column {len(lines[-1]) + 1}"


def _syntax_error(e: UnexpectedInput, expression: str) -> SelectorError:
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        return SelectorError(f"Invalid MessageSelector: encountered the end of the expression at {_end_of(expression)}")
    if isinstance(e, UnexpectedToken):
        return SelectorError(f"Invalid MessageSelector: encountered \"{e.token}\" at line {e.line}, column {e.column}")
    if isinstance(e, UnexpectedCharacters):
        return SelectorError(f"Invalid MessageSelector: unexpected character {e.char!r} "
                             f"at line {e.line}, column {e.column}")
    return SelectorError(f"Invalid MessageSelector: {e}")  # pragma: no cover


def parse(expression: str) -> Node:
    """The tree of a SQL92 selector; SelectorError (line, column) when RocketMQ would refuse it."""
    try:
        tree = _PARSER.parse(expression)
    except UnexpectedInput as e:
        raise _syntax_error(e, expression) from None
    return _Builder().build(tree)


# ---- the reference evaluator --------------------------------------------------------------------------------

def evaluate(n: Node, props: Mapping[str, str]) -> Value:
    """RocketMQ's evaluate() on a property map; EvalError where Java throws."""
    if isinstance(n, Const):
        return n.value
    if isinstance(n, Prop):
        return props.get(n.name)
    if isinstance(n, Compare):
        lv = evaluate(n.left, props)
        if n.op != "=" and lv is None:
            return None
        return compare_values(n.op, lv, evaluate(n.right, props))
    if isinstance(n, AllOf):
        acc: bool | None = True
        for item in n.items:
            v = evaluate(item, props)
            if v is False:
                return False
            if v is None:
                acc = None
        return acc
    if isinstance(n, AnyOf):
        acc = False
        for item in n.items:
            v = evaluate(item, props)
            if v is True:
                return True
            if v is None:
                acc = None
        return acc
    if isinstance(n, Not):
        v = evaluate(n.operand, props)
        return None if v is None else not v
    if isinstance(n, BoolCast):
        v = evaluate(n.operand, props)
        return None if v is None else (v if type(v) is bool else False)
    if isinstance(n, Negate):
        v = evaluate(n.operand, props)
        if type(v) is Long:
            return Long(-v)
        return -cast(float, v) if type(v) in (int, float) else None  # Integer or Double: negated as is
    if isinstance(n, InList):
        v = props.get(n.prop.name)
        return None if v is None else ((v in n.values) ^ n.negated)
    return string_test(n.op, evaluate(n.operand, props), n.search, n.negated)


def matches_reference(n: Node, props: Mapping[str, str]) -> bool:
    """isMatchedByCommitLog: TRUE matches; NULL, FALSE or an evaluation error does not."""
    try:
        return evaluate(n, props) is True
    except EvalError:
        return False


# ---- the fast path: closures over the record's property bytes -------------------------------------------------

Fn: TypeAlias = Callable[[bytes], Value]
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")


_V6: Final = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
_BODY_LEN_POS: Final = {v6: body_len_pos(v6) for v6 in (0, SysFlag.BORNHOST_V6, SysFlag.STOREHOST_V6, _V6)}


def properties_text(record: BytesLike) -> bytes:
    """`b"\\x02" + the stored properties` of the record at the start of `record` (no other field decoded; the
    body length's position looked up by the two host-width flags instead of computed)."""
    (sys_flag,) = _I32.unpack_from(record, POS_SYS_FLAG)
    bl = _BODY_LEN_POS[sys_flag & _V6]
    (blen,) = _I32.unpack_from(record, bl)
    tpos = bl + 4 + blen
    ppos = tpos + 1 + record[tpos]
    (plen,) = _I16.unpack_from(record, ppos)
    return b"\x02" + bytes(record[ppos + 2:ppos + 2 + plen])


def _raw_lookup(name: str) -> Callable[[bytes], bytes | None]:
    """The raw bytes of property `name` in properties text; the last segment wins as in Java's
    string2messageProperties. An empty last value (Java skips that segment) falls back to the full parse."""
    token = b"\x02" + name.encode() + b"\x01"
    tl = len(token)

    def raw(text: bytes) -> bytes | None:
        i = text.rfind(token)
        if i < 0:
            return None
        s = i + tl
        e = text.find(b"\x02", s)
        if e < 0:
            e = len(text)
        if e > s:
            return text[s:e]
        v = parse_properties(text).get(name)
        return None if v is None else v.encode()
    return raw


def _lookup(name: str) -> Fn:
    raw = _raw_lookup(name)

    def get(text: bytes) -> Value:
        b = raw(text)
        return None if b is None else b.decode("utf-8", "replace")
    return get


def _compile(n: Node) -> Fn:  # noqa: C901 - one branch per node type
    if isinstance(n, Const):
        value = n.value
        return lambda text: value
    if isinstance(n, Prop):
        return _lookup(n.name)
    if isinstance(n, Compare):
        op = n.op
        r = n.right
        if op == "=" and isinstance(n.left, Prop) and isinstance(r, Const) and isinstance(r.value, str) \
                and "\ufffd" not in r.value:
            raw, want = _raw_lookup(n.left.name), r.value.encode()
            token = b"\x02" + n.left.name.encode() + b"\x01"
            tl = len(token)

            def eq_bytes(text: bytes) -> Value:  # `_raw_lookup`'s search inlined: the commonest selector
                i = text.rfind(token)
                if i < 0:
                    return None
                e = text.find(b"\x02", i + tl)
                v = text[i + tl:] if e < 0 else text[i + tl:e]
                if v:
                    return v == want
                b = raw(text)  # an empty last value: Java skipped that segment
                return None if b is None else b == want
            return eq_bytes
        left, right = _compile(n.left), _compile(r)
        if op == "=":
            return lambda text: compare_values("=", left(text), right(text))

        def cmp(text: bytes) -> Value:
            lv = left(text)
            return None if lv is None else compare_values(op, lv, right(text))
        return cmp
    if isinstance(n, AllOf):
        items = tuple(_compile(i) for i in n.items)

        def all_of(text: bytes) -> Value:
            acc: bool | None = True
            for f in items:
                v = f(text)
                if v is False:
                    return False
                if v is None:
                    acc = None
            return acc
        return all_of
    if isinstance(n, AnyOf):
        alts = tuple(_compile(i) for i in n.items)

        def any_of(text: bytes) -> Value:
            acc: bool | None = False
            for f in alts:
                v = f(text)
                if v is True:
                    return True
                if v is None:
                    acc = None
            return acc
        return any_of
    if isinstance(n, Not):
        inner = _compile(n.operand)

        def not_(text: bytes) -> Value:
            v = inner(text)
            return None if v is None else not v
        return not_
    if isinstance(n, BoolCast):
        inner = _compile(n.operand)

        def bool_cast(text: bytes) -> Value:
            v = inner(text)
            return None if v is None else (v if type(v) is bool else False)
        return bool_cast
    if isinstance(n, Negate):
        inner = _compile(n.operand)

        def negate(text: bytes) -> Value:
            v = inner(text)
            if type(v) is Long:
                return Long(-v)
            return -cast(float, v) if type(v) in (int, float) else None  # Integer or Double: negated as is
        return negate
    if isinstance(n, InList):
        negated = n.negated
        if all("\ufffd" not in v for v in n.values):
            raw, wanted = _raw_lookup(n.prop.name), frozenset(v.encode() for v in n.values)

            def in_bytes(text: bytes) -> Value:
                b = raw(text)
                return None if b is None else ((b in wanted) ^ negated)
            return in_bytes
        get, values = _lookup(n.prop.name), n.values

        def in_list(text: bytes) -> Value:
            v = get(text)
            return None if v is None else ((v in values) ^ negated)
        return in_list
    operand, sop, search, neg = _compile(n.operand), n.op, n.search, n.negated
    return lambda text: string_test(sop, operand(text), search, neg)


def required_literal(n: Node) -> bytes | None:
    """Bytes the stored properties of every record `n` matches contain, or None when there are none to name:
    `name\\x01value` for `name = 'value'`, the longest of an AND chain's. A scan may skip a record without
    these bytes without evaluating it (storage get_messages' `record_literal`); a record holding them anywhere
    (another property, its body) is still evaluated, so only the absence decides. Sound because a match needs
    the property's segment to be exactly `value` (the fast path compares those raw bytes; a value with U+FFFD
    or an empty one names nothing: decoding or Java's skipped empty segments could make them match)."""
    if isinstance(n, Compare) and n.op == "=" and isinstance(n.left, Prop) and isinstance(n.right, Const):
        v = n.right.value
        if isinstance(v, str) and v and "\ufffd" not in v:
            return n.left.name.encode() + b"\x01" + v.encode()
        return None
    if isinstance(n, AllOf):
        found = [lit for lit in map(required_literal, n.items) if lit is not None]
        return max(found, key=len) if found else None
    return None


def property_names(n: Node) -> frozenset[str]:
    """The properties an expression reads."""
    if isinstance(n, Prop):
        return frozenset((n.name,))
    if isinstance(n, InList):
        return frozenset((n.prop.name,))
    if isinstance(n, (AnyOf, AllOf)):
        return frozenset().union(*(property_names(i) for i in n.items))
    if isinstance(n, Compare):
        return property_names(n.left) | property_names(n.right)
    if isinstance(n, (Not, BoolCast, Negate, StringTest)):
        return property_names(n.operand)
    return frozenset()


class Selector:
    """One compiled SQL92 expression: the tree, the reference and the fast evaluator."""

    __slots__ = ("expression", "tree", "properties", "literal", "_fast")

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tree = parse(expression)
        self.properties = property_names(self.tree)
        self.literal = required_literal(self.tree)  # bytes every matching record holds, or None
        self._fast = _compile(self.tree)

    def matches_properties(self, props: Mapping[str, str]) -> bool:
        """The reference: the decoded property map, the tree walked."""
        return matches_reference(self.tree, props)

    def matches_text(self, text: bytes) -> bool:
        """The fast path on properties text (`b"\\x02" + stored properties`)."""
        try:
            return self._fast(text) is True
        except EvalError:
            return False

    def matches_record(self, record: BytesLike) -> bool:
        """The fast path on a stored record (the CommitLog bytes): only the properties section is read."""
        try:
            return self._fast(properties_text(record)) is True
        except (struct.error, IndexError, EvalError):
            return False
