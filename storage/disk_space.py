"""The store disk's used ratio (RocketMQ's diskMaxUsedSpaceRatio check before a put): statvfs asked at most
once per `disk_check_interval_ms`, the answer cached between."""

from __future__ import annotations

import os
import time

from storage.store_types import StoreConfig


class DiskSpace:
    def __init__(self, config: StoreConfig) -> None:
        self._config = config
        self._checked_at = 0.0  # when statvfs was last asked (monotonic s)
        self.ratio = 0.0  # its last answer

    def used_ratio(self) -> float:
        now = time.monotonic()
        if now - self._checked_at >= self._config.disk_check_interval_ms / 1000.0 or self._checked_at == 0:
            try:
                st = os.statvfs(self._config.store_path)
                self.ratio = 1.0 - st.f_bavail / st.f_blocks if st.f_blocks else 0.0
            except OSError:
                self.ratio = 0.0
            self._checked_at = now
        return self.ratio

    def recheck(self) -> None:
        """The next `used_ratio()` asks statvfs (a changed limit or disk is seen at once)."""
        self._checked_at = 0.0
