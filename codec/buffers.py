"""The buffer shapes the codec reads and writes (type names only; nothing here runs)."""

from __future__ import annotations

# One contiguous buffer: what struct.unpack_from, slicing and bytes() accept.
BytesLike = bytes | bytearray | memoryview
# A command body: one buffer, or pieces written back to back (never copied on the way out).
Body = BytesLike | list[BytesLike] | tuple[BytesLike, ...]
