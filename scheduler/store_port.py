"""StorePort: exactly what scheduler/ calls on the store, declared as a Protocol (ARCHITECTURE.md
"Packages": the scheduler reaches storage through a declared Protocol of the store, never the concrete
class). `storage.message_store.MessageStore` satisfies it structurally; the composition root passes
one. Value types (PutRequest, PutResult, PutBatch, BatchPutResult, QueryResult, MadeAhead,
DispatchListener, StoreConfig) are storage's own declarations (`storage.store_types`); the two small
state files are typed by the scheduler's Protocols of them (DelayOffsetBackend, CancelFile).

Adding a call on the store in scheduler/ means adding it here first, so this file stays the list of
what the scheduler needs from storage."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from scheduler.delay_cancel import CancelFile
    from scheduler.delay_offsets import DelayOffsetBackend
    from storage.store_types import (
        BatchPutResult,
        DispatchListener,
        MadeAhead,
        PutBatch,
        PutRequest,
        PutResult,
        QueryResult,
        StoreConfig,
    )
    from storage.supervisor import Supervisor

_T = TypeVar("_T")


class StorePort(Protocol):
    # ---- what the store is given: its settings (store path, max message size) and the failure policy
    @property
    def config(self) -> StoreConfig: ...

    @property
    def supervisor(self) -> Supervisor: ...

    # ---- puts: a delivery, a quarantine record (put), a batch of built records (put_batch)
    def put(self, requests: list[PutRequest]) -> list[PutResult]: ...

    def put_batch(self, batch: PutBatch) -> BatchPutResult: ...

    # ---- a queue's units and offsets (the schedule queues, the timer topic)
    def read_units(self, topic: str, queue_id: int, offset: int, max_units: int) -> memoryview | None: ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    # ---- CommitLog records and ends
    def read_record(self, phys_offset: int, size: int | None = None) -> memoryview | None: ...

    def read_records(self, spans: Iterable[tuple[int, int]]) -> list[memoryview | None]: ...

    def records_from(self, phys_offset: int) -> Iterator[tuple[int, memoryview]]: ...

    def commitlog_min_offset(self) -> int: ...

    def commitlog_max_offset(self) -> int: ...

    def query_by_key(self, topic: str, key: str, max_num: int, begin: int = 0,
                     end: int = (1 << 63) - 1) -> QueryResult: ...

    # ---- after each put, once per queue written (the services wake their due work)
    def add_dispatch_listener(self, fn: DispatchListener, topic: str | None = None) -> None: ...

    def remove_dispatch_listener(self, fn: DispatchListener) -> None: ...

    # ---- the scheduler's own files, kept the store's way
    def made_ahead(self, what: str, destroy: Callable[[_T], None]) -> MadeAhead[_T]: ...

    def delay_offset_file(self, path: str) -> DelayOffsetBackend: ...

    def config_file(self, path: str) -> CancelFile: ...
