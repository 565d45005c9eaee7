"""A PySpark data source for minibroker (and any Kafka cluster): ``format("minibroker")``.

    from minibroker.spark import register
    register(spark)
    df = (spark.read.format("minibroker")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Batch and Structured Streaming, read and write, with the schema and options of Spark's Kafka
source and sink; built on the Python Data Source API (pyspark >= 4.1; read limits with 4.2+)
and confluent-kafka.
Install with ``pip install 'minibroker[spark]'`` (plus a Java 17+ runtime for Spark itself).
This package is the only part of minibroker that imports pyspark, and only when the data source
itself is asked for: its option parsing and offset planning (``.options``, ``.offsets``) import
without it.
"""

from __future__ import annotations

__all__ = ["MinibrokerDataSource", "kafka_schema", "register"]


def __getattr__(name: str):
    if name in ("MinibrokerDataSource", "kafka_schema"):
        from . import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark) -> None:
    """Register the "minibroker" format with a SparkSession."""
    from .source import MinibrokerDataSource

    spark.dataSource.register(MinibrokerDataSource)
