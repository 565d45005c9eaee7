"""Creating topics: the checks CreateTopics and auto-creation share, then the log manager.

The LogManager owns topics; this module only decides whether a creation is legal, with
Kafka's error codes: 17 illegal name, 36 exists (also for a '.'/'_' collision, as Kafka
reports it as INVALID_TOPIC_EXCEPTION), 37 partitions, 38 replication factor, 40 config.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.topic_names import collision_key, validate_topic_name

MAX_PARTITIONS = 100_000


def check_new_topic(broker, name: str, partitions: int, replication_factor: int, configs: dict) -> tuple[int, dict]:
    """Validate a topic creation; returns (partitions, validated config overrides)."""
    validate_topic_name(name)
    topics = broker.logs.topics
    if name in topics:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    key = collision_key(name)
    for existing in topics:
        if collision_key(existing) == key:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topic: {existing}")
    if partitions == -1:
        partitions = broker.config["num.partitions"]
    if partitions <= 0 or partitions > MAX_PARTITIONS:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor not in (-1, 1):
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication_factor} larger than available brokers: 1.")
    return partitions, broker.validate_topic_configs(configs)


def create_topic(broker, name: str, partitions: int, replication_factor: int, configs: dict,
                 validate_only: bool = False):
    partitions, configs = check_new_topic(broker, name, partitions, replication_factor, configs)
    if validate_only:
        return None
    return broker.logs.create_topic(name, partitions, configs)
