"""The state the mixins of one object share is declared once (storage.store_state.StoreState) and mypy
checks each mixin against it; these tests check the other half of that contract on real objects: every
declared attribute is assigned by the constructor (load for the store), so a declaration can never name
state that does not exist at runtime."""

from __future__ import annotations

from storage.store_state import StoreState
from tests.scheduler.helpers import open_store


def _declared(cls: type) -> list[str]:
    return [name for klass in cls.__mro__ for name in getattr(klass, "__annotations__", {})]


def _missing(obj: object, cls: type) -> list[str]:
    return [name for name in _declared(cls) if not hasattr(obj, name)]


async def test_every_declared_attribute_is_assigned(tmp_path):
    store = open_store(tmp_path)
    try:
        assert len(_declared(StoreState)) > 10 and _missing(store, StoreState) == []
    finally:
        await store.shutdown()
