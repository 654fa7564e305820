"""RocketMQ 5's AutoSwitch HA frames and its epoch file (cluster-ha.md §4.6), sans-io.

Every frame starts with the sender's HAConnectionState ordinal (int32); big-endian throughout.

Slave -> master:
    handshake  [state=1 int32][isSyncFromLastFile int16][isAsyncLearner int16][slaveBrokerId int64]   16 B
    ack        [state=2 int32][slave maxPhyOffset int64]                                            12 B
Master -> slave:
    handshake  [state=1 int32][bodySize int32][master maxPhyOffset int64][lastEpoch int32]         20 B
               + bodySize/12 epoch entries [epoch int32][startOffset int64]
    transfer   [state=2 int32][bodySize int32][startOffset int64][epoch int32][epochStartOffset int64]
               [confirmOffset int64] + bodySize raw CommitLog bytes (0 = heartbeat)                36 B + N

The epoch file (`epochFileCheckpoint` in the store root; Apache's CheckpointFile of EpochEntry lines):
    "<count>\\n<crc>\\n<epoch>-<startOffset>\\n..." where crc is the CRC32 of the entry lines (each
    followed by the line separator) masked with 0x7FFFFFFF, 0 meaning "not checked".
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from codec.buffers import BytesLike
from codec.errors import CodecError


class HAConnectionState(IntEnum):
    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


SLAVE_HANDSHAKE = struct.Struct(">ihhq")  # 16
SLAVE_ACK = struct.Struct(">iq")  # 12
MASTER_HANDSHAKE = struct.Struct(">iiqi")  # 20
MASTER_TRANSFER = struct.Struct(">iiqiqq")  # 36
EPOCH_ENTRY = struct.Struct(">iq")  # 12
STATE = struct.Struct(">i")
MAX_BODY = 64 << 20  # larger is not an AutoSwitch frame (Apache: haTransferBatchSize, 32 KiB; 1,000 epochs)

EPOCH_FILE = "epochFileCheckpoint"
LINE_SEPARATOR = "\n"  # Java's System.lineSeparator() on the hosts RocketMQ runs on
NOT_CHECKED_CRC = 0


# ---- slave -> master ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    slave_broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True, slots=True)
class SlaveAck:
    max_offset: int


def encode_slave_handshake(h: SlaveHandshake) -> bytes:
    return SLAVE_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, int(h.sync_from_last_file), int(h.async_learner),
                                h.slave_broker_id)


def encode_slave_ack(max_offset: int) -> bytes:
    return SLAVE_ACK.pack(HAConnectionState.TRANSFER, max_offset)


class SlaveFrameDecoder:
    """Master side: bytes from a slave -> its complete frames, in order."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: BytesLike) -> list[SlaveHandshake | SlaveAck]:
        buf = self._buf
        buf += data
        out: list[SlaveHandshake | SlaveAck] = []
        pos, n = 0, len(buf)
        while n - pos >= STATE.size:
            (state,) = STATE.unpack_from(buf, pos)
            if state == HAConnectionState.HANDSHAKE:
                if n - pos < SLAVE_HANDSHAKE.size:
                    break
                _, last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack_from(buf, pos)
                out.append(SlaveHandshake(broker_id, last_file == 1, learner == 1))
                pos += SLAVE_HANDSHAKE.size
            elif state == HAConnectionState.TRANSFER:
                if n - pos < SLAVE_ACK.size:
                    break
                _, offset = SLAVE_ACK.unpack_from(buf, pos)
                if offset < 0:
                    raise CodecError(f"negative AutoSwitch ack offset {offset}")
                out.append(SlaveAck(offset))
                pos += SLAVE_ACK.size
            else:
                raise CodecError(f"AutoSwitch slave frame in state {state}, expected HANDSHAKE(1) or TRANSFER(2)")
        if pos:
            del buf[:pos]
        return out


# ---- master -> slave ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MasterHandshake:
    max_offset: int
    last_epoch: int
    entries: tuple[EpochEntry, ...]


@dataclass(frozen=True, slots=True)
class MasterTransfer:
    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body: bytes


def encode_master_handshake(h: MasterHandshake) -> bytes:
    head = MASTER_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, len(h.entries) * EPOCH_ENTRY.size, h.max_offset,
                                 h.last_epoch)
    return head + b"".join(EPOCH_ENTRY.pack(e.epoch, e.start_offset) for e in h.entries)


def encode_transfer_header(offset: int, size: int, epoch: int, epoch_start_offset: int, confirm_offset: int) -> bytes:
    return MASTER_TRANSFER.pack(HAConnectionState.TRANSFER, size, offset, epoch, epoch_start_offset, confirm_offset)


def encode_master_transfer(t: MasterTransfer) -> bytes:
    return encode_transfer_header(t.offset, len(t.body), t.epoch, t.epoch_start_offset, t.confirm_offset) + t.body


class MasterFrameDecoder:
    """Slave side: bytes from the master -> its complete frames, in order."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: BytesLike) -> list[MasterHandshake | MasterTransfer]:
        buf = self._buf
        buf += data
        out: list[MasterHandshake | MasterTransfer] = []
        pos, n = 0, len(buf)
        while n - pos >= MASTER_HANDSHAKE.size:
            state, size, offset, epoch = MASTER_HANDSHAKE.unpack_from(buf, pos)
            if size < 0 or size > MAX_BODY:
                raise CodecError(f"bad AutoSwitch frame body size {size}")
            if state == HAConnectionState.HANDSHAKE:
                if size % EPOCH_ENTRY.size:
                    raise CodecError(f"AutoSwitch handshake body of {size} bytes is no whole number of epoch entries")
                if n - pos < MASTER_HANDSHAKE.size + size:
                    break
                start = pos + MASTER_HANDSHAKE.size
                entries = tuple(EpochEntry(*EPOCH_ENTRY.unpack_from(buf, start + i))
                                for i in range(0, size, EPOCH_ENTRY.size))
                out.append(MasterHandshake(offset, epoch, entries))
                pos = start + size
            elif state == HAConnectionState.TRANSFER:
                if n - pos < MASTER_TRANSFER.size + size:
                    break
                _, _, _, _, epoch_start, confirm = MASTER_TRANSFER.unpack_from(buf, pos)
                start = pos + MASTER_TRANSFER.size
                out.append(MasterTransfer(offset, epoch, epoch_start, confirm, bytes(buf[start:start + size])))
                pos = start + size
            else:
                raise CodecError(f"AutoSwitch master frame in state {state}, expected HANDSHAKE(1) or TRANSFER(2)")
        if pos:
            del buf[:pos]
        return out


# ---- the epoch file -------------------------------------------------------------------------------
def _crc(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def encode_epoch_file(entries: list[EpochEntry]) -> str:
    lines = "".join(f"{e.epoch}-{e.start_offset}{LINE_SEPARATOR}" for e in entries)
    return f"{len(entries)}{LINE_SEPARATOR}{_crc(lines)}{LINE_SEPARATOR}{lines}"


def decode_epoch_file(text: str) -> list[EpochEntry]:
    """The entries of an epoch file; CodecError when the count or the CRC does not match."""
    rows = text.splitlines()
    if len(rows) < 2:
        raise CodecError("an epoch file starts with its entry count and CRC lines")
    try:
        count, crc = int(rows[0]), int(rows[1])
    except ValueError as e:
        raise CodecError(f"epoch file header: {e}") from None
    entries: list[EpochEntry] = []
    seen = ""
    for row in rows[2:]:
        seen += row + LINE_SEPARATOR
        parts = row.split("-")
        if len(parts) != 2:
            continue  # Apache's serializer skips a line it cannot read
        try:
            entries.append(EpochEntry(int(parts[0]), int(parts[1])))
        except ValueError as e:
            raise CodecError(f"epoch file line {row!r}: {e}") from None
    if len(entries) != count:
        raise CodecError(f"epoch file says {count} entries, holds {len(entries)}")
    if crc != NOT_CHECKED_CRC and crc != _crc(seen):
        raise CodecError(f"epoch file CRC {crc} does not match its entries ({_crc(seen)})")
    return entries
