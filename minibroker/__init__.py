"""minibroker: a single-node Kafka-compatible broker on asyncio."""

__version__ = "0.1.0"
