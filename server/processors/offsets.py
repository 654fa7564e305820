"""Consumer offsets and queue offset queries (remoting-protocol.md §8.3, §8.4).

QUERY_CONSUMER_OFFSET new-group rule ("offset 0 still in page cache"): with no stored offset,
answer offset 0 when the queue's min offset is 0 and either the queue is empty/absent, or the
commitlog data of its first message lies within the newest `accessMessageInMemoryMaxRatio`
(40 %) of physical memory's worth of the CommitLog, i.e. `commitlog_max - phys(first) <= 0.4 * RAM`
— the same test Java's `checkInDiskByConsumeOffset` makes. Otherwise 22 QUERY_NOT_FOUND. A request with
5.x's `setZeroIfNotFound=false` (what a proxy's GetOffset sends) skips the rule: QUERY_NOT_FOUND.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codec.ack_response import ok_frame
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.consume_queue_unit import UNIT, UNIT_SIZE
from remoting.dispatch import Response
from server import headers as H
from server.processors import Peer, Registrar, committed, error, guarded, ok

if TYPE_CHECKING:
    from server.offsets_table import ConsumerOffsetManager
    from storage.message_store import MessageStore
    from storage.meta_store import MetaStore

IN_MEMORY_RATIO = 0.40
_INT_MAX, _LONG_MIN, _LONG_MAX = (1 << 31) - 1, -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class OffsetsDeps:
    """What the offset requests use (built by server.processor_wiring)."""

    store: MessageStore
    offsets: ConsumerOffsetManager
    meta: MetaStore  # UPDATE_CONSUMER_OFFSET answers once committed


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def first_message_in_memory(store: MessageStore, topic: str, queue_id: int) -> bool:
    """True when offset 0 of the queue is absent or its data is in the hot part of the CommitLog."""
    units = store.read_units(topic, queue_id, 0, 1)
    if units is None or len(units) < UNIT_SIZE:
        return True
    phys: int = UNIT.unpack_from(units, 0)[0]
    return store.commitlog_max_offset() - phys <= IN_MEMORY_RATIO * physical_memory()


def register(server: Registrar, deps: OffsetsDeps) -> None:
    store = deps.store

    @guarded
    def query_consumer_offset(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.GROUP_TOPIC_QUEUE.parse(cmd.ext_fields)
        offset = deps.offsets.query(h.consumerGroup, h.topic, h.queueId)
        if offset is not None and offset >= 0:
            return ok(cmd, {"offset": str(offset)})
        if h.setZeroIfNotFound is False:
            return error(cmd, ResponseCode.QUERY_NOT_FOUND, "Not found, do not set to zero, maybe this group boot first")
        if store.min_offset(h.topic, h.queueId) <= 0 and first_message_in_memory(store, h.topic, h.queueId):
            return ok(cmd, {"offset": "0"})
        return error(cmd, ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    @guarded
    def update_consumer_offset(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.UPDATE_CONSUMER_OFFSET.parse(cmd.ext_fields)
        deps.offsets.commit(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        return committed(deps.meta, cmd)

    def update_consumer_offset_run(conn: Peer, cmds: list[RemotingCommand]) -> list[Response | bytes]:
        """A pipelined run of UPDATE_CONSUMER_OFFSET (10,000 groups x 4 queues a second): the usual Java
        header (four string fields) read straight from extFields, one staging call, ONE commit future
        whose result is every acknowledgement's frame (codec.ack_response); anything unusual goes through
        the generic processor above (same checks and remarks)."""
        results: list[Response | bytes] = [None] * len(cmds)
        rows: list[tuple[str, str, int, int]] = []
        acks: list[bytes] = []
        first = -1
        for i, cmd in enumerate(cmds):
            ext = cmd.ext_fields
            row: tuple[str, str, int, int] | None
            try:
                row = (ext["consumerGroup"], ext["topic"], int(ext["queueId"]), int(ext["commitOffset"]))
            except (KeyError, TypeError, ValueError):
                row = None
            if row is None or not row[0] or not row[1] or not (0 <= row[2] <= _INT_MAX) \
                    or not (_LONG_MIN <= row[3] <= _LONG_MAX):
                results[i] = update_consumer_offset(conn, cmd)
                continue
            rows.append(row)
            if not cmd.is_oneway:
                acks.append(ok_frame(cmd.opaque, cmd.serialize_type))
                if len(acks) == 1:
                    first = i
        if rows:
            deps.offsets.commit_many(rows)
        if acks:
            results[first] = deps.meta.committed(b"".join(acks))
        return results

    @guarded
    def get_max_offset(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.TOPIC_QUEUE.parse(cmd.ext_fields)
        return ok(cmd, {"offset": str(store.max_offset(h.topic, h.queueId))})

    @guarded
    def get_min_offset(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.TOPIC_QUEUE.parse(cmd.ext_fields)
        return ok(cmd, {"offset": str(store.min_offset(h.topic, h.queueId))})

    @guarded
    def search_offset(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.SEARCH_OFFSET.parse(cmd.ext_fields)
        return ok(cmd, {"offset": str(store.search_offset_by_timestamp(h.topic, h.queueId, h.timestamp))})

    @guarded
    def earliest_store_time(conn: Peer, cmd: RemotingCommand) -> Response:
        h = H.TOPIC_QUEUE.parse(cmd.ext_fields)
        ts = store.earliest_store_time(h.topic, h.queueId)
        return ok(cmd, {"timestamp": str(-1 if ts is None else ts)})

    server.register(RequestCode.QUERY_CONSUMER_OFFSET, query_consumer_offset)
    server.register(RequestCode.UPDATE_CONSUMER_OFFSET, update_consumer_offset, batch=update_consumer_offset_run)
    server.register(RequestCode.GET_MAX_OFFSET, get_max_offset)
    server.register(RequestCode.GET_MIN_OFFSET, get_min_offset)
    server.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, search_offset)
    server.register(RequestCode.GET_EARLIEST_MSG_STORETIME, earliest_store_time)
