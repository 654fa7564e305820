"""The slow reference of the pull processor's answer (`pull.PullProcessor.__call__`, which writes frame pieces
with `codec.pull_response`): the store lookup answered as a `RemotingCommand` and encoded by the generic
`encode_frame_bytes`. Nothing on a hot path calls it; tests/server/test_pull_frames.py checks the processor's
bytes equal these for every status, both serializations, tag filters and held pulls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from codec.buffers import Body
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.frame import encode_frame_bytes
from server.processors.pull import status_to_code

if TYPE_CHECKING:
    from storage.message_store import MessageStore


def pull_answer(store: MessageStore, cmd: RemotingCommand, topic: str, queue_id: int, offset: int, max_nums: int,
                tags_codes: set[int] | None, record_filter: Callable[[memoryview], bool] | None = None) -> bytes:
    """The frame answering PULL_MESSAGE `cmd` (a primary broker, subscription checks passed) for this lookup;
    `record_filter`: a SQL92 subscription's (tests pass the reference evaluator on the decoded properties)."""
    res = store.get_messages(topic, queue_id, offset, max(1, max_nums), tags_codes, record_filter)
    status = res.status.name
    code = status_to_code(status, offset)
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(res.next_begin_offset),
           "minOffset": str(res.min_offset), "maxOffset": str(res.max_offset)}
    body: Body = [*res.buffers] if code == ResponseCode.SUCCESS and res.buffers else b""
    return encode_frame_bytes(cmd.response(code=code, remark=status, ext_fields=ext, body=body))
