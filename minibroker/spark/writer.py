"""Batch and streaming writers: rows (as Arrow batches) to Kafka with a confluent-kafka Producer.

Columns as in Spark's Kafka sink: ``value`` (string or binary, required), ``key`` (string or binary),
``topic`` (string; the ``topic`` option wins over it), ``partition`` (int; null lets the producer's
partitioner pick, murmur2 of the key like the Java client), ``headers``
(array<struct<key: string, value: binary>>). Every task flushes and waits for all acknowledgements
before it reports success, so a batch Spark commits is in Kafka: at-least-once, as Spark's own sink.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from .options import SinkOptions


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    records: int


def validate_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """The checks Spark's Kafka sink makes on the DataFrame's columns."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "topic" in fields:
        if not isinstance(fields["topic"], StringType):
            raise ValueError(f"Topic type must be a string, got {fields['topic'].simpleString()}")
    elif topic_option is None:
        raise ValueError("topic option required when no 'topic' attribute is present. Use the topic option "
                         "for setting a topic.")
    if "value" not in fields:
        raise ValueError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise ValueError(f"{name} attribute type must be a string or binary, got "
                             f"{fields[name].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError(f"partition attribute type must be an int, got {fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise ValueError(f"headers attribute type must be array<struct<key:string,value:binary>>, got "
                             f"{h.simpleString()}")


def _as_bytes(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


def produce_batches(opts: SinkOptions, batches: Iterable) -> int:
    """Send every row of the Arrow batches; returns the count once all are acknowledged."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(opts.producer_config())
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None and not errors:
            errors.append(err)

    sent = 0
    for batch in batches:
        if errors:
            break
        names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows

        def col(name, n=n, names=names, batch=batch):
            i = names.get(name)
            return batch.column(i).to_pylist() if i is not None else [None] * n

        values, keys, partitions, headers = col("value"), col("key"), col("partition"), col("headers")
        topics = [opts.topic] * n if opts.topic is not None else col("topic")
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError("null topic present in the data. Use the topic option for setting a topic.")
            kwargs = {}
            if partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers[i]:
                kwargs["headers"] = [(h["key"], _as_bytes(h["value"])) for h in headers[i]]
            while True:
                try:
                    producer.produce(topic, value=_as_bytes(values[i]), key=_as_bytes(keys[i]),
                                     on_delivery=on_delivery, **kwargs)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.1)
            sent += 1
        producer.poll(0)
    remaining = producer.flush(300)
    if errors:
        raise KafkaException(errors[0])
    if remaining:
        raise RuntimeError(f"{remaining} records were not acknowledged by Kafka in time")
    return sent


class KafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions):
        self.opts = opts

    def write(self, iterator: Iterator) -> KafkaCommitMessage:
        return KafkaCommitMessage(produce_batches(self.opts, iterator))


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions):
        self.opts = opts

    def write(self, iterator: Iterator) -> KafkaCommitMessage:
        return KafkaCommitMessage(produce_batches(self.opts, iterator))

    def commit(self, messages, batchId: int) -> None:
        """Records are acknowledged by the tasks already (at-least-once)."""

    def abort(self, messages, batchId: int) -> None:
        """What was sent stays in Kafka; Spark runs the batch again (at-least-once)."""
