"""Instructions per message of each part of the in-broker SendMessage handler, without grpc: where delaymq's own
share of a gRPC send goes (issue 24 item 3; bench.grpc_instr counts the whole call, grpc included).

`python -m bench.grpc_send_phases [N]` re-runs itself under `valgrind --tool=callgrind --instr-atstart=no`: an
in-process broker (store on store_base(), ASYNC_FLUSH, its gRPC endpoint started for its MessagingService) takes a
warm-up of 100 sends, then each phase runs N times (one 128 B NORMAL message each, as bench.grpc_instr sends) with
instrumentation on around it, and prints one JSON line per phase with Ir per message:

| phase | what runs per message |
|---|---|
| `send_message` | `MessagingService.SendMessage` (request already parsed, the response not serialized) |
| `backend_send` | `LocalBackend.send` of the converted message |
| `store_run_1` | `SendRunner.batch_parsed` of one message: the send path and the store's put of a run of one |
| `store_run_16` | the same for runs of 16 messages, per message (what a run's fixed cost is) |
| `to_outgoing` | `MessagingService._outgoing` (`convert.to_properties`, the checks) |
| `answer` | `convert.sent_ok_response` and its SerializeToString |
| `send_header` | `local_backend.send_header` |

Every thread counts (the store's flush thread, the broker's timers: ~1 M Ir/s under valgrind, a few thousand
per message here), so read differences between phases of one run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable

from bench.common import pick_port, store_base

TOPIC = "BenchPhases"
NOW = 1_700_000_000_000
WARMUP = 100


def _ctl(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=300)


def _totals(path: str) -> int:
    with open(path) as f:
        for line in f:
            m = re.match(r"^totals:\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no totals in {path}")


class _Context:
    """What SendMessage reads of a grpc.aio servicer context with ACL off."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    def invocation_metadata(self) -> tuple[()]:
        return ()


async def _inner(n: int, out: str) -> None:
    from bench.grpc_instr import requests
    from codec.codes import RequestCode
    from codec.command import RemotingCommand
    from server.broker import BrokerController
    from server.config import BrokerConfig
    from server.grpc import convert
    from server.grpc.local_backend import SendConnection, send_header
    from server.grpc.v2 import service_pb2 as spb

    store = tempfile.mkdtemp(prefix="grpc-phases-", dir=store_base())
    b = BrokerController(BrokerConfig(store_path_root_dir=store,
                                      listen_port=pick_port(), listen_host="127.0.0.1", grpc_listen_port=pick_port(),
                                      flush_disk_type="ASYNC_FLUSH", default_topic_queue_nums=8))
    await b.start()
    try:
        assert b.grpc is not None and b.grpc.service is not None
        svc = b.grpc.service
        backend = svc.backend
        sender = backend.sender  # the LocalBackend's send path
        reqs = [spb.SendMessageRequest.FromString(r) for r in requests(WARMUP + n, TOPIC)]
        ctx = _Context()
        for r in reqs[:WARMUP]:
            await svc.SendMessage(r, ctx)
        reqs = reqs[WARMUP:]
        msgs = [r.messages[0] for r in reqs]
        outs = [svc._outgoing(TOPIC, m, NOW) for m in msgs]
        conn = SendConnection(("127.0.0.1", 5555))
        peer = ("127.0.0.1", 5555)

        def run(batch: list) -> None:
            sender.batch_parsed(conn, [RemotingCommand(code=RequestCode.SEND_MESSAGE, body=o.body) for o in batch],
                                [send_header(TOPIC, -1, o, 8) for o in batch])

        async def send_message() -> None:
            for r in reqs:
                await svc.SendMessage(r, ctx)

        async def backend_send() -> None:
            for o in outs:
                await backend.send(TOPIC, [o], peer)

        async def store_run_1() -> None:
            for o in outs:
                run([o])

        async def store_run_16() -> None:
            for i in range(0, n, 16):
                run(outs[i:i + 16])

        async def to_outgoing() -> None:
            for m in msgs:
                svc._outgoing(TOPIC, m, NOW)

        async def answer() -> None:
            for i in range(n):
                convert.sent_ok_response("01BENCHPHASES", i, "", "").SerializeToString()

        async def header() -> None:
            for o in outs:
                send_header(TOPIC, -1, o, 8)

        phases: dict[str, Callable[[], Awaitable[None]]] = {
            "send_message": send_message, "backend_send": backend_send, "store_run_1": store_run_1,
            "store_run_16": store_run_16, "to_outgoing": to_outgoing, "answer": answer, "send_header": header}
        for k, (name, phase) in enumerate(phases.items(), start=1):
            await phase()  # warm
            _ctl("--zero")
            _ctl("-i", "on")
            await phase()
            _ctl(f"--dump={name}")
            _ctl("-i", "off")
            print(json.dumps({"phase": name, "n": n, "ir_per_msg": _totals(f"{out}.{k}") // n}), flush=True)
    finally:
        await b.shutdown()
        shutil.rmtree(store, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--inner"]:
        from remoting import loop
        from server.logging import configure
        configure("warning")  # stdout carries the phases' lines
        loop.run(_inner(int(argv[1]), argv[2]))
        return 0
    n = int(argv[0]) if argv else 400
    out = os.path.join(tempfile.mkdtemp(prefix="grpc-phases-cg-"), "cg")
    p = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                        sys.executable, "-m", "bench.grpc_send_phases", "--inner", str(n), out],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    print(p.stdout, end="")
    shutil.rmtree(os.path.dirname(out), ignore_errors=True)
    return p.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
