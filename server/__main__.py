"""`delaymq-broker --store DIR --port N [--config FILE] [--host H] ...`: run the broker.
`delaymq-broker --store DIR --export-config [OUT_DIR]`: write topics.json, subscriptionGroup.json,
consumerOffset.json and delayOffset.json (RocketMQ's shapes) from the store's meta.db and exit; works
while a broker runs on the store (a consistent read snapshot). OUT_DIR defaults to <store>/config.

Prints `delaymq broker ready on <host>:<port>` to stdout once listening (tests wait on it).
SIGTERM/SIGINT: stop accepting, drain in-flight requests, stop scheduler and timer, flush the
store, write the checkpoint, exit 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

# numpy (timer wheel, key index) is used for array arithmetic only, never BLAS: without this its
# OpenBLAS starts a thread pool at import that spins for a while on a 2-CPU host
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import structlog  # noqa: E402

from remoting import loop as event_loop  # noqa: E402
from server.config import BrokerConfig, ConfigError, load_config  # noqa: E402
from server.listeners import ListenError, probe  # noqa: E402
from server.logging import configure  # noqa: E402
from server.process import overrides_from, serve_until_signal, version  # noqa: E402
from storage.store_lock import StoreLockedError  # noqa: E402

log = structlog.get_logger("server")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="delaymq-broker", description="delaymq name server + broker. Flags override "
                                "--config, which overrides the built-in defaults shown here.")
    p.add_argument("--version", action="version", version=f"delaymq-broker {version()}")
    p.add_argument("--store", help="store root directory, storePathRootDir (default: ~/store; `make run`: ./store)")
    p.add_argument("--port", type=int, help="listen port, listenPort (default: 9876); also opens port-2 (VIP "
                   "channel), haListenPort (default port+1) and grpcListenPort (default port-1795: 8081 for 9876)")
    p.add_argument("--config", help="broker.conf-style properties file (default: none)")
    p.add_argument("--host", default=None, help="listen host, listenHost (default: 127.0.0.1)")
    p.add_argument("--broker-ip", help="advertised address, brokerIP1 (default: 127.0.0.1)")
    p.add_argument("--flush-disk-type", choices=["ASYNC_FLUSH", "SYNC_FLUSH"],
                   help="flushDiskType (default: ASYNC_FLUSH)")
    p.add_argument("--delay-levels", help='messageDelayLevel, e.g. "1s 5s 10s" (default: RocketMQ\'s 18 levels, '
                   '1s 5s 10s 30s 1m ... 2h)')
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port, metricsPort "
                   "(default: 0 = off; `make run`: 5557)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level (default: info)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any broker.conf key (repeatable; default: none)")
    p.add_argument("--export-config", nargs="?", const="", default=None, metavar="OUT_DIR",
                   help="export the metadata tables as RocketMQ's JSON files (default OUT_DIR: <store>/config) and exit")
    return p


def export_config(cfg: BrokerConfig, out_dir: str) -> int:
    """The --export-config command: open meta.db (migrating JSON files first if it is new), export, close."""
    from storage.meta_store import MetaStore

    meta = MetaStore(os.path.join(cfg.store_path_root_dir, "config")).open()
    try:
        written = meta.export_json(out_dir or None)
    finally:
        meta.close()
    for path in written:
        sys.stdout.write(f"{path}\n")
    log.info("meta.exported", files=len(written), out_dir=out_dir or meta.config_dir)
    return 0


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    flags = {
        "storePathRootDir": args.store, "listenPort": args.port, "brokerIP1": args.broker_ip,
        "flushDiskType": args.flush_disk_type, "messageDelayLevel": args.delay_levels,
        "metricsPort": args.metrics_port,
    }
    cfg = load_config(args.config, overrides_from(args.set, flags))
    cfg.listen_host = args.host or (cfg.listen_host if cfg.listen_host != "0.0.0.0" else "127.0.0.1")
    return cfg


async def run(cfg: BrokerConfig) -> int:
    from server.broker import BrokerController

    def settle_heap() -> None:
        # Everything built at start-up (tables, codecs, the wheel index) lives for the process: move it out
        # of the collector's reach, and collect the older generations rarely, so a full collection never
        # walks the long-lived heap in the middle of a delivery. A young collection walks everything that
        # survived since the last one: at 50,000 that was a 9-10 ms loop stall every ~50,000 topics created
        # (each topic config survives); at 10,000 the 100,000-topic create burst shows no stall over 5 ms.
        # Generation 1 still runs every 2,500,000 net allocations (10,000 x 250), as before.
        gc.freeze()
        gc.set_threshold(10_000, 250, 1000)

    return await serve_until_signal(BrokerController(cfg), lambda: f"delaymq broker ready on {cfg.listen_host}:{cfg.listen_port}",
                                    "broker", after_start=settle_heap)


def check_config(cfg: BrokerConfig) -> None:
    """Everything that can be checked before the store is opened: each key's value, the ACL and TLS
    files. Raises ConfigError naming the key."""
    from server.security import preflight

    cfg.validate()
    preflight(cfg)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level)
    try:
        cfg = config_from_args(args)
        check_config(cfg)
    except ValueError as e:  # ConfigError included: one line naming the key, nothing opened
        log.error("broker.bad_config", key=e.key if isinstance(e, ConfigError) else None, error=str(e))
        return 2
    if args.export_config is not None:
        return export_config(cfg, args.export_config)
    try:
        probe(cfg.listeners())  # a port another process holds stops the start before the store is opened
        return event_loop.run(run(cfg))
    except StoreLockedError as e:
        log.error("broker.store_locked", error=str(e), holder=e.holder)
        return 1
    except ListenError as e:  # taken between the probe and the bind
        log.error("broker.cannot_listen", key=e.key, port=e.port, error=str(e))
        return 1
    except ConfigError as e:  # found at start (controller mode: a brokerIdentity file of another broker)
        log.error("broker.bad_config", key=e.key, error=str(e))
        return 2
    except OSError as e:
        log.error("broker.start_failed", error=str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
