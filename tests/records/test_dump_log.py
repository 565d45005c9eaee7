"""dump-log: kafka-dump-log.sh's lines (Kafka 3.9's DumpLogSegments), deep iteration of every format,
the decoders, indexes and their checks, JSON, corrupt and truncated files."""

import gzip
import io
import json
import struct
import zlib

import crc32c
import pytest

from minibroker.coordinator import group_records as gr
from minibroker.coordinator import transaction_records as tr
from minibroker.records import build_end_txn_marker, build_records, v2
from minibroker.records.codecs import Compression
from minibroker.records.record import TimestampType
from minibroker.tools.dump_log import main

NAME = "00000000000000000100"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), stdout=out, stderr=err)
    return rc, out.getvalue().splitlines()


def run_err(*argv):
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), stdout=out, stderr=err)
    return rc, out.getvalue().splitlines(), err.getvalue().splitlines()


def write(tmp_path, data, suffix=".log", name=NAME):
    p = tmp_path / f"{name}{suffix}"
    p.write_bytes(data)
    return str(p)


def sample_parts():
    return [
        v2.build_batch([(100, 1524709879130, b"key", b"value", ())], base_offset=100,
                       partition_leader_epoch=0),
        build_records(1, [(101, 5, b"a", b"b"), (102, 6, None, b"c")], compression=1),
        build_records(2, [(103, 7, b"k", b"v", [("h1", b"x")])], compression=3),
        build_end_txn_marker(commit=False, producer_id=3, producer_epoch=1, coordinator_epoch=2, timestamp=8,
                             base_offset=104),
    ]


def sample():
    return b"".join(sample_parts())


def test_batch_lines_match_kafka(tmp_path):
    path = write(tmp_path, sample())
    rc, lines = run(path)
    assert rc == 0
    assert lines[0] == f"Dumping {path}" and lines[1] == "Log starting offset: 100"
    assert lines[2] == (
        "baseOffset: 100 lastOffset: 100 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1524709879130 size: 76 magic: 2 "
        "compresscodec: none crc: 2857248333 isvalid: true"
    )
    wrapper = sample_parts()[1]
    wrapper_crc = struct.unpack_from(">I", wrapper, 12)[0]
    assert lines[3] == (
        f"offset: 102 position: 76 CreateTime: 6 size: {len(wrapper)} magic: 1 compresscodec: gzip "
        f"crc: {wrapper_crc} isvalid: true"
    )
    assert "compresscodec: lz4" in lines[4] and "isControl: true" in lines[5]
    assert "producerId: 3 producerEpoch: 1" in lines[5] and "isTransactional: true" in lines[5]
    assert len(lines) == 6


def test_delete_horizon_and_sequences(tmp_path):
    batch = v2.build_batch([(5, 1000, b"k", None, ()), (6, 1001, b"k2", b"v", ())], base_offset=5,
                           delete_horizon_ms=1700000000000, producer_id=9, producer_epoch=0,
                           base_sequence=2**31 - 1)
    _, lines = run(write(tmp_path, batch, name="00000000000000000005"), "--deep-iteration")
    assert "baseSequence: 2147483647 lastSequence: 0 producerId: 9" in lines[2]  # the sequence wraps
    assert "deleteHorizonMs: OptionalLong[1700000000000]" in lines[2]
    assert lines[3] == ("| offset: 5 CreateTime: 1000 keySize: 1 valueSize: -1 sequence: 2147483647 "
                        "headerKeys: []")
    assert lines[4] == "| offset: 6 CreateTime: 1001 keySize: 2 valueSize: 1 sequence: 0 headerKeys: []"


def test_deep_iteration_and_data(tmp_path):
    path = write(tmp_path, sample())
    _, lines = run(path, "--deep-iteration")
    recs = [ln for ln in lines if ln.startswith("|")]
    assert recs[0] == ("| offset: 100 CreateTime: 1524709879130 keySize: 3 valueSize: 5 sequence: -1 "
                       "headerKeys: []")
    assert recs[1].startswith("| offset: 101 CreateTime: 5 keySize: 1 valueSize: 1 isValid: true crc: ")
    assert recs[3] == "| offset: 103 CreateTime: 7 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [h1]"
    assert recs[4] == (
        "| offset: 104 CreateTime: 8 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: ABORT coordinatorEpoch: 2"
    )
    _, lines = run(path, "--print-data-log")  # implies deep iteration
    recs = [ln for ln in lines if ln.startswith("|")]
    assert recs[0].endswith("headerKeys: [] key: key payload: value")
    assert recs[2].endswith("} payload: c") and "key:" not in recs[2]  # null key: no key field
    assert recs[3].endswith("headerKeys: [h1] key: k payload: v")  # header values are not printed
    assert recs[4].endswith("coordinatorEpoch: 2")  # control records: no key/payload


def test_skip_record_metadata(tmp_path):
    path = write(tmp_path, sample())
    _, lines = run(path, "--print-data-log", "--skip-record-metadata")
    assert lines[3] == "| key: key payload: value"
    assert lines[5] == "| key: a payload: b"
    assert lines[6] == " payload: c"  # Kafka's layout: no key, no "|"
    _, lines = run(path, "--deep-iteration", "--skip-record-metadata")
    assert lines[3] == ""  # one empty line per record, as Kafka prints them
    assert lines[-1] == ""


def test_max_bytes_reads_only_the_first_batches(tmp_path):
    path = write(tmp_path, sample())
    _, lines = run(path, "--max-bytes", "100")
    assert len(lines) == 3 and lines[2].startswith("baseOffset: 100")  # no "invalid bytes" line
    _, lines = run(path, "--max-bytes", str(len(sample())))
    assert len(lines) == 6


# -- v0 and v1 message sets ------------------------------------------------------------------------


def _message_crcs(data: bytes) -> list[int]:
    """CRC of each v0/v1 message in a message set, read without minibroker's parser."""
    crcs, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0]
        crcs.append(struct.unpack_from(">I", data, pos + 12)[0])
        assert zlib.crc32(data[pos + 16 : pos + 12 + size]) == crcs[-1]
        pos += 12 + size
    return crcs


def _inner_crcs(wrapper: bytes) -> list[int]:
    magic = wrapper[16]
    value_at = 18 + (8 if magic == 1 else 0) + 4  # attributes, timestamp (v1), key length (-1)
    value_len = struct.unpack_from(">i", wrapper, value_at)[0]
    return _message_crcs(gzip.decompress(wrapper[value_at + 4 : value_at + 4 + value_len]))


def test_legacy_message_sets_print_as_kafka_does(tmp_path):
    parts = [
        build_records(0, [(0, -1, b"k0", b"v0"), (1, -1, None, b"v1")]),  # v0, uncompressed: two entries
        build_records(0, [(2, -1, b"k2", b"v2"), (3, -1, b"k3", None)], compression=Compression.GZIP),
        build_records(1, [(4, 1000, b"k4", b"v4")]),
        build_records(1, [(5, 1001, b"k5", b"v5"), (6, 1002, None, b"v6")], compression=Compression.GZIP),
        build_records(1, [(7, 1003, b"k7", b"v7"), (8, 1004, b"k8", b"v8")], compression=Compression.GZIP,
                      timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=5000),
    ]
    data = b"".join(parts)
    path = write(tmp_path, data, name="00000000000000000000")
    rc, lines, err = run_err(path, "--print-data-log")
    assert rc == 0 and err == []
    pos = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    v0 = _message_crcs(parts[0])
    c1, c3, c4 = (struct.unpack_from(">I", parts[i], 12)[0] for i in (1, 3, 4))
    i1, i3, i4 = _inner_crcs(parts[1]), _inner_crcs(parts[3]), _inner_crcs(parts[4])
    no_ts = "NoTimestampType: -1"

    def batch(offset, position, ts, size, magic, codec, crc):
        return (f"offset: {offset} position: {position} {ts} size: {size} magic: {magic} "
                f"compresscodec: {codec} crc: {crc} isvalid: true")

    def record(offset, ts, key, value, crc):  # Kafka's stray "}" after the crc included
        text = (f"| offset: {offset} {ts} keySize: {len(key) if key else -1} "
                f"valueSize: {len(value) if value else -1} isValid: true crc: {crc}}}")
        return text + (f" key: {key}" if key else "") + (f" payload: {value}" if value else "")

    assert lines[1:] == [
        "Log starting offset: 0",
        batch(0, 0, no_ts, 30, 0, "none", v0[0]),
        record(0, no_ts, "k0", "v0", v0[0]),
        batch(1, 30, no_ts, 28, 0, "none", v0[1]),
        record(1, no_ts, None, "v1", v0[1]),
        # the v0 wrapper holds the last inner offset; its inner offsets are absolute
        batch(3, pos[1], no_ts, len(parts[1]), 0, "gzip", c1),
        record(2, no_ts, "k2", "v2", i1[0]),
        record(3, no_ts, "k3", None, i1[1]),
        batch(4, pos[2], "CreateTime: 1000", 38, 1, "none", _message_crcs(parts[2])[0]),
        record(4, "CreateTime: 1000", "k4", "v4", _message_crcs(parts[2])[0]),
        # v1: inner offsets are relative (0, 1), made absolute from the wrapper's (the last one)
        batch(6, pos[3], "CreateTime: 1002", len(parts[3]), 1, "gzip", c3),
        record(5, "CreateTime: 1001", "k5", "v5", i3[0]),
        record(6, "CreateTime: 1002", None, "v6", i3[1]),
        # LogAppendTime: every inner record reports the wrapper's timestamp
        batch(8, pos[4], "LogAppendTime: 5000", len(parts[4]), 1, "gzip", c4),
        record(7, "LogAppendTime: 5000", "k7", "v7", i4[0]),
        record(8, "LogAppendTime: 5000", "k8", "v8", i4[1]),
    ]
    # the exact text of one line, for the record
    assert lines[3] == (f"| offset: 0 NoTimestampType: -1 keySize: 2 valueSize: 2 isValid: true "
                        f"crc: {v0[0]}}} key: k0 payload: v0")


def test_legacy_inner_message_with_a_bad_crc(tmp_path):
    data = bytearray(build_records(0, [(0, -1, b"k", b"v")]))
    data[-1] ^= 0xFF  # the value's last byte: the message's CRC no longer holds
    _, lines = run(write(tmp_path, bytes(data), name="00000000000000000000"), "--deep-iteration")
    assert lines[2].endswith("isvalid: false") and "isValid: false" in lines[3]


# -- decoders ---------------------------------------------------------------------------------------


def _topic_partitions(topic: str, partitions: list[int]) -> bytes:
    name = struct.pack(">h", len(topic)) + topic.encode()
    return name + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)


# Kafka's DumpLogSegmentsTest example: ConsumerProtocol.serializeSubscription(Subscription(["foo"], null,
# [foo-0], generation 0, rack "rack")) and serializeAssignment(Assignment([foo-0])), both version 3.
SUBSCRIPTION_V3 = (struct.pack(">hi", 3, 1) + struct.pack(">h", 3) + b"foo" + struct.pack(">i", -1)
                   + struct.pack(">i", 1) + _topic_partitions("foo", [0]) + struct.pack(">i", 0)
                   + struct.pack(">h", 4) + b"rack")
ASSIGNMENT_V3 = struct.pack(">hi", 3, 1) + _topic_partitions("foo", [0]) + struct.pack(">i", -1)


def _group_value(subscription: bytes, assignment: bytes, version: int = 3) -> bytes:
    member = gr.MemberRecord("member", "instance", "client", "host", 1000, 100, subscription, assignment)
    return gr.encode_group_metadata_value(
        gr.GroupMetadataValue("consumer", 10, "range", "member", -1, [member]), version)


def offsets_log(tmp_path, rows):
    data = b"".join(v2.build_batch([(i, 5, k, v, ())], base_offset=i) for i, (k, v) in enumerate(rows))
    return write(tmp_path, data, name="00000000000000000000")


def test_offsets_decoder_prints_every_group_record_type(tmp_path):
    """Types 3-15 (KIP-848 consumer groups, KIP-932 share groups) from the broker's own encoders, and the
    share record it does not write (9, Kafka 4.0's) from its schema's bytes, as Kafka's JSON converters
    print them: field names, order, uuids, a tagged field only when present, errors and unknown types."""
    import base64

    tid = bytes(range(16))
    tid_text = base64.urlsafe_b64encode(tid).decode().rstrip("=")
    classic = gr.ClassicMemberMetadata(30000, (("range", b"\x01\x02"),))
    member = gr.MemberMetadataValue("inst", None, "client", "/10.0.0.1", ["a", "b"], None, 45000, "uniform",
                                    classic)
    assignment = gr.CurrentAssignmentValue(5, 4, 0, {tid: {2, 0}}, {})

    def compact(text: str) -> bytes:
        return bytes([len(text) + 1]) + text.encode()

    share_partition_metadata = (b"\x00\x00" + b"\x02" + tid + compact("t") + b"\x00\x00\x00\x03"
                                + b"\x02" + b"\x00\x00\x00\x01" + b"\x02" + compact("r1") + b"\x00" + b"\x00"
                                + b"\x00")
    share_state_metadata = gr.encode_share_state_partition_metadata_value(
        gr.ShareStatePartitionMetadataValue({}, {tid: ("t", {7})}, {}))
    rows = [
        (gr.encode_group_record_key(3, "g"), gr.encode_epoch_value(7)),
        (gr.encode_group_record_key(4, "g"), gr.encode_partition_metadata_value({"t": (tid, 3)})),
        (gr.encode_group_record_key(5, "g", "m"), gr.encode_member_metadata_value(member)),
        (gr.encode_group_record_key(6, "g"), gr.encode_epoch_value(7)),
        (gr.encode_group_record_key(7, "g", "m"), gr.encode_target_assignment_value({tid: {1}})),
        (gr.encode_group_record_key(8, "g", "m"), gr.encode_current_assignment_value(assignment)),
        (b"\x00\x09\x00\x01s", share_partition_metadata),
        (gr.encode_group_record_key(10, "s", "m"),
         gr.encode_share_member_metadata_value(gr.ShareMemberMetadataValue(None, "c", "h", ["t"]))),
        (gr.encode_group_record_key(11, "s"),
         gr.encode_share_group_metadata_value(gr.ShareGroupMetadataValue(3, -5))),
        (gr.encode_group_record_key(11, "s"), b"\x00\x00\x00\x00\x00\x03\x00"),  # Kafka 4.0: no hash
        (gr.encode_group_record_key(12, "s"), gr.encode_epoch_value(3)),
        (gr.encode_group_record_key(13, "s", "m"), gr.encode_target_assignment_value({tid: {0}})),
        (gr.encode_group_record_key(14, "s", "m"), gr.encode_share_current_assignment_value(
            gr.ShareCurrentAssignmentValue(3, 2, 0, {tid: {0}}))),
        (b"\x00\x0f\x00\x01s", share_state_metadata),
        (gr.encode_group_record_key(5, "g", "gone"), None),
        (gr.encode_group_record_key(3, "g"), gr.encode_epoch_value(7)[:3]),  # torn
        (gr.encode_group_record_key(3, "g"), b"\x00\x02\x00\x00\x00\x01\x00"),  # an unknown version
        (b"\x00\x03\x00", gr.encode_epoch_value(7)),  # a key cut short
        (b"\x00\x11\x00\x01g\x00\x01x", b"\x00\x00\x00"),  # type 17 (streams groups), unknown here
    ]
    rc, lines = run("--offsets-decoder", offsets_log(tmp_path, rows))
    assert rc == 0
    got = [ln.partition(" key: ")[2] for ln in lines if ln.startswith("|")]
    g, gm, s, sm = ('{"groupId":"g"}', '{"groupId":"g","memberId":"m"}', '{"groupId":"s"}',
                    '{"groupId":"s","memberId":"m"}')
    assert got == [
        f'{{"type":"3","data":{g}}} payload: {{"version":"0","data":{{"epoch":7}}}}',
        f'{{"type":"4","data":{g}}} payload: {{"version":"0","data":{{"topics":[{{"topicId":"{tid_text}",'
        '"topicName":"t","numPartitions":3,"partitionMetadata":[]}]}}',
        f'{{"type":"5","data":{gm}}} payload: {{"version":"0","data":{{"instanceId":"inst","rackId":null,'
        '"clientId":"client","clientHost":"/10.0.0.1","subscribedTopicNames":["a","b"],'
        '"subscribedTopicRegex":null,"rebalanceTimeoutMs":45000,"serverAssignor":"uniform",'
        '"classicMemberMetadata":{"sessionTimeoutMs":30000,"supportedProtocols":[{"name":"range",'
        '"metadata":"AQI="}]}}}',
        f'{{"type":"6","data":{g}}} payload: {{"version":"0","data":{{"assignmentEpoch":7}}}}',
        f'{{"type":"7","data":{gm}}} payload: {{"version":"0","data":{{"topicPartitions":[{{"topicId":'
        f'"{tid_text}","partitions":[1]}}]}}}}',
        f'{{"type":"8","data":{gm}}} payload: {{"version":"0","data":{{"memberEpoch":5,'
        '"previousMemberEpoch":4,'
        f'"state":0,"assignedPartitions":[{{"topicId":"{tid_text}","partitions":[0,2]}}],'
        '"partitionsPendingRevocation":[]}}',
        f'{{"type":"9","data":{s}}} payload: {{"version":"0","data":{{"topics":[{{"topicId":"{tid_text}",'
        '"topicName":"t","numPartitions":3,"partitionMetadata":[{"partition":1,"racks":["r1"]}]}]}}',
        f'{{"type":"10","data":{sm}}} payload: {{"version":"0","data":{{"rackId":null,"clientId":"c",'
        '"clientHost":"h","subscribedTopicNames":["t"]}}',
        f'{{"type":"11","data":{s}}} payload: {{"version":"0","data":{{"epoch":3,"metadataHash":-5}}}}',
        f'{{"type":"11","data":{s}}} payload: {{"version":"0","data":{{"epoch":3}}}}',
        f'{{"type":"12","data":{s}}} payload: {{"version":"0","data":{{"assignmentEpoch":3}}}}',
        f'{{"type":"13","data":{sm}}} payload: {{"version":"0","data":{{"topicPartitions":[{{"topicId":'
        f'"{tid_text}","partitions":[0]}}]}}}}',
        f'{{"type":"14","data":{sm}}} payload: {{"version":"0","data":{{"memberEpoch":3,'
        '"previousMemberEpoch":2,'
        f'"state":0,"assignedPartitions":[{{"topicId":"{tid_text}","partitions":[0]}}]}}}}',
        f'{{"type":"15","data":{s}}} payload: {{"version":"0","data":{{"initializingTopics":[],'
        f'"initializedTopics":[{{"topicId":"{tid_text}","topicName":"t","partitions":[7]}}],'
        '"deletingTopics":[]}}',
        '{"type":"5","data":{"groupId":"g","memberId":"gone"}} payload: <DELETE>',
        "Error at offset 15, skipping. Could not read record with version 0 from value's buffer due to: "
        "record truncated.",
        "Error at offset 16, skipping. Could not read record with version 2 from value's buffer due to: "
        "Can't read version 2 of ConsumerGroupMetadataValue.",
        "Error at offset 17, skipping. Could not read record with version 3 from key's buffer due to: "
        "record truncated.",
        "Unknown record type 17 at offset 18, skipping.",
    ]


def test_offsets_decoder_prints_kafkas_json(tmp_path):
    commit_key = gr.encode_offset_commit_key("group", "topic", 0)
    rows = [
        (gr.encode_group_metadata_key("group"), _group_value(SUBSCRIPTION_V3, ASSIGNMENT_V3)),
        (gr.encode_group_metadata_key("group"), _group_value(b"Subscription", b"Assignment")),
        (commit_key, gr.encode_offset_commit_value(gr.OffsetCommitValue(42, "meta", 1700000000000, 7))),
        (commit_key,
         gr.encode_offset_commit_value(gr.OffsetCommitValue(43, "", 1700000000001, -1, 1800000000000))),
        (commit_key, None),
        (gr.encode_group_record_key(3, "group"), gr.encode_epoch_value(10)),  # KIP-848 record type 3
        (None, b"x"),
        (commit_key, b"\x00\x09" + b"\x00" * 20),
        (gr.encode_group_metadata_key("group"), _group_value(SUBSCRIPTION_V3, ASSIGNMENT_V3, 0)),
    ]
    rc, lines = run("--offsets-decoder", offsets_log(tmp_path, rows))
    assert rc == 0
    recs = [ln for ln in lines if ln.startswith("|")]
    assert len(recs) == len(rows)
    group_key = '{"type":"2","data":{"group":"group"}}'
    # Kafka's own expectation for this value (DumpLogSegmentsTest), at value version 3 instead of 4
    assert recs[0].endswith(
        f" key: {group_key} payload: "
        '{"version":"3","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
        '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
        '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}'
    )
    # a subscription that does not parse keeps its bytes, base64 (Kafka's test again)
    assert recs[1].endswith('"subscription":"U3Vic2NyaXB0aW9u","assignment":"QXNzaWdubWVudA=="}]}}')
    commit = '{"type":"1","data":{"group":"group","topic":"topic","partition":0}}'
    assert recs[2].endswith(
        f' key: {commit} payload: {{"version":"3","data":{{"offset":42,"leaderEpoch":7,"metadata":"meta",'
        '"commitTimestamp":1700000000000}}')
    assert recs[3].endswith(  # v1: the expire timestamp, no leader epoch
        f' key: {commit} payload: {{"version":"1","data":{{"offset":43,"metadata":"",'
        '"commitTimestamp":1700000000001,"expireTimestamp":1800000000000}}')
    assert recs[4].endswith(f" key: {commit} payload: <DELETE>")
    # Kafka's own expectation for a ConsumerGroupMetadata record (DumpLogSegmentsTest)
    assert recs[5].endswith(' key: {"type":"3","data":{"groupId":"group"}} '
                            'payload: {"version":"0","data":{"epoch":10}}')
    assert recs[6].endswith(
        " key: Failed to decode message at offset 6 using offset topic decoder (message had a missing key)")
    assert recs[7].endswith(
        " key: Error at offset 7, skipping. Could not read record with version 9 from value's buffer due to: "
        "Can't read version 9 of OffsetCommitValue.")
    # value v0: no currentStateTimestamp, groupInstanceId or rebalanceTimeout
    assert ('"generation":10,"protocol":"range","leader":"member","members":[{"memberId":"member",'
            '"clientId":"client","clientHost":"host","sessionTimeout":100,"subscription":{') in recs[8]

    _, lines = run("--offsets-decoder", "--json", offsets_log(tmp_path, rows[2:3]))
    record = json.loads(lines[1])["records"][0]
    assert record["key"] == {"type": "1", "data": {"group": "group", "topic": "topic", "partition": 0}}
    assert record["payload"]["data"]["offset"] == 42


def test_transaction_log_decoder(tmp_path):
    value = tr.TransactionLogValue(1000, 5, 60000, tr.TransactionState.ONGOING,
                                   (tr.TxnPartitions("t", (0, 1)), tr.TxnPartitions("u", (3,))),
                                   1700000000000, 1699999999000)
    empty = value._replace(transaction_status=tr.TransactionState.EMPTY, transaction_partitions=None)
    rows = [
        (tr.encode_key("tx"), tr.encode_value(value)),
        (tr.encode_key("tx"), tr.encode_value(value._replace(next_producer_id=2000), 1)),
        (tr.encode_key("tx"), tr.encode_value(empty)),
        (tr.encode_key("tx"), None),
        (b"\x00\x07\x00\x02tx", b"\x00\x00"),
        (tr.encode_key("tx"), b"\x00\x05" + tr.encode_value(value)[2:]),
    ]
    rc, lines = run("--transaction-log-decoder", offsets_log(tmp_path, rows))
    assert rc == 0
    recs = [ln for ln in lines if ln.startswith("|")]
    key = " key: transaction_metadata::transactionalId=tx"
    ongoing = ("producerId:1000,producerEpoch:5,state=Ongoing,partitions=[t-0,t-1,u-3],"
               "txnLastUpdateTimestamp=1700000000000,txnTimeoutMs=60000")
    assert recs[0].endswith(f"{key} payload: {ongoing}")
    assert recs[1].endswith(f"{key} payload: {ongoing}")  # v1 (flexible) reads the same
    assert recs[2].endswith(f"{key} payload: producerId:1000,producerEpoch:5,state=Empty,partitions=[],"
                            "txnLastUpdateTimestamp=1700000000000,txnTimeoutMs=60000")
    assert recs[3].endswith(f"{key} payload: <DELETE>")
    assert recs[4].endswith(" key: unknown::version=7")
    assert recs[5].endswith(" key: Error at offset 5, skipping. Unknown version 5 from the transaction log "
                            "message value")


# -- JSON, damage -----------------------------------------------------------------------------------


def test_json(tmp_path):
    _, lines = run(write(tmp_path, sample()), "--json", "--deep-iteration")
    objs = [json.loads(ln) for ln in lines]
    assert objs[0]["file"].endswith(".log")
    assert objs[1]["baseOffset"] == 100 and objs[1]["crc"] == 2857248333 and objs[1]["isvalid"] is True
    assert objs[1]["deleteHorizonMs"] is None
    assert [r["offset"] for r in objs[2]["records"]] == [101, 102]
    assert objs[2]["records"][0]["isvalid"] is True
    _, lines = run(write(tmp_path, sample()), "--json", "--print-data-log")
    assert json.loads(lines[3])["records"][0]["headers"] == {"h1": "x"}  # JSON keeps header values


def test_corrupt_and_truncated_logs_are_reported(tmp_path):
    data = bytearray(sample())
    data[70] ^= 0xFF  # inside the first batch's records: CRC fails
    rc, lines = run(write(tmp_path, bytes(data) + bytes(data[:40])), "--deep-iteration")
    assert rc == 0 and "isvalid: false" in lines[2]
    assert lines[-1] == f"Found 40 invalid bytes at the end of {NAME}.log"
    bad_size = struct.pack(">qi", 0, 3) + b"\0" * 20
    rc, lines = run(write(tmp_path, sample() + bad_size))
    assert rc == 0 and lines[-1].startswith(f"Found 32 invalid bytes at position {len(sample())}")
    garbage = bytearray(build_records(2, [(0, 1, b"k", b"v" * 50, ())], compression=1))
    garbage[70:90] = b"\x55" * 20
    rc, lines = run(write(tmp_path, bytes(garbage)), "--deep-iteration")
    assert rc == 0 and "isvalid: false" in lines[2] and lines[3].startswith("| error: cannot read records")


def test_non_consecutive_offsets_go_to_stderr(tmp_path):
    data = b"".join(v2.build_batch([(o, 1, None, b"a", ())], base_offset=o) for o in (0, 5, 9))
    path = write(tmp_path, data, name="00000000000000000000")
    rc, _, err = run_err(path, "--deep-iteration")
    assert rc == 0
    assert err == [f"Non-consecutive offsets in {path}", "  5 is followed by 9", "  0 is followed by 5"]
    assert run_err(path)[2] == []  # shallow: records are not looked at


# -- indexes ----------------------------------------------------------------------------------------


def segment(tmp_path):
    """The sample log with a correct offset index and time index (one entry per batch)."""
    parts = sample_parts()
    write(tmp_path, b"".join(parts))
    positions = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    last_offsets = [100, 102, 103, 104]
    max_ts = [1524709879130, 6, 7, 8]
    index = b"".join(struct.pack(">ii", o - 100, p) for o, p in zip(last_offsets, positions, strict=True))
    timeindex = struct.pack(">qi", max_ts[0], 0)  # one entry: later batches have smaller timestamps
    return positions, index, timeindex


def test_index_entries_and_checks(tmp_path):
    positions, index, timeindex = segment(tmp_path)
    idx = write(tmp_path, index + b"\0" * 80, ".index")  # preallocated tail: not printed
    tix = write(tmp_path, timeindex + b"\0" * 120, ".timeindex")
    rc, lines, err = run_err(idx, tix)
    assert rc == 0 and err == []
    assert lines[1:5] == [f"offset: {o} position: {p}" for o, p in zip([100, 102, 103, 104], positions,
                                                                        strict=True)]
    assert lines[5:] == [f"Dumping {tix}", "timestamp: 1524709879130 offset: 100"]
    rc, lines, err = run_err("--verify-index-only", idx, tix)
    assert rc == 0 and lines == [f"Dumping {idx}", f"Dumping {tix}"] and err == []
    _, lines = run(idx, "--json")
    assert [json.loads(ln) for ln in lines][1:3] == [{"offset": 100, "position": 0},
                                                      {"offset": 102, "position": 76}]


def test_damaged_offset_index(tmp_path):
    positions, index, _ = segment(tmp_path)
    damaged = bytearray(index)
    struct.pack_into(">ii", damaged, 8, 2, positions[2])  # offset 102 -> the batch ending at 103
    struct.pack_into(">ii", damaged, 16, 3, 10)  # a position inside a batch
    idx = write(tmp_path, bytes(damaged), ".index")
    rc, lines, err = run_err("--verify-index-only", idx)
    assert rc == 0 and lines == [f"Dumping {idx}"]  # Kafka's status, mismatches on stderr
    assert err[0] == f"Mismatches in :{idx}"
    assert err[1].startswith("  Index offset: 103, no batch read: ")
    assert err[2] == "  Index offset: 102, log offset: 103"
    # the batch at a good entry is bigger than --max-message-size: said, not raised
    rc, _, err = run_err("--max-message-size", "50", write(tmp_path, index, ".index"))
    assert rc == 0
    assert "  Index offset: 100, no batch read: the batch at position 0 is 76 bytes, more than " \
           "--max-message-size 50" in err


def test_index_sanity_check(tmp_path):
    _, index, timeindex = segment(tmp_path)
    idx = write(tmp_path, index, ".index")
    tix = write(tmp_path, timeindex, ".timeindex")
    rc, lines, err = run_err("--index-sanity-check", idx, tix)
    assert rc == 0 and err == []
    assert lines == [f"Dumping {idx}", f"{idx} passed sanity check.", f"Dumping {tix}",
                     f"{tix} passed sanity check."]
    write(tmp_path, index + b"\1\2\3", ".index")
    rc, lines, err = run_err("--index-sanity-check", idx)
    assert rc == 1 and lines == [f"Dumping {idx}"]
    assert err == [f"CorruptIndexException: Index file {idx} is corrupt, found {len(index) + 3} bytes which "
                   "is neither positive nor a multiple of 8"]
    write(tmp_path, index + struct.pack(">ii", -5, 0), ".index")
    rc, _, err = run_err("--index-sanity-check", idx)
    assert rc == 1 and "the last offset is 95 which is less than the base offset 100" in err[0]
    write(tmp_path, timeindex + struct.pack(">qi", 5, 1), ".timeindex")
    rc, _, err = run_err("--index-sanity-check", tix)
    assert rc == 1 and err == [
        f"CorruptIndexException: Corrupt time index found, time index file ({tix}) has non-zero size but the "
        "last timestamp is 5 which is less than the first timestamp 1524709879130"]
    empty = write(tmp_path, b"", ".index")
    assert run_err("--index-sanity-check", empty)[1] == [f"Dumping {empty}", f"{empty} is empty."]


def test_time_index_errors(tmp_path):
    segment(tmp_path)
    entries = [(1524709879130, 0), (1524709879129, 2), (9, 3), (9, 4), (50, 1)]
    tix = write(tmp_path, b"".join(struct.pack(">qi", t, o) for t, o in entries), ".timeindex")
    rc, lines, err = run_err("--verify-index-only", tix)
    assert rc == 0 and lines == [f"Dumping {tix}"]
    assert err == [
        f"Found timestamp mismatch in :{tix}",
        "  Index timestamp: 1524709879129, log timestamp: 6",
        "  Index timestamp: 9, log timestamp: 7",
        "  Index timestamp: 9, log timestamp: 8",
        f"Found out of order timestamp in :{tix}",
        "  Index timestamp: 1524709879129, Previously indexed timestamp: 1524709879130",
        "  Index timestamp: 9, Previously indexed timestamp: 1524709879129",
        "  Index timestamp: 9, Previously indexed timestamp: 9",
        "The following indexed offsets are not found in the log.",
        "Indexed offset: 101, found log offset: 102",
    ]


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_index_without_its_log(tmp_path, suffix):
    _, index, timeindex = segment(tmp_path)
    (tmp_path / f"{NAME}.log").unlink()
    path = write(tmp_path, index if suffix == ".index" else timeindex, suffix)
    rc, lines, err = run_err(path)
    assert rc == 0 and len(lines) > 1 and err[0].startswith(f"Could not read {tmp_path}/{NAME}.log to check")
    assert run_err(path, "--verify-index-only")[0] == 1


def test_unreadable_and_unknown_files(tmp_path):
    log = write(tmp_path, sample())
    missing = str(tmp_path / "missing.log")
    other = write(tmp_path, b"x", ".deleted")
    bad_snapshot = write(tmp_path, b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00", ".snapshot")
    rc, lines, err = run_err(missing, log, str(tmp_path), other, bad_snapshot)
    assert rc == 1
    assert lines[0] == f"Dumping {missing}" and lines[1] == f"Dumping {log}" and len(lines) == 10
    assert err == [f"Could not read {missing}: No such file or directory",
                   f"Could not read {tmp_path}: Is a directory", f"Ignoring unknown file {other}",
                   "Snapshot is corrupt (CRC is no longer valid). Stored crc: 0. Computed crc: "
                   f"{crc32c.crc32c(bytes(4))}"]


# -- .txnindex and transaction markers --------------------------------------------------------------

TXN_ENTRY = struct.Struct(">hqqqq")


def test_txn_index_lines_match_kafka(tmp_path):
    entries = [(0, 7, 100, 103, 104), (0, 2**40, 105, 110, 106)]
    path = write(tmp_path, b"".join(TXN_ENTRY.pack(*e) for e in entries), ".txnindex")
    rc, lines, err = run_err(path, "--index-sanity-check", "--verify-index-only")  # no effect, as in Kafka
    assert rc == 0 and err == []
    assert lines == [
        f"Dumping {path}",
        "version: 0 producerId: 7 firstOffset: 100 lastOffset: 103 lastStableOffset: 104",
        f"version: 0 producerId: {2**40} firstOffset: 105 lastOffset: 110 lastStableOffset: 106",
    ]
    _, lines = run(path, "--json")
    assert [json.loads(line) for line in lines] == [
        {"file": path},
        {"version": 0, "producerId": 7, "firstOffset": 100, "lastOffset": 103, "lastStableOffset": 104},
        {"version": 0, "producerId": 2**40, "firstOffset": 105, "lastOffset": 110, "lastStableOffset": 106},
    ]


def test_damaged_and_empty_txn_indexes(tmp_path):
    whole = TXN_ENTRY.pack(0, 7, 100, 103, 104)
    path = write(tmp_path, whole + whole[:10], ".txnindex")  # a torn write: Kafka reads whole entries only
    rc, lines, err = run_err(path)
    assert rc == 0 and lines[1:] == ["version: 0 producerId: 7 firstOffset: 100 lastOffset: 103 "
                                     "lastStableOffset: 104"]
    assert err == [f"Found 10 invalid bytes at the end of {NAME}.txnindex (a partial index entry)"]
    empty = write(tmp_path, b"", ".txnindex", name="00000000000000000200")
    assert run_err(empty) == (0, [f"Dumping {empty}"], [])  # Kafka prints nothing for it either
    bad = write(tmp_path, TXN_ENTRY.pack(1, 7, 100, 103, 104), ".txnindex", name="00000000000000000300")
    rc, lines, err = run_err(bad, path)  # Kafka's iterator throws on a newer version: reported, next file
    assert rc == 1 and lines[0] == f"Dumping {bad}" and lines[1] == f"Dumping {path}" and len(lines) == 3
    assert err[0].startswith(f"Could not read {bad}: ") and "version 1" in err[0]


def test_real_segment_with_a_committed_and_an_aborted_transaction(minibroker_factory):
    """A broker's own files: kafka-python commits one transaction and aborts the next; the markers print as
    Kafka's tool prints them and the .txnindex holds the abort."""
    import os

    from kafka import KafkaProducer

    runner = minibroker_factory({"transaction.state.log.num.partitions": "1"}, mode="thread")
    runner.create_topic("txn")
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, transactional_id="dump-log-txn")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("txn", key=b"k", value=b"committed", partition=0).get(timeout=20)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("txn", key=b"k", value=b"aborted", partition=0).get(timeout=20)  # written, then aborted
        producer.abort_transaction()
    finally:
        producer.close()
    runner.stop()
    directory = os.path.join(runner.data_dir, "txn-0")
    log, txnindex = (os.path.join(directory, f"{0:020d}{suffix}") for suffix in (".log", ".txnindex"))

    rc, lines, err = run_err(log, "--deep-iteration")
    assert rc == 0 and err == []
    batch_lines = lines[2::2]
    record_lines = lines[3::2]
    assert len(batch_lines) == len(record_lines) == 4
    pids = {int(line.split("producerId: ")[1].split()[0]) for line in batch_lines}
    assert len(pids) == 1 and min(pids) >= 0
    (pid,) = pids
    flags = [(line.split("isTransactional: ")[1].split()[0], line.split("isControl: ")[1].split()[0])
             for line in batch_lines]
    assert flags == [("true", "false"), ("true", "true")] * 2
    assert [line.split("baseOffset: ")[1].split()[0] for line in batch_lines] == ["0", "1", "2", "3"]
    assert record_lines[0].startswith("| offset: 0 CreateTime: ")
    assert record_lines[0].endswith(" keySize: 1 valueSize: 9 sequence: 0 headerKeys: []")
    assert record_lines[2].startswith("| offset: 2 CreateTime: ")
    assert record_lines[2].endswith(" keySize: 1 valueSize: 7 sequence: 1 headerKeys: []")
    # Kafka: " endTxnMarker: <type> coordinatorEpoch: <n>" right after the header keys of the record
    assert record_lines[1].startswith("| offset: 1 CreateTime: ")
    assert record_lines[1].endswith(" keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                                    "endTxnMarker: COMMIT coordinatorEpoch: 0")
    assert record_lines[3].startswith("| offset: 3 CreateTime: ")
    assert record_lines[3].endswith(" keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                                    "endTxnMarker: ABORT coordinatorEpoch: 0")
    _, data_lines = run(log, "--print-data-log")
    assert data_lines[3].endswith("headerKeys: [] key: k payload: committed")
    assert data_lines[5].endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")  # no key/payload for markers
    assert data_lines[7].endswith("headerKeys: [] key: k payload: aborted")

    rc, lines, err = run_err(txnindex)
    assert rc == 0 and err == []
    # the aborted transaction: from its record (2) to its marker (3); nothing else open: the LSO after it is 4
    assert lines == [f"Dumping {txnindex}",
                     f"version: 0 producerId: {pid} firstOffset: 2 lastOffset: 3 lastStableOffset: 4"]


def test_runs_as_module(tmp_path):
    import subprocess
    import sys

    path = write(tmp_path, sample())
    out = subprocess.run(
        [sys.executable, "-m", "minibroker.tools.dump_log", path], capture_output=True, text=True, check=True
    )
    assert "crc: 2857248333" in out.stdout
