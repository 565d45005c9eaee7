"""The group coordinator: Kafka's classic rebalance protocol and committed offsets, on one node.

Owner of: every ``ClassicGroup`` (members, generations, offsets), their timers and the JoinGroup
and SyncGroup requests waiting for a rebalance. Handlers call in and get results or futures; no
other code mutates group state. Everything runs on the broker's event loop: timers are
``loop.call_later`` handles (session timeouts, the initial rebalance delay, the rebalance and
pending-sync timeouts, offsets retention), never polling. Durable state goes to
``__consumer_offsets`` through ``OffsetsTopic`` before a response is sent, and is read back when
the coordinator starts (until then group requests get COORDINATOR_LOAD_IN_PROGRESS).

Consumer (KIP-848) and share (KIP-932) groups share the group id space and ``__consumer_offsets``; their
coordinators (``self.consumer``, ``self.share``) are created here, loaded in the same pass over the topic,
and answer the APIs every group type shares (listing, deleting) through this class.

The rules and error codes per state follow Kafka's classic GroupCoordinator (KIP-345 static
members, KIP-394 member id required, KIP-211 offsets retention of empty groups, KIP-814 skip
assignment). This node is the coordinator of every group, so NOT_COORDINATOR is never returned.

Transactional offsets (TxnOffsetCommit, KIP-98/KIP-447) are written at once, in a transactional
batch of the producer, and kept pending per group and producer id until the transaction
coordinator writes the transaction's marker into the group's ``__consumer_offsets`` partition:
COMMIT makes them the group's committed offsets, ABORT drops them. Meanwhile OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for those partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import NamedTuple

from minibroker.config import BrokerConfig
from minibroker.coordinator.classic_group import ClassicGroup, GroupState, Member, now_ms
from minibroker.coordinator.consumer_group import ConsumerGroup
from minibroker.coordinator.consumer_group_coordinator import ConsumerGroupCoordinator
from minibroker.coordinator.group_configs import GroupConfigs
from minibroker.coordinator.group_records import (
    ConsumerGroupKey,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    ShareGroupKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from minibroker.coordinator.offsets_store import OffsetsTopic, StoredRecord
from minibroker.coordinator.share_group_coordinator import ShareGroupCoordinator
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.uuids import uuid4_text

log = logging.getLogger("minibroker.groups")

CONSUMER_PROTOCOL_TYPE = "consumer"
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's timeout for a new member to finish joining
E = ErrorCode


MAX_STORED_STRING = 32767  # a string's int16 length in __consumer_offsets' keys and values


def _storable(*strings: str | None) -> bool:
    return all(s is None or len(s) * 3 <= MAX_STORED_STRING or len(s.encode("utf-8")) <= MAX_STORED_STRING
               for s in strings)


class JoinResult(NamedTuple):
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: Sequence[tuple[str, str | None, bytes]] = ()
    skip_assignment: bool = False


class SyncResult(NamedTuple):
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class GroupSummary(NamedTuple):
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[tuple[str, str | None, str, str, bytes, bytes]]  # id, instance, client, host, meta, assign


def _subscribed_topics(group: ClassicGroup) -> set[str] | None:
    """Topics the members subscribe to, when the group speaks the consumer protocol (else None)."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        return None
    from minibroker.protocol import codec

    topics: set[str] = set()
    for m in group.members.values():
        meta = m.metadata(group.protocol_name)
        try:
            version = int.from_bytes(meta[:2], "big", signed=True) if len(meta) >= 2 else -1
            sub = codec.decode("ConsumerProtocolSubscription", min(max(version, 0), 3), meta, 2, exact=False)
        except Exception:
            return None
        topics.update(sub.topics or ())
    return topics


class GroupCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.initial_rebalance_delay_ms = cfg["group.initial.rebalance.delay.ms"]
        self.min_session_timeout_ms = cfg["group.min.session.timeout.ms"]
        self.max_session_timeout_ms = cfg["group.max.session.timeout.ms"]
        self.max_group_size = cfg["group.max.size"]
        self.offsets_retention_ms = cfg["offsets.retention.minutes"] * 60_000
        self.retention_check_interval_ms = cfg["offsets.retention.check.interval.ms"]
        self.max_metadata_bytes = cfg["offset.metadata.max.bytes"]
        self.store = OffsetsTopic(broker)
        self.groups: dict[str, ClassicGroup] = {}
        # group -> producer id -> offsets of its open transaction (TxnOffsetCommit), until the marker
        self.pending_txn_offsets: dict[str, dict[int, dict[tuple[str, int], OffsetCommitValue]]] = {}
        self.loading = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._join_timers: dict[str, asyncio.TimerHandle] = {}
        self._initial_delay: dict[str, tuple[int, int]] = {}  # group -> (delay, remaining) while waiting
        self._sync_timers: dict[str, asyncio.TimerHandle] = {}
        self._pending_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._retention_timer: asyncio.TimerHandle | None = None
        self._closed = False
        # group configs (resource type GROUP): per-group overrides of the group.* broker keys
        self.configs = GroupConfigs(cfg, cfg.data_dir if isinstance(cfg, BrokerConfig) else None)
        self.configs.load()
        # consumer (KIP-848) groups: the same id space, kept apart from the classic ones
        self.consumer = ConsumerGroupCoordinator(self)
        # share (KIP-932) groups: the same id space again
        self.share = ShareGroupCoordinator(self)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load ``__consumer_offsets`` if it exists (in the background) and start the retention timer."""
        self._loop = asyncio.get_running_loop()
        if self.store.exists:
            self.loading = True
            self.broker.spawn(self._load())
        self._schedule_retention()

    def close(self) -> None:
        self._closed = True
        timers = [*self._join_timers.values(), *self._sync_timers.values(), *self._pending_timers.values()]
        for handle in timers:
            handle.cancel()
        if self._retention_timer is not None:
            self._retention_timer.cancel()
        self.consumer.close()
        self.share.close()
        for group in self.groups.values():
            for m in group.members.values():
                if m.heartbeat_timer is not None:
                    m.heartbeat_timer.cancel()
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()

    def _call_later(self, delay_ms: int, fn, *args) -> asyncio.TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(delay_ms, 0) / 1000.0, fn, *args)

    # -- loading --------------------------------------------------------------------------------

    async def _load(self) -> None:
        metadata: dict[str, GroupMetadataValue | None] = {}
        offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = {}
        open_txns: dict[str, dict[int, dict[tuple[str, int], OffsetCommitValue]]] = {}
        consumer: dict[str, dict[tuple[int, str], bytes]] = {}  # consumer group -> its records
        share: dict[str, dict[tuple[int, str], bytes]] = {}  # share group -> its records
        count = 0
        # Plain records are decoded only once per key: the last value of each raw key, in the order of
        # those last writes (re-inserted on each write), is what applying every record in turn leaves.
        latest: dict[bytes, bytes | None] = {}

        def apply_latest() -> None:
            for key_bytes, value_bytes in latest.items():
                self._apply_record(key_bytes, value_bytes, metadata, offsets, consumer, share)
            latest.clear()

        try:
            for partition in range(self.store.num_partitions):
                # producer id -> group -> offsets written in its transaction, awaiting its marker
                pending: dict[int, dict[str, dict[tuple[str, int], OffsetCommitValue]]] = {}
                for entry in self.store.read_partition(partition):
                    record = StoredRecord(*entry)
                    count += 1
                    if record.commit is not None:
                        committed = pending.pop(record.producer_id, {})
                        if record.commit and committed:
                            apply_latest()  # the plain records before the marker first
                            for group_id, txn_offsets in committed.items():
                                offsets.setdefault(group_id, {}).update(txn_offsets)
                    elif record.producer_id >= 0:
                        self._apply_record(record.key, record.value, {},
                                           pending.setdefault(record.producer_id, {}))
                    else:
                        latest.pop(record.key, None)
                        latest[record.key] = record.value
                    if count % 1000 == 0:
                        await asyncio.sleep(0)
                apply_latest()
                for producer_id, by_group in pending.items():  # transactions still open
                    for group_id, txn_offsets in by_group.items():
                        open_txns.setdefault(group_id, {})[producer_id] = txn_offsets
                await asyncio.sleep(0)
            for group_id, records in consumer.items():
                if group_id not in metadata or metadata[group_id] is None:
                    try:
                        self.consumer.load(group_id, records, offsets.get(group_id, {}))
                    except Exception as e:  # one unreadable group must not stop the others loading
                        log.warning("skipping unreadable consumer group %s: %s", group_id, e)
            for group_id, records in share.items():
                if group_id not in self.consumer.groups and metadata.get(group_id) is None:
                    try:
                        self.share.load(group_id, records)
                    except Exception as e:  # one unreadable group must not stop the others loading
                        log.warning("skipping unreadable share group %s: %s", group_id, e)
            for group_id in set(metadata) | set(offsets):
                if group_id not in self.consumer.groups and group_id not in self.share.groups:
                    self._load_group(group_id, metadata.get(group_id), offsets.get(group_id, {}))
            self.pending_txn_offsets = open_txns
            log.info("loaded %d groups from %d records of __consumer_offsets",
                     len(self.groups) + len(self.consumer.groups) + len(self.share.groups), count)
        except Exception:
            log.exception("loading __consumer_offsets failed")
        finally:
            self.loading = False

    @staticmethod
    def _apply_record(key_bytes, value_bytes, metadata, offsets, consumer=None, share=None) -> None:
        try:
            key = decode_key(key_bytes)
            if isinstance(key, OffsetCommitKey):
                group_offsets = offsets.setdefault(key.group, {})
                if value_bytes is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    group_offsets[(key.topic, key.partition)] = decode_offset_commit_value(value_bytes)
            elif isinstance(key, GroupMetadataKey):
                value = None if value_bytes is None else decode_group_metadata_value(value_bytes)
                metadata[key.group] = value
            elif isinstance(key, (ConsumerGroupKey, ShareGroupKey)):  # kept as bytes until the groups load
                by_group = consumer if isinstance(key, ConsumerGroupKey) else share
                if by_group is not None:
                    records = by_group.setdefault(key.group, {})
                    if value_bytes is None:
                        records.pop((key.record_type, key.member), None)
                    else:
                        records[(key.record_type, key.member)] = value_bytes
        except (RecordError, UnicodeDecodeError) as e:
            log.warning("skipping unreadable __consumer_offsets record: %s", e)

    def _load_group(self, group_id: str, value: GroupMetadataValue | None,
                    offsets: dict[tuple[str, int], OffsetCommitValue]) -> None:
        if value is None and not offsets:
            return
        group = ClassicGroup(group_id)
        group.offsets = dict(offsets)
        if value is not None:
            group.protocol_type = value.protocol_type or None
            group.generation_id = value.generation
            group.protocol_name = value.protocol
            group.leader_id = value.leader
            if value.current_state_timestamp >= 0:
                group.state_timestamp_ms = value.current_state_timestamp
            for r in value.members:
                member = Member(r.member_id, r.group_instance_id, r.client_id, r.client_host,
                                r.rebalance_timeout, r.session_timeout, group.protocol_type or "",
                                [(value.protocol or "", r.subscription)], assignment=r.assignment)
                group.members[member.member_id] = member
                if member.group_instance_id is not None:
                    group.static_members[member.group_instance_id] = member.member_id
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            group.subscribed_topics = _subscribed_topics(group)
        self.groups[group_id] = group
        for member in group.members.values():
            self._schedule_heartbeat(group, member)

    # -- common checks --------------------------------------------------------------------------

    def _check_group_id(self, group_id: str | None, *, allow_empty: bool = False) -> None:
        if group_id is None or (not allow_empty and group_id == ""):
            raise KafkaError(E.INVALID_GROUP_ID, "The configured groupId is invalid.")
        if not _storable(group_id):
            raise KafkaError(E.INVALID_GROUP_ID, f"The group id is longer than {MAX_STORED_STRING} bytes.")
        if self.loading:
            raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)

    def _add_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id)
        self.groups[group_id] = group
        return group

    def partition_for(self, group_id: str) -> int:
        return self.store.partition_for(group_id)

    def _refuse_share_group(self, group_id: str) -> None:
        """Committed offsets are not a share group's (Kafka's ShareGroup.validateOffsetCommit and
        validateOffsetFetch/Delete)."""
        if group_id in self.share.groups:
            raise KafkaError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    # -- JoinGroup ------------------------------------------------------------------------------

    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, *args,
                         **kwargs) -> JoinResult:
        result = await self._join_group(group_id, member_id, group_instance_id, *args, **kwargs)
        events = getattr(self.broker, "group_events", None)  # absent on unit tests' stand-in brokers
        if events is not None:  # the live view's timeline
            events.record(group_id, "join", result.member_id or member_id, error=result.error.name,
                          generation=result.generation_id, leader=result.leader_id == result.member_id,
                          instance_id=group_instance_id)
        return result

    async def _join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                          client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                          protocol_type: str, protocols: list[tuple[str, bytes]], *,
                          require_known_member_id: bool, supports_skip_assignment: bool = False
                          ) -> JoinResult:
        try:
            self._check_group_id(group_id)
        except KafkaError as e:
            return JoinResult(e.code, member_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(E.INVALID_SESSION_TIMEOUT, member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        # Strings the group's record in __consumer_offsets keeps (int16 lengths there): refused here
        # rather than failing when the record is written (the fuzzer found that, mid-rebalance).
        new_member_prefix = group_instance_id if group_instance_id is not None else client_id
        if not (_storable(protocol_type, group_instance_id, *(n for n, _ in protocols))
                and _storable((new_member_prefix or "") + "-" + "0" * 36)):  # prefix-uuid
            return JoinResult(E.INVALID_REQUEST, member_id)
        unknown = member_id == ""
        if group_id in self.share.groups:  # Kafka: a group of another type is not joined classically
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:  # a classic member in a consumer group (online migration)
                error, new_id, epoch, ptype, pname = self.consumer.classic_join(
                    consumer_group, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                    rebalance_timeout_ms, protocol_type, protocols, require_known_member_id)
                return JoinResult(error, new_id, epoch, ptype, pname)
            try:  # an Empty consumer group becomes a classic group, keeping its offsets
                self.consumer.delete(consumer_group, keep_offsets=True)
            except KafkaError as e:
                return JoinResult(e.code, member_id)
            self._add_group(group_id).offsets = consumer_group.offsets
        group = self.groups.get(group_id)
        if group is None:
            if not unknown:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id)
            group = self._add_group(group_id)
        if group.is_(GroupState.DEAD):
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id)
        if (not group.has(member_id) and not group.is_pending(member_id)
                and group.static_member_id(group_instance_id) is None
                and len(group.members) + len(group.pending_members) >= self.max_group_size):
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id)
        if not group.supports_protocols(protocol_type, [n for n, _ in protocols]):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        spec = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if unknown:
            outcome = self._join_unknown_member(group, group_instance_id, spec, require_known_member_id,
                                                supports_skip_assignment)
        else:
            outcome = self._join_known_member(group, member_id, group_instance_id, spec)
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def _join_unknown_member(self, group, instance_id, spec, require_known_member_id, supports_skip):
        client_id = spec[0]
        new_id = f"{instance_id if instance_id is not None else client_id}-{uuid4_text()}"
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                return self._update_static_member_and_rebalance(group, old_id, new_id, spec, supports_skip)
            return self._add_member_and_rebalance(group, new_id, instance_id, spec)
        if require_known_member_id:
            group.pending_members.add(new_id)
            self._schedule_pending_expiry(group, new_id, spec[2])
            return JoinResult(E.MEMBER_ID_REQUIRED, new_id)
        return self._add_member_and_rebalance(group, new_id, None, spec)

    def _join_known_member(self, group, member_id, instance_id, spec):
        if group.is_pending(member_id):
            self._cancel_pending_expiry(group, member_id)
            return self._add_member_and_rebalance(group, member_id, instance_id, spec)
        if group.is_fenced(member_id, instance_id):
            return JoinResult(E.FENCED_INSTANCE_ID, member_id)
        member = group.members.get(member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id)
        protocols = spec[5]
        if group.is_(GroupState.COMPLETING_REBALANCE) and member.matches(protocols):
            # The member lost the join response: give it again.
            return self._current_join_result(group, member)
        if group.is_(GroupState.STABLE) and not group.is_leader(member_id) and member.matches(protocols):
            return JoinResult(E.NONE, member_id, group.generation_id, group.protocol_type,
                              group.protocol_name, group.leader_id or "")
        return self._update_member_and_rebalance(group, member, spec)

    def _current_join_result(self, group: ClassicGroup, member: Member) -> JoinResult:
        members = self._member_list(group) if group.is_leader(member.member_id) else []
        return JoinResult(E.NONE, member.member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", members)

    @staticmethod
    def _member_list(group: ClassicGroup) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()]

    def _new_join_future(self, member: Member) -> asyncio.Future:
        if member.join_future is not None and not member.join_future.done():
            # A second JoinGroup from the same member replaces the first (whose answer would be stale).
            member.join_future.set_result(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_future = (self._loop or asyncio.get_running_loop()).create_future()
        return member.join_future

    def _add_member_and_rebalance(self, group, member_id, instance_id, spec) -> asyncio.Future:
        client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols = spec
        member = Member(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                        protocol_type, protocols, is_new=True)
        group.add(member)
        fut = self._new_join_future(member)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.group_id in self._initial_delay:
            group.new_member_added = True
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        self._try_complete_join(group)
        return fut

    def _update_member_and_rebalance(self, group, member, spec) -> asyncio.Future:
        _client_id, _host, session_ms, rebalance_ms, _ptype, protocols = spec
        member.protocols = protocols
        member.session_timeout_ms = session_ms
        member.rebalance_timeout_ms = rebalance_ms
        fut = self._new_join_future(member)
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")
        self._try_complete_join(group)
        return fut

    def _update_static_member_and_rebalance(self, group, old_id, new_id, spec, supports_skip):
        _client_id, _host, session_ms, rebalance_ms, _ptype, protocols = spec
        current_leader = group.leader_id
        was_leader = group.is_leader(old_id)
        member = group.members.pop(old_id)
        for fut, result in ((member.join_future, JoinResult(E.FENCED_INSTANCE_ID, old_id)),
                            (member.sync_future, SyncResult(E.FENCED_INSTANCE_ID))):
            if fut is not None and not fut.done():
                fut.set_result(result)
        member.join_future = member.sync_future = None
        member.member_id = new_id
        group.members[new_id] = member
        group.static_members[member.group_instance_id] = new_id
        if was_leader:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        old_protocols = member.protocols
        member.protocols = protocols
        member.session_timeout_ms = session_ms
        member.rebalance_timeout_ms = rebalance_ms
        self._schedule_heartbeat(group, member)
        if group.is_(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                try:
                    self._store_group(group)
                except KafkaError as e:
                    # Undo the replacement, as Kafka does when the write fails.
                    group.members.pop(new_id)
                    member.member_id, member.protocols = old_id, old_protocols
                    group.members[old_id] = member
                    group.static_members[member.group_instance_id] = old_id
                    if was_leader:
                        group.leader_id = old_id
                    return JoinResult(e.code, "")
                log.info("static member %s of group %s rejoined as %s without a rebalance",
                         member.group_instance_id, group.group_id, new_id)
                skip = supports_skip and was_leader
                return JoinResult(E.NONE, new_id, group.generation_id, group.protocol_type,
                                  group.protocol_name,
                                  new_id if skip else (current_leader or ""),
                                  self._member_list(group) if skip else [], skip_assignment=skip)
            fut = self._new_join_future(member)
            reason = f"static member {member.group_instance_id} changed protocols"
            self._maybe_prepare_rebalance(group, reason)
            return fut
        fut = self._new_join_future(member)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"static member {member.group_instance_id} rejoined")
        self._try_complete_join(group)
        return fut

    # -- the rebalance --------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        self._cancel(self._sync_timers, group.group_id)
        group.pending_sync.clear()
        self._cancel(self._join_timers, group.group_id)
        was_empty = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s in state PreparingRebalance with old generation %d (%s)",
                 group.group_id, group.generation_id, reason)
        events = getattr(self.broker, "group_events", None)
        if events is not None:
            events.record(group.group_id, "rebalance", None, generation=group.generation_id, reason=reason)
        if was_empty:
            timeout = group.max_rebalance_timeout_ms()
            delay = min(self.initial_rebalance_delay_ms, timeout)
            group.new_member_added = False
            self._initial_delay[group.group_id] = (delay, timeout - delay)
            self._join_timers[group.group_id] = self._call_later(delay, self._initial_delay_expired, group)
        else:
            self._join_timers[group.group_id] = self._call_later(group.max_rebalance_timeout_ms(),
                                                                 self._complete_join, group)
            self._try_complete_join(group)

    def _initial_delay_expired(self, group: ClassicGroup) -> None:
        delay, remaining = self._initial_delay.pop(group.group_id, (0, 0))
        self._join_timers.pop(group.group_id, None)
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            next_delay = min(delay, remaining)
            self._initial_delay[group.group_id] = (delay, remaining - next_delay)
            self._join_timers[group.group_id] = self._call_later(next_delay, self._initial_delay_expired,
                                                                 group)
            return
        self._complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        if (group.is_(GroupState.PREPARING_REBALANCE) and group.group_id not in self._initial_delay
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        self._cancel(self._join_timers, group.group_id)
        self._initial_delay.pop(group.group_id, None)
        if not group.is_(GroupState.PREPARING_REBALANCE) or self.groups.get(group.group_id) is not group:
            return
        for failed in [m for m in group.not_yet_rejoined() if not m.is_static]:
            log.info("group %s: removing member %s that did not rejoin", group.group_id, failed.member_id)
            self._drop_member(group, failed)
        if group.members and not self._elect_joined_leader(group):
            # Nobody rejoined: wait another rebalance timeout for session timeouts to clear members.
            self._join_timers[group.group_id] = self._call_later(group.max_rebalance_timeout_ms(),
                                                                 self._complete_join, group)
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.subscribed_topics = None
            group.transition_to(GroupState.EMPTY)
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            try:
                self._store_group(group)
            except KafkaError:
                pass
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = _subscribed_topics(group)
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        log.info("stabilized group %s generation %d (%d members, protocol %s)", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name)
        events = getattr(self.broker, "group_events", None)
        if events is not None:
            events.record(group.group_id, "stabilized", group.leader_id, generation=group.generation_id,
                          members=len(group.members), protocol=group.protocol_name)
        for member in group.members.values():
            if member.join_future is not None:
                fut, member.join_future = member.join_future, None
                if not fut.done():
                    fut.set_result(self._current_join_result(group, member))
            member.is_new = False
            self._schedule_heartbeat(group, member)
            group.pending_sync.add(member.member_id)
        self._sync_timers[group.group_id] = self._call_later(group.max_rebalance_timeout_ms(),
                                                             self._pending_sync_expired, group,
                                                             group.generation_id)

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        leader = group.members.get(group.leader_id) if group.leader_id is not None else None
        if leader is not None and leader.is_awaiting_join:
            return True
        joined = next((m.member_id for m in group.members.values() if m.is_awaiting_join), None)
        if joined is None:
            return False
        group.leader_id = joined
        return True

    def _pending_sync_expired(self, group: ClassicGroup, generation: int) -> None:
        self._sync_timers.pop(group.group_id, None)
        if generation != group.generation_id or group.state not in (GroupState.COMPLETING_REBALANCE,
                                                                     GroupState.STABLE):
            return
        missing = [group.members[m] for m in group.pending_sync if m in group.members]
        if missing:
            log.info("group %s: removing members %s that did not sync in time", group.group_id,
                     [m.member_id for m in missing])
        for member in missing:
            self._remove_member_and_update_group(group, member, "pending sync expired")

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.sync_future is not None:
                fut, member.sync_future = member.sync_future, None
                if not fut.done():
                    fut.set_result(SyncResult(error, group.protocol_type, group.protocol_name,
                                              member.assignment if error == E.NONE else b""))
                self._schedule_heartbeat(group, member)

    # -- members leaving, timers ----------------------------------------------------------------

    def _drop_member(self, group: ClassicGroup, member: Member) -> None:
        """Take a member out of the group, answering whatever it is waiting for with UNKNOWN_MEMBER_ID."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, ""))
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(E.UNKNOWN_MEMBER_ID))
        member.join_future = member.sync_future = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        log.info("member %s left group %s (%s)", member.member_id, group.group_id, reason)
        events = getattr(self.broker, "group_events", None)
        if events is not None:
            events.record(group.group_id, "removed", member.member_id, generation=group.generation_id,
                          reason=reason)
        self._drop_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        timeout = NEW_MEMBER_JOIN_TIMEOUT_MS if member.is_new else member.session_timeout_ms
        member.heartbeat_timer = self._call_later(timeout, self._heartbeat_expired, group, member)

    def _heartbeat_expired(self, group: ClassicGroup, member: Member) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member or self._closed:
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            self._schedule_heartbeat(group, member)  # waiting in a rebalance counts as alive
            return
        self._remove_member_and_update_group(group, member, "session timeout expired")

    def _schedule_pending_expiry(self, group: ClassicGroup, member_id: str, session_ms: int) -> None:
        key = (group.group_id, member_id)
        self._cancel(self._pending_timers, key)
        self._pending_timers[key] = self._call_later(session_ms, self._pending_expired, group, member_id)

    def _cancel_pending_expiry(self, group: ClassicGroup, member_id: str) -> None:
        self._cancel(self._pending_timers, (group.group_id, member_id))

    def _pending_expired(self, group: ClassicGroup, member_id: str) -> None:
        self._pending_timers.pop((group.group_id, member_id), None)
        self._remove_pending_member(group, member_id)

    def _remove_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        self._cancel_pending_expiry(group, member_id)
        group.pending_members.discard(member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    @staticmethod
    def _cancel(timers: dict, key) -> None:
        handle = timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    # -- SyncGroup ------------------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, *args) -> SyncResult:
        result = await self._sync_group(group_id, generation_id, member_id, *args)
        events = getattr(self.broker, "group_events", None)
        if events is not None:
            events.record(group_id, "sync", member_id, error=result.error.name, generation=generation_id,
                          assignment_bytes=len(result.assignment or b""))
        return result

    async def _sync_group(self, group_id: str, generation_id: int, member_id: str,
                          group_instance_id: str | None,
                          protocol_type: str | None, protocol_name: str | None,
                          assignments: list[tuple[str, bytes]]) -> SyncResult:
        try:
            self._check_group_id(group_id)
        except KafkaError as e:
            return SyncResult(e.code)
        group = self.groups.get(group_id)
        if group is None:
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:  # a classic member in a consumer group (online migration)
                return SyncResult(*self.consumer.classic_sync(consumer_group, member_id, group_instance_id,
                                                              generation_id, protocol_type, protocol_name))
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.DEAD):
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_fenced(member_id, group_instance_id):
            return SyncResult(E.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(E.ILLEGAL_GENERATION)
        if ((protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(GroupState.EMPTY):
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        group.pending_sync.discard(member_id)
        if group.is_(GroupState.STABLE):
            self._schedule_heartbeat(group, member)
            return SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: wait for the leader's assignment.
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(E.REBALANCE_IN_PROGRESS))
        fut = (self._loop or asyncio.get_running_loop()).create_future()
        member.sync_future = fut
        if group.is_leader(member_id):
            given = {mid: bytes(a) for mid, a in assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            try:
                self._store_group(group)
            except KafkaError as e:
                self._reset_and_propagate_assignment_error(group, e.code)
                self._maybe_prepare_rebalance(group, "could not store the group")
            else:
                group.transition_to(GroupState.STABLE)
                self._propagate_assignment(group, E.NONE)
        return await fut

    # -- Heartbeat ------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        error = self._heartbeat(group_id, generation_id, member_id, group_instance_id)
        events = getattr(self.broker, "group_events", None)
        if events is not None:
            events.record(group_id, "heartbeat", member_id, error=error.name, generation=generation_id)
        return error

    def _heartbeat(self, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None) -> ErrorCode:
        try:
            self._check_group_id(group_id)
        except KafkaError as e:
            return e.code
        group = self.groups.get(group_id)
        if group is None:
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:  # a classic member in a consumer group (online migration)
                return self.consumer.classic_heartbeat(consumer_group, member_id, group_instance_id,
                                                       generation_id)
            return E.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_fenced(member_id, group_instance_id):
            return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # -- LeaveGroup -----------------------------------------------------------------------------

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        error, out = self._leave_group(group_id, leaving)
        events = getattr(self.broker, "group_events", None)
        if events is not None:
            for member_id, instance_id, member_error in out:
                events.record(group_id, "leave", member_id, instance_id=instance_id,
                              error=(member_error if error is E.NONE else error).name)
        return error, out

    def _leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                     ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        try:
            self._check_group_id(group_id)
        except KafkaError as e:
            return e.code, []
        group = self.groups.get(group_id)
        if group is None:
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:  # classic members of a consumer group (online migration)
                return E.NONE, self.consumer.classic_leave(consumer_group, leaving)
            return E.NONE, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid in leaving]
        if group.is_(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        out = []
        for member_id, instance_id in leaving:
            if member_id == "":
                current = group.static_member_id(instance_id)
                if current is None:
                    out.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
                    continue
                self._remove_member_and_update_group(group, group.members[current], "removed by instance id")
                out.append((member_id, instance_id, E.NONE))
            elif group.is_pending(member_id):
                self._remove_pending_member(group, member_id)
                out.append((member_id, instance_id, E.NONE))
            elif group.is_fenced(member_id, instance_id):
                out.append((member_id, instance_id, E.FENCED_INSTANCE_ID))
            elif group.has(member_id):
                self._remove_member_and_update_group(group, group.members[member_id], "the consumer left")
                out.append((member_id, instance_id, E.NONE))
            else:
                out.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
        return E.NONE, out

    # -- offsets --------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       offsets: dict[tuple[str, int], OffsetCommitValue], api_version: int = 9
                       ) -> dict[tuple[str, int], ErrorCode]:
        """Store offsets; per-partition errors. Raises KafkaError for errors of the whole request.
        ``generation_id`` is the member epoch for a consumer group (OffsetCommit v9+)."""
        self._check_group_id(group_id, allow_empty=True)
        self._refuse_share_group(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            self.consumer.validate_offset_commit(consumer_group, member_id, generation_id, api_version)
            return self._store_offsets(consumer_group, offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                raise KafkaError(E.ILLEGAL_GENERATION)
            group = self._add_group(group_id)  # a simple (group-less) consumer storing offsets
        if group.is_(GroupState.DEAD):
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_fenced(member_id, group_instance_id):
            raise KafkaError(E.FENCED_INSTANCE_ID)
        if not (generation_id < 0 and group.is_(GroupState.EMPTY)):
            # Kafka's ClassicGroup.validateOffsetCommit order: unknown member, then generation, then
            # the state: a member of the previous generation gets ILLEGAL_GENERATION even while the
            # group completes a rebalance, and rejoins instead of retrying the commit
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(E.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                raise KafkaError(E.ILLEGAL_GENERATION)
            if group.is_(GroupState.COMPLETING_REBALANCE):
                raise KafkaError(E.REBALANCE_IN_PROGRESS)
            self._schedule_heartbeat(group, member)
        return self._store_offsets(group, offsets)

    def _store_offsets(self, group: ClassicGroup | ConsumerGroup,
                       offsets: dict[tuple[str, int], OffsetCommitValue]) -> dict[tuple[str, int], ErrorCode]:
        group_id = group.group_id
        errors: dict[tuple[str, int], ErrorCode] = {}
        entries = []
        accepted = {}
        for tp, value in offsets.items():
            if value.metadata is not None and len(value.metadata.encode("utf-8")) > self.max_metadata_bytes:
                errors[tp] = E.OFFSET_METADATA_TOO_LARGE
                continue
            key = encode_offset_commit_key(group_id, tp[0], tp[1])
            entries.append((key, encode_offset_commit_value(value)))
            accepted[tp] = value
        try:
            self.store.append(group_id, entries)
        except KafkaError as e:
            for tp in accepted:
                errors[tp] = e.code
            if (isinstance(group, ClassicGroup) and not group.members and not group.offsets
                    and group.protocol_type is None):
                self.groups.pop(group_id, None)
            return errors
        group.offsets.update(accepted)
        for tp in accepted:
            errors[tp] = E.NONE
        return errors

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None, *,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> dict[tuple[str, int], OffsetCommitValue | None]:
        """Committed offsets (None where nothing is committed); all of them when ``partitions`` is None.
        A consumer group checks ``member_id`` and ``member_epoch`` (OffsetFetch v9+) as Kafka does."""
        self._check_group_id(group_id, allow_empty=True)
        self._refuse_share_group(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            self.consumer.validate_offset_fetch(consumer_group, member_id, member_epoch)
            stored = consumer_group.offsets
        else:
            group = self.groups.get(group_id)
            stored = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
        if partitions is None:
            return dict(sorted(stored.items()))
        return {tp: stored.get(tp) for tp in partitions}

    # -- transactional offsets ------------------------------------------------------------------

    def commit_transactional_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                     generation_id: int, member_id: str, group_instance_id: str | None,
                                     offsets: dict[tuple[str, int], OffsetCommitValue]
                                     ) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: write the offsets in the producer's transaction and keep them pending until its
        marker. Per-partition errors; raises KafkaError for errors of the whole request. The member
        checks are KIP-447's: a member id, when given, must be in the group; a generation, when given
        (>= 0), must be the group's (a consumer group's member epoch)."""
        self._check_group_id(group_id, allow_empty=True)
        self._refuse_share_group(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            member = consumer_group.members.get(member_id) if member_id else None
            if member_id and member is None:
                raise KafkaError(E.UNKNOWN_MEMBER_ID)
            if member is not None and generation_id >= 0 and generation_id != member.member_epoch:
                raise KafkaError(E.STALE_MEMBER_EPOCH)
            return self._store_transactional_offsets(group_id, producer_id, producer_epoch, offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                raise KafkaError(E.ILLEGAL_GENERATION)
            group = self._add_group(group_id)
        if group.is_(GroupState.DEAD):
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_fenced(member_id, group_instance_id):
            raise KafkaError(E.FENCED_INSTANCE_ID)
        if member_id and not group.has(member_id):
            raise KafkaError(E.UNKNOWN_MEMBER_ID)
        if generation_id >= 0 and generation_id != group.generation_id:
            raise KafkaError(E.ILLEGAL_GENERATION)
        return self._store_transactional_offsets(group_id, producer_id, producer_epoch, offsets)

    def _store_transactional_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                     offsets: dict[tuple[str, int], OffsetCommitValue]
                                     ) -> dict[tuple[str, int], ErrorCode]:
        errors: dict[tuple[str, int], ErrorCode] = {}
        accepted = {}
        for tp, value in offsets.items():
            if value.metadata is not None and len(value.metadata.encode("utf-8")) > self.max_metadata_bytes:
                errors[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = value
        entries = [(encode_offset_commit_key(group_id, t, p), encode_offset_commit_value(v))
                   for (t, p), v in accepted.items()]
        try:
            self.store.append(group_id, entries, producer_id=producer_id, producer_epoch=producer_epoch)
        except KafkaError as e:
            errors.update({tp: e.code for tp in accepted})
            return errors
        if accepted:
            self.pending_txn_offsets.setdefault(group_id, {}).setdefault(producer_id, {}).update(accepted)
        errors.update({tp: E.NONE for tp in accepted})
        return errors

    def complete_transactional_offsets(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """The transaction coordinator wrote ``producer_id``'s marker into ``__consumer_offsets``
        partition ``offsets_partition``: its pending offsets there become committed, or are dropped."""
        for group_id in [g for g, by_producer in self.pending_txn_offsets.items()
                         if producer_id in by_producer and self.partition_for(g) == offsets_partition]:
            by_producer = self.pending_txn_offsets[group_id]
            txn_offsets = by_producer.pop(producer_id)
            if not by_producer:
                del self.pending_txn_offsets[group_id]
            if not commit:
                continue
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:
                consumer_group.offsets.update(txn_offsets)
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                group = self._add_group(group_id)
            group.offsets.update(txn_offsets)

    def unstable_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of the group with transactional offsets awaiting their marker."""
        by_producer = self.pending_txn_offsets.get(group_id, {})
        return {tp for txn_offsets in by_producer.values() for tp in txn_offsets}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetDelete; raises KafkaError for group-level errors."""
        self._check_group_id(group_id)
        self._refuse_share_group(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return self._delete_consumer_offsets(consumer_group, partitions)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            raise KafkaError(E.GROUP_ID_NOT_FOUND)
        if not group.is_(GroupState.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise KafkaError(E.NON_EMPTY_GROUP)
        errors = {}
        doomed = []
        for tp in partitions:
            if not group.is_(GroupState.EMPTY) and group.is_subscribed_to(tp[0]):
                errors[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[tp] = E.NONE
                if tp in group.offsets:
                    doomed.append(tp)
        self.store.append(group_id, [(encode_offset_commit_key(group_id, t, p), None) for t, p in doomed])
        for tp in doomed:
            group.offsets.pop(tp, None)
        return errors

    def _delete_consumer_offsets(self, group: ConsumerGroup, partitions: list[tuple[str, int]]
                                 ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetDelete on a consumer group: offsets of topics it subscribes to are kept."""
        subscribed = self.consumer.subscribed_topics(group)
        errors = {}
        doomed = []
        for tp in partitions:
            if tp[0] in subscribed:
                errors[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[tp] = E.NONE
                if tp in group.offsets:
                    doomed.append(tp)
        self.store.append(group.group_id, [(encode_offset_commit_key(group.group_id, t, p), None)
                                           for t, p in doomed])
        for tp in doomed:
            group.offsets.pop(tp, None)
        return errors

    # -- groups ---------------------------------------------------------------------------------

    def delete_groups(self, group_ids: list[str]) -> list[tuple[str, ErrorCode]]:
        out = []
        for group_id in group_ids:
            try:
                self._check_group_id(group_id, allow_empty=True)
            except KafkaError as e:
                out.append((group_id, e.code))
                continue
            owner = next((c for c in (self.share, self.consumer) if group_id in c.groups), None)
            if owner is not None:  # a share or consumer group
                modern = owner.groups[group_id]
                if modern.members:
                    out.append((group_id, E.NON_EMPTY_GROUP))
                    continue
                try:
                    owner.delete(modern)
                except KafkaError as e:
                    out.append((group_id, e.code))
                    continue
                out.append((group_id, E.NONE))
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                out.append((group_id, E.GROUP_ID_NOT_FOUND))
                continue
            if not group.is_(GroupState.EMPTY):
                out.append((group_id, E.NON_EMPTY_GROUP))
                continue
            tombstones = [(encode_offset_commit_key(group_id, t, p), None) for t, p in sorted(group.offsets)]
            tombstones.append((encode_group_metadata_key(group_id), None))
            try:
                self.store.append(group_id, tombstones)
            except KafkaError as e:
                out.append((group_id, e.code))
                continue
            group.transition_to(GroupState.DEAD)
            self._forget(group)
            out.append((group_id, E.NONE))
        return out

    def retire_upgraded_group(self, group: ClassicGroup) -> None:
        """A classic group whose members now live in a consumer group (online upgrade): its timers stop
        and whoever waits in JoinGroup or SyncGroup is told to rejoin (REBALANCE_IN_PROGRESS)."""
        self._forget(group)
        for key in [k for k in self._pending_timers if k[0] == group.group_id]:
            self._cancel(self._pending_timers, key)
        for member in group.members.values():
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
                member.heartbeat_timer = None
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_result(SyncResult(E.REBALANCE_IN_PROGRESS))
            member.join_future = member.sync_future = None
        group.state = GroupState.DEAD

    def adopt_downgraded_group(self, group: ClassicGroup) -> None:
        """A classic group made from a consumer group whose last consumer-protocol member left (online
        downgrade): its members' session timers start and a rebalance makes them rejoin."""
        self.groups[group.group_id] = group
        group.subscribed_topics = _subscribed_topics(group)
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        self._prepare_rebalance(group, "downgraded from a consumer group")

    def _forget(self, group: ClassicGroup) -> None:
        self.groups.pop(group.group_id, None)
        self._cancel(self._join_timers, group.group_id)
        self._cancel(self._sync_timers, group.group_id)
        self._initial_delay.pop(group.group_id, None)

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None
                    ) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state, group type) of every group, filtered by state and type
        (case-insensitive)."""
        if self.loading:
            raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)
        wanted_states = {s.lower().strip() for s in states or ()}
        wanted_types = {t.lower().strip() for t in types or ()}
        out = []
        if not wanted_types or "classic" in wanted_types:
            out += [(g.group_id, g.protocol_type or "", g.state.value, "classic")
                    for g in self.groups.values()
                    if not wanted_states or g.state.value.lower() in wanted_states]
        if not wanted_types or "consumer" in wanted_types:
            out += [(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state, "consumer")
                    for g in self.consumer.groups.values()
                    if not wanted_states or g.state.lower() in wanted_states]
        if not wanted_types or "share" in wanted_types:
            out += [(g.group_id, "share", g.state, "share") for g in self.share.groups.values()
                    if not wanted_states or g.state.lower() in wanted_states]
        return out

    def describe_group(self, group_id: str) -> GroupSummary:
        try:
            self._check_group_id(group_id, allow_empty=True)
        except KafkaError as e:
            return GroupSummary(e.code, group_id, "", "", "", [])
        group = self.groups.get(group_id)
        if group is None:  # unknown, or a consumer group (is_classic_group tells them apart)
            return GroupSummary(E.NONE, group_id, GroupState.DEAD.value, "", "", [])
        stable = group.is_(GroupState.STABLE)
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata(group.protocol_name) if stable else b"", m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupSummary(E.NONE, group_id, group.state.value, group.protocol_type or "",
                            (group.protocol_name or "") if stable else "", members)

    # -- persistence ----------------------------------------------------------------------------

    def _store_group(self, group: ClassicGroup) -> None:
        self.store.append(group.group_id, [self.group_metadata_entry(group)])

    @staticmethod
    def group_metadata_entry(group: ClassicGroup) -> tuple[bytes, bytes]:
        """The GroupMetadata record (key, value) that describes a classic group."""
        value = GroupMetadataValue(
            group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
            group.state_timestamp_ms,
            [MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                          m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(group.protocol_name),
                          m.assignment)
             for m in group.members.values()])
        return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)

    # -- offsets retention ----------------------------------------------------------------------

    def _schedule_retention(self) -> None:
        if not self._closed:
            self._retention_timer = self._call_later(self.retention_check_interval_ms, self._retention_tick)

    def _retention_tick(self) -> None:
        try:
            self.expire_offsets()
        except Exception:
            log.exception("offsets retention failed")
        self._schedule_retention()

    def expire_offsets(self, now: int | None = None) -> int:
        """Kafka's rules (KIP-211): returns how many offsets were removed."""
        if self.loading:
            return 0
        now = now_ms() if now is None else now
        retention = self.offsets_retention_ms
        removed = self._expire_consumer_offsets(now, retention)
        for group in list(self.groups.values()):
            def expired(base_of, keep_topics=frozenset(), group=group):
                return self._expired(group, now, retention, base_of, keep_topics)

            if group.protocol_type is not None and group.is_(GroupState.EMPTY):
                empty_since = group.state_timestamp_ms
                doomed = expired(lambda v, t=empty_since: t if t >= 0 else v.commit_timestamp)
            elif (group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.subscribed_topics is not None
                  and group.is_(GroupState.STABLE)):
                doomed = expired(lambda v: v.commit_timestamp, frozenset(group.subscribed_topics))
            elif group.protocol_type is None:
                doomed = expired(lambda v: v.commit_timestamp)
            else:
                doomed = []
            unstable = self.unstable_partitions(group.group_id)
            doomed = [tp for tp in doomed if tp not in unstable]  # Kafka keeps them until the marker
            entries = [(encode_offset_commit_key(group.group_id, t, p), None) for t, p in doomed]
            for tp in doomed:
                group.offsets.pop(tp, None)
            drop_group = group.is_(GroupState.EMPTY) and not group.offsets
            if drop_group:
                entries.append((encode_group_metadata_key(group.group_id), None))
            if entries:
                try:
                    self.store.append(group.group_id, entries)
                except KafkaError:
                    continue
            removed += len(doomed)
            if drop_group:
                group.transition_to(GroupState.DEAD)
                self._forget(group)
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed

    def _expire_consumer_offsets(self, now: int, retention: int) -> int:
        """Offsets of topics a consumer group no longer subscribes to expire a retention period after
        their commit; an Empty consumer group left without offsets is deleted."""
        removed = 0
        for group in list(self.consumer.groups.values()):
            keep = frozenset(self.consumer.subscribed_topics(group))
            doomed = self._expired(group, now, retention, lambda v: v.commit_timestamp, keep)
            unstable = self.unstable_partitions(group.group_id)
            doomed = [tp for tp in doomed if tp not in unstable]
            if doomed:
                try:
                    self.store.append(group.group_id, [(encode_offset_commit_key(group.group_id, t, p), None)
                                                       for t, p in doomed])
                except KafkaError:
                    continue
                for tp in doomed:
                    group.offsets.pop(tp, None)
                removed += len(doomed)
            if not group.members and not group.offsets:
                try:
                    self.consumer.delete(group)
                except KafkaError:
                    continue
        return removed

    @staticmethod
    def _expired(group: ClassicGroup | ConsumerGroup, now: int, retention: int, base_of,
                 keep_topics) -> list[tuple[str, int]]:
        out = []
        for tp, v in group.offsets.items():
            if tp[0] in keep_topics:
                continue
            if v.expire_timestamp >= 0:  # an explicit retention time (OffsetCommit v2-v4): Kafka's old rule
                if now >= v.expire_timestamp:
                    out.append(tp)
            elif now - base_of(v) >= retention:
                out.append(tp)
        return out
