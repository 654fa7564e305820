"""The Telemetry stream: one session per 5.x client (x-mq-client-id), both directions.

In: the client's Settings (answered with the server's: backoff policy, publishing max body size,
subscription long-polling timeout / FIFO / batch size, request timeout, metrics off), and its answers
to our commands (ThreadStackTrace, VerifyMessageResult: logged, and handed to whoever asked).
Out: RecoverOrphanedTransactionCommand for a half message nobody ended; PrintThreadStackTraceCommand
and VerifyMessageCommand, whose answers (matched by nonce) complete the remoting request that asked.
A session is registered by the backend (`backend.ClientSessions`: in the broker its ClientManager, in
the proxy `server.proxy.sessions`) through `TelemetryChannel`, which speaks
the remoting connection's two client-bound methods as Apache's proxy's GrpcClientChannel does:
`invoke_oneway(CHECK_TRANSACTION_STATE)` becomes RecoverOrphanedTransactionCommand (a producer is
registered as a producer of each topic it publishes: Apache's proxy uses the topic as the
transactional producer group), and `invoke(GET_CONSUMER_RUNNING_INFO)` (mqadmin consumerStatus,
relayed by the broker) becomes PrintThreadStackTraceCommand, `invoke(CONSUME_MESSAGE_DIRECTLY)`
VerifyMessageCommand. A SimpleConsumer / PushConsumer session is a consumer of its group (consume
type CONSUME_POP) with its subscriptions, so mqadmin and GET_CONSUMER_LIST_BY_GROUP see it; how a
group mixing 4.x and 5.x consumers divides its queues is PopService's (`server/pop/service.py`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from google.protobuf.duration_pb2 import Duration

from codec import fastjson
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.record import decode_record
from codec.tags import java_hash
from server.client_manager import SubscriptionData
from server.grpc import convert
from server.grpc.status import OK
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb

log = structlog.get_logger(__name__)

CONSUME_POP = "CONSUME_POP"
MAX_PENDING_ANSWERS = 256
_nonces = itertools.count(1)
REQUEST_TIMEOUT_S = 3
DEFAULT_LONG_POLLING_S = 20
RECEIVE_BATCH_SIZE = 32
PRODUCER_MAX_ATTEMPTS = 3
OUT_QUEUE_MAX = 1024


def transaction_id(msg_id: str, table_offset: int) -> str:
    """A 5.x transaction id: the half's offset msgId (its CommitLog offset) and its half-queue offset."""
    return f"{msg_id}-{table_offset}"


class TelemetryChannel:
    """A 5.x client as the ClientManager and TransactionService see a connection."""

    def __init__(self, client_id: str, peer: tuple[str, int], store_host: tuple[str, int] | None) -> None:
        self.client_id = client_id
        self.peer = peer
        self.remote_addr = peer
        self.attrs: dict[str, Any] = {}
        self.store_host = store_host  # the host a check's record names; None: the record's own store host
        self.out: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue(OUT_QUEUE_MAX)  # None: end
        self.settings: pb.Settings | None = None
        self.checks_sent = 0
        self.closed = False
        self.pending: dict[str, asyncio.Future[spb.TelemetryCommand]] = {}   # nonce -> the answer a remoting request awaits

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        if cmd.code != RequestCode.CHECK_TRANSACTION_STATE or self.closed:
            return  # e.g. NOTIFY_CONSUMER_IDS_CHANGED: nothing a 5.x client listens to
        ext = cmd.ext_fields
        try:
            rec = decode_record(cmd.body_bytes())[0]
        except CodecError as e:
            log.error("grpc.check_bad_record", client_id=self.client_id, error=str(e))
            return
        msg = convert.to_proto(rec, rec.topic, self.store_host or rec.store_host)
        tx = transaction_id(str(ext.get("offsetMsgId", "")), int(ext.get("tranStateTableOffset", 0)))
        command = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=msg, transaction_id=tx))
        try:
            self.out.put_nowait(command)
            self.checks_sent += 1
        except asyncio.QueueFull:
            log.warning("grpc.telemetry_queue_full", client_id=self.client_id)

    def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> asyncio.Future[RemotingCommand]:
        """A request to the client, as remoting's Connection.invoke: a future of the response command."""
        return asyncio.ensure_future(self._invoke(cmd, timeout))

    async def _invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            trace = await self.ask(lambda nonce: spb.TelemetryCommand(
                print_thread_stack_trace_command=spb.PrintThreadStackTraceCommand(nonce=nonce)), timeout)
            return cmd.response(body=fastjson.dumps(self.running_info(trace.thread_stack_trace.thread_stack_trace)))
        if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            try:
                rec = decode_record(cmd.body_bytes())[0]
            except CodecError as e:
                return cmd.response(code=ResponseCode.SYSTEM_ERROR, remark=f"not a stored message: {e}")
            msg = convert.to_proto(rec, rec.topic, self.store_host or rec.store_host)
            res = await self.ask(lambda nonce: spb.TelemetryCommand(
                verify_message_command=spb.VerifyMessageCommand(nonce=nonce, message=msg)), timeout)
            ok = res.status.code == pb.OK
            body = {"order": False, "autoCommit": True, "consumeResult": "CR_SUCCESS" if ok else "CR_THROW_EXCEPTION",
                    "remark": res.status.message or pb.Code.Name(res.status.code), "spentTimeMills": 0}
            return cmd.response(body=fastjson.dumps(body))
        return cmd.response(code=ResponseCode.SYSTEM_ERROR, remark=f"request code {cmd.code} is not relayed to a gRPC client")

    async def ask(self, make: Callable[[str], spb.TelemetryCommand], timeout: float) -> spb.TelemetryCommand:
        """Write the command `make(nonce)` on the stream and wait for the answer carrying that nonce."""
        if self.closed:
            raise ConnectionError(f"gRPC client {self.client_id} has no open Telemetry stream")
        if len(self.pending) >= MAX_PENDING_ANSWERS:
            raise ConnectionError(f"gRPC client {self.client_id} has {len(self.pending)} unanswered commands")
        nonce = f"{next(_nonces):x}"
        fut = asyncio.get_running_loop().create_future()
        self.pending[nonce] = fut
        try:
            self.out.put_nowait(make(nonce))
            return await asyncio.wait_for(fut, timeout)
        except asyncio.QueueFull:
            raise ConnectionError(f"gRPC client {self.client_id}: telemetry queue full") from None
        finally:
            self.pending.pop(nonce, None)

    def answered(self, nonce: str, cmd: spb.TelemetryCommand) -> bool:
        fut = self.pending.get(nonce)
        if fut is None or fut.done():
            return False
        fut.set_result(cmd)
        return True

    def running_info(self, jstack: str) -> dict[str, Any]:
        """ConsumerRunningInfo as Apache's proxy answers for a gRPC consumer: properties, subscriptions, jstack."""
        s = self.settings
        subs: list[dict[str, Any]] = []
        if s is not None and s.WhichOneof("pub_sub") == "subscription":
            for e in s.subscription.subscriptions:
                subs.append({"topic": e.topic.name, "subString": e.expression.expression or "*",
                             "expressionType": "SQL92" if e.expression.type == pb.SQL else "TAG",
                             "classFilterMode": False, "subVersion": 0, "tagsSet": [], "codeSet": []})
        props = {"PROP_CONSUME_TYPE": CONSUME_POP, "PROP_CLIENT_VERSION": "V5",
                 "PROP_CONSUMER_START_TIMESTAMP": "0", "clientId": self.client_id, "language": "GRPC",
                 "clientType": pb.ClientType.Name(s.client_type) if s is not None else "CLIENT_TYPE_UNSPECIFIED"}
        return {"properties": props, "subscriptionSet": subs, "mqTable": {}, "statusTable": {}, "jstack": jstack}

    def close(self) -> None:
        if not self.closed:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"gRPC client {self.client_id}: Telemetry stream closed"))
            self.closed = True
            try:
                self.out.put_nowait(None)
            except asyncio.QueueFull:
                pass


@dataclass(slots=True)
class ConsumerPolicy:
    """What a consumer's Settings answer carries of its group."""

    retries: int  # retryMaxTimes: delivery attempts are retries + 1
    fifo: bool
    levels: Sequence[int] = field(default_factory=list)  # the retry schedule's delays, ms


class ClientSessions(Protocol):
    """Where a 5.x client's Telemetry session is registered, so the brokers' requests reach it
    (CHECK_TRANSACTION_STATE, GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY)."""

    def register(self, chan: TelemetryChannel, settings: pb.Settings, language: str) -> None: ...

    def closed(self, chan: TelemetryChannel) -> None: ...


class SessionBackend(Protocol):
    """What Telemetry uses of the MessagingService's backend (server.grpc.backend.MessagingBackend)."""

    sessions: ClientSessions
    max_message_size: int
    store_host: tuple[str, int] | None  # the host a check's record names; None: the record's own
    # enableTopicMessageTypeCheck (Apache's proxy key, default true): a send whose message type is not one the
    # topic's message.type accepts is refused with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE; producers are told it as
    # publishing.validate_message_type (Apache's GrpcClientSettingsManager), so they check the route's types first
    topic_message_type_check: bool

    async def consumer_policy(self, group: str, topic: str) -> ConsumerPolicy:
        """`topic`: one the consumer subscribes ("" when none), where a proxy finds the group's brokers."""
        ...


class TelemetryService:
    """The sessions of one MessagingService; what a session's Settings are answered with comes from the
    backend (max body size, the group's retries and FIFO-ness), where a session is registered is the
    backend's `sessions`."""

    def __init__(self, backend: SessionBackend) -> None:
        self.backend = backend
        self.sessions: dict[str, TelemetryChannel] = {}

    async def server_settings(self, client: pb.Settings) -> pb.Settings:
        out = pb.Settings()
        if client.HasField("client_type"):
            out.client_type = client.client_type
        if client.HasField("access_point"):
            out.access_point.CopyFrom(client.access_point)
        out.request_timeout.CopyFrom(Duration(seconds=REQUEST_TIMEOUT_S))
        out.metric.on = False
        pubsub = client.WhichOneof("pub_sub")
        if pubsub == "subscription":
            sub = client.subscription
            topic = sub.subscriptions[0].topic.name if sub.subscriptions else ""
            policy = await self.backend.consumer_policy(sub.group.name, topic)
            retries = policy.retries
            out.backoff_policy.max_attempts = retries + 1
            # RocketMQ's consumer retry schedule: the delay levels from the third (10 s) on
            levels = list(policy.levels) or [10_000]
            for ms in (levels * (1 + retries // max(1, len(levels))))[:max(1, retries)]:
                out.backoff_policy.customized_backoff.next.append(Duration(seconds=ms // 1000, nanos=(ms % 1000) * 10**6))
            s = out.subscription
            s.group.CopyFrom(sub.group)
            s.subscriptions.extend(sub.subscriptions)
            s.fifo = policy.fifo
            s.receive_batch_size = RECEIVE_BATCH_SIZE
            lp = sub.long_polling_timeout.seconds if sub.HasField("long_polling_timeout") else 0
            s.long_polling_timeout.CopyFrom(Duration(seconds=lp or DEFAULT_LONG_POLLING_S))
        else:
            out.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            eb = out.backoff_policy.exponential_backoff
            eb.initial.CopyFrom(Duration(nanos=10 * 10**6))
            eb.max.CopyFrom(Duration(seconds=1))
            eb.multiplier = 2.0
            p = out.publishing
            if pubsub == "publishing":
                p.topics.extend(client.publishing.topics)
            p.max_body_size = self.backend.max_message_size
            p.validate_message_type = self.backend.topic_message_type_check
        return out

    async def serve(self, request_iterator: AsyncIterator[spb.TelemetryCommand], client_id: str,
                    peer: tuple[str, int], language: str) -> AsyncIterator[spb.TelemetryCommand]:
        """The Telemetry RPC: an async iterator of the commands to write back."""
        chan = TelemetryChannel(client_id, peer, self.backend.store_host)
        old = self.sessions.get(client_id)
        if old is not None:
            self._forget(old)
        self.sessions[client_id] = chan
        reader = asyncio.get_running_loop().create_task(
            self._read(request_iterator, chan, language), name=f"grpc-telemetry-{client_id}")
        try:
            while True:
                item = await chan.out.get()
                if item is None:
                    return
                yield item
        finally:
            reader.cancel()
            self._forget(chan)

    def _forget(self, chan: TelemetryChannel) -> None:
        chan.close()
        if self.sessions.get(chan.client_id) is chan:
            del self.sessions[chan.client_id]
        self.backend.sessions.closed(chan)

    async def _read(self, request_iterator: AsyncIterator[spb.TelemetryCommand], chan: TelemetryChannel,
                    language: str) -> None:
        try:
            async for cmd in request_iterator:
                kind = cmd.WhichOneof("command")
                if kind == "settings":
                    chan.settings = cmd.settings
                    self.backend.sessions.register(chan, cmd.settings, language)
                    reply = spb.TelemetryCommand(status=OK, settings=await self.server_settings(cmd.settings))
                    await chan.out.put(reply)
                elif kind == "thread_stack_trace":
                    nonce = cmd.thread_stack_trace.nonce
                    log.info("grpc.client_thread_stack", client_id=chan.client_id, nonce=nonce,
                             chars=len(cmd.thread_stack_trace.thread_stack_trace), awaited=chan.answered(nonce, cmd))
                elif kind in ("verify_message_result", "verify_message_command"):
                    # rocketmq-client-nodejs 1.0.8 answers with a VerifyMessageCommand carrying the nonce
                    # (and NOT_IMPLEMENTED); the Java client with a VerifyMessageResult
                    nonce = cmd.verify_message_result.nonce if kind == "verify_message_result" else \
                        cmd.verify_message_command.nonce
                    log.info("grpc.client_verify_result", client_id=chan.client_id, nonce=nonce,
                             status=cmd.status.code, awaited=chan.answered(nonce, cmd))
                else:
                    log.debug("grpc.telemetry_ignored", client_id=chan.client_id, command=kind)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the client went away mid-stream
            log.info("grpc.telemetry_read_ended", client_id=chan.client_id, error=repr(e))
        finally:
            chan.close()

    def refresh(self, client_id: str) -> None:
        """A Heartbeat: keep the client's producer registrations alive."""
        chan = self.sessions.get(client_id)
        if chan is not None and chan.settings is not None:
            self.backend.sessions.register(chan, chan.settings, "")



def subscription_data(e: pb.SubscriptionEntry) -> SubscriptionData:
    """A 5.x subscription entry as the ClientManager keeps a 4.x one (tags and their hash codes)."""
    expr = e.expression.expression or "*"
    if e.expression.type == pb.SQL:
        return SubscriptionData(e.topic.name, expr, expression_type="SQL92")
    tags = () if expr.strip() in ("", "*") else tuple(t.strip() for t in expr.split("||") if t.strip())
    return SubscriptionData(e.topic.name, expr, tags, frozenset(java_hash(t) for t in tags))
