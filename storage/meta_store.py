"""MetaStore: the broker's metadata tables in one SQLite database, `<store>/config/meta.db` (WAL mode).

Tables: topic configs, subscription groups, consumer offsets, delay offsets and each table's
dataVersion. The in-memory tables (storage.topic_config, .subscription_group, .consumer_offsets) stay
the read path; every change is *staged* here (O(1): one dict store under a lock) and a single writer
thread commits all staged changes in one transaction ("group commit"), so the event loop never
touches the disk. Changes to one row coalesce while they wait (10,000 groups committing offsets every
second cost one row write per queue per batch, not per commit).

Durability: a change is acknowledged after the transaction holding it committed. `committed()` (an
asyncio future, for request handlers) and `flush()` (blocking, for threads and shutdown) wait for it.
With `sync=True` (flushDiskType=SYNC_FLUSH) SQLite's `synchronous=FULL` fsyncs the WAL at each commit:
an acknowledged change survives power loss. With `sync=False` (ASYNC_FLUSH) `synchronous=NORMAL`: a
committed transaction is in the WAL file (the OS page cache) and survives kill -9 of the broker; the
fsync happens at checkpoints, like the CommitLog's async flush. SQLite's WAL carries checksums, so a
torn tail after a crash is ignored at the next open and the tables are always readable.

Why SQLite rather than an append-only change log: measured on this machine (README, Metadata), one
commit of a batch costs ~0.4-0.6 ms either way (fsync-bound), but SQLite also gives readable tables
after any crash, compaction (checkpoints) without our code, and a consistent read snapshot for the
JSON export while the broker writes. LMDB would be a new dependency for no gain at these sizes.

The schema, its upgrade, the first open's import of an older JSON store and the row/JSON shapes are in
storage.meta_schema; the writer's batch and transaction in storage.meta_writer; the JSON export in
storage.meta_export (`export_json(dir)`: the four files in RocketMQ's shapes, `delaymq-broker export-config`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypedDict

import structlog

from storage import meta_export
from storage.meta_schema import (
    DB_NAME,
    TABLES,
    DataVersion,
    MetaStoreError,
    TopicRow,
    decode_offsets,
    encode_offsets,
    format_delay_offsets,
    open_db,
    parse_delay_offsets,
    prepare,
    read_delay_file,
    topic_json,
    write_delay_file,
)
from storage.meta_writer import StagedBatch, split_rows, write_batch

__all__ = ["DataVersion", "DelayOffsetFile", "DelayOffsetStore", "MetaStore", "MetaStoreError", "TopicRow", "decode_offsets",
           "encode_offsets", "format_delay_offsets", "parse_delay_offsets", "topic_json"]

log = structlog.get_logger(__name__)


class MetaStoreStats(TypedDict):
    """The writer's figures (`MetaStore.stats`)."""

    commits: int
    rows_written: int
    failures: int
    rows_set_aside: int
    last_commit_ms: float
    pending_batch: int  # batches handed to the writer thread and not yet committed
    versions: dict[str, int]  # each table's DataVersion counter, by table name

RETRY_BACKOFF_S = (0.05, 0.2, 1.0, 5.0)


class MetaStore:
    def __init__(self, config_dir: str, sync: bool = False) -> None:
        self.config_dir = config_dir
        self.path = os.path.join(config_dir, DB_NAME)
        self.sync = sync
        self.versions = {t: DataVersion() for t in TABLES}
        self.commits = 0          # transactions committed
        self.rows_written = 0     # row upserts/deletes committed
        self.failures = 0         # failed commits (retried)
        self.rows_set_aside = 0   # rows that failed alone while the rest of their batch committed
        self.last_commit_ms = 0.0
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._batch = StagedBatch()
        self._filling = 1         # number of the batch being staged
        self._committed = 0       # highest batch number committed
        self._waiters: dict[int, list[tuple[asyncio.Future[object], object]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._error: BaseException | None = None
        # the live offsets of a "topic@group" (None: gone), read by the writer when it writes the key's row
        # (ConsumerOffsetTable registers its table's `get`); a row always holds the newest state
        self.offset_source: Callable[[str], dict[int, int] | None] = lambda key: None

    # ---- open / load -------------------------------------------------------------------
    def open(self) -> MetaStore:
        """Create or open the database, import an older JSON store on first open, start the writer."""
        if self._conn is not None:
            return self
        os.makedirs(self.config_dir, exist_ok=True)
        conn = open_db(self.path, self.sync)
        self._conn = conn
        for tbl, (counter, ts) in prepare(conn, self.path, self.config_dir).items():
            if tbl in self.versions:
                self.versions[tbl] = DataVersion(counter, ts)
        self._thread = threading.Thread(target=self._run, name="meta-store-writer", daemon=True)
        self._thread.start()
        return self

    @property
    def _db(self) -> sqlite3.Connection:
        """The writer's connection; MetaStoreError before `open()` or after `close()`."""
        conn = self._conn
        if conn is None:
            raise MetaStoreError(f"{self.path}: not open")
        return conn

    def load_topics(self) -> list[TopicRow]:
        with self._lock:
            return self._db.execute("SELECT * FROM topic").fetchall()

    def load_groups(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            rows = self._db.execute("SELECT name, config FROM subscription_group").fetchall()
        out = []
        for name, text in rows:
            try:
                out.append((name, json.loads(text)))
            except ValueError as e:
                log.warning("meta_store.bad_group", group=name, error=str(e))
        return out

    def load_offsets(self) -> list[tuple[str, dict[int, int]]]:
        with self._lock:
            rows = self._db.execute("SELECT key, offsets FROM consumer_offsets").fetchall()
        return [(key, decode_offsets(text)) for key, text in rows]

    def load_delay_offsets(self) -> dict[int, int]:
        with self._lock:
            return dict(self._db.execute("SELECT level, offset FROM delay_offset").fetchall())

    # ---- staging (any thread; the loop's path is a dict store under an uncontended lock) ---
    def stage_topic(self, row: TopicRow | None, name: str) -> None:
        v = self.versions["topic"]
        v.bump()
        with self._lock:
            self._batch.topics[name] = row
            self._batch.versions["topic"] = v.as_tuple()
            self._cond.notify()

    def stage_group(self, name: str, config: dict[str, Any] | None) -> None:
        v = self.versions["subscription_group"]
        v.bump()
        text = None if config is None else json.dumps(config, separators=(",", ":"))
        with self._lock:
            self._batch.groups[name] = text
            self._batch.versions["subscription_group"] = v.as_tuple()
            self._cond.notify()

    def stage_offset_key(self, key: str) -> None:
        """A "topic@group" whose offsets changed (or went): its row is rewritten from `offset_source`."""
        v = self.versions["consumer_offset"]
        v.bump()
        with self._lock:
            self._batch.offset_keys.add(key)
            self._batch.versions["consumer_offset"] = v.as_tuple()
            self._cond.notify()

    def stage_offset_keys(self, keys: Iterable[str]) -> None:
        v = self.versions["consumer_offset"]
        v.bump()
        with self._lock:
            self._batch.offset_keys.update(keys)
            self._batch.versions["consumer_offset"] = v.as_tuple()
            self._cond.notify()

    def stage_delay_offsets(self, table: dict[int, int]) -> None:
        v = self.versions["delay_offset"]
        v.bump()
        with self._lock:
            self._batch.delay.update(table)
            self._batch.versions["delay_offset"] = v.as_tuple()
            self._cond.notify()

    # ---- waiting for commits -------------------------------------------------------------
    def _target(self) -> int:
        """(lock held) The batch number whose commit makes everything staged so far durable."""
        return self._filling if self._batch else self._filling - 1

    def committed(self, value: object = None) -> asyncio.Future[object]:
        """On the event loop: a future whose result is `value` once everything staged so far is committed
        (exception: MetaStoreError if that commit failed; the changes stay staged and are retried). A
        request processor returns `meta.committed(response)`: the dispatcher answers when it is done."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            target = self._target()
            if target <= self._committed:
                fut.set_result(value)
                return fut
            self._loop = loop
            self._waiters.setdefault(target, []).append((fut, value))
        return fut

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until everything staged so far is committed; False on timeout or when a commit attempt
        fails meanwhile (the rows stay staged). Not on the loop while it serves requests (shutdown and
        threads only)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._target()
            failures = self.failures
            while self._committed < target:
                if self._thread is None or not self._thread.is_alive():
                    return False
                if self.failures > failures:  # a commit failed meanwhile (disk full): say so now
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is None else min(left, 0.5))
        return True

    # ---- the writer thread ---------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._batch and not self._closing:
                    self._cond.wait()
                if not self._batch and self._closing:
                    return
                batch, self._batch = self._batch, StagedBatch()
                seq = self._filling
                self._filling += 1
            t0 = time.perf_counter()
            try:
                try:
                    n = self._write(batch)
                except Exception as e:
                    n = self._write_row_by_row(batch, e)  # a bad row is set aside, the others committed
            except Exception as e:  # disk full, I/O error: keep the rows staged, tell the waiters, retry
                failures += 1
                self.failures += 1
                log.error("meta_store.commit_failed", path=self.path, error=repr(e), attempt=failures)
                with self._cond:
                    self._batch = batch.merge_under(self._batch)
                    waiters = [f for s in [s for s in self._waiters if s <= seq] for f in self._waiters.pop(s)]
                    closing = self._closing
                self._resolve(waiters, MetaStoreError(f"metadata commit failed: {e!r}"))
                if closing:  # shutting down on a full disk: stop now, the last committed state stays
                    log.error("meta_store.closed_uncommitted", path=self.path, error=repr(e))
                    return
                with self._cond:  # back off; close() cuts the wait short
                    if not self._closing:
                        self._cond.wait(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])
                continue
            failures = 0
            self.commits += 1
            self.rows_written += n
            self.last_commit_ms = (time.perf_counter() - t0) * 1000
            with self._cond:
                self._committed = seq
                waiters = [f for s in [s for s in self._waiters if s <= seq] for f in self._waiters.pop(s)]
                self._cond.notify_all()
            self._resolve(waiters, None)

    def _resolve(self, waiters: list[tuple[asyncio.Future[object], object]], exc: BaseException | None) -> None:
        if not waiters or self._loop is None:
            return

        def done() -> None:
            for f, value in waiters:
                if not f.done():
                    if exc is None:
                        f.set_result(value)
                    else:
                        f.set_exception(exc)
        try:
            self._loop.call_soon_threadsafe(done)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _write_row_by_row(self, b: StagedBatch, first_error: Exception) -> int:
        """After a failed batch: every row in its own transaction. Rows that fail while others succeed are
        set aside (logged with their key, counted in `rows_set_aside`); if none succeeds the failure is the
        disk's, not a row's, and `first_error` is raised (the batch stays staged and is retried)."""
        rows = split_rows(b)
        written, bad = 0, []
        for one in rows:
            try:
                written += self._write(one)
            except Exception as e:
                bad.append((one, e))
        if written == 0 and bad:
            raise first_error
        for one, err in bad:
            self.rows_set_aside += 1
            log.error("meta_store.row_set_aside", path=self.path, error=repr(err),
                      row=repr(next(iter({**one.topics, **one.groups}), None) or sorted(one.offset_keys) or "versions"))
        return written

    def _write(self, b: StagedBatch) -> int:
        return write_batch(self._db, b, self.offset_source)

    # ---- close ---------------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Commit what is staged, stop the writer, checkpoint the WAL into the database, close."""
        if self._conn is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("meta_store.close_timeout", path=self.path, staged=bool(self._batch))
                return
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:
            log.warning("meta_store.checkpoint_failed", path=self.path, error=str(e))
        self._conn.close()
        self._conn = None

    def stats(self) -> MetaStoreStats:
        return {"commits": self.commits, "rows_written": self.rows_written, "failures": self.failures,
                "rows_set_aside": self.rows_set_aside,
                "last_commit_ms": round(self.last_commit_ms, 3), "pending_batch": self._filling - self._committed - 1,
                "versions": {t: v.counter for t, v in self.versions.items()}}


    # ---- export --------------------------------------------------------------------------
    def export_json(self, out_dir: str | None = None) -> list[str]:
        """Write topics.json, subscriptionGroup.json, consumerOffset.json and delayOffset.json (RocketMQ's
        shapes) from one consistent read snapshot into `out_dir` (default: the config directory).
        Callable from another process while the broker runs, and in this one from any thread but the
        loop's (it first waits for what is staged here to be committed)."""
        if self._thread is not None and self._thread.is_alive():
            self.flush()  # this process's staged changes are part of the export
        return meta_export.export_json(self.path, out_dir or self.config_dir)


class DelayOffsetStore:
    """The delay levels' progress in the MetaStore (the small interface scheduler.delay_offsets uses):
    `read() -> {level: offset} | None`, `write(table)` (blocks until committed: call it off the loop),
    `stage(table)` (the loop's O(1) path; `meta.committed()` then says when it is durable)."""

    def __init__(self, meta: MetaStore) -> None:
        self.meta = meta

    def read(self) -> dict[int, int] | None:
        return self.meta.load_delay_offsets()

    def stage(self, table: dict[int, int]) -> None:
        self.meta.stage_delay_offsets(dict(table))

    def write(self, table: dict[int, int]) -> None:
        self.stage(table)
        if not self.meta.flush():
            raise OSError(f"delay offsets not committed to {self.meta.path}")


class DelayOffsetFile:
    """The delay levels' progress in `delayOffset.json` at `path` (RocketMQ's fastjson shape, written
    atomically, `.bak` fallback on read): where no MetaStore keeps it (a DelayLevelService built alone).
    The same interface as DelayOffsetStore: `read() -> {level: offset} | None`, `write(table)` (blocking)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[int, int] | None:
        return read_delay_file(self.path)

    def write(self, table: dict[int, int]) -> None:
        write_delay_file(self.path, table)
