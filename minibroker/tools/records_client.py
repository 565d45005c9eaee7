"""Producing, fetching and a consumer group membership over our own wire client: what the console tools
``produce`` and ``consume`` and the test fixture's helpers need, with no Kafka client library.

- ``RecordProducer``: v2 batches (minibroker/records) sent to each partition's leader; a key's partition
  is Kafka's (murmur2 of the key, as the Java client's default partitioner), records without one go
  round-robin. A batch refused as too large is split until each record stands alone, so that every
  record has its own outcome (an offset or an error), as Kafka's producer splits on MESSAGE_TOO_LARGE;
  retriable errors (a leader not yet elected after auto-creation, ...) are retried while the deadline
  lasts.
- ``RecordFetcher``: sessionless Fetch requests from positions the caller sets (ListOffsets for
  earliest, latest or a timestamp), read_uncommitted, control batches skipped.
- ``GroupMember``: a consumer group member speaking KIP-848's ConsumerGroupHeartbeat: the broker assigns
  the partitions, so the member only joins (epoch 0), heartbeats at the interval the broker asks for,
  reports the partitions it owns, commits offsets with its member epoch (OffsetCommit v9+) and leaves
  (epoch -1).

Records come back as ``ConsumedRecord``, whose fields are named as kafka-python's ``ConsumerRecord``
(topic, partition, offset, timestamp, key, value, headers), so code written for either reads both.
Not thread-safe.
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field

from minibroker.errors import ErrorCode
from minibroker.records.batches import iter_batches
from minibroker.records.codecs import Compression
from minibroker.records.v2 import BatchBuilder
from minibroker.tools.cluster import EARLIEST, LATEST, Cluster, error_text
from minibroker.tools.wire import ToolError

PRODUCE, FETCH, METADATA, OFFSET_COMMIT, OFFSET_FETCH, INIT_PRODUCER_ID = 0, 1, 3, 8, 9, 22
CONSUMER_GROUP_HEARTBEAT = 68
# Versions that name topics (newer ones carry topic ids only).
PRODUCE_NAMES_UP_TO, FETCH_NAMES_UP_TO, OFFSETS_NAMES_UP_TO = 12, 12, 9
BATCH_BYTES = 1 << 20  # a batch's records, at most (Kafka's max.message.bytes default is about this)
RETRY_BACKOFF_S = 0.1
TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)
RETRIABLE = frozenset({ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT,
                       ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.KAFKA_STORAGE_ERROR})


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record read back; the field names are kafka-python's ``ConsumerRecord``'s."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list = field(default_factory=list)  # (name, value bytes) pairs
    timestamp_type: int = 0


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), as an unsigned 32-bit number."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length & ~3
    extra = length % 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The Java client's default partitioner for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(slots=True)
class Outcome:
    """A sent record's fate: its offset, or the error that refused it."""

    partition: int
    offset: int | None = None
    error: str | None = None


class RecordProducer:
    """Sends records to a cluster; ``send`` returns each record's ``Outcome`` in order."""

    def __init__(self, cluster: Cluster, *, acks: int = -1, compression: Compression = Compression.NONE,
                 batch_bytes: int = BATCH_BYTES, retries: int | None = None, idempotent: bool = False,
                 magic: int = 2):
        self.cluster = cluster
        # 0 or 1: messages in an old format, as a Kafka 0.8/0.9 or 0.10 client wrote them (Produce v0-v1 or
        # v2, which carry them), for teaching (docs/teaching.md); no producer ids there
        self.magic = magic
        self.produce_versions = {0: (0, 1), 1: (2, 2)}.get(magic, (3, PRODUCE_NAMES_UP_TO))
        self.acks = acks
        self.compression = Compression(compression)
        self.batch_bytes = batch_bytes
        self.retries = retries  # None: as long as the deadline lasts
        self.idempotent = idempotent  # a producer id (InitProducerId) and sequence numbers per partition
        self._producer: tuple[int, int] | None = None
        self._sequences: dict[tuple[str, int], int] = {}
        self._partitions: dict[str, int] = {}
        self._round_robin = 0

    def _producer_id(self) -> tuple[int, int]:
        if self._producer is None:
            r = self.cluster.bootstrap.request(INIT_PRODUCER_ID, {"transactional_id": None,
                                                                  "transaction_timeout_ms": 60_000,
                                                                  "producer_id": -1, "producer_epoch": -1})
            if r.error_code:
                raise ToolError(f"cannot get a producer id: {error_text(r.error_code)}")
            self._producer = (r.producer_id, r.producer_epoch)
        return self._producer

    def partition_count(self, topic: str) -> int:
        """The topic's partition count; Metadata with auto-creation, as a producer's first send asks."""
        if topic not in self._partitions:
            body = {"topics": [{"name": topic}], "allow_auto_topic_creation": True}
            t = self.cluster.bootstrap.request(METADATA, body, at_least=4).topics[0]
            for _ in range(20):  # a topic just auto-created may have no leader for a moment
                if t.error_code != ErrorCode.LEADER_NOT_AVAILABLE:
                    break
                self._backoff()
                t = self.cluster.bootstrap.request(METADATA, body, at_least=4).topics[0]
            if t.error_code:
                raise ToolError(f"topic {topic}: {error_text(t.error_code)}")
            self._partitions[topic] = len(t.partitions)
        return self._partitions[topic]

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        count = self.partition_count(topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise ToolError(f"{topic}-{partition}: {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name}: topic "
                                f"{topic} has {count} partition{'s' if count != 1 else ''} (0-{count - 1})")
            return partition
        if key is not None:
            return partition_for_key(key, count)
        self._round_robin += 1
        return self._round_robin % count

    def send(self, topic: str, records: list[tuple], partition: int | None = None) -> list[Outcome]:
        """Send ``records`` ((key, value, headers) each) to ``topic``; each record's outcome, in order."""
        outcomes = [Outcome(self.choose_partition(topic, key, partition)) for key, _, _ in records]
        by_partition: dict[int, list[int]] = {}
        for index, outcome in enumerate(outcomes):
            by_partition.setdefault(outcome.partition, []).append(index)
        pending = []  # (partition, record indexes) of one batch each
        for p, indexes in sorted(by_partition.items()):
            pending += [(p, chunk) for chunk in self._chunks(records, indexes)]
        attempts = 0
        while pending:
            now, later, seen = [], [], set()
            for p, indexes in pending:  # one batch per partition and request, in order
                (later if p in seen else now).append((p, indexes))
                seen.add(p)
            retry = self._produce(topic, records, now, outcomes)
            if retry:
                attempts += 1
                if self.retries is not None and attempts > self.retries:
                    break
                self._backoff()
            pending = retry + later
        return outcomes

    def _chunks(self, records, indexes: list[int]) -> list[list[int]]:
        """``indexes`` cut into batches of at most ``batch_bytes`` of keys and values."""
        chunks, current, size = [], [], 0
        for i in indexes:
            key, value, _ = records[i]
            n = len(key or b"") + len(value or b"") + 20
            if current and size + n > self.batch_bytes:
                chunks.append(current)
                current, size = [], 0
            current.append(i)
            size += n
        return chunks + ([current] if current else [])

    def _batch(self, topic: str, partition: int, records, indexes: list[int]) -> bytes:
        now = int(time.time() * 1000)
        if self.magic < 2:
            from minibroker.records.legacy import MessageSetBuilder

            legacy = MessageSetBuilder(self.magic, compression=self.compression)
            for offset, i in enumerate(indexes):
                legacy.append(offset, now, records[i][0], records[i][1])
            return legacy.build()
        ids = {}
        if self.idempotent:
            producer_id, epoch = self._producer_id()
            ids = {"producer_id": producer_id, "producer_epoch": epoch,
                   "base_sequence": self._sequences.get((topic, partition), 0)}
        builder = BatchBuilder(compression=self.compression, **ids)
        for offset, i in enumerate(indexes):
            key, value, headers = records[i]
            builder.append(offset, now, key, value, [(k, v) for k, v in headers or ()])
        return builder.build()

    def _produce(self, topic: str, records, pending, outcomes: list[Outcome]) -> list:
        """One Produce request per leader for the ``pending`` batches; fills ``outcomes`` and returns the
        batches to send again (split when too large, or after a retriable error)."""
        retry: list = []
        by_leader: dict[int, list] = {}
        for p, indexes in pending:
            by_leader.setdefault(self.cluster.leader(topic, p), []).append((p, indexes))
        for leader, batches in by_leader.items():
            body = {"transactional_id": None, "acks": self.acks,
                    "timeout_ms": int(self.cluster.timeout * 1000),
                    "topic_data": [{"name": topic, "partition_data": [
                        {"index": p, "records": self._batch(topic, p, records, indexes)}
                        for p, indexes in batches]}]}
            conn = self.cluster.node(leader)
            if self.acks == 0:
                conn.send(PRODUCE, body, *self.produce_versions)
                for _, indexes in batches:
                    for i in indexes:
                        outcomes[i].offset = -1
                continue
            answer = conn.request(PRODUCE, body, *self.produce_versions)
            sent = {p: indexes for p, indexes in batches}
            for t in answer.responses:
                for r in t.partition_responses:
                    indexes = sent.get(r.index, [])
                    if r.error_code == 0:
                        for n, i in enumerate(indexes):
                            outcomes[i].offset, outcomes[i].error = r.base_offset + n, None
                        tp = (topic, r.index)
                        self._sequences[tp] = self._sequences.get(tp, 0) + len(indexes)
                    elif r.error_code in TOO_LARGE and len(indexes) > 1:
                        half = len(indexes) // 2
                        retry += [(r.index, indexes[:half]), (r.index, indexes[half:])]
                    else:
                        text = error_text(r.error_code, getattr(r, "error_message", None))
                        for i in indexes:
                            outcomes[i].error = text
                        if r.error_code in RETRIABLE:
                            retry.append((r.index, indexes))
        return retry

    def _backoff(self) -> None:
        wait = RETRY_BACKOFF_S
        deadline = self.cluster.deadline
        if deadline is not None:
            wait = deadline.left(wait)  # raises CommandTimeout when the command's time is up
        time.sleep(wait)


class RecordFetcher:
    """Reads partitions from the positions in ``positions`` ((topic, partition) -> next offset)."""

    def __init__(self, cluster: Cluster, *, max_wait_ms: int = 500, partition_max_bytes: int = 1 << 20):
        self.cluster = cluster
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.positions: dict[tuple[str, int], int] = {}
        self.high_watermarks: dict[tuple[str, int], int] = {}

    def seek(self, tps, where) -> None:
        """Set positions: ``where`` is EARLIEST, LATEST, an offset (>= 0), or ``("timestamp", ms)``: the
        first record at or after that time (the end when none is)."""
        tps = list(tps)
        if isinstance(where, tuple):
            found = self.cluster.list_offsets(tps, where[1])
            ends = self.cluster.list_offsets([tp for tp in tps if found[tp] < 0], LATEST)
            self.positions.update({tp: found[tp] if found[tp] >= 0 else ends[tp] for tp in tps})
        elif where in (EARLIEST, LATEST):
            self.positions.update(self.cluster.list_offsets(tps, where))
        else:
            self.positions.update({tp: where for tp in tps})

    def fetch(self, max_wait_ms: int | None = None) -> list[ConsumedRecord]:
        """One Fetch to each leader of the positioned partitions; the records, positions advanced. A
        position out of range moves to the log start (below it) or end (beyond it), as Kafka's
        auto.offset.reset=earliest would, after checking which."""
        wait_ms = self.max_wait_ms if max_wait_ms is None else max_wait_ms
        out: list[ConsumedRecord] = []
        if not self.positions:
            return out
        for leader, tps in self.cluster.leaders(sorted(self.positions)).items():
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            body = {"replica_id": -1, "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 50 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                    "rack_id": "", "topics": [
                        {"topic": t, "partitions": [
                            {"partition": p, "current_leader_epoch": -1,
                             "fetch_offset": self.positions[(t, p)], "last_fetched_epoch": -1,
                             "log_start_offset": -1,
                             "partition_max_bytes": self.partition_max_bytes} for p in ps]}
                        for t, ps in by_topic.items()]}
            answer = self.cluster.node(leader).request(FETCH, body, at_least=4, at_most=FETCH_NAMES_UP_TO,
                                                       wait=wait_ms / 1000)
            if getattr(answer, "error_code", 0):
                raise ToolError(f"fetch: {error_text(answer.error_code)}")
            for t in answer.responses:
                for p in t.partitions:
                    out += self._read(t.topic, p)
        return out

    def _read(self, topic: str, p) -> list[ConsumedRecord]:
        tp = (topic, p.partition_index)
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            start = self.cluster.list_offsets([tp], EARLIEST)[tp]
            self.positions[tp] = start if self.positions[tp] < start else self.cluster.list_offsets([tp],
                                                                                                   LATEST)[tp]
            return []
        if p.error_code in RETRIABLE:
            return []
        if p.error_code:
            raise ToolError(f"{topic}-{p.partition_index}: {error_text(p.error_code)}")
        self.high_watermarks[tp] = p.high_watermark
        position = self.positions[tp]
        out = []
        for batch in iter_batches(bytes(p.records or b"")):
            if batch.last_offset < position:
                continue
            if not batch.is_control:
                out += [ConsumedRecord(topic, p.partition_index, r.offset, r.timestamp, r.key, r.value,
                                       list(r.headers), int(r.timestamp_type))
                        for r in batch.records() if r.offset >= position]
            position = batch.last_offset + 1
        self.positions[tp] = position
        return out

    def at_end(self, ends: dict[tuple[str, int], int]) -> bool:
        """Every positioned partition read up to its offset in ``ends``."""
        return all(self.positions.get(tp, 0) >= end for tp, end in ends.items())


class GroupMember:
    """One member of a consumer group (KIP-848): the broker assigns, the member follows. ``poll()`` keeps
    the membership alive and returns the partitions assigned now; ``commit`` and ``committed`` read and
    write the group's offsets at the member's epoch; ``leave`` ends the membership."""

    def __init__(self, cluster: Cluster, group_id: str, topics: list[str],
                 rebalance_timeout_ms: int = 30_000):
        self.cluster = cluster
        self.group_id = group_id
        self.topics = list(topics)
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.member_epoch = 0
        self.heartbeat_interval_s = 0.0
        self.assigned: set[tuple[str, int]] = set()
        self._owned_ids: list | None = []  # (topic id, partitions) as last reported; None: unchanged
        self._next_heartbeat = 0.0
        _, self.coordinator = cluster.coordinator(group_id)

    def _heartbeat(self, epoch: int) -> object:
        joining = epoch == 0
        body = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": self.rebalance_timeout_ms if joining else -1,
                "subscribed_topic_names": self.topics if joining else None, "subscribed_topic_regex": None,
                "server_assignor": None,
                "topic_partitions": [] if joining else self._owned_ids}
        return self.coordinator.request(CONSUMER_GROUP_HEARTBEAT, body, at_least=1)

    def poll(self) -> set[tuple[str, int]]:
        """Heartbeat when one is due (joining first); the partitions assigned to this member now."""
        if time.monotonic() < self._next_heartbeat:
            return self.assigned
        answer = self._heartbeat(self.member_epoch)
        if answer.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.member_epoch, self.assigned, self._owned_ids = 0, set(), []  # rejoin with nothing owned
            answer = self._heartbeat(0)
        if answer.error_code:
            raise ToolError(f"group {self.group_id}: {error_text(answer.error_code, answer.error_message)}")
        self.member_epoch = answer.member_epoch
        self.heartbeat_interval_s = answer.heartbeat_interval_ms / 1000
        self._next_heartbeat = time.monotonic() + self.heartbeat_interval_s
        if answer.assignment is not None:
            assigned = set()
            for t in answer.assignment.topic_partitions:
                name = self.cluster.topic_name(t.topic_id)
                if name is not None:
                    assigned |= {(name, p) for p in t.partitions}
            self.assigned = assigned
            self._owned_ids = [{"topic_id": t.topic_id, "partitions": sorted(t.partitions)}
                               for t in answer.assignment.topic_partitions]
        else:
            self._owned_ids = None
        return self.assigned

    def committed(self, tps) -> dict[tuple[str, int], int]:
        """The group's committed offsets of ``tps`` (those with one)."""
        return fetch_committed(self.coordinator, self.group_id, tps, self.member_id, self.member_epoch)

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        commit_offsets(self.coordinator, self.group_id, offsets, self.member_epoch, self.member_id)

    def leave(self) -> None:
        if self.member_epoch > 0:
            self._heartbeat(-1)
            self.member_epoch = -1


def commit_offsets(coordinator, group_id: str, offsets: dict[tuple[str, int], int], epoch: int = -1,
                   member_id: str = "") -> None:
    """OffsetCommit of ``offsets`` to the group's coordinator: as a member at its epoch (KIP-848, v9+), or
    with epoch -1 and no member as an admin or a consumer outside the group does (allowed while the group
    has no members)."""
    if not offsets:
        return
    by_topic: dict[str, list] = {}
    for (t, p), offset in sorted(offsets.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": offset,
                                           "committed_leader_epoch": -1, "commit_timestamp": -1,
                                           "committed_metadata": ""})
    body = {"group_id": group_id, "generation_id_or_member_epoch": epoch, "member_id": member_id,
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
    answer = coordinator.request(OFFSET_COMMIT, body, at_least=9 if epoch >= 0 else 2,
                                 at_most=OFFSETS_NAMES_UP_TO)
    for t in answer.topics:
        for p in t.partitions:
            if p.error_code:
                raise ToolError(f"group {group_id}: cannot commit {t.name}-{p.partition_index}: "
                                f"{error_text(p.error_code)}")


def fetch_committed(coordinator, group_id: str, tps=None, member_id: str | None = None,
                    epoch: int = -1) -> dict[tuple[str, int], int]:
    """OffsetFetch (v8+): the group's committed offsets of ``tps`` (None: every partition it has one for),
    asked as a member (``member_id`` and its epoch, KIP-848) or as an admin (None)."""
    topics = None
    if tps is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    body = {"groups": [{"group_id": group_id, "member_id": member_id, "member_epoch": epoch,
                        "topics": topics}], "require_stable": True}
    answer = coordinator.request(OFFSET_FETCH, body, at_least=8, at_most=OFFSETS_NAMES_UP_TO)
    group = answer.groups[0]
    if group.error_code:
        raise ToolError(f"group {group_id}: cannot fetch offsets: {error_text(group.error_code)}")
    out = {}
    for t in group.topics:
        for p in t.partitions:
            if p.error_code:
                raise ToolError(f"group {group_id}: {t.name}-{p.partition_index}: {error_text(p.error_code)}")
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out
