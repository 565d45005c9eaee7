"""``minibroker explain``: a partition as Kafka stores it, drawn as a self-contained HTML page.

What the page shows, for one segment at a time (``explain_page.html``, package data, renders it
from one JSON object embedded in the page or fetched from ``--serve``):

- the segment as a byte map: batches end to end at their file positions, each header field
  labelled and colour-coded (v2 batches; v0/v1 messages, with the inner messages of compressed
  wrappers decompressed and their stored and absolute offsets);
- the ``.index`` and ``.timeindex`` entries as links into the log, why the index is sparse
  (``index.interval.bytes``), and, for an offset typed in, the path a fetch takes: the segment
  (floor by base offset), the binary search in the index (every probe), the header scan from the
  entry found to the first batch whose last offset >= the target;
- append traces: a batch as the producer sent it and as it was stored, byte against byte, and the
  path the validator took (``--append-log``: the broker's ``minibroker.append.bytes`` DEBUG lines;
  ``--replay``: raw produce bytes validated here by the broker's own ``validate_and_assign``);
- log start offset, high watermark and log end offset.

Bounded whatever the segment size: a page holds at most ``PAGE_BATCHES`` batches
(``PAGE_BYTES`` of log) read from positions the index gives, never the whole file; the offset
index is embedded whole up to ``2**(SEARCH_TREE_DEPTH + 1) - 1`` entries, else as the entries a
binary search can probe in its first ``SEARCH_TREE_DEPTH + 1`` steps plus those around the shown
window (so a search for any offset of the window is exact), and the whole index is drawn from
``OVERVIEW_TICKS`` samples. ``--serve`` builds each page on demand.

Read-only: files are opened ``O_RDONLY`` (``LogSegment(read_only=True)``, indexes loaded into
anonymous memory), the data dir's ``.lock`` is never taken, and a partial last batch (one being
written, or a torn tail) ends the scan as it ends the broker's.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import re
import struct
import sys
import threading
import time
from array import array
from collections import deque
from collections.abc import Iterator
from importlib import resources
from urllib.parse import parse_qs, quote, unquote, urlsplit

PAGE_BATCHES = 500  # batches on one page
PAGE_BYTES = 8 << 20  # log bytes on one page (at least one batch)
FULL_READ_LIMIT = 1 << 20  # batches up to this size are read whole (CRC checked, wrappers opened)
INNER_SHOWN = 20  # inner messages listed per v0/v1 wrapper
INNER_PAGE_LIMIT = 2000  # inner messages listed per page
INNER_MAX_DECOMPRESSED = 16 << 20
SEARCH_TREE_DEPTH = 13  # embedded: every entry a binary search can probe in its first 14 steps
OVERVIEW_TICKS = 200  # index entries drawn on the whole-segment bar
TRACES_SHOWN = 20  # append traces on one page
TRACE_LATEST = 5  # when none touches the page: the last few of the partition
SEGMENTS_LISTED = 2000
DEFAULT_INDEX_INTERVAL = 4096  # Kafka's log.index.interval.bytes
APPEND_BYTES_LOGGER = "minibroker.append.bytes"

_SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
_PARTITION_RE = re.compile(r"^(.+)-(\d+)$")
_TRACE_RE = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+): offsets (?P<first>-?\d+)\.\.(?P<last>-?\d+) path=(?P<path>\S+) "
    r"sent_len=(?P<sent_len>\d+) stored_len=(?P<stored_len>\d+) sent=(?P<sent>[0-9a-f]*) "
    r"stored=(?P<stored>[0-9a-f]*)$"
)
_TEXT_MARK = f"[{APPEND_BYTES_LOGGER}] "
_PAGE_TEMPLATE = "explain_page.html"


class ExplainError(Exception):
    """A path or input explain cannot use; the CLI prints it and exits 1."""


# ---------------------------------------------------------------------------------------------
# the partition on disk


@dataclasses.dataclass(frozen=True)
class PartitionFiles:
    """Where a partition's files are: its directory, name, and (for a SEGMENT-FILE argument) the one
    segment to show. ``topic``/``partition`` are None for a directory not named ``<topic>-<n>``."""

    directory: str
    topic: str | None
    partition: int | None
    only_segment: int | None = None

    @property
    def name(self) -> str:
        if self.topic is None:
            return os.path.basename(os.path.abspath(self.directory))
        return f"{self.topic}-{self.partition}"

    @property
    def data_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.directory))

    @classmethod
    def from_path(cls, path: str) -> PartitionFiles:
        """A partition directory, or one of its ``.log``/``.index``/``.timeindex`` files."""
        if os.path.isdir(path):
            if not is_partition_dir(path):
                raise ExplainError(
                    f"{path} is not a partition directory (a directory named <topic>-<partition> holding "
                    f"<20-digit base offset>.log segments)"
                )
            topic, partition = _split_partition_name(os.path.basename(os.path.abspath(path)))
            return cls(path, topic, partition)
        if os.path.isfile(path):
            m = _SEGMENT_RE.match(os.path.basename(path))
            if m is None:
                raise ExplainError(
                    f"{path} is not a segment file (<20-digit base offset>.log, .index or .timeindex)"
                )
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isfile(os.path.join(directory, log_file_name(int(m.group(1))))):
                raise ExplainError(f"{path}: its segment has no .log file")
            name = os.path.basename(directory)
            topic, partition = _split_partition_name(name) if _PARTITION_RE.match(name) else (None, None)
            return cls(directory, topic, partition, int(m.group(1)))
        raise ExplainError(f"{path}: no such file or directory")

    def segment_bases(self) -> list[int]:
        """Base offsets of the segments (``.log`` files), ascending."""
        if self.only_segment is not None:
            return [self.only_segment]
        return _segment_bases(self.directory)

    def all_segment_bases(self) -> list[int]:
        return _segment_bases(self.directory)

    def open_segment(self, base: int) -> SegmentView:
        return SegmentView(self.directory, base)

    def log_start_offset(self, bases: list[int]) -> tuple[int, str]:
        """As the broker loads it: the ``log-start-offset-checkpoint`` entry of this partition in the
        parent data dir, never below the first segment's base; else the first segment's base."""
        first = bases[0] if bases else 0
        if self.topic is not None:
            from minibroker.storage import checkpoints as ckpt

            path = os.path.join(self.data_dir, ckpt.LOG_START_OFFSET_CHECKPOINT)
            try:
                offsets = ckpt.read_offset_checkpoint(path)
            except ckpt.CheckpointError:
                offsets = {}
            if (self.topic, self.partition) in offsets:
                return max(offsets[(self.topic, self.partition)], first), ckpt.LOG_START_OFFSET_CHECKPOINT
        return first, "first segment's base offset"

    def cleaner_checkpoint(self) -> int | None:
        """This partition's entry in the data dir's ``cleaner-offset-checkpoint`` (the log cleaner's
        first dirty offset: every offset below it has been cleaned), or None (no entry, no file)."""
        if self.topic is None:
            return None
        from minibroker.storage import checkpoints as ckpt
        from minibroker.storage.cleaner import CLEANER_OFFSET_CHECKPOINT

        try:
            offsets = ckpt.read_offset_checkpoint(os.path.join(self.data_dir, CLEANER_OFFSET_CHECKPOINT))
        except (ckpt.CheckpointError, OSError):
            return None
        return offsets.get((self.topic, self.partition))

    def topic_overrides(self) -> dict[str, str]:
        """The topic's config overrides from ``minibroker-topics.json`` in the data dir, if any."""
        if self.topic is None:
            return {}
        from minibroker.storage.log_manager import TOPICS_FILE

        try:
            with open(os.path.join(self.data_dir, TOPICS_FILE), encoding="utf-8") as f:
                topics = json.load(f).get("topics", {})
            return {k: str(v) for k, v in (topics.get(self.topic, {}).get("configs") or {}).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def leader_epoch(self) -> int:
        """The latest leader epoch of ``leader-epoch-checkpoint`` (0 when there is none)."""
        from minibroker.storage import checkpoints as ckpt

        try:
            entries = ckpt.read_epoch_checkpoint(os.path.join(self.directory, ckpt.LEADER_EPOCH_CHECKPOINT))
        except (ckpt.CheckpointError, OSError, ValueError):
            return 0
        return entries[-1][0] if entries else 0

    def sizes(self) -> list[list[int]]:
        """``[[base, .log size], ...]``: what the served page polls to notice appends."""
        out = []
        for base in self.segment_bases():
            try:
                out.append([base, os.stat(os.path.join(self.directory, log_file_name(base))).st_size])
            except FileNotFoundError:
                continue
        return out


def log_file_name(base: int) -> str:
    """``<20-digit base offset>.log`` (storage's naming; imported late: storage costs ~0.15 s to load,
    and every console tool's parser imports this module)."""
    from minibroker.storage.segment import segment_file_name

    return segment_file_name(base, ".log")


def _split_partition_name(name: str) -> tuple[str, int]:
    m = _PARTITION_RE.match(name)
    if m is None:
        raise ExplainError(f"{name} is not named <topic>-<partition>")
    return m.group(1), int(m.group(2))


def _segment_bases(directory: str) -> list[int]:
    bases = []
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise ExplainError(f"{directory}: {exc.strerror or exc}") from None
    for name in names:
        m = _SEGMENT_RE.match(name)
        if m and m.group(2) == "log":
            bases.append(int(m.group(1)))
    return sorted(bases)


def is_partition_dir(path: str) -> bool:
    """A directory named ``<topic>-<partition>`` with segments or a partition's metadata files."""
    name = os.path.basename(os.path.abspath(path))
    if not os.path.isdir(path) or not _PARTITION_RE.match(name) or name.endswith(("-delete", "-future")):
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(_SEGMENT_RE.match(n) for n in names) or "partition.metadata" in names


def partition_dirs(data_dir: str) -> list[str]:
    """The partition directories of a data dir, by name."""
    try:
        names = sorted(os.listdir(data_dir))
    except OSError as exc:
        raise ExplainError(f"{data_dir}: {exc.strerror or exc}") from None
    return [n for n in names if is_partition_dir(os.path.join(data_dir, n))]


class SegmentView:
    """One segment opened read-only: ``LogSegment(read_only=True)`` (the ``.log`` O_RDONLY, both
    indexes loaded into anonymous memory), its indexes cut to their written entries (an active
    index is preallocated: zero entries follow the real ones) and to entries inside the ``.log`` as
    it was when opened (the broker may append meanwhile; nothing after that size is read).
    Not thread-safe; ``close()`` when done."""

    def __init__(self, directory: str, base: int):
        from minibroker.storage.segment import LogSegment

        self.segment = LogSegment(
            directory, base, index_max_bytes=8, index_interval_bytes=DEFAULT_INDEX_INTERVAL,
            active=False, read_only=True,
        )
        self.base = base
        self.size = self.segment.size
        self.index = self.segment.index
        self.time_index = self.segment.time_index
        self.index_file_bytes = _file_size(self.index.path)
        self.time_index_file_bytes = _file_size(self.time_index.path)
        self.index.truncate_to_entries(_written_entries(self.index))
        self.index.truncate_to_position(self.size)
        self.time_index.truncate_to_entries(_written_entries(self.time_index))
        self.corrupt_at: tuple[int, str] | None = None  # (position, why) of an impossible entry, once seen
        self._last: tuple | None = None

    def close(self) -> None:
        self.segment.close()

    def __enter__(self) -> SegmentView:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def log_name(self) -> str:
        return os.path.basename(self.segment.log_path)

    def entries(self, position: int, end: int | None = None) -> Iterator:
        """Headers (``framing.EntryInfo``) of the whole entries from ``position``; an impossible
        size ends the walk (``self.corrupt_at`` says where)."""
        try:
            yield from self.segment.iter_entries(position, end)
        except ValueError as exc:
            m = re.search(r" at (\d+)$", str(exc))
            self.corrupt_at = (int(m.group(1)) if m else position, str(exc))

    def tail(self) -> tuple[int, object | None]:
        """(end of the last whole entry, that entry's header or None): a scan from the last index
        entry, so at most one index interval is read."""
        if self._last is None:
            _, start = self.index.last_entry()
            end, last = start, None
            for info in self.entries(start):
                end, last = info.position + info.size, info
            if last is None and start:  # an index entry past a cut tail: from the start
                for info in self.entries(0):
                    end, last = info.position + info.size, info
            self._last = (end, last)
        return self._last

    def next_offset(self) -> int:
        _, last = self.tail()
        return self.base if last is None else last.last_offset + 1

    def batch_start_at(self, position: int) -> int:
        """Start of the entry holding byte ``position`` (the last entry's start past the data)."""
        _, start = self.index.lookup_position(position)
        found = start
        for info in self.entries(start):
            if info.position > position:
                break
            found = info.position
        return found

    def window_infos(self, start: int) -> tuple[list, bool]:
        """Up to ``PAGE_BATCHES`` entry headers from ``start`` within ``PAGE_BYTES``; and whether
        more entries follow."""
        infos: list = []
        for info in self.entries(start):
            if infos and (len(infos) >= PAGE_BATCHES or info.position + info.size - start > PAGE_BYTES):
                return infos, True
            infos.append(info)
        return infos, False

    def previous_page_start(self, start: int) -> int | None:
        """Where the page before the one at ``start`` begins: the last ``PAGE_BATCHES`` entries before
        it (within ``PAGE_BYTES``), found by scanning forward from index entries further and further
        back. None when ``start`` is the first entry."""
        if start <= 0:
            return None
        slot = _last_slot_below(self.index, start)
        step = 1
        while True:
            scan_from = self.index.entry(slot)[1] if slot >= 0 else 0
            positions: deque = deque()
            full = False
            for info in self.entries(scan_from, start):
                positions.append(info.position)
                while len(positions) > PAGE_BATCHES or (
                    len(positions) > 1 and start - positions[0] > PAGE_BYTES
                ):
                    positions.popleft()
                    full = True
            if full or len(positions) >= PAGE_BATCHES or scan_from == 0:
                return positions[0] if positions else 0
            slot = max(-1, slot - step)
            step *= 2

    def page_start_for_offset(self, offset: int) -> tuple[int, object | None]:
        """The page showing the batch a fetch at ``offset`` returns (``LogSegment.translate_offset``,
        the broker's own read path): the first page when it holds the batch, else from the index
        entry the search finds when the scan to the batch fits on one page, else from a quarter
        page before the batch. Also the batch's header
        (None when no batch of this segment holds ``offset`` or later)."""
        found = self.segment.translate_offset(offset)
        if found is None:
            return self.last_page_start(), None
        first_page, _ = self.window_infos(0)
        if first_page and first_page[-1].position >= found.position:
            return 0, found  # the first page holds it: pages stay where the pager puts them
        _, floor = self.index.lookup(offset)
        before: deque = deque()
        for info in self.entries(floor, found.position):
            before.append(info)
            while len(before) > PAGE_BATCHES // 4 or (
                len(before) > 1 and found.position + found.size - before[0].position > PAGE_BYTES // 2
            ):
                before.popleft()
        end = found.position + found.size
        if not before or (before[0].position == floor and end - floor <= PAGE_BYTES):
            return floor, found
        return before[0].position, found

    def last_page_start(self) -> int:
        end, last = self.tail()
        if last is None:
            return 0
        start = self.previous_page_start(end)
        return 0 if start is None else start


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _written_entries(index) -> int:
    """Entries before the all-zero tail of a preallocated index (as dump-log trims it): the written
    entries increase, so they are a prefix and a binary search finds its end."""
    from minibroker.storage.index import OffsetIndex

    def written(slot: int) -> bool:
        a, b = index.entry(slot)
        if isinstance(index, OffsetIndex):  # (base + relative offset, position)
            return (a - index.base_offset, b) != (0, 0)
        return (a, b - index.base_offset) != (0, 0)  # (timestamp, base + relative offset)

    lo, hi = 0, index.entries
    while lo < hi:
        mid = (lo + hi) // 2
        if written(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _last_slot_below(index, position: int) -> int:
    """Slot of the last offset index entry whose position is < ``position``, or -1."""
    lo, hi, found = 0, index.entries - 1, -1
    while lo <= hi:
        mid = (lo + hi) >> 1
        if index.entry(mid)[1] < position:
            found, lo = mid, mid + 1
        else:
            hi = mid - 1
    return found


def _first_slot_at_or_after(index, value: int, column: int) -> int:
    lo, hi = 0, index.entries
    while lo < hi:
        mid = (lo + hi) >> 1
        if index.entry(mid)[column] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------------------------------------
# fields of an entry, for the byte map and the traces

# (name, offset in the batch, size, struct format, colour group)
def _v2_layout():
    from minibroker.records import v2

    return (
        ("baseOffset", v2.BASE_OFFSET_OFFSET, 8, ">q", "offset"),
        ("batchLength", v2.LENGTH_OFFSET, 4, ">i", "length"),
        ("partitionLeaderEpoch", v2.PARTITION_LEADER_EPOCH_OFFSET, 4, ">i", "epoch"),
        ("magic", v2.MAGIC_OFFSET, 1, ">b", "magic"),
        ("crc", v2.CRC_OFFSET, 4, ">I", "crc"),
        ("attributes", v2.ATTRIBUTES_OFFSET, 2, ">h", "attributes"),
        ("lastOffsetDelta", v2.LAST_OFFSET_DELTA_OFFSET, 4, ">i", "delta"),
        ("baseTimestamp", v2.BASE_TIMESTAMP_OFFSET, 8, ">q", "timestamp"),
        ("maxTimestamp", v2.MAX_TIMESTAMP_OFFSET, 8, ">q", "timestamp"),
        ("producerId", v2.PRODUCER_ID_OFFSET, 8, ">q", "producer"),
        ("producerEpoch", v2.PRODUCER_EPOCH_OFFSET, 2, ">h", "producer"),
        ("baseSequence", v2.BASE_SEQUENCE_OFFSET, 4, ">i", "producer"),
        ("recordCount", v2.RECORDS_COUNT_OFFSET, 4, ">i", "count"),
    )


_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _attributes_text(magic: int, attrs: int) -> str:
    parts = [_CODECS.get(attrs & 0x07, f"codec {attrs & 0x07}")]
    if magic >= 1:
        parts.append("LogAppendTime" if attrs & 0x08 else "CreateTime")
    if magic == 2:
        if attrs & 0x10:
            parts.append("transactional")
        if attrs & 0x20:
            parts.append("control")
        if attrs & 0x40:
            parts.append("delete horizon")
    return ", ".join(parts)


def _preview(raw: bytes | memoryview, limit: int = 40) -> str:
    text = bytes(raw[:limit]).decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "." for c in text)
    return text + ("…" if len(raw) > limit else "")


def entry_fields(buf, start: int, end: int) -> list[list]:
    """The fields of the entry at ``buf[start:]`` that lie before ``end`` (a trace's hex may stop
    mid-entry): ``[name, offset from start, size, value text or None when cut, colour group]``."""
    if end - start < 17:
        return [["?", 0, end - start, None, "records"]]
    magic = buf[start + 16]
    declared = 12 + struct.unpack_from(">i", buf, start + 8)[0]
    avail = end - start

    def value(off: int, size: int, fmt: str):
        return struct.unpack_from(fmt, buf, start + off)[0] if off + size <= avail else None

    fields: list[list] = []
    if magic == 2:
        for name, off, size, fmt, group in _v2_layout():
            v = value(off, size, fmt)
            if name == "attributes" and v is not None:
                v = f"0x{v & 0xFFFF:04x} ({_attributes_text(2, v)})"
            fields.append([name, off, size, v, group])
        if declared > 61:
            fields.append(["records", 61, declared - 61, f"{declared - 61} bytes", "records"])
        return fields
    for name, off, size, fmt, group in (
        ("offset", 0, 8, ">q", "offset"), ("size", 8, 4, ">i", "length"), ("crc", 12, 4, ">I", "crc"),
        ("magic", 16, 1, ">b", "magic"), ("attributes", 17, 1, ">B", "attributes"),
    ):
        v = value(off, size, fmt)
        if name == "attributes" and v is not None:
            v = f"0x{v:02x} ({_attributes_text(magic, v)})"
        fields.append([name, off, size, v, group])
    p = 18
    if magic == 1:
        fields.append(["timestamp", 18, 8, value(18, 8, ">q"), "timestamp"])
        p = 26
    compressed = avail > 17 and buf[start + 17] & 0x07
    for what in ("key", "value"):
        n = value(p, 4, ">i")
        fields.append([f"{what}Length", p, 4, n, what])
        p += 4
        if n is None or p >= declared:
            break
        if n > 0:
            if what == "value" and compressed:
                text = f"{n} bytes compressed: the inner message set"
            elif p + n <= avail:
                text = _preview(memoryview(buf)[start + p : start + p + n])
            else:
                text = None
            fields.append([what, p, n, text, what])
            p += n
    return fields


def _entries_in(buf, end: int) -> list[tuple[int, int]]:
    """(start, declared size) of the entries laid end to end in ``buf[:end]`` (the last may be cut)."""
    out, pos = [], 0
    while end - pos >= 12:
        size = 12 + struct.unpack_from(">i", buf, pos + 8)[0]
        if size < 26:
            break
        out.append((pos, size))
        pos += size
    return out


# ---------------------------------------------------------------------------------------------
# one page of data


def describe_batch(view: SegmentView, info, inner_budget: list[int]) -> dict:
    """One entry of the window: header fields, CRC check, and for a v0/v1 wrapper its inner
    messages (``inner_budget[0]`` inner messages may still be listed on this page)."""
    fd = view.segment.file.fileno()
    whole = info.size <= FULL_READ_LIMIT
    raw = os.pread(fd, info.size if whole else min(info.size, 61), info.position)
    d = {
        "position": info.position, "size": info.size, "magic": info.magic,
        "base_offset": info.base_offset, "last_offset": info.last_offset,
        "count": info.record_count if info.record_count >= 0 else None,
        "max_timestamp": info.max_timestamp,
        "fields": entry_fields(raw, 0, len(raw)),
        "crc_valid": None,
    }
    if info.magic == 2 and len(raw) >= 61:
        d.update(_v2_cleaner_facts(raw))
    if not whole or len(raw) < info.size:
        d["note"] = f"{info.size} bytes: header only, CRC not checked (batches over {FULL_READ_LIMIT} bytes)"
        return d
    from minibroker.records import legacy
    from minibroker.records.batches import batch_at

    try:
        batch = batch_at(raw, 0)
    except (ValueError, struct.error) as exc:
        d["note"] = f"cannot read this entry: {exc}"
        return d
    d["crc_valid"] = batch.is_valid
    d["codec"] = batch.compression_name
    d["timestamp_type"] = str(batch.timestamp_type)
    if info.magic < 2 and batch.compression:
        try:
            wrapper = legacy.parse_message(raw, 0)
            _, inner = legacy.inner_messages(wrapper, max_decompressed_bytes=INNER_MAX_DECOMPRESSED)
        except Exception as exc:  # noqa: BLE001 - LegacyFormatError, the codec's KafkaError: damaged bytes
            d["note"] = f"cannot decompress the inner messages: {type(exc).__name__}: {exc}"
            return d
        last_inner = inner[-1].offset
        rows = []
        for m in inner[: max(0, min(INNER_SHOWN, inner_budget[0]))]:
            absolute = m.offset if info.magic == 0 else wrapper.offset - (last_inner - m.offset)
            rows.append({
                "stored_offset": m.offset, "offset": absolute, "magic": m.magic, "timestamp": m.timestamp,
                "size": m.size, "key": None if m.key is None else _preview(m.key),
                "value": None if m.value is None else _preview(m.value), "crc_valid": m.crc_valid,
            })
        inner_budget[0] -= len(rows)
        d["inner"] = rows
        d["inner_count"] = len(inner)
        d["count"] = len(inner)
        first_inner = inner[0].offset
        d["base_offset"] = first_inner if info.magic == 0 else wrapper.offset - (last_inner - first_inner)
    return d


def _v2_cleaner_facts(raw: bytes) -> dict:
    """What the log cleaner left in a v2 header: the delete horizon (attributes bit 6: baseTimestamp
    holds deleteHorizonMs, until when the batch's tombstones and markers are kept) and, for a
    header-only batch (record count 0, 61 bytes), which kind: a producer's last batch kept for its
    sequence state, or (no producer) the placeholder keeping a cleaned segment's last offsets."""
    from minibroker.records import v2

    attrs = struct.unpack_from(">h", raw, v2.ATTRIBUTES_OFFSET)[0]
    out: dict = {}
    if attrs & v2.DELETE_HORIZON_MASK:
        out["delete_horizon_ms"] = struct.unpack_from(">q", raw, v2.BASE_TIMESTAMP_OFFSET)[0]
    if struct.unpack_from(">i", raw, v2.RECORDS_COUNT_OFFSET)[0] == 0:
        producer_id = struct.unpack_from(">q", raw, v2.PRODUCER_ID_OFFSET)[0]
        out["header_only"] = {
            "kind": "producer" if producer_id >= 0 else "placeholder",
            "producer_id": producer_id,
            "producer_epoch": struct.unpack_from(">h", raw, v2.PRODUCER_EPOCH_OFFSET)[0],
            "base_sequence": struct.unpack_from(">i", raw, v2.BASE_SEQUENCE_OFFSET)[0],
            "control": bool(attrs & 0x20),
        }
    return out


def offset_gaps(batches: list[dict], *, at_segment_start: int | None, next_base: int | None,
                checkpoint: int | None) -> list[dict]:
    """The offsets no batch of this window holds: between consecutive batches, before the first
    (``at_segment_start``: the segment's base, when the window starts the segment) and after the last
    (``next_base``: the next segment's base, when the window ends the segment). ``compacted``: the
    gap lies below the cleaner checkpoint, its offsets removed by compaction. A v0/v1 wrapper too
    big to open has no known first offset: no gap is drawn before it."""

    def gap(first: int, last: int, position: int, where: str) -> dict:
        return {"first": first, "last": last, "position": position, "where": where,
                "compacted": checkpoint is not None and last < checkpoint}

    out: list[dict] = []
    if not batches:
        return out

    def base_known(b: dict) -> bool:
        return b["magic"] == 2 or b["count"] is not None

    first = batches[0]
    if at_segment_start is not None and base_known(first) and first["base_offset"] > at_segment_start:
        out.append(gap(at_segment_start, first["base_offset"] - 1, first["position"], "segment-start"))
    for prev, b in zip(batches, batches[1:], strict=False):
        if base_known(b) and b["base_offset"] > prev["last_offset"] + 1:
            out.append(gap(prev["last_offset"] + 1, b["base_offset"] - 1, b["position"], "between"))
    last = batches[-1]
    if next_base is not None and next_base > last["last_offset"] + 1:
        end = last["position"] + last["size"]
        out.append(gap(last["last_offset"] + 1, next_base - 1, end, "segment-end"))
    return out


def _search_slots(n: int, depth: int) -> set[int]:
    """Every slot a largest-lower-bound binary search over ``n`` entries can probe in its first
    ``depth + 1`` steps (the top of its search tree)."""
    slots: set[int] = set()
    stack = [(0, n - 1, 0)]
    while stack:
        lo, hi, d = stack.pop()
        if lo > hi:
            continue
        mid = (lo + hi) >> 1
        slots.add(mid)
        if d < depth:
            stack.append((lo, mid - 1, d + 1))
            stack.append((mid + 1, hi, d + 1))
    return slots


def index_search(view: SegmentView, offset: int) -> dict:
    """The binary search of the offset index for ``offset``, as ``OffsetIndex.lookup`` runs it,
    with every probe; then the header scan from the entry found to the batch a fetch returns."""
    index = view.index
    target = offset - view.base
    lo, hi, found, probes = 0, index.entries - 1, -1, []
    while lo <= hi:
        mid = (lo + hi) >> 1
        absolute, position = index.entry(mid)
        le = absolute - view.base <= target
        probes.append({"slot": mid, "relative": absolute - view.base, "position": position, "le": le})
        if le:
            found, lo = mid, mid + 1
        else:
            hi = mid - 1
    start = index.entry(found)[1] if found >= 0 else 0
    scanned = 0
    batch = None
    for info in view.entries(start):
        if info.last_offset >= offset:
            batch = info
            break
        scanned += 1
    answer = view.segment.translate_offset(offset)  # the broker's own read path decides
    return {
        "offset": offset, "segment": view.base, "probes": probes, "floor_slot": found,
        "scan_from": start, "scanned": scanned,
        "position": None if answer is None else answer.position,
        "agrees": (answer is None and batch is None) or (
            answer is not None and batch is not None and answer.position == batch.position),
    }


def build_page(
    files: PartitionFiles,
    *,
    segment: int | None = None,
    offset: int | None = None,
    position: int | None = None,
    append_log: str | None = None,
    replay: dict | None = None,
    mode: str = "static",
) -> dict:
    """The JSON the page renders: partition facts, the segment list, one window of one segment with
    its index entries, the embedded search entries, traces. Bounded whatever the segment size."""
    bases = files.segment_bases()
    all_bases = files.all_segment_bases() if files.only_segment is not None else bases
    log_start, log_start_source = files.log_start_offset(all_bases)
    overrides = files.topic_overrides()
    interval = overrides.get("index.interval.bytes")
    page: dict = {
        "tool": "minibroker explain",
        "mode": mode,
        "generated_ms": int(time.time() * 1000),
        "limits": {"page_batches": PAGE_BATCHES, "page_bytes": PAGE_BYTES, "search_depth": SEARCH_TREE_DEPTH},
        "partition": {
            "name": files.name, "topic": files.topic, "partition": files.partition,
            "directory": os.path.abspath(files.directory),
            "log_start_offset": log_start, "log_start_source": log_start_source,
            "index_interval_bytes": int(interval) if interval else DEFAULT_INDEX_INTERVAL,
            "index_interval_source": "topic config (minibroker-topics.json)" if interval else
            "Kafka's default; the broker's log.index.interval.bytes may set another",
            "overrides": overrides,
        },
        "segments": [],
        "segment": None,
        "window": None,
        "traces": [],
        "replay": replay,
        "focus": offset,
    }
    sizes = {b: _file_size(os.path.join(files.directory, log_file_name(b))) for b in all_bases}
    page["segments"] = [
        {"base": b, "size": sizes[b], "file": log_file_name(b)} for b in all_bases[:SEGMENTS_LISTED]
    ]
    page["segments_total"] = len(all_bases)
    page["signature"] = files.sizes()
    leo = log_start
    if all_bases:
        with files.open_segment(all_bases[-1]) as last:
            leo = last.next_offset()
    page["partition"]["log_end_offset"] = leo
    page["partition"]["high_watermark"] = leo  # a single node: the HW follows the log end at once
    checkpoint = files.cleaner_checkpoint()
    page["partition"]["cleaner_checkpoint"] = checkpoint
    page["partition"]["cleanup_policy"] = overrides.get("cleanup.policy", "delete")
    ends = dict(zip(all_bases, [*all_bases[1:], leo], strict=True))  # a segment's offsets: [base, end)
    for s in page["segments"]:
        s["end_offset"] = ends[s["base"]]
        s.update(_cleaned_state(s["base"], s["end_offset"], checkpoint))
    if not bases:
        page["traces"] = _traces_for(files, append_log, None, None)
        return page
    if segment is None:
        if offset is not None:
            below = [b for b in bases if b <= offset]
            segment = below[-1] if below else bases[0]
        else:
            segment = bases[-1]
    if segment not in bases:
        raise ExplainError(f"{files.name} has no segment with base offset {segment} (it has {_short(bases)})")
    with files.open_segment(segment) as view:
        page["segment"] = _segment_facts(view, segment == all_bases[-1])
        page["segment"]["end_offset"] = ends[segment]
        page["segment"].update(_cleaned_state(segment, ends[segment], checkpoint))
        found = None
        if offset is not None:
            start, found = view.page_start_for_offset(offset)
        elif position is not None:
            start = view.batch_start_at(max(0, position))
        else:
            start = 0
        page["window"] = _window(view, start)
        later = [b for b in all_bases if b > segment]
        page["window"]["gaps"] = offset_gaps(
            page["window"]["batches"], at_segment_start=segment if start == 0 else None,
            next_base=later[0] if later and page["window"]["next_start"] is None else None,
            checkpoint=checkpoint,
        )
        page["index"] = _index_data(view, page["window"], offset)
        page["timeindex"] = _time_index_data(view, page["window"])
        if offset is not None:
            page["lookup"] = index_search(view, offset)
            page["lookup"]["batch_in_window"] = found is not None and any(
                b["position"] == found.position for b in page["window"]["batches"])
        window = page["window"]
        page["traces"] = _traces_for(files, append_log, window.get("first_offset"), window.get("last_offset"))
    return page


def _cleaned_state(base: int, end: int, checkpoint: int | None) -> dict:
    """A segment holding offsets ``[base, end)`` against the cleaner checkpoint: ``cleaned`` when all
    of them lie below it, ``partly_cleaned`` when the checkpoint falls inside (a pass whose offset
    map filled stops there)."""
    if checkpoint is None:
        return {"cleaned": False, "partly_cleaned": False}
    return {"cleaned": end <= checkpoint and end > base, "partly_cleaned": base < checkpoint < end}


def _short(values: list[int]) -> str:
    return ", ".join(map(str, values[:10])) + (" ..." if len(values) > 10 else "")


def _segment_facts(view: SegmentView, active: bool) -> dict:
    end, last = view.tail()
    facts = {
        "base": view.base, "file": view.log_name, "size": view.size, "data_end": end,
        "next_offset": view.next_offset(), "active": active,
        "index_entries": view.index.entries, "index_file_bytes": view.index_file_bytes,
        "timeindex_entries": view.time_index.entries, "timeindex_file_bytes": view.time_index_file_bytes,
        "last_page_start": view.last_page_start(),
    }
    if end < view.size:
        facts["tail"] = {"position": end, "bytes": view.size - end,
                         "reason": view.corrupt_at[1] if view.corrupt_at else
                         "a partial entry: one being written, or a torn tail"}
    return facts


def _window(view: SegmentView, start: int) -> dict:
    infos, more = view.window_infos(start)
    budget = [INNER_PAGE_LIMIT]
    batches = [describe_batch(view, info, budget) for info in infos]
    end = infos[-1].position + infos[-1].size if infos else start
    return {
        "start": start, "end": end,
        "first_offset": batches[0]["base_offset"] if batches else None,
        "last_offset": batches[-1]["last_offset"] if batches else None,
        "batches": batches,
        "prev_start": view.previous_page_start(start),
        "next_start": end if more else None,
    }


def _pack_entries(view: SegmentView, slots) -> str:
    values = array("i")
    for slot in sorted(slots):
        absolute, position = view.index.entry(slot)
        values.extend((slot, absolute - view.base, position))
    if sys.byteorder == "little":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def max_search_probes(entries: int) -> int:
    """The most probes a largest-lower-bound binary search over ``entries`` slots makes: the height of its
    search tree, floor(log2 entries) + 1; none for an empty index."""
    return entries.bit_length()


def _index_data(view: SegmentView, window: dict, focus: int | None) -> dict:
    n = view.index.entries
    first = _first_slot_at_or_after(view.index, window["start"], 1)
    last = _first_slot_at_or_after(view.index, window["end"], 1)  # exclusive
    shown = [[s, view.index.entry(s)[0] - view.base, view.index.entry(s)[1]] for s in range(first, last)]
    complete = n <= 2 ** (SEARCH_TREE_DEPTH + 1) - 1
    if complete:
        slots: set[int] = set(range(n))
    else:  # the search tree's top, then every slot the rest of a search ending in the window can probe
        slots = _search_slots(n, SEARCH_TREE_DEPTH)
        margin = n // 2 ** (SEARCH_TREE_DEPTH + 1) + 2
        slots.update(range(max(0, first - 1 - margin), min(n, last + margin)))
        if focus is not None:
            slots.update(p["slot"] for p in index_search(view, focus)["probes"])
    ticks = sorted({round(i * (n - 1) / (OVERVIEW_TICKS - 1)) for i in range(OVERVIEW_TICKS)}) if n > 1 else (
        [0] if n else [])
    return {
        "count": n, "complete": complete, "window": shown, "first_slot": first,
        "max_probes": max_search_probes(n),
        "search": _pack_entries(view, slots), "search_count": len(slots),
        "ticks": [[s, view.index.entry(s)[0] - view.base, view.index.entry(s)[1]] for s in ticks],
    }


def _time_index_data(view: SegmentView, window: dict) -> dict:
    ti = view.time_index
    shown = []
    if window["batches"]:
        lo, hi = window["first_offset"], window["last_offset"]
        first = _first_slot_at_or_after(ti, lo, 1)
        for slot in range(first, ti.entries):
            ts, absolute = ti.entry(slot)
            if absolute > hi:
                break
            shown.append([slot, ts, absolute - view.base])
    return {"count": ti.entries, "window": shown}


# ---------------------------------------------------------------------------------------------
# append traces


@dataclasses.dataclass
class AppendTrace:
    """A batch (or the batches of one partition's append) as the producer sent it and as stored."""

    source: str  # "append log" (with its line number) or "replay"
    topic: str | None
    partition: int | None
    first_offset: int
    last_offset: int
    path: str
    sent_len: int
    stored_len: int
    sent: bytes
    stored: bytes
    line: int | None = None
    error: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["sent"], d["stored"] = self.sent.hex(), self.stored.hex()
        d.update(analyse_trace(self.sent, self.stored, self.sent_len, self.stored_len, self.path))
        return d


def parse_append_line(line: str) -> AppendTrace | None:
    """One ``minibroker.append.bytes`` record, from a text or a JSON log line; None for other lines."""
    line = line.rstrip("\r\n")
    message = None
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if isinstance(record, dict) and record.get("logger") == APPEND_BYTES_LOGGER:
            message = record.get("message")
    else:
        at = line.find(_TEXT_MARK)
        if at >= 0:
            message = line[at + len(_TEXT_MARK):]
    if not isinstance(message, str):
        return None
    m = _TRACE_RE.match(message)
    if m is None:
        return None
    return AppendTrace(
        "append log", m["topic"], int(m["partition"]), int(m["first"]), int(m["last"]), m["path"],
        int(m["sent_len"]), int(m["stored_len"]), bytes.fromhex(m["sent"]), bytes.fromhex(m["stored"]),
    )


def read_append_log(
    path: str, topic: str | None, partition: int | None, first: int | None = None, last: int | None = None,
) -> tuple[list[AppendTrace], int]:
    """The traces of one partition in a broker log: those whose offsets meet ``first..last`` (at most
    ``TRACES_SHOWN``) or, when none does, the last ``TRACE_LATEST``. Streams the file, keeping only
    those. Also the number of traces of the partition in the file."""
    needle = f"{topic}-{partition}: offsets " if topic is not None else ": offsets "
    hits: list[AppendTrace] = []
    latest: deque = deque(maxlen=TRACE_LATEST)
    total = 0
    try:
        f = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise ExplainError(f"--append-log {path}: {exc.strerror or exc}") from None
    with f:
        for number, line in enumerate(f, 1):
            if needle not in line:
                continue
            trace = parse_append_line(line)
            if trace is None or (topic is not None and (trace.topic, trace.partition) != (topic, partition)):
                continue
            trace.line = number
            total += 1
            if first is not None and trace.last_offset >= first and trace.first_offset <= last:
                if len(hits) < TRACES_SHOWN:
                    hits.append(trace)
            latest.append(trace)
    return (hits if hits else list(latest)), total


def analyse_trace(sent: bytes, stored: bytes, sent_len: int, stored_len: int, path: str) -> dict:
    """Fields of both sides, which bytes and fields changed, and what that says about the path."""
    sent_entries, stored_entries = _entries_in(sent, len(sent)), _entries_in(stored, len(stored))
    sent_fields = _numbered_fields(sent, sent_entries)
    stored_fields = _numbered_fields(stored, stored_entries)
    changed_bytes = None
    if sent_len == stored_len:  # same layout: compare byte against byte
        changed_bytes = []
        n = min(len(sent), len(stored))
        i = 0
        while i < n:
            if sent[i] != stored[i]:
                j = i
                while j < n and sent[j] != stored[j]:
                    j += 1
                changed_bytes.append([i, j])
                i = j
            else:
                i += 1
    sent_magic = sent[16] if len(sent) > 16 else None
    stored_magic = stored[16] if len(stored) > 16 else None
    sent_values = {(f[0], f[1]): f[4] for f in sent_fields} if sent_magic == stored_magic else {}
    changed_fields = []  # by name, entry by entry; none across formats (their layouts differ)
    for f in stored_fields:
        key = (f[0], f[1])
        before = sent_values.get(key)
        if before is not None and f[4] is not None and before != f[4]:
            changed_fields.append(f"{f[1]}" if f[0] == 0 else f"{f[1]} (entry {f[0]})")
    return {
        "sent_fields": sent_fields, "stored_fields": stored_fields, "changed_bytes": changed_bytes,
        "changed_fields": changed_fields, "sent_magic": sent_magic, "stored_magic": stored_magic,
        "explanation": _explain_path(path, sent_magic, stored_magic, changed_fields),
    }


def _numbered_fields(buf: bytes, entries: list[tuple[int, int]]) -> list[list]:
    """``[entry number, name, position in buf, size, value, group]`` for every field of every entry."""
    return [
        [i, name, start + off, size, value, group]
        for i, (start, _) in enumerate(entries)
        for name, off, size, value, group in entry_fields(buf, start, len(buf))
    ]


def _explain_path(path: str, sent_magic, stored_magic, changed: list[str]) -> str:
    names = {c.split(" ")[0] for c in changed}
    if path == "in-place":
        if sent_magic == 2:
            text = ("in-place: the v2 batch was stored as sent, with baseOffset set to the log end offset "
                    "and partitionLeaderEpoch to the leader's epoch. Both lie before the CRC's range (it "
                    "covers attributes to the end), so the CRC was kept.")
            extra = names - {"baseOffset", "partitionLeaderEpoch"}
            if extra:
                text += (f" Here {', '.join(sorted(extra))} changed too: under LogAppendTime (or when the "
                         f"producer's maxTimestamp was not the records' maximum) maxTimestamp is rewritten, "
                         f"and with it the CRC.")
            return text
        return ("in-place: only the offsets were written (for a v1 compressed wrapper: the wrapper's offset, "
                "the last inner offset; the inner relative offsets 0..n-1 and the compressed bytes are "
                "untouched; offsets lie outside the CRC).")
    if path == "recompressed":
        return ("recompressed: the batch was rebuilt in the same format: decompressed, offsets assigned "
                "(v0: inner offsets made absolute, the wrapper's offset is the last inner one), compressed "
                "again, new CRC. Bytes are not comparable one to one.")
    if path == "converted":
        return (f"converted: the topic keeps magic {stored_magic}, the producer sent magic {sent_magic}: the "
                f"records were re-encoded in the topic's format (offsets assigned, new CRC; headers are lost "
                f"going below magic 2).")
    return path


def replay_records(
    files: PartitionFiles, data: bytes, *, magic: int | None, at_offset: int | None
) -> AppendTrace:
    """Validate ``data`` (records as a producer sends them) with the broker's validator, as an
    append to this partition would: the topic's config overrides, target ``magic`` (default: the
    magic of the partition's last stored entry, 2 when empty), next offset ``at_offset`` (default:
    the log end offset). Nothing is written."""
    from minibroker.errors import KafkaError
    from minibroker.records import validate_and_assign

    bases = files.all_segment_bases()
    leo, last_magic = 0, None
    if bases:
        with files.open_segment(bases[-1]) as view:
            leo = view.next_offset()
            _, last = view.tail()
            last_magic = last.magic if last is not None else None
    else:
        leo = files.log_start_offset(bases)[0]
    target_magic = magic if magic is not None else (last_magic if last_magic is not None else 2)
    next_offset = leo if at_offset is None else at_offset
    config = _append_config(files.topic_overrides(), target_magic)
    sent_magic = data[16] if len(data) > 16 else 2
    produce_version = 9 if sent_magic == 2 else 2  # v3+ take magic 2 only; v0-2 the legacy formats
    notes = [f"validated as produce v{produce_version} into magic {target_magic} at offset {next_offset}"
             + (" (the topic's config overrides applied)" if files.topic_overrides() else "")]
    try:
        result = validate_and_assign(
            bytearray(data), next_offset=next_offset, now_ms=int(time.time() * 1000), config=config,
            produce_version=produce_version, leader_epoch=files.leader_epoch(),
        )
    except KafkaError as exc:
        return AppendTrace("replay", files.topic, files.partition, next_offset, next_offset - 1, "refused",
                           len(data), 0, data[:4096], b"", error=f"{exc.code.name}: {exc}", notes=notes)
    stored = bytes(result.data)
    if getattr(result, "headers_dropped", 0):
        notes.append(f"{result.headers_dropped} record headers dropped (magic {target_magic} has none)")
    return AppendTrace(
        "replay", files.topic, files.partition, result.first_offset, result.last_offset, str(result.path),
        len(data), len(stored), data[:4096], stored[:4096], notes=notes,
    )


def _append_config(overrides: dict[str, str], magic: int):
    """The validator's config for a topic with these overrides (the broker's own mapping), with
    the stored format forced to ``magic``."""
    from minibroker.records import AppendConfig

    try:
        from minibroker.services.replica_manager import append_config_for

        config = append_config_for(overrides, {"message.max.bytes": 1048588})
    except Exception:  # noqa: BLE001 - an override the mapping refuses: Kafka's defaults
        config = AppendConfig()
    return dataclasses.replace(config, message_format_magic=magic)


def _traces_for(files: PartitionFiles, append_log: str | None, first: int | None, last: int | None) -> list:
    if not append_log:
        return []
    traces, total = read_append_log(append_log, files.topic, files.partition, first, last)
    out = []
    bases = files.all_segment_bases()
    for trace in traces:
        d = trace.to_json()
        d["in_log_total"] = total
        d.update(_stored_on_disk(files, bases, trace))
        out.append(d)
    return out


def _stored_on_disk(files: PartitionFiles, bases: list[int], trace: AppendTrace) -> dict:
    """Where the trace's stored bytes are in the ``.log``, and whether they are the same bytes."""
    below = [b for b in bases if b <= trace.first_offset]
    if not below or not trace.stored:
        return {"on_disk": None}
    with files.open_segment(below[-1]) as view:
        info = view.segment.translate_offset(trace.first_offset)
        if info is None or info.last_offset < trace.first_offset or info.base_offset > trace.last_offset:
            return {"on_disk": None}
        raw = os.pread(view.segment.file.fileno(), len(trace.stored), info.position)
        return {"on_disk": {"segment": view.base, "position": info.position, "matches": raw == trace.stored}}


# ---------------------------------------------------------------------------------------------
# HTML


def page_template() -> str:
    return resources.files("minibroker.tools").joinpath(_PAGE_TEMPLATE).read_text(encoding="utf-8")


def render_html(page: dict) -> str:
    """The self-contained page: the template with ``page`` embedded as JSON (no external asset)."""
    payload = json.dumps(page, separators=(",", ":")).replace("<", "\\u003c")
    title = f"{page['partition']['name']}: minibroker explain"
    return (page_template().replace("__TITLE__", _html_escape(title))
            .replace("/*__DATA__*/{}", payload))


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def render_listing(data_dir: str, names: list[str]) -> str:
    """The ``--serve`` index page of a data dir: one link per partition; refreshes on changes."""
    rows = "\n".join(
        f'<li><a class="partition-link" href="p/{quote(n)}/">{_html_escape(n)}</a></li>' for n in names
    ) or "<li>no partitions yet</li>"
    signature = json.dumps(names)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>minibroker explain: {_html_escape(data_dir)}</title>
<link rel="icon" href="data:,">
<style>body{{font:15px/1.5 system-ui,sans-serif;margin:2em;color:#222}}a{{color:#0b5cad}}</style></head>
<body><h1>Partitions in {_html_escape(data_dir)}</h1>
<p>Each partition directory as Kafka lays it out: segments, indexes, offsets. Pick one.</p>
<ul id="partitions">{rows}</ul>
<script>
const seen = {signature};
setInterval(() => fetch("partitions.json").then(r => r.json()).then(names => {{
  if (JSON.stringify(names) !== JSON.stringify(seen)) location.reload();
}}).catch(() => {{}}), 1000);
</script></body></html>"""


# ---------------------------------------------------------------------------------------------
# --serve


class ExplainRoutes:
    """What ``--serve`` answers, without the HTTP server (the broker's live view,
    minibroker/tools/live_view.py, mounts them too), for a data dir (a listing of its partitions) or
    one partition dir. Every request reads the files afresh, read-only. Routes, relative to a
    partition's page (``/`` or ``/p/<name>/``): ``data.json?segment=&offset=&position=`` (one page
    of data), ``sizes.json`` (the segment sizes the page polls every second to reload on an append)."""

    def __init__(self, root: str, *, append_log: str | None = None):
        self.root = root
        self.append_log = append_log
        self.single = None if not is_partition_dir(root) else PartitionFiles.from_path(root)
        if self.single is None and not os.path.isdir(root):
            raise ExplainError(f"{root} is not a data dir or a partition directory")

    def files_for(self, name: str | None) -> PartitionFiles:
        if name is None:
            if self.single is None:
                raise LookupError("no partition")
            return self.single
        path = os.path.join(self.root, name)
        if "/" in name or name in (".", "..") or not is_partition_dir(path):
            raise LookupError(name)
        return PartitionFiles.from_path(path)

    def answer(self, raw_path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``raw_path``."""
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        name = None
        if self.single is None:
            if path in ("/", ""):
                html = render_listing(os.path.abspath(self.root), partition_dirs(self.root))
                return 200, "text/html; charset=utf-8", html.encode()
            if path == "/partitions.json":
                return 200, "application/json", json.dumps(partition_dirs(self.root)).encode()
            m = re.match(r"^/p/([^/]+)/(.*)$", path)
            if m is None:
                return 404, "text/plain", b"not found"
            name, rest = m.group(1), m.group(2)
        else:
            rest = path.lstrip("/")
        try:
            files = self.files_for(name)
        except LookupError:
            return 404, "text/plain", f"no partition {name}".encode()
        try:
            if rest == "sizes.json":
                return 200, "application/json", json.dumps(files.sizes()).encode()
            if rest in ("", "index.html", "data.json"):
                page = build_page(
                    files, segment=_int(query.get("segment")), offset=_int(query.get("offset")),
                    position=_int(query.get("position")), append_log=self.append_log, mode="serve",
                )
                if rest == "data.json":
                    return 200, "application/json", json.dumps(page).encode()
                return 200, "text/html; charset=utf-8", render_html(page).encode()
        except (ExplainError, ValueError) as exc:
            return 400, "text/plain; charset=utf-8", str(exc).encode()
        return 404, "text/plain", b"not found"


class ExplainServer(ExplainRoutes):
    """The routes over HTTP on 127.0.0.1 (stdlib ``ThreadingHTTPServer`` in a daemon thread)."""

    def __init__(self, root: str, *, port: int = 0, append_log: str | None = None):
        from http.server import ThreadingHTTPServer

        super().__init__(root, append_log=append_log)
        handler = _handler_for(self)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> ExplainServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="explain-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)


def _int(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    return int(text)


def _handler_for(server: ExplainRoutes):
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            try:
                status, ctype, body = server.answer(self.path)
            except Exception as exc:  # noqa: BLE001 - a file vanished mid-read (retention): say so
                status, ctype = 500, "text/plain; charset=utf-8"
                body = f"{type(exc).__name__}: {exc}".encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                # the browser left first (a reload, a closed tab, a poll it gave up on): nothing to say
                self.close_connection = True

        def log_message(self, format, *args) -> None:  # noqa: A002 - quiet: one line per poll otherwise
            pass

    return Handler


# ---------------------------------------------------------------------------------------------
# command line


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "explain",
        help="draw a partition as Kafka stores it (segments, indexes, offsets) as an HTML page",
        description=(
            "Write a self-contained HTML page (no network, no external assets) showing a partition "
            "as Kafka stores it: each segment's batches at their file positions with every header "
            "field, the .index and .timeindex entries pointing into the log, how a fetch for an "
            "offset finds its batch, and append traces (bytes as sent against bytes as stored). "
            "Reads the files only: safe on a running broker's data dir."
        ),
    )
    p.add_argument("path", nargs="?", metavar="PARTITION-DIR|SEGMENT-FILE",
                   help="a partition directory (<topic>-<partition>) or one of its segment files; with "
                        "--serve also a data dir (default there: ./minibroker-data)")
    p.add_argument("-o", "--output", metavar="PAGE.html",
                   help="where to write the page (default: explain-<topic>-<partition>.html in the current "
                        "directory; - for stdout)")
    p.add_argument("--segment", type=int, metavar="BASE",
                   help="show the segment with this base offset (default: the one holding --offset, else "
                        "the last)")
    p.add_argument("--offset", type=int, metavar="N",
                   help="show the page of the batch a fetch at offset N returns, with the lookup highlighted")
    p.add_argument("--position", type=int, metavar="P",
                   help="show the page starting at the batch holding byte P of the segment")
    p.add_argument("--append-log", metavar="FILE",
                   help="a broker log written with the minibroker.append.bytes logger at DEBUG "
                        "(serve --log-level DEBUG; text or JSON format): show this partition's append traces")
    p.add_argument("--replay", metavar="FILE",
                   help="raw records exactly as a producer sends them in a Produce request: validate them "
                        "with the broker's validator (nothing is written) and show sent against stored bytes")
    p.add_argument("--magic", type=int, choices=(0, 1, 2),
                   help="--replay: the magic the topic stores (default: that of the partition's last batch, "
                        "2 when empty)")
    p.add_argument("--at-offset", type=int, metavar="N",
                   help="--replay: the next offset to assign (default: the partition's log end offset)")
    p.add_argument("--serve", action="store_true",
                   help="serve the page on 127.0.0.1 instead of writing it: pages built on demand, reloaded "
                        "when the partition's files change")
    p.add_argument("--port", type=int, default=0, metavar="N",
                   help="--serve: the port (default 0: a free one, printed)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    try:
        if args.serve:
            return _serve(args)
        return _write(args)
    except ExplainError as exc:
        print(f"minibroker explain: {exc}", file=sys.stderr)
        return 1


def _write(args) -> int:
    if args.path is None:
        raise ExplainError("give a partition directory or a segment file (or --serve)")
    files = PartitionFiles.from_path(args.path)
    replay = None
    if args.replay:
        try:
            with open(args.replay, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ExplainError(f"--replay {args.replay}: {exc.strerror or exc}") from None
        trace = replay_records(files, data, magic=args.magic, at_offset=args.at_offset)
        replay = trace.to_json()
        if trace.error:
            print(f"minibroker explain: the replayed records were refused: {trace.error}", file=sys.stderr)
    try:
        page = build_page(files, segment=args.segment, offset=args.offset, position=args.position,
                          append_log=args.append_log, replay=replay)
    except OSError as exc:
        raise ExplainError(f"{args.path}: {exc.strerror or exc}") from None
    html = render_html(page)
    out = args.output or f"explain-{files.name}.html"
    if out == "-":
        sys.stdout.write(html)
        return 0
    data = html.encode("utf-8")  # bytes, not characters: the size the file has
    with open(out, "wb") as f:
        f.write(data)
    window = page["window"] or {"batches": []}
    shown = len(window["batches"])
    print(f"wrote {out} ({len(data)} bytes): {files.name}, {shown} batch{'' if shown == 1 else 'es'} shown, "
          f"log end offset {page['partition']['log_end_offset']}; open it in a browser")
    return 0


def _serve(args) -> int:
    root = args.path or "minibroker-data"
    if args.replay:
        raise ExplainError("--replay writes a page: use it without --serve")
    if args.append_log and not os.path.isfile(args.append_log):
        raise ExplainError(f"--append-log {args.append_log}: no such file")
    server = ExplainServer(root, port=args.port, append_log=args.append_log).start()
    print(f"minibroker explain: serving {os.path.abspath(root)} at {server.url} (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:  # its way to stop, reported as every tool reports Ctrl-C (tools/command.py)
        from minibroker.tools.command import EXIT_INTERRUPTED

        print("minibroker explain: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minibroker")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["explain", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
