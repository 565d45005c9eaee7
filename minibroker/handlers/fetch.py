"""Fetch: v0-v18.

Behaviour: for each requested partition, the log finds the first entry whose last offset >=
the fetch offset and hands back a file region, bounded by the partition's and the response's
max bytes, the first entry of the response always whole (KIP-74). Record bytes go from the
segment file to the socket with sendfile. When fewer than ``min_bytes`` are ready the request
waits, woken by appends (not by timers), until ``max_wait_ms``. Full responses list exactly the
requested partitions (empty ones with zero-length records, never null); fetch sessions
(KIP-227, v7+) answer incremental requests with only the partitions that changed.
High watermark = log end offset (one node); last stable offset (v4+) = the first offset of the
earliest open transaction, else the high watermark. isolation_level READ_COMMITTED (1, v4+) reads
only below the last stable offset (a batch straddling it is left out) and answers the aborted
transactions overlapping what was read, from the segments' ``.txnindex`` (producer id, first
offset), so that clients drop aborted records; a marker moving the last stable offset wakes
long-polling fetches. READ_UNCOMMITTED reads to the high watermark, control batches included.
Preferred read replica -1; topic ids on v13+ (UNKNOWN_TOPIC_ID for unknown ones).
``current_leader_epoch`` (v9+) is checked against the partition's leader epoch (FENCED_LEADER_EPOCH when
older, UNKNOWN_LEADER_EPOCH when newer, -1 unchecked); with ``last_fetched_epoch`` (v12+; Kafka's
followers send it), a log whose end of that epoch (its OffsetForLeaderEpoch answer) is before the fetch
offset, or which knows only a lower epoch, answers ``diverging_epoch`` and no records, as Kafka. A fetch
session keeps both epochs per partition as the client last sent them (Kafka's CachedPartition).
Version notes: v18 (KIP-1166) only adds the follower's high watermark to the request (a tagged
field replicas send; a consumer leaves it at its default and it is ignored here). v0-v3 cannot read
magic 2, so their batches are down-converted (magic 0 for v0-v1, magic 1 for v2-v3), which copies
them through Python: old clients pay for it.
Authorization (with an authorizer): READ on each topic, else its partitions get TOPIC_AUTHORIZATION_FAILED
(known or not; unknown topic ids stay UNKNOWN_TOPIC_ID), as Kafka checks consumer fetches.
Quotas: with a consumer_byte_rate quota for the client (minibroker/services/quotas.py), max_bytes is
capped at what the quota allows in one go and the response's record bytes are counted when it is
answered; over the quota the answer is Kafka's throttled one (no partitions; session id 0 unless the
session was incremental), carries throttle_time_ms, and the connection is muted for it.
Gaps: no follower fetching (a fetch claiming a replica id is checked like a consumer's, READ, where Kafka
asks CLUSTER_ACTION); incremental sessions resend a partition when its high watermark or log
start moved (a last stable offset moves only with a marker append, which moves the high watermark).
"""

from __future__ import annotations

import time

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.leader_epochs import check_current_leader_epoch
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied
from minibroker.services.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, SessionPartition

EMPTY = b""


def _magic_for_version(version: int) -> int:
    return 0 if version <= 1 else 1 if version <= 3 else 2


class FetchPlan:
    """The partitions one Fetch reads, in response order, and how to read them."""

    def __init__(self, broker, header, request):
        self.broker = broker
        self.version = header.api_version
        self.request = request
        self.session_id = 0
        self.error_code = 0
        self.incremental = False
        self.session = None
        # [(topic name or None, topic_id, [(partition, fetch_offset, max_bytes, leader_epoch,
        #                                   last_fetched_epoch)])]
        self.topics: list = []
        self.unknown_ids: dict[bytes, list[int]] = {}
        self.denied: frozenset[str] = frozenset()  # topics the principal may not READ
        self.quota_header = None  # the request's header when a consumer_byte_rate quota applies
        self.told: list = []  # (session partition, high watermark, log start) as the client last heard

    def name_of(self, topic) -> tuple[str | None, bytes]:
        if self.version >= 13:
            name = self.broker.logs.topic_name(topic.topic_id)
            return name, topic.topic_id
        info = self.broker.logs.topics.get(topic.topic)
        return topic.topic, (info.id if info is not None else ZERO_UUID)

    def build(self) -> None:
        req = self.request
        cache = self.broker.fetch_sessions
        if self.version < 7 or (req.session_id == 0 and req.session_epoch == FINAL_EPOCH):
            self._full(None)
            return
        if req.session_epoch == FINAL_EPOCH:
            cache.remove(req.session_id)
            self._full(None)
            return
        if req.session_epoch == INITIAL_EPOCH:
            if req.session_id:
                cache.remove(req.session_id)
            session = cache.create()
            self._full(session)
            if session is not None:
                self.session, self.session_id = session, session.id
            return
        session = cache.get(req.session_id)
        if session is None:
            self.error_code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            return
        if session.epoch != req.session_epoch:
            self.error_code = ErrorCode.INVALID_FETCH_SESSION_EPOCH
            return
        session.epoch = session.epoch + 1 if session.epoch < 0x7FFFFFFF else 1
        self.session, self.session_id, self.incremental = session, session.id, True
        for topic in req.topics:
            name, topic_id = self.name_of(topic)
            if name is None:
                self.unknown_ids.setdefault(topic_id, []).extend(p.partition for p in topic.partitions)
                continue
            for p in topic.partitions:
                known = session.partitions.get((name, p.partition))
                if known is None:
                    session.partitions[(name, p.partition)] = _session_partition(topic_id, p)
                else:  # keep what the client was last told, so an unchanged partition stays quiet
                    known.fetch_offset, known.max_bytes = p.fetch_offset, p.partition_max_bytes
                    known.leader_epoch = p.current_leader_epoch
                    known.last_fetched_epoch = p.last_fetched_epoch
        for forgotten in req.forgotten_topics_data:
            name = self.broker.logs.topic_name(forgotten.topic_id) if self.version >= 13 else forgotten.topic
            for partition in forgotten.partitions:
                session.partitions.pop((name, partition), None)
        grouped: dict[str, tuple[bytes, list]] = {}
        for (name, partition), sp in session.partitions.items():
            grouped.setdefault(name, (sp.topic_id, []))[1].append(
                (partition, sp.fetch_offset, sp.max_bytes, sp.leader_epoch, sp.last_fetched_epoch)
            )
        self.topics = [(name, tid, parts) for name, (tid, parts) in grouped.items()]

    def _full(self, session) -> None:
        for topic in self.request.topics:
            name, topic_id = self.name_of(topic)
            if name is None:
                self.unknown_ids.setdefault(topic_id, []).extend(p.partition for p in topic.partitions)
                continue
            parts = [
                (p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                 p.last_fetched_epoch)
                for p in topic.partitions
            ]
            self.topics.append((name, topic_id, parts))
            if session is not None:
                for p in topic.partitions:
                    session.partitions[(name, p.partition)] = _session_partition(topic_id, p)

    def keys(self) -> list[tuple[str, int]]:
        return [(name, p[0]) for name, _, parts in self.topics for p in parts]


def _session_partition(topic_id: bytes, p) -> SessionPartition:
    return SessionPartition(topic_id, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                            p.last_fetched_epoch)


def _diverging_epoch(plog, fetch_offset: int, last_fetched_epoch: int) -> Struct | None:
    """Kafka's check of a fetcher's last fetched epoch (v12+): the log's end of that epoch (its
    OffsetForLeaderEpoch answer) before the fetch offset, or a lower epoch found, means the fetcher's log
    diverged from here; None when it did not."""
    epoch, end = plog.end_offset_for_epoch(last_fetched_epoch)
    if epoch < last_fetched_epoch or end < fetch_offset:
        return Struct(epoch=epoch, end_offset=end)
    return None


def _partition(index, error=0, hw=-1, log_start=-1, records=EMPTY, committed=False, lso=None,
               aborted=()) -> Struct:
    return Struct(
        partition_index=index,
        error_code=int(error),
        high_watermark=hw,
        last_stable_offset=hw if lso is None else lso,
        log_start_offset=log_start,
        aborted_transactions=[Struct(producer_id=t.producer_id, first_offset=t.first_offset) for t in aborted]
        if committed else None,
        preferred_read_replica=-1,
        records=records,
    )


def read_partitions(plan: FetchPlan) -> tuple[list, int]:
    """Read every planned partition once; returns (topic responses, record bytes found)."""
    replicas = plan.broker.replicas
    version = plan.version
    magic = _magic_for_version(version)
    committed = plan.request.isolation_level == 1
    budget = plan.request.max_bytes if version >= 3 else 0x7FFFFFFF
    total = 0
    responses = []
    for name, topic_id, parts in plan.topics:
        if plan.denied and name in plan.denied:
            responses.append(Struct(topic=name, topic_id=topic_id, partitions=[
                _partition(p[0], ErrorCode.TOPIC_AUTHORIZATION_FAILED, committed=committed) for p in parts]))
            continue
        out = []
        for partition, fetch_offset, max_bytes, leader_epoch, last_fetched_epoch in parts:
            try:
                plog = replicas.get_log(name, partition)
            except KafkaError as e:
                out.append(_partition(partition, e.code, committed=committed))
                continue
            hw, log_start = plog.high_watermark, plog.log_start_offset
            records = EMPTY
            lso, aborted = None, ()
            try:
                check_current_leader_epoch(leader_epoch, plog.leader_epoch)
                if last_fetched_epoch >= 0:
                    diverging = _diverging_epoch(plog, fetch_offset, last_fetched_epoch)
                    if diverging is not None:  # no records: the client truncates first (Kafka's KIP-595)
                        answer = _partition(partition, 0, hw, log_start, committed=committed)
                        answer.diverging_epoch = diverging
                        out.append(answer)
                        continue
                lso = replicas.last_stable_offset(name, partition)
                limit = min(max_bytes, budget)
                if limit > 0 or total == 0:
                    fetched = plog.read(fetch_offset, max(limit, 0), min_one_entry=(total == 0),
                                        max_offset=lso if committed else None)
                    region = fetched.region
                    if region is not None and region.size:
                        if committed:
                            aborted = replicas.aborted_transactions(name, partition, fetch_offset, fetched)
                        records = region
                        if magic < 2:
                            from minibroker.records import down_convert

                            records = down_convert(region.read(), magic)
                        total += len(records)
                        budget -= len(records)
            except KafkaError as e:
                out.append(_partition(partition, e.code, hw, log_start, committed=committed, lso=lso))
                continue
            sp = plan.session.partitions.get((name, partition)) if plan.session is not None else None
            if plan.incremental and sp is not None:
                changed = len(records) or sp.high_watermark != hw or sp.log_start_offset != log_start
                sp.high_watermark, sp.log_start_offset = hw, log_start
                if not changed:
                    continue
            elif plan.session is not None and sp is not None:
                sp.high_watermark, sp.log_start_offset = hw, log_start
            out.append(_partition(partition, 0, hw, log_start, records, committed, lso, aborted))
        if out or not plan.incremental:
            responses.append(Struct(topic=name, topic_id=topic_id, partitions=out))
    for topic_id, partitions in plan.unknown_ids.items():
        responses.append(
            Struct(
                topic=None,
                topic_id=topic_id,
                partitions=[
                    _partition(p, ErrorCode.UNKNOWN_TOPIC_ID, committed=committed) for p in partitions
                ],
            )
        )
    return responses, total


def _response(plan: FetchPlan, responses, total: int = 0) -> Struct:
    throttle_ms, session_id = 0, plan.session_id
    if plan.quota_header is not None:
        throttle_ms = plan.broker.client_quotas.charge_fetch(plan.quota_header, total)
        if throttle_ms:
            responses, session_id = _throttled(plan)
    return Struct(
        throttle_time_ms=throttle_ms,
        error_code=int(plan.error_code),
        session_id=session_id,
        responses=responses,
        node_endpoints=[],
    )


def _apply_fetch_quota(plan: FetchPlan, header) -> None:
    """consumer_byte_rate applies to this client: cap the response at what the quota allows in one go
    (Kafka's getMaxValueInQuotaWindow) and remember what the session told the client, for a throttled
    answer to take back."""
    cap = plan.broker.client_quotas.fetch_byte_cap(header)
    if cap is None:
        return
    request = plan.request
    if plan.version >= 3 and request.max_bytes > cap:
        request.max_bytes = cap
        request.min_bytes = min(request.min_bytes, cap)
    plan.quota_header = header
    if plan.session is not None:
        plan.told = [(sp, sp.high_watermark, sp.log_start_offset) for sp in plan.session.partitions.values()]


def _throttled(plan: FetchPlan) -> tuple[list, int]:
    """Kafka's throttled fetch answer: no partitions; an incremental session keeps its id (the client
    asks again from the same offsets), a full fetch gets session id 0 and the session it would have
    created is dropped."""
    for sp, hw, log_start in plan.told:
        sp.high_watermark, sp.log_start_offset = hw, log_start
    if plan.incremental:
        return [], plan.session_id
    if plan.session is not None:
        plan.broker.fetch_sessions.remove(plan.session_id)
    return [], 0


def _any_error(responses) -> bool:
    return any(p.error_code for t in responses for p in t.partitions)


async def _long_poll(plan: FetchPlan, deadline: float, min_bytes: int, responses, total, watch):
    """Wait for appends until ``min_bytes`` are ready or the deadline passes. ``watch`` is always
    registered right after a read, so no append between a read and the next wait is missed."""
    replicas = plan.broker.replicas
    keys = plan.keys()
    try:
        while total < min_bytes:
            remaining = deadline - time.monotonic()
            if not await replicas.wait_for_append(keys, watch, remaining):
                break
            responses, total = read_partitions(plan)
            watch = replicas.watch_appends(keys)
            if _any_error(responses):
                break
    finally:
        replicas.unwatch(keys, watch)
    return _response(plan, responses, total)


@handles(1, (0, 18))
def handle_fetch(broker, header, request):
    plan = FetchPlan(broker, header, request)
    plan.build()
    if plan.error_code:
        return _response(plan, [])
    if broker.authorizer is not None:
        plan.denied = denied(broker, header, AclOperation.READ, ResourceType.TOPIC,
                             [name for name, _, _ in plan.topics])
    quotas = vars(broker).get("client_quotas")  # None until a client quota is set
    if quotas is not None and quotas.fetch.enabled:
        _apply_fetch_quota(plan, header)
    responses, total = read_partitions(plan)
    min_bytes = max(request.min_bytes, 0)
    if total >= min_bytes or request.max_wait_ms <= 0 or not plan.topics or _any_error(responses):
        return _response(plan, responses, total)
    deadline = time.monotonic() + request.max_wait_ms / 1000
    # Watched now, in the same step as the read: the long poll's first await is a loop iteration
    # away, and an append in between must wake it rather than leave it asleep until max_wait_ms.
    watch = broker.replicas.watch_appends(plan.keys())
    return _long_poll(plan, deadline, min_bytes, responses, total, watch)
