"""``minibroker dump-log`` as a command: kafka-dump-log.sh's options in any order, help, exit statuses,
a closed pipe, and the files a running broker wrote (``__consumer_offsets`` decoded, indexes checked)."""

from __future__ import annotations

import glob
import os
import shutil
import struct
import subprocess
import sys

import pytest

from minibroker.records import build_records, v2
from minibroker.records.codecs import Compression

FLAGS = ["--files", "--deep-iteration", "--print-data-log", "--offsets-decoder", "--transaction-log-decoder",
         "--index-sanity-check", "--verify-index-only", "--max-message-size", "--max-bytes",
         "--skip-record-metadata", "--json"]


def dump_log(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minibroker", "dump-log", *args], capture_output=True,
                          text=True, timeout=60, **kw)


@pytest.fixture
def two_logs(tmp_path):
    a = tmp_path / "a" / "00000000000000000000.log"
    b = tmp_path / "b" / "00000000000000000007.log"
    a.parent.mkdir()
    b.parent.mkdir()
    a.write_bytes(v2.build_batch([(0, 10, b"k", b"v", ()), (1, 11, None, b"w", ())]))
    b.write_bytes(build_records(1, [(7, 20, b"x", b"y"), (8, 21, b"z", None)], compression=Compression.GZIP))
    return str(a), str(b)


def test_help_lists_every_flag_on_one_line_each():
    for flag in ("--help", "-h"):
        out = dump_log(flag, env={**os.environ, "COLUMNS": "60"})
        assert out.returncode == 0 and out.stderr == ""
        assert out.stdout.startswith("usage: minibroker dump-log")
        lines = out.stdout.splitlines()
        for name in FLAGS:
            [line] = [ln for ln in lines if ln.lstrip().startswith(name + " ")]
            assert len(line.split()) > 2, f"{name}: its help is not on its line: {line!r}"


def test_options_before_after_and_among_the_files(two_logs):
    a, b = two_logs
    orders = [
        ["--deep-iteration", "--print-data-log", a, b],
        [a, b, "--deep-iteration", "--print-data-log"],
        [a, "--print-data-log", b, "--deep-iteration"],
        ["--files", f"{a},{b}", "--print-data-log", "--deep-iteration"],
        [f"--files={a},{b}", "--print-data-log"],
        ["--deep-iteration", "--files", a, "--print-data-log", "--files", b],
        ["--print-data-log", "--files", a, b],
    ]
    outputs = []
    for argv in orders:
        out = dump_log(*argv)
        assert out.returncode == 0, (argv, out.stderr)
        assert out.stderr == ""
        outputs.append(out.stdout)
    assert all(o == outputs[0] for o in outputs)
    lines = outputs[0].splitlines()
    assert lines[0] == f"Dumping {a}" and lines[1] == "Log starting offset: 0"
    assert lines[3].endswith("sequence: -1 headerKeys: [] key: k payload: v")
    assert lines[5] == f"Dumping {b}" and lines[6] == "Log starting offset: 7"
    assert lines[7].startswith("offset: 8 position: 0 CreateTime: 21 size: ")  # the v1 gzip wrapper
    assert lines[8].startswith("| offset: 7 CreateTime: 20 keySize: 1 valueSize: 1 isValid: true crc: ")
    assert lines[9].endswith("} key: z")


def test_usage_errors_exit_2(two_logs):
    a, _ = two_logs
    out = dump_log("--no-such-flag", a)
    assert out.returncode == 2 and "unrecognized arguments: --no-such-flag" in out.stderr
    assert out.stderr.startswith("usage: minibroker dump-log")
    assert "Traceback" not in out.stderr
    out = dump_log("--deep-iteration")
    assert out.returncode == 2 and "no file to dump" in out.stderr
    out = dump_log("--max-message-size", "lots", a)
    assert out.returncode == 2 and "--max-message-size" in out.stderr


def test_a_file_that_cannot_be_read_exits_1_after_the_others(two_logs, tmp_path):
    a, b = two_logs
    missing = str(tmp_path / "00000000000000000000.log")
    directory = str(tmp_path / "b")
    out = dump_log(missing, a, "--deep-iteration", directory, b)
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[:2] == [f"Dumping {missing}", f"Dumping {a}"]
    assert lines[3].startswith("baseOffset: 0 lastOffset: 1 count: 2")
    assert lines[6:8] == [f"Dumping {directory}", f"Dumping {b}"]
    assert lines[9].startswith("offset: 8 position: 0")
    assert out.stderr.splitlines() == [f"Could not read {missing}: No such file or directory",
                                       f"Could not read {directory}: Is a directory"]
    # the files named with --files come first, then the others
    out = dump_log(missing, "--files", a)
    assert out.returncode == 1 and out.stdout.splitlines()[0] == f"Dumping {a}"


def test_a_segment_through_a_fifo_reads_as_the_file_does(two_logs, tmp_path):
    """A FIFO reports size 0: dump-log reads what its writer brings until the writer is done (not the 0
    bytes its size says, which printed an empty segment), and --max-bytes still cuts it."""
    a, _ = two_logs
    with open(a, "rb") as f:
        data = f.read()
    fifo = tmp_path / "fifo" / "00000000000000000000.log"
    fifo.parent.mkdir()
    for extra in ([], ["--max-bytes", str(len(data) - 1)]):
        os.mkfifo(fifo)
        try:
            argv = [sys.executable, "-m", "minibroker", "dump-log", "--print-data-log", *extra, str(fifo)]
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            with open(fifo, "wb") as w:  # opens once dump-log has the FIFO open for reading
                for i in range(0, len(data), 7):  # in pieces, as a pipe may bring them
                    w.write(data[i:i + 7])
                    w.flush()
            out, err = proc.communicate(timeout=60)
        finally:
            fifo.unlink()
        from_file = dump_log("--print-data-log", *extra, a)
        assert (proc.returncode, err) == (0, "")
        assert out.replace(str(fifo), a) == from_file.stdout
        assert ("offset: 1" in out) == (not extra)  # the cut leaves the batch incomplete


def test_a_closed_pipe_ends_quietly(tmp_path):
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"".join(
        v2.build_batch([(i * 10 + j, 1000, b"key", b"v" * 100, ()) for j in range(10)], base_offset=i * 10)
        for i in range(2000)))  # ~4 MB of text with --deep-iteration, far more than a pipe holds
    proc = subprocess.Popen([sys.executable, "-m", "minibroker", "dump-log", "--deep-iteration", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == f"Dumping {log}\n".encode()
    proc.stdout.close()  # the reader goes away, as `head -1` does
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(60) == 0
    assert "Traceback" not in err and err == ""
    # and through a shell pipeline, pipefail on
    out = subprocess.run(["bash", "-o", "pipefail", "-c",
                          f"{sys.executable} -m minibroker dump-log --deep-iteration {log} | head -1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == f"Dumping {log}\n" and out.stderr == ""


def test_files_of_a_running_broker(minibroker_factory):
    """A real broker's segments: ``--offsets-decoder`` shows the group's metadata and commit readably,
    and Kafka's index checks pass on the indexes it wrote (and fail on a damaged copy)."""
    from kafka import KafkaConsumer, KafkaProducer

    broker = minibroker_factory({"log.index.interval.bytes": "100"})
    broker.create_topic("orders")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    for i in range(12):
        producer.send("orders", b"value-%d" % i, key=b"k%d" % i, partition=0).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer("orders", bootstrap_servers=broker.bootstrap_servers, group_id="dump-group",
                             client_id="dump-log-test", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    seen = 0
    for _ in consumer:
        seen += 1
        if seen == 12:
            break
    consumer.commit()
    consumer.close()
    broker.stop()

    logs = [p for p in glob.glob(f"{broker.data_dir}/__consumer_offsets-*/*.log") if os.path.getsize(p)]
    assert len(logs) == 1
    out = dump_log("--offsets-decoder", "--files", ",".join(logs))
    assert out.returncode == 0 and out.stderr == ""
    records = [ln for ln in out.stdout.splitlines() if ln.startswith("| offset:")]
    metadata = [r for r in records if 'key: {"type":"2","data":{"group":"dump-group"}}' in r]
    # the generation that assigned the partition (kafka-python's first join may assign nothing when its
    # metadata does not know the topic yet, and then rejoins)
    assigned = [r for r in metadata
                if '"assignment":{"assignedPartitions":[{"topic":"orders","partitions":[0]}]' in r]
    assert assigned, metadata
    assert '"protocolType":"consumer"' in assigned[0] and '"protocol":"range"' in assigned[0]
    assert '"members":[{"memberId":"dump-log-test-' in assigned[0]
    assert '"clientId":"dump-log-test"' in assigned[0]
    assert '"subscription":{"topics":["orders"]' in assigned[0]
    commits = [r for r in records
               if 'key: {"type":"1","data":{"group":"dump-group","topic":"orders","partition":0}}' in r]
    assert len(commits) == 1 and ' payload: {"version":"3","data":{"offset":12,' in commits[0]
    # the commit's batch header as Kafka's group coordinator (CoordinatorRuntime) writes a plain one:
    # no producer, base sequence 0
    lines = out.stdout.splitlines()
    batch = next(ln for ln in reversed(lines[:lines.index(commits[0])]) if ln.startswith("baseOffset:"))
    assert " count: 1 baseSequence: 0 lastSequence: 0 producerId: -1 producerEpoch: -1 " in batch, batch
    assert " isTransactional: false isControl: false " in batch

    segment = f"{broker.data_dir}/orders-0/00000000000000000000"
    out = dump_log("--verify-index-only", f"{segment}.index", f"{segment}.timeindex")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines() == [f"Dumping {segment}.index", f"Dumping {segment}.timeindex"]
    out = dump_log(f"{segment}.index", "--index-sanity-check", f"{segment}.timeindex")
    assert out.returncode == 0 and out.stdout.count("passed sanity check.") == 2
    entries = dump_log(f"{segment}.index").stdout.splitlines()[1:]
    assert len(entries) > 3 and all(e.startswith("offset: ") for e in entries)

    # a damaged copy: an entry pointing at the wrong batch, and a torn last entry
    damaged = os.path.join(os.path.dirname(segment), "copy")
    os.mkdir(damaged)
    for suffix in (".log", ".index"):
        shutil.copy(segment + suffix, os.path.join(damaged, "00000000000000000000" + suffix))
    index = os.path.join(damaged, "00000000000000000000.index")
    with open(index, "r+b") as f:
        data = bytearray(f.read())
        first = struct.unpack_from(">ii", data, 0)
        struct.pack_into(">ii", data, 8, struct.unpack_from(">i", data, 8)[0], first[1])
        f.seek(0)
        f.write(bytes(data) + b"\x07\x07\x07")
    out = dump_log("--verify-index-only", index)
    assert out.returncode == 0
    second_offset = int(entries[1].split()[1])
    first_offset = int(entries[0].split()[1])
    assert f"  Index offset: {second_offset}, log offset: {first_offset}" in out.stderr.splitlines()
    out = dump_log("--index-sanity-check", index)
    assert out.returncode == 1 and "CorruptIndexException: Index file " in out.stderr
    assert "neither positive nor a multiple of 8" in out.stderr


def test_an_unwritten_index_says_why_its_mismatch_is_harmless(tmp_path):
    """An active segment's indexes are preallocated with zeros and stay so until log.index.interval.bytes
    of log: Kafka's checks report their first empty slot as a mismatch; the dump says why that is harmless,
    and only then (a real mismatch gets no such line)."""
    segment = tmp_path / "active" / "00000000000000000000"
    segment.parent.mkdir()
    first = v2.build_batch([(0, 10, b"k", b"v", ()), (1, 11, None, b"w", ())])
    second = v2.build_batch([(2, 12, b"k", b"x", ()), (3, 13, None, b"y", ())], base_offset=2)
    segment.with_suffix(".log").write_bytes(first + second)
    segment.with_suffix(".index").write_bytes(bytes(8 * 10))
    segment.with_suffix(".timeindex").write_bytes(bytes(12 * 10))
    for suffix, report in ((".index", "Index offset: 0, log offset: 1"),
                           (".timeindex", "Indexed offset: 0, found log offset: 1")):
        out = dump_log(str(segment.with_suffix(suffix)))
        assert out.returncode == 0
        lines = out.stderr.splitlines()
        assert report in lines[1], lines
        assert lines[2].startswith("  (harmless: this index has no entry yet."), lines
        assert len(lines) == 3

    damaged = tmp_path / "damaged" / "00000000000000000000"
    damaged.parent.mkdir()
    damaged.with_suffix(".log").write_bytes(first + second)
    damaged.with_suffix(".index").write_bytes(struct.pack(">ii", 1, len(first)) + bytes(8 * 9))
    out = dump_log(str(damaged.with_suffix(".index")))
    assert out.stderr.splitlines()[1:] == ["  Index offset: 1, log offset: 3"]


def _offsets_records(broker) -> list[str]:
    """The ``| offset:`` lines of ``--offsets-decoder`` over every non-empty __consumer_offsets segment."""
    logs = [p for p in glob.glob(f"{broker.data_dir}/__consumer_offsets-*/*.log") if os.path.getsize(p)]
    out = dump_log("--offsets-decoder", "--files", ",".join(logs))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return [ln for ln in out.stdout.splitlines() if ln.startswith("| offset:")]


def _decoded(records: list[str], record_type: int) -> list[tuple[dict, dict | str]]:
    """(key, payload) of each record of ``record_type``, parsed back from the printed JSON."""
    import json

    found = []
    for line in records:
        head, _, payload = line.partition(" payload: ")
        key = head.partition(" key: ")[2]
        if key.startswith("{") and json.loads(key)["type"] == str(record_type):
            found.append((json.loads(key)["data"], payload if payload == "<DELETE>" else json.loads(payload)))
    return found


def test_kip848_and_share_group_records_of_a_running_broker(minibroker_factory):
    """``--offsets-decoder`` on the records a broker writes for a consumer group (KIP-848, types 3-8)
    and a share group (types 10-14): each printed as Kafka's JSON converters print it."""
    from minibroker.protocol.codec import Struct
    from minibroker.storage.checkpoints import uuid_to_str
    from minibroker.tools.wire import WireClient

    broker = minibroker_factory()
    broker.create_topic("orders", 2)
    with WireClient("127.0.0.1", broker.port, timeout=10) as c:
        r = c.request(68, 1, Struct(
            group_id="kip848", member_id="member-1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=45000, subscribed_topic_names=["orders"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]))
        assert r.error_code == 0
        topic_id = r.assignment.topic_partitions[0].topic_id
        s = c.request(76, 1, Struct(group_id="shared", member_id="share-member", member_epoch=0, rack_id=None,
                                    subscribed_topic_names=["orders"]))
        assert s.error_code == 0
    broker.stop()
    records = _offsets_records(broker)
    tid = uuid_to_str(topic_id)

    [(key, value)] = _decoded(records, 3)[-1:]
    assert key == {"groupId": "kip848"} and value["version"] == "0" and value["data"]["epoch"] >= 1
    members = _decoded(records, 5)
    assert members and members[-1][0] == {"groupId": "kip848", "memberId": "member-1"}
    data = members[-1][1]["data"]
    assert list(data) == ["instanceId", "rackId", "clientId", "clientHost", "subscribedTopicNames",
                          "subscribedTopicRegex", "rebalanceTimeoutMs", "serverAssignor"]
    assert data["subscribedTopicNames"] == ["orders"] and data["rebalanceTimeoutMs"] == 45000
    assert data["instanceId"] is None and data["clientHost"].startswith("/127.0.0.1")
    assert _decoded(records, 6)[-1][1]["data"] == {"assignmentEpoch": value["data"]["epoch"]}
    [(key, target)] = _decoded(records, 7)[-1:]
    assert key["memberId"] == "member-1"
    assert target["data"] == {"topicPartitions": [{"topicId": tid, "partitions": [0, 1]}]}
    current = _decoded(records, 8)[-1][1]["data"]
    assert current["assignedPartitions"] == [{"topicId": tid, "partitions": [0, 1]}]
    assert current["partitionsPendingRevocation"] == [] and current["memberEpoch"] >= 1
    assert list(current) == ["memberEpoch", "previousMemberEpoch", "state", "assignedPartitions",
                             "partitionsPendingRevocation"]

    share_member = _decoded(records, 10)[-1]
    assert share_member[0] == {"groupId": "shared", "memberId": "share-member"}
    assert share_member[1]["data"]["subscribedTopicNames"] == ["orders"]
    share_group = _decoded(records, 11)[-1][1]["data"]
    assert list(share_group) == ["epoch", "metadataHash"] and share_group["epoch"] >= 1
    assert _decoded(records, 12)[-1][1]["data"] == {"assignmentEpoch": share_group["epoch"]}
    share_target = _decoded(records, 13)[-1][1]["data"]["topicPartitions"]
    assert share_target == [{"topicId": tid, "partitions": [0, 1]}]
    assert _decoded(records, 14)[-1][1]["data"]["assignedPartitions"] == share_target
    assert not [r for r in records if "Unknown record type" in r or "skipping" in r]


def test_producer_snapshots_of_a_running_broker(minibroker_factory):
    """The ``.snapshot`` files a broker writes (one per roll, one at close) dumped as Kafka's
    ``dumpProducerIdSnapshot`` prints them: one line per producer, its last batch after lastTimestamp."""
    import json

    from kafka import KafkaProducer

    broker = minibroker_factory()
    broker.create_topic("idem", 1, {"segment.bytes": 1024})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True, acks="all",
                             linger_ms=0)
    for i in range(30):
        producer.send("idem", b"value-%02d" % i, partition=0).get(timeout=30)
    producer.close()
    broker.stop()
    part = os.path.join(broker.data_dir, "idem-0")
    snapshots = sorted(os.path.join(part, n) for n in os.listdir(part) if n.endswith(".snapshot"))
    assert len(snapshots) > 2  # the rolls' and the close's
    first, last = snapshots[0], snapshots[-1]
    out = dump_log(first, last)
    assert out.returncode == 0 and out.stderr == ""
    lines = out.stdout.splitlines()
    assert lines[0] == f"Dumping {first}" and lines[2] == f"Dumping {last}" and len(lines) == 4
    end = int(os.path.basename(last)[:20])
    for line, through in ((lines[1], int(os.path.basename(first)[:20])), (lines[3], end)):
        fields = line.split(" ")
        pairs = dict(zip(fields[0::2], fields[1::2], strict=False))
        assert list(pairs)[:5] == ["producerId:", "producerEpoch:", "coordinatorEpoch:",
                                   "currentTxnFirstOffset:", "lastTimestamp:"]
        assert pairs["producerEpoch:"] == "0" and pairs["coordinatorEpoch:"] == "-1"
        assert pairs["currentTxnFirstOffset:"] == "OptionalLong.empty"
        # the producer's last batch below the snapshot's offset: one record a batch, sequence = offset
        assert pairs["lastOffset:"] == str(through - 1) == pairs["lastSequence:"] == pairs["firstSequence:"]
        assert pairs["offsetDelta:"] == "0" and pairs["timestamp:"] == pairs["lastTimestamp:"]
    assert end == 30
    objs = [json.loads(ln) for ln in dump_log("--json", last).stdout.splitlines()]
    assert objs[1]["lastSequence"] == 29 and objs[1]["currentTxnFirstOffset"] is None
