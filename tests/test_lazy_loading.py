"""Lazy subsystems (issue 28): a broker imports only what its configuration and its clients use.

Each broker here runs in a fresh interpreter (a subprocess), so ``sys.modules`` shows what that broker
imported and nothing a test imported. The child prints its port, then answers every line it reads on
stdin with the modules and lazy services loaded so far; real clients (confluent-kafka, kafka-python,
the project's wire client) drive it in between. Timing (how long a first use holds other
connections) is measured in scripts/bench.py, not asserted here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from minibroker.config import BROKER_CONFIGS, REMOVED_BROKER_KEYS
from minibroker.handlers.registry import HANDLERS, SERVED, load_handlers
from minibroker.tools.wire import WireClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import asyncio, json, sys
from minibroker.config import load_config
from minibroker.server.broker import Broker
from minibroker.services import loaded_services

async def main():
    config = load_config(None, sys.argv[1:], {})
    broker = Broker(config)
    await broker.start()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def answer():
        if not sys.stdin.readline():
            done.set()
            return
        modules = sorted(m for m in sys.modules if m.startswith("minibroker") or m.split(".")[0] in
                         ("ssl", "crc32c", "email", "importlib", "hashlib", "lz4", "zstandard", "snappy",
                          "dataclasses"))
        cleaner = broker.logs.cleaner
        print(json.dumps({"modules": modules, "services": loaded_services(broker),
                          "cleaner_running": cleaner is not None and cleaner._task is not None}), flush=True)

    loop.add_reader(sys.stdin.fileno(), answer)
    print(broker.bound[0].port, flush=True)
    await done.wait()
    await broker.stop()

asyncio.run(main())
"""

# What a plaintext broker with default config must not have imported after start-up.
LAZY_MODULES = (
    "minibroker.coordinator",  # every coordinator: groups, transactions, share groups, producer ids
    "minibroker.security.sasl", "minibroker.config.sasl", "minibroker.config.jaas",
    "minibroker.security.scram_credentials", "minibroker.security.tls", "minibroker.security.authorizer",
    "minibroker.storage.cleaner", "minibroker.server.faults", "minibroker.server.faults_http",
    "minibroker.services.replica_manager", "minibroker.services.share_sessions", "minibroker.services.quotas",
    "minibroker.records.v2", "minibroker.records.codecs", "minibroker.tools",
    "minibroker.storage.log_dir_move",  # partition moves (AlterReplicaLogDirs) and what they leave on disk
    "minibroker.config.principal_rules",  # ssl.principal.mapping.rules, read when set
    "minibroker.config.kafka_broker_keys",  # Kafka's broker keys minibroker does not use: read when named
    "minibroker.config.reference",  # docs/configuration.md's generator
    "crc32c", "email", "importlib.metadata", "hashlib", "lz4", "zstandard", "snappy",
    "dataclasses",  # the log dir moves' classes are plain ones: 2 ms of start-up
)


class ChildBroker:
    """A broker in a fresh interpreter; ``overrides`` are ``key=value`` settings."""

    def __init__(self, data_dir, overrides: tuple[str, ...]):
        self.data_dir = data_dir
        self.overrides = overrides
        self.proc = None

    def start(self) -> ChildBroker:
        env = {**os.environ, "PYTHONPATH": ROOT}
        args = [f"log.dirs={self.data_dir}", "listeners=PLAINTEXT://127.0.0.1:0",
                "group.initial.rebalance.delay.ms=0", *self.overrides]
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        line = self.proc.stdout.readline()
        assert line.strip().isdigit(), f"the broker did not start: {line!r}"
        self.port = int(line)
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def probe(self) -> dict:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            self.proc = None


@pytest.fixture
def child(tmp_path):
    started: list[ChildBroker] = []

    def start(*overrides: str, data_dir=None) -> ChildBroker:
        data_dir = data_dir or tmp_path / f"data-{uuid.uuid4().hex[:8]}"
        broker = ChildBroker(data_dir, overrides).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def _loaded(probe: dict, prefix: str) -> list[str]:
    return [m for m in probe["modules"] if m == prefix or m.startswith(prefix + ".")]


def test_a_plain_broker_imports_no_lazy_subsystem(child):
    broker = child()
    probe = broker.probe()
    assert [m for prefix in LAZY_MODULES for m in _loaded(probe, prefix)] == []
    handler_modules = {m for m in probe["modules"] if m.startswith("minibroker.handlers.")}
    assert handler_modules == {"minibroker.handlers.registry", "minibroker.handlers.api_versions"}
    assert set(probe["services"]) == {"authorizer"}  # None: no authorizer.class.name
    # the message fields of one API, the ApiVersions handler's (its module registers at import)
    assert _loaded(probe, "minibroker.protocol.messages") == [
        "minibroker.protocol.messages", "minibroker.protocol.messages.api_versions"]
    assert not probe["cleaner_running"]


def test_fault_injection_loads_only_when_enabled(child):
    broker = child("fault.injection.enable=true", "metrics.port=0")
    assert {"minibroker.server.faults", "minibroker.server.faults_http"} <= set(broker.probe()["modules"])


def test_api_versions_advertises_every_served_key_without_importing_a_handler(child):
    broker = child()
    with WireClient("127.0.0.1", broker.port) as wire:
        answer = wire.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert answer.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [
        (key, row.min_version, row.max_version) for key, row in sorted(SERVED.items()) if row.advertised]
    assert {f.name for f in answer.supported_features} >= {"transaction.version", "group.version",
                                                          "share.version"}
    probe = broker.probe()
    handler_modules = {m for m in probe["modules"] if m.startswith("minibroker.handlers.")}
    assert handler_modules == {"minibroker.handlers.registry", "minibroker.handlers.api_versions"}
    assert _loaded(probe, "minibroker.protocol.messages") == [  # and, with the request, its header's
        "minibroker.protocol.messages", "minibroker.protocol.messages.api_versions",
        "minibroker.protocol.messages.request_header"]


def test_the_static_table_is_what_the_handler_modules_serve():
    load_handlers()
    assert {key: (h.fn.__module__, h.min_version, h.max_version, h.advertised)
            for key, h in HANDLERS.items()} == {
        key: ("minibroker.handlers." + row.module, row.min_version, row.max_version, row.advertised)
        for key, row in SERVED.items()}


def test_produce_and_fetch_load_their_handlers_on_first_use(child):
    kafka = pytest.importorskip("kafka")
    broker = child()
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send("first-use", b"hello").get(timeout=10)
    producer.close()
    consumer = kafka.KafkaConsumer("first-use", bootstrap_servers=broker.bootstrap,
                                   auto_offset_reset="earliest", consumer_timeout_ms=10000)
    assert next(consumer).value == b"hello"  # (a list of the iterator would wait out the timeout)
    consumer.close()
    probe = broker.probe()
    assert {"minibroker.handlers.produce", "minibroker.handlers.fetch", "minibroker.handlers.metadata",
            "minibroker.protocol.messages.produce", "minibroker.protocol.messages.fetch"} <= set(
        probe["modules"])
    assert "replicas" in probe["services"]
    assert "transactions" not in probe["services"] and _loaded(probe, "minibroker.storage.cleaner") == []


def test_the_transaction_coordinator_loads_on_the_first_transactional_request(child):
    ck = pytest.importorskip("confluent_kafka")
    broker = child()
    assert _loaded(broker.probe(), "minibroker.coordinator.transaction_coordinator") == []
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "lazy-txn"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("txn-topic", b"committed")
    producer.commit_transaction(20)
    probe = broker.probe()
    assert _loaded(probe, "minibroker.coordinator.transaction_coordinator")
    assert {"transactions", "producer_ids"} <= set(probe["services"])
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lazy-reader",
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["txn-topic"])
    got, deadline = [], time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == [b"committed"]
    # __transaction_state exists now: a restart builds the coordinator at start-up, to replay it
    broker.stop()
    again = child(data_dir=broker.data_dir)
    assert "transactions" in again.probe()["services"]


def test_a_share_group_loads_on_the_first_share_request(child):
    ck = pytest.importorskip("confluent_kafka")
    if not hasattr(ck, "ShareConsumer"):
        pytest.skip("confluent-kafka without ShareConsumer (2.15+)")
    broker = child("group.share.record.lock.duration.ms=1000", "group.share.min.record.lock.duration.ms=1000",
                   "group.share.heartbeat.interval.ms=500", "group.share.min.heartbeat.interval.ms=500")
    probe = broker.probe()
    assert _loaded(probe, "minibroker.coordinator.share_partition_manager") == []
    assert "share_sessions" not in probe["services"]
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("shared", b"one")
    assert producer.flush(10) == 0
    group = "lazy-share"
    with WireClient("127.0.0.1", broker.port) as wire:  # read from the earliest offset (a GROUP config)
        r = wire.request(44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
            "validate_only": False})
        assert [x.error_code for x in r.responses] == [0]
    consumer = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe(["shared"])
    got, deadline = [], time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        got += [m.value() for m in consumer.poll(timeout=0.5) if m.error() is None]
    consumer.close()
    assert got == [b"one"]
    probe = broker.probe()
    assert {"share_state", "share_partitions", "share_sessions"} <= set(probe["services"])
    assert _loaded(probe, "minibroker.coordinator.share_partition_manager")


def test_kafkas_other_broker_keys_load_when_a_client_first_needs_them(child):
    """DescribeConfigs of the broker lists Kafka's keys minibroker does not use, with Kafka's defaults;
    IncrementalAlterConfigs of a key Kafka 4 removed (one of them) gets Kafka 4's answer. Neither broker
    had read that catalogue before (kafka-python's and confluent-kafka's admin clients)."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType

    node = str(BROKER_CONFIGS["node.id"].default)
    broker = child()
    assert _loaded(broker.probe(), "minibroker.config.kafka_broker_keys") == []
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)],
                                           config_filter="all")["broker"][node]
    finally:
        admin.close()
    assert described["broker.heartbeat.interval.ms"]["value"] == "2000"  # a Kafka-only key, its default
    assert described["broker.heartbeat.interval.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert described["log.segment.bytes"]["value"] == "1073741824"
    assert "password.encoder.secret" not in described  # removed in Kafka 4: listed only when set
    assert set(described) == set(BROKER_CONFIGS) - set(REMOVED_BROKER_KEYS)
    assert _loaded(broker.probe(), "minibroker.config.kafka_broker_keys")

    # kafka-python checks the names against a DescribeConfigs first: confluent-kafka sends them as they are
    ck_admin = pytest.importorskip("confluent_kafka.admin")
    broker = child()
    admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ck_admin.ConfigResource("broker", node, incremental_configs=[ck_admin.ConfigEntry(
        "password.encoder.secret", "s", incremental_operation=ck_admin.AlterConfigOpType.SET)])
    with pytest.raises(ck_admin.KafkaException) as error:
        admin.incremental_alter_configs([resource])[resource].result(10)
    assert error.value.args[0].code() == ck_admin.KafkaError.INVALID_CONFIG
    assert "Unknown broker config name: password.encoder.secret" in error.value.args[0].str()
    assert _loaded(broker.probe(), "minibroker.config.kafka_broker_keys")


def test_creating_a_compacted_topic_starts_the_cleaner(child):
    broker = child()
    with WireClient("127.0.0.1", broker.port) as wire:
        r = wire.request(19, 4, {"topics": [{"name": "plain", "num_partitions": 1, "replication_factor": 1,
                                             "assignments": [], "configs": []}], "timeout_ms": 5000})
        assert r.topics[0].error_code == 0
        assert not broker.probe()["cleaner_running"]  # a delete-policy topic needs no cleaner
        r = wire.request(19, 4, {"topics": [{
            "name": "compacted", "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": [{"name": "cleanup.policy", "value": "compact"}]}], "timeout_ms": 5000})
        assert r.topics[0].error_code == 0
    probe = broker.probe()
    assert _loaded(probe, "minibroker.storage.cleaner") and probe["cleaner_running"]


@pytest.mark.slow  # a throttle window must pass
def test_client_quotas_load_when_one_is_set_and_then_throttle(child):
    """No quota at start: neither the quotas nor the connection rates are built. A quota set at run time
    (AlterClientQuotas, sent by kafka-python) loads them and throttles a real producer; a restart finds
    the saved quota and builds them at start-up."""
    pytest.importorskip("kafka")
    from kafka import KafkaProducer
    from test_quotas import KafkaPythonQuotas  # AlterClientQuotas through kafka-python's own requests

    window = ("quota.window.num=3", "quota.window.size.seconds=1")
    broker = child(*window)
    probe = broker.probe()
    assert "client_quotas" not in probe["services"] and _loaded(probe, "minibroker.services.quotas") == []
    quotas = KafkaPythonQuotas(broker.bootstrap)
    try:
        assert quotas.alter([("client-id", "lazy-quota")], {"producer_byte_rate": 64 * 1024}) == (0, None)
    finally:
        quotas.close()
    probe = broker.probe()
    assert "client_quotas" in probe["services"] and _loaded(probe, "minibroker.services.quotas")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="lazy-quota", linger_ms=5)
    for _ in range(300):  # 300 KB: over the two windows (128 KiB) a client may burst before throttling
        producer.send("lazy-quota", b"x" * 1000)
    producer.flush(60)
    metrics = {k: v for group in producer.metrics().values() for k, v in group.items()}
    producer.close()
    assert metrics["throttle-time-max"] > 0
    data_dir = broker.data_dir
    broker.stop()
    probe = child(*window, data_dir=data_dir).probe()  # saved quotas apply from the first accept
    assert "client_quotas" in probe["services"]


def test_a_sasl_listener_loads_sasl_at_start_up(child):
    broker = child("listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                   "sasl.enabled.mechanisms=PLAIN",
                   "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                   "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"secret\";")
    probe = broker.probe()
    assert {"sasl_listeners", "scram_credentials"} <= set(probe["services"])
    assert _loaded(probe, "minibroker.security.sasl.authenticator")
    assert _loaded(probe, "minibroker.security.tls") == []  # no TLS listener


def test_serve_reads_a_plain_command_line_without_importing_argparse():
    """``minibroker serve`` with --override, --log-level, --log-format, --loop and a file (0.4 MB of RSS:
    scripts/bench.py --only startup); tests/test_cli_rough_edges.py checks it reads them as argparse does."""
    code = ("import sys; from minibroker.cli import parse_arguments; args = parse_arguments(sys.argv[1:]); "
            "print(args.func.__name__, args.override, 'argparse' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, "serve", "server.properties", "--override", "a=b",
                          "--log-level", "warning", "--log-format", "text", "--loop", "auto"],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.split() == ["cmd_serve", "['a=b']", "False"], out.stderr
    out = subprocess.run([sys.executable, "-c", code, "serve", "--log-lev", "warning"],  # an abbreviation
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.split() == ["cmd_serve", "None", "True"], out.stderr


SERVE_GC_CHILD = r"""
import gc, os, signal, sys
from minibroker import cli
from minibroker.server import broker as server_broker

passes = []
gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(info["generation"]))
start, seen = server_broker.Broker.start, {}


async def start_and_stop(self):
    seen["before"] = len(passes)  # cmd_serve has loaded the config and built the Broker by now
    await start(self)
    seen["during"] = len(passes) - seen["before"]
    os.kill(os.getpid(), signal.SIGTERM)

server_broker.Broker.start = start_and_stop
code = cli.main(["serve", "--log-level", "WARNING", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                 "--override", "log.dirs=" + sys.argv[1]])
print(code, seen["during"], gc.isenabled(), gc.get_freeze_count() > 0)
"""


def test_serve_starts_with_the_collector_paused_then_freezes_what_the_start_made(tmp_path):
    """A served broker's start makes only objects that live as long as the process: the cyclic
    collector's passes over them took 5-9 ms of the start. No pass runs while the broker starts
    (importing its modules, loading the logs, binding), and after it the collector is on again with
    the start's objects frozen."""
    out = subprocess.run([sys.executable, "-c", SERVE_GC_CHILD, str(tmp_path / "data")], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert out.stdout.split() == ["0", "0", "True", "True"], (out.stdout, out.stderr)


@pytest.mark.parametrize("failure", ["configuration", "port in use"])
def test_serve_turns_the_collector_back_on_when_its_start_fails(tmp_path, failure):
    """``minibroker serve`` run in-process (an embedding) whose start fails leaves its host's collector
    on. In a child process: serve's logging setup would outlive the test in this one."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1] if failure == "port in use" else 0
    argv = ["serve", "--log-level", "WARNING", "--override", f"log.dirs={tmp_path / 'data'}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"]
    if failure == "configuration":
        argv += ["--override", "num.partitions=many"]
    code = ("import gc, sys; from minibroker import cli; code = cli.main(sys.argv[1:]); "
            "print(code, gc.isenabled())")
    try:
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    finally:
        taken.close()
    assert out.stdout.split() == ["2" if failure == "configuration" else "1", "True"], out.stderr
    assert "minibroker:" in out.stderr


def test_start_up_looks_for_the_client_quotas_file_by_its_real_name():
    from minibroker.services import CLIENT_QUOTAS_FILE
    from minibroker.services.quotas import QUOTAS_FILE

    assert CLIENT_QUOTAS_FILE == QUOTAS_FILE


def test_start_up_looks_for_the_scram_credentials_file_by_its_real_name():
    """start_services names the file without importing its module (a damaged one must stop start-up)."""
    from minibroker.security.scram_credentials import CREDENTIALS_FILE
    from minibroker.services import SCRAM_CREDENTIALS_FILE

    assert SCRAM_CREDENTIALS_FILE == CREDENTIALS_FILE


def test_start_up_looks_for_the_move_crash_hook_by_its_real_name():
    """The log manager names the variable without importing the moves' module."""
    from minibroker.storage.log_dir_move import MOVE_CRASH_AT_ENV
    from minibroker.storage.log_manager import MOVE_CRASH_AT_ENV as named_at_start

    assert named_at_start == MOVE_CRASH_AT_ENV


@pytest.mark.parametrize("argv", [["topics", "list"], ["transactions", "abort", "--help"],
                                  ["certs", "--help"], ["dump-log", "--help"], ["apis"]])
def test_a_console_tool_imports_no_other_tool(argv):
    """``minibroker TOOL ...`` builds only that tool's parser: the other console tools stay unimported."""
    probe = ("import sys\nfrom minibroker import cli\n"
             "try:\n    cli.parse_arguments(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(' '.join(m for m in sys.modules if m.startswith('minibroker.tools.')), file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert run.returncode == 0, run.stderr
    tools = {m.rsplit(".", 1)[1] for m in run.stderr.split()}  # (stdout has the help)
    from minibroker.cli import CONSOLE_TOOLS

    assert tools & set(CONSOLE_TOOLS) == {argv[0]} & set(CONSOLE_TOOLS), run.stderr
