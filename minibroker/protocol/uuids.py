"""Random (version 4) UUIDs without the ``uuid`` module, whose import costs start-up time."""

from __future__ import annotations

import os


def uuid4_bytes() -> bytes:
    """16 random bytes with the version (4) and variant (RFC 4122) bits set, as uuid.uuid4() makes."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return bytes(raw)


def uuid4_text() -> str:
    """The canonical 8-4-4-4-12 hex form, as Java's UUID.randomUUID().toString() prints it."""
    h = uuid4_bytes().hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
