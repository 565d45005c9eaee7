"""Share groups (KIP-932, issue 21) end to end: confluent-kafka's ShareConsumer over real sockets (issue
21's "done when" list), then ShareFetch and ShareAcknowledge on the wire: session epochs, acknowledgement
batches Kafka refuses, unknown topic ids, the acquire modes and renewals of v2, long polls, a dropped
connection, authorization.

The brokers run with a 1 s record lock (``group.share.record.lock.duration.ms`` and its minimum, as
confluent-kafka-python's own suite sets them) and short share heartbeats; each group reads from the
earliest offset (``share.auto.offset.reset`` set per group with IncrementalAlterConfigs on resource type
GROUP, as that suite does).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import pytest

from minibroker.errors import ErrorCode as E
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.records import v2
from minibroker.records.batches import iter_batches
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer (2.15+)", allow_module_level=True)

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

PRODUCE, METADATA, API_VERSIONS, CREATE_ACLS, INCREMENTAL_ALTER_CONFIGS = 0, 3, 18, 30, 44
SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
GROUP_RESOURCE = 32
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4

SHARE_OVERRIDES = {
    "group.share.record.lock.duration.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.session.timeout.ms": "6000",
}


@pytest.fixture(scope="module")
def share_broker():
    runner = BrokerRunner(SHARE_OVERRIDES).start()
    yield runner
    runner.cleanup()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _set_group_configs(broker, group: str, **configs: str) -> None:
    with WireClient(broker.host, broker.port) as wire:
        r = wire.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": GROUP_RESOURCE, "resource_name": group,
            "configs": [{"name": k.replace("_", "."), "config_operation": 0, "value": v}
                        for k, v in configs.items()]}], "validate_only": False})
        assert [x.error_code for x in r.responses] == [0], r


def _group(broker, prefix: str, **configs: str) -> str:
    """A new group reading from the earliest offset."""
    group = _name(prefix)
    _set_group_configs(broker, group, share_auto_offset_reset="earliest", **configs)
    return group


def _produce_batches(broker, topic: str, values: list[bytes]) -> None:
    """One record batch per value (flushed one by one), so that acquisitions can split them."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value)
        assert producer.flush(10) == 0
    producer.flush(10)


def _consumer(broker, group: str, **conf) -> ShareConsumer:
    settings = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                "share.acknowledgement.mode": "explicit", "fetch.wait.max.ms": 200}
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    return ShareConsumer(settings)


def _poll_until(consumers, done, timeout: float = 30.0, ack=ACCEPT, poll_timeout: float = 0.2):
    """Round-robin poll, acknowledging every record with ``ack`` (None: leave them), until ``done(got)``
    where ``got`` is one list of (value, offset, delivery count) per consumer."""
    got: list[list[tuple]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while not done(got) and time.monotonic() < deadline:
        for consumer, bucket in zip(consumers, got, strict=True):
            for msg in consumer.poll(timeout=poll_timeout):
                if msg.error() is not None:
                    continue
                bucket.append((msg.value(), msg.offset(), msg.delivery_count()))
                if ack is not None:
                    consumer.acknowledge(msg, AcknowledgeType(ack))
    return got


def _close(*consumers) -> None:
    for c in consumers:
        c.close()


# -- confluent-kafka's ShareConsumer ------------------------------------------------------------------


def test_three_consumers_share_one_partition_and_get_every_record_once(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    # long locks here: a consumer slow to poll again must not lose a record it has accepted already
    group = _group(share_broker, "three", share_record_lock_duration_ms="15000")
    values = [f"v{i}".encode() for i in range(30)]
    consumers = [_consumer(share_broker, group, max_poll_records=2) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic_name])
        for _ in range(2):  # all three join before there is anything to take
            for c in consumers:
                assert len(c.poll(timeout=0.2)) == 0
        _produce_batches(share_broker, topic_name, values)
        got = _poll_until(consumers, lambda got: sum(map(len, got)) >= len(values))
        received = [v for bucket in got for v, _, _ in bucket]
        assert sorted(received) == sorted(values)  # every record, none twice
        assert all(bucket for bucket in got), [len(b) for b in got]  # each consumer took a share
        assert {count for bucket in got for _, _, count in bucket} == {1}
    finally:
        _close(*consumers)


def _share_assignments(broker, group: str) -> list[set[int]]:
    """Each member's assigned partitions, from ShareGroupDescribe."""
    with WireClient(broker.host, broker.port) as wire:
        g = wire.request(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups[0]
    return [{p for t in m.assignment.topic_partitions for p in t.partitions} for m in g.members]


def test_two_consumers_split_the_partitions_between_them(share_broker, topic_name):
    """Kafka 4.1+'s simple assignor: with more partitions than members each partition has one member."""
    share_broker.create_topic(topic_name, 4)
    group = _group(share_broker, "split")
    consumers = [_consumer(share_broker, group) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(timeout=0.2)
            assignments = _share_assignments(share_broker, group)
            if len(assignments) == 2 and all(len(a) == 2 for a in assignments):
                break
        assert [len(a) for a in assignments] == [2, 2], assignments
        assert set().union(*assignments) == {0, 1, 2, 3}, assignments
        for _ in range(4):  # both consumers heartbeat again and take their (smaller) assignment
            for c in consumers:
                c.poll(timeout=0.3)
        producer = Producer({"bootstrap.servers": share_broker.bootstrap_servers, "linger.ms": 0})
        for p in range(4):
            for i in range(3):
                producer.produce(topic_name, value=f"p{p}-{i}".encode(), partition=p)
        assert producer.flush(10) == 0
        got: list[set[int]] = [set(), set()]
        count = 0
        deadline = time.monotonic() + 20
        while count < 12 and time.monotonic() < deadline:
            for c, seen in zip(consumers, got, strict=True):
                for msg in c.poll(timeout=0.2):
                    if msg.error() is None:
                        seen.add(msg.partition())
                        count += 1
                        c.acknowledge(msg, AcknowledgeType(ACCEPT))
        assert count == 12
        assert not got[0] & got[1] and got[0] | got[1] == {0, 1, 2, 3}, got  # nobody read another's
    finally:
        _close(*consumers)


def test_released_records_come_back_with_a_higher_delivery_count(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "release")
    _produce_batches(share_broker, topic_name, [b"again"])
    consumer = _consumer(share_broker, group)
    try:
        consumer.subscribe([topic_name])
        first = _poll_until([consumer], lambda got: got[0], ack=RELEASE)[0]
        assert first == [(b"again", 0, 1)]
        second = _poll_until([consumer], lambda got: got[0], ack=RELEASE)[0]
        assert second == [(b"again", 0, 2)]
        third = _poll_until([consumer], lambda got: got[0], ack=ACCEPT)[0]
        assert third == [(b"again", 0, 3)]
    finally:
        consumer.close()


def test_rejected_and_over_the_limit_records_are_archived(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "archive", share_delivery_count_limit="2")
    _produce_batches(share_broker, topic_name, [b"poison", b"flaky"])
    consumer = _consumer(share_broker, group)
    try:
        consumer.subscribe([topic_name])
        seen: list[tuple] = []
        deadline = time.monotonic() + 30
        flaky_deliveries = 0
        while flaky_deliveries < 2 and time.monotonic() < deadline:
            for msg in consumer.poll(timeout=0.2):
                if msg.error() is None:
                    seen.append((msg.value(), msg.delivery_count()))
                    if msg.value() == b"poison":
                        consumer.acknowledge(msg, AcknowledgeType.REJECT)
                    else:
                        flaky_deliveries += 1
                        consumer.acknowledge(msg, AcknowledgeType.RELEASE)
        assert seen.count((b"poison", 1)) == 1 and (b"flaky", 1) in seen and (b"flaky", 2) in seen
        # Redeliveries are acquired before new records: had either been left acquirable, it would come
        # back no later than the marker produced after them.
        _produce_batches(share_broker, topic_name, [b"marker"])
        after = _poll_until([consumer], lambda got: any(v == b"marker" for v, _, _ in got[0]))[0]
        assert [v for v, _, _ in after] == [b"marker"]
    finally:
        consumer.close()


def test_accepts_sent_as_the_consumer_closes_are_kept(share_broker, topic_name):
    """close() sends the last acknowledgements (ShareAcknowledge, epoch -1) while the consumer leaves its
    group (ShareGroupHeartbeat, epoch -1); librdkafka sends both at once, and the leave must not release
    what the acknowledgements accept (Kafka releases a member's records with its share session, not when
    it leaves the group)."""
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "closing")
    _produce_batches(share_broker, topic_name, [b"a", b"b", b"c"])
    consumer = _consumer(share_broker, group)
    try:
        consumer.subscribe([topic_name])
        assert len(_poll_until([consumer], lambda got: len(got[0]) >= 3)[0]) == 3
    finally:
        consumer.close()
    _produce_batches(share_broker, topic_name, [b"marker"])
    consumer = _consumer(share_broker, group)
    try:
        consumer.subscribe([topic_name])
        after = _poll_until([consumer], lambda got: any(v == b"marker" for v, _, _ in got[0]))[0]
    finally:
        consumer.close()
    assert [v for v, _, _ in after] == [b"marker"]  # redeliveries would have come first


_HOLDER = r"""
import sys, time
from confluent_kafka import ShareConsumer
consumer = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                          "share.acknowledgement.mode": "explicit", "max.poll.records": 3})
consumer.subscribe([sys.argv[3]])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    got = [m for m in consumer.poll(timeout=0.2) if m.error() is None]
    if got:
        print(" ".join(str(m.offset()) for m in got), flush=True)
        break
time.sleep(600)  # holds its records, unacknowledged, until killed
"""


def test_a_killed_consumer_records_go_to_the_others(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "killed")
    _produce_batches(share_broker, topic_name, [b"a", b"b", b"c"])
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, share_broker.bootstrap_servers, group,
                               topic_name], stdout=subprocess.PIPE, text=True)
    survivor = None
    try:
        line = holder.stdout.readline()
        held = sorted(int(x) for x in line.split())
        assert held, "the holder got nothing"
        holder.kill()  # SIGKILL: no leave, no acknowledgement
        holder.wait()
        survivor = _consumer(share_broker, group)
        survivor.subscribe([topic_name])
        got = _poll_until([survivor], lambda got: {o for _, o, _ in got[0]} >= {0, 1, 2})[0]
        assert sorted(o for _, o, _ in got) == [0, 1, 2]  # the held ones too, each once
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
        if survivor is not None:
            survivor.close()


def test_a_consumer_that_stops_polling_loses_its_records_after_the_lock(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "stalled")
    _produce_batches(share_broker, topic_name, [b"x", b"y"])
    stalled, other = _consumer(share_broker, group), _consumer(share_broker, group)
    try:
        stalled.subscribe([topic_name])
        held = _poll_until([stalled], lambda got: got[0], ack=None)[0]  # never acknowledged
        assert held and {count for _, _, count in held} == {1}
        other.subscribe([topic_name])
        got = _poll_until([other], lambda got: {v for v, _, _ in got[0]} >= {b"x", b"y"})[0]
        counts = {v: count for v, _, count in got}
        assert set(counts) == {b"x", b"y"}
        assert all(counts[v] == 2 for v, _, _ in held), counts
    finally:
        _close(other, stalled)


def test_acknowledged_records_stay_acknowledged_across_a_restart(minibroker_factory, topic_name):
    broker = minibroker_factory(SHARE_OVERRIDES)
    broker.create_topic(topic_name, 1)
    group = _group(broker, "restart")
    values = [f"r{i}".encode() for i in range(6)]
    _produce_batches(broker, topic_name, values)
    consumer = _consumer(broker, group, max_poll_records=1)
    try:
        consumer.subscribe([topic_name])
        first = _poll_until([consumer], lambda got: len(got[0]) >= 3)[0]
        consumer.commit_sync()  # the last accept, answered before the consumer leaves
    finally:
        consumer.close()
    accepted = {v for v, _, _ in first}
    broker.restart()
    consumer = _consumer(broker, group)
    try:
        consumer.subscribe([topic_name])
        rest = _poll_until([consumer], lambda got: len(accepted) + len(got[0]) >= len(values))[0]
    finally:
        consumer.close()
    assert sorted(accepted | {v for v, _, _ in rest}) == sorted(values)
    assert accepted.isdisjoint(v for v, _, _ in rest)


# -- ShareFetch and ShareAcknowledge on the wire -------------------------------------------------------


def _topic_id(wire, topic: str) -> bytes:
    r = wire.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": ZERO_UUID}],
                                    "allow_auto_topic_creation": False})
    return bytes(r.topics[0].topic_id)


def _produce_batch(wire, topic: str, *values: bytes) -> None:
    batch = v2.build_batch([(i, 1_700_000_000_000 + i, None, v, ()) for i, v in enumerate(values)])
    r = wire.request(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert r.responses[0].partition_responses[0].error_code == 0


def _acks(topic_id: bytes, partition: int, *batches) -> list:
    batches = [{"first_offset": f, "last_offset": last, "acknowledge_types": list(types)}
               for f, last, types in batches]
    return [{"topic_id": topic_id,
             "partitions": [{"partition_index": partition, "acknowledgement_batches": batches}]}]


def share_fetch(wire, group, member, epoch, topics=(), *, acks=(), forgotten=(), max_wait_ms=0,
                max_records=500, max_bytes=1 << 20, min_bytes=1, mode=0, renew=False, version=1,
                batch_size=None):
    """ShareFetch; ``topics`` is [(topic id, [partitions])], ``acks`` request topics from ``_acks``."""
    request_topics = [{"topic_id": t, "partitions": [{"partition_index": p, "acknowledgement_batches": []}
                                                     for p in parts]} for t, parts in topics]
    return wire.request(SHARE_FETCH, version, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes, "max_bytes": max_bytes, "max_records": max_records,
        "batch_size": max_records if batch_size is None else batch_size, "share_acquire_mode": mode,
        "is_renew_ack": renew, "topics": request_topics + list(acks),
        "forgotten_topics_data": [{"topic_id": t, "partitions": parts} for t, parts in forgotten]})


def share_ack(wire, group, member, epoch, acks=(), *, renew=False, version=1):
    return wire.request(SHARE_ACKNOWLEDGE, version, {"group_id": group, "member_id": member,
                                                     "share_session_epoch": epoch, "is_renew_ack": renew,
                                                     "topics": list(acks)})


def _partitions(response) -> dict:
    return {(bytes(t.topic_id), p.partition_index): p for t in response.responses for p in t.partitions}


def _acquired(response) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for p in _partitions(response).values() for a in p.acquired_records]


def _values(partition) -> list[bytes]:
    return [r.value for b in iter_batches(bytes(partition.records)) for r in b.records()]


def test_share_apis_are_advertised_at_v1_and_v2_only(share_broker):
    with WireClient(share_broker.host, share_broker.port) as wire:
        keys = wire.request(API_VERSIONS, 3, {}).api_keys
        ranges = {k.api_key: (k.min_version, k.max_version) for k in keys}
        assert ranges[SHARE_FETCH] == (1, 2) and ranges[SHARE_ACKNOWLEDGE] == (1, 2)
    with WireClient(share_broker.host, share_broker.port) as wire:  # v0 (4.0's early access) is not served
        with pytest.raises((ConnectionError, OSError, EOFError)):
            share_fetch(wire, "g", "m", 0, version=0)


def test_current_leader_is_unset_on_success(share_broker, topic_name):
    """Kafka fills CurrentLeader only for NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH: -1/-1 otherwise."""
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "leader")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        _produce_batch(wire, topic_name, b"a", b"b")
        fetched = share_fetch(wire, group, "m", 0, [(tid, [0])])
        assert _acquired(fetched) == [(0, 1, 1)]
        acked = share_ack(wire, group, "m", 1, _acks(tid, 0, (0, 1, [ACCEPT])))
        rows = list(_partitions(fetched).values()) + list(_partitions(acked).values())
        assert [(r.error_code, r.current_leader.leader_id, r.current_leader.leader_epoch) for r in rows] == \
            [(0, -1, -1), (0, -1, -1)]


def test_share_session_epochs(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "epochs", share_record_lock_duration_ms="60000")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        _produce_batch(wire, topic_name, b"a", b"b")
        assert share_fetch(wire, group, "m1", 1, [(tid, [0])]).error_code == E.SHARE_SESSION_NOT_FOUND
        assert share_fetch(wire, group, "m1", -1).error_code == E.SHARE_SESSION_NOT_FOUND
        assert share_ack(wire, group, "m1", 1).error_code == E.SHARE_SESSION_NOT_FOUND
        opening_with_acks = share_fetch(wire, group, "m1", 0, [(tid, [0])],
                                        acks=_acks(tid, 0, (0, 0, [ACCEPT])))
        assert opening_with_acks.error_code == E.INVALID_REQUEST
        opened = share_fetch(wire, group, "m1", 0, [(tid, [0])])
        assert (opened.error_code, opened.acquisition_lock_timeout_ms) == (0, 60000)
        assert _acquired(opened) == [(0, 1, 1)]
        assert _values(_partitions(opened)[(tid, 0)]) == [b"a", b"b"]
        assert share_fetch(wire, group, "m1", 5).error_code == E.INVALID_SHARE_SESSION_EPOCH
        assert share_ack(wire, group, "m1", 0).error_code == E.INVALID_SHARE_SESSION_EPOCH
        # epoch 1: a piggy-backed accept of offset 0; nothing new to acquire, so only that partition answers
        r = share_fetch(wire, group, "m1", 1, acks=_acks(tid, 0, (0, 0, [ACCEPT])))
        assert r.error_code == 0
        rows = _partitions(r).values()
        assert [(p.acknowledge_error_code, len(p.acquired_records)) for p in rows] == [(0, 0)]
        assert share_fetch(wire, group, "m1", 1).error_code == E.INVALID_SHARE_SESSION_EPOCH  # used up
        r = share_ack(wire, group, "m1", 2, _acks(tid, 0, (1, 1, [RELEASE])))
        assert (r.error_code, [p.error_code for p in _partitions(r).values()]) == (0, [0])
        again = share_fetch(wire, group, "m1", 3)
        assert _acquired(again) == [(1, 1, 2)]  # the released record, delivered a second time
        closed = share_fetch(wire, group, "m1", -1)  # closing releases offset 1 at once
        assert (closed.error_code, _acquired(closed)) == (0, [])
        assert share_fetch(wire, group, "m1", 4).error_code == E.SHARE_SESSION_NOT_FOUND
        other = share_fetch(wire, group, "m2", 0, [(tid, [0])])
        # a release by a closing session takes back its delivery (Kafka: it may never have reached the app)
        assert _acquired(other) == [(1, 1, 2)]
        # a new session replaces the old one: the old epochs are gone
        assert share_fetch(wire, group, "m2", 0, [(tid, [0])]).error_code == 0
        assert share_fetch(wire, group, "m2", 2).error_code == E.INVALID_SHARE_SESSION_EPOCH
        assert share_ack(wire, group, "m2", 1).error_code == 0
        assert share_ack(wire, group, "m2", -1).error_code == 0
        assert share_ack(wire, group, "m2", -1).error_code == E.SHARE_SESSION_NOT_FOUND


def test_malformed_requests_are_refused_whole(share_broker):
    with WireClient(share_broker.host, share_broker.port) as wire:
        for group, member in ((None, "m"), ("", "m"), ("g", ""), ("g", None), ("g", "m" * 37)):
            assert share_fetch(wire, group, member, 0).error_code == E.INVALID_REQUEST, (group, member)
            assert share_ack(wire, group, member, 1).error_code == E.INVALID_REQUEST, (group, member)
        assert share_fetch(wire, "g", "m", 0, mode=7, version=2).error_code == E.INVALID_REQUEST
        renewing_and_fetching = share_fetch(wire, "g", "m", 0, renew=True, version=2, max_records=10)
        assert renewing_and_fetching.error_code == E.INVALID_REQUEST


def test_acknowledgement_batches_kafka_refuses(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "badacks", share_record_lock_duration_ms="60000")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        _produce_batch(wire, topic_name, b"0", b"1", b"2", b"3")
        assert _acquired(share_fetch(wire, group, "m1", 0, [(tid, [0])])) == [(0, 3, 1)]
        assert share_fetch(wire, group, "m2", 0, [(tid, [0])]).error_code == 0
        bad = {
            "first after last": ((2, 1, [ACCEPT]),),
            "overlapping": ((0, 1, [ACCEPT]), (1, 2, [ACCEPT])),
            "out of order": ((2, 2, [ACCEPT]), (0, 0, [ACCEPT])),
            "types of the wrong length": ((0, 2, [ACCEPT, ACCEPT]),),
            "unknown type": ((0, 0, [9]),),
            "renew without IsRenewAck": ((0, 0, [RENEW]),),
            "a range of 2^62 offsets": ((0, 2**62, [ACCEPT]),),  # refused without a step per offset
            "negative offsets": ((-5, -1, [ACCEPT]),),
        }
        epoch = 1
        for what, batches in bad.items():
            r = share_ack(wire, group, "m1", epoch, _acks(tid, 0, *batches), version=2)
            epoch += 1
            assert [p.error_code for p in _partitions(r).values()] == [E.INVALID_REQUEST], what
        # offsets never fetched (past the end offset): nothing of the partition is applied
        r = share_ack(wire, group, "m1", epoch, _acks(tid, 0, (0, 0, [ACCEPT]), (10, 10, [ACCEPT])))
        epoch += 1
        assert [p.error_code for p in _partitions(r).values()] == [E.INVALID_REQUEST]
        # offsets another member holds
        r = share_ack(wire, group, "m2", 1, _acks(tid, 0, (0, 0, [ACCEPT])))
        assert [p.error_code for p in _partitions(r).values()] == [E.INVALID_RECORD_STATE]
        # ... all still m1's, which can accept them now (a second accept of offset 0 would be refused)
        r = share_fetch(wire, group, "m1", epoch, acks=_acks(tid, 0, (0, 3, [ACCEPT, GAP, REJECT, ACCEPT])))
        assert [p.acknowledge_error_code for p in _partitions(r).values()] == [0]


def test_unknown_topic_ids_and_partitions(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "unknown", share_record_lock_duration_ms="60000")
    unknown = uuid.uuid4().bytes
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        r = share_fetch(wire, group, "m", 0, [(unknown, [0]), (tid, [0, 5])])
        assert r.error_code == 0
        assert {k: p.error_code for k, p in _partitions(r).items()} == {
            (unknown, 0): E.UNKNOWN_TOPIC_ID, (tid, 0): 0, (tid, 5): E.UNKNOWN_TOPIC_OR_PARTITION}
        r = share_ack(wire, group, "m", 1, _acks(unknown, 0, (0, 0, [ACCEPT])))
        assert [p.error_code for p in _partitions(r).values()] == [E.UNKNOWN_TOPIC_ID]
        # forgotten partitions are no longer fetched (nor answered)
        r = share_fetch(wire, group, "m", 2, forgotten=[(unknown, [0]), (tid, [5])])
        assert {k: p.error_code for k, p in _partitions(r).items()} == {}


def test_record_limit_mode_batch_size_and_renewals(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "modes", share_record_lock_duration_ms="60000")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        _produce_batch(wire, topic_name, *[str(i).encode() for i in range(5)])
        # record-limit (v2): exactly MaxRecords of the 5-record batch, which comes whole
        limited = share_fetch(wire, group, "m1", 0, [(tid, [0])], max_records=2, mode=1, version=2)
        assert _acquired(limited) == [(0, 1, 1)]
        assert len(_values(_partitions(limited)[(tid, 0)])) == 5
        # batch-optimized: the rest of the batch, overshooting MaxRecords, cut in BatchSize runs
        optimized = share_fetch(wire, group, "m2", 0, [(tid, [0])], max_records=1, batch_size=2, version=2)
        assert _acquired(optimized) == [(2, 3, 1), (4, 4, 1)]
        # a renewal fetches nothing and keeps the records acquired
        r = share_fetch(wire, group, "m1", 1, acks=_acks(tid, 0, (0, 1, [RENEW])), renew=True, version=2,
                        max_records=0, max_bytes=0, min_bytes=0)
        assert (r.error_code, [(p.acknowledge_error_code, len(p.acquired_records))
                               for p in _partitions(r).values()]) == (0, [(0, 0)])
        r = share_ack(wire, group, "m1", 2, _acks(tid, 0, (0, 1, [RENEW, ACCEPT])), renew=True, version=2)
        assert (r.error_code, r.acquisition_lock_timeout_ms) == (0, 60000)
        assert [p.error_code for p in _partitions(r).values()] == [0]
        r = share_ack(wire, group, "m1", 3, _acks(tid, 0, (0, 0, [ACCEPT])))
        assert [p.error_code for p in _partitions(r).values()] == [0]  # offset 0 was still m1's


def test_redelivered_batches_shrink_as_their_delivery_count_nears_the_limit(share_broker, topic_name):
    """Kafka's throttled redelivery (share.delivery.count.limit 5: from the 4th delivery, half the
    batch; the last delivery one record alone)."""
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "throttle")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        _produce_batch(wire, topic_name, *[b"r%d" % i for i in range(16)])
        runs = []
        epoch = 0
        for _ in range(5):
            got = _acquired(share_fetch(wire, group, "m", epoch, [(tid, [0])] if epoch == 0 else ()))
            epoch += 1
            runs.append(got)
            released = share_ack(wire, group, "m", epoch,
                                 _acks(tid, 0, *[(f, last, [RELEASE]) for f, last, _ in got]))
            epoch += 1
            assert [p.error_code for p in _partitions(released).values()] == [0]
        assert runs == [[(0, 15, 1)], [(0, 15, 2)], [(0, 15, 3)], [(0, 7, 4)], [(0, 0, 5)]]


def test_acknowledging_records_fetched_before_a_restart(minibroker_factory, topic_name):
    """Kafka's answers after a restart: the old share session is gone (SHARE_SESSION_NOT_FOUND); in a new
    session, a share partition no fetch has loaded since the start is UNKNOWN_TOPIC_OR_PARTITION; once
    loaded, the records are no longer this member's (acquisitions are not persisted): INVALID_RECORD_STATE."""
    broker = minibroker_factory(SHARE_OVERRIDES)
    broker.create_topic(topic_name, 1)
    group = _group(broker, "restart-acks")
    with WireClient(broker.host, broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        _produce_batch(wire, topic_name, b"a", b"b", b"c")
        assert _acquired(share_fetch(wire, group, "m1", 0, [(tid, [0])])) == [(0, 2, 1)]
    broker.restart()
    accept = _acks(tid, 0, (0, 2, [ACCEPT]))
    with WireClient(broker.host, broker.port) as wire:
        assert share_ack(wire, group, "m1", 1, accept).error_code == E.SHARE_SESSION_NOT_FOUND
        assert share_fetch(wire, group, "m1", 0).error_code == 0  # a new, empty session
        r = share_ack(wire, group, "m1", 1, accept)
        assert [p.error_code for p in _partitions(r).values()] == [E.UNKNOWN_TOPIC_OR_PARTITION]
        deadline = time.monotonic() + 15
        while True:  # m2 loads the share partition (COORDINATOR_NOT_AVAILABLE while the state loads)
            fetched = share_fetch(wire, group, "m2", 0, [(tid, [0])])
            codes = [p.error_code for p in _partitions(fetched).values()]
            if codes == [0] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert _acquired(fetched) == [(0, 2, 1)]  # the acquisition was not persisted: a first delivery
        r = share_ack(wire, group, "m1", 2, accept)
        assert [p.error_code for p in _partitions(r).values()] == [E.INVALID_RECORD_STATE]


def test_a_long_poll_wakes_on_an_append(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "longpoll")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        assert _acquired(share_fetch(wire, group, "m", 0, [(tid, [0])])) == []
        answer = {}
        waiting = threading.Thread(
            target=lambda: answer.update(r=share_fetch(wire, group, "m", 1, max_wait_ms=20000)))
        waiting.start()
        try:
            with WireClient(share_broker.host, share_broker.port) as producer:
                _produce_batch(producer, topic_name, b"late")
        finally:
            waiting.join(30)
        # had the append not woken it, the fetch would have timed out empty (no second look at the log)
        assert _acquired(answer["r"]) == [(0, 0, 1)]


def test_min_bytes_holds_the_answer_until_enough_is_readable(share_broker, topic_name):
    """MinBytes: a small append does not end the wait (as it would with MinBytes 1); one that brings the
    readable bytes to MinBytes does, and both batches are acquired. On MaxWaitMs, whatever there is."""
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "minbytes")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        assert _acquired(share_fetch(wire, group, "m", 0, [(tid, [0])])) == []
        answer = {}
        waiting = threading.Thread(target=lambda: answer.update(
            r=share_fetch(wire, group, "m", 1, max_wait_ms=20000, min_bytes=2000)))
        waiting.start()
        try:
            with WireClient(share_broker.host, share_broker.port) as producer:
                _produce_batch(producer, topic_name, b"small")
                time.sleep(0.5)  # the small append has woken the fetch, which goes on waiting
                assert waiting.is_alive()
                _produce_batch(producer, topic_name, b"x" * 3000)
        finally:
            waiting.join(30)
        assert _acquired(answer["r"]) == [(0, 1, 1)]
        _produce_batch(wire, topic_name, b"tiny")
        late = share_fetch(wire, group, "m", 2, max_wait_ms=300, min_bytes=1 << 20)
        assert _acquired(late) == [(2, 2, 1)]


def test_a_long_poll_does_not_hand_out_a_recreated_topic_under_the_old_id(minibroker_factory, topic_name):
    """A topic deleted and created again (same name, another id) while a fetch waits: the append to the new
    topic wakes the fetch, which must answer the session's old id UNKNOWN_TOPIC_ID, not acquire the new
    topic's records and send them under the old id (the client could never acknowledge them)."""
    broker = minibroker_factory(SHARE_OVERRIDES, mode="thread")
    broker.create_topic(topic_name, 1)
    group = _group(broker, "recreated", share_record_lock_duration_ms="60000")
    with WireClient(broker.host, broker.port, timeout=30) as wire:
        old = _topic_id(wire, topic_name)
        assert _acquired(share_fetch(wire, group, "m", 0, [(old, [0])])) == []
        answer = {}
        waiting = threading.Thread(
            target=lambda: answer.update(r=share_fetch(wire, group, "m", 1, max_wait_ms=20000)))
        waiting.start()
        try:
            deadline = time.monotonic() + 10
            while not broker.broker.share_partitions._watchers:  # the fetch is waiting
                assert time.monotonic() < deadline, "the fetch did not wait"
                time.sleep(0.01)
            broker.delete_topic(topic_name)
            broker.create_topic(topic_name, 1)
            with WireClient(broker.host, broker.port) as producer:
                assert _topic_id(producer, topic_name) != old
                _produce_batch(producer, topic_name, b"new")
        finally:
            waiting.join(30)
        partitions = _partitions(answer["r"])
        assert {k: (p.error_code, _values(p)) for k, p in partitions.items()} == {
            (old, 0): (E.UNKNOWN_TOPIC_ID, [])}


def test_a_dropped_connection_releases_its_records_at_once(share_broker, topic_name):
    share_broker.create_topic(topic_name, 1)
    group = _group(share_broker, "dropped", share_record_lock_duration_ms="60000")
    with WireClient(share_broker.host, share_broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        _produce_batch(wire, topic_name, b"held")
        assert _acquired(share_fetch(wire, group, "gone", 0, [(tid, [0])])) == [(0, 0, 1)]
    # the locks run for a minute; the record comes back long before, when the connection closes
    with WireClient(share_broker.host, share_broker.port) as wire:
        got = _acquired(share_fetch(wire, group, "next", 0, [(tid, [0])]))
        epoch, deadline = 1, time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = _acquired(share_fetch(wire, group, "next", epoch, max_wait_ms=500))
            epoch += 1
        # released with its delivery taken back (Kafka: it may never have reached the application)
        assert got == [(0, 0, 1)]


@pytest.fixture(scope="module")
def acl_share_broker():
    runner = BrokerRunner({**SHARE_OVERRIDES,
                           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "allow.everyone.if.no.acl.found": "true",
                           "group.share.max.share.sessions": "2"}).start()
    yield runner
    runner.cleanup()


def _deny_read(wire, resource_type: int, name: str) -> None:
    """DENY READ, ALLOW DESCRIBE (so that Metadata still gives the topic id)."""
    acl = {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": 3,
           "principal": "User:ANONYMOUS", "host": "*"}
    r = wire.request(CREATE_ACLS, 3, {"creations": [{**acl, "operation": 3, "permission_type": 2},
                                                    {**acl, "operation": 8, "permission_type": 3}]})
    assert [x.error_code for x in r.results] == [0, 0]


def test_authorization_of_the_group_and_the_topics(acl_share_broker, topic_name):
    broker = acl_share_broker
    allowed, refused = topic_name + "-ok", topic_name + "-no"
    broker.create_topic(allowed, 1)
    broker.create_topic(refused, 1)
    with WireClient(broker.host, broker.port) as wire:
        _deny_read(wire, 3, "denied-group")  # GROUP
        _deny_read(wire, 2, refused)  # TOPIC
        ok, no = _topic_id(wire, allowed), _topic_id(wire, refused)
        r = share_fetch(wire, "denied-group", "m", 0, [(ok, [0])])
        assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
        assert share_ack(wire, "denied-group", "m", 1).error_code == E.GROUP_AUTHORIZATION_FAILED
        r = share_fetch(wire, "auth-group", "m", 0, [(ok, [0]), (no, [0])])
        assert {k: p.error_code for k, p in _partitions(r).items()} == {
            (ok, 0): 0, (no, 0): E.TOPIC_AUTHORIZATION_FAILED}
        r = share_ack(wire, "auth-group", "m", 1, _acks(no, 0, (0, 0, [ACCEPT])))
        assert [p.error_code for p in _partitions(r).values()] == [E.TOPIC_AUTHORIZATION_FAILED]
        assert share_ack(wire, "auth-group", "m", -1).error_code == 0  # its session slot is free again


def test_a_long_poll_decides_read_on_partitions_added_while_it_waits(minibroker_factory, topic_name):
    """A fetch waits; another connection of the same member adds a topic the principal may not READ to the
    session (that request answers TOPIC_AUTHORIZATION_FAILED, the partition stays in the session). When
    the waiting fetch wakes it must refuse that partition too, not hand out its records."""
    broker = minibroker_factory({**SHARE_OVERRIDES, "authorizer.class.name":
                                 "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                 "allow.everyone.if.no.acl.found": "true"}, mode="thread")
    allowed, refused = topic_name + "-ok", topic_name + "-no"
    broker.create_topic(allowed, 1)
    broker.create_topic(refused, 1)
    group = _group(broker, "authpoll", share_record_lock_duration_ms="60000")
    with WireClient(broker.host, broker.port, timeout=30) as wire, \
            WireClient(broker.host, broker.port, timeout=30) as other:
        _produce_batch(other, refused, b"secret")
        _deny_read(other, 2, refused)  # TOPIC (its only ACLs from here on: no more writes to it either)
        ok, no = _topic_id(other, allowed), _topic_id(other, refused)
        assert _acquired(share_fetch(wire, group, "m", 0, [(ok, [0])])) == []
        answer = {}
        waiting = threading.Thread(
            target=lambda: answer.update(r=share_fetch(wire, group, "m", 1, max_wait_ms=20000)))
        waiting.start()
        try:
            deadline = time.monotonic() + 10
            while not broker.broker.share_partitions._watchers:  # the fetch is waiting
                assert time.monotonic() < deadline, "the fetch did not wait"
                time.sleep(0.01)
            r = share_fetch(other, group, "m", 2, [(no, [0])])
            assert {k: p.error_code for k, p in _partitions(r).items()} == {
                (no, 0): E.TOPIC_AUTHORIZATION_FAILED}
            _produce_batch(other, allowed, b"public")  # wakes the waiting fetch
        finally:
            waiting.join(30)
        partitions = _partitions(answer["r"])
        assert {k: (p.error_code, _values(p)) for k, p in partitions.items()} == {
            (ok, 0): (0, [b"public"]), (no, 0): (E.TOPIC_AUTHORIZATION_FAILED, [])}


def test_the_share_session_limit(acl_share_broker, topic_name):
    broker = acl_share_broker
    broker.create_topic(topic_name, 1)
    with WireClient(broker.host, broker.port) as wire:
        tid = _topic_id(wire, topic_name)
        for member in ("s1", "s2"):
            assert share_fetch(wire, "limit-group", member, 0, [(tid, [0])]).error_code == 0
        refused = share_fetch(wire, "limit-group", "s3", 0, [(tid, [0])])
        assert refused.error_code == E.SHARE_SESSION_LIMIT_REACHED
        assert share_fetch(wire, "limit-group", "s1", 0, [(tid, [0])]).error_code == 0  # a replacement fits
        assert share_fetch(wire, "limit-group", "s2", -1).error_code == 0
        assert share_fetch(wire, "limit-group", "s3", 0, [(tid, [0])]).error_code == 0
        assert share_fetch(wire, "limit-group", "s1", -1).error_code == 0
        assert share_fetch(wire, "limit-group", "s3", -1).error_code == 0


def test_a_consumer_byte_rate_quota_caps_what_one_share_fetch_reads(minibroker_factory, topic_name):
    """As Kafka: MaxBytes capped at what the client's quota window allows in one go (one batch at least);
    the answer is not throttled, its records being acquired already."""
    broker = minibroker_factory({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    broker.create_topic(topic_name, 1)
    group = _group(broker, "quota")
    with WireClient(broker.host, broker.port, client_id="slow-share") as wire:
        r = wire.request(49, 1, {"entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": "slow-share"}],
            "ops": [{"key": "consumer_byte_rate", "value": 2048.0, "remove": False}]}],
            "validate_only": False})
        assert r.entries[0].error_code == 0
        tid = _topic_id(wire, topic_name)
        for i in range(8):
            _produce_batch(wire, topic_name, bytes([65 + i]) * 1000)
        first = share_fetch(wire, group, "m", 0, [(tid, [0])], max_bytes=1 << 20)
        got = _acquired(first)
        assert got and got[-1][1] < 7  # capped: not all 8 batches of ~1 KiB in one answer
        assert first.throttle_time_ms == 0
    with WireClient(broker.host, broker.port, client_id="fast-share") as wire:  # no quota: all of them
        r = share_fetch(wire, group, "m2", 0, [(tid, [0])], max_bytes=1 << 20)
        assert _acquired(r) and _acquired(r)[-1][1] == 7
