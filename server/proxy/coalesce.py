"""The proxy's sends to one broker, coalesced into flights: the SEND_MESSAGE_V2 requests that wait for a
broker go out together (one transport write, one read and one put on the broker) instead of one by one.

Why (issue 24, measured in bench/RESULTS.md 2026-11-29): a broker's cost per send is mostly per *read*
(a put_batch, the index and consume-queue appends, one response write, the loop wake-up: ~250 us here),
the rest ~50 us per message; a run of pipelined sends in one read is stored with one put
(server.processors.send_run). Written one per gRPC call, the proxy's sends reached the broker ~1.9 per
read. While sends keep coming, a flight to a broker takes off at most every `linger` (sendCoalesceLingerMs)
with what waited meanwhile, so the broker pays its per-read cost per flight, not per message.

Nothing waits that need not: the first send of an idle lane goes at the end of the loop tick it arrived
in (with whatever else that tick sent); a full flight goes at once; and a flight goes as soon as as many
requests are out as were at most in the last second or two, so a producer sending one message at a time
(or a few such producers) is never held for sends that will not come. The linger's cost is paid only when
more calls are in the proxy than at its backend, i.e. when they queue in the proxy anyway.

Every request is still its own SEND_MESSAGE_V2 with its own answer (msgId, queue offset, transaction id),
so every message type (delayed, timed, transactional, FIFO) and any broker (delaymq's or Apache's) is
served exactly as one request per call would be; the broker sees the same frames, in arrival order, only
fewer reads. A request keeps its caller's timeout, counted from when it was queued. A caller that gives
up while its request waits (a cancelled gRPC call) has it dropped unsent.

The reference path is `RemotingClient.invoke` per request (`sendCoalesce=false`); tests/grpc/
test_proxy_send_coalesce.py checks the two store and answer alike.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from codec.command import RemotingCommand
from remoting.client import RemotingClient

log = structlog.get_logger(__name__)

MAX_FRAMES = 128  # requests per flight at most (a broker connection's turn budget, remoting.connection)
MAX_FLIGHTS = 1  # flights out to one broker at once, unless a full flight is waiting
LINGER_MS = 10.0  # the least time between two flights' take-offs to one broker while sends keep coming
PEAK_WINDOW_S = 1.0  # how long the most requests seen out at once is remembered (one to two windows)
MAX_LANES = 1024  # brokers remembered; past it the idle ones are forgotten


@dataclass(slots=True)
class QueuedSend:
    """A request waiting for its lane's flight: its caller's deadline (loop time) and its answer."""

    cmd: RemotingCommand
    deadline: float
    answer: asyncio.Future[RemotingCommand]  # the broker's answer is set here by the connection itself
    timeout: float
    counted: bool = True  # still in its lane's `outstanding`
    head: bytes | None = None  # the request's header from its template (codec.send_request), else cmd encoded


@dataclass(slots=True)
class Lane:
    """One broker address: the requests waiting, the flights out, when the last one took off."""

    queued: list[QueuedSend] = field(default_factory=list)
    flights: int = 0
    scheduled: bool = False  # a take-off is due (this tick's end, or a linger timer)
    last_takeoff: float = float("-inf")
    timer: asyncio.TimerHandle | None = None
    # requests queued or in flight now, and the most seen at once in this and the previous window: once
    # as many are out as were lately, no more are coming and a flight has nothing to wait for
    outstanding: int = 0
    peak: int = 0
    peak_before: int = 0
    window_start: float = float("-inf")


def _settle(lane: Lane, q: QueuedSend) -> None:
    """`q` is out of its lane's count (answered, failed or given up; once)."""
    if q.counted:
        q.counted = False
        lane.outstanding -= 1


class SendCoalescer:
    """`invoke(addr, cmd, timeout)` as RemotingClient's, for sends. Per broker address (a `Lane`): a flight
    of the waiting requests (at most `max_frames`) takes off at the end of the loop tick a request arrives
    in, unless another took off less than `linger_s` ago (then when that is `linger_s` old) or
    `max_flights` are out (then when one lands); a full flight waits for neither, and neither does one
    when as many requests are out as were at most lately (a producer sending one message at a time is
    never held: nothing else would come)."""

    def __init__(self, client: RemotingClient, max_frames: int = MAX_FRAMES, linger_ms: float = LINGER_MS,
                 max_flights: int = MAX_FLIGHTS) -> None:
        self.client = client
        self.max_frames = max(1, max_frames)
        self.linger_s = max(0.0, linger_ms / 1000)
        self.max_flights = max(1, max_flights)
        self.lanes: dict[str, Lane] = {}  # at most MAX_LANES idle ones (`_forget_idle`)
        self._flights: set[asyncio.Task[None]] = set()
        self.flights_sent = 0  # flights and requests written (stats; the tests read the ratio)
        self.requests_sent = 0

    def invoke(self, addr: str, cmd: RemotingCommand, timeout: float,
               head: bytes | None = None) -> asyncio.Future[RemotingCommand]:
        """The future of `cmd`'s answer (await it): the broker's response, or the connection's failure, or
        RemotingTimeoutError past `timeout`. Not a coroutine: the send path pays no frame for it; the
        request leaves its lane's count when its flight lands, or when dropped unsent. With `head` the
        request is written from its template (`Connection.invoke_into`; only when the client signs
        nothing: a signature covers the extFields the template leaves out of `cmd`)."""
        loop = asyncio.get_running_loop()
        lane = self.lanes.get(addr)
        if lane is None:
            if len(self.lanes) >= MAX_LANES:
                self._forget_idle()
            lane = self.lanes[addr] = Lane()
        if head is None:
            self.client.sign(cmd)
        answer: asyncio.Future[RemotingCommand] = loop.create_future()
        now = loop.time()
        q = QueuedSend(cmd, now + timeout, answer, timeout, True, head)
        lane.queued.append(q)
        lane.outstanding += 1
        if now - lane.window_start >= PEAK_WINDOW_S:
            lane.peak_before, lane.peak, lane.window_start = lane.peak, 0, now
        if lane.outstanding > lane.peak:
            lane.peak = lane.outstanding
        if not lane.scheduled or lane.timer is not None or len(lane.queued) >= self.max_frames:
            self._arm(addr, lane, loop)
        return answer

    def _arm(self, addr: str, lane: Lane, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule the lane's next take-off (see the class docstring)."""
        full = len(lane.queued) >= self.max_frames
        if lane.flights >= self.max_flights and not full:
            return  # the landing flight arms it
        due = lane.last_takeoff + self.linger_s
        if full or due <= loop.time() or lane.outstanding >= max(lane.peak, lane.peak_before):
            if lane.timer is not None:
                lane.timer.cancel()
                lane.timer = None
            elif lane.scheduled:
                return  # already at this tick's end
            lane.scheduled = True
            loop.call_soon(self._take_off, addr, lane)  # the rest of this tick's sends join it
        elif not lane.scheduled:
            lane.scheduled = True
            lane.timer = loop.call_at(due, self._take_off, addr, lane)

    def _take_off(self, addr: str, lane: Lane) -> None:
        lane.scheduled = False
        lane.timer = None
        loop = asyncio.get_running_loop()
        live: list[QueuedSend] = []
        for q in lane.queued:
            if q.answer.done():  # a caller that gave up: its send is dropped
                _settle(lane, q)
            else:
                live.append(q)
        waiting, lane.queued = live[:self.max_frames], live[self.max_frames:]
        if waiting:
            lane.last_takeoff = loop.time()
            lane.flights += 1
            task = loop.create_task(self._fly(addr, lane, waiting))
            self._flights.add(task)
            task.add_done_callback(self._flights.discard)
        if lane.queued:
            self._arm(addr, lane, loop)

    async def _fly(self, addr: str, lane: Lane, batch: list[QueuedSend]) -> None:
        """Write the batch (the connection writes a tick's frames with one writelines); each answer goes to its caller."""
        try:
            try:
                conn = await self.client.connection(addr)
            except BaseException as e:  # a failed dial fails the flight's callers; a cancelled one cancels them
                for q in batch:
                    if not q.answer.done():
                        if isinstance(e, asyncio.CancelledError):
                            q.answer.cancel()
                        else:
                            q.answer.set_exception(e)
                if isinstance(e, Exception):
                    return
                raise
            loop = asyncio.get_running_loop()
            out = [q for q in batch if not q.answer.done()]  # a caller that gave up while it waited: dropped
            for q in out:
                conn.invoke_into(q.cmd, q.answer, q.head)  # the broker's answer goes to the caller's future itself
            self.flights_sent += 1
            self.requests_sent += len(out)
            if out:
                # one wait per flight, until its last deadline (its requests were queued within a linger)
                last = max(q.deadline for q in out)
                await asyncio.wait([q.answer for q in out], timeout=max(last - loop.time(), 0.001))
                conn.forget([q.cmd for q in out], out[0].timeout)  # one still unanswered fails as timed out
        except Exception as e:  # a fault past the dial: logged, and no caller of this flight is left waiting
            log.exception("proxy.flight_failed", broker=addr, requests=len(batch))
            for q in batch:
                if not q.answer.done():
                    q.answer.set_exception(e)
        finally:
            for q in batch:  # landed (or failed, or cancelled): out of the lane's count
                _settle(lane, q)
            lane.flights -= 1
            if lane.queued and not lane.scheduled:
                self._arm(addr, lane, asyncio.get_running_loop())

    def _forget_idle(self) -> None:
        for addr, lane in list(self.lanes.items()):
            if not lane.queued and not lane.flights and not lane.scheduled:
                del self.lanes[addr]

    def cancel_all(self) -> None:
        """The proxy stopping: flights end and waiting requests are dropped (their callers see the cancellation)."""
        for lane in self.lanes.values():
            if lane.timer is not None:
                lane.timer.cancel()
            for q in lane.queued:
                q.answer.cancel()
            lane.queued.clear()
        for task in list(self._flights):
            task.cancel()
