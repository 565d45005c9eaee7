"""Console tools (topics, produce, consume, groups) against a running broker, checked with kcat;
structured logging; the /metrics endpoint; startup progress lines."""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from minibroker.cli import main
from minibroker.server.metrics import StartupProgress
from minibroker.testing import tied_to_this_process


class CliResult:
    def __init__(self, code: int, out: bytes, err: str):
        self.code, self.out, self.err = code, out, err

    @property
    def text(self) -> str:
        return self.out.decode()


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run ``main(argv)`` with bytes on stdin; returns exit code, stdout bytes, stderr text."""

    def run(*argv: str, stdin: bytes = b"") -> CliResult:
        stdout = io.BytesIO()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(stdout, write_through=True))
        capsys.readouterr()
        code = main(list(argv))
        sys.stdout.flush()
        return CliResult(code, stdout.getvalue(), capsys.readouterr().err)

    return run


@pytest.fixture
def bs(minibroker) -> list[str]:
    return ["--bootstrap-server", minibroker.bootstrap_servers]


def kcat_run(kcat: str, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run([kcat, *args], input=stdin, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


# -- produce / consume round trips with kcat ------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_then_kcat_reads(cli, bs, minibroker, kcat, topic_name, compression):
    minibroker.create_topic(topic_name, partitions=2)
    lines = b"k1:v1\nk2:v:2 with colon\nk3:\xc3\xa9t\xc3\xa9\n"
    r = cli("produce", "--topic", topic_name, "--key-separator", ":", "--header", "h1=x",
            "--header", "h2=y=z", "--compression", compression, "--partition", "1", *bs, stdin=lines)
    assert r.code == 0, r.err
    got = kcat_run(kcat, "-b", minibroker.bootstrap_servers, "-C", "-t", topic_name, "-p", "1",
                   "-o", "beginning", "-e", "-q", "-f", "%p|%o|%k|%s|%h\n")
    assert got.splitlines() == [b"1|0|k1|v1|h1=x,h2=y=z", b"1|1|k2|v:2 with colon|h1=x,h2=y=z",
                                b"1|2|k3|\xc3\xa9t\xc3\xa9|h1=x,h2=y=z"]


def test_kcat_produces_then_consume_reads(cli, bs, minibroker, kcat, topic_name):
    minibroker.create_topic(topic_name)
    kcat_run(kcat, "-b", minibroker.bootstrap_servers, "-P", "-t", topic_name, "-K", "=", "-H", "src=kcat",
             "-z", "lz4", stdin=b"a=1\nb=2\nc=3\n")
    r = cli("consume", "--topic", topic_name, "--from-beginning", "-e", "-f", r"%o %k=%s [%h]\n", *bs)
    assert r.code == 0, r.err
    assert r.out.splitlines() == [b"0 a=1 [src=kcat]", b"1 b=2 [src=kcat]", b"2 c=3 [src=kcat]"]
    assert "Processed a total of 3 messages" in r.err


def test_produce_without_separator_in_line_fails(cli, bs, minibroker, topic_name):
    minibroker.create_topic(topic_name)
    r = cli("produce", "--topic", topic_name, "--key-separator", ":", *bs, stdin=b"k:v\nnokey\n")
    assert r.code == 1
    assert "no key separator" in r.err
    assert [rec.value for rec in minibroker.consume(topic_name, 1)] == [b"v"]


# -- consume: start positions, limits, format -----------------------------------------------------

def test_consume_start_positions_and_format(cli, bs, minibroker, topic_name):
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, ["a", "b"], key=b"key")
    minibroker.produce(topic_name, ["c"])  # null key
    records = minibroker.consume(topic_name, 3)
    fmt = r"%t/%p/%o/%T/%K/%S/%k/%s\t%%\n"

    r = cli("consume", "--topic", topic_name, "--from-beginning", "-e", "-f", fmt, *bs)
    assert r.code == 0, r.err
    assert r.out.decode().splitlines() == [
        f"{topic_name}/0/0/{records[0].timestamp}/3/1/key/a\t%",
        f"{topic_name}/0/1/{records[1].timestamp}/3/1/key/b\t%",
        f"{topic_name}/0/2/{records[2].timestamp}/-1/1//c\t%",
    ]
    assert cli("consume", "--topic", topic_name, "--offset", "1", "-e", *bs).out == b"b\nc\n"
    r = cli("consume", "--topic", topic_name, "--offset", "earliest", "--max-messages", "1", *bs)
    assert r.out == b"a\n"
    assert cli("consume", "--topic", topic_name, "--timestamp", str(records[2].timestamp), "-e", "-f", "%o\n",
               *bs).out == b"2\n"
    assert cli("consume", "--topic", topic_name, "--timestamp", str(records[2].timestamp + 60_000), "-e",
               *bs).out == b""
    # default start is the end (as kafka-console-consumer); --timeout-ms ends an idle wait
    r = cli("consume", "--topic", topic_name, "--timeout-ms", "300", *bs)
    assert r.code == 0 and r.out == b""


def test_consume_unknown_topic_and_bad_offset(cli, bs, topic_name):
    r = cli("consume", "--topic", topic_name + "-missing", "-e", *bs)
    assert r.code == 1 and "does not exist" in r.err
    assert cli("consume", "--topic", topic_name, "--offset", "soon", *bs).code == 2


# -- topics ---------------------------------------------------------------------------------------

def test_topics_lifecycle(cli, bs, topic_name):
    r = cli("topics", "create", "--topic", topic_name, "--partitions", "3", "--config", "retention.ms=60000",
            *bs)
    assert (r.code, r.text) == (0, f"Created topic {topic_name}.\n"), r.err
    r = cli("topics", "create", "--topic", topic_name, *bs)
    assert r.code == 1 and "TOPIC_ALREADY_EXISTS" in r.err
    assert cli("topics", "create", "--topic", topic_name, "--if-not-exists", *bs).code == 0

    assert topic_name in cli("topics", "list", *bs).text.splitlines()
    described = cli("topics", "describe", "--topic", topic_name, *bs).text.splitlines()
    assert described[0].startswith(f"Topic: {topic_name}\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000" in described[0]
    assert described[1:] == [f"\tTopic: {topic_name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1"
                             for p in range(3)]

    r = cli("topics", "alter-config", "--topic", topic_name,
            "--add-config", "cleanup.policy=compact,max.message.bytes=2000",
            "--delete-config", "retention.ms", *bs)
    assert r.code == 0, r.err
    head = cli("topics", "describe", "--topic", topic_name, *bs).text.splitlines()[0]
    configs = head.split("Configs: ")[1].split(",")
    assert sorted(configs) == ["cleanup.policy=compact", "max.message.bytes=2000"]
    r = cli("topics", "alter-config", "--topic", topic_name, "--add-config", "no.such.config=1", *bs)
    assert r.code == 1 and "INVALID_CONFIG" in r.err

    assert cli("topics", "alter", "--topic", topic_name, "--partitions", "4", *bs).code == 0
    assert "PartitionCount: 4" in cli("topics", "describe", "--topic", topic_name, *bs).text

    assert cli("topics", "delete", "--topic", topic_name, *bs).text == f"Deleted topic {topic_name}.\n"
    assert topic_name not in cli("topics", "list", *bs).text.splitlines()
    r = cli("topics", "delete", "--topic", topic_name, *bs)
    assert r.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.err
    assert cli("topics", "delete", "--topic", topic_name, "--if-exists", *bs).code == 0
    r = cli("topics", "describe", "--topic", topic_name, *bs)
    assert r.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.err


def test_topics_unreachable_broker(cli):
    r = cli("topics", "list", "--bootstrap-server", "127.0.0.1:1", "--timeout", "1")
    assert r.code == 1 and "cannot reach 127.0.0.1:1" in r.err


def test_producer_properties_are_kafkas_names_and_checked():
    from minibroker.tools.produce import parse_properties

    assert parse_properties(["linger.ms=5", "batch_size=500", "acks=all"]) == {
        "linger.ms": 5, "batch.size": 500, "acks": "all"}
    with pytest.raises(ValueError, match="is not one this producer reads"):
        parse_properties(["api_version=0.10.0"])
    with pytest.raises(ValueError, match="is a number"):
        parse_properties(["retries=many"])


# -- groups ---------------------------------------------------------------------------------------

def _describe_rows(text: str) -> dict[int, list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["GROUP", "TOPIC"])
    return {int(cols[2]): cols for cols in (line.split() for line in lines[start + 1:])}


def test_groups_list_describe_reset(cli, bs, minibroker, topic_name):
    group = f"g-{topic_name}"
    minibroker.create_topic(topic_name, partitions=2)
    minibroker.produce(topic_name, ["a", "b", "c"], partition=0)
    minibroker.produce(topic_name, ["d"], partition=1)
    r = cli("consume", "--topic", topic_name, "--group", group, "--from-beginning", "-e", *bs)
    assert r.code == 0, r.err
    assert sorted(r.out.splitlines()) == [b"a", b"b", b"c", b"d"]

    assert group in cli("groups", "list", *bs).text.splitlines()
    assert re.search(rf"^{re.escape(group)}\s+Empty$", cli("groups", "list", "--state", *bs).text, re.M)
    minibroker.produce(topic_name, ["e"], partition=0)
    r = cli("groups", "describe", "--group", group, *bs)
    assert r.code == 0, r.err
    assert "has no active members" in r.text and "GROUP STATE: Empty" in r.text
    rows = _describe_rows(r.text)
    assert rows[0][3:6] == ["3", "4", "1"] and rows[1][3:6] == ["1", "1", "0"]

    # dry run by default: nothing changes
    r = cli("groups", "reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest", *bs)
    assert r.code == 0 and "dry run" in r.err
    assert _describe_rows(cli("groups", "describe", "--group", group, *bs).text)[0][3] == "3"

    r = cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic_name}:x", "--to-offset", "1",
            *bs)
    assert r.code == 1 and "partitions are numbers" in r.err and "Traceback" not in r.err
    r = cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic_name}:0", "--to-offset", "1",
            "--execute", *bs)
    assert r.code == 0, r.err
    rows = _describe_rows(cli("groups", "describe", "--group", group, *bs).text)
    assert rows[0][3:6] == ["1", "4", "3"] and rows[1][3] == "1"
    cli("groups", "reset-offsets", "--group", group, "--all-topics", "--to-offset", "99", "--execute", *bs)
    rows = _describe_rows(cli("groups", "describe", "--group", group, *bs).text)
    assert [rows[0][3], rows[1][3]] == ["4", "1"]  # clamped to the log end
    cli("groups", "reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute", *bs)
    r = cli("consume", "--topic", topic_name, "--group", group, "-e", *bs)
    assert sorted(r.out.splitlines()) == [b"a", b"b", b"c", b"d", b"e"]

    assert cli("groups", "delete", "--group", group, *bs).code == 0
    assert group not in cli("groups", "list", *bs).text.splitlines()


def test_groups_reset_refused_while_active(cli, bs, minibroker, topic_name):
    from kafka import KafkaConsumer

    group = f"g-{topic_name}"
    minibroker.create_topic(topic_name)
    consumer = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, group_id=group)
    try:
        # Metadata first: a leader that joins before it knows the topic assigns nothing and rejoins,
        # and kafka-python 3.0.12 has been seen to stall in that second join under CI load.
        assert consumer.partitions_for_topic(topic_name)
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(500)
        assert consumer.assignment()
        r = cli("groups", "describe", "--group", group, *bs)
        assert "GROUP STATE: Stable" in r.text
        assert _describe_rows(r.text)[0][6] != "-"  # the owning member
        r = cli("groups", "reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute",
                *bs)
        assert r.code == 1 and "inactive" in r.err and "Stable" in r.err
    finally:
        consumer.close()


# -- operations: JSON logs, /metrics, startup progress ---------------------------------------------

def test_serve_json_logging_and_debug_request_log(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "MINIBROKER_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "minibroker", "serve", "--log-format", "json", "--log-level", "DEBUG",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path}",
         "--override", "metrics.port=0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, **tied_to_this_process(env))
    lines: list[str] = []
    try:
        port = None
        deadline = time.monotonic() + 20
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line, f"broker exited: {lines}"
            lines.append(line)
            m = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        assert port is not None
        assert main(["healthcheck", "--bootstrap-server", f"127.0.0.1:{port}", "--quiet"]) == 0
        while True:  # the request log line of the healthcheck's ApiVersions
            line = proc.stderr.readline()
            lines.append(line)
            if "minibroker.request" in line or not line:
                break
    finally:
        proc.terminate()
        _, rest = proc.communicate(timeout=10)
    assert proc.returncode == 0
    records = [json.loads(line) for line in lines + rest.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message"} <= r.keys() for r in records)
    config_lines = [r for r in records if r["logger"] == "minibroker.config"]
    assert config_lines[0]["level"] == "INFO" and "starting; config file" in config_lines[0]["message"]
    # at DEBUG the banner goes on with every effective key, one record each (issue 15)
    assert any(r["level"] == "DEBUG" and r["message"] == "  num.partitions = 1" for r in config_lines)
    assert any(r["logger"] == "minibroker.metrics" and "/metrics" in r["message"] for r in records)
    # which record layer runs, once (issue 29): the C accelerator where it is built
    built = importlib.util.find_spec("minibroker.records._accelerator") is not None
    path = [(r["level"], r["message"]) for r in records if r["logger"] == "minibroker.records"]
    assert len(path) == 1 and path[0][0] == "INFO", path
    expected = "record layer: C accelerator (_accelerator." if built else "record layer: pure Python (the C"
    assert path[0][1].startswith(expected), path
    request = next(r for r in records if r["logger"] == "minibroker.request")
    assert request["level"] == "DEBUG"
    assert re.match(r"ApiVersions v0 client=minibroker-healthcheck corr=1 [\d.]+ ms", request["message"])
    assert any("minibroker stopped" in r["message"] for r in records)


def _metrics_port(runner) -> int:
    if runner.broker is not None:
        return runner.broker.metrics_http.port
    return int(re.search(r"metrics at http://[^:]+:(\d+)/metrics", runner.log_text()).group(1))


def _scrape(port: int, path: str = "/metrics") -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_endpoint(minibroker_factory, cli, topic_name):
    runner = minibroker_factory({"metrics.port": "0"})
    bs = ["--bootstrap-server", runner.bootstrap_servers]
    port = _metrics_port(runner)
    runner.create_topic(topic_name, partitions=2)
    runner.produce(topic_name, ["a", "b", "c"], partition=1)
    group = "metrics-group"
    assert cli("consume", "--topic", topic_name, "--group", group, "--from-beginning", "--max-messages", "2",
               "--partition", "1", *bs).code == 0
    runner.produce(topic_name, ["d"], partition=1)

    status, content_type, text = _scrape(port)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    samples = _samples(text)
    assert samples['minibroker_requests_total{api="Produce",api_key="0"}'] >= 2
    assert samples['minibroker_requests_total{api="Fetch",api_key="1"}'] >= 1
    assert samples['minibroker_request_seconds_total{api="Produce",api_key="0"}'] > 0
    assert samples["minibroker_bytes_in_total"] > 0
    assert samples["minibroker_bytes_out_total"] > 0
    assert samples["minibroker_connections"] >= 0
    assert samples[f'minibroker_log_end_offset{{topic="{topic_name}",partition="1"}}'] == 4
    assert samples[f'minibroker_log_end_offset{{topic="{topic_name}",partition="0"}}'] == 0
    assert samples[f'minibroker_log_start_offset{{topic="{topic_name}",partition="1"}}'] == 0
    key = f'{{group="{group}",topic="{topic_name}",partition="1"}}'
    assert samples["minibroker_consumer_group_committed_offset" + key] == 2
    assert samples["minibroker_consumer_group_lag" + key] == 2
    assert "# TYPE minibroker_requests_total counter" in text
    assert "# TYPE minibroker_consumer_group_lag gauge" in text

    assert _scrape(port, "/nope")[0] == 404
    assert _scrape(port, "/")[0] == 200


def test_metrics_off_by_default(minibroker):
    if minibroker.broker is None:
        pytest.skip("needs the in-process broker")
    assert minibroker.broker.metrics_http is None


def test_startup_progress_lines(caplog):
    logger = logging.getLogger("minibroker.test.progress")
    with caplog.at_level(logging.INFO, logger="minibroker.test.progress"):
        with StartupProgress("loading logs", logger, interval=0.05) as progress:
            progress.update(3, 12, "t-0")
            time.sleep(0.3)
        with StartupProgress("quick work", logger, interval=5):
            pass
    messages = [r.getMessage() for r in caplog.records]
    line = re.compile(r"loading logs: still running after \d+ s; 3/12 \(25%\), at t-0")
    assert any(line.fullmatch(m) for m in messages)
    assert re.fullmatch(r"loading logs: done after [\d.]+ s", messages[-1])
    assert not any("quick work" in m for m in messages)
