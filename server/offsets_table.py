"""Consumer offsets as the broker uses them: storage's `ConsumerOffsetTable` on the broker's MetaStore.

Every commit is staged for the MetaStore's writer thread at once (no dirty flag, no persist timer);
UPDATE_CONSUMER_OFFSET answers after the commit holding it (server/processors/offsets.py).
"""

from __future__ import annotations

from storage.consumer_offsets import ConsumerOffsetTable
from storage.meta_store import MetaStore


class ConsumerOffsetManager(ConsumerOffsetTable):
    def __init__(self, store_path: str, meta: MetaStore | None = None) -> None:
        super().__init__(store_path, meta)
