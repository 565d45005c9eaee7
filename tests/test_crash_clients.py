"""Issue 13: idempotent producers of real clients across kill -9 and clean restarts of the broker.

One producer (kafka-python, confluent-kafka) lives across every round: it sends numbered values
without pause while the broker is killed (SIGKILL) or stopped and started again on the same port
and data directory. Its client reconnects and retries in-flight batches with their sequence
numbers, so the broker has to rebuild each partition's producer state from the log (unclean
restart) or from its snapshot (clean restart) before the first idempotent append. At the end
every acknowledged value is in the log once, each partition holds its values in send order with
no value twice (retried batches are duplicates the broker must recognise), and each round saw a
value sent after the restart acknowledged (the producer was not locked out). A second test gives
each restart a fresh producer (a new producer id) on the partitions of the cut-off old one; a
third replays at the wire what a retry after a lost answer meets: the original offset as a
DUPLICATE_SEQUENCE_NUMBER, from replayed state (kill -9) and from the snapshot (clean stop).
"""

from __future__ import annotations

import collections
import itertools
import threading
import time

import pytest

from minibroker.testing import BrokerRunner

pytestmark = pytest.mark.slow

TOPIC = "crash-clients"
PARTITIONS = 2
ROUNDS = 24  # restarts: 20 after kill -9, 4 clean
ROUND_SECONDS = 0.3  # producing time per round before the broker goes down
ROUND_TIMEOUT = 15.0  # a round whose values are never acknowledged fails the test
MAX_UNACKED = 300  # the sender waits for acks beyond this many values in flight
BURST = 400  # values sent at once just before the broker goes down
BURST_HEAD_START = 0.005  # seconds the broker gets to take some of them
CLEAN_EVERY = 6  # every sixth restart is a clean stop() + start(); the others follow kill -9


class KafkaPythonClient:
    name = "kafka-python"

    def __init__(self, bootstrap: str):
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            retry_backoff_ms=20,
            reconnect_backoff_ms=20,
            reconnect_backoff_max_ms=200,
        )
        self.acked: dict[int, int] = {}  # value -> offset
        self.errors: list[tuple[int, str]] = []
        self._lock = threading.Lock()  # callbacks run on the producer's I/O thread

    def send(self, value: int) -> None:
        future = self.producer.send(TOPIC, str(value).encode(), partition=value % PARTITIONS)
        future.add_callback(self._ok, value)
        future.add_errback(self._failed, value)

    def _ok(self, value, metadata) -> None:
        with self._lock:
            self.acked[value] = metadata.offset

    def _failed(self, value, exc) -> None:
        with self._lock:
            self.errors.append((value, repr(exc)))

    def poll(self) -> None:
        pass

    def finish(self, timeout: float = 60) -> bool:
        """Wait for every value's outcome; False when some have none after ``timeout`` seconds."""
        from kafka.errors import KafkaTimeoutError

        try:
            self.producer.flush(timeout)
        except KafkaTimeoutError:
            return False
        return True

    def close(self) -> None:
        """At once, abandoning batches still pending (a producer cut off, or a failed test)."""
        from kafka.errors import KafkaTimeoutError

        try:
            self.producer.close(0)
        except KafkaTimeoutError:  # kafka-python 3.0's close(0) raises while batches are pending
            self.producer._sender.force_close()
            self.producer._sender.join(10)
            self.producer._closed = True


class ConfluentClient:
    name = "confluent-kafka"

    def __init__(self, bootstrap: str):
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "retry.backoff.ms": 20,
                "retry.backoff.max.ms": 200,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                "log.connection.close": False,
                "metadata.recovery.strategy": "none",
                "log_level": 0,  # the refused connections while the broker is down are expected
            }
        )
        self.acked: dict[int, int] = {}
        self.errors: list[tuple[int, str]] = []

    def send(self, value: int) -> None:
        self.producer.produce(
            TOPIC, str(value).encode(), partition=value % PARTITIONS, on_delivery=self._delivered
        )

    def _delivered(self, err, msg) -> None:
        value = int(msg.value())
        if err is None:
            self.acked[value] = msg.offset()
        else:
            self.errors.append((value, str(err)))

    def poll(self) -> None:
        self.producer.poll(0)

    def finish(self, timeout: float = 60) -> bool:
        return self.producer.flush(timeout) == 0

    def close(self) -> None:
        self.producer.purge()
        self.producer.flush(1)


def consume_all(bootstrap: str) -> dict[int, list[int]]:
    """Every value of every partition of TOPIC, in log order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read to the end offsets {ends}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend(int(r.value) for r in records)
        return out
    finally:
        consumer.close()


def check_log(client, sent: int, contents: dict[int, list[int]]) -> None:
    """Acknowledged values present once; no value twice; each partition in send order."""
    for partition, values in contents.items():
        assert all(v % PARTITIONS == partition for v in values)
        assert all(0 <= v < sent for v in values)
        dupes = sorted(v for v, n in collections.Counter(values).items() if n > 1)
        assert not dupes, f"{client.name}: partition {partition} holds values twice: {dupes[:20]}"
        disorder = [(a, b) for a, b in itertools.pairwise(values) if a >= b]
        assert not disorder, f"{client.name}: partition {partition} out of send order at {disorder[:10]}"
    present = {v for values in contents.values() for v in values}
    missing = sorted(set(client.acked) - present)
    assert not missing, f"{client.name}: {len(missing)} acknowledged values lost, e.g. {missing[:20]}"
    # and each at the offset its acknowledgement gave
    for partition, values in contents.items():
        offsets = {v: i for i, v in enumerate(values)}  # topic never truncated: offset == index
        wrong = [(v, o, offsets[v]) for v, o in client.acked.items() if v % PARTITIONS == partition
                 and offsets[v] != o]
        assert not wrong, f"{client.name}: acknowledged at another offset (value, ack, log): {wrong[:10]}"


def assert_clean_broker_log(broker: BrokerRunner) -> None:
    text = broker.log_text()
    for bad in ("Traceback", "--- Logging error ---"):
        assert bad not in text, f"broker log has {bad!r}:\n" + _around(text, bad)


def _around(text: str, needle: str, lines: int = 40) -> str:
    all_lines = text.splitlines()
    at = next(i for i, line in enumerate(all_lines) if needle in line)
    return "\n".join(all_lines[max(0, at - 5) : at + lines])


def run_rounds(broker: BrokerRunner, client, rounds: int = ROUNDS) -> tuple[int, list[int]]:
    """Produce through ``rounds`` restarts; returns (values sent, acks of each round's own values)."""
    sent = 0
    acks_per_round: list[int] = []
    for r in range(rounds + 1):
        first = sent  # values from here on were first sent to this broker incarnation
        started = time.monotonic()
        while True:
            own_acks = sum(1 for v in list(client.acked) if v >= first)
            now = time.monotonic()
            if now - started >= ROUND_SECONDS and own_acks:
                break
            if now - started >= ROUND_TIMEOUT:
                after = "first" if r == 0 else "clean restart" if r % CLEAN_EVERY == 0 else "kill -9"
                pytest.fail(
                    f"{client.name}: round {r} ({after}):"
                    f" none of the values {first}..{sent - 1} acknowledged in {ROUND_TIMEOUT} s;"
                    f" {len(client.acked)} acknowledged in all, errors {client.errors[-5:]}\n"
                    + broker.log_text()[-6000:]
                )
            if sent - len(client.acked) - len(client.errors) < MAX_UNACKED:
                client.send(sent)
                sent += 1
            client.poll()
            time.sleep(0.001)
        acks_per_round.append(own_acks)
        if r == rounds:
            break
        for _ in range(BURST):  # the broker goes down with a backlog, retried after the restart
            client.send(sent)
            sent += 1
        client.poll()
        time.sleep(BURST_HEAD_START)
        if (r + 1) % CLEAN_EVERY == 0:
            broker.stop()
        else:
            broker.kill()  # mid-stream: batches are in flight
        broker.start()
    return sent, acks_per_round


@pytest.mark.parametrize(
    "client_class, log_level",
    [(KafkaPythonClient, "DEBUG"), (ConfluentClient, "INFO")],
    ids=["kafka-python", "confluent-kafka"],
)
def test_idempotent_producer_survives_kill_and_restart_rounds(client_class, log_level):
    broker = BrokerRunner(mode="process", log_level=log_level)
    try:
        broker.start()
        broker.create_topic(TOPIC, partitions=PARTITIONS)
        client = client_class(broker.bootstrap_servers)
        try:
            sent, acks_per_round = run_rounds(broker, client)
            deliver(broker, client)
        finally:
            client.close()
        assert len(acks_per_round) == ROUNDS + 1 and all(acks_per_round), acks_per_round
        assert not client.errors, f"{client.name}: delivery failures {client.errors[:10]}"
        assert len(client.acked) == sent  # nothing left undelivered after the final flush
        check_log(client, sent, consume_all(broker.bootstrap_servers))
        assert_clean_broker_log(broker)
    finally:
        broker.cleanup()


def deliver(broker: BrokerRunner, client, timeout: float = 60) -> None:
    if not client.finish(timeout):
        pytest.fail(f"{client.name}: values undelivered after {timeout} s\n" + broker.log_text()[-6000:])


@pytest.mark.parametrize("client_class", [KafkaPythonClient, ConfluentClient],
                         ids=["kafka-python", "confluent-kafka"])
def test_new_producer_writes_after_restart_to_partitions_of_old_one(client_class):
    """After each restart a fresh producer (a new producer id, sequences from 0) writes to the
    partitions an earlier producer wrote; that producer was cut off with batches in flight, and
    its id is in the replayed state (kill -9) or in the snapshot (clean stop)."""
    broker = BrokerRunner(mode="process", log_level="DEBUG")
    try:
        broker.start()
        broker.create_topic(TOPIC, partitions=PARTITIONS)
        sent = 0
        acked: dict[int, int] = {}
        for how in ("kill", "kill", "stop", "kill", None):
            client = client_class(broker.bootstrap_servers)
            try:
                for _ in range(40):
                    client.send(sent)
                    sent += 1
                    client.poll()
                deliver(broker, client, ROUND_TIMEOUT)  # the first write after a restart succeeds
                assert not client.errors, f"{client.name}: {client.errors[:10]}"
                assert sum(1 for v in client.acked if v >= sent - 40) == 40
                acked.update(client.acked)
                if how is None:
                    break
                for _ in range(20):  # cut off with these in flight: written or not, never twice
                    client.send(sent)
                    sent += 1
                client.poll()
                broker.kill() if how == "kill" else broker.stop()
            finally:
                client.close()
            acked.update(client.acked)
            broker.start()
        client.acked = acked
        check_log(client, sent, consume_all(broker.bootstrap_servers))
        assert_clean_broker_log(broker)
        assert "producer state rebuilt from" in broker.log_text()  # the replay ran (and logged)
    finally:
        broker.cleanup()


def test_retried_batches_are_duplicates_after_kill_and_clean_restart():
    """What a client's retry after a lost answer meets, at the wire: a batch the broker appended
    before it died comes back as DUPLICATE_SEQUENCE_NUMBER with its original offset (state
    replayed from the log after kill -9, or read from the snapshot after a clean stop), the next
    sequence is appended, a gap or a batch older than the last five is out of order."""
    from minibroker.records import build_records
    from minibroker.tools.wire import WireClient

    broker = BrokerRunner(mode="process", log_level="DEBUG")

    def init_pid() -> int:
        with WireClient("127.0.0.1", broker.port) as c:
            return c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 1000}).producer_id

    def batch(pid: int, seq: int, n: int = 2) -> bytes:
        # timestamps of now: a producer whose last batch is older than producer.id.expiration.ms (a
        # day) is forgotten when a snapshot is loaded, as in Kafka
        now = int(time.time() * 1000)
        rows = [(i, now, None, b"%d-%d" % (pid, seq + i)) for i in range(n)]
        return build_records(2, rows, producer_id=pid, producer_epoch=0, base_sequence=seq)

    def produce(records: bytes) -> tuple[int, int]:
        with WireClient("127.0.0.1", broker.port) as c:
            body = {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
            }
            r = c.request(0, 9, body).responses[0].partition_responses[0]
            return r.error_code, r.base_offset

    try:
        broker.start()
        broker.create_topic(TOPIC, partitions=1)
        a, b = init_pid(), init_pid()
        offsets = {}
        for seq in range(0, 14, 2):  # seven batches of producer a, one of b between them
            offsets[a, seq] = produce(batch(a, seq))[1]
            if seq == 6:
                offsets[b, 0] = produce(batch(b, 0, 3))[1]
        assert sorted(offsets.values()) == [0, 2, 4, 6, 8, 11, 13, 15]

        broker.kill()
        broker.start()  # producer state replayed from the log
        for seq in range(4, 14, 2):  # the last five batches of a
            assert produce(batch(a, seq)) == (46, offsets[a, seq])
        assert produce(batch(b, 0, 3)) == (46, offsets[b, 0])
        assert produce(batch(a, 2))[0] == 45  # older than the five kept
        assert produce(batch(a, 16))[0] == 45  # a gap
        assert produce(batch(a, 14)) == (0, 17)
        assert produce(batch(b, 3)) == (0, 19)

        broker.stop()
        broker.start()  # clean: the snapshot holds each producer's last batch
        assert produce(batch(a, 14)) == (46, 17)
        assert produce(batch(b, 3)) == (46, 19)
        assert produce(batch(a, 16)) == (0, 21)

        broker.kill()
        broker.start()  # the snapshot, then the log after it
        assert produce(batch(a, 16)) == (46, 21)
        assert produce(batch(b, 3)) == (46, 19)
        assert produce(batch(a, 18)) == (0, 23)
        values = [r.value for r in broker.consume(TOPIC, 25, timeout=10)]
        assert len(values) == 25 and len(set(values)) == 25
        assert values[:2] == [b"%d-0" % a, b"%d-1" % a] and values[-1] == b"%d-19" % a
        assert_clean_broker_log(broker)
    finally:
        broker.cleanup()
