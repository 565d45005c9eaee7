"""The records of __transaction_state, byte for byte against Kafka's TransactionLogKey/Value schemas."""

from __future__ import annotations

import struct

import pytest

from minibroker.coordinator.transaction_records import (
    RecordError,
    TransactionLogKey,
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    record_version,
)

ONGOING = TransactionLogValue(
    producer_id=1000,
    producer_epoch=5,
    transaction_timeout_ms=60000,
    transaction_status=TransactionState.ONGOING,
    transaction_partitions=(TxnPartitions("t", (0, 1)),),
    transaction_last_update_timestamp_ms=1700000000000,
    transaction_start_timestamp_ms=1699999999000,
)


def test_key_v0_bytes():
    # int16 version 0, then the transactional id as an int16-length string
    assert encode_key("tx") == b"\x00\x00" + b"\x00\x02" + b"tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == TransactionLogKey("tx")
    assert decode_key(b"\x00\x01\x00\x02tx") is None  # no key v1: Kafka's UnknownKey
    assert record_version(b"\x00\x01\x00\x02tx") == 1


def test_value_v0_bytes():
    expected = bytes.fromhex(
        "0000"  # version 0
        "00000000000003e8"  # producerId 1000
        "0005"  # producerEpoch 5
        "0000ea60"  # transactionTimeoutMs 60000
        "01"  # transactionStatus Ongoing
        "00000001"  # transactionPartitions: 1 entry
        "0001" "74"  # topic "t"
        "00000002" "00000000" "00000001"  # partitionIds [0, 1]
    ) + struct.pack(">qq", 1700000000000, 1699999999000)  # last update, start
    assert encode_value(ONGOING) == expected
    assert decode_value(expected) == ONGOING


def test_value_v1_flexible_bytes_with_tagged_fields():
    value = ONGOING._replace(next_producer_id=2000, client_transaction_version=2)
    expected = bytes.fromhex(
        "0001"  # version 1 (flexible)
        "00000000000003e8" "0005" "0000ea60" "01"
        "02"  # compact array: 1 entry (+1)
        "02" "74"  # compact string "t"
        "03" "00000000" "00000001"  # compact array of 2 int32 (+1)
        "00"  # the entry's tagged fields: none
    ) + struct.pack(">qq", 1700000000000, 1699999999000) + bytes.fromhex(
        "02"  # two tagged fields, in tag order; previousProducerId (tag 0) is the default -1: not written
        "01" "08" "00000000000007d0"  # tag 1 nextProducerId = 2000, 8 bytes
        "02" "02" "0002"  # tag 2 clientTransactionVersion = 2, 2 bytes
    )
    assert encode_value(value, 1) == expected
    assert decode_value(expected) == value
    # v1 without tagged fields: an empty tag section; v0 never writes them
    plain = encode_value(ONGOING, 1)
    assert plain.endswith(struct.pack(">qq", 1700000000000, 1699999999000) + b"\x00")
    assert encode_value(value, 0) == encode_value(ONGOING, 0)


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("value", [
    ONGOING,
    ONGOING._replace(transaction_status=TransactionState.PREPARE_COMMIT,
                     transaction_partitions=(TxnPartitions("orders", (0, 2, 7)),
                                             TxnPartitions("b" * 300, ()))),  # a 2-byte varint length
    ONGOING._replace(transaction_status=TransactionState.EMPTY, transaction_partitions=None,
                     producer_epoch=-1),
    ONGOING._replace(transaction_status=TransactionState.COMPLETE_ABORT, transaction_partitions=(),
                     transaction_start_timestamp_ms=-1),
    ONGOING._replace(transaction_partitions=(TxnPartitions("t\u00e9", (2**31 - 1,)),), producer_id=2**63 - 1),
])
def test_round_trip(version, value):
    data = encode_value(value, version)
    assert record_version(data) == version
    got = decode_value(data)
    if version == 0:
        value = value._replace(previous_producer_id=-1, next_producer_id=-1, client_transaction_version=0)
    assert got == value


def test_round_trip_of_every_tagged_field_and_unknown_tags():
    value = ONGOING._replace(previous_producer_id=7, next_producer_id=8, client_transaction_version=2,
                             unknown_tags=((5, b"\x01\x02"), (40, b"")))
    data = encode_value(value, 1)
    assert decode_value(data) == value
    assert encode_value(decode_value(data), 1) == data


def test_empty_state_writes_null_partitions():
    empty = ONGOING._replace(transaction_status=TransactionState.EMPTY, transaction_partitions=())
    assert decode_value(encode_value(empty)).transaction_partitions is None
    data = encode_value(empty)
    assert data[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"  # null array
    assert encode_value(empty, 1)[2 + 8 + 2 + 4 + 1] == 0  # compact null
    with pytest.raises(ValueError):
        encode_value(ONGOING._replace(transaction_status=TransactionState.EMPTY))


def test_bad_values_are_record_errors():
    with pytest.raises(RecordError, match="Unknown version 2"):
        decode_value(b"\x00\x02" + encode_value(ONGOING)[2:])
    data = encode_value(ONGOING)
    for cut in (1, 5, 20, len(data) - 1):
        with pytest.raises(RecordError):
            decode_value(data[:cut])
    with pytest.raises(RecordError):
        decode_key(b"\x00\x00\xff\xff")  # a null transactional id
    with pytest.raises(ValueError):
        encode_value(ONGOING, 2)


def test_state_names_are_kafkas():
    assert [str(s) for s in TransactionState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence",
    ]
