"""Value types of the MessageStore facade: StoreConfig, PutRequest/PutResult/PutStatus, BatchPutResult,
GetResult/GetStatus; MadeAhead (the facade's files-made-ahead service); DispatchListener."""

from __future__ import annotations

import asyncio
import enum
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from codec.properties import MessageConst
from codec.tags import tags_code

# property names, bound once for the per-message path (codec.properties.MessageConst)
_TAGS = MessageConst.TAGS

# The ConsumeQueue tagsCode of a record, given (topic, properties, store timestamp): what recovery and
# replication write when they (re)build a unit. The composition root passes the scheduler's rule (a
# schedule record's tagsCode is its deliver time); storage's own default is the TAGS hash.
TagsCodeOf = Callable[[str, dict[str, str], int], int]
# called after a put once per (topic, queue id) it wrote to, with that queue's new max offset
# (`MessageStore.add_dispatch_listener`; RocketMQ's CommitLogDispatcher, after the ConsumeQueue write)
DispatchListener = Callable[[str, int, int], None]


class QueueFilesListener(Protocol):
    """Files kept beside the ConsumeQueue follow it (`MessageStore.add_queue_files_listener`; storage.filter_bitmap):
    told when retention advanced a queue's min offset (its files wholly below are deleted) and when a deleted
    topic's queues were removed."""

    def trimmed(self, topic: str, queue_id: int, min_offset: int) -> None: ...

    def topic_deleted(self, topic: str) -> None: ...

# a record's index keys (KEYS split, UNIQ_KEY): str, or UTF-8 bytes from the byte-level paths
IndexKeys = Sequence[str] | Sequence[bytes]
IndexEntry = tuple[str, IndexKeys, int, int]  # what the index is given per record: (topic, keys, phys, size)


def tags_hash_code(topic: str, props: dict[str, str], store_ts: int) -> int:
    """RocketMQ's plain tagsCode: Java String.hashCode of TAGS (several `||`-joined tags: the OR of their
    hashes, codec.tags), 0 without tags."""
    return tags_code(props.get(_TAGS))


@dataclass(slots=True)
class StoreConfig:
    store_path: str
    mapped_file_size_commitlog: int = 1 << 30
    mapped_file_size_consume_queue: int = 300000 * 20
    flush_disk_type: str = "ASYNC_FLUSH"  # or "SYNC_FLUSH"
    flush_interval_ms: int = 500
    flush_consume_queue_interval_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    file_reserved_time_hours: float = 72
    clean_resource_interval_ms: int = 3600_000
    max_message_size: int = 4 << 20
    # RocketMQ refuses puts past 90% disk use (diskSpaceWarningLevelRatio). DELAYMQ_DISK_MAX_USED_RATIO
    # overrides the default for shared or small machines (the test suite sets it; see tests/conftest.py).
    disk_max_used_ratio: float = field(
        default_factory=lambda: float(os.environ.get("DELAYMQ_DISK_MAX_USED_RATIO", "0.90")))
    # ratio checks call statvfs at most this often (ms); 0 = every put
    disk_check_interval_ms: int = 1000
    # a put that would create a new segment while the disk is this full is refused with
    # SERVICE_NOT_AVAILABLE; current writes into existing segments keep going
    max_get_bytes: int = 256 * 1024
    max_get_count: int = 32
    # key index (storage/index.py): hash slots and index entries per IndexFile (broker.conf
    # maxHashSlotNum / maxIndexNum, RocketMQ's defaults); a full file rotates to a new one
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000

    @property
    def sync_flush(self) -> bool:
        return str(self.flush_disk_type).upper() == "SYNC_FLUSH"


class PutStatus(enum.Enum):
    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPPED_FILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGE_CACHE_BUSY = 8
    UNKNOWN_ERROR = 9


@dataclass(slots=True)
class PutRequest:
    record: bytearray
    topic: str
    queue_id: int
    tags_code: int = 0
    keys: IndexKeys = ()
    deliver_delay_ms: int = -1


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    phys_offset: int = -1
    size: int = 0
    queue_offset: int = -1
    store_timestamp: int = 0
    flushed: asyncio.Future[bool] | None = None
    remark: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class PutBatch(Protocol):
    """What `MessageStore.put_batch` takes: records back to back in `buf` (record j is
    `buf[starts[j]:starts[j + 1]]`) with, per record, its (topic, queue id), ConsumeQueue tagsCode, index
    keys and the absolute position of its STORETIMESTAMP; `deliver_delays` is per record
    PutRequest.deliver_delay_ms (the unit's tagsCode becomes store time + delay), or None when all are -1.
    Implemented by codec.put_run.PutRun, the one builder of such runs: a run of sends
    (server.processors.send_run.send_put_run), a delay level's deliveries (codec.delivery_batch.DeliveryBatch,
    a PutRun with the level's own columns) and the timer's (codec.timer_rewrite.timer_put_run)."""

    buf: bytearray
    starts: list[int]
    dests: list[tuple[str, int]]
    tags_codes: list[int]
    ts_pos: list[int]
    deliver_delays: list[int] | None

    @property
    def keys(self) -> Sequence[IndexKeys]: ...  # read-only: per record, str or UTF-8 bytes keys


# the name suffix of a file made ahead of need on the store's allocate pool and not yet taken (storage.allocate):
# every log that makes files ahead removes `*<AHEAD_SUFFIX>` leftovers of a killed run when it loads
AHEAD_SUFFIX = ".ahead.spare"

_T = TypeVar("_T")


class MadeAhead(Protocol[_T]):
    """`MessageStore.made_ahead(what, destroy)`: the one next file of a log of the scheduler's own (the
    timerlog) made ahead of need on the store's allocate pool (RocketMQ's AllocateMappedFileService;
    storage.allocate.AllocateAhead implements it). `request(start, make)` has `make()` run on the pool
    (a no-op when `start` is the one asked for); `take(start)` gives the made file if it is `start`'s and
    ready, else None and the caller makes it inline (counted in `missed`; a failure on the pool, a full
    disk, is logged and left to that inline creation to report); `ready(start)` says whether `take`
    would give it (a request for a start whose making failed asks again); `close()` waits for the pool and
    destroys what nobody took. `destroy` closes and removes a made file nobody took."""

    used: int  # files that came ready when needed
    missed: int  # files not ready (or failed) when needed: made inline

    def request(self, start: int, make: Callable[[], _T]) -> None: ...

    def take(self, start: int) -> _T | None: ...

    def ready(self, start: int) -> bool: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class BatchPutResult:
    """Outcome of `MessageStore.put_batch`: one object per batch. `phys[j]` is record j's CommitLog
    offset and `queue_offsets[j]` its ConsumeQueue offset (-1 if it was not stored); `statuses` is None when every record is PUT_OK, else one
    PutStatus per record. All stored records share `store_timestamp` and the `flushed` future."""

    count: int  # records stored
    phys: list[int]
    store_timestamp: int = 0
    flushed: asyncio.Future[bool] | None = None
    statuses: list[PutStatus] | None = None
    remark: str | None = None
    queue_offsets: list[int] | None = None  # record j's ConsumeQueue offset (-1 if it was not stored)

    @property
    def all_ok(self) -> bool:
        return self.statuses is None


class GetStatus(enum.Enum):
    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0  # bytes in `buffers`

    @property
    def message_count(self) -> int:
        return len(self.buffers)


@dataclass(slots=True)
class QueryResult:
    buffers: list[memoryview]
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0
