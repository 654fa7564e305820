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

The first open of a store written by earlier versions (`topics.json`, `subscriptionGroup.json`,
`consumerOffset.json`, `delayOffset.json`, with their `.bak` fallbacks) imports those files in one
transaction and renames them `<name>.migrated`. `export_json(dir)` writes the four files in RocketMQ's
shapes on demand (`delaymq-broker export-config`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable

import structlog

from storage.config_store import atomic_write_bytes, read_json

log = structlog.get_logger(__name__)

DB_NAME = "meta.db"
SCHEMA_VERSION = 2  # 1: consumer_offset had one row per (key, queue); upgraded at open
TOPIC_FILE, GROUP_FILE, OFFSET_FILE, DELAY_FILE = (
    "topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json")
TABLES = ("topic", "subscription_group", "consumer_offset", "delay_offset")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS topic (name TEXT PRIMARY KEY, read_queue_nums INTEGER, write_queue_nums INTEGER,
    perm INTEGER, topic_filter_type TEXT, topic_sys_flag INTEGER, ord INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS subscription_group (name TEXT PRIMARY KEY, config TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS consumer_offsets (key TEXT PRIMARY KEY, offsets TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS delay_offset (level INTEGER PRIMARY KEY, offset INTEGER);
CREATE TABLE IF NOT EXISTS data_version (tbl TEXT PRIMARY KEY, counter INTEGER, timestamp INTEGER) WITHOUT ROWID;
"""

RETRY_BACKOFF_S = (0.05, 0.2, 1.0, 5.0)
_UNQUOTED_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')

TopicRow = tuple  # (name, read_queue_nums, write_queue_nums, perm, topic_filter_type, topic_sys_flag, ord)


class MetaStoreError(RuntimeError):
    """A commit of staged metadata failed (the changes stay staged and are retried)."""


class DataVersion:
    """RocketMQ's DataVersion of one table: a counter bumped at every change and the change's time."""

    __slots__ = ("counter", "timestamp")

    def __init__(self, counter: int = 0, timestamp: int = 0) -> None:
        self.counter = counter
        self.timestamp = timestamp

    def bump(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def to_json(self) -> dict:
        return {"counter": self.counter, "stateVersion": 0, "timestamp": self.timestamp}

    def as_tuple(self) -> tuple[int, int]:
        return self.counter, self.timestamp


class _Batch:
    """Changes staged since the last swap; the last change of a row wins."""

    __slots__ = ("topics", "groups", "offset_keys", "delay", "versions")

    def __init__(self) -> None:
        self.topics: dict[str, TopicRow | None] = {}
        self.groups: dict[str, str | None] = {}
        self.offset_keys: set[str] = set()  # "topic@group" whose row is rewritten from the live table
        self.delay: dict[int, int] = {}
        self.versions: dict[str, tuple[int, int]] = {}

    def __bool__(self) -> bool:
        return bool(self.topics or self.groups or self.offset_keys or self.delay or self.versions)

    def merge_under(self, newer: _Batch) -> _Batch:
        """`newer` with this (older, failed) batch's rows filled in where newer has none."""
        for mine, theirs in ((self.topics, newer.topics), (self.groups, newer.groups), (self.delay, newer.delay),
                             (self.versions, newer.versions)):
            for k, v in mine.items():
                theirs.setdefault(k, v)
        newer.offset_keys |= self.offset_keys
        return newer


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
        self._batch = _Batch()
        self._filling = 1         # number of the batch being staged
        self._committed = 0       # highest batch number committed
        self._waiters: dict[int, list[tuple[asyncio.Future, object]]] = {}
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
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if self.sync else 'NORMAL'}")
        conn.executescript(_SCHEMA)
        self._conn = conn
        row = conn.execute("SELECT v FROM meta WHERE k='schema'").fetchone()
        if row is None:
            self._initialise()
        elif int(row[0]) == 1:
            self._upgrade_from_1()
        elif int(row[0]) != SCHEMA_VERSION:
            raise MetaStoreError(f"{self.path}: schema version {row[0]}, this broker reads {SCHEMA_VERSION}")
        for tbl, counter, ts in conn.execute("SELECT tbl, counter, timestamp FROM data_version"):
            if tbl in self.versions:
                self.versions[tbl] = DataVersion(int(counter), int(ts))
        self._thread = threading.Thread(target=self._run, name="meta-store-writer", daemon=True)
        self._thread.start()
        return self

    def _initialise(self) -> None:
        """A new database: import today's JSON files if there are any (one transaction), then rename them."""
        conn = self._conn
        migrated = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            topics = _read_table(os.path.join(self.config_dir, TOPIC_FILE), "topicConfigTable")
            if topics is not None:
                table, dv = topics
                conn.executemany("INSERT OR REPLACE INTO topic VALUES (?,?,?,?,?,?,?)",
                                 (r for r in (_topic_row_from_json(n, d) for n, d in table.items()) if r))
                self._migrated_version(conn, "topic", dv)
                migrated.append(TOPIC_FILE)
            groups = _read_table(os.path.join(self.config_dir, GROUP_FILE), "subscriptionGroupTable")
            if groups is not None:
                table, dv = groups
                conn.executemany("INSERT OR REPLACE INTO subscription_group VALUES (?,?)",
                                 ((str(n), json.dumps(d, separators=(",", ":"))) for n, d in table.items()
                                  if isinstance(d, dict)))
                self._migrated_version(conn, "subscription_group", dv)
                migrated.append(GROUP_FILE)
            offsets = _read_table(os.path.join(self.config_dir, OFFSET_FILE), "offsetTable")
            if offsets is not None:
                table, dv = offsets
                conn.executemany("INSERT OR REPLACE INTO consumer_offsets VALUES (?,?)",
                                 ((str(k), encode_offsets({int(q): int(o) for q, o in qs.items()}))
                                  for k, qs in table.items() if isinstance(qs, dict)))
                self._migrated_version(conn, "consumer_offset", dv)
                migrated.append(OFFSET_FILE)
            delay = _read_delay_file(os.path.join(self.config_dir, DELAY_FILE))
            if delay is not None:
                conn.executemany("INSERT OR REPLACE INTO delay_offset VALUES (?,?)", delay.items())
                migrated.append(DELAY_FILE)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('created', ?)", (str(int(time.time() * 1000)),))
            if migrated:
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_from', ?)", (",".join(migrated),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        for name in migrated:
            for suffix in ("", ".bak"):
                p = os.path.join(self.config_dir, name + suffix)
                if os.path.exists(p):
                    os.replace(p, p + ".migrated")
        if migrated:
            log.info("meta_store.migrated", path=self.path, files=migrated)

    def _upgrade_from_1(self) -> None:
        """Schema 1 kept one consumer_offset row per (key, queue): fold them into one row per key."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            table: dict[str, dict[int, int]] = {}
            for key, qid, off in conn.execute("SELECT key, queue_id, offset FROM consumer_offset"):
                table.setdefault(key, {})[int(qid)] = int(off)
            conn.executemany("INSERT OR REPLACE INTO consumer_offsets VALUES (?,?)",
                             ((k, encode_offsets(q)) for k, q in table.items()))
            conn.execute("DROP TABLE consumer_offset")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        log.info("meta_store.upgraded", path=self.path, from_schema=1, to_schema=SCHEMA_VERSION, offset_keys=len(table))

    @staticmethod
    def _migrated_version(conn, tbl: str, dv: dict) -> None:
        conn.execute("INSERT OR REPLACE INTO data_version VALUES (?,?,?)",
                     (tbl, int(dv.get("counter") or 0), int(dv.get("timestamp") or 0)))

    def _read_conn(self) -> sqlite3.Connection:
        """A connection for reads on the calling thread (WAL: a consistent snapshot beside the writer)."""
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def load_topics(self) -> list[TopicRow]:
        with self._lock:
            return self._conn.execute("SELECT * FROM topic").fetchall()

    def load_groups(self) -> list[tuple[str, dict]]:
        with self._lock:
            rows = self._conn.execute("SELECT name, config FROM subscription_group").fetchall()
        out = []
        for name, text in rows:
            try:
                out.append((name, json.loads(text)))
            except ValueError as e:
                log.warning("meta_store.bad_group", group=name, error=str(e))
        return out

    def load_offsets(self) -> list[tuple[str, dict[int, int]]]:
        with self._lock:
            rows = self._conn.execute("SELECT key, offsets FROM consumer_offsets").fetchall()
        return [(key, decode_offsets(text)) for key, text in rows]

    def load_delay_offsets(self) -> dict[int, int]:
        with self._lock:
            return dict(self._conn.execute("SELECT level, offset FROM delay_offset").fetchall())

    # ---- staging (any thread; the loop's path is a dict store under an uncontended lock) ---
    def stage_topic(self, row: TopicRow | None, name: str) -> None:
        v = self.versions["topic"]
        v.bump()
        with self._lock:
            self._batch.topics[name] = row
            self._batch.versions["topic"] = v.as_tuple()
            self._cond.notify()

    def stage_group(self, name: str, config: dict | None) -> None:
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

    def committed(self, value=None) -> asyncio.Future:
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
                batch, self._batch = self._batch, _Batch()
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

    def _resolve(self, waiters: list[tuple[asyncio.Future, object]], exc: BaseException | None) -> None:
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

    def _write_row_by_row(self, b: _Batch, first_error: Exception) -> int:
        """After a failed batch: every row in its own transaction. Rows that fail while others succeed are
        set aside (logged with their key, counted in `rows_set_aside`); if none succeeds the failure is the
        disk's, not a row's, and `first_error` is raised (the batch stays staged and is retried)."""
        rows: list[_Batch] = []
        for name, row in b.topics.items():
            one = _Batch()
            one.topics[name] = row
            rows.append(one)
        for name, cfg in b.groups.items():
            one = _Batch()
            one.groups[name] = cfg
            rows.append(one)
        for key in b.offset_keys:
            one = _Batch()
            one.offset_keys.add(key)
            rows.append(one)
        if b.delay or b.versions:
            one = _Batch()
            one.delay, one.versions = b.delay, b.versions
            rows.append(one)
        written, bad = 0, []
        for one in rows:
            try:
                written += self._write(one)
            except Exception as e:
                bad.append((one, e))
        if written == 0 and bad:
            raise first_error
        for one, e in bad:
            self.rows_set_aside += 1
            log.error("meta_store.row_set_aside", path=self.path, error=repr(e),
                      row=repr(next(iter({**one.topics, **one.groups}), None) or sorted(one.offset_keys) or "versions"))
        return written

    def _write(self, b: _Batch) -> int:
        conn = self._conn
        n = 0
        conn.execute("BEGIN")
        try:
            if b.topics:
                up = [r for r in b.topics.values() if r is not None]
                dels = [(k,) for k, r in b.topics.items() if r is None]
                conn.executemany("INSERT OR REPLACE INTO topic VALUES (?,?,?,?,?,?,?)", up)
                conn.executemany("DELETE FROM topic WHERE name=?", dels)
                n += len(b.topics)
            if b.groups:
                conn.executemany("INSERT OR REPLACE INTO subscription_group VALUES (?,?)",
                                 [(k, t) for k, t in b.groups.items() if t is not None])
                conn.executemany("DELETE FROM subscription_group WHERE name=?",
                                 [(k,) for k, t in b.groups.items() if t is None])
                n += len(b.groups)
            if b.offset_keys:
                source = self.offset_source
                up, dels = [], []
                for key in b.offset_keys:
                    queues = source(key)
                    if queues:
                        up.append((key, encode_offsets(queues)))
                    else:
                        dels.append((key,))
                conn.executemany("INSERT OR REPLACE INTO consumer_offsets VALUES (?,?)", up)
                conn.executemany("DELETE FROM consumer_offsets WHERE key=?", dels)
                n += len(b.offset_keys)
            if b.delay:
                conn.executemany("INSERT OR REPLACE INTO delay_offset VALUES (?,?)", list(b.delay.items()))
                n += len(b.delay)
            if b.versions:
                conn.executemany("INSERT OR REPLACE INTO data_version VALUES (?,?,?)",
                                 [(t, c, ts) for t, (c, ts) in b.versions.items()])
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        return n

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

    def stats(self) -> dict:
        return {"commits": self.commits, "rows_written": self.rows_written, "failures": self.failures,
                "rows_set_aside": self.rows_set_aside,
                "last_commit_ms": round(self.last_commit_ms, 3), "pending_batch": self._filling - self._committed - 1,
                **{f"{t}_version": v.counter for t, v in self.versions.items()}}

    # ---- export --------------------------------------------------------------------------
    def export_json(self, out_dir: str | None = None) -> list[str]:
        """Write topics.json, subscriptionGroup.json, consumerOffset.json and delayOffset.json (RocketMQ's
        shapes) from one consistent read snapshot into `out_dir` (default: the config directory).
        Callable from another process while the broker runs, and in this one from any thread but the
        loop's (it first waits for what is staged here to be committed)."""
        out_dir = out_dir or self.config_dir
        if self._thread is not None and self._thread.is_alive():
            self.flush()  # this process's staged changes are part of the export
        conn = self._read_conn()
        try:
            conn.execute("BEGIN")
            versions = {t: {"counter": c, "stateVersion": 0, "timestamp": ts}
                        for t, c, ts in conn.execute("SELECT tbl, counter, timestamp FROM data_version")}
            empty = {"counter": 0, "stateVersion": 0, "timestamp": 0}
            topics = {r[0]: topic_json(r) for r in conn.execute("SELECT * FROM topic ORDER BY name")}
            groups = {}
            for name, text in conn.execute("SELECT name, config FROM subscription_group ORDER BY name"):
                try:
                    groups[name] = json.loads(text)
                except ValueError:
                    log.warning("meta_store.bad_group", group=name)
            offsets: dict[str, dict[str, int]] = {}
            for key, text in conn.execute("SELECT key, offsets FROM consumer_offsets ORDER BY key"):
                offsets[key] = {str(q): o for q, o in sorted(decode_offsets(text).items())}
            delay = dict(conn.execute("SELECT level, offset FROM delay_offset ORDER BY level"))
            conn.execute("COMMIT")
        finally:
            conn.close()
        written = []
        for name, doc in ((TOPIC_FILE, {"topicConfigTable": topics, "dataVersion": versions.get("topic", empty)}),
                          (GROUP_FILE, {"subscriptionGroupTable": groups,
                                        "dataVersion": versions.get("subscription_group", empty)}),
                          (OFFSET_FILE, {"offsetTable": offsets,
                                         "dataVersion": versions.get("consumer_offset", empty)})):
            path = os.path.join(out_dir, name)
            atomic_write_bytes(path, json.dumps(doc, indent=2, ensure_ascii=False).encode())
            written.append(path)
        path = os.path.join(out_dir, DELAY_FILE)
        atomic_write_bytes(path, format_delay_offsets(delay))
        written.append(path)
        return written


# ---- row and JSON shapes -----------------------------------------------------------------
def encode_offsets(queues: dict[int, int]) -> str:
    """A consumer_offsets row's `offsets`: `"<queueId>:<offset>,..."` (one row per topic@group: 10,000
    groups x 4 queues committing every second are 10,000 row writes a second, not 40,000)."""
    return ",".join(f"{q}:{o}" for q, o in list(queues.items()))


def decode_offsets(text: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in text.split(",") if text else ():
        q, _, o = part.partition(":")
        try:
            out[int(q)] = int(o)
        except ValueError:
            log.warning("meta_store.bad_offset", part=part[:64])
    return out


# ---- JSON shapes -------------------------------------------------------------------------
def topic_json(row: TopicRow) -> dict:
    name, rq, wq, perm, ftype, sysflag, order = row
    return {"topicName": name, "readQueueNums": rq, "writeQueueNums": wq, "perm": perm,
            "topicFilterType": ftype, "topicSysFlag": sysflag, "order": bool(order)}


def _topic_row_from_json(name, d) -> TopicRow | None:
    if not isinstance(d, dict):
        return None
    try:
        return (str(name or d.get("topicName")), int(d.get("readQueueNums", 16)), int(d.get("writeQueueNums", 16)),
                int(d.get("perm", 6)), str(d.get("topicFilterType") or "SINGLE_TAG"),
                int(d.get("topicSysFlag") or d.get("topicSynFlag") or 0), int(bool(d.get("order", False))))
    except (TypeError, ValueError) as e:
        log.warning("meta_store.bad_topic", topic=name, error=str(e))
        return None


def _read_table(path: str, root_key: str) -> tuple[dict, dict] | None:
    """(table, dataVersion) of a ConfigManager JSON file (falling back to `.bak`), None if absent."""
    if not (os.path.exists(path) or os.path.exists(path + ".bak")):
        return None
    doc = read_json(path)
    if not isinstance(doc, dict):
        return {}, {}
    table = doc.get(root_key)
    return (table if isinstance(table, dict) else {}), (doc.get("dataVersion") or {})


def parse_delay_offsets(text: str) -> dict[int, int]:
    """{level: offset} from delayOffset.json: fastjson (unquoted int keys) or plain JSON."""
    obj = json.loads(_UNQUOTED_KEY.sub(r'\1"\2"\3', text))
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise ValueError("no offsetTable object")
    return {int(k): int(v) for k, v in table.items()}


def format_delay_offsets(table: dict[int, int]) -> bytes:
    """delayOffset.json in RocketMQ's fastjson shape, `{"offsetTable":{1:12,2:0}}`."""
    body = ",\n\t\t".join(f"{level}:{offset}" for level, offset in sorted(table.items()))
    return ('{\n\t"offsetTable":{\n\t\t' + body + "\n\t}\n}").encode() if table else b'{\n\t"offsetTable":{}\n}'


def _read_delay_file(path: str) -> dict[int, int] | None:
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        try:
            return parse_delay_offsets(text)
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("meta_store.delay_offsets_unreadable", path=candidate, error=str(e))
    return None


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
