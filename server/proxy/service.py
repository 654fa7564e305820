"""apache.rocketmq.v2.MessagingService in front of remote brokers (the proxy's gRPC face).

Shared with the in-broker endpoint (server/grpc/): the protobuf <-> RocketMQ message conversion
(`convert.to_properties`, `convert.to_proto`), the status codes and their mapping from remoting answers
(`status`), the telemetry settings' constants. What differs is the backend: routes come from the name
server (`routes.NameServerRoutes`) and name this proxy's endpoints, every message operation is a remoting
request to the queue's broker (`brokers.RemoteBrokers`). RPCs this first cut does not serve answer
NOT_IMPLEMENTED in their status with a remark (`NOT_SERVED`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from google.protobuf.duration_pb2 import Duration

from codec.codes import ResponseCode
from codec.pop_receipt import ExtraInfo, parse_extra_info
from codec.properties import MessageConst as K
from codec.sql92 import EXPRESSION_TYPE as SQL92
from codec.tags import java_hash
from server.grpc import convert
from server.grpc import telemetry as server_telemetry
from server.grpc.service import (
    DEADLINE_MARGIN_S,
    DEFAULT_INVISIBLE_MS,
    DEFAULT_LONG_POLLING_S,
    MAX_BATCH,
    MAX_INVISIBLE_MS,
    MIN_INVISIBLE_MS,
)
from server.grpc.status import OK, Code, Context, GrpcError, Response, StatusAnswer, from_remoting, status
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from server.grpc.v2 import service_pb2_grpc as sgrpc
from server.proxy.brokers import RemoteBrokers
from server.proxy.config import ProxyConfig
from server.proxy.routes import PERM_READ, PERM_WRITE, CachedRoute, NameServerRoutes

log = structlog.get_logger(__name__)

NOT_SERVED = "is not served by delaymq-proxy yet (first cut: routes, heartbeat, telemetry settings, send, " \
             "pop receive / ack / change invisible duration); use the broker's own gRPC endpoint"
CONSUMER_RETRIES = 16
NOT_FOUND_CODES = (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND, ResponseCode.NO_MESSAGE)


def _ms(d: Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def _duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 10**6)


def _receipt(handle: str) -> ExtraInfo:
    try:
        return parse_extra_info(handle)
    except ValueError as e:
        raise GrpcError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle is not one of delaymq-proxy's: {e}") from None


class ProxyMessagingService(sgrpc.MessagingServiceServicer):
    def __init__(self, cfg: ProxyConfig, routes: NameServerRoutes, brokers: RemoteBrokers,
                 grpc_port_of: Callable[[], int]) -> None:
        self.cfg = cfg
        self.routes = routes
        self.brokers = brokers
        self.grpc_port_of = grpc_port_of
        self.levels = cfg.delay_levels_ms()
        self.rpc_errors = 0
        self._round = itertools.count()

    # ---- plumbing ------------------------------------------------------------------------
    async def _unary(self, name: str, resp_cls: StatusAnswer[Response],
                     work: Callable[[], Awaitable[Response]]) -> Response:
        try:
            return await work()
        except GrpcError as e:
            return resp_cls(status=status(e.code, e.message))
        except Exception as e:
            self.rpc_errors += 1
            log.error("proxy.rpc_failed", rpc=name, error=repr(e), exc_info=e)
            return resp_cls(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))

    @staticmethod
    def _name(res: pb.Resource, code: pb.Code.ValueType, what: str) -> str:
        if not res.name:
            raise GrpcError(code, f"{what} name is empty")
        name: str = res.name
        return name

    def _endpoints(self, asked: pb.Endpoints) -> pb.Endpoints:
        """The endpoints a route names: the ones the client dialled (every proxy it lists), else this one."""
        if asked.addresses:
            return asked
        host = self.cfg.listen_host if self.cfg.listen_host not in ("0.0.0.0", "::") else "127.0.0.1"
        return convert.endpoints(host, self.grpc_port_of())

    async def _master(self, topic: str, broker_name: str) -> str:
        for fresh in (False, True):
            addr = (await self.routes.route(topic, fresh)).master(broker_name)
            if addr:
                return addr
        raise GrpcError(Code.INTERNAL_SERVER_ERROR, f"broker {broker_name} has no master in the route of {topic}")

    # ---- route / heartbeat / telemetry ---------------------------------------------------
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Context) -> spb.QueryRouteResponse:
        async def work() -> spb.QueryRouteResponse:
            topic = self._name(request.topic, Code.ILLEGAL_TOPIC, "topic")
            route = await self.routes.route(topic)
            eps = self._endpoints(request.endpoints)
            queues: list[pb.MessageQueue] = []
            for qd in sorted(route.route.queue_datas, key=lambda q: q.broker_name):
                if not route.master(qd.broker_name):
                    continue
                broker = pb.Broker(name=qd.broker_name, id=0, endpoints=eps)
                for qid in range(max(qd.read_queue_nums, qd.write_queue_nums)):
                    r = qid < qd.read_queue_nums and bool(qd.perm & PERM_READ)
                    w = qid < qd.write_queue_nums and bool(qd.perm & PERM_WRITE)
                    perm = pb.READ_WRITE if r and w else pb.READ if r else pb.WRITE if w else pb.NONE
                    queues.append(pb.MessageQueue(topic=request.topic, id=qid, permission=perm, broker=broker,
                                                  accept_message_types=(pb.NORMAL, pb.FIFO, pb.DELAY)))
            return spb.QueryRouteResponse(status=OK, message_queues=queues)
        return await self._unary("QueryRoute", spb.QueryRouteResponse, work)

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Context) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=OK)  # stateless: sessions are the brokers' business (pop)

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Context) -> spb.NotifyClientTerminationResponse:
        return spb.NotifyClientTerminationResponse(status=OK)

    def settings(self, client: pb.Settings) -> pb.Settings:
        """The answer to a client's Settings: the in-broker endpoint's policy (server.grpc.telemetry's
        constants), with the proxy's delay levels as the consumer retry schedule."""
        out = pb.Settings()
        if client.HasField("client_type"):
            out.client_type = client.client_type
        if client.HasField("access_point"):
            out.access_point.CopyFrom(client.access_point)
        out.request_timeout.CopyFrom(Duration(seconds=server_telemetry.REQUEST_TIMEOUT_S))
        out.metric.on = False
        if client.WhichOneof("pub_sub") == "subscription":
            sub = client.subscription
            out.backoff_policy.max_attempts = CONSUMER_RETRIES + 1
            levels = self.levels[2:] or [10_000]
            for ms in (levels * (1 + CONSUMER_RETRIES // len(levels)))[:CONSUMER_RETRIES]:
                out.backoff_policy.customized_backoff.next.append(_duration(ms))
            s = out.subscription
            s.group.CopyFrom(sub.group)
            s.subscriptions.extend(sub.subscriptions)
            s.fifo = False  # the broker's pop hands out a FIFO group's messages in order either way
            s.receive_batch_size = server_telemetry.RECEIVE_BATCH_SIZE
            lp = sub.long_polling_timeout.seconds if sub.HasField("long_polling_timeout") else 0
            s.long_polling_timeout.CopyFrom(Duration(seconds=lp or server_telemetry.DEFAULT_LONG_POLLING_S))
        else:
            out.backoff_policy.max_attempts = server_telemetry.PRODUCER_MAX_ATTEMPTS
            eb = out.backoff_policy.exponential_backoff
            eb.initial.CopyFrom(Duration(nanos=10 * 10**6))
            eb.max.CopyFrom(Duration(seconds=1))
            eb.multiplier = 2.0
            p = out.publishing
            if client.WhichOneof("pub_sub") == "publishing":
                p.topics.extend(client.publishing.topics)
            p.max_body_size = self.cfg.max_message_size
            p.validate_message_type = False
        return out

    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand],
                        context: Context) -> AsyncIterator[spb.TelemetryCommand]:
        """Settings in, settings out; the proxy sends no commands of its own yet (no transaction check-backs)."""
        async for cmd in request_iterator:
            if cmd.HasField("settings"):
                yield spb.TelemetryCommand(status=OK, settings=self.settings(cmd.settings))

    # ---- send ----------------------------------------------------------------------------
    async def SendMessage(self, request: spb.SendMessageRequest, context: Context) -> spb.SendMessageResponse:
        if not request.messages:
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no messages"))
        return await self._unary("SendMessage", spb.SendMessageResponse, lambda: self._send(request))

    def _queue_for(self, route: CachedRoute, props: dict[str, str]) -> tuple[str, int]:
        """(broker name, queue id): a FIFO message group's one queue (its hash over the route's writable
        queues, so every proxy picks the same), else the next queue round robin."""
        queues = route.writable()
        if not queues:
            raise GrpcError(Code.FORBIDDEN, "the topic has no writable queue on any broker")
        group = props.get(convert.SHARDING_KEY)
        i = abs(java_hash(group)) % len(queues) if group else next(self._round) % len(queues)
        qd, qid = queues[i]
        return qd.broker_name, qid

    async def _send_one(self, topic: str, route: CachedRoute, msg: pb.Message, now: int) -> spb.SendResultEntry:
        if msg.topic.name != topic:
            raise GrpcError(Code.MESSAGE_CORRUPTED, "the messages of one request must share a topic")
        if not msg.body:
            raise GrpcError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
        if len(msg.body) > self.cfg.max_message_size:
            raise GrpcError(Code.MESSAGE_BODY_TOO_LARGE,
                            f"message body size {len(msg.body)} exceeds maxMessageSize {self.cfg.max_message_size}")
        if msg.system_properties.message_type == pb.TRANSACTION:
            raise GrpcError(Code.NOT_IMPLEMENTED, f"transactional messages {NOT_SERVED}")
        props, sys_flag = convert.to_properties(msg, topic, now, self.cfg.timer_wheel_enable, self.levels)
        broker_name, qid = self._queue_for(route, props)
        addr = route.master(broker_name)
        assert addr is not None  # writable() keeps only brokers with a master
        sp = msg.system_properties
        born = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000 if sp.HasField("born_timestamp") else now
        resp = await self.brokers.send(addr, topic, qid, props, sys_flag, msg.body, born)
        if resp.code != ResponseCode.SUCCESS:
            return spb.SendResultEntry(status=from_remoting(resp.code, resp.remark))
        return spb.SendResultEntry(status=OK, message_id=props[K.UNIQ_KEY],
                                   offset=int(resp.ext_fields.get("queueOffset", 0)))

    async def _send(self, request: spb.SendMessageRequest) -> spb.SendMessageResponse:
        topic = self._name(request.messages[0].topic, Code.ILLEGAL_TOPIC, "topic")
        route = await self.routes.route(topic)
        now = int(time.time() * 1000)
        entries: list[spb.SendResultEntry] = []
        for msg in request.messages:
            try:
                entries.append(await self._send_one(topic, route, msg, now))
            except GrpcError as e:
                entries.append(spb.SendResultEntry(status=status(e.code, e.message)))
        bad = [e.status for e in entries if e.status.code != Code.OK]
        if not bad:
            top = OK
        elif len(entries) == 1:
            top = bad[0]
        else:
            top = status(Code.MULTIPLE_RESULTS, f"{len(bad)} of {len(entries)} messages failed")
        return spb.SendMessageResponse(status=top, entries=entries)

    # ---- consumption (pop on the brokers) ------------------------------------------------
    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: Context) -> spb.QueryAssignmentResponse:
        async def work() -> spb.QueryAssignmentResponse:
            topic = self._name(request.topic, Code.ILLEGAL_TOPIC, "topic")
            self._name(request.group, Code.ILLEGAL_CONSUMER_GROUP, "consumer group")
            route = await self.routes.route(topic)
            eps = self._endpoints(request.endpoints)
            out = [pb.Assignment(message_queue=pb.MessageQueue(
                topic=request.topic, id=-1, permission=pb.READ_WRITE, broker=pb.Broker(name=name, id=0, endpoints=eps),
                accept_message_types=(pb.NORMAL, pb.FIFO, pb.DELAY))) for name in route.readable_brokers()]
            if not out:
                raise GrpcError(Code.FORBIDDEN, f"topic {topic} has no readable queue on any broker")
            return spb.QueryAssignmentResponse(status=OK, assignments=out)
        return await self._unary("QueryAssignment", spb.QueryAssignmentResponse, work)

    def _poll_ms(self, context: Context, request: spb.ReceiveMessageRequest) -> int:
        wait = _ms(request.long_polling_timeout) / 1000 if request.HasField("long_polling_timeout") \
            else DEFAULT_LONG_POLLING_S
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - DEADLINE_MARGIN_S))
        return int(wait * 1000)

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: Context) -> AsyncIterator[spb.ReceiveMessageResponse]:
        topic = request.message_queue.topic.name
        try:
            self._name(request.message_queue.topic, Code.ILLEGAL_TOPIC, "topic")
            group = self._name(request.group, Code.ILLEGAL_CONSUMER_GROUP, "consumer group")
            invisible = _ms(request.invisible_duration) if request.HasField("invisible_duration") \
                else DEFAULT_INVISIBLE_MS
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is outside "
                                                             f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]")
            if request.batch_size <= 0:
                raise GrpcError(Code.BAD_REQUEST, f"batch size {request.batch_size} must be positive")
            route = await self.routes.route(topic)
            readable = route.readable_brokers()
            if not readable:
                raise GrpcError(Code.FORBIDDEN, f"topic {topic} has no readable queue on any broker")
            name = request.message_queue.broker.name
            if name not in readable:  # a queue from an older route: any broker of the topic
                name = readable[next(self._round) % len(readable)]
            addr = await self._master(topic, name)
            expr = request.filter_expression
            exp_type = SQL92 if expr.type == pb.SQL else "TAG"
            popped = await self.brokers.pop(addr, name, group, topic, min(request.batch_size, MAX_BATCH), invisible,
                                            self._poll_ms(context, request), exp_type, expr.expression or "*",
                                            await self.brokers.orderly(addr, group))
        except GrpcError as e:
            yield spb.ReceiveMessageResponse(status=status(e.code, e.message))
            return
        except Exception as e:
            self.rpc_errors += 1
            log.error("proxy.rpc_failed", rpc="ReceiveMessage", error=repr(e), exc_info=e)
            yield spb.ReceiveMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))
            return
        if popped.code in NOT_FOUND_CODES or (popped.code == ResponseCode.SUCCESS and not popped.records):
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        if popped.code != ResponseCode.SUCCESS:
            yield spb.ReceiveMessageResponse(status=from_remoting(popped.code, popped.remark))
            return
        yield spb.ReceiveMessageResponse(status=OK)
        for rec in popped.records:
            m = convert.to_proto(rec, topic, rec.store_host)
            sp = m.system_properties
            sp.receipt_handle = rec.properties.get(K.POP_CK, "")
            sp.delivery_attempt = rec.reconsume_times + 1
            sp.invisible_duration.CopyFrom(_duration(popped.invisible_ms))
            yield spb.ReceiveMessageResponse(message=m)
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.timestamp_ms(int(time.time() * 1000)))

    async def AckMessage(self, request: spb.AckMessageRequest, context: Context) -> spb.AckMessageResponse:
        async def work() -> spb.AckMessageResponse:
            topic = self._name(request.topic, Code.ILLEGAL_TOPIC, "topic")
            group = self._name(request.group, Code.ILLEGAL_CONSUMER_GROUP, "consumer group")
            out: list[spb.AckMessageResultEntry] = []
            for e in request.entries:
                try:
                    receipt = _receipt(e.receipt_handle)
                    addr = await self._master(topic, receipt.broker_name)
                    resp = await self.brokers.ack(addr, group, topic, receipt, e.receipt_handle)
                    st = OK if resp.code == ResponseCode.SUCCESS else _pop_answer(resp.code, resp.remark)
                except GrpcError as err:
                    st = status(err.code, err.message)
                out.append(spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                     status=st))
            failed = [x.status for x in out if x.status.code != Code.OK]
            if not failed:
                top = OK
            elif len(out) == 1:
                top = failed[0]
            else:
                top = status(Code.MULTIPLE_RESULTS, f"{len(failed)} of {len(out)} acks failed")
            return spb.AckMessageResponse(status=top, entries=out)
        return await self._unary("AckMessage", spb.AckMessageResponse, work)

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Context) -> spb.ChangeInvisibleDurationResponse:
        async def work() -> spb.ChangeInvisibleDurationResponse:
            topic = self._name(request.topic, Code.ILLEGAL_TOPIC, "topic")
            group = self._name(request.group, Code.ILLEGAL_CONSUMER_GROUP, "consumer group")
            ms = _ms(request.invisible_duration)
            if not 0 <= ms <= MAX_INVISIBLE_MS:
                raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {ms} ms is outside [0, {MAX_INVISIBLE_MS}]")
            receipt = _receipt(request.receipt_handle)
            addr = await self._master(topic, receipt.broker_name)
            resp = await self.brokers.change_invisible(addr, group, topic, receipt, request.receipt_handle, ms)
            if resp.code != ResponseCode.SUCCESS:
                return spb.ChangeInvisibleDurationResponse(status=_pop_answer(resp.code, resp.remark))
            ext = resp.ext_fields
            offset = receipt.queue_offset if receipt.queue_offset is not None else receipt.ck_queue_offset
            renewed = ExtraInfo(offset, int(ext.get("popTime", 0)), int(ext.get("invisibleTime", ms)),
                                int(ext.get("reviveQid", receipt.revive_qid)), receipt.topic_mark,
                                receipt.broker_name, receipt.queue_id, offset)
            return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=renewed.encode())
        return await self._unary("ChangeInvisibleDuration", spb.ChangeInvisibleDurationResponse, work)

    # ---- not served yet: NOT_IMPLEMENTED in the status, with a remark --------------------
    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Context) -> spb.EndTransactionResponse:
        return spb.EndTransactionResponse(status=status(Code.NOT_IMPLEMENTED, f"EndTransaction {NOT_SERVED}"))

    async def RecallMessage(self, request: spb.RecallMessageRequest, context: Context) -> spb.RecallMessageResponse:
        return spb.RecallMessageResponse(status=status(Code.NOT_IMPLEMENTED, f"RecallMessage {NOT_SERVED}"))

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context: Context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return spb.ForwardMessageToDeadLetterQueueResponse(
            status=status(Code.NOT_IMPLEMENTED, f"ForwardMessageToDeadLetterQueue {NOT_SERVED}"))

    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context: Context) -> spb.UpdateOffsetResponse:
        return spb.UpdateOffsetResponse(status=status(Code.NOT_IMPLEMENTED, f"UpdateOffset {NOT_SERVED}"))

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Context) -> spb.GetOffsetResponse:
        return spb.GetOffsetResponse(status=status(Code.NOT_IMPLEMENTED, f"GetOffset {NOT_SERVED}"))

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context: Context) -> spb.QueryOffsetResponse:
        return spb.QueryOffsetResponse(status=status(Code.NOT_IMPLEMENTED, f"QueryOffset {NOT_SERVED}"))

    async def SyncLiteSubscription(self, request: spb.SyncLiteSubscriptionRequest,
                                   context: Context) -> spb.SyncLiteSubscriptionResponse:
        return spb.SyncLiteSubscriptionResponse(status=status(Code.NOT_IMPLEMENTED, f"SyncLiteSubscription {NOT_SERVED}"))

    async def PullMessage(self, request: spb.PullMessageRequest,
                          context: Context) -> AsyncIterator[spb.PullMessageResponse]:
        yield spb.PullMessageResponse(status=status(Code.NOT_IMPLEMENTED, f"PullMessage {NOT_SERVED}"))


def _pop_answer(code: int, remark: str | None) -> pb.Status:
    """A broker's refusal of an ACK / CHANGE: NO_MESSAGE means the receipt names no live delivery."""
    if code == ResponseCode.NO_MESSAGE:
        return status(Code.INVALID_RECEIPT_HANDLE, remark or "the receipt handle names no live delivery")
    return from_remoting(code, remark)


__all__ = ["ProxyMessagingService"]
