"""The compose example's app: produce to minibroker and consume it back with kafka-python, by service name.

Reads BOOTSTRAP_SERVERS (default ``minibroker:9092``), TOPIC (default: a fresh ``compose-example-<id>``)
and COUNT (default 100); for a TLS or SASL listener (examples/compose-sasl-ssl) also SECURITY_PROTOCOL
(default PLAINTEXT), SSL_CAFILE (the CA to trust), SASL_MECHANISM, SASL_USERNAME and SASL_PASSWORD.
Exits 0 when every message it produced comes back, in order, with its key and headers; 1 otherwise.
Topics are auto-created (``auto.create.topics.enable``, on by default). The consumer assigns the
partition itself, so no consumer group is involved.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError


def log(msg: str) -> None:
    print(f"[app] {msg}", flush=True)


def wait_for_broker(bootstrap: str, deadline: float) -> None:
    # With `depends_on: condition: service_healthy` the broker is up already; wait anyway so the
    # example also works where that condition is ignored (podman-compose, plain `depends_on`).
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def security_settings() -> dict:
    """kafka-python's security arguments from the environment (none for PLAINTEXT)."""
    protocol = os.environ.get("SECURITY_PROTOCOL", "PLAINTEXT").upper()
    out: dict = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL") and os.environ.get("SSL_CAFILE"):
        out["ssl_cafile"] = os.environ["SSL_CAFILE"]
    if protocol.startswith("SASL_"):
        out.update(sasl_mechanism=os.environ.get("SASL_MECHANISM", "PLAIN"),
                   sasl_plain_username=os.environ.get("SASL_USERNAME"),
                   sasl_plain_password=os.environ.get("SASL_PASSWORD"))
    return out


def main() -> int:
    bootstrap = os.environ.get("BOOTSTRAP_SERVERS", "minibroker:9092")
    run_id = uuid.uuid4().hex[:12]
    topic = os.environ.get("TOPIC") or f"compose-example-{run_id}"
    count = int(os.environ.get("COUNT", "100"))
    deadline = time.monotonic() + 60
    t0 = time.monotonic()

    security = security_settings()
    wait_for_broker(bootstrap, deadline)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **security)
    sent = [(f"key-{i}".encode(), f"{run_id} message {i}".encode()) for i in range(count)]
    futures = [producer.send(topic, key=k, value=v, partition=0, headers=[("run", run_id.encode())])
               for k, v in sent]
    producer.flush(timeout=30)
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close(timeout=5)
    log(f"produced {count} messages to {topic} at {bootstrap} over {security['security_protocol']} "
        f"(offsets {offsets[0]}..{offsets[-1]})")

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=1000, **security)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, offsets[0])
    got: list[tuple[bytes, bytes]] = []
    while len(got) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=1000).values():
            for rec in batch:
                if dict(rec.headers).get("run") == run_id.encode():
                    got.append((rec.key, rec.value))
    consumer.close()

    if got != sent:
        log(f"FAILED: consumed {len(got)} of {count} messages (or out of order)")
        return 1
    log(f"consumed all {count} messages back in {time.monotonic() - t0:.2f} s: OK")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KafkaError, OSError) as e:
        log(f"FAILED: {type(e).__name__}: {e}")
        sys.exit(1)
