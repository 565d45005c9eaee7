"""``MinibrokerDataSource``: the "minibroker" format, Spark's Kafka source and sink in Python."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import parse_sink_options, parse_source_options


def kafka_schema(include_headers: bool = False) -> StructType:
    """The columns of Spark's Kafka source (all nullable, as there)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class MinibrokerDataSource(DataSource):
    """Read and write Kafka topics (minibroker or any Kafka cluster) from Spark.

    ``spark.read.format("minibroker").option("kafka.bootstrap.servers", ...).option("subscribe", "t")``;
    the options and columns are those of Spark's Kafka source and sink.
    """

    @classmethod
    def name(cls) -> str:
        return "minibroker"

    def _include_headers(self) -> bool:
        raw = next((str(v) for k, v in self.options.items() if k.lower() == "includeheaders"), "false")
        return raw.strip().lower() == "true"

    def schema(self) -> StructType:
        return kafka_schema(self._include_headers())

    def reader(self, schema: StructType):
        from .reader import KafkaBatchReader

        return KafkaBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType):
        from .reader import KafkaStreamReader

        return KafkaStreamReader(parse_source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .writer import KafkaBatchWriter, validate_sink_schema

        if overwrite:
            raise ValueError("Save mode overwrite not allowed for Kafka: records can only be appended to a "
                             'topic. Use .mode("append").')
        opts = parse_sink_options(self.options)
        validate_sink_schema(schema, opts.topic)
        return KafkaBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .writer import KafkaStreamWriter, validate_sink_schema

        opts = parse_sink_options(self.options)
        validate_sink_schema(schema, opts.topic)
        return KafkaStreamWriter(opts)
