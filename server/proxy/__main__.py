"""`delaymq-proxy --namesrv ADDR --grpc-port P [--config F] [--host H] [--reuse-port] [--grpc-server-stack S]`: the stateless RocketMQ 5 proxy
(server.proxy). Prints `delaymq proxy ready on <host>:<port>` once listening; SIGTERM/SIGINT stop it."""

from __future__ import annotations

import argparse
import sys

import structlog

from remoting import loop as event_loop
from server.listeners import ListenError
from server.logging import configure
from server.process import serve_until_signal, version
from server.proxy.config import ProxyConfig, load_proxy_config

log = structlog.get_logger("proxy")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="delaymq-proxy", description="delaymq's stateless RocketMQ 5 (gRPC) proxy")
    p.add_argument("--version", action="version", version=f"delaymq-proxy {version()}")
    p.add_argument("--namesrv", help="name server address(es), namesrvAddr, 'host:port[;host:port]'")
    p.add_argument("--grpc-port", type=int, help="gRPC listen port, grpcServerPort (default: 8081; 0: any free)")
    p.add_argument("--host", help="listen host, listenHost (default: 0.0.0.0)")
    p.add_argument("--reuse-port", action="store_true", default=None,
                   help="reusePort=true: share the gRPC port with other delaymq-proxy processes of this user on this "
                        "host (SO_REUSEPORT; the kernel spreads connections over them)")
    p.add_argument("--config", help="key=value file (namesrvAddr, grpcServerPort, listenHost, timerWheelEnable, "
                                    "messageDelayLevel, maxMessageSize, routeCacheTtlMs, aclEnable, aclFile, "
                                    "tls.server.certPath, tls.server.keyPath, reusePort, grpcServerStack=grpcio|envoy, "
                                    "sendCoalesce, sendCoalesceMaxFrames, sendCoalesceLingerMs, "
                                    "enableTopicMessageTypeCheck, enableAclRpcHookForClusterMode (sign requests to "
                                    "brokers with aclToolsFile's accessKey/secretKey), aclToolsFile)")
    p.add_argument("--tls-cert", help="TLS certificate (PEM), tls.server.certPath; with --tls-key: TLS only")
    p.add_argument("--tls-key", help="TLS private key (PEM), tls.server.keyPath")
    p.add_argument("--grpc-server-stack", choices=["grpcio", "envoy"],
                   help="grpcServerStack: the gRPC port's server, an Envoy process with this proxy's Python "
                        "embedded (envoy, the default; pyvoy) or grpc.aio in this process (grpcio)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level (default: info)")
    return p


async def run(cfg: ProxyConfig, log_level: str = "info") -> int:
    if cfg.grpc_server_stack == "envoy":
        from server.proxy.envoy import EnvoyProxy

        envoy = EnvoyProxy(cfg, log_level)
        # the ready line names Envoy's pid too: it is the process that serves (and spends the CPU)
        exit_status = await serve_until_signal(
            envoy, lambda: f"delaymq proxy ready on {cfg.listen_host}:{envoy.port} (envoy pid {envoy.envoy_pid})",
            "proxy")
        return 1 if envoy.failed else exit_status
    from server.proxy.proxy import Proxy

    proxy = Proxy(cfg)
    return await serve_until_signal(proxy, lambda: f"delaymq proxy ready on {cfg.listen_host}:{proxy.port}", "proxy")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level)
    try:
        cfg = load_proxy_config(args.config, {"namesrvAddr": args.namesrv, "grpcServerPort": args.grpc_port,
                                              "listenHost": args.host, "tls.server.certPath": args.tls_cert,
                                              "tls.server.keyPath": args.tls_key,
                                              "reusePort": "true" if args.reuse_port else None,
                                              "grpcServerStack": args.grpc_server_stack})
    except ValueError as e:
        log.error("proxy.bad_config", error=str(e))
        return 2
    try:
        return event_loop.run(run(cfg, args.log_level))
    except ListenError as e:
        log.error("proxy.cannot_listen", key=e.key, port=e.port, error=str(e))
        return 1
    except OSError as e:
        log.error("proxy.start_failed", error=str(e))
        return 1
    except ValueError as e:  # the ACL file (aclFile) is missing or unreadable
        log.error("proxy.bad_config", key="aclFile", error=str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
