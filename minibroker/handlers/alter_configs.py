"""AlterConfigs: v0-v2 (the legacy, whole-set form).

Behaviour: each resource is handled on its own and all-or-nothing.
- TOPIC: the given entries replace every override of the topic; they are validated as Kafka does
  (unknown key or bad value 40), persisted in the topics file and applied to the live partition
  logs. Illegal name 17, unknown topic 3.
- BROKER: the given entries replace the dynamic layer of this broker (resource name = node.id)
  or the cluster-wide dynamic default (empty name); only keys Kafka can change dynamically are
  accepted (others 42, bad values 40). Topics without an override follow the change live
  (``log.segment.bytes``, ``log.retention.ms``, ``message.max.bytes`` ...).
Null values are rejected (42 "Null value not supported"), a key given twice is 42, a resource
given twice is 42. ``validate_only`` checks and changes nothing.
Authorization (with an authorizer), as Kafka: ALTER_CONFIGS on the topic (TOPIC), else
TOPIC_AUTHORIZATION_FAILED, or on the cluster (BROKER, BROKER_LOGGER), else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v2 flexible; nothing else differs.
Gaps: dynamic broker values live in memory only and are lost on restart (Kafka keeps them in the
metadata log); BROKER_LOGGER is only served by IncrementalAlterConfigs, as in Kafka.
"""

from __future__ import annotations

from minibroker.config import BROKER_CONFIGS, validate_topic_configs
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.describe_configs import (
    BROKER,
    TOPIC,
    check_broker_name,
    check_config_access,
    existing_topic,
    unsupported_resource,
)
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation


def check_broker_value(key: str, value: str | None) -> None:
    """What BrokerConfig.set_dynamic would refuse, without changing anything."""
    spec = BROKER_CONFIGS.get(key)
    if spec is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {key}")
    if not spec.dynamic:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {key}")
    if value is not None:
        try:
            spec.parse(value)
        except ValueError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Invalid value {value} for configuration {key}: {e}") from None


def set_broker_layer(broker, per_broker: bool, new: dict[str, str], validate_only: bool) -> None:
    """Replace one dynamic layer with ``new`` (validated first), then refresh the live logs."""
    for key, value in new.items():
        check_broker_value(key, value)
    if validate_only:
        return
    cfg = broker.config
    for key in cfg.dynamic_values(cluster_default=not per_broker):
        if key not in new:
            cfg.set_dynamic(key, None, cluster_default=not per_broker)
    for key, value in new.items():
        cfg.set_dynamic(key, value, cluster_default=not per_broker)
    broker.save_dynamic_configs()
    refresh_topic_configs(broker)


def refresh_topic_configs(broker) -> None:
    """Re-derive every topic's effective config (after a broker default changed) and apply it."""
    logs = broker.logs
    for name, info in logs.topics.items():
        effective = logs.effective_config(name)
        for partition in range(info.partitions):
            try:
                logs.get_log(name, partition).update_config(effective)
            except KafkaError:
                continue


def set_topic_overrides(broker, name: str, overrides: dict[str, str], validate_only: bool) -> None:
    validate_topic_configs(overrides)
    if not validate_only:
        broker.logs.alter_topic_configs(name, overrides)


def unique_resources(resources) -> set[tuple[int, str]]:
    """(type, name) of resources named more than once in one request."""
    seen, dup = set(), set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (dup if key in seen else seen).add(key)
    return dup


def result(resource, code: int = 0, message: str | None = None) -> Struct:
    return Struct(error_code=int(code), error_message=message, resource_type=resource.resource_type,
                  resource_name=resource.resource_name)


def alter_resources(request, alter) -> Struct:
    """The answer both AlterConfigs APIs share: ``alter(resource, validate_only)`` per resource,
    a duplicated resource refused, one resource's error never failing the others."""
    duplicates = unique_resources(request.resources)
    responses = []
    for resource in request.resources:
        if (resource.resource_type, resource.resource_name) in duplicates:
            responses.append(result(resource, ErrorCode.INVALID_REQUEST, "Duplicate resource."))
            continue
        try:
            alter(resource, bool(request.validate_only))
        except KafkaError as e:
            responses.append(result(resource, e.code, e.message))
        else:
            responses.append(result(resource))
    return Struct(throttle_time_ms=0, responses=responses)


def _alter(broker, resource, validate_only: bool) -> None:
    new: dict[str, str] = {}
    for c in resource.configs:
        if c.name in new:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        if c.value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}")
        new[c.name] = c.value
    if resource.resource_type == TOPIC:
        existing_topic(broker, resource.resource_name)
        set_topic_overrides(broker, resource.resource_name, new, validate_only)
    elif resource.resource_type == BROKER:
        per_broker = check_broker_name(broker, resource.resource_name)
        set_broker_layer(broker, per_broker, new, validate_only)
    else:
        raise unsupported_resource(resource.resource_type)


@handles(33, (0, 2))
def handle_alter_configs(broker, header, request):
    def alter(resource, validate_only: bool) -> None:
        check_config_access(broker, header, AclOperation.ALTER_CONFIGS, resource)
        _alter(broker, resource, validate_only)

    return alter_resources(request, alter)
