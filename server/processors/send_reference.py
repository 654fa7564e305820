"""The slow reference of the send fast lane (`send_run.SendRunner`): one request at a time.

The generic header spec (`server.headers.SEND_MESSAGE`, not the straight-line `parse_send`), one
`MessageStore.put` per request and a `RemotingCommand` response (not `codec.send_response` frames). Nothing
on a hot path calls it; it is kept here, next to the fast lane and maintained with it, so that
tests/server/test_send_run.py can check a run answers and stores exactly what this does, request by request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.msgid import offset_msg_id
from server import headers as H
from server.header_spec import HeaderError
from server.processors.send_common import PUT_OK, PUT_STATUS_CODES, fail, put_fail_remark, send_ext
from storage.store_types import PutRequest

if TYPE_CHECKING:
    from server.processors.send import SendProcessor
    from storage.message_store import MessageStore


def send_one(sp: SendProcessor, store: MessageStore, conn: Any, cmd: RemotingCommand) -> Any:
    """What `sp.batch_framed(conn, [..., cmd, ...])` answers for `cmd` (a RemotingCommand, None for a oneway
    send, or the batch-message path's answer), storing the message with `store.put`."""
    try:
        h = H.SEND_MESSAGE.parse(cmd.ext_fields, cmd.code != RequestCode.SEND_MESSAGE)
        if h.batch:
            return sp.batch_message(conn, cmd, h)
        prep = sp.preparer.prepare(conn, cmd, h)
    except HeaderError as e:
        return fail(cmd, ResponseCode.SYSTEM_ERROR, str(e))
    if not isinstance(prep, tuple):  # an error response
        return prep
    reply_qid = prep.reply_queue_id
    [r] = store.put([PutRequest(bytearray(prep.record), prep.topic, prep.queue_id, prep.tags_code, prep.keys,
                                prep.deliver_delay)])
    if r.status is not PUT_OK:
        return fail(cmd, PUT_STATUS_CODES[r.status], put_fail_remark(r.status, r.remark), reply_qid)
    if cmd.is_oneway:
        return None
    return cmd.response(ResponseCode.SUCCESS, None,
                        send_ext(offset_msg_id(*sp.preparer.store_host, r.phys_offset), reply_qid, r.queue_offset))
