"""`delaymq produce` and `delaymq consume`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable

from ..consumer import BROADCASTING, CLUSTERING, PushConsumer
from ..message import Message, MessageExt, SendResult
from ..process_queue import ConsumeStatus
from ..producer import Producer
from ..transaction import LocalTransactionState, TransactionProducer
from .args import ConsumeArgs, ProduceArgs
from .progress import Progress


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _progress_enabled(args: ProduceArgs | ConsumeArgs) -> bool:
    return bool(args.progress) or sys.stderr.isatty()


def _result_line(r: SendResult, fmt: str) -> str:
    """msgId is the client's UNIQ_KEY (RocketMQ's SendResult.msgId), offsetMsgId the broker's id."""
    if fmt == "ids":
        return f"{r.msg_id} {r.offset_msg_id}"
    if fmt == "json":
        return json.dumps({"status": r.status.name, "msgId": r.msg_id, "uniqKey": r.msg_id,
                           "offsetMsgId": r.offset_msg_id,
                           "topic": r.queue.topic, "brokerName": r.queue.broker_name,
                           "queueId": r.queue.queue_id, "queueOffset": r.queue_offset})
    return f"{r.status.name} {r.msg_id} {r.offset_msg_id} {r.queue.queue_id} {r.queue_offset}"


def _build(args: ProduceArgs, i: int) -> Message:
    if args.size is not None:
        body = (b"x" * args.size)
    else:
        body = args.body.replace("{i}", str(i)).encode()
    keys = args.keys.replace("{i}", str(i)) if args.keys else None
    return Message(args.topic, body, tags=args.tags, keys=keys, delay_level=args.delay_level or 0,
                   deliver_at_ms=args.deliver_at, delay_ms=args.delay)


def _warn_deliver_at(deliver_at: int | None) -> None:
    if deliver_at is None:
        return
    now = int(time.time() * 1000)
    if deliver_at < 100_000_000_000:  # before 1973 as ms, but 2001..5138 as seconds
        sys.stderr.write(f"delaymq: warning: --deliver-at {deliver_at} looks like epoch seconds; it is read as "
                         f"epoch milliseconds (did you mean {deliver_at * 1000}?)\n")
    elif deliver_at <= now:
        sys.stderr.write(f"delaymq: warning: --deliver-at is {(now - deliver_at) / 1000:.1f}s in the past: "
                         "the messages are delivered at once\n")


async def produce(args: ProduceArgs) -> int:
    _warn_deliver_at(args.deliver_at)
    if args.print_ids and args.output == "summary":
        args.output = "ids"
    prog = Progress("produce", args.count, _progress_enabled(args))
    failures: list[str] = []
    async with _producer(args) as producer:
        send = _sender(producer)
        # the first send surfaces route/connection errors before we start a long run
        first = await send(_build(args, 0))
        prog.advance()
        if args.output != "summary":
            _out(_result_line(first, args.output))
        interval = 1.0 / args.rate if args.rate else 0.0
        t0 = time.monotonic()
        sem = asyncio.Semaphore(args.inflight)

        async def one(i: int) -> None:
            try:
                r = await send(_build(args, i))
                if args.output != "summary":
                    _out(_result_line(r, args.output))
                prog.advance()
            except Exception as e:
                failures.append(str(e))
                prog.advance(failed=1)
            finally:
                sem.release()

        tasks: list[asyncio.Future[None]] = []
        for i in range(1, args.count):
            if interval:
                delay = t0 + i * interval - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)  # pacing to --rate
            await sem.acquire()
            tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.gather(*tasks)
    prog.close()
    sent = args.count - len(failures)
    sys.stderr.write(f"sent {sent} of {args.count} messages to {args.topic} in {prog.elapsed:.2f}s "
                     f"({prog.rate:,.1f} msg/s)" + (f"; {len(failures)} failed: {failures[0]}" if failures
                                                     else "") + "\n")
    return 0 if not failures else 1


def _producer(args: ProduceArgs) -> Producer:
    if not args.transaction:
        return Producer(args.group, args.namesrv, send_timeout=args.timeout)
    state = {"commit": LocalTransactionState.COMMIT_MESSAGE,
             "rollback": LocalTransactionState.ROLLBACK_MESSAGE}[args.transaction]
    return TransactionProducer(args.group, args.namesrv, send_timeout=args.timeout,
                               execute=lambda msg, arg: state, check=lambda msg: state)


def _sender(producer: Producer) -> Callable[[Message], Awaitable[SendResult]]:
    """A plain send, or (for --transaction, which makes `_producer` build a TransactionProducer) a
    half message whose local transaction answers the --transaction outcome."""
    if not isinstance(producer, TransactionProducer):
        return producer.send
    tx = producer

    async def send(msg: Message) -> SendResult:
        return (await tx.send_in_transaction(msg)).send_result
    return send


def _msg_line(m: MessageExt, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(m.to_dict(), ensure_ascii=False)
    body = m.body.decode("utf-8", "replace")
    return (f"{m.msg_id} {m.topic} q={m.queue_id} off={m.queue_offset} tags={m.tags or ''} "
            f"keys={','.join(m.keys)} reconsume={m.reconsume_times} body={body}")


async def consume(args: ConsumeArgs) -> int:
    prog = Progress("consume", args.max, _progress_enabled(args))
    done = asyncio.Event()
    activity = asyncio.Event()
    never = asyncio.Event()
    count = 0

    async def listener(m: MessageExt) -> ConsumeStatus:
        nonlocal count
        if args.max and count >= args.max:
            await never.wait()  # past --max: hold it uncommitted; shutdown cancels this wait
            return ConsumeStatus.RETRY
        count += 1
        _out(_msg_line(m, args.output))
        prog.advance()
        activity.set()
        if args.max and count >= args.max:
            done.set()
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer(args.group, args.namesrv, listener=listener,
                            message_model=BROADCASTING if args.broadcast else CLUSTERING,
                            consume_from=args.from_where, consume_timestamp_ms=args.timestamp or 0,
                            orderly=args.orderly, pull_batch_size=min(32, args.max or 32),
                            # --max N: one message at a time, in pull order, so the N consumed are a prefix
                            # of every queue and exactly those N are committed (the rest stay for the next)
                            consume_concurrency=1 if args.max else 20,
                            timeout=args.timeout, suspend_timeout=min(15.0, args.idle_timeout or 15.0))
    if args.sql:
        consumer.subscribe(args.topic, args.sql, "SQL92")
    else:
        consumer.subscribe(args.topic, args.expr)
    await consumer.start()
    try:
        while not done.is_set():
            activity.clear()
            waiters = [asyncio.ensure_future(done.wait()), asyncio.ensure_future(activity.wait())]
            finished, pending = await asyncio.wait(waiters, timeout=args.idle_timeout or None,
                                                   return_when=asyncio.FIRST_COMPLETED)
            for p in pending:
                p.cancel()
            if not finished:  # idle for --idle-timeout
                break
    finally:
        done.set()
        with contextlib.suppress(Exception):
            await consumer.shutdown()
        prog.close()
    sys.stderr.write(f"consumed {count} messages from {args.topic} in {prog.elapsed:.2f}s\n")
    return 0
