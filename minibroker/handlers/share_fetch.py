"""ShareFetch: v1-v2 (KIP-932; v2 KIP-1206 and KIP-1222).

Behaviour: a share group member fetches from the partitions of its share session
(minibroker/services/share_sessions.py) and each record handed out is *acquired* for it, locked for the
group's ``share.record.lock.duration.ms`` (AcquisitionLockTimeoutMs), until it acknowledges it or the lock
runs out. Session epochs: 0 opens a session with the request's partitions (replacing the member's old one; no
acknowledgements allowed then: INVALID_REQUEST); otherwise the request must carry the session's next
epoch (SHARE_SESSION_NOT_FOUND 122, INVALID_SHARE_SESSION_EPOCH 123), its ``topics`` add partitions and
``forgotten_topics_data`` removes them, and the epoch moves on by one; -1 applies the acknowledgements,
closes the session and releases every record the member still holds, fetching nothing. With
``group.share.max.share.sessions`` sessions held a new one is refused with SHARE_SESSION_LIMIT_REACHED
(133) once MaxWaitMs has passed, so that a client retrying does not spin (Kafka's idle share fetch timer).
Piggy-backed acknowledgements (as ShareAcknowledge's, per partition: AcknowledgeErrorCode) are applied
before anything is acquired. Then every session partition is read in turn (the starting partition
rotates with the epoch, as Kafka's round robin does) through ``broker.share_partitions.acquire``:
redeliveries first, then new records, whole batches, within MaxRecords (capped by
``share.fetch.max.fetch.records``) and MaxBytes for the whole request. Records are the log's batches as
stored, sent with sendfile where the connection allows, the AcquiredRecords runs saying which offsets
of them are this member's, with their delivery counts; offsets inside a run without a record (compacted
away) are for the client to acknowledge as gaps. Control batches are never handed out. When nothing was
acquired and MaxWaitMs > 0 the request waits for an append to a session partition or for records to
become acquirable again (a release, a lock running out, an acknowledgement freeing in-flight room),
until MaxWaitMs; each pass after a wake-up looks the session's topic ids up again (a topic deleted and
created again answers UNKNOWN_TOPIC_ID, never the new topic's records under the old id) and decides READ
again (partitions another connection of the member added meanwhile included). A full answer (epoch 0)
lists every session partition; a later one only the partitions with records or an error, the ones this
request added, and the ones it acknowledged.
Request checks in Kafka's order: a null or empty group id INVALID_REQUEST, then READ on the group, then
the member id (1 to 36 characters), all top-level; membership of the group is not checked (Kafka 4.2
does not either). Partition errors: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED,
COORDINATOR_NOT_AVAILABLE (retriable) while ``__share_group_state`` loads, KAFKA_STORAGE_ERROR.
Authorization (with an authorizer): READ on the group (GROUP_AUTHORIZATION_FAILED for the whole
request), READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions, as fetch and as
acknowledge error).
Version notes: v0 was Kafka 4.0's early access (with PartitionMaxBytes) and is not served: Kafka 4.1+
serve v1+, and librdkafka 2.16 sends v1. v1 adds MaxRecords and BatchSize: in batch-optimized mode the
AcquiredRecords runs are cut into pieces of at most BatchSize offsets. v2 adds ShareAcquireMode
(0 batch-optimized: MaxRecords may be overshot to the end of a batch; 1 record-limit: never more than
MaxRecords, a batch's run is cut; other values INVALID_REQUEST) and IsRenewAck: a renew request carries
acknowledgements whose type 4 extends locks, must have MaxBytes, MinBytes, MaxRecords and MaxWaitMs 0
(else INVALID_REQUEST) and fetches nothing.
Quotas: MaxBytes is capped at ``fetch.max.bytes`` and, with a consumer_byte_rate quota for the client,
at what the quota window allows in one go, as Kafka caps a ShareFetch; the answer itself is not throttled
(its records are acquired already), as in Kafka, where only error answers go through the request quota.
CurrentLeader is -1/-1 (Kafka fills it only for NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH), NodeEndpoints
empty.
MinBytes above 1 (with MaxWaitMs > 0): nothing is acquired until the session's partitions could give that
many bytes (the log from each next fetch offset to the high watermark, as Kafka's DelayedShareFetch counts
before acquiring), or MaxWaitMs ends; then whatever there is.
"""

from __future__ import annotations

import asyncio
import time

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.handlers.share_requests import (
    ShareRequestError,
    TopicNames,
    acknowledgements,
    apply_acknowledgements,
    check_group_and_member,
    current_leader,
    grouped,
    lock_timeout_ms,
    share_groups_served,
)
from minibroker.protocol.codec import Struct
from minibroker.services.share_sessions import FINAL_EPOCH, INITIAL_EPOCH

BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
EMPTY = b""


def _error_response(code, message=None) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), error_message=message,
                  acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])


def _split(runs, batch_size: int) -> list:
    """AcquiredRecords runs of at most ``batch_size`` offsets each (batch-optimized mode's BatchSize)."""
    out = []
    for first, last, count in runs:
        while last - first + 1 > batch_size:
            out.append((first, first + batch_size - 1, count))
            first += batch_size
        out.append((first, last, count))
    return out


class ShareFetchPlan:
    """One ShareFetch: its session, what it acknowledged, and what each attempt acquired."""

    def __init__(self, broker, header, request, group_id: str, member_id: str):
        self.broker = broker
        self.request = request
        self.version = header.api_version
        self.group_id = group_id
        self.member_id = member_id
        self.connection = getattr(header, "connection", None)
        self.names = TopicNames(broker, header)
        self.epoch = request.share_session_epoch
        self.final = self.epoch == FINAL_EPOCH
        self.renew = self.version >= 2 and bool(request.is_renew_ack)
        # Kafka caps a ShareFetch at fetch.max.bytes and, for a client with a consumer_byte_rate quota, at
        # what the quota window allows in one go (KafkaApis.handleShareFetchRequest); unlike a Fetch, the
        # answer is not throttled afterwards: its records are already acquired.
        self.max_bytes = min(request.max_bytes, broker.config["fetch.max.bytes"])
        quotas = vars(broker).get("client_quotas")  # None until a client quota is set
        if quotas is not None and quotas.fetch.enabled:
            cap = quotas.fetch_byte_cap(header)
            if cap is not None:
                self.max_bytes = min(self.max_bytes, cap)
        self.strict = self.version >= 2 and request.share_acquire_mode == RECORD_LIMIT
        self.session = None
        self.added: set[tuple[bytes, int]] = set()  # partitions this request put in the session
        self.acks = acknowledgements(request.topics)
        self.ack_results: dict = {}
        self.rows: dict[tuple[bytes, int], Struct] = {}  # the fetch part of the latest attempt
        self.acquired = 0
        self.fetchable: list[tuple[bytes, str, int]] = []  # (topic id, name, partition) without errors
        self.fetchable_only = False  # the last pass held back for MinBytes: nothing was tried
        self._watches: list = []

    # -- the session ------------------------------------------------------------------------------

    def open_session(self) -> None:
        sessions = self.broker.share_sessions
        requested = [(bytes(t.topic_id), p.partition_index)
                     for t in self.request.topics for p in t.partitions]
        if self.final:
            self.session = sessions.existing(self.group_id, self.member_id)
        elif self.epoch == INITIAL_EPOCH:
            if self.acks:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "acknowledgements in a request opening a session")
            self.session = sessions.open(self.group_id, self.member_id, requested, self.connection)
            self.added = set(self.session.partitions)
        else:
            self.session = sessions.next_request(self.group_id, self.member_id, self.epoch)
            self.added = {k for k in requested if k not in self.session.partitions}
            self.session.add(requested)
            self.session.forget((bytes(t.topic_id), p) for t in self.request.forgotten_topics_data
                                for p in t.partitions)
        self.names.authorize([t for t, _ in self.acks] + [t for t, _ in self.session.partitions])

    def look_again(self) -> None:
        """Before a long poll's next pass: topic ids looked up again (a topic deleted and created again is
        another id) and READ decided for every session partition, those another connection of the member
        added meanwhile included."""
        self.names.refresh()
        self.names.authorize([t for t, _ in self.acks] + [t for t, _ in self.session.partitions])

    def acknowledge(self) -> None:
        if self.acks:
            self.ack_results = apply_acknowledgements(self.broker, self.names, self.group_id, self.member_id,
                                                      self.acks, allow_renew=self.renew)

    # -- acquiring --------------------------------------------------------------------------------

    def _row(self, partition: int, error=ErrorCode.NONE, message=None, records=EMPTY, runs=(),
             topic: str | None = None) -> Struct:
        return Struct(partition_index=partition, error_code=int(error), error_message=message,
                      acknowledge_error_code=0, acknowledge_error_message=None,
                      current_leader=current_leader(self.broker, error, topic, partition), records=records,
                      acquired_records=[Struct(first_offset=f, last_offset=last, delivery_count=c)
                                        for f, last, c in runs])

    def holds_for_min_bytes(self) -> bool:
        """True when MinBytes (above 1) is not met by what the fetchable partitions could give now: then
        nothing is acquired until it is, or until MaxWaitMs ends (Kafka's DelayedShareFetch: it checks
        the bytes readable before acquiring, and on expiry acquires whatever there is)."""
        r = self.request
        if r.min_bytes <= 1 or r.max_wait_ms <= 0 or r.max_records <= 0 or r.max_bytes <= 0:
            return False
        wanted = min(r.min_bytes, self.max_bytes)
        total = 0
        manager = self.broker.share_partitions
        for _, name, partition in self.fetchable:
            total += manager.fetchable_bytes(self.group_id, name, partition, wanted=wanted - total)
            if total >= wanted:
                return False
        return True

    def acquire(self, *, wait_for_min_bytes: bool = False) -> None:
        """One pass over the session's partitions, from scratch (a long poll's retry redoes it). With
        ``wait_for_min_bytes``, nothing is acquired while MinBytes is not met (the partitions' errors and
        the fetchable list are still found)."""
        request = self.request
        self.rows, self.acquired, self.fetchable = {}, 0, []
        if wait_for_min_bytes:
            for topic_id, partition in self.session.partitions:
                error = self.names.error(topic_id)
                if error:
                    self.rows[(topic_id, partition)] = self._row(partition, error)
                else:
                    self.fetchable.append((topic_id, self.names.name(topic_id), partition))
            if self.holds_for_min_bytes():
                self.fetchable_only = True
                return
            self.rows, self.fetchable = {}, []
        self.fetchable_only = False
        records_left = min(request.max_records, self.broker.config["share.fetch.max.fetch.records"])
        bytes_left = self.max_bytes
        keys = list(self.session.partitions)
        if len(keys) > 1 and self.session.epoch > 0:  # Kafka rotates the start with the session epoch
            start = self.session.epoch % len(keys)
            keys = keys[start:] + keys[:start]
        manager = self.broker.share_partitions
        batch_size = request.batch_size if not self.strict else 0
        for key in keys:
            topic_id, partition = key
            error = self.names.error(topic_id)
            if error:
                self.rows[key] = self._row(partition, error)
                continue
            name = self.names.name(topic_id)
            self.fetchable.append((topic_id, name, partition))
            if records_left <= 0 or bytes_left <= 0:
                continue
            try:
                got = manager.acquire(self.group_id, self.member_id, name, partition,
                                      max_records=records_left, max_bytes=bytes_left, strict=self.strict)
            except KafkaError as e:
                self.rows[key] = self._row(partition, e.code, e.message, topic=name)
                continue
            if got.error:
                self.rows[key] = self._row(partition, got.error, topic=name)
                continue
            if not got.acquired:
                continue
            runs = [(a.first_offset, a.last_offset, a.delivery_count) for a in got.acquired]
            count = sum(last - first + 1 for first, last, _ in runs)
            if batch_size > 0:
                runs = _split(runs, batch_size)
            records = got.records if got.records is not None else EMPTY
            self.rows[key] = self._row(partition, records=records, runs=runs)
            self.acquired += count
            records_left -= count
            bytes_left -= len(records)

    def can_wait(self) -> bool:
        r = self.request
        return (not self.acquired and r.max_wait_ms > 0 and r.max_records > 0 and r.max_bytes > 0
                and bool(self.fetchable))

    def watch(self) -> None:
        """Registered in the same step as the acquire pass, so nothing between the two is missed."""
        appends = [(name, p) for _, name, p in self.fetchable]
        shares = [(self.group_id, name, p) for _, name, p in self.fetchable]
        self._watches = [
            (self.broker.replicas, appends, self.broker.replicas.watch_appends(appends)),
            (self.broker.share_partitions, shares, self.broker.share_partitions.watch(shares)),
        ]

    def unwatch(self) -> None:
        for owner, keys, fut in self._watches:
            owner.unwatch(keys, fut)
        self._watches = []

    def futures(self) -> list:
        return [fut for _, _, fut in self._watches]

    def still_current(self) -> bool:
        return self.broker.share_sessions.get(self.group_id, self.member_id) is self.session

    # -- the answer -------------------------------------------------------------------------------

    def response(self) -> Struct:
        rows: dict[tuple[bytes, int], Struct] = {}
        full = self.epoch == INITIAL_EPOCH
        if not self.final and not self.renew:
            for key in self.session.partitions:
                row = self.rows.get(key)
                if row is None and (full or key in self.added or key in self.ack_results):
                    row = self._row(key[1])
                if row is not None:
                    rows[key] = row
        for key, (code, message) in self.ack_results.items():
            row = rows.get(key)
            if row is None:
                row = rows[key] = self._row(key[1])
            row.acknowledge_error_code, row.acknowledge_error_message = int(code), message
        return Struct(throttle_time_ms=0, error_code=0, error_message=None,
                      acquisition_lock_timeout_ms=lock_timeout_ms(self.broker, self.group_id),
                      responses=grouped(rows), node_endpoints=[])


async def _refuse_after(seconds: float, error: KafkaError) -> Struct:
    await asyncio.sleep(seconds)
    return _error_response(error.code, error.message)


async def _long_poll(plan: ShareFetchPlan, deadline: float) -> Struct:
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            done, _ = await asyncio.wait(plan.futures(), timeout=remaining,
                                         return_when=asyncio.FIRST_COMPLETED)
            plan.unwatch()
            if not done or not plan.still_current():
                break
            plan.look_again()
            plan.acquire(wait_for_min_bytes=True)
            if not plan.can_wait():
                break
            plan.watch()
        if plan.fetchable_only and plan.still_current():  # MaxWaitMs is over: whatever there is
            plan.look_again()
            plan.acquire()
    finally:
        plan.unwatch()
    return plan.response()


@handles(78, (1, 2))
def handle_share_fetch(broker, header, request):
    if not share_groups_served():
        return _error_response(ErrorCode.UNSUPPORTED_VERSION)
    try:
        group_id, member_id = check_group_and_member(broker, header, request)
        if header.api_version >= 2:
            if request.is_renew_ack and (request.max_bytes or request.min_bytes or request.max_records
                                         or request.max_wait_ms):
                raise ShareRequestError(ErrorCode.INVALID_REQUEST,
                                        "a renew request has MaxBytes, MinBytes, MaxRecords and MaxWaitMs 0")
            if request.share_acquire_mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
                raise ShareRequestError(ErrorCode.INVALID_REQUEST,
                                        f"unknown ShareAcquireMode {request.share_acquire_mode}")
    except ShareRequestError as e:
        return _error_response(e.code, e.message)
    plan = ShareFetchPlan(broker, header, request, group_id, member_id)
    try:
        plan.open_session()
    except KafkaError as e:
        if e.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED and request.max_wait_ms > 0:
            return _refuse_after(request.max_wait_ms / 1000, e)
        return _error_response(e.code, e.message)
    plan.acknowledge()
    if plan.final:
        broker.share_sessions.close(group_id, member_id)
        return plan.response()
    if plan.renew:
        return plan.response()
    plan.acquire(wait_for_min_bytes=True)
    if not plan.can_wait():
        return plan.response()
    plan.watch()
    return _long_poll(plan, time.monotonic() + request.max_wait_ms / 1000)
