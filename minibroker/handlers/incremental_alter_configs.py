"""IncrementalAlterConfigs: v0-v1.

Behaviour: per resource, all-or-nothing, operations SET 0, DELETE 1, APPEND 2, SUBTRACT 3.
- TOPIC: applied to the topic's overrides (APPEND/SUBTRACT on list keys only, starting from
  the override or else Kafka's topic default, as Kafka does; otherwise 40), validated (40), persisted
  and applied to the live logs.
  Illegal name 17, unknown topic 3.
- BROKER: applied to this broker's dynamic layer (name = node.id) or the cluster default (empty
  name); only dynamic keys (42 otherwise; a key Kafka 4 removed is unknown, 40, but may be deleted),
  at Kafka's levels; topics follow live and TLS listeners are
  rebuilt (or the change refused, 40) as with AlterConfigs; SET of a key store at its current path
  reloads the file. ``min.insync.replicas`` as AlterConfigs has it (KIP-966: not per broker, the
  cluster-level value not removed).
- BROKER_LOGGER: SET a ``minibroker*`` or ``root`` Python logger to a Kafka level name (OFF,
  FATAL, ERROR, WARN, INFO, DEBUG, TRACE); DELETE resets it to inherit (not allowed for root,
  42); unknown logger or level 40; APPEND/SUBTRACT 42.
- GROUP: the group's config overrides (minibroker/coordinator/group_configs.py; the group need not
  exist): SET/DELETE of Kafka's group config keys, checked as Kafka's GroupConfig (unknown key, bad
  value, outside the broker's group.consumer.min/max.* bounds, session timeout not above the heartbeat
  interval: 40; APPEND/SUBTRACT 40, no key is a list), saved in minibroker-group-configs.json, in force
  for the next heartbeat. Empty name 42.
A key given twice is 42, a null value for SET/APPEND/SUBTRACT 42, a resource given twice 42.
``validate_only`` checks and changes nothing.
Authorization (with an authorizer), as Kafka: ALTER_CONFIGS on the topic (TOPIC), else
TOPIC_AUTHORIZATION_FAILED, on the group (GROUP), else GROUP_AUTHORIZATION_FAILED, or on the cluster
(BROKER, BROKER_LOGGER), else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v1 flexible; nothing else differs.
Gaps: as alter_configs (error code of a refused dynamic value, passwords saved as given).
"""

from __future__ import annotations

import logging

from minibroker.config import (
    AlterOp,
    ConfigType,
    alter_topic_configs,
    apply_list_op,
    check_list_op,
    dynamic_spec,
    format_value,
    parse_typed,
    split_listener_key,
)
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.alter_configs import alter_resources, set_broker_layer, set_topic_overrides
from minibroker.handlers.describe_configs import (
    BROKER,
    BROKER_LOGGER,
    GROUP,
    LOG_LEVELS,
    ROOT_LOGGER,
    TOPIC,
    check_broker_name,
    existing_topic,
    logger_names,
    unsupported_resource,
)
from minibroker.handlers.registry import handles


def _ops(resource) -> list[tuple[str, AlterOp, str | None]]:
    ops, seen = [], set()
    for c in resource.configs:
        if c.name in seen:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        seen.add(c.name)
        try:
            op = AlterOp(c.config_operation)
        except ValueError:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"Unknown alter config operation: {c.config_operation}"
            ) from None
        if op is not AlterOp.DELETE and c.value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}")
        ops.append((c.name, op, c.value))
    return ops


def _broker_layer(broker, per_broker: bool, ops) -> dict[str, str]:
    layer = dict(broker.config.dynamic_values(cluster_default=not per_broker))
    for name, op, value in ops:
        spec = dynamic_spec(name)
        if op is AlterOp.SET:
            layer[name] = value
        elif op is AlterOp.DELETE:
            layer.pop(name, None)
        else:
            check_list_op(name, spec, op)
            current = layer.get(name, _effective(broker, name))
            layer[name] = apply_list_op(op, parse_typed(ConfigType.LIST, current), value)
    return layer


def _effective(broker, name: str) -> str:
    """The value ``name`` has now, as text: a listener key falls back to the broker key it prefixes."""
    per_listener = split_listener_key(name)
    if per_listener is not None and per_listener[1] is None:
        value = broker.config.for_listener(per_listener[0], per_listener[2])
    else:
        value = broker.config[name]
    return format_value(dynamic_spec(name).type, value) or ""


def _loggers(ops, validate_only: bool) -> None:
    known = set(logger_names())
    changes = []
    for name, op, value in ops:
        if name not in known:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
        if op is AlterOp.SET:
            level = (value or "").upper()
            if level not in LOG_LEVELS:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {name} to {value} as it is not a supported log "
                    f"level. Valid log levels are {', '.join(LOG_LEVELS)}",
                )
            changes.append((name, LOG_LEVELS[level]))
        elif op is AlterOp.DELETE:
            if name == ROOT_LOGGER:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, "Removing the log level of the root logger is not allowed"
                )
            changes.append((name, logging.NOTSET))
        else:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"{op.name} operation is not allowed for the BROKER_LOGGER resource",
            )
    if not validate_only:
        for name, level in changes:
            (logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)).setLevel(level)


def _alter(broker, resource, validate_only: bool) -> None:
    ops = _ops(resource)
    rtype, name = resource.resource_type, resource.resource_name
    if rtype == TOPIC:
        info = existing_topic(broker, name)
        set_topic_overrides(broker, name, alter_topic_configs(info.configs, ops), validate_only)
    elif rtype == BROKER:
        per_broker = check_broker_name(broker, name)
        set_broker_layer(broker, per_broker, _broker_layer(broker, per_broker, ops), validate_only,
                         named={op_name for op_name, _, _ in ops})
    elif rtype == GROUP:
        broker.groups.configs.alter(name, ops, validate_only)
    elif rtype == BROKER_LOGGER:
        check_broker_name(broker, name)
        _loggers(ops, validate_only)
    else:
        raise unsupported_resource(rtype)


@handles(44, (0, 1))
def handle_incremental_alter_configs(broker, header, request):
    return alter_resources(broker, header, request, _alter)
