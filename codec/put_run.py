"""A put run: encoded CommitLog records back to back in ONE buffer, with the per-record columns
`storage.MessageStore.put_batch` reads (the `storage.store_types.PutBatch` Protocol), sans-io.

The one builder of such runs. Each path fills it its own way and keeps its own step where it is:
- a run of sends (`server.processors.send_run`): `put_run` of the prepared records;
- the timer's deliveries (`codec.timer_rewrite.timer_put_run`): `put_run` of the converted records;
- a delay level's deliveries (`codec.delivery_batch.build_delivery_batch`): lays each record's pieces
  into `buf` itself (no whole record is ever made) and closes it with the columns below, as `append` does.

Record j is `buf[starts[j]:starts[j + 1]]`; per record: `dests[j]` = (topic, queue id), `tags_codes[j]`
(the ConsumeQueue unit's tagsCode), `keys[j]` (index keys, str or UTF-8 bytes), `ts_pos[j]` (the
absolute position in `buf` of its STORETIMESTAMP, which depends on its BORNHOST_V6 flag) and, when not
None, `deliver_delays[j]` (ms; -1 for none: the unit's tagsCode becomes store time + delay).

`put_run` is the fast path (one join, one accumulate, one comprehension); `PutRun.append` is its
one-record-at-a-time reference (`put_run_reference`); `put_run_one` builds a run of one record (a gRPC
send, a sync producer's send) without the transposing; tests/codec/test_put_run.py checks they agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from codec.buffers import BytesLike
from codec.record import POS_SYS_FLAG_LOW, STORE_TS_POS

# per record, the index keys as the store's index takes them: str or UTF-8 bytes
RunKeys = Sequence[str] | Sequence[bytes]


def store_ts_pos(buf: BytesLike, start: int) -> int:
    """The absolute position of STORETIMESTAMP of the record at `start` in `buf` (its field position
    depends on the born host's address length: BORNHOST_V6 in SYSFLAG)."""
    return start + STORE_TS_POS[(buf[start + POS_SYS_FLAG_LOW] & 0x10) >> 4]


class PutRun:
    """Records back to back in `buf` and their columns (the module docstring); what put_batch takes."""

    __slots__ = ("buf", "starts", "dests", "tags_codes", "keys", "ts_pos", "deliver_delays")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.starts: list[int] = [0]
        self.dests: list[tuple[str, int]] = []
        self.tags_codes: list[int] = []
        self.keys: list[RunKeys] = []
        self.ts_pos: list[int] = []
        self.deliver_delays: list[int] | None = None  # None: no record has a deliver delay

    def __len__(self) -> int:
        return len(self.dests)

    def record(self, j: int) -> bytearray:
        """A copy of record j."""
        return self.buf[self.starts[j]:self.starts[j + 1]]

    def append(self, record: BytesLike, dest: tuple[str, int], tags_code: int, keys: RunKeys,
               deliver_delay: int = -1) -> None:
        """Add one whole encoded record (the reference of `put_run`)."""
        start = len(self.buf)
        self.buf += record
        self.starts.append(len(self.buf))
        self.dests.append(dest)
        self.tags_codes.append(tags_code)
        self.keys.append(keys)
        self.ts_pos.append(store_ts_pos(self.buf, start))
        if deliver_delay >= 0 and self.deliver_delays is None:
            self.deliver_delays = [-1] * (len(self.dests) - 1)
        if self.deliver_delays is not None:
            self.deliver_delays.append(deliver_delay)


def put_run(records: Sequence[BytesLike], dests: list[tuple[str, int]], tags_codes: list[int],
            keys: list[RunKeys], deliver_delays: Sequence[int] | None = None) -> PutRun:
    """A run of whole encoded records (at least one) and their columns, in one pass each; `deliver_delays`
    (ms per record, -1 for none) is kept only when some record has one. The lists are taken, not copied."""
    run = PutRun.__new__(PutRun)
    run.buf = buf = bytearray().join(records)
    run.starts = starts = list(accumulate(map(len, records), initial=0))
    run.dests = dests
    run.tags_codes = tags_codes
    run.keys = keys
    run.deliver_delays = list(deliver_delays) if deliver_delays is not None and max(deliver_delays) >= 0 else None
    tsp, low = STORE_TS_POS, POS_SYS_FLAG_LOW
    run.ts_pos = [s + tsp[(buf[s + low] & 0x10) >> 4] for s in starts[:-1]]  # store_ts_pos, inlined
    return run


def put_run_one(record: BytesLike, dest: tuple[str, int], tags_code: int, keys: RunKeys,
                deliver_delay: int = -1) -> PutRun:
    """`put_run` of one record (what `put_run([record], [dest], [tags_code], [keys], [deliver_delay])` gives)."""
    run = PutRun.__new__(PutRun)
    run.buf = buf = bytearray(record)
    run.starts = [0, len(buf)]
    run.dests = [dest]
    run.tags_codes = [tags_code]
    run.keys = [keys]
    run.deliver_delays = [deliver_delay] if deliver_delay >= 0 else None
    run.ts_pos = [STORE_TS_POS[(buf[POS_SYS_FLAG_LOW] & 0x10) >> 4]]  # store_ts_pos(buf, 0), inlined
    return run


def put_run_reference(records: Sequence[BytesLike], dests: Sequence[tuple[str, int]], tags_codes: Sequence[int],
                      keys: Sequence[RunKeys], deliver_delays: Sequence[int] | None = None) -> PutRun:
    """`put_run` one record at a time (`PutRun.append`); nothing hot calls it."""
    run = PutRun()
    delays = deliver_delays if deliver_delays is not None else [-1] * len(records)
    for rec, dest, tc, k, d in zip(records, dests, tags_codes, keys, delays, strict=True):
        run.append(rec, dest, tc, k, d)
    return run


__all__ = ["PutRun", "RunKeys", "put_run", "put_run_one", "put_run_reference", "store_ts_pos"]
