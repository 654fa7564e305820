"""The JSON files RocketMQ's tools expect, exported on demand from `meta.db` (`delaymq-broker export-config`,
`MetaStore.export_json`)."""

from __future__ import annotations

import json
import os

import structlog

from storage.config_store import atomic_write_bytes
from storage.meta_schema import (
    DELAY_FILE,
    GROUP_FILE,
    OFFSET_FILE,
    TOPIC_FILE,
    decode_offsets,
    read_conn,
    topic_json,
    write_delay_file,
)

log = structlog.get_logger(__name__)


def export_json(db_path: str, out_dir: str) -> list[str]:
    """Write topics.json, subscriptionGroup.json, consumerOffset.json and delayOffset.json (RocketMQ's
    shapes) from one consistent read snapshot of the database at `db_path` into `out_dir`; any process
    may call it while the broker writes (WAL)."""
    conn = read_conn(db_path)
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
    write_delay_file(path, delay)
    written.append(path)
    return written

