"""The MetaStore's database and row shapes: the SQLite schema of `<store>/config/meta.db`, its upgrade, the
import of a store written by earlier versions (the four ConfigManager JSON files, at the first open) and the
JSON shapes RocketMQ's tools read (`topics.json`, `subscriptionGroup.json`, `consumerOffset.json`,
`delayOffset.json`). Functions of a connection: no threads, no staging (storage.meta_store does those).

The first open of a store written by earlier versions (`topics.json`, `subscriptionGroup.json`,
`consumerOffset.json`, `delayOffset.json`, with their `.bak` fallbacks) imports those files in one
transaction and renames them `<name>.migrated`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import structlog

from codec.fastjson import JsonBody, loads_lenient
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


TopicRow = tuple[str, int, int, int, str, int, int]  # (name, read_queue_nums, write_queue_nums, perm, topic_filter_type, topic_sys_flag, ord)


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

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": 0, "timestamp": self.timestamp}

    def as_tuple(self) -> tuple[int, int]:
        return self.counter, self.timestamp



def open_db(path: str, sync: bool) -> sqlite3.Connection:
    """Open (or create) the database in WAL mode with the schema's tables; the writer's connection."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
    conn.executescript(_SCHEMA)
    return conn


def read_conn(path: str) -> sqlite3.Connection:
    """A connection for reads on the calling thread (WAL: a consistent snapshot beside the writer)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def prepare(conn: sqlite3.Connection, path: str, config_dir: str) -> dict[str, tuple[int, int]]:
    """Bring an opened database to SCHEMA_VERSION (a new one imports the JSON files of `config_dir`);
    returns the stored dataVersion of each table."""
    row = conn.execute("SELECT v FROM meta WHERE k='schema'").fetchone()
    if row is None:
        initialise(conn, path, config_dir)
    elif int(row[0]) == 1:
        upgrade_from_1(conn, path)
    elif int(row[0]) != SCHEMA_VERSION:
        raise MetaStoreError(f"{path}: schema version {row[0]}, this broker reads {SCHEMA_VERSION}")
    return {tbl: (int(counter), int(ts))
            for tbl, counter, ts in conn.execute("SELECT tbl, counter, timestamp FROM data_version")}


def initialise(conn: sqlite3.Connection, path: str, config_dir: str) -> None:
    """A new database: import today's JSON files if there are any (one transaction), then rename them."""
    migrated = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for file, root_key, insert, version_key, rows_of in _IMPORTED_TABLES:
            found = _read_table(os.path.join(config_dir, file), root_key)
            if found is not None:
                table, dv = found
                conn.executemany(insert, rows_of(table))
                _migrated_version(conn, version_key, dv)
                migrated.append(file)
        delay = read_delay_file(os.path.join(config_dir, DELAY_FILE))
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
            p = os.path.join(config_dir, name + suffix)
            if os.path.exists(p):
                os.replace(p, p + ".migrated")
    if migrated:
        log.info("meta_store.migrated", path=path, files=migrated)


def upgrade_from_1(conn: sqlite3.Connection, path: str) -> None:
    """Schema 1 kept one consumer_offset row per (key, queue): fold them into one row per key."""
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
    log.info("meta_store.upgraded", path=path, from_schema=1, to_schema=SCHEMA_VERSION, offset_keys=len(table))


def _topic_rows(table: dict[str, Any]) -> Iterator[TopicRow]:
    return (r for r in (_topic_row_from_json(n, d) for n, d in table.items()) if r)


def _group_rows(table: dict[str, Any]) -> Iterator[tuple[str, str]]:
    return ((str(n), json.dumps(d, separators=(",", ":"))) for n, d in table.items() if isinstance(d, dict))


def _offset_rows(table: dict[str, Any]) -> Iterator[tuple[str, str]]:
    return ((str(k), encode_offsets({int(q): int(o) for q, o in qs.items()}))
            for k, qs in table.items() if isinstance(qs, dict))


# the ConfigManager files a first open imports (delayOffset.json aside: no dataVersion, its own shape):
# (file, its table's key, the row insert, the data_version key, the rows of the file's table)
_IMPORTED_TABLES: tuple[tuple[str, str, str, str, Callable[[dict[str, Any]], Iterator[tuple[Any, ...]]]], ...] = (
    (TOPIC_FILE, "topicConfigTable", "INSERT OR REPLACE INTO topic VALUES (?,?,?,?,?,?,?)", "topic", _topic_rows),
    (GROUP_FILE, "subscriptionGroupTable", "INSERT OR REPLACE INTO subscription_group VALUES (?,?)",
     "subscription_group", _group_rows),
    (OFFSET_FILE, "offsetTable", "INSERT OR REPLACE INTO consumer_offsets VALUES (?,?)", "consumer_offset",
     _offset_rows),
)


def _migrated_version(conn: sqlite3.Connection, tbl: str, dv: dict[str, Any]) -> None:
    conn.execute("INSERT OR REPLACE INTO data_version VALUES (?,?,?)",
                 (tbl, int(dv.get("counter") or 0), int(dv.get("timestamp") or 0)))


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
def topic_json(row: TopicRow) -> dict[str, Any]:
    name, rq, wq, perm, ftype, sysflag, order = row
    return {"topicName": name, "readQueueNums": rq, "writeQueueNums": wq, "perm": perm,
            "topicFilterType": ftype, "topicSysFlag": sysflag, "order": bool(order)}


def _topic_row_from_json(name: object, d: object) -> TopicRow | None:
    if not isinstance(d, dict):
        return None
    try:
        return (str(name or d.get("topicName")), int(d.get("readQueueNums", 16)), int(d.get("writeQueueNums", 16)),
                int(d.get("perm", 6)), str(d.get("topicFilterType") or "SINGLE_TAG"),
                int(d.get("topicSysFlag") or d.get("topicSynFlag") or 0), int(bool(d.get("order", False))))
    except (TypeError, ValueError) as e:
        log.warning("meta_store.bad_topic", topic=name, error=str(e))
        return None


def _read_table(path: str, root_key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(table, dataVersion) of a ConfigManager JSON file (falling back to `.bak`), None if absent."""
    if not (os.path.exists(path) or os.path.exists(path + ".bak")):
        return None
    doc = read_json(path)
    if not isinstance(doc, dict):
        return {}, {}
    table = doc.get(root_key)
    return (table if isinstance(table, dict) else {}), (doc.get("dataVersion") or {})


def parse_delay_offsets(text: JsonBody) -> dict[int, int]:
    """{level: offset} from delayOffset.json or a GET_ALL_DELAY_OFFSET body: fastjson (unquoted int
    keys) or plain JSON. Raises ValueError (codec.errors.CodecError) on anything else."""
    obj = loads_lenient(text)
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise ValueError("no offsetTable object")
    return {int(k): int(v) for k, v in table.items()}


def format_delay_offsets(table: dict[int, int]) -> bytes:
    """delayOffset.json in RocketMQ's fastjson shape, `{"offsetTable":{1:12,2:0}}`."""
    body = ",\n\t\t".join(f"{level}:{offset}" for level, offset in sorted(table.items()))
    return ('{\n\t"offsetTable":{\n\t\t' + body + "\n\t}\n}").encode() if table else b'{\n\t"offsetTable":{}\n}'


def read_delay_file(path: str) -> dict[int, int] | None:
    """delayOffset.json at `path` (or its `.bak` when the file is missing or unreadable); None if neither reads."""
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


def write_delay_file(path: str, table: dict[int, int]) -> None:
    """delayOffset.json at `path` in RocketMQ's shape, atomically (tmp + fsync + .bak + rename)."""
    atomic_write_bytes(path, format_delay_offsets(table))
