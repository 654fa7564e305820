"""tests/interop/cpp_agent.py with session credentials: the same CLI and JSON-lines events, but every
client it builds calls `set_session_credentials(ACL_ACCESS_KEY, ACL_SECRET_KEY, ACL_CHANNEL)` first
(environment variables), so the official C++ client signs its requests."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.interop import cpp_agent  # noqa: E402


def _with_credentials(cls: Any) -> Any:
    """A subclass of the (untyped) C++ client class `cls` that sets the session credentials."""

    class Signed(cls):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.set_session_credentials(os.environ["ACL_ACCESS_KEY"], os.environ["ACL_SECRET_KEY"],
                                         os.environ.get("ACL_CHANNEL", "LOCAL"))
    Signed.__name__ = cls.__name__
    return Signed


cpp_agent.Producer = _with_credentials(cpp_agent.Producer)
cpp_agent.PushConsumer = _with_credentials(cpp_agent.PushConsumer)
cpp_agent.PullConsumer = _with_credentials(cpp_agent.PullConsumer)

if __name__ == "__main__":
    cpp_agent.main()
