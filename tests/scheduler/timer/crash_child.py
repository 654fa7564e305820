"""Subprocess for the kill -9 test: a real MessageStore + TimerMessageStore under timer load.

argv: root first_index count. Sends `count` timer messages (UNIQ_KEY M<i>, body = deliver ms, deliver
times 200..2500 ms ahead), prints READY, then keeps delivering until killed. With count 0 it prints
READY and runs until every M<i> with i < first_index has reached topic CRASH, then exits cleanly.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time

from codec.record import MessageRecord, encode_record
from scheduler.events import on_event as event_listener
from scheduler.timer import TimerConfig, TimerMessageStore, transform_timer
from storage.message_store import MessageStore, PutRequest, StoreConfig


async def main(root: str, first: int, count: int) -> None:
    store = MessageStore(StoreConfig(store_path=root, mapped_file_size_commitlog=1 << 26))
    store.load()
    store.start()
    timer = TimerMessageStore(store, TimerConfig(store_root=root, precision_ms=100, flush_interval_ms=200))
    timer.start()
    rng = random.Random(first)
    for i in range(first, first + count):
        now = int(time.time() * 1000)
        deliver = now + rng.randint(200, 2500)
        rec = MessageRecord(topic="CRASH", body=str(deliver).encode(), born_timestamp=now,
                            properties={"TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": f"M{i}"})
        assert transform_timer(rec, now, timer).ok
        assert store.put([PutRequest(encode_record(rec), rec.topic, rec.queue_id)])[0].status.name == "PUT_OK"
        if i % 50 == 0:
            await asyncio.sleep(0)
    print("READY", flush=True)
    done = asyncio.Event()
    if count == 0:
        from codec.record import read_properties

        keys: set[str] = set()
        off = 0
        while off < store.max_offset("CRASH", 0):
            got = store.get_messages("CRASH", 0, off, 32, None)
            keys.update(read_properties(b)["UNIQ_KEY"] for b in got.buffers)
            off = got.next_begin_offset
            del got

        def on_event(event, **f):
            if event == "delivered" and f.get("topic") == "CRASH":
                keys.add(f["uniqKey"])
                if len(keys) >= first:
                    done.set()
        timer.add_listener(event_listener(on_event))
        if len(keys) >= first:
            done.set()
    await done.wait()
    await timer.shutdown()
    await store.shutdown()
    print("DRAINED", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
