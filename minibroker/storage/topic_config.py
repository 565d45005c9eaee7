"""Topic-level settings the storage engine uses, with Kafka's names, defaults and broker synonyms.

A topic's effective value of ``key`` is, first found wins: the topic's override, the same
topic-level key in the broker config mapping (lets callers pass plain topic-level dicts), the
broker-level synonym (``log.segment.bytes`` ...), Kafka's default. Values may arrive as strings
(CreateTopics / AlterConfigs send strings); numeric ones are converted.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["TOPIC_DEFAULTS", "BROKER_SYNONYMS", "effective_topic_config", "broker_setting"]

LONG_MAX = 2**63 - 1

# topic key -> Kafka default
TOPIC_DEFAULTS: dict[str, Any] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": 86400000,
    "file.delete.delay.ms": 60000,
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "index.interval.bytes": 4096,
    "max.compaction.lag.ms": LONG_MAX,
    "max.message.bytes": 1048588,
    "message.timestamp.after.max.ms": LONG_MAX,
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.difference.max.ms": LONG_MAX,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "min.insync.replicas": 1,
    "preallocate": False,
    "retention.bytes": -1,
    "retention.ms": 604800000,
    "segment.bytes": 1073741824,
    "segment.index.bytes": 10485760,
    "segment.jitter.ms": 0,
    "segment.ms": 604800000,
    "unclean.leader.election.enable": False,
}

# topic key -> broker keys, most specific first (value multiplied by the factor)
BROKER_SYNONYMS: dict[str, list[tuple[str, int]]] = {
    "cleanup.policy": [("log.cleanup.policy", 1)],
    "compression.type": [("compression.type", 1)],
    "delete.retention.ms": [("log.cleaner.delete.retention.ms", 1)],
    "file.delete.delay.ms": [("log.segment.delete.delay.ms", 1)],
    "flush.messages": [("log.flush.interval.messages", 1)],
    "flush.ms": [("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)],
    "index.interval.bytes": [("log.index.interval.bytes", 1)],
    "max.message.bytes": [("message.max.bytes", 1)],
    "message.timestamp.type": [("log.message.timestamp.type", 1)],
    "message.timestamp.difference.max.ms": [("log.message.timestamp.difference.max.ms", 1)],
    "message.timestamp.before.max.ms": [("log.message.timestamp.before.max.ms", 1)],
    "message.timestamp.after.max.ms": [("log.message.timestamp.after.max.ms", 1)],
    "min.insync.replicas": [("min.insync.replicas", 1)],
    "preallocate": [("log.preallocate", 1)],
    "retention.bytes": [("log.retention.bytes", 1)],
    "retention.ms": [("log.retention.ms", 1), ("log.retention.minutes", 60000),
                     ("log.retention.hours", 3600000)],
    "segment.bytes": [("log.segment.bytes", 1)],
    "segment.index.bytes": [("log.index.size.max.bytes", 1)],
    "segment.jitter.ms": [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3600000)],
    "segment.ms": [("log.roll.ms", 1), ("log.roll.hours", 3600000)],
}

_BROKER_DEFAULTS = {
    "log.retention.check.interval.ms": 300000,
    "log.flush.offset.checkpoint.interval.ms": 60000,
    "log.flush.start.offset.checkpoint.interval.ms": 60000,
}


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
    return int(_BROKER_DEFAULTS[key] if value is None else value)
