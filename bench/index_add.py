"""Micro-benchmark of the key index's add path (not part of `run_all`; no broker, one process).

    .venv/bin/python -m bench.index_add [--batches 400] [--repeat 5]

Adds batches of 512 entries with one UNIQ_KEY each (32 hex chars, like a Java client's), as the
delay-level drain does (`add_batch(entries, ts)`), once with str keys (the send path) and once with
UTF-8 bytes keys (the delivery path), and prints the CPU time per key (time.process_time, best of
`--repeat` runs, each on a fresh store directory, after `--warmup` untimed batches: the steady
state of a running broker, not the first touch of a new file's pages).
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import tempfile
import time

from storage.index import IndexService

BATCH = 512


def _make(path: str, slots: int) -> IndexService:
    if "read_record" in inspect.signature(IndexService).parameters:  # the IndexFile version
        return IndexService(path, None, max_hash_slot_num=slots)
    return IndexService(path)


def run(batches: int, as_bytes: bool, warmup: int, slots: int) -> float:
    root = tempfile.mkdtemp(prefix="delaymq-index-bench-")
    try:
        idx = _make(root, slots)
        idx.load(0)
        work = []
        phys = 0
        for b in range(warmup + batches):
            entries = []
            for i in range(BATCH):
                k = f"7F000001{os.getpid() & 0xFFFF:04X}{b:08X}{i:012X}"
                entries.append(("BenchTopic", (k.encode() if as_bytes else k,), phys, 300))
                phys += 300
            work.append(entries)
        ts = 1_700_000_000_000
        for entries in work[:warmup]:  # the file exists, its slot pages are touched: steady state
            idx.add_batch(entries, ts)
            ts += 1
        t0 = time.process_time()
        for entries in work[warmup:]:
            idx.add_batch(entries, ts)
            ts += 1
        dt = time.process_time() - t0
        if hasattr(idx, "close"):
            idx.close()
        return dt / (batches * BATCH) * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=200, help="batches added before the timed ones")
    ap.add_argument("--slots", type=int, default=5_000_000, help="hash slots per IndexFile (maxHashSlotNum)")
    a = ap.parse_args()
    for as_bytes in (False, True):
        best = min(run(a.batches, as_bytes, a.warmup, a.slots) for _ in range(a.repeat))
        print(f"add_batch, 512 x 1 UNIQ_KEY ({'bytes' if as_bytes else 'str'} keys): {best:.3f} µs/key CPU")


if __name__ == "__main__":
    main()
