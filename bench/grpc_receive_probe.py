"""Issue 24 (envoyrecv): one ReceiveMessage's timeline on delaymq-proxy, grpcio vs envoy stack, side by side.

`python -m bench.grpc_receive_probe [--rounds N] [--setups delaymq_proxy1,delaymq_envoy1]`: both setups of
bench.grpc_topology are started at once and probed alternately, N rounds each:
- `ready`: 33 messages are stored, then one ReceiveMessage (batch 32): ms to its first response (the status), to
  its first message, to its last message and to its end (the status trailer);
- `long_poll`: a ReceiveMessage (long polling 5 s) waits on an empty topic; 300 ms later one message is sent:
  ms from the SendMessage's answer to the message's arrival at the receiver (the long poll's wake-up).
Medians and maxima per setup; no pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from bench.grpc_floor import metadata
from bench.grpc_topology import GROUP, Setup, start
from bench.grpc_topology import TOPIC as PROBE_TOPIC


async def _timeline(stub, req, md, sent_at: list[float] | None = None) -> dict:
    """ms from the call's start to each mark; with `sent_at` (filled in by the caller while the call waits),
    also the first message's ms after that instant."""
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    n = 0
    async for r in stub.ReceiveMessage(req, timeout=15, metadata=md):
        now = (time.monotonic() - t0) * 1000
        marks.setdefault("first_response", now)
        if r.HasField("message"):
            n += 1
            marks.setdefault("first_message", now)
            marks["last_message"] = now
    marks["end"] = (time.monotonic() - t0) * 1000
    if sent_at and "first_message" in marks:
        marks["after_send_answer_ms"] = marks["first_message"] - (sent_at[0] - t0) * 1000
    return {"messages": n, **{k: round(v, 2) for k, v in marks.items()}}


async def probe(addr: str, rounds_ready: int) -> dict:
    from bench.grpc import _consumer_settings, _msg, _stub
    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    ch, stub = _stub(addr)
    md = metadata("probe")
    telemetry = await _consumer_settings(stub, md, GROUP, PROBE_TOPIC)

    def receive_request(poll_ms: int):
        req = spb.ReceiveMessageRequest(group=pb.Resource(name=GROUP), batch_size=32,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name=PROBE_TOPIC), id=-1))
        req.invisible_duration.seconds = 60
        req.long_polling_timeout.FromMilliseconds(poll_ms)
        return req

    async def ack_all() -> None:  # drain whatever is there
        while True:
            msgs = [r.message async for r in stub.ReceiveMessage(receive_request(200), timeout=10, metadata=md)
                    if r.HasField("message")]
            if not msgs:
                return
            await stub.AckMessage(spb.AckMessageRequest(
                group=pb.Resource(name=GROUP), topic=pb.Resource(name=PROBE_TOPIC),
                entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                             receipt_handle=m.system_properties.receipt_handle) for m in msgs]),
                timeout=10, metadata=md)

    out: dict[str, list] = {"ready": [], "long_poll": []}
    seq = int(time.time() * 1000) % 1_000_000_000
    for _ in range(rounds_ready):
        await ack_all()
        for _k in range(33):
            seq += 1
            await stub.SendMessage(spb.SendMessageRequest(messages=[_msg(PROBE_TOPIC, seq, b"x" * 128)]),
                                   timeout=10, metadata=md)
        out["ready"].append(await _timeline(stub, receive_request(1000), md))
        await ack_all()
        sent_at: list[float] = []
        waiting = asyncio.ensure_future(_timeline(stub, receive_request(5000), md, sent_at))
        await asyncio.sleep(0.3)  # the probe's stimulus, not a synchronisation: the long poll is parked by then
        seq += 1
        await stub.SendMessage(spb.SendMessageRequest(messages=[_msg(PROBE_TOPIC, seq, b"x" * 128)]),
                               timeout=10, metadata=md)
        sent_at.append(time.monotonic())
        out["long_poll"].append(await waiting)
    telemetry.cancel()
    await ch.close()
    return out


def _summ(rows: list[dict], key: str) -> dict:
    vals = [r[key] for r in rows if r.get(key) is not None]
    if not vals:
        return {}
    return {"median": round(statistics.median(vals), 2), "max": round(max(vals), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_receive_probe")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--setups", default="delaymq_proxy1,delaymq_envoy1")
    args = p.parse_args(argv)
    setups: dict[str, Setup] = {}
    try:
        for name in args.setups.split(","):
            setups[name] = start(name)
        results: dict[str, dict[str, list]] = {n: {"ready": [], "long_poll": []} for n in setups}
        for _ in range(args.rounds):
            for name, s in setups.items():
                r = asyncio.run(probe(s.grpc[0], 1))
                for k in r:
                    results[name][k] += r[k]
        for name, r in results.items():
            print(json.dumps({"setup": name,
                              "ready": {k: _summ(r["ready"], k) for k in ("first_response", "first_message",
                                                                          "last_message", "end")},
                              "long_poll": {k: _summ(r["long_poll"], k) for k in ("after_send_answer_ms", "end")},
                              "raw": r}))
    finally:
        for s in setups.values():
            s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
