"""apache.rocketmq.v2.MessagingService, once, over a `server.grpc.backend.MessagingBackend`.

The same service answers RocketMQ 5 clients in the broker (`local_backend.LocalBackend`, the broker's store)
and in `delaymq-proxy` (`server.proxy.backend.RemoteBackend`, brokers over remoting). Here: authentication
(`auth.Authenticator`, the RPC's row in server.security.resources.GRPC), request validation, the protobuf
<-> RocketMQ conversion (`convert`), telemetry (`telemetry.TelemetryService`), and the status mapping: a
`GrpcError` or `PopError` anywhere below an RPC becomes the response's `Status` (the proto's codes with a
message), anything unexpected INTERNAL_SERVER_ERROR (logged with the RPC's name).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from google.protobuf.duration_pb2 import Duration

from codec.codes import DLQ_PREFIX, RETRY_PREFIX, ResponseCode
from codec.properties import MessageConst as K
from server.grpc import convert
from server.grpc.auth import Authenticator, needs
from server.grpc.backend import ALL_TYPES, Filter, MessageType, MessagingBackend, Outgoing
from server.grpc.status import (
    OK,
    Code,
    Context,
    GrpcError,
    Response,
    StatusAnswer,
    from_pop,
    from_remoting,
    status,
)
from server.grpc.telemetry import TelemetryService
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from server.grpc.v2 import service_pb2_grpc as sgrpc
from server.pop.model import PopError

log = structlog.get_logger(__name__)

DEFAULT_INVISIBLE_MS = 30_000
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 1_000, 12 * 3600 * 1000
DEFAULT_LONG_POLLING_S = 20.0
DEADLINE_MARGIN_S = 0.3
MAX_BATCH = 32
MAX_PEERS = 4096  # peers whose parsed address SendMessage keeps


def _ms(d: Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def _duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 10**6)


def grpc_metadata(context: Context) -> dict[str, str]:
    """The RPC's text metadata (x-mq-client-id, authorization, x-mq-language, ...). gRPC hands binary
    (`-bin`) entries over as bytes; RocketMQ sends none, and they are left out."""
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def grpc_peer(context: Context) -> tuple[str, int]:
    """'ipv4:127.0.0.1:5555' / 'ipv6:[::1]:5555' -> (host, port)."""
    text = context.peer() or ""
    kind, _, rest = text.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if host.startswith("::ffff:"):
        host = host[7:]
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        return "127.0.0.1", 0


def _topic_name(res: pb.Resource) -> str:
    if not res.name:
        raise GrpcError(Code.ILLEGAL_TOPIC, "topic name is empty")
    name: str = res.name
    return name


def _group_name(res: pb.Resource) -> str:
    if not res.name:
        raise GrpcError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group name is empty")
    name: str = res.name
    return name


def _filter(expr: pb.FilterExpression) -> Filter:
    return Filter(expr.type == pb.SQL, expr.expression or "*")


def _overall(statuses: list[pb.Status], what: str) -> pb.Status:
    """A batch RPC's top status: OK, the one failure of a one-entry batch, else MULTIPLE_RESULTS."""
    bad = [s for s in statuses if s.code != Code.OK]
    if not bad:
        return OK
    if len(statuses) == 1:
        return bad[0]
    return status(Code.MULTIPLE_RESULTS, f"{len(bad)} of {len(statuses)} {what} failed")


def _check_type(accepts: tuple[MessageType, ...], props: dict[str, str]) -> None:
    """Apache 5.1.3's DefaultTopicMessageTypeValidator: the message's type (from its properties) must be the topic's."""
    sent = convert.sent_type_of(props)
    if sent not in accepts:
        topic_type = "/".join(pb.MessageType.Name(t) for t in accepts)
        raise GrpcError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"TopicMessageType validate failed, topic type is "
                                                                   f"{topic_type}, message type is "
                                                                   f"{pb.MessageType.Name(sent)}")


class MessagingService(sgrpc.MessagingServiceServicer):
    """`endpoints_of()`: the endpoints a route names when the client gave none (this server's address)."""

    def __init__(self, backend: MessagingBackend, auth: Authenticator,
                 endpoints_of: Callable[[], pb.Endpoints]) -> None:
        self.backend = backend
        self.auth = auth
        self.endpoints_of = endpoints_of
        self.telemetry = TelemetryService(backend)
        self.rpc_errors = 0
        self._peers: dict[str, tuple[str, int]] = {}  # context.peer() text -> (host, port)

    # ---- plumbing ------------------------------------------------------------------------
    # request and response types are the generated messages, typed by their stubs (server/grpc/v2/*.pyi);
    # `context` is the RPC's grpc.aio servicer context (status.Context)
    def _check(self, context: Context, method: str, names: dict[str, str]) -> None:
        if self.auth.validator is None:  # aclEnable=false: no metadata or peer to read
            return
        self.auth.check(grpc_metadata(context), grpc_peer(context)[0], method, names)

    def _failed(self, name: str, e: Exception) -> pb.Status:
        if isinstance(e, GrpcError):
            return status(e.code, e.message)
        if isinstance(e, PopError):
            return from_pop(e)
        self.rpc_errors += 1
        log.error("grpc.rpc_failed", rpc=name, error=repr(e), exc_info=e)
        return status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}")

    async def _unary(self, name: str, resp_cls: StatusAnswer[Response], context: Context, names: dict[str, str],
                     work: Callable[[], Awaitable[Response]]) -> Response:
        """`name` is the RPC (its row in server.security.resources.GRPC), `names` the topic / group it names."""
        try:
            self._check(context, name, names)
            return await work()
        except Exception as e:
            return resp_cls(status=self._failed(name, e))

    def _endpoints(self, asked: pb.Endpoints) -> pb.Endpoints:
        """The endpoints a route names: the ones the client dialled (every address it lists), else this one."""
        return asked if asked.addresses else self.endpoints_of()

    def _deadline(self, context: Context, long_polling: Duration | None) -> float:
        """long_polling: the request's long_polling_timeout, None when it has none (the default wait)."""
        loop = asyncio.get_running_loop()
        wait = _ms(long_polling) / 1000 if long_polling is not None else DEFAULT_LONG_POLLING_S
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - DEADLINE_MARGIN_S))
        return loop.time() + max(0.0, wait)

    # ---- route / heartbeat / telemetry ---------------------------------------------------
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Context) -> spb.QueryRouteResponse:
        async def work() -> spb.QueryRouteResponse:
            route = await self.backend.route(_topic_name(request.topic))
            eps = self._endpoints(request.endpoints)
            brokers: dict[str, pb.Broker] = {}
            queues: list[pb.MessageQueue] = []
            for q in route.queues:
                broker = brokers.get(q.broker_name)
                if broker is None:
                    broker = brokers[q.broker_name] = pb.Broker(name=q.broker_name, id=0, endpoints=eps)
                perm = pb.READ_WRITE if q.readable and q.writable else pb.READ if q.readable \
                    else pb.WRITE if q.writable else pb.NONE
                queues.append(pb.MessageQueue(topic=request.topic, id=q.queue_id, permission=perm, broker=broker,
                                              accept_message_types=route.accepts))
            return spb.QueryRouteResponse(status=OK, message_queues=queues)
        return await self._unary("QueryRoute", spb.QueryRouteResponse, context, needs(request.topic.name), work)

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Context) -> spb.HeartbeatResponse:
        async def work() -> spb.HeartbeatResponse:
            self.telemetry.refresh(grpc_metadata(context).get("x-mq-client-id", ""))
            return spb.HeartbeatResponse(status=OK)
        return await self._unary("Heartbeat", spb.HeartbeatResponse, context, needs(group=request.group.name), work)

    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand],
                        context: Context) -> AsyncIterator[spb.TelemetryCommand]:
        md = grpc_metadata(context)
        try:
            self._check(context, "Telemetry", {})
        except GrpcError as e:
            yield spb.TelemetryCommand(status=status(e.code, e.message))
            return
        client_id = md.get("x-mq-client-id") or f"anonymous-{grpc_peer(context)}"
        async for cmd in self.telemetry.serve(request_iterator, client_id, grpc_peer(context),
                                              md.get("x-mq-language", "OTHER")):
            yield cmd

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Context) -> spb.NotifyClientTerminationResponse:
        async def work() -> spb.NotifyClientTerminationResponse:
            chan = self.telemetry.sessions.get(grpc_metadata(context).get("x-mq-client-id", ""))
            if chan is not None:
                chan.close()
            return spb.NotifyClientTerminationResponse(status=OK)
        return await self._unary("NotifyClientTermination", spb.NotifyClientTerminationResponse, context,
                                 needs(group=request.group.name), work)

    # ---- producing -----------------------------------------------------------------------
    async def SendMessage(self, request: spb.SendMessageRequest, context: Context) -> spb.SendMessageResponse:
        # `_unary` written out: the hot RPC pays no closure, no names dict and no extra coroutine with ACL off
        messages = request.messages
        if not messages:
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no messages"))
        try:
            if self.auth.validator is not None:
                self._check(context, "SendMessage", needs(messages[0].topic.name))
            topic = _topic_name(messages[0].topic)
            now = int(time.time() * 1000)
            todo: list[tuple[int, Outgoing]] = []  # (index in the request, the message) of those that go out
            backend = self.backend
            # the types a send to `topic` may carry; None: no check (enableTopicMessageTypeCheck=false, retry and
            # DLQ topics, as Apache's proxy, or a topic whose route takes every type)
            accepts: tuple[MessageType, ...] | None = None
            if backend.topic_message_type_check and not topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                accepts = await backend.message_types(topic)
                if len(accepts) == len(ALL_TYPES):
                    accepts = None
            refused: list[tuple[int, GrpcError]] = []
            for i, msg in enumerate(messages):
                try:
                    out = self._outgoing(topic, msg, now)
                    if accepts is not None:
                        _check_type(accepts, out.props)
                    todo.append((i, out))
                except GrpcError as e:
                    refused.append((i, e))
            if len(todo) == 1:
                sent = await backend.send(topic, [todo[0][1]], self._peer(context))
            else:
                sent = await backend.send(topic, [m for _, m in todo], self._peer(context)) if todo else []
            if not refused and len(sent) == 1 and sent[0].code == ResponseCode.SUCCESS:  # the usual answer
                m, s = todo[0][1], sent[0]
                uniq = m.props[K.UNIQ_KEY]
                deliver = m.props.get(K.TIMER_DELIVER_MS)
                recall = convert.recall_handle(topic, s.broker_name, int(deliver), uniq) if deliver else ""
                return convert.sent_ok_response(uniq, s.queue_offset, s.transaction_id, recall)
            entries: list[spb.SendResultEntry] = [spb.SendResultEntry() for _ in messages]
            for i, err in refused:
                entries[i].status.CopyFrom(status(err.code, err.message))
            for (i, m), s in zip(todo, sent, strict=True):
                entry = entries[i]
                if s.code != ResponseCode.SUCCESS:
                    entry.status.CopyFrom(from_remoting(s.code, s.remark))
                    continue
                uniq = m.props[K.UNIQ_KEY]
                entry.status.CopyFrom(OK)
                entry.message_id = uniq
                entry.offset = s.queue_offset
                if s.transaction_id:
                    entry.transaction_id = s.transaction_id
                deliver = m.props.get(K.TIMER_DELIVER_MS)
                if deliver:
                    entry.recall_handle = convert.recall_handle(topic, s.broker_name, int(deliver), uniq)
            top = _overall([e.status for e in entries], "messages")
            return spb.SendMessageResponse(status=top, entries=entries)
        except Exception as e:
            return spb.SendMessageResponse(status=self._failed("SendMessage", e))

    def _outgoing(self, topic: str, msg: pb.Message, now: int) -> Outgoing:
        if msg.topic.name != topic:
            raise GrpcError(Code.MESSAGE_CORRUPTED, "the messages of one request must share a topic")
        body = msg.body  # each read of a bytes field is a copy
        if not body:
            raise GrpcError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
        backend = self.backend
        limit = backend.max_message_size
        if len(body) > limit:
            raise GrpcError(Code.MESSAGE_BODY_TOO_LARGE,
                            f"message body size {len(body)} exceeds maxMessageSize {limit}")
        sp = msg.system_properties
        props, sys_flag = convert.to_properties(msg, topic, now, backend.timer_enabled, backend.delay_levels)
        if sp.HasField("born_timestamp"):
            born = sp.born_timestamp
            return Outgoing(props, sys_flag, body, born.seconds * 1000 + born.nanos // 1_000_000)
        return Outgoing(props, sys_flag, body, now)

    def _peer(self, context: Context) -> tuple[str, int]:
        """`grpc_peer`, remembered by the peer's text (bounded): one client's calls share it."""
        text = context.peer() or ""
        peer = self._peers.get(text)
        if peer is None:
            if len(self._peers) >= MAX_PEERS:
                self._peers.clear()
            peer = self._peers[text] = grpc_peer(context)
        return peer

    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Context) -> spb.EndTransactionResponse:
        async def work() -> spb.EndTransactionResponse:
            topic = _topic_name(request.topic)
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                return spb.EndTransactionResponse(status=OK)  # unknown: wait for the check-back
            await self.backend.end_transaction(topic, request.transaction_id, request.message_id,
                                               request.resolution == pb.COMMIT)
            return spb.EndTransactionResponse(status=OK)
        return await self._unary("EndTransaction", spb.EndTransactionResponse, context, needs(request.topic.name),
                                 work)

    async def RecallMessage(self, request: spb.RecallMessageRequest, context: Context) -> spb.RecallMessageResponse:
        async def work() -> spb.RecallMessageResponse:
            topic = _topic_name(request.topic)
            try:
                h_topic, broker, deliver, uniq = convert.parse_recall_handle(request.recall_handle)
            except ValueError:
                raise GrpcError(Code.BAD_REQUEST, "recall handle is invalid") from None
            if h_topic != topic:
                raise GrpcError(Code.BAD_REQUEST, "recall handle is invalid or for another topic")
            if deliver <= int(time.time() * 1000):
                raise GrpcError(Code.NOT_FOUND, f"message {uniq} was delivered at {deliver}: too late to recall")
            await self.backend.recall(topic, broker, deliver, uniq, grpc_peer(context))
            return spb.RecallMessageResponse(status=OK, message_id=uniq)
        return await self._unary("RecallMessage", spb.RecallMessageResponse, context, needs(request.topic.name), work)

    # ---- consumption (pop) ---------------------------------------------------------------
    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: Context) -> spb.QueryAssignmentResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.QueryAssignmentResponse:
            names, accepts = await self.backend.assignment(_topic_name(request.topic), _group_name(request.group))
            eps = self._endpoints(request.endpoints)
            out = [pb.Assignment(message_queue=pb.MessageQueue(
                topic=request.topic, id=-1, permission=pb.READ_WRITE, broker=pb.Broker(name=name, id=0, endpoints=eps),
                accept_message_types=accepts)) for name in names]
            if not out:
                raise GrpcError(Code.FORBIDDEN, f"topic {topic} has no readable queue on any broker")
            return spb.QueryAssignmentResponse(status=OK, assignments=out)
        return await self._unary("QueryAssignment", spb.QueryAssignmentResponse, context, needs(topic, group), work)

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: Context) -> AsyncIterator[spb.ReceiveMessageResponse]:
        topic, group = request.message_queue.topic.name, request.group.name
        try:
            self._check(context, "ReceiveMessage", needs(topic, group))
            _topic_name(request.message_queue.topic)
            _group_name(request.group)
            invisible = _ms(request.invisible_duration) if request.HasField("invisible_duration") \
                else DEFAULT_INVISIBLE_MS
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is outside "
                                                             f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]")
            batch = request.batch_size
            if batch <= 0:
                raise GrpcError(Code.BAD_REQUEST, f"batch size {batch} must be positive")
            deadline = self._deadline(context, request.long_polling_timeout
                                      if request.HasField("long_polling_timeout") else None)
            got = await self.backend.receive(group, topic, request.message_queue.broker.name, min(batch, MAX_BATCH),
                                             invisible, _filter(request.filter_expression), deadline)
        except Exception as e:
            yield spb.ReceiveMessageResponse(status=self._failed("ReceiveMessage", e))
            return
        if not got:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield spb.ReceiveMessageResponse(status=OK)
        for d in got:
            m = convert.to_proto(d.rec, topic, d.store_host)
            sp = m.system_properties
            sp.receipt_handle = d.handle
            sp.delivery_attempt = d.attempt
            sp.invisible_duration.CopyFrom(_duration(d.invisible_ms))
            yield spb.ReceiveMessageResponse(message=m)
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.timestamp_ms(int(time.time() * 1000)))

    async def AckMessage(self, request: spb.AckMessageRequest, context: Context) -> spb.AckMessageResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.AckMessageResponse:
            _topic_name(request.topic)
            _group_name(request.group)
            out: list[spb.AckMessageResultEntry] = []
            for e in request.entries:
                try:
                    await self.backend.ack(group, topic, e.receipt_handle)
                    st = OK
                except (GrpcError, PopError) as err:
                    st = self._failed("AckMessage", err)
                out.append(spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                     status=st))
            return spb.AckMessageResponse(status=_overall([x.status for x in out], "acks"), entries=out)
        return await self._unary("AckMessage", spb.AckMessageResponse, context, needs(topic, group), work)

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Context) -> spb.ChangeInvisibleDurationResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.ChangeInvisibleDurationResponse:
            _topic_name(request.topic)
            _group_name(request.group)
            ms = _ms(request.invisible_duration)
            if not 0 <= ms <= MAX_INVISIBLE_MS:
                raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {ms} ms is outside [0, {MAX_INVISIBLE_MS}]")
            handle = await self.backend.change_invisible(group, topic, request.receipt_handle, ms)
            return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)
        return await self._unary("ChangeInvisibleDuration", spb.ChangeInvisibleDurationResponse, context,
                                 needs(topic, group), work)

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context: Context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.ForwardMessageToDeadLetterQueueResponse:
            _topic_name(request.topic)
            _group_name(request.group)
            await self.backend.forward_to_dlq(group, topic, request.receipt_handle, request.message_id,
                                              request.max_delivery_attempts)
            return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)
        return await self._unary("ForwardMessageToDeadLetterQueue", spb.ForwardMessageToDeadLetterQueueResponse,
                                 context, needs(topic, group), work)

    # ---- offsets / pull (5.x lite & pull consumers) --------------------------------------
    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context: Context) -> spb.UpdateOffsetResponse:
        mq, group = request.message_queue, request.group.name

        async def work() -> spb.UpdateOffsetResponse:
            topic = _topic_name(mq.topic)
            if request.offset < 0:
                raise GrpcError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            await self.backend.update_offset(_group_name(request.group), topic, mq.broker.name, mq.id, request.offset)
            return spb.UpdateOffsetResponse(status=OK)
        return await self._unary("UpdateOffset", spb.UpdateOffsetResponse, context, needs(mq.topic.name, group), work)

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Context) -> spb.GetOffsetResponse:
        mq, group = request.message_queue, request.group.name

        async def work() -> spb.GetOffsetResponse:
            topic = _topic_name(mq.topic)
            off = await self.backend.get_offset(_group_name(request.group), topic, mq.broker.name, mq.id)
            return spb.GetOffsetResponse(status=OK, offset=off)
        return await self._unary("GetOffset", spb.GetOffsetResponse, context, needs(mq.topic.name, group), work)

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context: Context) -> spb.QueryOffsetResponse:
        mq = request.message_queue

        async def work() -> spb.QueryOffsetResponse:
            topic = _topic_name(mq.topic)
            policy = request.query_offset_policy
            at = 0
            if policy not in (pb.BEGINNING, pb.END):
                if not request.HasField("timestamp"):
                    raise GrpcError(Code.BAD_REQUEST, "a TIMESTAMP query needs a timestamp")
                at = request.timestamp.seconds * 1000 + request.timestamp.nanos // 1_000_000
            off = await self.backend.query_offset(topic, mq.broker.name, mq.id, policy, at)
            return spb.QueryOffsetResponse(status=OK, offset=max(0, off))
        return await self._unary("QueryOffset", spb.QueryOffsetResponse, context, needs(mq.topic.name), work)

    async def SyncLiteSubscription(self, request: spb.SyncLiteSubscriptionRequest,
                                   context: Context) -> spb.SyncLiteSubscriptionResponse:
        """RocketMQ 5.4's lite topics (the lite push consumer) are not served here: answered NOT_IMPLEMENTED in
        the response's status, as every RPC answers, rather than by grpc's bare UNIMPLEMENTED."""
        async def work() -> spb.SyncLiteSubscriptionResponse:
            raise GrpcError(Code.NOT_IMPLEMENTED, "lite topics (SyncLiteSubscription) are not supported by delaymq")
        return await self._unary("SyncLiteSubscription", spb.SyncLiteSubscriptionResponse, context,
                                 needs(request.topic.name, request.group.name), work)

    async def PullMessage(self, request: spb.PullMessageRequest,
                          context: Context) -> AsyncIterator[spb.PullMessageResponse]:
        mq, topic, group = request.message_queue, request.message_queue.topic.name, request.group.name
        try:
            self._check(context, "PullMessage", needs(topic, group))
            _group_name(request.group)
            _topic_name(mq.topic)
            if request.offset < 0:
                raise GrpcError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            deadline = self._deadline(context, request.long_polling_timeout
                                      if request.HasField("long_polling_timeout") else None)
            res = await self.backend.pull(group, topic, mq.broker.name, mq.id, request.offset,
                                          max(1, min(request.batch_size or MAX_BATCH, MAX_BATCH)),
                                          _filter(request.filter_expression), deadline)
        except Exception as e:
            yield spb.PullMessageResponse(status=self._failed("PullMessage", e))
            return
        if res.records:
            yield spb.PullMessageResponse(status=OK)
            for rec in res.records:
                yield spb.PullMessageResponse(message=convert.to_proto(rec, topic, res.store_host))
        elif res.offset_illegal:
            yield spb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET, f"offset {request.offset} is out of "
                                                                              f"range ({res.offset_illegal})"))
        else:
            yield spb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        yield spb.PullMessageResponse(next_offset=res.next_offset)


__all__ = ["MessagingService", "grpc_metadata", "grpc_peer"]
