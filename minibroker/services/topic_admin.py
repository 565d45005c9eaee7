"""Creating, growing and deleting topics: the checks the admin handlers and auto-creation share.

The LogManager owns topics; this module only decides whether a change is legal, with Kafka's
error codes and wording (KRaft controller): 17 illegal name, 36 exists, 17 for a '.'/'_'
collision, 37 partitions, 38 replication factor, 39 replica assignment, 40 config, 42 a
malformed request. Validation never changes state, so validate-only requests run the same code.
"""

from __future__ import annotations

from typing import NamedTuple

from minibroker.errors import ErrorCode, KafkaError
from minibroker.services.topic_names import collision_key, validate_topic_name

MAX_PARTITIONS = 100_000


class NewTopic(NamedTuple):
    """A creation that passed every check: what the log manager will be asked for."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict  # overrides as given (strings), None values dropped


def topic_id_of(info) -> bytes:
    """The 16-byte topic id of a LogManager TopicInfo (``id``, or ``topic_id`` in older shapes)."""
    topic_id = getattr(info, "topic_id", None)
    return topic_id if topic_id is not None else info.id


def topic_name_for_id(broker, topic_id: bytes) -> str | None:
    logs = broker.logs
    lookup = getattr(logs, "topic_name_for_id", None) or logs.topic_name
    return lookup(topic_id)


def broker_ids(broker) -> set[int]:
    return {broker.node_id}


def check_assignments(
    broker, assignments, first_partition: int = 0, replication_factor: int | None = None
) -> int:
    """Check a manual replica assignment (one broker list per partition, in partition order);
    returns its replication factor. Raises INVALID_REPLICA_ASSIGNMENT as the controller does."""
    known = broker_ids(broker)
    rf = replication_factor
    for replicas in assignments:
        if not replicas:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        seen = set()
        for b in replicas:
            if b not in known:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {b}, but no such broker is registered.",
                )
            if b in seen:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {b} more than once.",
                )
            seen.add(b)
        if rf is None:
            rf = len(replicas)
        elif len(replicas) != rf:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(replicas)} "
                f"replica(s), but this is not consistent with previous partitions, which have "
                f"{rf} replica(s).",
            )
    return rf or 1


def check_new_topic(
    broker, name: str, partitions: int, replication_factor: int, configs: dict, assignments=None
) -> NewTopic:
    """Validate a topic creation (name, existence, partitions, replication, assignment, configs).

    ``assignments``: CreateTopics' list of (partition_index, broker_ids) structs, or None.
    """
    validate_topic_name(name)
    topics = broker.logs.topics
    if name in topics:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    key = collision_key(name)
    for existing in topics:
        if collision_key(existing) == key:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {existing}"
            )
    if assignments:
        if partitions != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        if replication_factor != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but replicationFactor was not set to -1.",
            )
        by_index = {}
        for a in assignments:
            if a.partition_index in by_index:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Partition {a.partition_index} is assigned more than once.",
                )
            by_index[a.partition_index] = list(a.broker_ids or ())
        for i in range(len(by_index)):
            if i not in by_index:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Partitions should be a consecutive 0-based integer sequence, but partition "
                    f"{i} is missing from the manual partition assignment.",
                )
        replication_factor = check_assignments(broker, [by_index[i] for i in range(len(by_index))])
        partitions = len(by_index)
    else:
        if partitions == -1:
            partitions = broker.config["num.partitions"]
        if partitions <= 0:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
            )
        if partitions > MAX_PARTITIONS:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions {partitions} is larger than the maximum {MAX_PARTITIONS}.",
            )
        if replication_factor == -1:
            replication_factor = broker.config["default.replication.factor"]
        if replication_factor <= 0:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        available = len(broker_ids(broker))
        if replication_factor > available:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only "
                f"{available} broker(s) are registered.",
            )
    return NewTopic(name, partitions, replication_factor, broker.validate_topic_configs(dict(configs or {})))


def create_topic(
    broker,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict,
    validate_only: bool = False,
    assignments=None,
):
    """Check and create; returns the new TopicInfo (None when ``validate_only``)."""
    new = check_new_topic(broker, name, partitions, replication_factor, configs, assignments)
    if validate_only:
        return None
    return broker.logs.create_topic(new.name, new.partitions, new.configs)


def check_new_partitions(broker, name: str, count: int, assignments=None) -> int:
    """Validate CreatePartitions for one topic; returns the current partition count."""
    info = broker.logs.topics.get(name)
    if info is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    current = info.partitions
    if count < current:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
        )
    if count == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count > MAX_PARTITIONS:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {count} is larger than the maximum {MAX_PARTITIONS}.",
        )
    if assignments is not None:
        adding = count - current
        if len(assignments) != adding:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {adding} additional partition(s), but only "
                f"{len(assignments)} assignment(s) were specified.",
            )
        check_assignments(broker, [list(a.broker_ids or ()) for a in assignments], replication_factor=1)
    return current


def delete_topic(broker, name: str) -> None:
    """Remove a topic and its files; forget its producer state (the log wakes its fetch waiters)."""
    info = broker.logs.topics.get(name)
    if info is None:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        )
    broker.logs.delete_topic(name)
    groups = vars(broker).get("groups")  # a group coordinator never built has no share group
    if groups is not None:  # every share group's state of the topic goes with it (KIP-932)
        groups.share.topic_deleted(bytes(info.id))
    replicas = vars(broker).get("replicas")  # one never built holds nothing of the topic
    if replicas is not None:
        for partition in range(info.partitions):
            replicas.forget_partition(name, partition)
            replicas.wake(name, partition)
