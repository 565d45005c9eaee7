"""Dynamic broker configs: which keys AlterConfigs and IncrementalAlterConfigs may set on the broker
resource, at which level (per broker, or the cluster default), and how a value is checked (Kafka's
DynamicBrokerConfig). BrokerConfig keeps the layers (minibroker/config/broker.py)."""

from __future__ import annotations

from typing import Any

from minibroker.config.keys import BROKER_CONFIGS, ConfigKey, split_listener_key
from minibroker.errors import ErrorCode, KafkaError

__all__ = ["CLUSTER_LEVEL_LISTENER_KEYS", "LISTENER_ONLY_DYNAMIC", "PER_BROKER_DYNAMIC", "check_dynamic",
           "dynamic_spec"]

# The key and trust store keys (Kafka's SslConfigs.RECONFIGURABLE_CONFIGS): only in their listener form,
# listener.name.<listener>.ssl.keystore.location, never as the broker-wide key.
LISTENER_ONLY_DYNAMIC = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})
# The listener keys Kafka lets the cluster default carry, in their broker-wide and their listener form
# (DynamicBrokerConfig's ClusterLevelListenerConfigs). Of their listener forms minibroker applies
# listener.name.<listener>.max.connection.creation.rate only, so only that one is accepted.
CLUSTER_LEVEL_LISTENER_KEYS = frozenset({"max.connections", "max.connection.creation.rate",
                                         "num.network.threads"})
_LISTENER_FORM_APPLIED = frozenset({"max.connection.creation.rate"})
# Listener keys are set per broker only, never as the cluster default (Kafka's PerBrokerConfigs: the
# security keys and DynamicListenerConfig's, but for the cluster-wide max.connections,
# max.connection.creation.rate and num.network.threads); a listener-prefixed key is per broker too.
PER_BROKER_DYNAMIC = LISTENER_ONLY_DYNAMIC | frozenset({
    "cordoned.log.dirs", "listeners", "advertised.listeners", "listener.security.protocol.map",
    "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config",
    "sasl.enabled.mechanisms", "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
})


def dynamic_spec(key: str) -> ConfigKey | None:
    """The ConfigKey a dynamic ``key`` is parsed as: the broker key itself, or for a listener-prefixed
    ``ssl.*`` key or ``max.connection.creation.rate`` (the listener forms minibroker applies at run
    time) the broker key it prefixes; None for anything else."""
    spec = BROKER_CONFIGS.get(key)
    if spec is None and (per_listener := split_listener_key(key)) is not None:
        _, mechanism, base = per_listener
        if mechanism is None and (base.startswith("ssl.") or base in _LISTENER_FORM_APPLIED):
            return BROKER_CONFIGS[base]
    return spec


def check_dynamic(key: str, value: str | None, *, cluster_default: bool = False) -> Any:
    """``value`` parsed for ``key``'s dynamic layer (None to remove it), after Kafka's checks in their
    order: a known key, a dynamic one, the listener form for key and trust stores, a valid value,
    per broker for listener keys. Raises KafkaError."""
    spec = dynamic_spec(key)
    # a key Kafka 4 removed is unknown to it; removing a value an older broker stored stays possible
    if spec is None or (spec.removed_in is not None and value is not None):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {key}")
    if not spec.dynamic:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {key}")
    if key in LISTENER_ONLY_DYNAMIC:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "These security configs can be dynamically updated only "
                         f"per-listener using the listener prefix: {key}")
    parsed = None
    if value is not None:
        try:
            parsed = spec.parse(value)
        except ValueError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Invalid value {value} for configuration {key}: {e}") from None
    if cluster_default and is_per_broker(key):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                         f"broker id must be specified: {key}")
    return parsed


def is_per_broker(key: str) -> bool:
    """Whether Kafka refuses ``key`` at the cluster default level (its perBrokerConfigs): the security and
    listener keys, and every listener-prefixed key but those of the cluster-level listener keys."""
    if key in PER_BROKER_DYNAMIC:
        return True
    per_listener = split_listener_key(key)
    return per_listener is not None and per_listener[2] not in CLUSTER_LEVEL_LISTENER_KEYS
