"""DescribeConfigs: v0-v4.

Behaviour: resources are answered one by one, each with its own error code.
- TOPIC (2): every topic key (or the ones asked for; unknown names are skipped, as Kafka does; the
  three Kafka 4.0 removed, message.format.version and its kin, only when the topic sets them)
  with the topic's override (DYNAMIC_TOPIC_CONFIG), else the broker key it inherits (dynamic
  broker, dynamic default, static, default) with the whole chain as synonyms. Illegal name 17,
  unknown topic 3.
- BROKER (4): resource name = ``node.id`` gives every broker key (a key Kafka 4 removed only when
  given, as Kafka 4 lists every key it was given and no other it does not define) with its source, read-only
  (not dynamic) and sensitive (password, value null) flags; the empty name gives only the
  cluster-wide dynamic defaults, as Kafka does. Another id or a non-integer name is 42. With eligible
  leader replicas on (KIP-966), ``min.insync.replicas`` is always one of those defaults (written at the
  first start, minibroker/services/features.py), so topics report it as DYNAMIC_DEFAULT_BROKER_CONFIG,
  as Kafka 4.1+ does.
- BROKER_LOGGER (8): the levels of the ``root`` and ``minibroker*`` Python loggers, in Kafka's
  level names (source 6, DYNAMIC_BROKER_LOGGER_CONFIG); the name must be this broker's id.
- GROUP (32): every group config key (minibroker/coordinator/group_configs.py) for the named group,
  which need not exist: an override has source GROUP_CONFIG (8), a default DEFAULT_CONFIG (5) with the
  value of the broker key it overrides; the synonyms are the entry itself, as Kafka reports them. An empty
  name is 42.
Any other resource type gets 42 "Unsupported resource type" at once; the CLIENT_METRICS (16) type
Kafka 4 serves is named in the message ("Client metrics subscriptions are not supported by this
broker"), as AlterConfigs and IncrementalAlterConfigs answer it too.
Authorization (with an authorizer), as Kafka: DESCRIBE_CONFIGS on the topic (TOPIC), else
TOPIC_AUTHORIZATION_FAILED, on the group (GROUP), else GROUP_AUTHORIZATION_FAILED, or on the cluster
(BROKER, BROKER_LOGGER), else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v0 reports is_default instead of a source and no synonyms; v1+ sources and
(when asked) synonyms; v3+ config types and (when asked) documentation; v4 flexible.
Gaps: CLIENT_METRICS resources are not served.
"""

from __future__ import annotations

import logging

from minibroker.config import ConfigSource, describe_topic_configs
from minibroker.coordinator.group_configs import check_group_name
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from minibroker.security.authorizer import authorize
from minibroker.services.topic_names import validate_topic_name

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
DYNAMIC_BROKER_LOGGER_CONFIG = 6
_UNSERVED_RESOURCES = {CLIENT_METRICS: "Client metrics subscriptions"}

# Python level -> Kafka (log4j) level name, and back
_LEVEL_NAMES = {
    logging.CRITICAL: "FATAL",
    logging.ERROR: "ERROR",
    logging.WARNING: "WARN",
    logging.INFO: "INFO",
    logging.DEBUG: "DEBUG",
    logging.NOTSET: "TRACE",
}
LOG_LEVELS = {
    "OFF": logging.CRITICAL + 10,
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": 5,
}
ROOT_LOGGER = "root"


def unsupported_resource(rtype: int) -> KafkaError:
    """INVALID_REQUEST for a resource type the config APIs do not serve, naming the feature."""
    feature = _UNSERVED_RESOURCES.get(rtype)
    if feature is not None:
        return KafkaError(ErrorCode.INVALID_REQUEST,
                          f"Unsupported resource type: {rtype}. {feature} are not supported by this broker")
    return KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {rtype}")


_CONFIG_RESOURCE_ACL = {  # config resource type -> the ACL resource its checks name, and the error
    TOPIC: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
    GROUP: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
}
_CLUSTER_ACL = (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


def check_config_access(broker, header, operation: AclOperation, resource) -> None:
    """The config APIs' authorization, as Kafka's: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic or group
    of a TOPIC or GROUP resource, on the cluster for BROKER, BROKER_LOGGER and CLIENT_METRICS. Raises the
    resource type's authorization error."""
    if broker.authorizer is None:
        return
    rtype = resource.resource_type
    acl_type, error, message = _CONFIG_RESOURCE_ACL.get(rtype, _CLUSTER_ACL)
    if rtype not in _CONFIG_RESOURCE_ACL and rtype not in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        return  # not a config resource: answered INVALID_REQUEST by the handler
    name = resource.resource_name if acl_type != ResourceType.CLUSTER else CLUSTER_NAME
    if not authorize(broker, header, operation, acl_type, name):
        raise KafkaError(error, message)


def check_broker_name(broker, name: str) -> bool:
    """True for this broker's id, False for the cluster default (empty name); else raises 42."""
    if name == "":
        return False
    try:
        node = int(name)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if node != broker.node_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
        )
    return True


def existing_topic(broker, name: str):
    """The TopicInfo of ``name``; 17 for an illegal name, 3 for an unknown topic."""
    validate_topic_name(name)
    info = broker.logs.topics.get(name)
    if info is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    return info


def logger_names() -> list[str]:
    names = [
        n
        for n, lg in logging.root.manager.loggerDict.items()
        if n.startswith("minibroker") and isinstance(lg, logging.Logger)
    ]
    return [ROOT_LOGGER, *sorted(names)]


def logger_level(name: str) -> str:
    lg = logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)
    level = lg.getEffectiveLevel()
    for kafka_name, value in sorted(LOG_LEVELS.items(), key=lambda kv: kv[1]):
        if value >= level:
            return kafka_name
    return "OFF"


def _entry(version: int, name, value, source, read_only, sensitive, synonyms, config_type, doc) -> Struct:
    return Struct(
        name=name,
        value=value,
        read_only=read_only,
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        config_source=int(source),
        is_sensitive=sensitive,
        synonyms=[Struct(name=s.name, value=s.value, source=int(s.source)) for s in synonyms],
        config_type=int(config_type),
        documentation=doc,
    )


def _describe(broker, version: int, resource, synonyms: bool, docs: bool) -> list[Struct]:
    keys = resource.configuration_keys
    rtype, name = resource.resource_type, resource.resource_name
    if rtype == TOPIC:
        info = existing_topic(broker, name)
        entries = describe_topic_configs(
            broker.config, info.configs, keys, include_synonyms=synonyms, include_documentation=docs
        )
    elif rtype == BROKER:
        if check_broker_name(broker, name):
            entries = broker.config.describe(keys, include_synonyms=synonyms, include_documentation=docs)
        else:
            defaults = broker.config.dynamic_values(cluster_default=True)
            wanted = [k for k in defaults if keys is None or k in keys]
            entries = broker.config.describe(wanted, include_synonyms=synonyms, include_documentation=docs)
            for e in entries:
                e.source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
                e.value = None if e.sensitive else defaults[e.name]
                e.synonyms = [s for s in e.synonyms if s.source != ConfigSource.DYNAMIC_BROKER_CONFIG]
    elif rtype == GROUP:
        check_group_name(name)
        entries = broker.groups.configs.describe(name, keys, synonyms=synonyms, documentation=docs)
    elif rtype == BROKER_LOGGER:
        check_broker_name(broker, name)
        return [
            Struct(
                name=n,
                value=logger_level(n),
                read_only=False,
                is_default=False,
                config_source=DYNAMIC_BROKER_LOGGER_CONFIG,
                is_sensitive=False,
                synonyms=[],
                config_type=2,
                documentation=None,
            )
            for n in logger_names()
            if keys is None or n in keys
        ]
    else:
        raise unsupported_resource(rtype)
    return [
        _entry(
            version,
            e.name,
            e.value,
            e.source,
            e.read_only,
            e.sensitive,
            e.synonyms,
            e.config_type,
            e.documentation,
        )
        for e in entries
    ]


@handles(32, (0, 4))
def handle_describe_configs(broker, header, request):
    version = header.api_version
    synonyms = version >= 1 and bool(request.include_synonyms)
    docs = version >= 3 and bool(request.include_documentation)
    results = []
    for resource in request.resources:
        try:
            check_config_access(broker, header, AclOperation.DESCRIBE_CONFIGS, resource)
            configs = _describe(broker, version, resource, synonyms, docs)
        except KafkaError as e:
            results.append(
                Struct(
                    error_code=int(e.code),
                    error_message=e.message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=[],
                )
            )
            continue
        results.append(
            Struct(
                error_code=0,
                error_message=None,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return Struct(throttle_time_ms=0, results=results)
