"""apache.rocketmq.v2.MessagingService on the broker's store (RocketMQ 5 clients, no proxy).

Every RPC: authentication (`auth.Authenticator`), then the work; a `GrpcError` anywhere below becomes
the response's `Status` (the proto's codes with a message), anything unexpected INTERNAL_SERVER_ERROR
(logged with the RPC's name). Route, heartbeat, telemetry, pop consumption, offsets and pull are here; the
producer's RPCs (SendMessage, EndTransaction, RecallMessage) are `service_send.SendRpcs`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from google.protobuf.duration_pb2 import Duration

from codec.codes import DEFAULT_TOPIC
from codec.sql92 import EXPRESSION_TYPE as SQL92
from server.grpc import convert
from server.grpc.auth import Authenticator, needs
from server.grpc.deps import GrpcDeps
from server.grpc.service_send import SendRpcs, grpc_metadata, grpc_peer
from server.grpc.status import OK, Code, Context, GrpcError, Response, StatusAnswer, from_pop, status
from server.grpc.telemetry import TelemetryService
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from server.grpc.v2 import service_pb2_grpc as sgrpc
from server.pop.model import MessageFilter, PopError, SqlFilter, TagFilter, decode_handle
from server.pop.service import PopService
from server.processors.send import SendProcessor
from server.subscription_filter import unsupported_remark
from server.topic_attributes import MESSAGE_TYPE
from storage.store_types import GetStatus
from storage.topic_config import TopicConfig

log = structlog.get_logger(__name__)

ALL_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
# a topic's message.type attribute (server.topic_attributes) -> the one type its queues accept
TYPE_OF_ATTRIBUTE = {pb.MessageType.Name(t): t for t in ALL_TYPES}
DEFAULT_INVISIBLE_MS = 30_000
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 1_000, 12 * 3600 * 1000
DEFAULT_LONG_POLLING_S = 20.0
DEADLINE_MARGIN_S = 0.3
MAX_BATCH = 32


def _ms(d: Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


class MessagingService(SendRpcs, sgrpc.MessagingServiceServicer):
    def __init__(self, deps: GrpcDeps, pop: PopService, auth: Authenticator, grpc_port: int) -> None:
        self.deps = deps
        self.pop = pop
        self.auth = auth
        self.grpc_port = grpc_port
        self.sender = SendProcessor(deps.send)
        self.telemetry = TelemetryService(deps, lambda: self.grpc_port)
        self.rpc_errors = 0

    # ---- plumbing ------------------------------------------------------------------------
    # request and response types are the generated messages, typed by their stubs (server/grpc/v2/*.pyi);
    # `context` is the RPC's grpc.aio servicer context (status.Context)
    def _check(self, context: Context, method: str, names: dict[str, str]) -> None:
        if self.auth.validator is None:  # aclEnable=false: no metadata or peer to read
            return
        self.auth.check(grpc_metadata(context), grpc_peer(context)[0], method, names)

    async def _unary(self, name: str, resp_cls: StatusAnswer[Response], context: Context, names: dict[str, str],
                     work: Callable[[], Awaitable[Response]]) -> Response:
        """`name` is the RPC (its row in server.security.resources.GRPC), `names` the topic / group it names."""
        try:
            self._check(context, name, names)
            return await work()
        except GrpcError as e:
            return resp_cls(status=status(e.code, e.message))
        except PopError as e:
            return resp_cls(status=from_pop(e))
        except Exception as e:
            self.rpc_errors += 1
            log.error("grpc.rpc_failed", rpc=name, error=repr(e), exc_info=e)
            return resp_cls(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))

    def _broker_entry(self, context_endpoints: pb.Endpoints | None) -> pb.Broker:
        cfg = self.deps.config
        if context_endpoints is not None and context_endpoints.addresses:
            eps = context_endpoints
        else:
            eps = convert.endpoints(cfg.broker_ip1, self.grpc_port)
        return pb.Broker(name=cfg.broker_name, id=0, endpoints=eps)

    @staticmethod
    def _topic_name(res: pb.Resource) -> str:
        if not res.name:
            raise GrpcError(Code.ILLEGAL_TOPIC, "topic name is empty")
        name: str = res.name
        return name

    @staticmethod
    def _group_name(res: pb.Resource) -> str:
        if not res.name:
            raise GrpcError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group name is empty")
        name: str = res.name
        return name

    def _topic_config(self, topic: str, create: bool = False) -> TopicConfig:
        topics = self.deps.topics
        tcfg = topics.get(topic)
        if tcfg is None and create:
            tcfg = topics.create_in_send(topic, DEFAULT_TOPIC, self.deps.config.default_topic_queue_nums)
        if tcfg is None:
            raise GrpcError(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return tcfg

    def _accepted_types(self, topic: str) -> tuple[pb.MessageType.ValueType, ...]:
        """Every type, unless the topic's message.type attribute names one (as Apache's proxy routes)."""
        t = TYPE_OF_ATTRIBUTE.get(self.deps.attributes.get(topic).get(MESSAGE_TYPE, ""))
        return ALL_TYPES if t is None else (t,)

    # ---- route / heartbeat / telemetry ---------------------------------------------------
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Context) -> spb.QueryRouteResponse:
        async def work() -> spb.QueryRouteResponse:
            topic = self._topic_name(request.topic)
            tcfg = self._topic_config(topic, create=True)
            broker = self._broker_entry(request.endpoints)
            accepts = self._accepted_types(topic)
            queues: list[pb.MessageQueue] = []
            for qid in range(max(tcfg.read_queue_nums, tcfg.write_queue_nums)):
                r, w = qid < tcfg.read_queue_nums and tcfg.readable, qid < tcfg.write_queue_nums and tcfg.writeable
                perm = pb.READ_WRITE if r and w else pb.READ if r else pb.WRITE if w else pb.NONE
                queues.append(pb.MessageQueue(topic=request.topic, id=qid, permission=perm, broker=broker,
                                              accept_message_types=accepts))
            return spb.QueryRouteResponse(status=OK, message_queues=queues)
        return await self._unary("QueryRoute", spb.QueryRouteResponse, context, needs(request.topic.name), work)

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Context) -> spb.HeartbeatResponse:
        async def work() -> spb.HeartbeatResponse:
            md = grpc_metadata(context)
            self.telemetry.refresh(md.get("x-mq-client-id", ""))
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
                                              md.get("x-mq-language", "OTHER"), self.pop.is_fifo):
            yield cmd

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Context) -> spb.NotifyClientTerminationResponse:
        async def work() -> spb.NotifyClientTerminationResponse:
            md = grpc_metadata(context)
            chan = self.telemetry.sessions.get(md.get("x-mq-client-id", ""))
            if chan is not None:
                chan.close()
            return spb.NotifyClientTerminationResponse(status=OK)
        return await self._unary("NotifyClientTermination", spb.NotifyClientTerminationResponse, context,
                                 needs(group=request.group.name), work)

    # ---- consumption (pop) ---------------------------------------------------------------
    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: Context) -> spb.QueryAssignmentResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.QueryAssignmentResponse:
            self._topic_name(request.topic)
            self.pop.group_config(self._group_name(request.group))
            tcfg = self._topic_config(topic)
            if not tcfg.readable:
                raise GrpcError(Code.FORBIDDEN, f"topic {topic} is not readable")
            mq = pb.MessageQueue(topic=request.topic, id=-1, permission=pb.READ_WRITE,
                                 broker=self._broker_entry(request.endpoints),
                                 accept_message_types=self._accepted_types(topic))
            return spb.QueryAssignmentResponse(status=OK, assignments=[pb.Assignment(message_queue=mq)])
        return await self._unary("QueryAssignment", spb.QueryAssignmentResponse, context, needs(topic, group), work)

    def _deadline(self, context: Context, long_polling: Duration | None) -> float:
        """long_polling: the request's long_polling_timeout, None when it has none (the default wait)."""
        loop = asyncio.get_running_loop()
        wait = _ms(long_polling) / 1000 if long_polling is not None else DEFAULT_LONG_POLLING_S
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - DEADLINE_MARGIN_S))
        return loop.time() + max(0.0, wait)

    def _filter(self, group: str, topic: str, expr: pb.FilterExpression) -> MessageFilter:
        """The receive's filter: TAG, or SQL92 when enablePropertyFilter is on (a bad one: its position)."""
        if expr.type != pb.SQL:
            return TagFilter(expr.expression)
        filters = self.deps.filters
        if not filters.enabled:
            raise GrpcError(Code.ILLEGAL_FILTER_EXPRESSION, unsupported_remark(SQL92))
        sel = filters.selector(group, topic, 0, SQL92, expr.expression)
        if isinstance(sel, str):
            raise GrpcError(Code.ILLEGAL_FILTER_EXPRESSION, sel)
        return SqlFilter(sel)

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: Context) -> AsyncIterator[spb.ReceiveMessageResponse]:
        topic, group = request.message_queue.topic.name, request.group.name
        try:
            self._check(context, "ReceiveMessage", needs(topic, group))
            self._topic_name(request.message_queue.topic)
            self._group_name(request.group)
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
            # like Apache's proxy, a receive pops from all the broker's readable queues of the topic: the
            # queue a simple consumer names is only its pick of a broker from the route
            deliveries = await self.pop.receive(group, topic, -1, min(batch, MAX_BATCH),
                                                invisible, self._filter(group, topic, request.filter_expression), deadline)
        except GrpcError as e:
            yield spb.ReceiveMessageResponse(status=status(e.code, e.message))
            return
        except PopError as e:
            yield spb.ReceiveMessageResponse(status=from_pop(e))
            return
        except Exception as e:
            self.rpc_errors += 1
            log.error("grpc.rpc_failed", rpc="ReceiveMessage", error=repr(e), exc_info=e)
            yield spb.ReceiveMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))
            return
        if not deliveries:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield spb.ReceiveMessageResponse(status=OK)
        host = self.deps.store_host
        for d in deliveries:
            m = convert.to_proto(d.rec, topic, host)
            sp = m.system_properties
            sp.receipt_handle = d.handle
            sp.delivery_attempt = d.attempt
            sp.invisible_duration.CopyFrom(Duration(seconds=d.invisible_ms // 1000,
                                                    nanos=(d.invisible_ms % 1000) * 10**6))
            yield spb.ReceiveMessageResponse(message=m)
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.timestamp_ms(int(time.time() * 1000)))

    async def AckMessage(self, request: spb.AckMessageRequest, context: Context) -> spb.AckMessageResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.AckMessageResponse:
            self.pop.group_config(self._group_name(request.group))
            out: list[spb.AckMessageResultEntry] = []
            failed = 0
            for e in request.entries:
                try:
                    self.pop.ack(group, topic, e.receipt_handle)
                    st = OK
                except PopError as err:
                    st = from_pop(err)
                    failed += 1
                out.append(spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                     status=st))
            if not failed:
                top = OK
            elif len(out) == 1:
                top = out[0].status
            else:
                top = status(Code.MULTIPLE_RESULTS, f"{failed} of {len(out)} acks failed")
            return spb.AckMessageResponse(status=top, entries=out)
        return await self._unary("AckMessage", spb.AckMessageResponse, context, needs(topic, group), work)

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Context) -> spb.ChangeInvisibleDurationResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.ChangeInvisibleDurationResponse:
            self.pop.group_config(self._group_name(request.group))
            ms = _ms(request.invisible_duration)
            if not 0 <= ms <= MAX_INVISIBLE_MS:
                raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {ms} ms is outside [0, {MAX_INVISIBLE_MS}]")
            handle = self.pop.change_invisible(group, topic, request.receipt_handle, ms)
            return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)
        return await self._unary("ChangeInvisibleDuration", spb.ChangeInvisibleDurationResponse, context,
                                 needs(topic, group), work)

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context: Context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        topic, group = request.topic.name, request.group.name

        async def work() -> spb.ForwardMessageToDeadLetterQueueResponse:
            self.pop.group_config(self._group_name(request.group))
            await self.pop.forward_to_dlq(group, topic, request.receipt_handle)
            return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)
        return await self._unary("ForwardMessageToDeadLetterQueue", spb.ForwardMessageToDeadLetterQueueResponse,
                                 context, needs(topic, group), work)

    # ---- offsets / pull (5.x lite & pull consumers) --------------------------------------
    def _queue_of(self, mq: pb.MessageQueue) -> tuple[str, int]:
        topic = self._topic_name(mq.topic)
        tcfg = self._topic_config(topic)
        if not 0 <= mq.id < max(tcfg.read_queue_nums, tcfg.write_queue_nums):
            raise GrpcError(Code.BAD_REQUEST, f"topic {topic} has no queue {mq.id}")
        return topic, mq.id

    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context: Context) -> spb.UpdateOffsetResponse:
        topic, group = request.message_queue.topic.name, request.group.name

        async def work() -> spb.UpdateOffsetResponse:
            t, qid = self._queue_of(request.message_queue)
            if request.offset < 0:
                raise GrpcError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            self.deps.offsets.commit(self._group_name(request.group), t, qid, request.offset)
            return spb.UpdateOffsetResponse(status=OK)
        return await self._unary("UpdateOffset", spb.UpdateOffsetResponse, context, needs(topic, group), work)

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Context) -> spb.GetOffsetResponse:
        topic, group = request.message_queue.topic.name, request.group.name

        async def work() -> spb.GetOffsetResponse:
            t, qid = self._queue_of(request.message_queue)
            off = self.deps.offsets.query(self._group_name(request.group), t, qid)
            if off < 0:
                raise GrpcError(Code.OFFSET_NOT_FOUND, f"group {group} has no offset for {t}:{qid}")
            return spb.GetOffsetResponse(status=OK, offset=off)
        return await self._unary("GetOffset", spb.GetOffsetResponse, context, needs(topic, group), work)

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context: Context) -> spb.QueryOffsetResponse:
        topic = request.message_queue.topic.name

        async def work() -> spb.QueryOffsetResponse:
            t, qid = self._queue_of(request.message_queue)
            store = self.deps.store
            policy = request.query_offset_policy
            if policy == pb.BEGINNING:
                off = store.min_offset(t, qid)
            elif policy == pb.END:
                off = store.max_offset(t, qid)
            else:
                if not request.HasField("timestamp"):
                    raise GrpcError(Code.BAD_REQUEST, "a TIMESTAMP query needs a timestamp")
                ts = request.timestamp
                off = store.search_offset_by_timestamp(t, qid, ts.seconds * 1000 + ts.nanos // 1_000_000)
            return spb.QueryOffsetResponse(status=OK, offset=max(0, off))
        return await self._unary("QueryOffset", spb.QueryOffsetResponse, context, needs(topic), work)

    async def SyncLiteSubscription(self, request: spb.SyncLiteSubscriptionRequest,
                                   context: Context) -> spb.SyncLiteSubscriptionResponse:
        """RocketMQ 5.4's lite topics (the lite push consumer) are not served here: answered NOT_IMPLEMENTED in
        the response's status, as every RPC answers, rather than by grpc's bare UNIMPLEMENTED."""
        async def work() -> spb.SyncLiteSubscriptionResponse:
            raise GrpcError(Code.NOT_IMPLEMENTED, "lite topics (SyncLiteSubscription) are not supported by this broker")
        return await self._unary("SyncLiteSubscription", spb.SyncLiteSubscriptionResponse, context,
                                 needs(request.topic.name, request.group.name), work)

    async def PullMessage(self, request: spb.PullMessageRequest,
                          context: Context) -> AsyncIterator[spb.PullMessageResponse]:
        topic, group = request.message_queue.topic.name, request.group.name
        try:
            self._check(context, "PullMessage", needs(topic, group))
            self.pop.group_config(self._group_name(request.group))
            t, qid = self._queue_of(request.message_queue)
            accept = self._filter(group, topic, request.filter_expression)
            if request.offset < 0:
                raise GrpcError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            deadline = self._deadline(context, request.long_polling_timeout
                                      if request.HasField("long_polling_timeout") else None)
            res = await self.pop.pull(t, qid, request.offset, max(1, min(request.batch_size or MAX_BATCH, MAX_BATCH)),
                                      accept, deadline)
        except GrpcError as e:
            yield spb.PullMessageResponse(status=status(e.code, e.message))
            return
        except Exception as e:
            self.rpc_errors += 1
            log.error("grpc.rpc_failed", rpc="PullMessage", error=repr(e), exc_info=e)
            yield spb.PullMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))
            return
        recs, next_offset, get_status = res
        if recs:
            yield spb.PullMessageResponse(status=OK)
            host = self.deps.store_host
            for rec in recs:
                yield spb.PullMessageResponse(message=convert.to_proto(rec, t, host))
        elif get_status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            yield spb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET, f"offset {request.offset} is out of "
                                                                              f"range ({get_status.name})"))
        else:
            yield spb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        yield spb.PullMessageResponse(next_offset=next_offset)


__all__ = ["MessagingService", "decode_handle"]
