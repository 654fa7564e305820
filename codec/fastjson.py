"""fastjson-compatible JSON for remoting bodies: compact key-sorted output, lenient input.

fastjson writes `{0:"addr"}` (unquoted integer keys) for Map<Long,..> fields, so parsing quotes bare
integer keys outside string literals before giving up; the field coercers accept what three client
families send (C++ sends enum ordinals and string numbers). Everything raises only CodecError.
"""

from __future__ import annotations

import json
import re
from typing import Any

from codec.errors import CodecError

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode
# a JSON string literal (kept as is) or an object key that is a bare integer (gets quoted)
_BARE_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)', re.S)


def _quote_bare_keys(m: re.Match) -> str:
    if m.group(1) is not None:
        return m.group(1)
    return f'{m.group(2)}"{m.group(3)}"{m.group(4)}'


def loads_lenient(data: bytes | bytearray | memoryview | str) -> Any:
    """json.loads that also takes fastjson's unquoted integer keys (`{0:"a",1:5}`)."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CodecError(f"JSON body is not UTF-8: {e}") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise CodecError("JSON body nested too deeply") from None
    except ValueError:
        pass
    try:
        return json.loads(_BARE_KEY.sub(_quote_bare_keys, text))
    except (ValueError, RecursionError) as e:
        raise CodecError(f"bad JSON body: {e}") from None


def dumps(obj: Any, bare_int_keys: bool = False) -> bytes:
    """Compact, key-sorted JSON (fastjson's layout). With bare_int_keys, int dict keys are written
    unquoted as fastjson does for Map<Long,..> (e.g. brokerAddrs for pre-4.9.4 clients)."""
    if not bare_int_keys:
        return _dumps(_quote_int_keys(obj)).encode("utf-8", "replace")
    return _dumps_bare(obj).encode("utf-8", "replace")


def _quote_int_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        if any(isinstance(k, int) for k in obj):
            return {str(k): _quote_int_keys(v) for k, v in sorted(obj.items(), key=_key_order)}
        return {k: _quote_int_keys(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_quote_int_keys(v) for v in obj]
    return obj


def _key_order(kv: tuple) -> tuple:
    k = kv[0]
    return (0, k, "") if isinstance(k, int) else (1, 0, str(k))


def _dumps_bare(obj: Any) -> str:
    if isinstance(obj, dict):
        parts = []
        for k, v in sorted(obj.items(), key=_key_order):
            key = str(k) if isinstance(k, int) and not isinstance(k, bool) else _dumps(str(k))
            parts.append(f"{key}:{_dumps_bare(v)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(_dumps_bare(v) for v in obj) + "]"
    return _dumps(obj)


def as_obj(data, what: str) -> dict:
    if isinstance(data, dict):
        return data
    if not isinstance(data, bytes | bytearray | memoryview | str):
        raise CodecError(f"{what} is not a JSON object")
    d = loads_lenient(data)
    if not isinstance(d, dict):
        raise CodecError(f"{what} is not a JSON object")
    return d


def as_list(d: dict, key: str) -> list:
    v = d.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise CodecError(f"{key} is not an array")
    return v


def as_int(v: Any, what: str, default: int = 0) -> int:
    if v is None or v == "":
        return default
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float | str):
        try:
            return int(v)
        except (ValueError, OverflowError):
            pass
    raise CodecError(f"{what} is not an integer: {v!r}")


def as_str(v: Any, what: str, default: str = "") -> str:
    if v is None:
        return default
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    raise CodecError(f"{what} is not a string: {v!r}")


def as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.lower() == "true"  # Boolean.parseBoolean
    return bool(v) if isinstance(v, bool | int) else False


def as_enum(v: Any, names: tuple[str, ...], what: str, default: str) -> str:
    if v is None or v == "":
        return default
    if isinstance(v, str) and not v.isdigit():
        return v
    i = as_int(v, what)
    if 0 <= i < len(names):
        return names[i]
    raise CodecError(f"{what} ordinal {i} out of range")
