"""Issue 14, item 7: fuzzing in the suite, and the bugs it found.

``test_mutated_requests`` is a Hypothesis test (derandomized: the same examples every run, shrunk
when one fails) over a real socket to an in-process broker. Each example is an exchange built by
``fuzzing.mutate`` from a seed frame (real clients' frames from
tests/data/fuzz_client_frames.txt, and our codec's frames for every served API key and version):
bit flips, inserts, deletes, truncation, corrupted lengths and varints, boundary integers, odd
strings and client ids, out-of-range keys and versions, tag buffers, record batches mutated and
re-CRC'd, compressed batches mutated through their codec, decompression bombs, pipelined frames,
frames written a few bytes at a time. After each one: the answers came in order and decode (or the
broker closed the connection where it had to), nothing hung, a fresh connection's ApiVersions
answers, nothing was logged at ERROR or with a traceback, and the records produced before fuzzing
read back byte for byte. Each example runs on one path of the record layer, chosen by its bytes: the
C accelerator (where it is built) or pure Python (issue 29).

The oracle's own tests plant each kind of fault (a handler that raises, one that never answers, a
byte changed on disk, a dead port) and show it is reported. scripts/fuzz.py runs the same machinery
for 100k frames and more; its last result is in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.handlers.registry import HANDLERS
from minibroker.protocol import codec
from minibroker.records import Compression, accelerator, build_records
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

from fuzzing.corpus import codec_frames, load_client_frames, served_pairs
from fuzzing.harness import (
    ORACLE_TOPICS,
    Client,
    FramePlan,
    Oracle,
    ThreadLogWatch,
    check_response,
    predict,
    seed_frames,
)
from fuzzing.mutate import Bombs, HypothesisChooser, MutationConfig, RandomChooser, make_exchange
from fuzzing.walk import walk_request

# The record layer's paths the examples share: the C accelerator where it is built, and pure Python
RECORD_PATHS = ["c", "python"] if accelerator.extension is not None else ["python"]
CORPUS = os.path.join(os.path.dirname(__file__), "data", "fuzz_client_frames.txt")
EXAMPLES = 2000


class FuzzEnv:
    def __init__(self) -> None:
        self.watch = ThreadLogWatch().install()
        self.runner = BrokerRunner(mode="thread")
        self.runner.start()
        self.oracle = Oracle("127.0.0.1", self.runner.port, self.watch, deadline=15)
        self.oracle.setup()
        self.seeds = seed_frames(self.oracle, CORPUS, seed=0)
        # bombs stay small in the suite (the script goes to 16 MiB)
        self.cfg = MutationConfig(bombs=Bombs(1 << 20))
        self.client = Client(
            "127.0.0.1",
            self.runner.port,
            hang_timeout=15,
            wait_cutoff=0.3,
            protection=self.oracle.protection(),
        )
        self.outcomes: dict[str, int] = {}
        self.paths: dict[str, int] = {}  # examples run on each path of the record layer

    def close(self) -> None:
        self.client.close()
        self.runner.cleanup()
        self.watch.uninstall()


@pytest.fixture(scope="module")
def fuzz_env():
    env = FuzzEnv()
    yield env
    env.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(data=st.data())
@pytest.mark.slow
def test_mutated_requests(fuzz_env, data):
    exchange = make_exchange(HypothesisChooser(data), fuzz_env.seeds, fuzz_env.cfg)
    # The record layer's path for this exchange (issue 29), about half the examples each where the C
    # accelerator is built: a function of the exchange's bytes, so that a failing example replays
    # on its path (and the examples stay those of the draws above). The broker runs in this process:
    # the switch reaches its appends.
    path = RECORD_PATHS[zlib.crc32(b"".join(exchange.chunks)) % len(RECORD_PATHS)]
    was = accelerator.use_accelerator(path == "c")
    try:
        outcome = fuzz_env.client.run(exchange.chunks)
        problems = fuzz_env.oracle.check(data=True)
    finally:
        accelerator.use_accelerator(was)
    fuzz_env.outcomes[outcome.kind] = fuzz_env.outcomes.get(outcome.kind, 0) + 1
    fuzz_env.paths[path] = fuzz_env.paths.get(path, 0) + 1
    assert not outcome.failed, (path, outcome, exchange.notes)
    assert not problems, (path, problems, exchange.notes)


def test_the_fuzz_run_reached_the_handlers(fuzz_env):
    """The examples above were not all refused at the door: many were answered, some closed, some
    cut off; and the oracle's data is still there (a last full check)."""
    counts = fuzz_env.outcomes
    if sum(counts.values()) < EXAMPLES // 2:
        pytest.skip("test_mutated_requests did not run first")
    for path in RECORD_PATHS:  # both paths of the record layer had their share
        assert fuzz_env.paths.get(path, 0) > EXAMPLES // (3 * len(RECORD_PATHS)), fuzz_env.paths
    assert counts.get("answered", 0) > EXAMPLES // 5, counts
    assert counts.get("closed", 0) > EXAMPLES // 10, counts
    assert fuzz_env.oracle.check(data=True, tidy=True) == []


# ------------------------------------------------------------------------------------- the corpus


def test_codec_frames_cover_every_served_key_and_version():
    from fuzzing.corpus import Names

    frames = codec_frames(Names({"fz-a": 3}), seed=3)
    assert {(f.api_key, f.version) for f in frames} == set(served_pairs())
    for f in frames:  # each one decodes as the broker would decode it
        header, pos = codec.decode_request_header(f.frame)
        codec.decode(codec.REQUESTS[header.api_key].name, header.api_version, f.frame, pos)
        assert walk_request(f.frame).trailing == 0
    assert codec_frames(Names({"fz-a": 3}), seed=3) == frames  # same seed, same frames


def test_client_frames_are_small_and_from_every_client():
    assert os.path.getsize(CORPUS) < 200_000
    frames = load_client_frames(CORPUS)
    labels = {f.label.split()[0] for f in frames}
    assert {"kafka-python", "confluent-kafka", "aiokafka"} <= labels
    assert {0, 1, 3, 11, 14, 18} <= {f.api_key for f in frames}
    for f in frames:
        walk_request(f.frame)


def test_exchanges_are_reproducible_from_their_seed():
    from fuzzing.corpus import Names

    seeds = codec_frames(Names({"fz-a": 3}), seed=1)
    cfg = MutationConfig(bombs=Bombs(1 << 20))
    a = [make_exchange(RandomChooser(f"5:{i}"), seeds, cfg).data for i in range(200)]
    b = [make_exchange(RandomChooser(f"5:{i}"), seeds, cfg).data for i in range(200)]
    assert a == b and len(set(a)) > 150


# ------------------------------------------------------------------------- the oracle catches faults


def test_predict_reads_the_stream_as_the_broker_does():
    produce = {"transactional_id": None, "acks": 0, "timeout_ms": 1000, "topic_data": []}
    silent = codec.encode_request(0, 9, 1, produce)
    assert [p.kind for p in predict(silent, 1 << 20).frames] == ["silent"]
    fetch = {"max_wait_ms": 5000, "topics": []}
    assert predict(codec.encode_request(1, 12, 2, fetch), 1 << 20).frames[0].kind == "wait"
    assert predict(struct.pack(">i", 0) + b"xx", 1 << 20).ending == "close"
    assert predict(struct.pack(">i", 2 << 20) + b"xx", 1 << 20).ending == "close"
    assert predict(codec.encode_request(18, 0, 3, {})[:-1], 1 << 20).ending == "incomplete"
    v99 = bytearray(codec.encode_request(18, 4, 4, {}))
    v99[6:8] = struct.pack(">h", 99)
    plan = predict(bytes(v99), 1 << 20)  # an unknown ApiVersions version is answered with a v0 body
    assert plan.ending == "clean" and plan.frames[0].decode_version == 0
    assert predict(struct.pack(">ihhi", 8, 9999, 0, 5), 1 << 20).ending == "close"
    delete = codec.encode_request(20, 5, 6, {"topic_names": ["fzo-plain"], "timeout_ms": 1000})
    assert predict(delete, 1 << 20, Oracle("h", 0, None).protection()).skip


def test_check_response_catches_a_wrong_correlation_and_an_undecodable_answer():
    plan = FramePlan("answer", 18, 0, 7)
    good = codec.encode_response(18, 0, 7, {"error_code": 0, "api_keys": []})[0][4:]
    assert check_response(plan, good) is None
    assert "correlation" in check_response(FramePlan("answer", 18, 0, 8), good)
    assert "does not decode" in check_response(plan, good[:-1])


@pytest.fixture
def planted(monkeypatch):
    """A fresh in-process broker with the oracle set up, for planting faults."""
    watch = ThreadLogWatch().install()
    runner = BrokerRunner(mode="thread")
    runner.start()
    oracle = Oracle("127.0.0.1", runner.port, watch, deadline=5)
    oracle.setup()
    assert oracle.check() == []
    yield runner, oracle
    runner.cleanup()
    watch.uninstall()


def test_the_oracle_reports_a_traceback(planted, monkeypatch):
    runner, oracle = planted
    real = HANDLERS[16]

    def boom(broker, header, request):
        raise RuntimeError("planted bug")

    monkeypatch.setitem(HANDLERS, 16, real._replace(fn=boom))
    client = Client("127.0.0.1", runner.port, hang_timeout=5)
    outcome = client.run(codec.encode_request(16, 4, 1, {"states_filter": []}))
    assert outcome.kind == "closed"
    problems = oracle.check()
    assert len(problems) == 1 and "planted bug" in problems[0] and "Traceback" in problems[0], problems
    # an error listed as expected is not a problem
    import re

    oracle.expected_errors.append(re.compile("planted bug"))
    client.run(codec.encode_request(16, 4, 2, {"states_filter": []}))
    assert oracle.check() == []


def test_the_oracle_reports_a_hang(planted, monkeypatch):
    runner, _ = planted
    real = HANDLERS[60]

    async def never(broker, header, request):
        await asyncio.sleep(3600)

    monkeypatch.setitem(HANDLERS, 60, real._replace(fn=never, is_async=True))
    client = Client("127.0.0.1", runner.port, hang_timeout=1)
    started = time.monotonic()
    outcome = client.run(codec.encode_request(60, 0, 1, {}))
    assert outcome.kind == "hang" and outcome.failed and time.monotonic() - started < 5


def test_the_oracle_reports_changed_data(planted):
    runner, oracle = planted
    topic = next(iter(ORACLE_TOPICS))
    path = os.path.join(runner.data_dir, f"{topic}-0", "00000000000000000000.log")
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 3)  # inside the last record's value
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    problems = oracle.check()
    assert len(problems) == 1 and problems[0].startswith(f"data change: {topic}-0 bytes differ"), problems


def test_the_oracle_reports_an_unresponsive_broker():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    oracle = Oracle("127.0.0.1", port, ThreadLogWatch(), deadline=1)
    problems = oracle.check(data=False)
    assert len(problems) == 1 and problems[0].startswith("unresponsive"), problems


# -------------------------------------------------------------------------- bugs the fuzzer found


def test_produce_v0_to_v2_with_only_a_partial_message_appends_nothing(minibroker_factory, caplog):
    """Found by the fuzzer: a Produce v0-v2 whose records are one message cut short (Kafka drops a
    partial trailing message, and with nothing left appends nothing: error 0, base offset -1) reached
    the log with offset -1 and failed an assertion there (UNKNOWN_SERVER_ERROR and a traceback)."""
    import logging

    broker = minibroker_factory(mode="thread")
    broker.create_topic("partial", partitions=1)
    caplog.set_level(logging.INFO, logger="minibroker")
    whole = build_records(1, [(0, 1_700_000_000_000, b"k", b"value")], compression=Compression.SNAPPY)
    with WireClient("127.0.0.1", broker.port) as client:

        def produce(version, records):
            r = client.request(
                0,
                version,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout_ms": 1000,
                    "topic_data": [{"name": "partial", "partition_data": [{"index": 0, "records": records}]}],
                },
            )
            return r.responses[0].partition_responses[0]

        assert produce(2, whole).base_offset == 0
        for version, magic in ((0, 0), (1, 0), (2, 1)):
            message = build_records(magic, [(0, 1_700_000_000_000, b"k", b"value")])
            for cut in (4, 12, len(message) - 1):
                p = produce(version, message[:cut])
                assert (p.error_code, p.base_offset) == (0, -1), (version, cut, p)
        assert produce(2, whole).base_offset == 1  # nothing was appended in between
        assert client.request(18, 0, {}).error_code == 0
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


def test_a_queued_request_that_closes_the_connection_as_writing_resumes_logs_nothing():
    """Found by the fuzzer: answers larger than the socket buffers pause writing; requests behind them
    wait in the queue and are handled when the client has read enough. One of those that closes the
    connection (here an unserved API key) made asyncio's transport call connection_lost twice, the
    second time failing with a traceback ("Exception in callback
    _SelectorSocketTransport._call_connection_lost"), under the asyncio loop (not uvloop)."""
    watch = ThreadLogWatch().install()
    try:
        with BrokerRunner(mode="thread") as runner:
            body = {
                "resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                "include_synonyms": True,
                "include_documentation": True,
            }  # ~40 KB answers
            for _ in range(3):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.connect(("127.0.0.1", runner.port))
                    requests = b"".join(codec.encode_request(32, 4, i, body) for i in range(6))
                    s.sendall(requests + struct.pack(">ihhi", 8, 9999, 0, 7))
                    time.sleep(0.3)  # the broker's writes pause; the rest is queued
                    s.settimeout(10)
                    received = 0
                    while chunk := s.recv(65536):
                        received += len(chunk)
                    assert received > 6 * 40_000  # every answer, then the close
            time.sleep(0.2)
            assert watch.take() == []
    finally:
        watch.uninstall()


def test_one_request_may_not_create_more_than_10000_partitions(minibroker_factory):
    """Found by the fuzzer: a CreateTopics with num_partitions flipped to 65535 kept the event loop
    busy for 19 s, every client waiting. Kafka's controller refuses more than 10000 partitions in one
    request (POLICY_VIOLATION, "Excessively large number of partitions per request.") and more than
    10000 records in one operation (CreatePartitions: "Unable to perform excessively large batch
    operation."); so does minibroker now."""
    broker = minibroker_factory(mode="thread")
    with WireClient("127.0.0.1", broker.port) as client:

        def create(topics, validate_only=False):
            r = client.request(
                19,
                7,
                {
                    "topics": [
                        {
                            "name": n,
                            "num_partitions": p,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                        for n, p in topics
                    ],
                    "timeout_ms": 1000,
                    "validate_only": validate_only,
                },
            )
            return {t.name: (t.error_code, t.error_message) for t in r.topics}

        too_many = "Excessively large number of partitions per request."
        started = time.monotonic()
        assert create([("huge", 65535)]) == {"huge": (44, too_many)}
        assert create([("a", 6000), ("b", 4001)], validate_only=True) == {
            "a": (44, too_many),
            "b": (44, too_many),
        }
        assert time.monotonic() - started < 2
        assert create([("a", 2), ("b", 3)]) == {"a": (0, None), "b": (0, None)}

        def grow(topics):
            r = client.request(
                37,
                3,
                {
                    "topics": [{"name": n, "count": c, "assignments": None} for n, c in topics],
                    "timeout_ms": 1000,
                    "validate_only": False,
                },
            )
            return {t.name: (t.error_code, t.error_message) for t in r.results}

        batch = "Unable to perform excessively large batch operation."
        assert grow([("a", 10003)]) == {"a": (44, batch)}
        assert grow([("a", 5002), ("b", 5004)]) == {"a": (44, batch), "b": (44, batch)}  # 5000 + 5001 new
        assert grow([("a", 4), ("b", 5)]) == {"a": (0, None), "b": (0, None)}
        meta = client.request(
            3, 12, {"topics": [{"name": "a"}, {"name": "b"}], "allow_auto_topic_creation": False}
        )
        assert sorted(len(t.partitions) for t in meta.topics) == [4, 5]


def test_metadata_v10_v11_refuse_topic_ids_as_kafka_does(minibroker_factory):
    """Found by the fuzzer: Metadata v11 naming a topic by id only (name null) was answered with that
    null name, which v10-v11 cannot carry (the answer did not decode). Kafka looks ids up from v12
    on and answers earlier versions' ids and null names with INVALID_REQUEST for every topic."""
    broker = minibroker_factory(mode="thread")
    broker.create_topic("known", partitions=2)
    with WireClient("127.0.0.1", broker.port) as client:
        topic_id = client.request(3, 12, {"topics": [{"name": "known"}]}).topics[0].topic_id
        for version in (10, 11):
            for topics in (
                [{"topic_id": topic_id, "name": None}],
                [{"topic_id": topic_id, "name": "known"}],
                [{"name": "known"}, {"topic_id": b"\x01" * 16, "name": None}],
            ):
                r = client.request(3, version, {"topics": topics, "allow_auto_topic_creation": False})
                assert [(t.error_code, t.partitions) for t in r.topics] == [(42, [])] * len(topics)
                assert r.topics[-1].name in ("", "known") and r.brokers == []
            r = client.request(
                3, version, {"topics": [{"name": "known"}], "allow_auto_topic_creation": False}
            )
            assert r.topics[0].error_code == 0 and len(r.topics[0].partitions) == 2
        r = client.request(3, 12, {"topics": [{"topic_id": topic_id, "name": None}]})
        assert (r.topics[0].error_code, r.topics[0].name) == (0, "known")


def test_group_requests_with_values_that_do_not_fit_the_offsets_topic(minibroker_factory, caplog):
    """Found by the fuzzer: OffsetCommit v2 with a retention time of 2^63-2 overflowed the expiry
    timestamp, and (from there) strings over 32767 bytes, which flexible versions can carry, did not
    fit the int16 lengths of __consumer_offsets' records: each a traceback and a closed connection,
    or, for a JoinGroup, a failure in a rebalance timer. The expiry now saturates; such a group id
    gets INVALID_GROUP_ID, such a protocol type, protocol name or instance id INVALID_REQUEST."""
    import logging

    broker = minibroker_factory(mode="thread")
    broker.create_topic("t", partitions=1)
    caplog.set_level(logging.INFO, logger="minibroker")
    big = "x" * 40000
    part = {
        "partition_index": 0,
        "committed_offset": 5,
        "committed_leader_epoch": -1,
        "committed_metadata": "",
        "commit_timestamp": -1,
    }
    with WireClient("127.0.0.1", broker.port) as client:
        r = client.request(
            8,
            2,
            {
                "group_id": "g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "retention_time_ms": 2**63 - 2,
                "topics": [{"name": "t", "partitions": [part]}],
            },
        )
        assert r.topics[0].partitions[0].error_code == 0
        fetched = client.request(9, 5, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
        assert fetched.topics[0].partitions[0].committed_offset == 5
        r = client.request(
            8,
            8,
            {
                "group_id": big,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": "t", "partitions": [part]}],
            },
        )
        assert r.topics[0].partitions[0].error_code == 24  # INVALID_GROUP_ID
        join = {
            "group_id": "g2",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 1000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"x"}],
            "reason": None,
        }
        assert client.request(11, 7, {**join, "group_id": big}).error_code == 24
        assert client.request(11, 7, {**join, "protocol_type": big}).error_code == 42
        assert client.request(11, 7, {**join, "group_instance_id": big}).error_code == 42
        assert client.request(11, 7, {**join, "protocols": [{"name": big, "metadata": b""}]}).error_code == 42
        first = client.request(11, 7, join)
        assert first.error_code == 79  # MEMBER_ID_REQUIRED: the group works as before
        second = client.request(11, 7, {**join, "member_id": first.member_id})
        assert second.error_code == 0 and second.leader == first.member_id
        sync = client.request(
            14,
            5,
            {
                "group_id": "g2",
                "generation_id": second.generation_id,
                "member_id": first.member_id,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": first.member_id, "assignment": b"a"}],
            },
        )
        assert sync.error_code == 0 and sync.assignment == b"a"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


def test_a_partition_repeated_with_null_records_after_a_deferred_one(minibroker_factory):
    """Found by the fuzzer (scripts/fuzz.py --seed 2 --loop asyncio): Produce v10 naming one partition
    twice, first with a compressed batch large enough for the worker thread (>= 256 KiB compressed),
    then with null records. The second is deferred after the first, and copying its records
    (``bytearray(None)``) raised TypeError out of the handler: a traceback and a closed connection.
    Now the null records get INVALID_RECORD at once, as they would alone."""
    watch = ThreadLogWatch().install()
    try:
        broker = minibroker_factory(mode="thread")
        broker.create_topic("t", partitions=1)
        rows = [(i, 1_700_000_000_000, None, os.urandom(1000), []) for i in range(300)]
        big = build_records(2, rows, compression=Compression.GZIP)
        assert len(big) >= 256 * 1024
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": big}, {"index": 0, "records": None}]}
            ],
        }
        outcome = Client("127.0.0.1", broker.port, hang_timeout=10).run(codec.encode_request(0, 10, 1, body))
        time.sleep(0.2)
        assert (outcome.kind, watch.take()) == ("answered", [])
    finally:
        watch.uninstall()
