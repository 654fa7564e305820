"""structlog configuration for the broker process.

JSON lines on stderr when stderr is not a TTY (logs are machine-read in tests and production),
a console renderer otherwise. Per-request debug logs are filtered unless the level is DEBUG.

Events for operators: `broker.config` at start (every broker.conf key in effect after file and flags,
and the delay table); `client.connected` / `client.disconnected` (role, group, client id, remote
address, reason) from the client manager; `client.error_returned` for MESSAGE_ILLEGAL,
SERVICE_NOT_AVAILABLE, NO_PERMISSION and TOPIC_NOT_EXIST answers (at most one per code every 10 s,
`server.observability.client_errors`); `task.failed` from the supervisor; `schedule.quarantined`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "warn": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}


def configure(level: str = "info", json_logs: bool | None = None, stream: TextIO | None = None) -> None:
    stream = stream if stream is not None else sys.stderr
    lvl = _LEVELS.get(str(level).lower())
    if lvl is None:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(_LEVELS)})")
    if json_logs is None:
        json_logs = not stream.isatty()
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    renderer = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=lvl, stream=stream, format="%(levelname)s %(name)s %(message)s")
