"""PutFaultInjector: the seam tests use to make `MessageStore.put` fail on purpose.

Disabled (the default) it costs one attribute check per batch. Enabled, each put request takes one
failure from `remaining` (or every request fails while `remaining` is None) and gets `status`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.store_types import PutRequest, PutStatus


class PutFaultInjector:
    __slots__ = ("enabled", "status", "remaining", "predicate", "injected")

    def __init__(self) -> None:
        self.enabled = False
        self.status: PutStatus | None = None
        self.remaining: int | None = None
        self.predicate: Callable[[PutRequest], bool] | None = None
        self.injected = 0

    def fail_next(self, n: int, status: PutStatus) -> None:
        """The next `n` put requests (that match the predicate, if any) fail with `status`."""
        self.status, self.remaining, self.enabled = status, n, n > 0

    def fail_while_enabled(self, status: PutStatus, predicate: Callable[[PutRequest], bool] | None = None) -> None:
        """Every put request (matching `predicate(request)`, if given) fails until `disable()`."""
        self.status, self.remaining, self.predicate, self.enabled = status, None, predicate, True

    def disable(self) -> None:
        self.enabled, self.remaining, self.predicate = False, None, None

    def take(self, request: PutRequest) -> PutStatus | None:
        """The status to fail `request` with, or None to store it normally."""
        if not self.enabled:
            return None
        if self.predicate is not None and not self.predicate(request):
            return None
        if self.remaining is not None:
            if self.remaining <= 0:
                self.enabled = False
                return None
            self.remaining -= 1
            if self.remaining == 0:
                self.enabled = False
        self.injected += 1
        return self.status
