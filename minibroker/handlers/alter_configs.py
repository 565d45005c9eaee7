"""AlterConfigs: v0-v2 (the legacy, whole-set form).

Behaviour: each resource is handled on its own and all-or-nothing.
- TOPIC: the given entries replace every override of the topic; they are validated as Kafka does
  (unknown key or bad value 40), persisted in the topics file and applied to the live partition
  logs. Illegal name 17, unknown topic 3.
- BROKER: the given entries replace the dynamic layer of this broker (resource name = node.id)
  or the cluster-wide dynamic default (empty name); only keys Kafka can change dynamically are
  accepted (others 42, bad values 40), with Kafka's levels: key and trust store keys only in their
  ``listener.name.<listener>.`` form (42), listener keys (``ssl.*``, ``sasl.*``, ...) per broker only,
  never as the cluster default (42). Topics without an override follow the change live
  (``log.segment.bytes``, ``log.retention.ms``, ``message.max.bytes`` ...). When an ``ssl.*`` key (or
  its listener form) is named or changed, the context of each TLS listener it applies to is rebuilt
  from the new values and checked before anything is kept (minibroker/security/tls.py
  reload_listener_tls): one that cannot be built (missing file, wrong password, unknown ciphers,
  another certificate subject) restores the previous values and answers 40 "Invalid dynamic
  configuration: ..." naming the key; otherwise new connections get the new context and established
  ones keep theirs. Naming a key store at the same path reloads the file, as Kafka does. The dynamic
  layers are saved at the log dir root (Broker.save_dynamic_configs) and applied at the next start
  before the TLS contexts are built; a failed save restores the previous values and answers
  UNKNOWN_SERVER_ERROR. While eligible leader replicas are on (KIP-966) ``min.insync.replicas`` is
  refused per broker and its cluster-level value cannot be removed (40, Kafka's messages).
- GROUP: the given entries replace every config override of the group (Kafka 4's group configs,
  minibroker/coordinator/group_configs.py), checked as IncrementalAlterConfigs checks them (40).
Null values are rejected (42 "Null value not supported"), a key given twice is 42, a resource
given twice is 42. ``validate_only`` checks and changes nothing.
Authorization (with an authorizer), as Kafka: ALTER_CONFIGS on the topic (TOPIC), else
TOPIC_AUTHORIZATION_FAILED, on the group (GROUP), else GROUP_AUTHORIZATION_FAILED, or on the cluster
(BROKER, BROKER_LOGGER), else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v2 flexible; nothing else differs.
Gaps: BROKER_LOGGER is only served by IncrementalAlterConfigs, as in Kafka. Kafka (3.9, KRaft) answers
INVALID_REQUEST for a value its dynamic validation refuses (KAFKA-13609); minibroker answers 40 there.
Dynamic passwords are saved as given, as KRaft keeps them (Kafka encoded them with
password.encoder.secret in ZooKeeper mode only; 4.0 removed those keys).
"""

from __future__ import annotations

import logging

from minibroker.config import check_dynamic, validate_topic_configs
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.describe_configs import (
    BROKER,
    GROUP,
    TOPIC,
    check_broker_name,
    check_config_access,
    existing_topic,
    unsupported_resource,
)
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation
from minibroker.security.tls import TlsConfigError, is_tls_key
from minibroker.services.features import check_elr_min_isr

log = logging.getLogger("minibroker.handlers")


def check_broker_value(key: str, value: str | None, *, cluster_default: bool = False) -> None:
    """What BrokerConfig.set_dynamic would refuse, without changing anything."""
    check_dynamic(key, value, cluster_default=cluster_default)


def _replace_layer(cfg, cluster_default: bool, values: dict[str, str]) -> None:
    for key in cfg.dynamic_values(cluster_default=cluster_default):
        if key not in values:
            cfg.set_dynamic(key, None, cluster_default=cluster_default)
    for key, value in values.items():
        cfg.set_dynamic(key, value, cluster_default=cluster_default)


def set_broker_layer(broker, per_broker: bool, new: dict[str, str], validate_only: bool,
                     named: set[str] | None = None) -> None:
    """Replace one dynamic layer with ``new`` (validated first); when a TLS key is ``named`` (default:
    the keys of ``new``) or changes, rebuild the TLS listeners' contexts, and keep nothing if one
    cannot be built; persist; then refresh the live logs. All of it runs without yielding to the
    event loop, so no other request sees the values in between."""
    cluster_default = not per_broker
    cfg = broker.config
    old = cfg.dynamic_values(cluster_default=cluster_default)
    check_elr_min_isr(per_broker, set(new) | (named or set()), old, new)
    for key, value in new.items():
        check_broker_value(key, value, cluster_default=cluster_default)
    touched = set(new) if named is None else set(named)
    touched |= {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    server = broker.socket_server
    rebuild_tls = server is not None and any(is_tls_key(k) for k in touched)
    if validate_only and not rebuild_tls:
        return
    _replace_layer(cfg, cluster_default, new)
    try:
        tls = server.reload_tls(touched) if rebuild_tls else None
    except TlsConfigError as e:
        _replace_layer(cfg, cluster_default, old)
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid dynamic configuration: {e}") from None
    if validate_only:
        _replace_layer(cfg, cluster_default, old)
        return
    try:
        broker.save_dynamic_configs()
    except OSError as e:
        _replace_layer(cfg, cluster_default, old)
        log.error("could not save the dynamic broker configs: %s", e)
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"The dynamic configs could not be saved: {e.strerror or e}") from None
    if tls:
        server.use_tls(tls)
        log.info("TLS listeners %s reconfigured (%s): new connections use the new settings",
                 ", ".join(sorted(tls)), ", ".join(sorted(k for k in touched if is_tls_key(k))))
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
    logs.start_cleaner_if_compacted()  # a default log.cleanup.policy=compact compacts every topic


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


def alter_resources(broker, header, request, alter) -> Struct:
    """The answer both AlterConfigs APIs share: ALTER_CONFIGS on each resource, then ``alter(broker,
    resource, validate_only)``; a duplicated resource refused, one resource's error never failing the
    others."""
    duplicates = unique_resources(request.resources)
    responses = []
    for resource in request.resources:
        if (resource.resource_type, resource.resource_name) in duplicates:
            responses.append(result(resource, ErrorCode.INVALID_REQUEST, "Duplicate resource."))
            continue
        try:
            check_config_access(broker, header, AclOperation.ALTER_CONFIGS, resource)
            alter(broker, resource, bool(request.validate_only))
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
    elif resource.resource_type == GROUP:
        broker.groups.configs.replace(resource.resource_name, new, validate_only)
    else:
        raise unsupported_resource(resource.resource_type)


@handles(33, (0, 2))
def handle_alter_configs(broker, header, request):
    return alter_resources(broker, header, request, _alter)
