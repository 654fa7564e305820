"""The bitmap files after kill -9 (storage/filter_bitmap.py recover, at start): a broker killed with its
CommitLog tail lost comes back with a ConsumeQueue cut short, and the bitmap file is cut to it (it never claims a
unit the ConsumeQueue no longer has); a torn or corrupt bitmap tail is cut with a log line; the pre-filter answers
exactly afterwards, new messages at the reused offsets included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codec.consume_queue_unit import UNIT as CQ_UNIT
from codec.filter_bitmap import UNIT, UNIT_SIZE, file_name
from tests.server.helpers import send
from tests.server.raw import RawClient
from tests.server.test_sql92_pull import bodies, sql_pull

pytestmark = pytest.mark.process

EU = "region = 'eu'"


def _zero_records(store: Path, topic: str, first: int, last: int) -> None:
    """Overwrite the CommitLog records of queue 0's units first..last with zeros (a lost tail)."""
    cq = (store / "consumequeue" / topic / "0" / file_name(0)).read_bytes()
    segments = sorted(int(p.name) for p in (store / "commitlog").iterdir() if p.name.isdigit())
    for n in range(first, last + 1):
        phys, size, _ = CQ_UNIT.unpack_from(cq, n * CQ_UNIT.size)
        seg = max(s for s in segments if s <= phys)
        with open(store / "commitlog" / file_name(seg), "r+b") as f:
            f.seek(phys - seg)
            f.write(bytes(size))


async def test_kill_9_with_a_lost_tail_cuts_the_bitmap_to_the_consume_queue(broker_factory) -> None:
    b = broker_factory({"enablePropertyFilter": "true", "enableCalcFilterBitMap": "true"})
    c = await RawClient.connect(b.addr)
    try:
        assert (await send(c, "TK", b"m0", qid=0, region="eu")).code == 0
        assert bodies(await sql_pull(c, "GK", "TK", 0, EU)) == [b"m0"]  # registers GK
        for i in range(1, 20):
            assert (await send(c, "TK", f"m{i}".encode(), qid=0, region="eu" if i % 2 == 0 else "us")).code == 0
    finally:
        await c.close()
    bitmap = b.store / "filterbitmap" / "TK" / "0" / file_name(0)
    assert bitmap.stat().st_size == 20 * UNIT_SIZE
    b.kill()
    _zero_records(b.store, "TK", 15, 19)  # the CommitLog lost messages 15..19: the ConsumeQueue will end at 15
    with open(bitmap, "r+b") as f:  # unit 14 corrupt (an impossible time) and a torn partial unit at the end
        f.seek(14 * UNIT_SIZE)
        f.write(UNIT.pack(0, -5))
        f.seek(0, os.SEEK_END)
        f.write(b"\x01" * 7)
    b.start()
    log = b.stderr_path.read_text()
    assert "filter_bitmap.tail_cut" in log and "recovery.consume_queue_cut" in log
    assert bitmap.stat().st_size == 14 * UNIT_SIZE  # 15..19 are gone from the ConsumeQueue, 14 was corrupt
    c = await RawClient.connect(b.addr)
    try:
        # offsets 15.. are reused by new messages, all of them eu now
        for i in range(20, 26):
            assert (await send(c, "TK", f"m{i}".encode(), qid=0, region="eu")).code == 0
        got: list[bytes] = []
        offset = 0
        while True:
            r = await sql_pull(c, "GK", "TK", offset, EU)
            if r.code != 0:
                break
            got += bodies(r)
            offset = int(r.ext["nextBeginOffset"])
        assert got == [f"m{i}".encode() for i in range(0, 15, 2)] + [f"m{i}".encode() for i in range(20, 26)]
    finally:
        await c.close()
