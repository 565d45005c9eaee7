"""Small metadata files in Apache Kafka's formats, written atomically (temp file, fsync, rename).

- ``recovery-point-offset-checkpoint`` / ``log-start-offset-checkpoint`` (log dir root):
  ``0`` (version), the entry count, then one ``<topic> <partition> <offset>`` line per partition.
- ``leader-epoch-checkpoint`` (partition dir): ``0``, the count, then ``<epoch> <start offset>`` lines.
- ``partition.metadata`` (partition dir): ``version: 0`` and ``topic_id: <uuid>`` lines.
- ``meta.properties`` (log dir root): Java properties, ``version=1``, ``cluster.id``, ``node.id``.
- ``.kafka_cleanshutdown`` (log dir root): present only after a clean shutdown.

Uuids are written as Kafka writes them: the 16 bytes in URL-safe base64 without padding (22 chars).
"""

from __future__ import annotations

import base64
import os
import time

from minibroker.protocol.uuids import uuid4_bytes

__all__ = [
    "CLEAN_SHUTDOWN_FILE", "LOG_START_OFFSET_CHECKPOINT", "RECOVERY_POINT_CHECKPOINT",
    "LEADER_EPOCH_CHECKPOINT", "PARTITION_METADATA", "META_PROPERTIES",
    "read_offset_checkpoint", "write_offset_checkpoint", "read_epoch_checkpoint",
    "write_epoch_checkpoint", "read_partition_metadata", "write_partition_metadata",
    "read_properties", "write_properties", "uuid_to_str", "str_to_uuid", "random_uuid",
    "write_atomically", "CheckpointError",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class CheckpointError(Exception):
    """A checkpoint file exists but cannot be parsed."""


def uuid_to_str(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def str_to_uuid(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a 16-byte uuid: {text!r}")
    return raw


def random_uuid() -> bytes:
    """A random (v4) uuid as Kafka's Uuid.randomUuid makes it: never all zeros, never printed with a
    leading '-' (it would read as a command-line option)."""
    while True:
        raw = uuid4_bytes()
        if raw != bytes(16) and not uuid_to_str(raw).startswith("-"):
            return raw


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, text: str, *, sync: bool = True, empty: str | None = None,
                     mode: int = 0o666) -> None:
    """Replace ``path`` with ``text`` (temp file, fsync, rename, fsync dir).

    Unchanged content is not rewritten: a restart would otherwise pay several fsyncs for nothing.
    ``mode`` (before the umask) is the new file's permission: 0o600 for files holding secrets.
    Nor is ``empty`` (the text a missing file reads as) written where no file exists yet, so a
    new log dir starts without files that say nothing.
    """
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        if text == empty:
            return
    except UnicodeDecodeError:
        pass
    tmp = path + ".tmp"
    if mode != 0o666 and os.path.exists(tmp):
        os.unlink(tmp)  # O_CREAT applies the mode only to a new file
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def _read_lines(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return None


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; empty when the file is missing."""
    lines = _read_lines(path)
    if lines is None:
        return {}
    try:
        if lines[0].strip() != "0":
            raise CheckpointError(f"{path}: unknown version {lines[0]!r}")
        count = int(lines[1])
        result = {}
        for line in lines[2:2 + count]:
            topic, partition, offset = line.split(" ")
            result[(topic, int(partition))] = int(offset)
        if len(result) != count:
            raise CheckpointError(f"{path}: expected {count} entries, found {len(result)}")
        return result
    except (IndexError, ValueError) as exc:
        raise CheckpointError(f"{path}: malformed ({exc})") from exc


def write_offset_checkpoint(path: str, offsets: dict[tuple[str, int], int], *, sync: bool = True) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomically(path, "\n".join(lines) + "\n", sync=sync, empty="0\n0\n")


def read_epoch_checkpoint(path: str) -> list[tuple[int, int]]:
    lines = _read_lines(path)
    if lines is None:
        return []
    try:
        if lines[0].strip() != "0":
            raise CheckpointError(f"{path}: unknown version {lines[0]!r}")
        count = int(lines[1])
        entries = [tuple(int(x) for x in line.split(" ")) for line in lines[2:2 + count]]
        if len(entries) != count or any(len(e) != 2 for e in entries):
            raise CheckpointError(f"{path}: malformed entries")
        return entries  # type: ignore[return-value]
    except (IndexError, ValueError) as exc:
        raise CheckpointError(f"{path}: malformed ({exc})") from exc


def write_epoch_checkpoint(path: str, entries: list[tuple[int, int]], *, sync: bool = True) -> None:
    lines = ["0", str(len(entries))] + [f"{epoch} {offset}" for epoch, offset in entries]
    write_atomically(path, "\n".join(lines) + "\n", sync=sync)


def read_partition_metadata(path: str) -> bytes | None:
    """The topic id stored in ``partition.metadata``, or None when the file is missing."""
    lines = _read_lines(path)
    if lines is None:
        return None
    fields = dict(line.split(": ", 1) for line in lines if ": " in line)
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CheckpointError(f"{path}: malformed {fields!r}")
    return str_to_uuid(fields["topic_id"].strip())


def write_partition_metadata(path: str, topic_id: bytes) -> None:
    write_atomically(path, f"version: 0\ntopic_id: {uuid_to_str(topic_id)}\n")


def read_properties(path: str) -> dict[str, str] | None:
    lines = _read_lines(path)
    if lines is None:
        return None
    props = {}
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    return props


def write_properties(path: str, props: dict[str, str]) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y")
    text = "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    write_atomically(path, text)
