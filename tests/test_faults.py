"""Faults on demand (minibroker/server/faults.py, issue 32): the rule model, each action over the wire, and
the recipes of docs/testing.md with real clients, asserted on what the application sees and on the rule's
match count."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import subprocess
import sys
import time

import pytest

from minibroker.errors import ErrorCode
from minibroker.server.faults import RuleError, loopback_only, parse_rule
from minibroker.testing import BrokerRunner
from minibroker.tools.faults_client import FaultApiError, FaultsHttp
from minibroker.tools.wire import WireClient

# -- the rule model ----------------------------------------------------------------------------------------


def test_rules_take_api_names_or_numbers_and_error_names_or_codes():
    rule = parse_rule({"api": ["produce", 1, "OffsetCommit"], "error": "not_leader_or_follower", "count": 3})
    assert rule.apis == {0, 1, 8} and rule.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert rule.action == "error"
    assert parse_rule({"api": "Fetch", "error": 1}).error is ErrorCode.OFFSET_OUT_OF_RANGE
    assert parse_rule({"delay_ms": 10}).action == "none"
    assert parse_rule({"drop": "after"}).action == "drop"
    assert parse_rule({"throttle_ms": 50}).action == "throttle"
    assert parse_rule({"api": "Produce", "versions": 9, "action": "stop_reading"}).versions == (9, 9)
    assert parse_rule({"api": "Produce", "error": 6, "count": 2}).to_json() == {
        "id": 0, "matched": 0, "held": 0, "action": "error", "api": ["Produce"], "count": 2,
        "error": "NOT_LEADER_OR_FOLLOWER"}


@pytest.mark.parametrize("spec, why", [
    ({"api": "Nope", "error": 6}, "unknown API"),
    ({"api": "Produce", "error": "NOT_AN_ERROR"}, "unknown error code"),
    ({"api": "Produce"}, "needs an action"),
    ({"api": "Produce", "error": 6, "colour": "red"}, "unknown rule keys"),
    ({"api": "Produce", "error": 6, "count": 0}, "count must be at least 1"),
    ({"api": "Produce", "error": 6, "probability": 1.5}, "probability"),
    ({"api": "Produce", "throttle_ms": 10, "after_handling": True}, "after_handling"),
    ({"action": "offline"}, "needs a topic"),
    ({"api": "Produce", "hold": True, "delay_ms": 5}, "not both"),
    ({"api": "Produce", "drop": "sideways"}, "drop is"),
    ({"api": "Produce", "error": 6, "bump_leader_epoch": True}, "names a topic"),
    ({"api": "Produce", "versions": [3, 1], "error": 6}, "versions"),
    ([1, 2], "JSON object"),
])
def test_a_bad_rule_is_refused_with_its_reason(spec, why):
    with pytest.raises(RuleError, match=why):
        parse_rule(spec)


def test_the_fixtures_enable_faults_on_loopback_only():
    from minibroker.pytest_plugin import with_faults

    assert with_faults({})["fault.injection.enable"] == "true"
    loopback = with_faults({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://[::1]:0"})
    assert loopback["fault.injection.enable"] == "true"
    assert "fault.injection.enable" not in with_faults({"listeners": "PLAINTEXT://0.0.0.0:0"})
    assert with_faults({"fault.injection.enable": "false"}) == {"fault.injection.enable": "false"}


def test_loopback_hosts():
    assert loopback_only(["127.0.0.1", "::1", "localhost", "127.0.0.2"])
    assert not loopback_only(["0.0.0.0"]) and not loopback_only([""]) and not loopback_only(["10.1.2.3"])


# -- the actions over the wire ---------------------------------------------------------------------------


def _wire(broker, timeout: float = 5.0) -> WireClient:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    return WireClient(host, int(port), timeout=timeout)


def _list_offsets(topic: str, partitions=(0,)) -> dict:
    return {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1} for p in partitions]}]}


def test_an_error_fails_only_the_matching_partitions_and_count_bounds_it(minibroker, topic_name):
    minibroker.create_topic(topic_name, 3)
    with minibroker.inject(api="ListOffsets", topic=topic_name, partition=1, error="KAFKA_STORAGE_ERROR",
                           count=2) as rule, _wire(minibroker) as wire:
        answers = [wire.request(2, 5, _list_offsets(topic_name, (0, 1, 2))) for _ in range(3)]
        assert rule.matched == 2
    codes = [sorted((p.partition_index, p.error_code) for t in a.topics for p in t.partitions)
             for a in answers]
    assert codes[0] == codes[1] == [(0, 0), (1, ErrorCode.KAFKA_STORAGE_ERROR), (2, 0)]
    assert codes[2] == [(0, 0), (1, 0), (2, 0)]  # the count is spent: answered as usual


def test_topics_named_by_id_match_by_name(minibroker, topic_name):
    minibroker.create_topic(topic_name, 2)
    minibroker.produce(topic_name, [b"x"], partition=0)
    with _wire(minibroker) as wire:
        topic_id = wire.request(3, 12, {"topics": [{"name": topic_name}]}).topics[0].topic_id
        fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                 "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                 "topics": [{"topic_id": topic_id, "partitions": [
                     {"partition": p, "fetch_offset": 0, "current_leader_epoch": -1, "log_start_offset": -1,
                      "partition_max_bytes": 1 << 20} for p in (0, 1)]}], "forgotten_topics_data": [],
                 "rack_id": ""}
        with minibroker.inject(api="Fetch", topic=topic_name, partition=1,
                               error="KAFKA_STORAGE_ERROR") as rule:
            answer = wire.request(1, 13, fetch)
            assert rule.matched == 1
    assert [t.topic_id for t in answer.responses] == [topic_id]
    codes = sorted((p.partition_index, p.error_code) for p in answer.responses[0].partitions)
    assert codes == [(0, 0), (1, ErrorCode.KAFKA_STORAGE_ERROR)]


def _session_fetch(topic: str, session_id: int, epoch: int, offsets: dict[int, int],
                   max_wait_ms: int = 0) -> dict:
    """A Fetch v12 body: a full one (epoch 0) or an incremental one naming ``offsets`` (partition: offset)."""
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "current_leader_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for p, offset in offsets.items()]}] if offsets else [],
            "forgotten_topics_data": [], "rack_id": ""}


def _fetched(answer) -> dict[int, tuple[int, int, bool]]:
    """partition: (error code, high watermark, records present) of a Fetch answer."""
    return {p.partition_index: (p.error_code, p.high_watermark, len(p.records or b"") > 0)
            for t in answer.responses for p in t.partitions}


def test_a_fetch_error_keeps_the_partition_in_the_fetch_session(minibroker, topic_name):
    minibroker.create_topic(topic_name, 2)
    minibroker.produce(topic_name, [b"a"], partition=0)
    minibroker.produce(topic_name, [b"b"], partition=1)
    with _wire(minibroker) as wire:
        with minibroker.inject(api="Fetch", topic=topic_name, partition=1, error="NOT_LEADER_OR_FOLLOWER",
                               count=1) as rule:
            full = wire.request(1, 12, _session_fetch(topic_name, 0, 0, {0: 0, 1: 0}))
            assert rule.matched == 1
        assert full.error_code == 0 and full.session_id != 0
        assert _fetched(full) == {0: (0, 1, True), 1: (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, False)}
        # the client asks again from the same offsets: an incremental fetch names no partition
        again = wire.request(1, 12, _session_fetch(topic_name, full.session_id, 1, {}))
    assert again.error_code == 0 and _fetched(again) == {0: (0, 1, True), 1: (0, 1, True)}


def test_a_fetch_rule_matches_the_partitions_of_an_incremental_fetch_session(minibroker, topic_name):
    minibroker.create_topic(topic_name, 2)
    minibroker.produce(topic_name, [b"a"], partition=0)
    minibroker.produce(topic_name, [b"b"], partition=1)
    with _wire(minibroker) as wire:
        full = wire.request(1, 12, _session_fetch(topic_name, 0, 0, {0: 1, 1: 1}))  # caught up
        assert _fetched(full) == {0: (0, 1, False), 1: (0, 1, False)}
        with minibroker.inject(api="Fetch", topic=topic_name, partition=1, error="KAFKA_STORAGE_ERROR",
                               count=1) as rule:
            # names no partition, and would wait 10 s for a record: the error answers it at once
            failed = wire.request(1, 12, _session_fetch(topic_name, full.session_id, 1, {},
                                                        max_wait_ms=10_000))
            assert rule.matched == 1
        assert _fetched(failed) == {1: (ErrorCode.KAFKA_STORAGE_ERROR, -1, False)}
        # told an error, the client hears of the partition again in the next answer
        healed = wire.request(1, 12, _session_fetch(topic_name, full.session_id, 2, {}))
    assert _fetched(healed) == {1: (0, 1, False)}


def test_kafka_python_consumes_on_after_a_fetch_error_on_one_partition(minibroker, topic_name):
    from kafka import KafkaConsumer, TopicPartition

    minibroker.create_topic(topic_name, 2)
    for partition in (0, 1):
        minibroker.produce(topic_name, [f"{partition}-{i}".encode() for i in range(3)], partition=partition)
    consumer = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=50, retry_backoff_ms=10)
    seen: list[bytes] = []
    try:
        # the consumer's first fetch (the one that opens its fetch session) fails on partition 1
        with minibroker.inject(api="Fetch", topic=topic_name, partition=1, error="NOT_LEADER_OR_FOLLOWER",
                               count=1) as rule:
            consumer.assign([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
            deadline = time.monotonic() + 15
            while len(seen) < 6 and time.monotonic() < deadline:
                seen += [r.value for records in consumer.poll(timeout_ms=200).values() for r in records]
            assert rule.matched == 1
    finally:
        consumer.close()
    assert sorted(seen) == [b"0-0", b"0-1", b"0-2", b"1-0", b"1-1", b"1-2"]


def test_a_top_level_error_and_a_client_id_filter(minibroker):
    body = {"key": "g-faults", "key_type": 0}
    with minibroker.inject(api="FindCoordinator", client_id="victim", error="COORDINATOR_NOT_AVAILABLE"):
        with _wire(minibroker) as other:
            assert other.request(10, 2, body).error_code == 0
        host, port = minibroker.bootstrap_servers.rsplit(":", 1)
        with WireClient(host, int(port), client_id="victim") as victim:
            assert victim.request(10, 2, body).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            v4 = victim.request(10, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
            assert [(c.key, c.error_code) for c in v4.coordinators] == [
                ("a", ErrorCode.COORDINATOR_NOT_AVAILABLE), ("b", ErrorCode.COORDINATOR_NOT_AVAILABLE)]


def test_metadata_errors_are_per_topic(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    metadata = {"topics": [{"name": topic_name}], "allow_auto_topic_creation": False}
    with minibroker.inject(api="Metadata", topic=topic_name, error="LEADER_NOT_AVAILABLE", count=1) as rule:
        with _wire(minibroker) as wire:
            failed, served = wire.request(3, 9, metadata), wire.request(3, 9, metadata)
        assert rule.matched == 1
    assert [(t.name, t.error_code, t.partitions) for t in failed.topics] == [
        (topic_name, ErrorCode.LEADER_NOT_AVAILABLE, [])]
    assert served.topics[0].error_code == 0 and len(served.topics[0].partitions) == 1


@pytest.mark.parametrize("version, request_body", [(0, {"topics": []}), (9, {"topics": None})],
                         ids=["v0-empty-list", "v9-null"])
def test_a_metadata_request_for_every_topic_names_the_rules_topic(minibroker, topic_name, version,
                                                                  request_body):
    minibroker.create_topic(topic_name, 2)

    def mine(answer):
        return next(t for t in answer.topics if t.name == topic_name)

    with _wire(minibroker) as wire:
        with minibroker.inject(api="Metadata", topic=topic_name, error="LEADER_NOT_AVAILABLE",
                               count=1) as rule:
            failed = mine(wire.request(3, version, request_body))
            assert rule.matched == 1
        assert (failed.error_code, failed.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
        with minibroker.inject(action="offline", topic=topic_name, partition=1) as rule:
            offline = mine(wire.request(3, version, request_body))
            assert rule.matched == 1
    states = {p.partition_index: (p.error_code, p.leader_id) for p in offline.partitions}
    assert states[1] == (ErrorCode.LEADER_NOT_AVAILABLE, -1) and states[0][0] == 0 and states[0][1] >= 0


def test_hold_until_released(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="ListOffsets", topic=topic_name, hold=True) as rule, _wire(minibroker) as wire:
        wire.send(2, 5, _list_offsets(topic_name))
        rule.wait_until_matched(1)
        assert rule.rule["held"] == 1
        wire.sock.settimeout(0.2)
        with pytest.raises(TimeoutError):  # held: nothing comes back
            wire.sock.recv(1, socket.MSG_PEEK)
        assert rule.release() == 1
        wire.sock.settimeout(5)
        assert wire.sock.recv(1, socket.MSG_PEEK)  # the answer arrives once released


@pytest.mark.parametrize("how", ["remove", "clear"])
def test_removing_a_rule_releases_what_it_holds(minibroker, topic_name, how):
    minibroker.create_topic(topic_name)
    rule = minibroker.inject(api="ListOffsets", topic=topic_name, hold=True)
    with _wire(minibroker) as wire:
        wire.send(2, 5, _list_offsets(topic_name))
        rule.wait_until_matched(1)
        if how == "remove":
            rule.remove()
        else:
            assert minibroker.faults().clear() == 1
        wire.sock.settimeout(5)
        assert wire.sock.recv(1, socket.MSG_PEEK)  # answered: the rule it waited for is gone


def test_a_rule_that_fails_closes_its_connection_and_the_broker_serves_on(minibroker_factory, topic_name,
                                                                           monkeypatch):
    broker = minibroker_factory()
    broker.create_topic(topic_name)

    def broken(*args):
        raise RuntimeError("a broken rule")

    monkeypatch.setattr(broker.broker.faults, "handler_for", broken)
    with broker.inject(api="ListOffsets", topic=topic_name, error="KAFKA_STORAGE_ERROR"):
        with _wire(broker, timeout=5) as wire, pytest.raises(OSError, match="closed by broker"):
            wire.request(2, 5, _list_offsets(topic_name))
        monkeypatch.undo()
        with _wire(broker) as wire:  # a new connection is served (by the rule, now whole again)
            answer = wire.request(2, 5, _list_offsets(topic_name))
            assert answer.topics[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "ListOffsets v5 handler failed; closing" in broker.log_text()


def test_drop_before_and_after_handling(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    record = minibroker.produce  # our own client: no retries of its own to hide the drop
    with minibroker.inject(api="Produce", topic=topic_name, drop="before", count=1) as rule:
        with pytest.raises(Exception):  # noqa: B017 - the client reports the lost connection its own way
            record(topic_name, [b"lost"], timeout=5)
        assert rule.matched == 1
    assert minibroker.consume(topic_name, 1, timeout=0.5) == []  # dropped before: never written
    with minibroker.inject(api="Produce", topic=topic_name, drop="after", count=1) as rule:
        with pytest.raises(Exception):  # noqa: B017
            record(topic_name, [b"written"], timeout=5)
        assert rule.matched == 1
    # written, never answered
    assert [r.value for r in minibroker.consume(topic_name, 1, timeout=5)] == [b"written"]


def test_stop_reading_and_throttle(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="ListOffsets", topic=topic_name, action="stop_reading") as rule:
        with _wire(minibroker, timeout=0.5) as wire, pytest.raises(TimeoutError, match="no answer"):
            wire.request(2, 5, _list_offsets(topic_name))
        assert rule.matched == 1
    with (minibroker.inject(api="ListOffsets", topic=topic_name, throttle_ms=30_000) as rule,
          _wire(minibroker) as wire):
        answer = wire.request(2, 5, _list_offsets(topic_name))
        assert answer.throttle_time_ms == 30_000 and answer.topics[0].partitions[0].error_code == 0
        assert rule.matched == 1
        if minibroker.broker is not None:  # in-process: the connection is muted, as a quota mutes it
            port = wire.sock.getsockname()[1]
            assert [c.throttled for c in list(minibroker.broker.connections) if c.peer[1] == port] == [True]


def test_a_stalled_connection_holds_no_request_queue_slots(minibroker_factory, topic_name):
    from minibroker.protocol import codec

    broker = minibroker_factory({"queued.max.requests": "2"})
    broker.create_topic(topic_name)
    with broker.inject(api="ListOffsets", client_id="stalled", action="stop_reading") as rule, \
            _wire(broker) as stalled, _wire(broker) as other:
        # three requests in one write: the first stalls the connection, two were read behind it
        stalled.sock.sendall(b"".join(codec.encode_request(2, 5, n, _list_offsets(topic_name), "stalled")
                                      for n in (1, 2, 3)))
        rule.wait_until_matched(1)
        # queued, those two would hold both slots of queued.max.requests and no one else would be served
        assert other.request(3, 9, {"topics": [{"name": topic_name}]}).topics[0].error_code == 0
        assert rule.matched == 1


def test_a_bumped_leader_epoch_and_an_offline_partition_show_in_metadata(minibroker, topic_name):
    minibroker.create_topic(topic_name, 2)
    metadata = {"topics": [{"name": topic_name}], "allow_auto_topic_creation": False}

    def partitions(wire):
        return sorted((p.partition_index, p.error_code, p.leader_id, p.leader_epoch)
                      for p in wire.request(3, 9, metadata).topics[0].partitions)

    with _wire(minibroker) as wire:
        before = partitions(wire)
        with minibroker.inject(api="ListOffsets", topic=topic_name, partition=1, error="FENCED_LEADER_EPOCH",
                               bump_leader_epoch=True, count=1) as rule:
            failed = wire.request(2, 5, _list_offsets(topic_name, (1,)))
            assert failed.topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
            assert rule.matched == 1
        (_, _, leader, epoch0), (_, _, _, epoch1) = before
        assert partitions(wire) == [(0, 0, leader, epoch0), (1, 0, leader, epoch1 + 1)]
        # a client naming the new epoch is served; the old one is fenced, as after a real election
        bumped = _list_offsets(topic_name, (1,))
        bumped["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch1 + 1
        assert wire.request(2, 5, bumped).topics[0].partitions[0].error_code == 0
        bumped["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch1
        assert wire.request(2, 5, bumped).topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
        with minibroker.inject(action="offline", topic=topic_name, partition=0, lasts_ms=60_000):
            assert partitions(wire)[0] == (0, ErrorCode.LEADER_NOT_AVAILABLE, -1, epoch0)
            answer = wire.request(2, 5, _list_offsets(topic_name, (0, 1)))
            codes = sorted((p.partition_index, p.error_code) for p in answer.topics[0].partitions)
            assert codes == [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER), (1, 0)]
        assert partitions(wire)[0] == (0, 0, leader, epoch0)

def test_offset_for_leader_epoch_answers_for_a_bumped_epoch(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"a", b"b", b"c"])

    def end_offsets(wire, *epochs):  # one request per epoch: a request names a partition once
        answers = []
        for epoch in epochs:
            request = {"replica_id": -1, "topics": [{"topic": topic_name, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}]}]}
            (p,) = wire.request(23, 4, request).topics[0].partitions
            answers.append((p.error_code, p.leader_epoch, p.end_offset))
        return answers

    with _wire(minibroker) as wire:
        assert end_offsets(wire, 0, 1) == [(0, 0, 3), (0, -1, -1)]
        with minibroker.inject(api="ListOffsets", topic=topic_name, error="NOT_LEADER_OR_FOLLOWER",
                               bump_leader_epoch=True, count=1):
            wire.request(2, 5, _list_offsets(topic_name))
        minibroker.produce(topic_name, [b"d", b"e"])
        # epoch 0 ends where the bump happened; the current epoch 1 at the log end
        assert end_offsets(wire, 0, 1, 2) == [(0, 0, 3), (0, 1, 5), (0, -1, -1)]
        with minibroker.inject(api="ListOffsets", topic=topic_name, error="FENCED_LEADER_EPOCH",
                               bump_leader_epoch=True, count=1):
            wire.request(2, 5, _list_offsets(topic_name))
        assert end_offsets(wire, 0, 1, 2) == [(0, 0, 3), (0, 1, 5), (0, 2, 5)]

def test_confluent_consumer_validates_its_position_through_leader_epoch_bumps(minibroker, topic_name):
    """librdkafka (KIP-320) validates its position with OffsetForLeaderEpoch when Metadata shows a newer
    epoch, naming the epoch of the last batch it read. The batches written after a bump carry the new
    epoch, so the second validation (epoch 1, at offset 5) finds epoch 1 ending at the log end: no
    truncation. With batches left at epoch 0 it asked for epoch 0, was told that ended at 3, and read
    d and e again (the overlay this replaced)."""
    from confluent_kafka import Consumer, TopicPartition

    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"a", b"b", b"c"])
    consumer = Consumer({"bootstrap.servers": minibroker.bootstrap_servers, "group.id": topic_name,
                         "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500,
                         "fetch.wait.max.ms": 50, "retry.backoff.ms": 10, "auto.offset.reset": "earliest"})
    seen, errors = [], []

    def read_until(count: int, deadline_s: float = 15) -> None:
        deadline = time.monotonic() + deadline_s
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                errors.append(message.error())
            else:
                seen.append((message.value(), message.leader_epoch()))

    validations = minibroker.inject(api="OffsetForLeaderEpoch", topic=topic_name, delay_ms=1)
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        read_until(3)
        for bump, more in enumerate(([b"d", b"e"], [b"f"]), start=1):
            with minibroker.inject(api="Fetch", topic=topic_name, error="NOT_LEADER_OR_FOLLOWER",
                                   bump_leader_epoch=True, count=1) as rule:
                # a Fetch already waiting at the broker is answered without the rule: poll until one meets it
                deadline = time.monotonic() + 15
                while not rule.matched and time.monotonic() < deadline:
                    read_until(len(seen) + 1, deadline_s=0.3)
                assert rule.matched == 1
            validations.wait_until_matched(bump, timeout=15)
            minibroker.produce(topic_name, more)
            read_until(len(seen) + len(more))
        read_until(len(seen) + 1, deadline_s=1.5)  # anything read twice would come now
    finally:
        consumer.close()
        validations.remove()
    assert errors == []
    assert seen == [(b"a", 0), (b"b", 0), (b"c", 0), (b"d", 1), (b"e", 1), (b"f", 2)]
    assert validations.matched == 2  # one OffsetForLeaderEpoch per bump, each answered "no truncation"


def test_an_expired_window_stops_matching(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="ListOffsets", topic=topic_name, error="KAFKA_STORAGE_ERROR",
                           lasts_ms=1) as rule:
        time.sleep(0.05)
        with _wire(minibroker) as wire:
            assert wire.request(2, 5, _list_offsets(topic_name)).topics[0].partitions[0].error_code == 0
        assert rule.matched == 0


# -- recipes (docs/testing.md, "Faults on demand") ----------------------------------------------------------


def test_recipe_idempotent_producer_retries_not_leader_and_writes_once(minibroker, topic_name):
    from kafka import KafkaProducer

    minibroker.create_topic(topic_name)
    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, enable_idempotence=True,
                             retry_backoff_ms=10)
    try:
        with minibroker.inject(api="Produce", topic=topic_name, error="NOT_LEADER_OR_FOLLOWER",
                               count=3) as rule:
            sent = producer.send(topic_name, b"once").get(timeout=10)
            assert rule.matched == 3
    finally:
        producer.close()
    assert sent.offset == 0
    assert [r.value for r in minibroker.consume(topic_name, 2, timeout=1)] == [b"once"]


def test_recipe_producer_without_idempotence_writes_twice_after_a_timed_out_answer(minibroker, topic_name):
    from kafka import KafkaProducer

    minibroker.create_topic(topic_name)
    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, enable_idempotence=False, acks=1,
                             retry_backoff_ms=10)
    try:
        with minibroker.inject(api="Produce", topic=topic_name, error="REQUEST_TIMED_OUT",
                               after_handling=True, count=1) as rule:
            sent = producer.send(topic_name, b"twice").get(timeout=10)
            assert rule.matched == 1
    finally:
        producer.close()
    assert sent.offset == 1  # the retry's offset: the first attempt was written, then answered with an error
    assert [r.value for r in minibroker.consume(topic_name, 3, timeout=1)] == [b"twice", b"twice"]


def test_recipe_aiokafka_consumer_survives_a_coordinator_move_mid_commit(minibroker, topic_name):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"a", b"b", b"c"])
    group = f"{topic_name}-group"

    async def consume_and_commit() -> int:
        consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=minibroker.bootstrap_servers,
                                    group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                    retry_backoff_ms=10)
        await consumer.start()
        try:
            seen = []
            while len(seen) < 3:
                batch = await consumer.getmany(timeout_ms=1000)
                seen += [r.value for records in batch.values() for r in records]
            assert seen == [b"a", b"b", b"c"]
            with minibroker.inject(api="OffsetCommit", group=group, error="NOT_COORDINATOR", count=2) as rule:
                await consumer.commit()
                assert rule.matched == 2
            return await consumer.committed(TopicPartition(topic_name, 0))
        finally:
            await consumer.stop()

    assert asyncio.run(consume_and_commit()) == 3


def test_recipe_confluent_transaction_aborted_by_invalid_producer_epoch(minibroker, topic_name):
    from confluent_kafka import Consumer, KafkaException, Producer

    minibroker.create_topic(topic_name)
    settings = {"bootstrap.servers": minibroker.bootstrap_servers, "transactional.id": topic_name,
                "linger.ms": 0}
    producer = Producer(settings)
    producer.init_transactions(10)
    producer.begin_transaction()
    with minibroker.inject(api="Produce", topic=topic_name, error="INVALID_PRODUCER_EPOCH", count=1) as rule:
        producer.produce(topic_name, b"doomed")
        with pytest.raises(KafkaException) as failed:
            producer.commit_transaction(10)
        assert rule.matched == 1
    error = failed.value.args[0]
    # librdkafka takes INVALID_PRODUCER_EPOCH on a produce as being fenced: fatal, so the application
    # starts a new producer with the same transactional id, whose init_transactions aborts the old one
    assert error.fatal() and error.code() == -144  # _FENCED
    producer = Producer(settings)
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic_name, b"kept")
    producer.commit_transaction(10)
    consumer = Consumer({"bootstrap.servers": minibroker.bootstrap_servers, "group.id": topic_name,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    try:
        seen = []
        deadline = time.monotonic() + 10
        while b"kept" not in seen and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value())
    finally:
        consumer.close()
    assert seen == [b"kept"]


@pytest.mark.parametrize("reset, expected", [("earliest", [0, 1, 2, 3]), ("latest", [4])])
def test_recipe_consumer_resets_on_offset_out_of_range(minibroker, topic_name, reset, expected):
    from kafka import KafkaConsumer, TopicPartition

    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"0", b"1", b"2", b"3"])
    tp = TopicPartition(topic_name, 0)
    consumer = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, auto_offset_reset=reset,
                             enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 2)
        with minibroker.inject(api="Fetch", topic=topic_name, error="OFFSET_OUT_OF_RANGE", count=1) as rule:
            seen: list[int] = []
            deadline = time.monotonic() + 10
            produced = False
            while len(seen) < len(expected) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    seen += [r.offset for r in records]
                if rule.matched and not produced and consumer.position(tp) == 4:  # reset to the end: one more
                    minibroker.produce(topic_name, [b"4"])
                    produced = True
            assert rule.matched == 1
    finally:
        consumer.close()
    assert seen == expected


@pytest.mark.parametrize("client", ["aiokafka", "confluent-kafka"])
def test_other_consumers_on_offset_out_of_range(minibroker, topic_name, client):
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"0", b"1", b"2", b"3"])
    with minibroker.inject(api="Fetch", topic=topic_name, error="OFFSET_OUT_OF_RANGE", count=1) as rule:
        if client == "aiokafka":
            from aiokafka import AIOKafkaConsumer, TopicPartition

            async def read() -> list[int]:
                consumer = AIOKafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers,
                                            auto_offset_reset="earliest", enable_auto_commit=False)
                await consumer.start()
                try:
                    tp = TopicPartition(topic_name, 0)
                    consumer.assign([tp])
                    consumer.seek(tp, 2)
                    seen: list[int] = []
                    while len(seen) < 4:
                        batch = await consumer.getmany(timeout_ms=500)
                        seen += [r.offset for records in batch.values() for r in records]
                    return seen
                finally:
                    await consumer.stop()

            seen = asyncio.run(asyncio.wait_for(read(), 15))
        else:
            from confluent_kafka import Consumer, TopicPartition

            consumer = Consumer({"bootstrap.servers": minibroker.bootstrap_servers, "group.id": topic_name,
                                 "auto.offset.reset": "earliest", "enable.auto.commit": False})
            try:
                consumer.assign([TopicPartition(topic_name, 0, 2)])
                seen = []
                deadline = time.monotonic() + 15
                while len(seen) < 4 and time.monotonic() < deadline:
                    message = consumer.poll(0.2)
                    if message is not None and message.error() is None:
                        seen.append(message.offset())
            finally:
                consumer.close()
        assert rule.matched == 1
    assert seen == [0, 1, 2, 3]  # told its offset 2 is out of range, it starts again from the first


def test_recipe_a_stalled_broker_and_the_clients_request_timeout(minibroker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    minibroker.create_topic(topic_name)
    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, request_timeout_ms=500,
                             delivery_timeout_ms=1000, enable_idempotence=False, acks=1, retries=0)
    try:
        producer.partitions_for(topic_name)  # metadata first: the stall is on the produce alone
        with minibroker.inject(api="Produce", topic=topic_name, delay_ms=5000) as rule:
            began = time.monotonic()
            with pytest.raises(KafkaError):
                producer.send(topic_name, b"late").get(timeout=10)
            waited = time.monotonic() - began
            assert rule.matched == 1
    finally:
        producer.close(timeout=1)
    assert waited < 5  # the client's own timeout fired, not the broker's answer


def test_recipe_full_disk_on_one_partition_while_others_keep_working(minibroker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    minibroker.create_topic(topic_name, 2)
    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, retries=0, acks=1,
                             enable_idempotence=False)
    try:
        with minibroker.inject(topic=topic_name, partition=1, error="KAFKA_STORAGE_ERROR") as rule:
            assert producer.send(topic_name, b"fine", partition=0).get(timeout=10).offset == 0
            with pytest.raises(KafkaStorageError):
                producer.send(topic_name, b"full", partition=1).get(timeout=10)
            assert rule.matched == 1
            assert producer.send(topic_name, b"fine again", partition=0).get(timeout=10).offset == 1
        assert producer.send(topic_name, b"room again", partition=1).get(timeout=10).offset == 0
    finally:
        producer.close()


def _aiokafka_send(bootstrap: str, topic: str, value: bytes, **settings) -> int:
    """Produce ``value`` with an aiokafka producer made with ``settings``; the offset it reports."""
    from aiokafka import AIOKafkaProducer

    async def send() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
        await producer.start()
        try:
            return (await producer.send_and_wait(topic, value)).offset
        finally:
            await producer.stop()

    return asyncio.run(send())


def _send_one(client: str, bootstrap: str, topic: str, value: bytes) -> int:
    """Produce ``value`` with ``client``'s idempotent producer (its own retries); the offset it reports."""
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, retry_backoff_ms=10)
        try:
            return producer.send(topic, value).get(timeout=20).offset
        finally:
            producer.close()
    if client == "aiokafka":
        return _aiokafka_send(bootstrap, topic, value, enable_idempotence=True, retry_backoff_ms=10)
    from confluent_kafka import Producer

    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "retry.backoff.ms": 10,
                         "linger.ms": 0})
    producer.produce(topic, value, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(20) == 0
    assert reports[0][0] is None, reports
    return reports[0][1]


# Every client through every fault: the full suite; the inner loop keeps the single-client recipes above
@pytest.mark.slow
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-kafka"])
@pytest.mark.parametrize("rule", [
    {"error": "NOT_LEADER_OR_FOLLOWER", "count": 2},
    {"error": "REQUEST_TIMED_OUT", "after_handling": True, "count": 1},
    {"drop": "before", "count": 1},
    {"drop": "after", "count": 1},
    {"delay_ms": 50, "count": 1},
    {"throttle_ms": 50, "count": 1},
], ids=["not-leader", "timed-out-after-write", "drop-before", "drop-after", "delay", "throttle"])
def test_each_clients_idempotent_producer_writes_once_through_each_fault(minibroker, topic_name, client,
                                                                          rule):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="Produce", topic=topic_name, **rule) as handle:
        offset = _send_one(client, minibroker.bootstrap_servers, topic_name, b"only-once")
        assert handle.matched == rule["count"]
    assert offset == 0
    assert [r.value for r in minibroker.consume(topic_name, 2, timeout=1)] == [b"only-once"]


def _send_within(client: str, bootstrap: str, topic: str, value: bytes, timeout_ms: int) -> int:
    """Produce ``value`` with ``client``'s plain producer, giving up after about ``timeout_ms`` (its own
    request and delivery timeouts, no retries); the offset it reports, or the client's own error."""
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms,
                                 delivery_timeout_ms=timeout_ms * 2, retries=0, acks=1,
                                 enable_idempotence=False, retry_backoff_ms=10)
        try:
            return producer.send(topic, value).get(timeout=timeout_ms / 1000 * 4 + 5).offset
        finally:
            producer.close(timeout=1)
    if client == "aiokafka":
        return _aiokafka_send(bootstrap, topic, value, request_timeout_ms=timeout_ms, acks=1,
                              enable_idempotence=False, retry_backoff_ms=10)
    from confluent_kafka import KafkaException, Producer

    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "request.timeout.ms": timeout_ms,
                         "message.timeout.ms": timeout_ms * 2, "retries": 0, "acks": 1,
                         "enable.idempotence": False, "linger.ms": 0, "retry.backoff.ms": 10})
    producer.produce(topic, value, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    producer.flush(timeout_ms / 1000 * 4 + 5)
    assert len(reports) == 1, "no delivery report"
    if reports[0][0] is not None:
        raise KafkaException(reports[0][0])
    return reports[0][1]


def _client_error(client: str) -> type[Exception]:
    """The base class of the errors ``client`` reports for a failed send."""
    if client == "kafka-python":
        from kafka.errors import KafkaError
        return KafkaError
    if client == "aiokafka":
        from aiokafka.errors import KafkaError
        return KafkaError
    from confluent_kafka import KafkaException
    return KafkaException


CLIENTS = ["kafka-python", "aiokafka", "confluent-kafka"]


@pytest.mark.parametrize("client", CLIENTS)
def test_each_clients_held_produce_completes_once_released(minibroker, topic_name, client):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="Produce", topic=topic_name, hold=True) as rule, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        sent = pool.submit(_send_within, client, minibroker.bootstrap_servers, topic_name, b"held", 20_000)
        rule.wait_until_matched(1, timeout=15)
        assert not sent.done()  # held: no answer yet
        assert rule.release() == 1
        assert sent.result(timeout=20) == 0
    assert [r.value for r in minibroker.consume(topic_name, 2, timeout=1)] == [b"held"]


@pytest.mark.slow  # each client's request timeout must pass
@pytest.mark.parametrize("client", CLIENTS)
def test_each_clients_request_timeout_against_a_delay(minibroker, topic_name, client):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="Produce", topic=topic_name, delay_ms=200, count=1) as rule:
        assert _send_within(client, minibroker.bootstrap_servers, topic_name, b"slow", 5_000) == 0
        assert rule.matched == 1
    with minibroker.inject(api="Produce", topic=topic_name, delay_ms=8_000) as rule:
        began = time.monotonic()
        with pytest.raises(_client_error(client)):
            _send_within(client, minibroker.bootstrap_servers, topic_name, b"late", 500)
        assert time.monotonic() - began < 8  # the client's own timeout fired, not the broker's answer
        assert rule.matched >= 1


@pytest.mark.slow  # each client's request timeout must pass
@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_times_out_on_a_broker_that_stops_reading_and_recovers(minibroker, topic_name, client):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="Produce", topic=topic_name, action="stop_reading") as rule:
        with pytest.raises(_client_error(client)):
            _send_within(client, minibroker.bootstrap_servers, topic_name, b"unread", 500)
        assert rule.matched >= 1
    assert _send_within(client, minibroker.bootstrap_servers, topic_name, b"read", 5_000) >= 0
    assert b"read" in [r.value for r in minibroker.consume(topic_name, 3, timeout=1)]


def _throttle_seen_ms(client: str, bootstrap: str, topic: str) -> float:
    """Send one record with ``client`` and return the largest broker throttle it reported to the
    application: kafka-python's ``throttle-time-max`` metric, confluent-kafka's ``throttle_cb``."""
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False)
        try:
            producer.send(topic, b"throttled").get(timeout=20)
            return max(value for group in producer.metrics().values() for name, value in group.items()
                       if name == "throttle-time-max" and isinstance(value, (int, float)))
        finally:
            producer.close(timeout=1)
    from confluent_kafka import Producer

    throttles = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time * 1000)})
    producer.produce(topic, b"throttled")
    assert producer.flush(20) == 0
    producer.poll(0)  # the callback runs from poll
    return max(throttles, default=0)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])  # aiokafka reports no throttle
def test_clients_report_the_throttle_time_the_broker_answered(minibroker, topic_name, client):
    minibroker.create_topic(topic_name)
    with minibroker.inject(api="Produce", topic=topic_name, throttle_ms=1_500, count=1) as rule:
        assert _throttle_seen_ms(client, minibroker.bootstrap_servers, topic_name) == pytest.approx(1_500)
        assert rule.matched == 1
    assert [r.value for r in minibroker.consume(topic_name, 2, timeout=1)] == [b"throttled"]


# -- the HTTP API, the CLI, the process fixture, the guard ------------------------------------------------


@pytest.fixture
def http_broker(minibroker_factory):
    return minibroker_factory({"metrics.port": "0"})


def test_a_rule_set_by_the_cli_in_a_second_process_takes_effect_on_the_next_request(http_broker, topic_name):
    http_broker.create_topic(topic_name)
    url = http_broker.metrics_url

    def cli(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "minibroker", "inject", "--url", url, *args],
                              capture_output=True, text=True, timeout=30)

    added = cli("add", "--api", "ListOffsets", "--topic", topic_name, "--error", "KAFKA_STORAGE_ERROR")
    assert added.returncode == 0, added.stderr
    rule = json.loads(added.stdout)
    with _wire(http_broker) as wire:  # the next request sees it
        assert wire.request(2, 5, _list_offsets(topic_name)).topics[0].partitions[0].error_code == (
            ErrorCode.KAFKA_STORAGE_ERROR)
        listed = cli("list")
        assert [r["matched"] for r in json.loads(listed.stdout)] == [1]
        assert cli("remove", str(rule["id"])).returncode == 0
        assert wire.request(2, 5, _list_offsets(topic_name)).topics[0].partitions[0].error_code == 0
    refused = cli("add", "--api", "ListOffsets", "--error", "NO_SUCH_ERROR")
    assert refused.returncode == 1 and "unknown error code" in refused.stderr


def test_http_api_answers(http_broker):
    api = FaultsHttp(http_broker.metrics_url)
    assert api.rules() == []
    rule = api.add({"api": "Heartbeat", "error": "REBALANCE_IN_PROGRESS"})
    assert api.get(rule["id"])["error"] == "REBALANCE_IN_PROGRESS"
    with pytest.raises(FaultApiError, match="400: unknown rule keys"):
        api.add({"api": "Heartbeat", "eror": 27})
    assert api.release() == 0 and api.clear() == 1 and api.get(rule["id"]) is None


def _http_exchange(url: str, raw: bytes, timeout: float = 15) -> bytes:
    """Send ``raw`` to the HTTP server at ``url``; everything it answers until it closes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _post(path: str, body: bytes, content_type: str | None) -> bytes:
    headers = f"Content-Type: {content_type}\r\n" if content_type is not None else ""
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_http_api_takes_rules_only_as_json(http_broker, content_type):
    # what a web page may POST across origins without a CORS preflight: refused, no rule added
    rule = json.dumps({"api": "Heartbeat", "error": "REBALANCE_IN_PROGRESS"}).encode()
    answer = _http_exchange(http_broker.metrics_url, _post("/faults/rules", rule, content_type))
    assert answer.startswith(b"HTTP/1.1 415 ")
    release = _http_exchange(http_broker.metrics_url, _post("/faults/release", b"", content_type))
    assert release.startswith(b"HTTP/1.1 415 ")
    assert FaultsHttp(http_broker.metrics_url).rules() == []
    added = _http_exchange(http_broker.metrics_url, _post("/faults/rules", rule,
                                                          "Application/JSON; charset=utf-8"))
    assert added.startswith(b"HTTP/1.1 201 ")
    assert FaultsHttp(http_broker.metrics_url).clear() == 1


def test_http_api_gives_up_on_a_body_that_never_comes(minibroker_factory, monkeypatch):
    monkeypatch.setattr("minibroker.server.metrics_http.HEAD_TIMEOUT", 0.5)
    broker = minibroker_factory({"metrics.port": "0"})
    head = (b"POST /faults/rules HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{")
    assert _http_exchange(broker.metrics_url, head) == b""  # closed unanswered, not held open
    assert FaultsHttp(broker.metrics_url).rules() == []


def test_process_mode_fixture_injects_over_http(minibroker_factory, topic_name):
    broker = minibroker_factory(mode="process")
    broker.create_topic(topic_name)
    with broker.inject(api="ListOffsets", topic=topic_name, error="KAFKA_STORAGE_ERROR", count=1) as rule:
        with _wire(broker) as wire:
            assert wire.request(2, 5, _list_offsets(topic_name)).topics[0].partitions[0].error_code == (
                ErrorCode.KAFKA_STORAGE_ERROR)
        assert rule.wait_until_matched(1, timeout=5) == 1
    assert rule.matched == 1 and rule.rule["id"] == rule.id
    with broker.inject(api="ListOffsets", topic=topic_name, hold=True) as held, _wire(broker) as wire:
        wire.send(2, 5, _list_offsets(topic_name))
        held.wait_until_matched(1)
        assert held.rule["held"] == 1 and held.release() == 1
        wire.sock.settimeout(5)
        assert wire.sock.recv(1, socket.MSG_PEEK)  # answered once released


def test_fault_injection_is_off_unless_enabled_and_refused_beyond_loopback(tmp_path):
    with BrokerRunner({"metrics.port": "0"}) as plain:
        with pytest.raises(RuntimeError, match="fault.injection.enable"):
            plain.inject(api="Produce", error=6)
        with pytest.raises(FaultApiError, match="fault.injection.enable"):
            FaultsHttp(plain.metrics_url).add({"api": "Produce", "error": 6})
    from minibroker.config import ConfigError

    exposed = BrokerRunner({"fault.injection.enable": "true"}, host="0.0.0.0")
    try:
        with pytest.raises(ConfigError, match="fault.injection.allow.remote"):
            exposed.start()
    finally:
        exposed.cleanup()
    allowed = BrokerRunner({"fault.injection.enable": "true", "fault.injection.allow.remote": "true"},
                           host="0.0.0.0")
    with allowed:
        assert "reachable beyond loopback" in allowed.log_text()


# -- random faults never corrupt what was acknowledged -----------------------------------------------------

_RETRIABLE = ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT", "KAFKA_STORAGE_ERROR", "NOT_ENOUGH_REPLICAS",
              "LEADER_NOT_AVAILABLE"]
_COORDINATOR = ["NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"]


def _random_rule():
    from hypothesis import strategies as st

    # always a count: a rule that never stops would only test the clients' patience
    window = st.fixed_dictionaries({"count": st.integers(1, 3)},
                                   optional={"probability": st.sampled_from([0.3, 0.7, 1.0])})
    produce_error = st.fixed_dictionaries({"api": st.just("Produce"), "error": st.sampled_from(_RETRIABLE),
                                           "after_handling": st.booleans()})
    commit_error = st.fixed_dictionaries({"api": st.sampled_from(["OffsetCommit", "OffsetFetch",
                                                                  "FindCoordinator"]),
                                          "error": st.sampled_from(_COORDINATOR)})
    fetch_error = st.fixed_dictionaries({"api": st.sampled_from(["Fetch", "ListOffsets", "Metadata"]),
                                         "error": st.sampled_from(["NOT_LEADER_OR_FOLLOWER",
                                                                   "UNKNOWN_TOPIC_OR_PARTITION"])})
    other = st.one_of(
        st.fixed_dictionaries({"api": st.sampled_from(["Produce", "Fetch", "OffsetCommit", "Metadata"]),
                               "delay_ms": st.integers(1, 150)}),
        st.fixed_dictionaries({"api": st.sampled_from(["Produce", "Fetch", "OffsetCommit"]),
                               "drop": st.sampled_from(["before", "after"])}),
        st.fixed_dictionaries({"api": st.sampled_from(["Produce", "Fetch"]),
                               "throttle_ms": st.integers(1, 150)}))
    return st.tuples(st.one_of(produce_error, commit_error, fetch_error, other), window).map(
        lambda pair: {**pair[0], **pair[1]})


@pytest.mark.slow
def test_random_faults_never_corrupt_acknowledged_records_or_committed_offsets(minibroker):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    rounds = iter(range(1000))

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(rules=st.lists(_random_rule(), min_size=1, max_size=3))
    def run(rules):
        topic = f"faults-random-{next(rounds)}"
        minibroker.create_topic(topic, 2)
        # scoped to this example's topic, or group (the coordinator APIs name no topic)
        coordinated = ("FindCoordinator", "OffsetFetch", "OffsetCommit")
        handles = [minibroker.inject(**r, **({"group": topic} if r["api"] in coordinated
                                             else {"topic": topic})) for r in rules]
        acked: dict[bytes, tuple[int, int]] = {}
        commits_tried: list[int] = []
        last_committed = None
        producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, retry_backoff_ms=5,
                                 request_timeout_ms=1000, delivery_timeout_ms=4000, linger_ms=0)
        consumer = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, group_id=topic,
                                 enable_auto_commit=False, request_timeout_ms=1000, retry_backoff_ms=5)
        tp = TopicPartition(topic, 0)
        try:
            futures = [(f"v{i}".encode(), producer.send(topic, f"v{i}".encode(), partition=i % 2))
                       for i in range(20)]
            for value, future in futures:
                try:
                    sent = future.get(timeout=6)
                    acked[value] = (sent.partition, sent.offset)
                except Exception:  # noqa: BLE001 - a failed send is the client's business: not acknowledged
                    pass
            for offset in (1, 3, 5):
                commits_tried.append(offset)
                try:
                    consumer.commit({tp: OffsetAndMetadata(offset, "", -1)}, timeout_ms=5000)
                    last_committed = offset
                except Exception:  # noqa: BLE001 - a failed commit may or may not have been written
                    pass
        finally:
            for handle in handles:
                handle.remove()
            producer.close(timeout=2)
        try:
            committed = consumer.committed(tp, timeout_ms=10_000)
        finally:
            consumer.close()
        stored = {(r.partition, r.offset): r.value for p in (0, 1)
                  for r in minibroker.consume(topic, 100, partition=p, timeout=1)}
        for value, where in acked.items():
            assert stored.get(where) == value, (rules, value, where)
        if last_committed is not None:
            assert committed in commits_tried[commits_tried.index(last_committed):], (rules, committed)

    run()
