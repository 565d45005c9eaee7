"""``message.format.version``: which record magic a topic keeps on disk, as Kafka 0.10-2.x had it.

Kafka 3.x accepts the setting and ignores it (every topic keeps magic 2), and 4.0 removed it with
magic 0 and 1. minibroker honours it because it is the only way to watch the v0/v1 offset rules
happen on a real log (docs/teaching.md): ``0.8.x``/``0.9.x`` keep magic 0, ``0.10.x`` magic 1,
``0.11.0`` and later magic 2.

Values are Kafka's metadata versions (``MetadataVersion`` in Kafka 3.x): a full version such as
``0.10.0-IV1`` or ``3.0-IV1``, or a release such as ``0.10.2``, ``0.10.2.1``, ``2.8`` or ``2.8.1``
(the release's last internal version). Kafka keeps three parts of a ``0.x`` release and two of a
later one, so ``0.10`` is not a version while ``2.8`` is.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MESSAGE_FORMAT_VERSION", "MessageFormatVersion", "magic_for_version"]

DEFAULT_MESSAGE_FORMAT_VERSION = "3.0-IV1"

# Every metadata version Kafka 3.9 knows, oldest first, grouped by the record magic it writes.
_VERSIONS_BY_MAGIC = {
    0: ("0.8.0", "0.8.1", "0.8.2", "0.9.0"),
    1: ("0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1", "0.10.1-IV2", "0.10.2-IV0"),
    2: (
        "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0", "2.0-IV0", "2.0-IV1",
        "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0", "2.3-IV1", "2.4-IV0",
        "2.4-IV1", "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2", "2.8-IV0", "2.8-IV1",
        "3.0-IV0", "3.0-IV1", "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1", "3.3-IV2", "3.3-IV3",
        "3.4-IV0", "3.5-IV0", "3.5-IV1", "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2", "3.7-IV0",
        "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4", "3.8-IV0", "3.9-IV0",
    ),
}


def _table() -> dict[str, tuple[str, int]]:
    """Full and release spellings -> (full version, magic); a release names its last version."""
    table: dict[str, tuple[str, int]] = {}
    for magic, versions in _VERSIONS_BY_MAGIC.items():
        for full in versions:
            table[full] = (full, magic)
            table[full.split("-", 1)[0]] = (full, magic)  # later IVs of a release overwrite earlier
    return table


_TABLE = _table()


class MessageFormatVersion:
    """A parsed ``message.format.version`` value: the full version and the magic it keeps."""

    __slots__ = ("version", "magic")

    def __init__(self, text: str):
        parts = text.strip().split(".")
        keep = 3 if text.strip().startswith("0.") else 2
        key = ".".join(parts[:keep]) if len(parts) > keep else text.strip()
        found = _TABLE.get(key)
        if found is None:
            raise ValueError(f"Version {text} is not a valid version")
        self.version, self.magic = found

    def __repr__(self) -> str:
        return f"MessageFormatVersion({self.version!r}, magic {self.magic})"


def magic_for_version(text: str) -> int:
    """The record magic a topic with ``message.format.version=text`` keeps (ValueError if invalid)."""
    return MessageFormatVersion(text).magic


class MessageFormatValidator:
    """Config validator: a version Kafka's ``MetadataVersion`` would parse."""

    __slots__ = ()

    def __call__(self, value) -> None:
        if value is not None:
            MessageFormatVersion(str(value))

    def describe(self) -> str:
        return "[0.8.0, 0.8.1, 0.8.2, 0.9.0, 0.10.0-IV0, ..., 0.11.0-IV0, ..., 3.0-IV1, ..., 3.9-IV0]"


def deprecation_warning(key: str, value: str, topic: str | None = None) -> str:
    """The warning logged when the setting is given: Kafka 3.x logs one too (and then ignores it); Kafka 4
    no longer knows the key."""
    magic = magic_for_version(value)
    scope = f"Topic configuration {key}" if topic is not None else f"Broker configuration {key}"
    stores = f"topic {topic} stores" if topic is not None else "new topics store"
    return (
        f"{scope} with value `{value}` was deprecated in Kafka 3.0 and removed in Apache Kafka 4.0 (Kafka "
        f"3.x ignores it); minibroker honours it for teaching: {stores} record batches of magic {magic}"
    )
