"""delaymq's own requests: browse and cancel scheduled messages (no RocketMQ tool can).

DELAYMQ_QUERY_SCHEDULED (3111), header fields (all optional): `topic` (real topic), `level` (1..N, only
that delay level), `timers` ("true": only timers), `levels` ("true": only delay levels), `dueBefore`
(epoch ms, exclusive), `key` (a KEYS entry or the UNIQ_KEY), `limit` (<= 1000, default 100), `cursor`
(from the previous page). Response body JSON: `{"rows": [{msgId, uniqKey, topic, tags, keys, kind
("level"|"timer"), level, dueMs, storeMs, bornMs}], "cursor": str|null, "scanned": n}`; a null cursor
means there is nothing more. Delay levels come first (level order, due order within a level), then
timers (slot order). ACL: SUB on `topic`; without a topic the page lists every tenant's messages: admin.

DELAYMQ_CANCEL_SCHEDULED (3112), header `uniqKey`: the pending message with that UNIQ_KEY is cancelled
(a delay-level one is skipped at delivery, a timer gets its wheel's cancel marker). Response code 0
with body `{"status": "cancelled"|"already_cancelled"|"delivered", kind, level, topic, dueMs, msgId,
detail}`; 22 QUERY_NOT_FOUND with status "unknown" when no scheduled message has that key. ACL: admin.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.codes import RequestCode as RC
from codec.codes import ResponseCode as RS
from codec.command import RemotingCommand
from codec.fastjson import dumps
from scheduler.browse import MAX_LIMIT, Query
from server.header_spec import Header, HeaderSpec, Long
from server.processors import Peer, Registrar, error, guarded, ok, peer_of

if TYPE_CHECKING:
    from scheduler.browse import ScheduledBrowser

log = structlog.get_logger(__name__)

class QueryScheduledHeader(Header):
    """DELAYMQ_QUERY_SCHEDULED (delaymq's own request)."""

    topic: str | None
    level: int | None
    timers: bool | None
    levels: bool | None
    dueBefore: Long | None
    key: str | None
    limit: int | None
    cursor: str | None


class CancelScheduledHeader(Header):
    uniqKey: str


QUERY = HeaderSpec(QueryScheduledHeader)
CANCEL = HeaderSpec(CancelScheduledHeader)


@dataclass(frozen=True, slots=True)
class ScheduledDeps:
    """What DELAYMQ_QUERY_SCHEDULED / DELAYMQ_CANCEL_SCHEDULED use (built by server.processor_wiring)."""

    scheduled: ScheduledBrowser
    levels: Sequence[int]  # messageDelayLevel, ms


def register(server: Registrar, deps: ScheduledDeps) -> None:
    @guarded
    def query(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        h = QUERY.parse(cmd.ext_fields)
        if h.timers and (h.levels or h.level is not None):
            return error(cmd, RS.SYSTEM_ERROR, "timers and level(s) exclude each other")
        n_levels = len(deps.levels)
        if h.level is not None and not 1 <= h.level <= n_levels:
            return error(cmd, RS.SYSTEM_ERROR, f"level must be 1..{n_levels}, got {h.level}")
        limit = h.limit if h.limit is not None else 100
        if not 1 <= limit <= MAX_LIMIT:
            return error(cmd, RS.SYSTEM_ERROR, f"limit must be 1..{MAX_LIMIT}, got {limit}")
        cursor = h.cursor
        if cursor and not (cursor[:1] in ("L", "T") and ":" in cursor
                           and all(p.lstrip("-").isdigit() for p in cursor[1:].split(":", 1))):
            return error(cmd, RS.SYSTEM_ERROR, f"bad cursor {cursor!r}")
        q = Query(topic=h.topic, level=h.level, timers_only=bool(h.timers), levels_only=bool(h.levels),
                  due_before=h.dueBefore, key=h.key, limit=limit, cursor=cursor)
        rows, nxt, scanned = deps.scheduled.list(q)
        return ok(cmd, body=dumps({"cursor": nxt, "rows": rows, "scanned": scanned}))

    @guarded
    async def cancel(conn: Peer, cmd: RemotingCommand) -> RemotingCommand | None:
        h = CANCEL.parse(cmd.ext_fields)
        res = await deps.scheduled.cancel(h.uniqKey, int(time.time() * 1000))
        ip, port = peer_of(conn)
        log.info("scheduled.cancel", uniq_key=h.uniqKey, status=res.status, kind=res.kind, delay_level=res.level,
                 topic=res.topic, remote=f"{ip}:{port}")
        body = dumps(res.to_json())
        if res.status == "unknown":
            return error(cmd, RS.QUERY_NOT_FOUND, res.detail) if cmd.is_oneway else \
                cmd.response(code=RS.QUERY_NOT_FOUND, remark=res.detail, body=body)
        if res.status == "failed":
            return cmd.response(code=RS.SYSTEM_ERROR, remark=res.detail, body=body)
        return ok(cmd, body=body)

    server.register(int(RC.DELAYMQ_QUERY_SCHEDULED), query)
    server.register(int(RC.DELAYMQ_CANCEL_SCHEDULED), cancel)
