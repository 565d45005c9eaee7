"""The fuzzer's seed requests: frames real clients sent, and frames our codec encodes for every API.

Two sources, both whole request frames (header and body, no size prefix):

- client frames: captured from kafka-python, confluent-kafka and aiokafka by
  ``fuzzing.capture`` (``scripts/fuzz.py capture``) and kept in a small text file, one
  frame a line (``label<TAB>base64``), topic ids of the capture run on ``#topic`` lines so that
  ``load_client_frames`` can rewrite them to the ids the fuzzed broker gave the same topics;
- codec frames: ``codec_frames`` fills every field of every served API key at every served version
  with a plausible value (topic, partition and group names the fuzzed broker knows, small timeouts,
  record batches in each magic and codec) and encodes it with ``codec.encode_request``. Same seed,
  same frames.
"""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field

from minibroker.handlers.registry import HANDLERS
from minibroker.protocol import codec
from minibroker.protocol.declarations import in_range
from minibroker.records import Compression, build_records

from fuzzing.walk import WalkError, walk_request

NOW_MS = 1_700_000_000_000
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
CONFIG_KEYS = [
    "retention.ms",
    "cleanup.policy",
    "compression.type",
    "max.message.bytes",
    "segment.bytes",
    "message.timestamp.type",
    "min.insync.replicas",
    "flush.messages",
]
CONFIG_VALUES = {
    "retention.ms": "3600000",
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "max.message.bytes": "1048588",
    "segment.bytes": "1073741824",
    "message.timestamp.type": "CreateTime",
    "min.insync.replicas": "1",
    "flush.messages": "100000",
}

BROKER_CONFIG_VALUES = {
    "message.max.bytes": "1048588",
    "compression.type": "producer",
    "log.flush.interval.messages": "100000",
    "log.retention.ms": "604800000",
    "min.insync.replicas": "1",
    "log.message.timestamp.type": "CreateTime",
}


@dataclass(frozen=True, slots=True)
class SeedFrame:
    label: str  # where it came from: a client ("kafka-python producer") or "codec"
    frame: bytes  # header + body, no size prefix

    @property
    def api_key(self) -> int:
        return int.from_bytes(self.frame[0:2], "big", signed=True)

    @property
    def version(self) -> int:
        return int.from_bytes(self.frame[2:4], "big", signed=True)


@dataclass
class Names:
    """What the fuzzed broker holds, for plausible requests: topics (name -> partitions), their ids."""

    topics: dict[str, int]
    topic_ids: dict[str, bytes] = field(default_factory=dict)
    group: str = "fz-group"
    member_id: str = ""  # a live member of ``group`` (a static one), when the harness made one
    generation: int = -1
    instance_id: str | None = None
    produce_also: dict[str, int] = field(default_factory=dict)  # oracle topics: produced to, never deleted


# ------------------------------------------------------------------------------------------ client frames


def save_client_frames(
    path: str,
    frames: list[tuple[str, bytes]],
    topic_ids: dict[str, bytes],
    *,
    per_kind: int = 3,
    max_frame: int = 8192,
) -> int:
    """Write captured frames, at most ``per_kind`` distinct ones per (client, api key, version) and
    none over ``max_frame`` bytes (correlation ids zeroed so repeats compare equal). Returns the count."""
    kept: dict[tuple, list[bytes]] = {}
    for label, frame in frames:
        if len(frame) > max_frame or len(frame) < 8:
            continue
        frame = frame[:4] + b"\0\0\0\0" + frame[8:]
        key = (label, frame[:4])
        bucket = kept.setdefault(key, [])
        if frame not in bucket and len(bucket) < per_kind:
            bucket.append(frame)
    lines = [
        "# request frames captured from real clients by scripts/fuzz.py capture (tests/fuzzing)",
        "# label<TAB>base64 of the frame (header + body, no size prefix)",
    ]
    lines += [f"#topic {name} {tid.hex()}" for name, tid in sorted(topic_ids.items())]
    count = 0
    for (label, _), bucket in kept.items():
        for frame in bucket:
            lines.append(f"{label}\t{base64.b64encode(frame).decode()}")
            count += 1
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return count


def load_client_frames(path: str, topic_ids: dict[str, bytes] | None = None) -> list[SeedFrame]:
    """The captured frames; topic ids of the capture run are rewritten to ``topic_ids`` (by name)."""
    old_ids: dict[str, bytes] = {}
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#topic "):
                _, name, hex_id = line.split()
                old_ids[name] = bytes.fromhex(hex_id)
                continue
            if not line or line.startswith("#"):
                continue
            label, data = line.split("\t")
            out.append(SeedFrame(label, base64.b64decode(data)))
    if topic_ids:
        remap = {old: topic_ids[name] for name, old in old_ids.items() if name in topic_ids}
        out = [SeedFrame(s.label, remap_uuids(s.frame, remap)) for s in out]
    return out


def remap_uuids(frame: bytes, remap: dict[bytes, bytes]) -> bytes:
    try:
        spans = walk_request(frame).spans
    except WalkError:
        return frame
    buf = bytearray(frame)
    for s in spans:
        if s.kind == "uuid":
            new = remap.get(bytes(buf[s.offset : s.offset + 16]))
            if new is not None:
                buf[s.offset : s.offset + 16] = new
    return bytes(buf)


# ------------------------------------------------------------------------------------------ codec frames


def served_pairs() -> list[tuple[int, int]]:
    """Every (api key, version) the broker serves."""
    return [
        (h.api_key, v)
        for h in sorted(HANDLERS.values(), key=lambda h: h.api_key)
        for v in range(h.min_version, h.max_version + 1)
    ]


def codec_frames(names: Names, seed: int = 0, variants: int = 2) -> list[SeedFrame]:
    """``variants`` frames for every served API key and version, filled with plausible values."""
    rng = random.Random(seed)
    out = []
    correlation = 0
    for api_key, version in served_pairs():
        for _ in range(variants):
            correlation += 1
            body = _Filler(rng, names, api_key, version).message()
            client_id = rng.choice(["fuzz", "rdkafka", "kafka-python-3.0", "", None])
            frame = codec.encode_request(api_key, version, correlation, body, client_id)[4:]
            out.append(SeedFrame("codec", frame))
    return out


class _Filler:
    """Plausible values for one request, by field name and the struct it is in."""

    def __init__(self, rng: random.Random, names: Names, api_key: int, version: int):
        self.rng = rng
        self.names = names
        self.api_key = api_key
        self.version = version
        self.message_name = codec.REQUESTS[api_key].name

    def message(self) -> dict:
        return self.struct(codec.REQUESTS[self.api_key].fields, self.message_name)

    def struct(self, fields, parent: str) -> dict:
        out = {}
        topic = None
        for f in fields:
            if not in_range(self.version, f.versions):
                continue
            if f.name in ("name", "topic", "topic_name", "resource_name") and parent != "configs":
                value = self.value(f, parent)
                topic = value
                out[f.name] = value
            elif f.name == "topic_id":
                out[f.name] = self.names.topic_ids.get(topic) if topic else self.topic_id()
            else:
                out[f.name] = self.value(f, parent)
        if parent in ("topics", "topic_data") and topic is None and "topic_id" in out:
            out["topic_id"] = self.topic_id()
        if parent == "resources" and out.get("resource_type") == 4:  # broker resources: broker keys
            out["resource_name"] = self.rng.choice(["1", ""])
            for c in out.get("configs") or []:
                c["name"] = self.rng.choice(sorted(BROKER_CONFIG_VALUES))
                if c.get("value") is not None:
                    c["value"] = BROKER_CONFIG_VALUES[c["name"]]
        if parent == "configs" and "name" in out:  # a config entry: a real key and a valid value
            key = self.rng.choice(CONFIG_KEYS)
            out["name"] = key
            if "value" in out:
                out["value"] = CONFIG_VALUES[key] if self.rng.random() < 0.9 else None
        return out

    def topic_id(self) -> bytes:
        ids = list(self.names.topic_ids.values())
        return self.rng.choice(ids) if ids and self.rng.random() < 0.9 else self.rng.randbytes(16)

    def topic(self) -> str:
        r = self.rng.random()
        if self.api_key == 0 and self.names.produce_also and r < 0.3:
            return self.rng.choice(sorted(self.names.produce_also))
        if self.api_key in (19, 20, 37):  # CreateTopics, DeleteTopics, CreatePartitions: scratch topics
            return f"fz-new-{self.rng.randrange(8)}" if self.api_key != 37 or r < 0.5 else "fz-a"
        if r < 0.05:
            return "fz-unknown"
        return self.rng.choice(sorted(self.names.topics))

    def partitions_of(self) -> int:
        return max(self.names.topics.values(), default=1)

    def value(self, f, parent: str):
        rng, name, t = self.rng, f.name, f.type
        nullable = in_range(self.version, f.nullable)
        if t == "struct":
            return self.struct(f.fields, name)
        if t == "[]struct":
            r = rng.random()
            n = 1 if r < 0.7 else 2 if r < 0.9 else 0
            if name in ("assignments",) and self.api_key == 19:
                n = 0  # CreateTopics: explicit assignments exclude num_partitions
            if name == "forgotten_topics_data":
                n = 0 if rng.random() < 0.8 else 1
            return [self.struct(f.fields, name) for _ in range(n)]
        if t.startswith("[]"):
            if name in ("topic_names",):
                return [self.topic()]
            if name in ("groups", "groups_names"):
                return [self.names.group]
            if name in ("partitions", "partition_indexes"):
                return sorted({rng.randrange(self.partitions_of()) for _ in range(rng.randint(1, 2))})
            if name == "broker_ids":
                return [1]
            if name == "configuration_keys":
                return None if nullable and rng.random() < 0.5 else [rng.choice(CONFIG_KEYS)]
            if name == "coordinator_keys":
                return [self.names.group]
            if name in ("states_filter", "types_filter"):
                return [] if rng.random() < 0.7 else ["Stable"]
            return []
        if t == "string":
            return self.string(name, parent, nullable)
        if t == "records":
            return self.records()
        if t == "bytes":
            if name == "metadata" or name == "assignment":
                return self.consumer_protocol(name)
            return b""
        if t == "uuid":
            return self.topic_id() if name == "topic_id" else bytes(16)
        if t == "bool":
            if name == "allow_auto_topic_creation":
                return rng.random() < 0.2
            if name == "validate_only":
                return rng.random() < 0.5
            return rng.random() < 0.5
        if t == "float64":
            return 0.0
        return self.integer(name, parent, t)

    def string(self, name: str, parent: str, nullable: bool):
        rng = self.rng
        if name in ("name", "topic", "topic_name", "resource_name"):
            if parent == "protocols":
                return rng.choice(["range", "roundrobin", "cooperative-sticky"])
            if parent == "resources":
                return rng.choice(sorted(self.names.topics)) if rng.random() < 0.8 else "1"
            return self.topic()
        if name == "name" or (name == "value" and parent == "configs"):
            return None
        if name in ("group_id", "key"):
            return self.names.group if rng.random() < 0.8 else f"{self.names.group}-{rng.randrange(4)}"
        if name == "member_id":
            if self.names.member_id and rng.random() < 0.6:  # the live member: handlers go deeper
                return self.names.member_id
            return "" if rng.random() < 0.7 else f"fuzz-{rng.randrange(1000)}"
        if name == "group_instance_id":
            if self.names.instance_id and rng.random() < 0.3:
                return self.names.instance_id
            return None if nullable and rng.random() < 0.8 else f"instance-{rng.randrange(3)}"
        if name in ("protocol_type",):
            return "consumer"
        if name == "protocol_name":
            return None if nullable and rng.random() < 0.5 else "range"
        if name in ("transactional_id", "cluster_id", "reason", "committed_metadata"):
            return None if nullable and rng.random() < 0.7 else ""
        if name == "client_software_name":
            return "minibroker-fuzz"
        if name == "client_software_version":
            return "1.0"
        return "" if not nullable or rng.random() < 0.5 else None

    def integer(self, name: str, parent: str, t: str) -> int:
        rng = self.rng
        table = {
            "acks": lambda: rng.choice([-1, 1, 0]),
            "timeout_ms": lambda: rng.choice([0, 1000, 5000]),
            "max_wait_ms": lambda: rng.choice([0, 10, 100]),
            "min_bytes": lambda: rng.choice([0, 1]),
            "max_bytes": lambda: rng.choice([1 << 20, 52428800]),
            "partition_max_bytes": lambda: rng.choice([1 << 20, 1024]),
            "isolation_level": lambda: rng.choice([0, 1]),
            "session_id": lambda: 0,
            "session_epoch": lambda: rng.choice([-1, 0]),
            "replica_id": lambda: -1,
            "replica_epoch": lambda: -1,
            "session_timeout_ms": lambda: rng.choice([6000, 10000]),
            "rebalance_timeout_ms": lambda: rng.choice([1000, 5000]),
            "generation_id": lambda: rng.choice([-1, 0, 1, self.names.generation, self.names.generation]),
            "generation_id_or_member_epoch": lambda: rng.choice([-1, 0, self.names.generation]),
            "member_epoch": lambda: -1,
            "producer_id": lambda: -1,
            "producer_epoch": lambda: -1,
            "transaction_timeout_ms": lambda: 60000,
            "num_partitions": lambda: rng.choice([-1, 1, 2]),
            "replication_factor": lambda: rng.choice([-1, 1]),
            "count": lambda: rng.choice([4, 5, 6]),
            "resource_type": lambda: rng.choice([2, 2, 2, 4]),
            "config_operation": lambda: rng.choice([0, 1]),
            "key_type": lambda: 0,
            "endpoint_type": lambda: 1,
            "retention_time_ms": lambda: -1,
            "max_num_offsets": lambda: 1,
            "current_leader_epoch": lambda: -1,
            "leader_epoch": lambda: rng.choice([-1, 0]),
            "last_fetched_epoch": lambda: -1,
            "committed_leader_epoch": lambda: -1,
            "log_start_offset": lambda: -1,
            "commit_timestamp": lambda: -1,
            "fetch_offset": lambda: rng.choice([0, 0, 1, 5]),
            "committed_offset": lambda: rng.choice([0, 3]),
            "offset": lambda: rng.choice([0, 1]) if self.api_key == 21 else rng.choice([0, -1]),
            "timestamp": lambda: rng.choice([-1, -2, NOW_MS]),
        }
        if name in table:
            return table[name]()
        if name in ("partition", "partition_index", "index"):
            return rng.randrange(self.partitions_of())
        return 0

    def consumer_protocol(self, name: str) -> bytes:
        import struct

        topics = sorted(self.names.topics)[:2]
        out = bytearray(struct.pack(">hi", 0, len(topics)))
        for t in topics:
            data = t.encode()
            out += struct.pack(">h", len(data)) + data
            if name == "assignment":
                out += struct.pack(">ii", 1, 0)
        out += struct.pack(">i", -1)
        return bytes(out)

    def records(self) -> bytes:
        rng = self.rng
        magic = 0 if self.version <= 1 else 1 if self.version == 2 else 2
        compression = rng.choice(CODECS if magic == 2 else CODECS[:4])
        n = rng.randint(1, 3)
        rows = [
            (
                i,
                NOW_MS + i,
                b"key-%d" % i if rng.random() < 0.7 else None,
                b"value-%d" % rng.randrange(99),
                [("h", b"v")] if magic == 2 and rng.random() < 0.3 else [],
            )
            for i in range(n)
        ]
        if magic < 2:
            rows = [r[:4] for r in rows]
        return build_records(magic, rows, compression=compression)
