"""`delaymq-namesrv --port N [--config FILE] [--host H] [--kv-config PATH] [--set KEY=VALUE ...]`: a
name server only (no store, no broker). Prints `delaymq namesrv ready on <host>:<port>` once
listening; SIGTERM/SIGINT stop it (exit 0)."""

from __future__ import annotations

import argparse
import sys

import structlog

from remoting import loop as event_loop
from server.cluster.namesrv.config import NamesrvConfig, load_namesrv_config
from server.listeners import ListenError
from server.logging import configure
from server.process import overrides_from, serve_until_signal, version

log = structlog.get_logger("namesrv")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="delaymq-namesrv", description="delaymq name server")
    p.add_argument("--version", action="version", version=f"delaymq-namesrv {version()}")
    p.add_argument("--port", type=int, help="listen port, listenPort (default: 9876)")
    p.add_argument("--host", help="listen host, listenHost (default: 127.0.0.1)")
    p.add_argument("--config", help="properties file (listenPort, kvConfigPath, ...; default: none)")
    p.add_argument("--kv-config", help="kvConfig.json path (default: KV config in memory only)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level (default: info)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any key (repeatable; default: none)")
    return p


async def run(cfg: NamesrvConfig) -> int:
    from server.cluster.namesrv.controller import NamesrvController

    ns = NamesrvController(cfg)
    return await serve_until_signal(ns, lambda: f"delaymq namesrv ready on {cfg.listen_host}:{ns.port}", "namesrv")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level)
    overrides = overrides_from(args.set, {"listenPort": args.port, "listenHost": args.host,
                                          "kvConfigPath": args.kv_config})
    try:
        cfg = load_namesrv_config(args.config, overrides)
    except ValueError as e:
        log.error("namesrv.bad_config", error=str(e))
        return 2
    try:
        return event_loop.run(run(cfg))
    except ListenError as e:
        log.error("namesrv.cannot_listen", key=e.key, port=e.port, error=str(e))
        return 1
    except OSError as e:
        log.error("namesrv.start_failed", error=str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
