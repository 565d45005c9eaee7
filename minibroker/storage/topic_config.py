"""Topic-level settings the storage engine uses, with Kafka's names, defaults and broker synonyms.

A topic's effective value of ``key`` is, first found wins: the topic's override, the same
topic-level key in the broker config mapping (lets callers pass plain topic-level dicts), the
broker-level synonym (``log.segment.bytes`` ...), Kafka's default. Values may arrive as strings
(CreateTopics / AlterConfigs send strings); numeric ones are converted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minibroker.config import BROKER_CONFIGS, TOPIC_CONFIG_SYNONYMS, TOPIC_CONFIGS
from minibroker.config import effective_topic_config as _broker_effective_topic_config

__all__ = ["TOPIC_DEFAULTS", "BROKER_SYNONYMS", "effective_topic_config", "broker_setting"]

# One table of topic settings for the whole broker: minibroker.config's (Kafka's names, defaults
# and broker synonyms in Kafka's order). Storage only adds the plain-mapping lookup below.
TOPIC_DEFAULTS: dict[str, Any] = {name: key.default for name, key in TOPIC_CONFIGS.items()}
BROKER_SYNONYMS = TOPIC_CONFIG_SYNONYMS



def _lookup(mapping: Mapping[str, Any] | None, key: str) -> Any:
    if mapping is None:
        return None
    try:
        return mapping[key] if key in mapping else None
    except (KeyError, TypeError):
        return None


def _convert(key: str, value: Any) -> Any:
    default = TOPIC_DEFAULTS.get(key)
    if isinstance(default, bool):
        return value if isinstance(value, bool) else str(value).strip().lower() == "true"
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


def effective_topic_config(broker_config: Mapping[str, Any] | None,
                           overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every topic-level key's effective value (plus any extra override keys, unconverted)."""
    if hasattr(broker_config, "topic_defaults"):  # a BrokerConfig: its own parsing and synonym rules
        return _broker_effective_topic_config(broker_config, overrides or {})
    result: dict[str, Any] = {}
    for key, default in TOPIC_DEFAULTS.items():
        value = _lookup(overrides, key)
        if value is None:
            value = _lookup(broker_config, key)
        if value is None:
            for broker_key, factor in BROKER_SYNONYMS.get(key, ()):
                raw = _lookup(broker_config, broker_key)
                if raw is not None:
                    value = int(raw) * factor if factor != 1 else raw
                    break
        result[key] = default if value is None else _convert(key, value)
    for key, value in (overrides or {}).items():
        if key not in result and value is not None:
            result[key] = value
    return result


def broker_setting(broker_config: Mapping[str, Any] | None, key: str) -> int:
    """A broker-level numeric setting of the storage engine (``log.retention.check.interval.ms`` ...)."""
    value = _lookup(broker_config, key)
    return int(BROKER_CONFIGS[key].default if value is None else value)
