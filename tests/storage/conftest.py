"""Helpers for storage tests: real records (codec.record.encode_record) and real stores in tmp_path."""

from __future__ import annotations

from typing import Any

import pytest

from codec.properties import properties_to_string
from codec.record import MessageRecord, encode_record
from codec.tags import java_hash
from storage.message_store import MessageStore, PutRequest, StoreConfig
from storage.store_types import tags_hash_code

SEG = 64 * 1024


def record(topic: str = "T", queue_id: int = 0, body: bytes = b"hello", tags: str | None = None,
           keys: str | None = None, uniq: str | None = None, born_ts: int = 1_700_000_000_000,
           props: dict | None = None) -> bytearray:
    p = dict(props or {})
    if tags:
        p["TAGS"] = tags
    if keys:
        p["KEYS"] = keys
    if uniq:
        p["UNIQ_KEY"] = uniq
    rec = MessageRecord(topic=topic, body=body, queue_id=queue_id, born_timestamp=born_ts,
                        born_host=("10.0.0.2", 5555), store_host=("10.0.0.1", 10911), properties=p)
    return encode_record(rec, properties_to_string(p).encode())


def request(topic: str = "T", queue_id: int = 0, body: bytes = b"hello", tags: str | None = None,
            keys: str | None = None, uniq: str | None = None, deliver_delay_ms: int = -1,
            props: dict | None = None) -> PutRequest:
    ks = tuple(k for k in (keys or "").split(" ") if k) + ((uniq,) if uniq else ())
    return PutRequest(record(topic, queue_id, body, tags, keys, uniq, props=props), topic, queue_id,
                      java_hash(tags) if tags else 0, ks, deliver_delay_ms)


def config(path, **kw) -> StoreConfig:
    base: dict[str, Any] = dict(store_path=str(path), mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 100,
                disk_max_used_ratio=1.0, max_hash_slot_num=4096, max_index_num=50_000)
    base.update(kw)
    return StoreConfig(**base)


def open_store(path, tags_code_of=tags_hash_code, **kw) -> MessageStore:
    s = MessageStore(config(path, **kw), tags_code_of=tags_code_of)
    s.load()
    return s


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "store")
    yield s
    s.close()
