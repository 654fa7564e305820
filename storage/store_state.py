"""What the MessageStore's mixins (store_put, store_reads, store_append, retention, replica) share: the facade's
state and the few methods one mixin calls on another, declared once so each mixin is type-checked
against the real attribute types. Annotations only: nothing here exists at runtime; `MessageStore.__init__`
assigns every attribute."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from storage.commitlog import CommitLog
    from storage.consume_queue import ConsumeQueue
    from storage.faults import PutFaultInjector
    from storage.flush import GroupCommitService
    from storage.index import IndexService
    from storage.store_types import DispatchListener, PutRequest, PutResult, StoreConfig, TagsCodeOf



class StoreState:
    config: StoreConfig
    commitlog: CommitLog
    consume_queues: dict[tuple[str, int], ConsumeQueue]
    queue_offsets: dict[tuple[str, int], int]
    index: IndexService
    faults: PutFaultInjector
    tags_code_of: TagsCodeOf
    now_ms: Callable[[], int]
    read_only: bool
    put_ok_total: int
    put_failed_total: int
    put_bytes_total: int
    get_total: int
    _listeners: list[DispatchListener]
    _group_commit: GroupCommitService
    _loaded: bool
    _closed: bool
    _disk_checked_at: float  # disk_used_ratio's cache: when statvfs was last asked, and its answer
    _disk_ratio: float
    _space_logged_at: float  # the last "no room for a ConsumeQueue file" log (rate limit)

    if TYPE_CHECKING:  # defined by MessageStore or one mixin; declared here for the mixins that call them
        def consume_queue(self, topic: str, queue_id: int, create: Literal[True]) -> ConsumeQueue: ...

        def put(self, requests: list[PutRequest]) -> list[PutResult]: ...

        def disk_used_ratio(self) -> float: ...

        def _cq_room(self, key: tuple[str, int], first: int, count: int) -> OSError | None: ...

        def _write_units(self, key: tuple[str, int], first: int, buf: bytes | bytearray | memoryview,
                         max_end: int) -> None: ...

        def _dispatch(self, keys: Iterable[tuple[str, int]]) -> None: ...
