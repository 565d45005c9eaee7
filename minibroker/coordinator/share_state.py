"""The share coordinator (KIP-932): the persisted state of every share partition, in ``__share_group_state``.

``ShareStateCoordinator`` (``broker.share_state``) is Kafka's share coordinator and its persister in one:
the share-partition manager reads, initializes and writes the state of a (group, topic id, partition)
through it synchronously, and the wire APIs InitializeShareGroupState, ReadShareGroupState,
WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary (keys 83-87) are thin over it.

State of one share partition: state epoch, leader epoch, start offset (SPSO) and the delivery state and
count of runs of offsets at or above it. Every mutation appends its record before it returns and changes
memory only after the append succeeded (KafkaError otherwise: NOT_COORDINATOR when the log dir failed,
COORDINATOR_NOT_AVAILABLE for other append failures, as Kafka's coordinator runtime maps them).

Records (``share_state_records``): a write appends a ShareUpdate carrying only the batches it changed,
or, every ``share.coordinator.snapshot.update.records.per.snapshot`` updates (and for a new partition or
an initialize), a ShareSnapshot carrying the merged state. A load replays each partition of the topic in
order: a snapshot replaces the state, an update merges into it, a tombstone deletes it. An unreadable
record is logged and skipped.

The topic: ``share.coordinator.state.topic.num.partitions`` partitions; the state of a key lives in
``abs(hashCode("group:topicId:partition")) % partitions`` (Kafka's ``SharePartitionKey.asCoordinatorKey``
with the topic id in Kafka's base64 form). Its ``cleanup.policy`` is ``delete`` as Kafka sets it, not
``compact``: every ShareUpdate of a partition has the same key, so compaction would keep only the last
update after a snapshot and lose the ones before it. Kafka instead prunes: after a snapshot, records below
the oldest latest-snapshot of every live state in that topic partition are redundant and deleted (its
``lastRedundantOffset``, applied with DeleteRecords). We do the same, synchronously after each snapshot,
and set ``retention.ms``/``retention.bytes`` to -1 so time retention never deletes live state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from enum import IntEnum
from typing import NamedTuple

from minibroker.coordinator.internal_topic import InternalTopic, coordinator_append_error
from minibroker.coordinator.record_codec import RecordError
from minibroker.coordinator.share_state_records import (
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    StateBatchRecord,
    decode_key,
    decode_snapshot_value,
    decode_update_value,
    encode_key,
    encode_snapshot_value,
    encode_update_value,
)
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.share_state")

SHARE_STATE_TOPIC = "__share_group_state"


class DeliveryState(IntEnum):
    """Kafka's RecordState ids, also the persisted DeliveryState (ACQUIRED is never persisted by Kafka)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class StateBatch(NamedTuple):
    """A run of offsets (inclusive range) with one delivery state and delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class ShareState(NamedTuple):
    """One share partition's persisted state, merged (snapshot + updates).

    ``batches`` are sorted, non-overlapping and all at or above ``start_offset``. ``create_timestamp`` and
    ``write_timestamp`` are those of its last ShareSnapshot (Kafka stamps both when it writes one; a
    ShareUpdate carries no timestamp, so memory and a reload agree)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    create_timestamp: int
    write_timestamp: int

    def delivery_complete_count(self) -> int:
        """Offsets at or above the start offset in ACKNOWLEDGED or ARCHIVED batches."""
        done = (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)
        return sum(b.last_offset - max(b.first_offset, self.start_offset) + 1 for b in self.batches
                   if b.delivery_state in done and b.last_offset >= self.start_offset)


def merge_batches(current, new, start_offset: int) -> tuple[StateBatch, ...]:
    """``current`` (sorted, non-overlapping) with every batch of ``new`` laid over it in order (a later
    batch wins where they overlap), cut at ``start_offset``, adjacent runs of equal state and count
    joined. Kafka's PersisterStateBatchCombiner gives the same offsets their same states."""
    runs = [StateBatch(*b) for b in current]
    for nb in new:
        nb = StateBatch(*nb)
        if nb.last_offset < nb.first_offset:
            continue
        i = bisect_left(runs, nb.first_offset, key=lambda r: r.last_offset)  # first run reaching nb
        j = i
        replacement = []
        tail = None
        while j < len(runs) and runs[j].first_offset <= nb.last_offset:
            r = runs[j]
            if r.first_offset < nb.first_offset:
                replacement.append(r._replace(last_offset=nb.first_offset - 1))
            if r.last_offset > nb.last_offset:
                tail = r._replace(first_offset=nb.last_offset + 1)
            j += 1
        replacement.append(nb)
        if tail is not None:
            replacement.append(tail)
        runs[i:j] = replacement
    i = bisect_left(runs, start_offset, key=lambda r: r.last_offset)  # runs wholly below the start go
    runs = runs[i:]
    if runs and runs[0].first_offset < start_offset:
        runs[0] = runs[0]._replace(first_offset=start_offset)
    joined: list[StateBatch] = []
    for r in runs:
        if joined:
            prev = joined[-1]
            if (prev.last_offset + 1 == r.first_offset and prev.delivery_state == r.delivery_state
                    and prev.delivery_count == r.delivery_count):
                joined[-1] = prev._replace(last_offset=r.last_offset)
                continue
        joined.append(r)
    return tuple(joined)


def coordinator_key(group_id: str, topic_id: bytes, partition: int) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``: ``group:topicId:partition``, the key FindCoordinator
    (key type 2) names and the state topic's partition is hashed from."""
    from minibroker.storage.checkpoints import uuid_to_str

    return f"{group_id}:{uuid_to_str(topic_id)}:{partition}"


class _Entry:
    """The state of one share partition and its bookkeeping."""

    __slots__ = ("state", "snapshot_epoch", "updates", "snapshot_offset", "topic_partition")

    def __init__(self, state: ShareState, snapshot_epoch: int, snapshot_offset: int,
                 topic_partition: int) -> None:
        self.state = state
        self.topic_partition = topic_partition  # the __share_group_state partition holding it
        self.snapshot_epoch = snapshot_epoch
        self.updates = 0  # ShareUpdate records since the last snapshot
        self.snapshot_offset = snapshot_offset  # offset of its last ShareSnapshot record; -1 unknown


def _to_records(batches) -> tuple[StateBatchRecord, ...]:
    return tuple(StateBatchRecord(*b) for b in batches)


class ShareStateTopic(InternalTopic):
    """Appends to and reads ``__share_group_state``; created on the first write."""

    def __init__(self, broker) -> None:
        super().__init__(broker, SHARE_STATE_TOPIC,
                         lambda: broker.config["share.coordinator.state.topic.num.partitions"],
                         self._configs, read_chunk=broker.config["share.coordinator.load.buffer.size"],
                         logger=log)

    def _configs(self) -> dict[str, str]:
        cfg = self.broker.config
        return {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                "compression.type": "producer",
                "min.insync.replicas": str(cfg["share.coordinator.state.topic.min.isr"]),
                "segment.bytes": str(cfg["share.coordinator.state.topic.segment.bytes"])}

    def map_append_error(self, e: KafkaError) -> KafkaError:
        return coordinator_append_error(e)


Key = tuple[str, bytes, int]


class ShareStateCoordinator:
    """``broker.share_state``: everything on the event loop and synchronous (no await inside a call)."""

    def __init__(self, broker, store: ShareStateTopic | None = None) -> None:
        self.broker = broker
        self.store = store if store is not None else ShareStateTopic(broker)
        self.updates_per_snapshot = broker.config["share.coordinator.snapshot.update.records.per.snapshot"]
        self.states: dict[Key, _Entry] = {}
        self._by_group: dict[str, set[tuple[bytes, int]]] = {}
        self._by_topic_partition: dict[int, set[Key]] = {}
        self.loaded = False
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Replay ``__share_group_state`` if it exists (in the background); ``loaded`` once done."""
        if self.store.exists:
            self.broker.spawn(self._load())
        else:
            self.loaded = True

    def close(self) -> None:
        self._closed = True

    async def _load(self) -> None:
        count = 0
        started = time.monotonic()
        try:
            for partition in range(self.store.num_partitions):
                for record in self.store.read_partition(partition):
                    if self._closed:
                        return
                    count += 1
                    if record.commit is None and record.key is not None:
                        try:
                            self._replay(record.key, record.value, record.offset, partition)
                        except (RecordError, ValueError) as e:
                            log.warning("skipping unreadable %s record at %d-%d: %s", SHARE_STATE_TOPIC,
                                        partition, record.offset, e)
                    if count % 1000 == 0:
                        await asyncio.sleep(0)
                await asyncio.sleep(0)
            log.info("loaded the state of %d share partitions from %d records of %s in %.3fs",
                     len(self.states), count, SHARE_STATE_TOPIC, time.monotonic() - started)
        except Exception:
            log.exception("loading %s failed", SHARE_STATE_TOPIC)
        finally:
            self.loaded = True

    def _replay(self, key_bytes: bytes, value_bytes: bytes | None, offset: int, partition: int) -> None:
        key = decode_key(key_bytes)
        k = (key.group_id, key.topic_id, key.partition)
        if value_bytes is None:
            self._forget(k)
            return
        if key.snapshot:
            v = decode_snapshot_value(value_bytes)
            state = ShareState(v.state_epoch, v.leader_epoch, v.start_offset,
                               merge_batches((), v.batches, v.start_offset), v.create_timestamp,
                               v.write_timestamp)
            self._put(k, _Entry(state, v.snapshot_epoch, offset, partition))
            log.debug("replayed ShareSnapshot of %s: %s", k, state)
            return
        u = decode_update_value(value_bytes)
        entry = self.states.get(k)
        if entry is None:  # updates left behind by a deleted state whose snapshot was pruned
            log.debug("skipping a ShareUpdate of %s without a snapshot", k)
            return
        entry.state = self._updated(entry.state, u.start_offset, u.batches, u.leader_epoch,
                                    entry.state.write_timestamp)
        entry.updates += 1

    # -- bookkeeping ----------------------------------------------------------------------------

    def _put(self, k: Key, entry: _Entry) -> None:
        old = self.states.get(k)
        if old is not None and old.topic_partition != entry.topic_partition:
            self._forget(k)
        self.states[k] = entry
        self._by_group.setdefault(k[0], set()).add((k[1], k[2]))
        self._by_topic_partition.setdefault(entry.topic_partition, set()).add(k)

    def _forget(self, k: Key) -> None:
        entry = self.states.pop(k, None)
        if entry is not None:
            keys = self._by_topic_partition.get(entry.topic_partition)
            if keys is not None:
                keys.discard(k)
            members = self._by_group.get(k[0])
            if members is not None:
                members.discard((k[1], k[2]))
                if not members:
                    del self._by_group[k[0]]

    @staticmethod
    def _updated(state: ShareState, start_offset: int, batches, leader_epoch: int,
                 write_timestamp: int) -> ShareState:
        start = state.start_offset if start_offset < 0 else start_offset
        return state._replace(start_offset=start,
                              leader_epoch=state.leader_epoch if leader_epoch < 0 else leader_epoch,
                              batches=merge_batches(state.batches, batches, start),
                              write_timestamp=write_timestamp)

    def _check_loaded(self) -> None:
        if not self.loaded:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"{SHARE_STATE_TOPIC} is still being loaded")

    def partition_of(self, group_id: str, topic_id: bytes, partition: int) -> int:
        """The ``__share_group_state`` partition holding this share partition's state."""
        return self.store.partition_for(coordinator_key(group_id, topic_id, partition))

    def _append(self, k: Key, entries: list[tuple[bytes, bytes | None]]) -> tuple[int, int]:
        """Append one share partition's records as one batch; (state-topic partition, first offset)."""
        try:
            self.store.ensure_topic()  # the partition count is the topic's from here on
        except KafkaError as e:
            log.warning("could not create %s: %s", SHARE_STATE_TOPIC, e)
            raise self.store.map_append_error(e) from e
        partition = self.partition_of(*k)
        outcome = self.store.append_to(partition, entries, what=f"share partition {k}")
        return partition, (outcome.base_offset if outcome is not None else -1)

    def _write_snapshot(self, k: Key, state: ShareState, snapshot_epoch: int) -> None:
        key = encode_key(ShareStateKey(True, *k))
        value = encode_snapshot_value(ShareSnapshotValue(
            snapshot_epoch, state.state_epoch, state.leader_epoch, state.start_offset,
            state.create_timestamp, state.write_timestamp, _to_records(state.batches)))
        partition, offset = self._append(k, [(key, value)])
        self._put(k, _Entry(state, snapshot_epoch, offset, partition))
        log.debug("wrote ShareSnapshot of %s at %s-%d:%d: %s", k, SHARE_STATE_TOPIC, partition, offset, state)
        self._prune(partition)

    def _prune(self, partition: int) -> None:
        """Delete the records of a state-topic partition that no live state needs (below the oldest
        latest-snapshot of the states living there), as Kafka's share coordinator does."""
        oldest = None
        for k in self._by_topic_partition.get(partition, ()):
            offset = self.states[k].snapshot_offset
            if offset < 0:
                return  # not known: keep everything
            if oldest is None or offset < oldest:
                oldest = offset
        plog = self.broker.logs.get_log(SHARE_STATE_TOPIC, partition)
        if oldest is None or plog is None or oldest <= plog.log_start_offset:
            return
        try:
            plog.delete_records_before(oldest)
            log.debug("pruned %s-%d below offset %d", SHARE_STATE_TOPIC, partition, oldest)
        except Exception as e:  # pruning is housekeeping: the state is safe either way
            log.warning("could not prune %s-%d below %d: %s", SHARE_STATE_TOPIC, partition, oldest, e)

    # -- the API ----------------------------------------------------------------------------------

    def read(self, group_id: str, topic_id: bytes, partition: int) -> ShareState | None:
        """The state of a share partition; None when it has none. COORDINATOR_LOAD_IN_PROGRESS while
        loading."""
        self._check_loaded()
        entry = self.states.get((group_id, bytes(topic_id), partition))
        return entry.state if entry is not None else None

    def initialize(self, group_id: str, topic_id: bytes, partition: int, start_offset: int,
                   state_epoch: int) -> None:
        """(Re)set the state to ``start_offset`` with no batches (a ShareSnapshot record)."""
        self._check_loaded()
        k = (group_id, bytes(topic_id), partition)
        now = int(time.time() * 1000)
        entry = self.states.get(k)
        snapshot_epoch = 0 if entry is None else entry.snapshot_epoch + 1
        leader_epoch = -1 if entry is None else entry.state.leader_epoch
        state = ShareState(state_epoch, leader_epoch, start_offset, (), now, now)
        self._write_snapshot(k, state, snapshot_epoch)

    def write(self, group_id: str, topic_id: bytes, partition: int, start_offset: int,
              batches: list[StateBatch], *, leader_epoch: int = -1) -> None:
        """Merge ``batches`` into the state (start offset -1 keeps the current one; batches wholly below
        the start offset are dropped). A ShareUpdate record, or a ShareSnapshot every
        ``share.coordinator.snapshot.update.records.per.snapshot`` updates; a write to a share partition
        without state creates it (state epoch 0), as Kafka's share coordinator does."""
        self._check_loaded()
        k = (group_id, bytes(topic_id), partition)
        now = int(time.time() * 1000)
        entry = self.states.get(k)
        batches = [StateBatch(*b) for b in batches]
        if entry is None:
            start = start_offset if start_offset >= 0 else min((b.first_offset for b in batches), default=0)
            state = ShareState(0, leader_epoch, start, merge_batches((), batches, start), now, now)
            self._write_snapshot(k, state, 0)
            return
        state = self._updated(entry.state, start_offset, batches, leader_epoch, entry.state.write_timestamp)
        if entry.updates >= self.updates_per_snapshot:  # Kafka stamps a new snapshot as created now too
            self._write_snapshot(k, state._replace(create_timestamp=now, write_timestamp=now),
                                 entry.snapshot_epoch + 1)
            return
        value = encode_update_value(ShareUpdateValue(entry.snapshot_epoch, leader_epoch, start_offset,
                                                     _to_records(batches)))
        self._append(k, [(encode_key(ShareStateKey(False, *k)), value)])
        entry.state = state
        entry.updates += 1
        log.debug("wrote ShareUpdate of %s (%d since the snapshot): start %d, %d batches", k,
                  entry.updates, start_offset, len(batches))

    def delete(self, group_id: str, topic_id: bytes, partition: int) -> None:
        """Forget the state (a tombstone of its ShareSnapshot key, the one Kafka writes); read() gives None
        afterwards."""
        self._check_loaded()
        k = (group_id, bytes(topic_id), partition)
        if k not in self.states:
            return
        self._append(k, [(encode_key(ShareStateKey(True, *k)), None)])
        self._forget(k)
        log.debug("deleted the state of %s", k)

    def partitions(self, group_id: str) -> list[tuple[bytes, int]]:
        """Every (topic id, partition) of the group that has state, sorted."""
        self._check_loaded()
        return sorted(self._by_group.get(group_id, ()))
