"""What the MessageStore's parts share besides the files: whether the store takes writes (`RunState`)
and its running totals (`StoreCounters`, the runtime-info figures). The facade makes one of each and
passes it to the parts that check or count (storage.message_store)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RunState:
    loaded: bool = False  # load() ran and close() has not
    closed: bool = False  # shutdown/close began: no more writes
    read_only: bool = False  # a slave (storage.replica): puts refused, replicated appends accepted

    @property
    def running(self) -> bool:
        return self.loaded and not self.closed


@dataclass(slots=True)
class StoreCounters:
    put_ok_total: int = 0  # putMessageTimesTotal
    put_failed_total: int = 0  # putMessageFailedTimes
    put_bytes_total: int = 0  # putMessageSizeTotal
    get_total: int = 0  # getMessageTimesTotal
