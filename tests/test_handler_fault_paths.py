"""Fault paths of request handlers, called directly or through an in-process broker: a full disk under the
ACL APIs, a CreateAcls request Kafka cannot parse, an unexpected failure writing one transaction marker,
a Fetch of a partition whose files cannot be opened (out of descriptors)."""

from types import SimpleNamespace as NS

import pytest

from minibroker.errors import ErrorCode
from minibroker.handlers import client_telemetry
from minibroker.handlers.create_acls import handle_create_acls
from minibroker.handlers.delete_acls import handle_delete_acls
from minibroker.handlers.registry import CloseConnection
from minibroker.handlers.write_txn_markers import handle_write_txn_markers


def _full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")


def _broker(**store):
    authorizer = NS(authorize=lambda *args: True, store=NS(**store))
    return NS(authorizer=authorizer)


def _header(version: int):
    return NS(api_version=version, principal="User:admin", peer=("127.0.0.1", 1))


CREATION = dict(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:x", host="*",
                operation=3, permission_type=3)
ANY_FILTER = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                  principal_filter=None, host_filter=None, operation=1, permission_type=1)


def test_acls_that_cannot_be_saved_are_an_unknown_server_error():
    broker = _broker(create=_full_disk, delete=_full_disk)
    created = handle_create_acls(broker, _header(3), NS(creations=[NS(**CREATION)]))
    deleted = handle_delete_acls(broker, _header(3), NS(filters=[NS(**ANY_FILTER)]))
    for r in (created.results[0], deleted.filter_results[0]):
        assert r.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert r.error_message == "The ACLs could not be saved: No space left on device"


@pytest.mark.parametrize("change", [dict(operation=0), dict(resource_pattern_type=0)])
def test_a_create_acls_request_kafka_cannot_parse_closes_the_connection(change):
    with pytest.raises(CloseConnection):  # an UNKNOWN (0) element
        handle_create_acls(_broker(), _header(3), NS(creations=[NS(**{**CREATION, **change})]))


def test_an_unexpected_marker_failure_fails_only_its_partition():
    def write_txn_marker(topic, partition, *args):
        if partition == 1:
            raise RuntimeError("boom")

    broker = NS(authorizer=None, groups=None, replicas=NS(write_txn_marker=write_txn_marker))
    marker = NS(producer_id=7, producer_epoch=0, coordinator_epoch=0, transaction_result=1,
                topics=[NS(name="t", partition_indexes=[0, 1])])
    r = handle_write_txn_markers(broker, _header(1), NS(markers=[marker]))
    assert [p.error_code for p in r.markers[0].topics[0].partitions] == [0, ErrorCode.UNKNOWN_SERVER_ERROR]


def test_dynamic_configs_that_cannot_be_saved_change_nothing(minibroker_factory, monkeypatch):
    from minibroker.tools.wire import WireClient

    runner = minibroker_factory(mode="thread")
    monkeypatch.setattr(runner.broker, "save_dynamic_configs", _full_disk)
    change = {"resource_type": 4, "resource_name": "",  # the cluster-wide default layer
              "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "123456"}]}
    with WireClient(runner.host, runner.port) as wire:
        r = wire.request(44, 1, {"validate_only": False, "resources": [change]}).responses[0]
    assert (r.error_code, r.error_message) == (
        ErrorCode.UNKNOWN_SERVER_ERROR, "The dynamic configs could not be saved: No space left on device")
    assert "log.retention.ms" not in runner.broker.config.dynamic_values(cluster_default=True)


def test_a_telemetry_flood_is_bounded_and_oversized_pushes_are_refused(monkeypatch):
    class Broker:  # weakly referenced, as the real one
        config = {"telemetry.max.bytes": 4}

    broker, header = Broker(), _header(0)
    monkeypatch.setattr(client_telemetry, "INSTANCE_LIMIT", 2)
    get = client_telemetry.handle_get_telemetry_subscriptions
    ids = [get(broker, header, NS(client_instance_id=bytes(16))).client_instance_id for _ in range(3)]
    assert list(client_telemetry._instances[broker]) == ids[1:]  # the least recently used one dropped

    def push(instance_id, **fields):
        body = {"client_instance_id": instance_id, "terminating": False, "compression_type": 0,
                "metrics": b"", "subscription_id": client_telemetry.subscription_id(instance_id), **fields}
        return client_telemetry.handle_push_telemetry(broker, header, NS(**body)).error_code

    assert push(ids[1], metrics=b"12345") == ErrorCode.TELEMETRY_TOO_LARGE
    assert push(ids[2], compression_type=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("records", [None, b"short", bytes(61)])  # null, truncated, magic 0 (not v2)
def test_a_transactional_produce_of_no_v2_batch_adds_nothing_to_the_transaction(records):
    from minibroker.handlers.produce import _add_to_transaction

    # nothing is looked up or added (broker None): the append's validation answers these records
    assert _add_to_transaction(None, "tx", "t", 0, records) is None


def test_a_partition_whose_files_cannot_be_opened_answers_a_storage_error_and_keeps_the_connection(
        minibroker_factory, monkeypatch):
    """Out of descriptors (EMFILE) while a Fetch first loads a partition's producer state (its
    snapshots are listed): that partition answers KAFKA_STORAGE_ERROR, as Kafka's fetch does for
    a log it cannot read; the others are served and the connection stays open."""
    import errno
    import os

    from minibroker.storage import producer_state
    from minibroker.tools.wire import WireClient

    runner = minibroker_factory(mode="thread")
    runner.create_topic("emfile", partitions=2)
    for partition in (0, 1):
        runner.produce("emfile", [b"a", b"b"], partition=partition)
    real = producer_state.snapshot_files

    def snapshot_files(directory):
        if os.path.basename(directory) == "emfile-0":
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(directory)

    monkeypatch.setattr(producer_state, "snapshot_files", snapshot_files)
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "emfile", "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in (0, 1)]}]}
    with WireClient(runner.host, runner.port) as wire:
        parts = wire.request(1, 11, body).responses[0].partitions
        assert [(p.partition_index, p.error_code) for p in parts] == [
            (0, ErrorCode.KAFKA_STORAGE_ERROR), (1, 0)]
        assert bytes(parts[1].records) and not bytes(parts[0].records)
        monkeypatch.undo()  # descriptors again: the same connection is served, the state loads
        parts = wire.request(1, 11, body).responses[0].partitions
        assert [p.error_code for p in parts] == [0, 0] and all(bytes(p.records) for p in parts)
    assert not runner.broker.logs.offline_dirs  # a read that failed takes no dir offline


def test_a_read_committed_fetch_whose_next_header_cannot_be_read_answers_a_storage_error(
        minibroker_factory, monkeypatch):
    """A READ_COMMITTED fetch that stops inside a segment reads the next entry's header to bound the
    aborted transactions it reports (``PartitionLog.fetch_upper_bound``); EIO there answers
    KAFKA_STORAGE_ERROR for that partition, the others are served and the connection stays."""
    import errno
    import os

    from minibroker.tools.wire import WireClient

    runner = minibroker_factory(mode="thread")
    runner.create_topic("eio", partitions=2)
    for partition in (0, 1):
        runner.produce("eio", [b"a"], partition=partition)
        runner.produce("eio", [b"b"], partition=partition)  # a second batch: the fetch below stops before it
    real = os.pread

    def pread(fd, size, position):
        if size == 8:  # the next entry's offset: only fetch_upper_bound reads 8 bytes of a .log here
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, size, position)

    def fetch(partition_max_bytes: dict[int, int]):
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": 1, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                "rack_id": "", "topics": [{"topic": "eio", "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": n}
                    for p, n in partition_max_bytes.items()]}]}
        return wire.request(1, 11, body).responses[0].partitions

    with WireClient(runner.host, runner.port) as wire:
        fetch({0: 1, 1: 1 << 20})  # the producer states load before the fault
        monkeypatch.setattr(os, "pread", pread)
        parts = fetch({0: 1, 1: 1 << 20})  # partition 0: one batch of two, partition 1: up to its end
        monkeypatch.undo()
        assert [(p.partition_index, p.error_code) for p in parts] == [
            (0, ErrorCode.KAFKA_STORAGE_ERROR), (1, 0)]
        assert bytes(parts[1].records) and not bytes(parts[0].records)
        parts = fetch({0: 1, 1: 1 << 20})
        assert [p.error_code for p in parts] == [0, 0] and all(bytes(p.records) for p in parts)
    assert not runner.broker.logs.offline_dirs  # a read that failed takes no dir offline
