"""Topic configuration: overrides checked (CreateTopics, AlterConfigs), IncrementalAlterConfigs'
operations applied, effective values and DescribeConfigs entries of a topic resource."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from minibroker.config.keys import (
    REMOVED_TOPIC_KEYS,
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigKey,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    format_value,
    parse_typed,
)
from minibroker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from minibroker.config.broker import BrokerConfig

__all__ = [
    "AlterOp",
    "alter_topic_configs",
    "apply_list_op",
    "check_list_op",
    "describe_topic_configs",
    "effective_topic_config",
    "validate_topic_configs",
]


class AlterOp(IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3



def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse topic overrides; unknown names and bad values raise KafkaError(INVALID_CONFIG) with
    Kafka's wording. A None value (CreateTopics' nullable value) is dropped."""
    typed: dict[str, Any] = {}
    for name, raw in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if raw is None:
            continue
        try:
            typed[name] = spec.parse(raw)
        except ValueError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Invalid value {raw} for configuration {name}: {e}") from None
    return typed


def effective_topic_config(broker: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, Any]:
    """Every topic key's typed effective value: the override, else the broker synonym, else Kafka's
    topic default. Raises KafkaError(INVALID_CONFIG) for bad overrides."""
    result = broker.topic_defaults()
    result.update(validate_topic_configs(overrides))
    return result


def describe_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str],
                           keys: Iterable[str] | None = None,
                           *, include_synonyms: bool = True,
                           include_documentation: bool = True) -> list[ConfigEntry]:
    """DescribeConfigs entries for a topic resource (all topic keys when ``keys`` is None; unknown
    names are skipped, as Kafka does)."""
    typed = validate_topic_configs(overrides)
    names = list(TOPIC_CONFIGS) if keys is None else [k for k in keys if k in TOPIC_CONFIGS]
    entries = []
    for name in names:
        if name in REMOVED_TOPIC_KEYS and name not in typed:
            continue  # Kafka 4 does not define it: listed only when the topic sets it
        spec = TOPIC_CONFIGS[name]
        value, synonyms = broker._topic_default(name)
        if name in typed:
            value = typed[name]
            synonyms.insert(0, ConfigSynonym(name, format_value(spec.type, value),
                                             ConfigSource.DYNAMIC_TOPIC_CONFIG))
        entries.append(ConfigEntry(
            name, format_value(spec.type, value),
            synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            read_only=False, sensitive=False, synonyms=synonyms if include_synonyms else [],
            config_type=spec.type, documentation=spec.doc if include_documentation else None))
    return entries


def alter_topic_configs(current: Mapping[str, str],
                        ops: Iterable[tuple[str, AlterOp | int, str | None]]) -> dict[str, str]:
    """Apply IncrementalAlterConfigs operations to a topic's stored overrides and return the new
    overrides (validated). APPEND/SUBTRACT work on list keys only, starting from the topic default."""
    new = dict(current)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        seen.add(name)
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        op = AlterOp(op)
        if op is AlterOp.DELETE:
            new.pop(name, None)
            continue
        if value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
        if op is AlterOp.SET:
            new[name] = value
            continue
        check_list_op(name, spec, op)
        items = parse_typed(ConfigType.LIST, new[name]) if name in new else list(spec.default)
        new[name] = apply_list_op(op, items, value)
    validate_topic_configs(new)
    return new


def check_list_op(name: str, spec: ConfigKey | None, op: AlterOp) -> None:
    """IncrementalAlterConfigs APPEND/SUBTRACT: Kafka allows them on list keys only."""
    if spec is None or spec.type is not ConfigType.LIST:
        verb = "append" if op is AlterOp.APPEND else "subtract"
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Config value {verb} is not allowed for config key: {name}")


def apply_list_op(op: AlterOp, items: list[str], value: str) -> str:
    """``items`` with ``value`` (a comma list) appended (new entries only) or subtracted."""
    changes = parse_typed(ConfigType.LIST, value)
    if op is AlterOp.APPEND:
        items = items + [c for c in changes if c not in items]
    else:
        items = [i for i in items if i not in changes]
    return ",".join(items)

