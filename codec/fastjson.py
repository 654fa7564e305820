"""fastjson-compatible JSON for remoting bodies: compact key-sorted output, lenient input.

fastjson writes `{0:"addr"}` (unquoted integer keys) for Map<Long,..> fields, so parsing quotes bare
integer keys outside string literals before giving up; the field coercers accept what three client
families send (C++ sends enum ordinals and string numbers). Everything raises only CodecError.
"""

from __future__ import annotations

import json
from typing import Any

from codec.errors import CodecError

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode
_WS = " \t\n\r"
_value = json.JSONDecoder().raw_decode  # a scalar, or a container without fastjson's odd keys
_MAX_DEPTH = 64


JsonBody = bytes | bytearray | memoryview | str  # a JSON text as it arrives in a command body


def loads_lenient(data: JsonBody) -> Any:
    """json.loads that also takes fastjson's non-string map keys.

    fastjson writes Map<Long,..> keys bare (`{0:"a"}`) and Map<MessageQueue,..> keys as objects
    (`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`, TopicStatsTable, ConsumeStats). A bare
    number key becomes its decimal string; an object or array key becomes its compact key-sorted
    JSON text (json.loads it back to use it).
    """
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
        obj, end = _parse(text, _skip(text, 0), 0)
    except (ValueError, IndexError, RecursionError) as e:
        raise CodecError(f"bad JSON body: {e}") from None
    if _skip(text, end) != len(text):
        raise CodecError(f"bad JSON body: extra data at {end}")
    return obj


def _skip(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _WS:
        i += 1
    return i


def _parse(s: str, i: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deeply")
    c = s[i]
    if c == "{":
        out: dict[str, Any] = {}
        i = _skip(s, i + 1)
        if s[i] == "}":
            return out, i + 1
        while True:
            key, i = _parse(s, i, depth + 1)
            if isinstance(key, dict | list):
                key = _dumps(key)
            elif not isinstance(key, str):
                if isinstance(key, bool) or key is None or isinstance(key, float):
                    raise ValueError(f"unsupported object key at {i}")
                key = str(key)
            i = _skip(s, i)
            if s[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            out[key], i = _parse(s, _skip(s, i + 1), depth + 1)
            i = _skip(s, i)
            if s[i] == "}":
                return out, i + 1
            if s[i] != ",":
                raise ValueError(f"expected ',' or '}}' at {i}")
            i = _skip(s, i + 1)
    if c == "[":
        arr: list[Any] = []
        i = _skip(s, i + 1)
        if s[i] == "]":
            return arr, i + 1
        while True:
            v, i = _parse(s, i, depth + 1)
            arr.append(v)
            i = _skip(s, i)
            if s[i] == "]":
                return arr, i + 1
            if s[i] != ",":
                raise ValueError(f"expected ',' or ']' at {i}")
            i = _skip(s, i + 1)
    return _value(s, i)


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


def _key_order(kv: tuple[Any, Any]) -> tuple[int, Any, str]:
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


def as_obj(data: Any, what: str) -> dict[str, Any]:
    if isinstance(data, dict):
        return data
    if not isinstance(data, bytes | bytearray | memoryview | str):
        raise CodecError(f"{what} is not a JSON object")
    d = loads_lenient(data)
    if not isinstance(d, dict):
        raise CodecError(f"{what} is not a JSON object")
    return d


def as_list(d: dict[str, Any], key: str) -> list[Any]:
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
