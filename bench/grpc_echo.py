"""Bare `MessagingService.SendMessage` echo servers, one per candidate HTTP/2 + gRPC stack (issue 24 item 3).

`python -m bench.grpc_echo KIND PORT` serves SendMessage on 127.0.0.1:PORT with the same protobuf work in
every stack (parse the SendMessageRequest, answer a SendMessageResponse with one OK entry naming the
message id), prints `echo ready on PORT` and runs until SIGTERM. What differs is only the server stack:

| KIND | stack |
|---|---|
| `aio_uvloop` | grpc.aio (grpcio's C core, asyncio API) on uvloop, as the broker and delaymq-proxy run it |
| `aio_asyncio` | grpc.aio on the default asyncio loop |
| `sync` | grpcio's sync server, a thread pool of 8 |
| `grpclib` | grpclib (pure Python gRPC on the pure Python h2), on uvloop |
| `granian` | granian (Rust: hyper HTTP/2 on tokio) serving an ASGI app that speaks gRPC's framing itself |
| `pyvoy` | pyvoy: a stock Envoy binary (HTTP/2 in C++) with Python embedded as a dynamic module, serving the same ASGI app on uvloop; Envoy runs as a child process whose pid the ready line names (`echo ready on PORT pid N`), so the bench counts Envoy's CPU (all its threads), not this idle wrapper's |
| `pyvoy_connect` | pyvoy serving connect-python's (`connectrpc`) gRPC protocol layer instead of the hand-written framing |

grpclib, granian, pyvoy and connectrpc are not the project's dependencies: they are imported from `$BENCH_STACKS_PATH` (a
`pip install --target DIR granian grpclib` directory) when set, and a KIND whose stack is missing exits 3.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from codec.grpc_frame import first_message, frame
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb

SEND_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"
MISSING_STACK = 3


def answer(req: spb.SendMessageRequest) -> spb.SendMessageResponse:
    """The echo's work, the same in every stack: one OK entry per message."""
    ok = pb.Status(code=pb.OK, message="OK")
    return spb.SendMessageResponse(status=ok, entries=[
        spb.SendResultEntry(status=ok, message_id=m.system_properties.message_id, offset=0) for m in req.messages])


def answer_bytes(data: bytes) -> bytes:
    return answer(spb.SendMessageRequest.FromString(data)).SerializeToString()


def _ready(port: int) -> None:
    print(f"echo ready on {port}", flush=True)


# ------------------------------------------------------------------ grpcio (C core)

def _grpc_handler():
    import grpc

    async def send(request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        return answer(request)

    return grpc.method_handlers_generic_handler("apache.rocketmq.v2.MessagingService", {
        "SendMessage": grpc.unary_unary_rpc_method_handler(
            send, request_deserializer=spb.SendMessageRequest.FromString,
            response_serializer=spb.SendMessageResponse.SerializeToString)})


async def _serve_aio(port: int) -> None:
    import grpc
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_grpc_handler(),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    _ready(port)
    await stop.wait()
    await server.stop(0.5)


def _serve_sync(port: int) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    def send(request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        return answer(request)

    handler = grpc.method_handlers_generic_handler("apache.rocketmq.v2.MessagingService", {
        "SendMessage": grpc.unary_unary_rpc_method_handler(
            send, request_deserializer=spb.SendMessageRequest.FromString,
            response_serializer=spb.SendMessageResponse.SerializeToString)})
    server = grpc.server(ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    _ready(port)
    stop.wait()
    server.stop(0.5)


# ------------------------------------------------------------------ grpclib (pure Python on h2)

class _GrpclibService:
    def __mapping__(self):
        import grpclib.const

        async def send(stream) -> None:
            req = await stream.recv_message()
            await stream.send_message(answer(req))

        return {SEND_METHOD: grpclib.const.Handler(send, grpclib.const.Cardinality.UNARY_UNARY,
                                                   spb.SendMessageRequest, spb.SendMessageResponse)}


async def _serve_grpclib(port: int) -> None:
    from grpclib.server import Server
    server = Server([_GrpclibService()])
    await server.start("127.0.0.1", port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    _ready(port)
    await stop.wait()
    server.close()
    await server.wait_closed()


# ------------------------------------------------------------------ granian (Rust HTTP/2) + gRPC framing in ASGI

GRPC_HEADERS = [(b"content-type", b"application/grpc")]
GRPC_OK_TRAILERS = [(b"grpc-status", b"0")]


async def asgi_app(scope, receive, send) -> None:
    """gRPC over ASGI: the request body is one length-prefixed message (flag byte, 4-byte length),
    the response the same, then the trailers `grpc-status: 0` (ASGI's http.response.trailers)."""
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    if scope["path"] != SEND_METHOD:
        await send({"type": "http.response.start", "status": 200, "headers": GRPC_HEADERS, "trailers": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"12")], "more_trailers": False})
        return
    out = answer_bytes(first_message(body))
    await send({"type": "http.response.start", "status": 200, "headers": GRPC_HEADERS, "trailers": True})
    await send({"type": "http.response.body", "body": frame(out), "more_body": False})
    await send({"type": "http.response.trailers", "headers": GRPC_OK_TRAILERS, "more_trailers": False})


def _serve_granian(port: int) -> None:
    import uvloop
    from granian.constants import HTTPModes, Interfaces
    from granian.server.embed import Server

    server = Server(asgi_app, address="127.0.0.1", port=port, interface=Interfaces.ASGI, http=HTTPModes.http2,
                    runtime_threads=1, log_enabled=False)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(server.serve())
        loop.add_signal_handler(signal.SIGTERM, server.stop)
        _ready(port)
        await task

    uvloop.run(run())


# ------------------------------------------------------------------ pyvoy (Envoy's HTTP/2, Python embedded) + ASGI

def _serve_pyvoy(port: int, app: str) -> None:
    import uvloop
    from pyvoy import PyvoyServer

    # Envoy's --concurrency is its count of network worker threads (default: the host's cores); the
    # embedded Python runs on one event loop thread whatever it is.
    concurrency = os.environ.get("BENCH_ENVOY_CONCURRENCY", "1")
    server = PyvoyServer(app, address="127.0.0.1", port=port, interface="asgi", loop="uvloop",
                         log_level=os.environ.get("BENCH_ENVOY_LOG", "error"), additional_envoy_args=["--concurrency", concurrency],
                         stdout=None, stderr=None)

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await server.start()
        assert server._process is not None
        print(f"echo ready on {port} pid {server._process.pid}", flush=True)
        done = asyncio.ensure_future(server.wait())
        await asyncio.wait([done, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        await server.stop()

    uvloop.run(run())


def main(argv: list[str]) -> int:
    kind, port = argv[0], int(argv[1])
    extra = os.environ.get("BENCH_STACKS_PATH")
    if extra:
        sys.path.append(extra)
    try:
        if kind == "aio_uvloop":
            import uvloop
            uvloop.run(_serve_aio(port))
        elif kind == "aio_asyncio":
            asyncio.run(_serve_aio(port))
        elif kind == "sync":
            _serve_sync(port)
        elif kind == "grpclib":
            import grpclib  # noqa: F401
            import uvloop
            uvloop.run(_serve_grpclib(port))
        elif kind == "granian":
            import granian  # noqa: F401
            _serve_granian(port)
        elif kind == "pyvoy":
            _serve_pyvoy(port, "bench.grpc_echo:asgi_app")
        elif kind == "pyvoy_connect":
            _serve_pyvoy(port, "bench.grpc_echo_connect:app")
        else:
            print(f"unknown kind {kind!r}", file=sys.stderr)
            return 2
    except ImportError as e:
        print(f"stack missing: {e}", file=sys.stderr)
        return MISSING_STACK
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
