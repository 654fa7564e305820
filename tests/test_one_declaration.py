"""One declaration per protocol fact (BRIEF; issue 16 item 1), checked on the source with `ast`:

- response codes: in `server/`, `client/`, `remoting/`, `bench/` and `codec/` (but `codec/codes.py`) no RemotingCommand response code is
  written as a bare int. Flagged: a comparison of a code-like name (`code`, `*_code`, `x.code`) with an
  int literal (0 included: `ResponseCode.SUCCESS`), a `code=<int>` keyword, an assignment of an int
  to a code-like name, a `(int, "remark")` tuple or a call whose first two arguments are an int and
  a remark string (`MQClientError(22, "...")`), a code-like parameter defaulting to an int, and a
  module re-declaring a `ResponseCode` / `RequestCode` member name as an int. gRPC's own status codes
  (`x.status.code`, apache.rocketmq.v2.Code) are not RemotingCommand codes and are not looked at.
- message property names: no string or bytes literal in the production packages (docstrings aside)
  equals a `codec.properties.MessageConst` value or holds one as a `name\\x01` segment start
  (`"\\x02REAL_TOPIC\\x01"`, `b"DELAY\\x01"`), outside `codec/properties.py`, dict keys included.
  Hot paths bind `MessageConst.X` to a module name once; byte-level rewriters derive their tokens
  from it (`property_token(MessageConst.TAGS.encode())`). A genuine non-property use of such a word
  goes in PROPERTY_ALLOWED with its reason.
- system topic names and the %RETRY% / %DLQ% prefixes: spelled only in `codec/codes.py` (a literal equal
  to one, or starting with a prefix, fails elsewhere; `analytics/` imports nothing of ours, see
  TOPIC_ALLOWED).
- byte layouts (issue 27 item 2): outside `codec/` no `struct.Struct(...)` / `struct.pack|unpack|pack_into|
  unpack_from|iter_unpack|calcsize(...)` has a literal format, and no literal anywhere is the ConsumeQueue
  unit's `>qiq` (codec.consume_queue_unit) -- a record position or a unit is read through codec's one
  declaration (codec.record.STORE_TS_POS, codec.consume_queue_unit.UNIT...). A single scalar (`">q"`, `"<I"`)
  is not a layout; what remains local (a file only its own module reads) is in STRUCT_ALLOWED with why.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from codec import codes
from codec.codes import RequestCode, ResponseCode
from codec.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, MessageConst
from tests.helpers.source import parse

ROOT = Path(__file__).resolve().parents[1]
CODE_PACKAGES = ("server", "client", "remoting", "bench", "codec")
DECLARED = {"codec/codes.py"}  # where the codes are declared
PROPERTY_PACKAGES = ("codec", "remoting", "storage", "scheduler", "server", "client", "analytics", "bench")
PROPERTY_DECLARED = "codec/properties.py"
# (module, literal) -> why that literal is not a message property name there
PROPERTY_ALLOWED: dict[tuple[str, str | bytes], str] = {
    ("server/topic_attributes.py", "DELAY"): "a value of RocketMQ 5's topic attribute message.type, not a property",
}
PROPERTY_NAMES = frozenset(v for k, v in vars(MessageConst).items()
                           if not k.startswith("_") and k != "KEY_SEPARATOR" and isinstance(v, str))
# a name at a segment start followed by the name/value separator: "DELAY\x01", "\x02REAL_QID\x01"
_SEGMENT = re.compile(f"(?:^|{PROPERTY_SEPARATOR})(?:{'|'.join(map(re.escape, sorted(PROPERTY_NAMES)))}){NAME_VALUE_SEPARATOR}")
CODE_NAMES = frozenset(ResponseCode.__members__) | frozenset(RequestCode.__members__)


def sources(packages: tuple[str, ...], declared: frozenset[str] | set[str] = DECLARED,
            ) -> Iterator[tuple[str, str, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("server/grpc/v2/") or rel in declared:  # generated from the 5.x protos; the declaration
                continue
            text = path.read_text(encoding="utf-8")
            yield rel, text, parse(text, rel)


def _int_literal(node: ast.AST | None) -> bool:
    """An int literal (-1 included), or a tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _int_literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_int_literal(e) for e in node.elts)
    return False


def _remark(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str)


def _code_like(node: ast.AST) -> bool:
    """`code`, `resp_code`, `x.code`, `x.resp_code`; not `x.status.code` (a gRPC Status)."""
    if isinstance(node, ast.Name):
        return node.id == "code" or node.id.endswith("_code")
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Attribute) and node.value.attr == "status":
            return False
        return node.attr == "code" or node.attr.endswith("_code")
    return False


def _code_name(name: str) -> bool:
    return name == "code" or name.endswith("_code")


def bare_codes(text: str, tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """(line, rule, source) of each bare response/request code int in one module."""
    for node in ast.walk(tree):
        rule = None
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_code_like(o) for o in operands) and any(_int_literal(o) for o in operands):
                rule = "compared with an int"
        elif isinstance(node, ast.keyword):
            if node.arg is not None and _code_name(node.arg) and _int_literal(node.value):
                rule = "code= keyword int"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _int_literal(node.value):
                for t in targets:
                    name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
                    if _code_like(t):
                        rule = "int assigned to a code"
                    elif name.lstrip("_") in CODE_NAMES:
                        rule = "a codec.codes name re-declared"
        elif isinstance(node, ast.Tuple):
            if len(node.elts) == 2 and _int_literal(node.elts[0]) and _remark(node.elts[1]):
                rule = "(code, remark) tuple"
        elif isinstance(node, ast.Call):
            if len(node.args) >= 2 and _int_literal(node.args[0]) and _remark(node.args[1]):
                rule = "call(code, remark)"
        elif isinstance(node, ast.IfExp):
            if (_int_literal(node.body) or _int_literal(node.orelse)) and (
                    _code_like(node.body) or _code_like(node.orelse)):
                rule = "int in place of a code"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = [*a.posonlyargs, *a.args]
            pairs = [*zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True),
                     *((k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None)]
            if any(_code_name(arg.arg) and _int_literal(d) for arg, d in pairs):
                rule = "code parameter defaults to an int"
        if rule:
            assert isinstance(node, ast.expr | ast.stmt | ast.keyword)  # the kinds a rule names: all have a line
            yield node.lineno, rule, (ast.get_source_segment(text, node) or "")[:120]


def test_no_bare_response_code_ints() -> None:
    found = [f"{rel}:{line}: {rule}: {src}"
             for rel, text, tree in sources(CODE_PACKAGES) for line, rule, src in bare_codes(text, tree)]
    assert not found, "use codec.codes.ResponseCode / RequestCode members:\n" + "\n".join(found)


def test_the_code_check_sees_each_form() -> None:
    """The checker is not blind: each form it names is found in a sample (and the allowed spellings are not)."""
    bad = """
if resp.code != 0: pass
if code in (0, 19): pass
x = cmd.response(code=1, remark="r")
resp.code = 13
SYSTEM_ERROR = 1
def f(): return 0, "ok"
raise MQClientError(22, f"not found {k}")
y = resp.code if resp else 1
def g(code: int = 0): pass
"""
    found = list(bare_codes(bad, parse(bad)))
    assert sorted(line for line, _, _ in found) == list(range(2, 11)), found
    good = """
if resp.code != ResponseCode.SUCCESS: pass
if r.status.code == 20000: pass
def h(): return 0, None
n = len(x) == 0
"""
    assert list(bare_codes(good, parse(good))) == []


def property_literals(tree: ast.Module) -> Iterator[tuple[int, str | bytes]]:
    """(line, literal) of each str/bytes literal that is a property name or holds a `name\\x01` segment."""
    docstrings = {id(n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docstrings:
            continue
        value = node.value
        if isinstance(value, bytes):
            text = value.decode("latin-1")
        elif isinstance(value, str):
            text = value
        else:
            continue
        if text in PROPERTY_NAMES or _SEGMENT.search(text):
            yield node.lineno, value


def test_no_property_name_literals_outside_message_const() -> None:
    found = [f"{rel}:{line}: {value!r}"
             for rel, _, tree in sources(PROPERTY_PACKAGES, {PROPERTY_DECLARED})
             for line, value in property_literals(tree) if (rel, value) not in PROPERTY_ALLOWED]
    assert not found, "use codec.properties.MessageConst (a module alias on a hot path):\n" + "\n".join(found)


def test_the_property_check_sees_each_form() -> None:
    bad = """
tags = props.get("TAGS")
m = {"UNIQ_KEY": u}
K = b"\\x02REAL_TOPIC\\x01"
s = f"{stored}\\x02REAL_QID\\x01{qid}"
mark = "DELAY\\x01"
t = b"TIMER_DEQUEUE_MS"
"""
    found = list(property_literals(parse(bad)))
    assert sorted(line for line, _ in found) == list(range(2, 8)), found
    good = """
\"\"\"A docstring may say TAGS and "DELAY\\x01".\"\"\"
EXCLUDES = ("TIMER_", MessageConst.TRAN_MSG)
x = {"msgId": m, "topicX": t, "KEYSTORE": k}
"""
    assert list(property_literals(parse(good))) == []


SYSTEM_TOPICS = frozenset({
    codes.SCHEDULE_TOPIC, codes.TIMER_TOPIC, codes.DEFAULT_TOPIC, codes.TRACE_TOPIC, codes.RMQ_SYS_TRANS_HALF_TOPIC,
    codes.RMQ_SYS_TRANS_OP_HALF_TOPIC, codes.TRANS_CHECK_MAX_TIME_TOPIC, codes.SELF_TEST_TOPIC,
    codes.OFFSET_MOVED_EVENT, codes.BENCHMARK_TOPIC, codes.SCHEDULE_QUARANTINE_TOPIC})
TOPIC_PREFIXES = (codes.RETRY_PREFIX, codes.DLQ_PREFIX)
# module -> why it spells system topic names itself
TOPIC_ALLOWED = {
    "analytics/jobs.py": "analytics imports no package of ours (it reads exported files only: "
                         "tests/test_import_direction.py); SYSTEM_TOPICS there names the rows to leave out",
}


def topic_literals(tree: ast.Module) -> Iterator[tuple[int, str]]:
    docstrings = {id(n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings and isinstance(node.value, str) and (
                node.value in SYSTEM_TOPICS or node.value.startswith(TOPIC_PREFIXES)):
            yield node.lineno, node.value


def test_no_system_topic_literals_outside_codes() -> None:
    found = [f"{rel}:{line}: {value!r}" for rel, _, tree in sources(PROPERTY_PACKAGES)
             if rel not in TOPIC_ALLOWED for line, value in topic_literals(tree)]
    assert not found, "use the codec.codes topic constants:\n" + "\n".join(found)
    sample = 'a = "SCHEDULE_TOPIC_XXXX"\nb = f"%RETRY%{group}"\nc = f"{RETRY_PREFIX}{group}"\nd = "TBW1020"\n'
    assert [line for line, _ in topic_literals(parse(sample))] == [1, 2]


STRUCT_PACKAGES = ("storage", "scheduler", "server", "client", "remoting", "analytics", "bench")
STRUCT_CALLS = frozenset({"Struct", "pack", "unpack", "pack_into", "unpack_from", "iter_unpack", "calcsize"})
_SCALAR = re.compile(r"[<>!=@]?[bBhHiIlLqQfd]")
_CQ_UNIT_FORMATS = frozenset(f"{order}qiq" for order in "<>!=@")
_OWN_FILE = "the layout of a file only this module (and its tests) reads and writes, declared once here"
# (module, format) -> why the layout is declared there and not in codec/
STRUCT_ALLOWED: dict[tuple[str, str], str] = {
    ("storage/index_file.py", "<qqqqii"): "IndexFile header (RocketMQ IndexHeader, little-endian as ours): " + _OWN_FILE,
    ("storage/index_file.py", "<IqiIi"): "IndexFile entry: " + _OWN_FILE,
    ("storage/index_migrate.py", ">qiqh"): "the pre-IndexFile `keys.idx` entry head, read once to migrate: " + _OWN_FILE,
    ("scheduler/progress_file.py", ">4sii4x"): "scheduleProgress header: " + _OWN_FILE,
    ("scheduler/progress_file.py", ">qqqqqq"): "scheduleProgress timer row: " + _OWN_FILE,
    ("scheduler/progress_file.py", ">qqq8x"): "scheduleProgress level row: " + _OWN_FILE,
    ("server/cluster/ha/sync.py", ">qqqq"): "the HA timer progress the slave compares: to codec/ha.py with the above",
    ("server/pop/state.py", "<II"): "the pop journal's record head: " + _OWN_FILE,
    ("bench/workers.py", ">qqB"): "the generator's own message body (send us, due ms, level), read back only by bench",
}


def struct_formats(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, format) of every struct call with a literal format, and every literal equal to the CQ unit's."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STRUCT_CALLS
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                and not _SCALAR.fullmatch(node.args[0].value)):
            yield node.lineno, node.args[0].value
        elif isinstance(node, ast.Constant) and node.value in _CQ_UNIT_FORMATS:
            yield node.lineno, node.value


def test_no_struct_layouts_outside_codec() -> None:
    seen = [(rel, line, fmt) for rel, _, tree in sources(STRUCT_PACKAGES, set()) for line, fmt in struct_formats(tree)]
    found = sorted({f"{rel}:{line}: {fmt!r}" for rel, line, fmt in seen if (rel, fmt) not in STRUCT_ALLOWED})
    assert not found, "declare the layout once in codec/ and import it:\n" + "\n".join(found)
    stale = set(STRUCT_ALLOWED) - {(rel, fmt) for rel, _, fmt in seen}
    assert not stale, f"allow-listed layouts no longer there (remove them from STRUCT_ALLOWED): {sorted(stale)}"


def test_the_struct_check_sees_each_form() -> None:
    bad = """
UNIT = struct.Struct(">qiq")
a, b = struct.unpack_from(">qi", buf, 20)
struct.pack_into(">qq", buf, 20, q, p)
S = __import__("struct").Struct(">qqB")
fmt = ">qiq"
n = struct.calcsize("<IqiIi")
"""
    assert [line for line, _ in sorted(struct_formats(parse(bad)))] == [2, 2, 3, 4, 5, 6, 7]
    good = """
I64 = struct.Struct(">q")
v = struct.unpack_from("<I", buf, 0)
UNIT = codec.consume_queue_unit.UNIT
"""
    assert list(struct_formats(parse(good))) == []
