"""The API versions Kafka 4.1-4.3 added (issue 20), on the wire: what each new version changes, the
merged protocol declarations they come from, ApiVersions' feature levels, the transaction epoch bump of
KIP-890 part 2 in the coordinator, and the broker version kafka-python infers."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from types import SimpleNamespace

import pytest

from minibroker.coordinator.offsets_store import OFFSETS_TOPIC
from minibroker.coordinator.transaction_coordinator import SHORT_MAX, TransactionCoordinator
from minibroker.coordinator.transaction_records import TransactionState
from minibroker.errors import ErrorCode as E
from minibroker.errors import KafkaError
from minibroker.protocol.codec import REQUESTS
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.records import v2
from minibroker.records.batches import iter_batches
from minibroker.tools.wire import WireClient

S = TransactionState
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 3, 8, 9
DESCRIBE_GROUPS, API_VERSIONS, INIT_PRODUCER_ID, END_TXN, WRITE_TXN_MARKERS = 15, 18, 22, 26, 27
TXN_OFFSET_COMMIT, DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER, LIST_TRANSACTIONS = 28, 35, 60, 66

# Kafka 4.3's highest versions of the APIs minibroker serves (kafka-python's table of a 4.3 broker)
KAFKA_4_3_MAX = {
    PRODUCE: 13,
    FETCH: 18,
    LIST_OFFSETS: 11,
    METADATA: 13,
    OFFSET_COMMIT: 10,
    OFFSET_FETCH: 10,
    DESCRIBE_GROUPS: 6,
    END_TXN: 5,
    WRITE_TXN_MARKERS: 2,
    TXN_OFFSET_COMMIT: 5,
    DESCRIBE_LOG_DIRS: 5,
    DESCRIBE_CLUSTER: 2,
    LIST_TRANSACTIONS: 2,
    INIT_PRODUCER_ID: 5,
}


def _topic_id(wire, topic: str) -> bytes:
    r = wire.request(
        METADATA, 12, {"topics": [{"name": topic, "topic_id": ZERO_UUID}], "allow_auto_topic_creation": False}
    )
    return bytes(r.topics[0].topic_id)


def _records(*values: bytes, **options) -> bytes:
    return v2.build_batch([(i, 1_700_000_000_000 + i, None, v, ()) for i, v in enumerate(values)], **options)


# -- the merged declarations ---------------------------------------------------------------------------


def test_declarations_span_old_and_new_versions():
    # Kafka 4 dropped Produce v0-v2 and Fetch v0-v3; minibroker keeps them from the 3.9-era schemas
    assert REQUESTS[PRODUCE].valid == (0, 13) and REQUESTS[FETCH].valid == (0, 18)
    assert REQUESTS[69].valid == (0, 1) and REQUESTS[68].valid == (0, 1)  # our own KIP-848 schemas
    assert REQUESTS[74].name == "ListConfigResourcesRequest"  # Kafka 4.3 renamed key 74


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="../shared (Kafka's schemas) not present")
def test_merge_keeps_each_source_for_the_versions_it_owns():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import gen_protocol as g
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    old = {
        "name": "X",
        "type": "request",
        "apiKey": 0,
        "validVersions": "0-5",
        "flexibleVersions": "4+",
        "fields": [
            {"name": "Gone", "type": "int8", "versions": "0-2"},
            {"name": "Kept", "type": "int32", "versions": "0+"},
            {"name": "Late", "type": "string", "versions": "5+", "nullableVersions": "5+"},
        ],
    }
    new = {
        "name": "X",
        "type": "request",
        "apiKey": 0,
        "validVersions": "3-7",
        "flexibleVersions": "4+",
        "fields": [
            {"name": "Kept", "type": "int32", "versions": "0-6"},
            {"name": "Late", "type": "string", "versions": "5+"},
            {"name": "Fresh", "type": "int64", "versions": "7+"},
        ],
    }
    merged = g.merge_specs(old, new)
    assert merged["validVersions"] == "0-7" and merged["flexibleVersions"] == "4+"
    fields = {f["name"]: f for f in merged["fields"]}
    assert [f["name"] for f in merged["fields"]] == ["Gone", "Kept", "Late", "Fresh"]
    assert fields["Gone"]["versions"] == "0-2" and fields["Kept"]["versions"] == "0-6"
    assert fields["Late"]["versions"] == "5+" and "nullableVersions" not in fields["Late"]  # new owns v5
    with pytest.raises(ValueError, match="gap"):
        g.merge_specs(old, dict(new, fields=[{"name": "Kept", "type": "int32", "versions": "5+"}]))
    with pytest.raises(ValueError, match="became"):
        g.merge_specs(old, dict(new, fields=[{"name": "Kept", "type": "int64", "versions": "0+"}]))


# -- ApiVersions --------------------------------------------------------------------------------------


def test_api_versions_ranges_and_features(minibroker):
    with WireClient(minibroker.host, minibroker.port) as wire:
        r = wire.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    for key, top in KAFKA_4_3_MAX.items():
        assert ranges[key][1] == top, key
    supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}
    assert supported["metadata.version"] == (7, 30) and finalized["metadata.version"] == (30, 30)
    assert finalized["transaction.version"] == (2, 2)  # EndTxn v5 is served
    assert finalized["kraft.version"] == (1, 1)
    # a level is finalized only while what it switches on is served
    assert ("group.version" in finalized) == (68 in ranges)
    assert ("share.version" in finalized) == (76 in ranges)
    assert ("streams.version" in finalized) == (88 in ranges)


def test_kafka_python_infers_kafka_4_3(minibroker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers, request_timeout_ms=10000)
    try:
        assert admin._client.check_version(timeout_ms=10000) == (4, 3)
    finally:
        admin.close()


# -- Produce v12-v13, Fetch v18, Metadata v13, ListOffsets v11 ----------------------------------------


def test_produce_v13_by_topic_id_and_fetch_v18(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    with WireClient(minibroker.host, minibroker.port) as wire:
        topic_id = _topic_id(wire, topic_name)
        unknown = uuid.uuid4().bytes
        r = wire.request(
            PRODUCE,
            13,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [
                    {"topic_id": topic_id, "partition_data": [{"index": 0, "records": _records(b"a", b"b")}]},
                    {"topic_id": unknown, "partition_data": [{"index": 0, "records": _records(b"c")}]},
                ],
            },
        )
        answers = {
            bytes(t.topic_id): [(p.index, p.error_code, p.base_offset) for p in t.partition_responses]
            for t in r.responses
        }
        assert answers == {topic_id: [(0, 0, 0)], unknown: [(0, E.UNKNOWN_TOPIC_ID, -1)]}
        r = wire.request(
            FETCH,
            18,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic_id": topic_id,
                        "partitions": [
                            {
                                "partition": 0,
                                "fetch_offset": 0,
                                "partition_max_bytes": 1 << 20,
                                "current_leader_epoch": -1,
                                "log_start_offset": -1,
                                "last_fetched_epoch": -1,
                                "high_watermark": 7,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        p = r.responses[0].partitions[0]
        assert (p.error_code, p.high_watermark) == (0, 2)
        assert [rec.value for b in iter_batches(bytes(p.records)) for rec in b.records()] == [b"a", b"b"]


def test_metadata_v13_and_list_offsets_v11(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    with WireClient(minibroker.host, minibroker.port) as wire:
        r = wire.request(
            METADATA,
            13,
            {"topics": [{"name": topic_name, "topic_id": ZERO_UUID}], "allow_auto_topic_creation": False},
        )
        assert r.error_code == 0 and r.topics[0].error_code == 0 and r.brokers
        r = wire.request(
            LIST_OFFSETS,
            11,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "timeout_ms": 1000,
                "topics": [
                    {
                        "name": topic_name,
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                            for ts in (-6, -2, -1)
                        ],
                    }
                ],
            },
        )
        answers = [(p.error_code, p.offset) for p in r.topics[0].partitions]
        assert answers == [(0, -1), (0, 0), (0, 0)]  # nothing is pending upload without tiered storage


# -- OffsetCommit / OffsetFetch v10 (topic ids) -------------------------------------------------------


def test_offset_commit_and_fetch_v10_by_topic_id(minibroker, topic_name):
    minibroker.create_topic(topic_name, partitions=2)
    group = f"g-{uuid.uuid4()}"
    unknown = uuid.uuid4().bytes
    with WireClient(minibroker.host, minibroker.port) as wire:
        topic_id = _topic_id(wire, topic_name)
        r = wire.request(
            OFFSET_COMMIT,
            10,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "topic_id": t,
                        "partitions": [
                            {
                                "partition_index": 1,
                                "committed_offset": 42,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "m",
                            }
                        ],
                    }
                    for t in (topic_id, unknown)
                ],
            },
        )
        assert {bytes(t.topic_id): t.partitions[0].error_code for t in r.topics} == {
            topic_id: 0,
            unknown: E.UNKNOWN_TOPIC_ID,
        }

        def fetch(topics):
            r = wire.request(
                OFFSET_FETCH,
                10,
                {
                    "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
                    "require_stable": False,
                },
            )
            return {
                bytes(t.topic_id): [
                    (p.partition_index, p.error_code, p.committed_offset) for p in t.partitions
                ]
                for t in r.groups[0].topics
            }

        asked = fetch(
            [
                {"topic_id": topic_id, "partition_indexes": [0, 1]},
                {"topic_id": unknown, "partition_indexes": [0]},
            ]
        )
        assert asked == {topic_id: [(0, 0, -1), (1, 0, 42)], unknown: [(0, E.UNKNOWN_TOPIC_ID, -1)]}
        assert fetch(None) == {topic_id: [(1, 0, 42)]}


# -- DescribeGroups v6, DescribeCluster v2, DescribeLogDirs v5, ListTransactions v2 ---------------------


def test_describe_groups_v6_unknown_group(minibroker):
    group = f"nobody-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        old = wire.request(DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
        new = wire.request(DESCRIBE_GROUPS, 6, {"groups": [group], "include_authorized_operations": False})
    assert (old.groups[0].error_code, old.groups[0].group_state) == (0, "Dead")
    assert new.groups[0].error_code == E.GROUP_ID_NOT_FOUND and group in new.groups[0].error_message


def test_describe_cluster_v2_and_describe_log_dirs_v5(minibroker):
    with WireClient(minibroker.host, minibroker.port) as wire:
        r = wire.request(
            DESCRIBE_CLUSTER,
            2,
            {
                "include_cluster_authorized_operations": False,
                "endpoint_type": 1,
                "include_fenced_brokers": True,
            },
        )
        assert r.error_code == 0 and [(b.broker_id, b.is_fenced) for b in r.brokers] == [
            (r.controller_id, False)
        ]
        r = wire.request(DESCRIBE_LOG_DIRS, 5, {"topics": []})
        assert (
            r.error_code == 0
            and r.results
            and all(not d.is_cordoned and d.error_code == 0 for d in r.results)
        )


def _init(wire, tid, timeout=60000):
    r = wire.request(
        INIT_PRODUCER_ID,
        5,
        {"transactional_id": tid, "transaction_timeout_ms": timeout, "producer_id": -1, "producer_epoch": -1},
    )
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def test_list_transactions_v2_pattern(minibroker):
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        for suffix in ("a1", "a2", "b1"):
            _init(wire, f"{prefix}-{suffix}")

        def listed(pattern, version=2):
            r = wire.request(
                LIST_TRANSACTIONS,
                version,
                {
                    "state_filters": [],
                    "producer_id_filters": [],
                    "duration_filter": -1,
                    "transactional_id_pattern": pattern,
                },
            )
            return r.error_code, sorted(
                t.transactional_id for t in r.transaction_states if t.transactional_id.startswith(prefix)
            )

        assert listed(f"{prefix}-a.") == (0, [f"{prefix}-a1", f"{prefix}-a2"])
        assert listed(f"{prefix}-a")[1] == []  # the whole id must match
        assert listed(None)[1] == listed("")[1] == [f"{prefix}-{s}" for s in ("a1", "a2", "b1")]
        assert listed("(unclosed")[0] == E.INVALID_REGULAR_EXPRESSION


# -- KIP-890 part 2: Produce v12, TxnOffsetCommit v5, EndTxn v5, WriteTxnMarkers v2 --------------------


def _produce_txn(wire, tid, topic, pid, epoch, seq, *values, version=12):
    records = _records(
        *values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    r = wire.request(
        PRODUCE,
        version,
        {
            "transactional_id": tid,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return r.responses[0].partition_responses[0].error_code


def _end(wire, tid, pid, epoch, committed, version=5):
    r = wire.request(
        END_TXN,
        version,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": committed},
    )
    return r.error_code, r.producer_id, r.producer_epoch


def _committed_values(wire, topic):
    r = wire.request(
        FETCH,
        12,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 1,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "fetch_offset": 0,
                            "partition_max_bytes": 1 << 20,
                            "current_leader_epoch": -1,
                            "log_start_offset": -1,
                            "last_fetched_epoch": -1,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    p = r.responses[0].partitions[0]
    # below the last stable offset only; the one aborted transaction here is the producer's, from its start
    aborted = {a.producer_id for a in p.aborted_transactions or ()}
    values = [
        rec.value
        for b in iter_batches(bytes(p.records))
        if not b.is_control and b.producer_id not in aborted
        for rec in b.records()
    ]
    return p.last_stable_offset, values


def test_transaction_v2_implicit_adds_and_epoch_bump(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    tid, group = f"tv2-{uuid.uuid4()}", f"g-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        pid, epoch = _init(wire, tid)
        # Produce v11 does not add the partition (the v1 protocol: AddPartitionsToTxn first)...
        assert _produce_txn(wire, tid, topic_name, pid, epoch, 0, b"x", version=11) == 0
        assert _end(wire, tid, pid, epoch, True, version=4)[0] == E.INVALID_TXN_STATE
        # ...v12 does, so EndTxn v5 finds a transaction to commit
        assert _produce_txn(wire, tid, topic_name, pid, epoch, 1, b"y") == 0
        r = wire.request(
            TXN_OFFSET_COMMIT,
            5,
            {
                "transactional_id": tid,
                "group_id": group,
                "producer_id": pid,
                "producer_epoch": epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic_name,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 2,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
        assert r.topics[0].partitions[0].error_code == 0  # v5 added the offsets partition itself
        assert _committed_values(wire, topic_name)[0] == 0  # open: nothing stable yet
        assert _end(wire, tid, pid, epoch, True) == (0, pid, epoch + 1)
        assert _end(wire, tid, pid, epoch, True) == (0, pid, epoch + 1)  # a retry with the old epoch
        assert _end(wire, tid, pid, epoch, False)[0] == E.INVALID_TXN_STATE
        lso, values = _committed_values(wire, topic_name)
        assert lso == 3 and values == [b"x", b"y"]  # the commit marker carried the new epoch
        r = wire.request(
            OFFSET_FETCH,
            7,
            {
                "group_id": group,
                "require_stable": True,
                "topics": [{"name": topic_name, "partition_indexes": [0]}],
            },
        )
        assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].committed_offset) == (0, 2)
        # the old epoch is fenced; the new one starts the next transaction at sequence 0, then aborts
        assert _produce_txn(wire, tid, topic_name, pid, epoch, 2, b"z") == E.INVALID_PRODUCER_EPOCH
        assert _produce_txn(wire, tid, topic_name, pid, epoch + 1, 0, b"z") == 0
        assert _end(wire, tid, pid, epoch + 1, False) == (0, pid, epoch + 2)
        assert _committed_values(wire, topic_name) == (5, [b"x", b"y"])
        # an abort with no transaction open only bumps the epoch; a commit has nothing to commit
        assert _end(wire, tid, pid, epoch + 2, False) == (0, pid, epoch + 3)
        assert _end(wire, tid, pid, epoch + 3, True)[0] == E.INVALID_TXN_STATE
        assert _end(wire, tid, pid, epoch + 1, False)[0] == E.PRODUCER_FENCED


def test_write_txn_markers_v2(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    tid = f"markers-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        pid, epoch = _init(wire, tid)
        assert _produce_txn(wire, tid, topic_name, pid, epoch, 0, b"hung") == 0
        r = wire.request(
            WRITE_TXN_MARKERS,
            2,
            {
                "markers": [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "transaction_result": False,
                        "coordinator_epoch": 0,
                        "transaction_version": 2,
                        "topics": [{"name": topic_name, "partition_indexes": [0]}],
                    }
                ]
            },
        )
        assert r.markers[0].topics[0].partitions[0].error_code == 0
        assert _committed_values(wire, topic_name)[0] == 2  # the abort marker closed it


# -- the coordinator's epoch bump, without sockets ------------------------------------------------------


class _Log:
    exists = False
    num_partitions = 1

    def __init__(self):
        self.states = []

    def ensure_topic(self):
        pass

    def partition_for(self, transactional_id):
        return 0

    def append(self, transactional_id, value):
        self.states.append(value)


async def test_an_exhausted_epoch_moves_to_a_new_producer_id_at_the_end():
    markers = []
    ids = iter(range(500, 600))
    broker = SimpleNamespace(
        config={
            "transaction.max.timeout.ms": 900000,
            "transactional.id.expiration.ms": 604800000,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10000,
            "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
            "transaction.state.log.num.partitions": 1,
        },
        logs=SimpleNamespace(
            topics={"t": SimpleNamespace(partitions=1), OFFSETS_TOPIC: SimpleNamespace(partitions=1)}
        ),
        spawn=asyncio.ensure_future,
        producer_ids=SimpleNamespace(allocate=lambda: next(ids)),
        groups=None,
    )
    coordinator = TransactionCoordinator(broker, marker_writer=lambda *m: markers.append(m), store=_Log())
    coordinator.start()
    try:
        pid, _ = coordinator.init_producer_id("tx", 60000)
        txn = coordinator.transactions["tx"]
        txn.producer_epoch = SHORT_MAX - 1  # as if many transactions had run
        coordinator.add_partitions("tx", pid, SHORT_MAX - 1, [("t", 0)])
        new_pid, new_epoch = coordinator.end_transaction_with_epoch_bump("tx", pid, SHORT_MAX - 1, True)
        assert (new_pid, new_epoch) == (501, 0) and txn.state == S.COMPLETE_COMMIT
        assert markers == [("t", 0, pid, SHORT_MAX, 0, True)]  # the marker at the last epoch, old id
        # a retry from the producer that has not seen the answer
        assert coordinator.end_transaction_with_epoch_bump("tx", pid, SHORT_MAX - 1, True) == (501, 0)
        with pytest.raises(KafkaError) as exc:
            coordinator.end_transaction_with_epoch_bump("tx", pid, SHORT_MAX - 1, False)
        assert exc.value.code == E.INVALID_TXN_STATE
        coordinator.add_partitions("tx", 501, 0, [("t", 0)])
        assert coordinator.end_transaction_with_epoch_bump("tx", 501, 0, False) == (501, 1)
    finally:
        coordinator.close()


# -- kafka-python's admin client at the new versions ------------------------------------------------


def test_kafka_python_admin_at_the_kafka_4_3_versions(minibroker):
    from kafka import KafkaAdminClient

    tid = f"kp-{uuid.uuid4().hex[:8]}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        _init(wire, tid)
    admin = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers, request_timeout_ms=10000)
    try:
        features = admin.describe_features()
        assert features["transaction.version"]["finalized"] == (2, 2)
        assert features["metadata.version"]["supported"] == (7, 30)
        (dirs,) = admin.describe_log_dirs()  # v5
        assert dirs["log_dirs"] and all(d["is_cordoned"] is False for d in dirs["log_dirs"])
        listed = admin.list_transactions(transactional_id_pattern=f"{tid}|nothing-else")  # v2
        assert [t.transactional_id for by_broker in listed.values() for t in by_broker] == [tid]
        group = f"nobody-{uuid.uuid4()}"
        described = admin.describe_groups([group])  # v6: the error, with its message
        assert described[group]["error"] == f"[Error 69] GroupIdNotFoundError: Group {group} not found."
    finally:
        admin.close()


def test_produce_v12_to_a_missing_partition_adds_nothing(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    tid = f"missing-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        pid, epoch = _init(wire, tid)
        records = _records(
            b"x", producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
        )
        r = wire.request(
            PRODUCE,
            12,
            {
                "transactional_id": tid,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [{"name": topic_name, "partition_data": [{"index": 5, "records": records}]}],
            },
        )
        assert r.responses[0].partition_responses[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        # nothing was added, so there is no transaction to commit
        assert _end(wire, tid, pid, epoch, True)[0] == E.INVALID_TXN_STATE
