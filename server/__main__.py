"""`delaymq-broker --store DIR --port N [--config FILE] [--host H] ...`: run the broker.
`delaymq-broker --store DIR --export-config [OUT_DIR]`: write topics.json, subscriptionGroup.json,
consumerOffset.json and delayOffset.json (RocketMQ's shapes) from the store's meta.db and exit; works
while a broker runs on the store (a consistent read snapshot). OUT_DIR defaults to <store>/config.

Prints `delaymq broker ready on <host>:<port>` to stdout once listening (tests wait on it); with
grpcServerStack=envoy, once Envoy's embedded broker serves, with ` (envoy pid N)`, the serving process.
SIGTERM/SIGINT: stop accepting, drain in-flight requests, stop scheduler and timer, flush the
store, write the checkpoint, exit 0.
"""

from __future__ import annotations

import argparse
import os
import sys

# numpy (timer wheel, key index) is used for array arithmetic only, never BLAS: without this its
# OpenBLAS starts a thread pool at import that spins for a while on a 2-CPU host
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import structlog  # noqa: E402

from remoting import loop as event_loop  # noqa: E402
from server.config import BrokerConfig, ConfigError, load_config  # noqa: E402
from server.grpc.envoy_host import EnvoyStartReported  # noqa: E402
from server.listeners import probe  # noqa: E402
from server.logging import configure  # noqa: E402
from server.process import overrides_from, serve_until_signal, settle_heap, start_failure, version  # noqa: E402

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
    p.add_argument("--grpc-server-stack", choices=["grpcio", "envoy"],
                   help="grpcServerStack: the gRPC port's server, grpc.aio on the broker's loop (grpcio, the default) "
                        "or a stock Envoy with this whole broker embedded, one serving process (envoy; pyvoy)")
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
        "metricsPort": args.metrics_port, "grpcServerStack": args.grpc_server_stack,
    }
    cfg = load_config(args.config, overrides_from(args.set, flags))
    cfg.listen_host = args.host or (cfg.listen_host if cfg.listen_host != "0.0.0.0" else "127.0.0.1")
    return cfg


async def run(cfg: BrokerConfig, log_level: str = "info") -> int:
    if cfg.grpc_server_stack == "envoy":  # the broker runs inside Envoy; this process launches and signals it
        from server.envoy_broker import EnvoyBroker

        envoy = EnvoyBroker(cfg, log_level)
        # the ready line names Envoy's pid: it is the process that serves (and holds the store)
        exit_status = await serve_until_signal(
            envoy, lambda: f"delaymq broker ready on {cfg.listen_host}:{cfg.listen_port} (envoy pid {envoy.envoy_pid})",
            "broker")
        return 1 if envoy.failed else exit_status
    from server.broker import BrokerController

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
        return event_loop.run(run(cfg, args.log_level))
    except EnvoyStartReported as e:  # the broker inside Envoy failed to start and said why (one line)
        return e.code
    except Exception as e:
        code = start_failure(e)
        if code is None:
            raise
        return code

if __name__ == "__main__":
    sys.exit(main())
