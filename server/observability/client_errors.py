"""Errors the broker answers clients with, logged for operators: MESSAGE_ILLEGAL (13),
SERVICE_NOT_AVAILABLE (14), NO_PERMISSION (16), TOPIC_NOT_EXIST (17), at info with the remote address
and the remark, at most one record per code every `interval_s` (the record says how many were left out
since the previous one). Installed as the remoting server's `response_observer`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from codec.codes import ResponseCode as RS

if TYPE_CHECKING:
    from codec.command import RemotingCommand
    from remoting.connection import Connection

log = structlog.get_logger(__name__)

WATCHED = {int(RS.MESSAGE_ILLEGAL): "MESSAGE_ILLEGAL", int(RS.SERVICE_NOT_AVAILABLE): "SERVICE_NOT_AVAILABLE",
           int(RS.NO_PERMISSION): "NO_PERMISSION", int(RS.TOPIC_NOT_EXIST): "TOPIC_NOT_EXIST"}


class ClientErrorLog:
    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.last: dict[int, float] = {}
        self.suppressed: dict[int, int] = {}
        self.total: dict[int, int] = {}

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None:
        code = cmd.code
        kind = WATCHED.get(code)
        if kind is None or not cmd.is_response:
            return
        self.total[code] = self.total.get(code, 0) + 1
        now = self.clock()
        last = self.last.get(code)
        if last is not None and now - last < self.interval_s:
            self.suppressed[code] = self.suppressed.get(code, 0) + 1
            return
        self.last[code] = now
        log.info("client.error_returned", code=code, kind=kind, remote=conn.peer,
                 remark=(cmd.remark or "")[:300], suppressed_since_last=self.suppressed.pop(code, 0))
