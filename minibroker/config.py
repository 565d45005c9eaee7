"""Broker and topic configuration with Apache Kafka's property names, types, defaults and synonyms.

One declarative table describes every broker key we accept (``BROKER_CONFIGS``) and every topic key
(``TOPIC_CONFIGS``); loading, validation, DescribeConfigs answers and docs/configuration.md are all
derived from it, so they cannot drift apart.

Sources, lowest to highest precedence (as the apache/kafka image and kafka-server-start.sh combine them):

1. embedded defaults (Kafka's, except ``listeners``, ``log.dirs`` and ``node.id``: see the table);
2. the properties file (``minibroker serve FILE``), Java ``.properties`` syntax;
3. ``KAFKA_*`` environment variables, mapped to keys as the apache/kafka image maps them;
4. ``--override key=value``, in command-line order.

At run time AlterConfigs may add dynamic broker values (per broker, then cluster default) above all
static sources, exactly as Kafka layers them for DescribeConfigs.

Unknown keys are logged as warnings on ``minibroker.config`` (with their source and a "did you mean"
for a close known key); invalid values raise ``ConfigError``
naming the key, the value, where it came from and what is allowed. Topic-level validation raises
``KafkaError(INVALID_CONFIG)`` for the CreateTopics / AlterConfigs handlers.

Stdlib only and cheap to import: the broker's start-up time budget includes this module.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import Any

from minibroker.errors import ErrorCode, KafkaError
from minibroker.message_format import MessageFormatValidator

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_SYNONYMS",
    "AlterOp",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Listener",
    "alter_topic_configs",
    "config_reference_markdown",
    "describe_topic_configs",
    "effective_topic_config",
    "env_to_properties",
    "load_config",
    "listener_key",
    "parse_listeners",
    "parse_overrides",
    "parse_properties",
    "parse_security_protocol_map",
    "resolve_advertised",
    "split_listener_key",
    "validate_topic_configs",
]

log = logging.getLogger("minibroker.config")

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


class ConfigError(ValueError):
    """A broker configuration value is missing, malformed or out of range (a start-up error)."""


class ConfigType(IntEnum):
    """Kafka's config types, numbered as DescribeConfigs v3+ reports them."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a value comes from, numbered as DescribeConfigs v1+ reports it."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class AlterOp(IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# ---------------------------------------------------------------------------------------------------
# Validators: callables that raise ValueError(reason) and can describe what they allow.


class AtLeast:
    __slots__ = ("low",)

    def __init__(self, low: int | float):
        self.low = low

    def __call__(self, value: Any) -> None:
        if value is not None and value < self.low:
            raise ValueError(f"must be at least {self.low}")

    def describe(self) -> str:
        return f"[{self.low},...]"


class Between:
    __slots__ = ("low", "high", "also")

    def __init__(self, low: int | float, high: int | float, also: tuple = ()):
        self.low, self.high, self.also = low, high, also

    def __call__(self, value: Any) -> None:
        if value is not None and value not in self.also and not (self.low <= value <= self.high):
            extra = "".join(f" or {a}" for a in self.also)
            raise ValueError(f"must be between {self.low} and {self.high}{extra}")

    def describe(self) -> str:
        return f"[{self.low},...,{self.high}]" + "".join(f" or {a}" for a in self.also)


class OneOf:
    __slots__ = ("values",)

    def __init__(self, *values: Any):
        self.values = values

    def __call__(self, value: Any) -> None:
        if value is not None and value not in self.values:
            raise ValueError(f"must be one of {', '.join(map(str, self.values))}")

    def describe(self) -> str:
        return "[" + ", ".join(map(str, self.values)) + "]"


class AuthorizerClassName:
    """``authorizer.class.name``: empty (no authorizer) or one of Kafka's ACL authorizers, which
    minibroker serves alike (minibroker/security/authorizer.py); any other class cannot be loaded."""

    NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "kafka.security.authorizer.AclAuthorizer")

    def __call__(self, value: Any) -> None:
        if value and value not in self.NAMES:
            raise ValueError(f"minibroker cannot load authorizer class {value}; it serves Kafka's ACL "
                             f"authorizer, named {self.NAMES[0]} (or {self.NAMES[1]}), or none (empty)")

    def describe(self) -> str:
        return "[\"\", " + ", ".join(self.NAMES) + "]"


class PrincipalList:
    """``super.users``: principals ``Type:name`` separated by semicolons."""

    def __call__(self, value: Any) -> None:
        for item in (value or "").split(";"):
            type_, sep, _name = item.strip().partition(":")
            if item.strip() and not (sep and type_):
                raise ValueError(f"{item.strip()!r} is not a principal of the form Type:name (User:alice)")

    def describe(self) -> str:
        return "Type:name;Type:name..."


class ListOf:
    """Every item of a list must be one of ``values``; the list may be empty only when
    ``allow_empty`` (Kafka's ``ValidList.in`` accepts an empty list: ``cleanup.policy=`` is legal)."""

    __slots__ = ("values", "allow_empty")

    def __init__(self, *values: str, allow_empty: bool = False):
        self.values = values
        self.allow_empty = allow_empty

    def __call__(self, value: Any) -> None:
        if value is None:
            return
        if not value and not self.allow_empty:
            raise ValueError("must not be empty")
        bad = [v for v in value if v not in self.values]
        if bad:
            raise ValueError(f"items must be among {', '.join(self.values)} (got {', '.join(bad)})")

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


class HostCounts:
    """``host:count`` pairs separated by commas (``max.connections.per.ip.overrides``)."""

    __slots__ = ()

    def __call__(self, value: Any) -> None:
        if value is not None:
            parse_host_counts(value)

    def describe(self) -> str:
        return "host:count,..."


def parse_host_counts(value: str) -> dict[str, int]:
    """``"host:count,host:count"`` as {host: count}; split at each item's last colon, as Kafka's
    ``parseCsvMap`` does, so IPv6 addresses need no brackets. Raises ValueError."""
    out: dict[str, int] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        try:
            out[host] = int(count.strip())
        except ValueError:
            raise ValueError(f"{item!r}: the count is not an integer") from None
        if out[host] < 0:
            raise ValueError(f"{item!r}: the count must be at least 0")
    return out


class PrincipalMappingRules:
    """``ssl.principal.mapping.rules``: Kafka's SslPrincipalMapper rule list (minibroker/security/tls.py)."""

    __slots__ = ()

    def __call__(self, value: Any) -> None:
        if value is not None:
            from minibroker.security.tls import PrincipalMapper

            PrincipalMapper(value)

    def describe(self) -> str:
        return "RULE:pattern/replacement/[LU],...,DEFAULT"


class ListenerList:
    """A comma-separated listener list: ``NAME://host:port,...``."""

    __slots__ = ()

    def __call__(self, value: Any) -> None:
        if value is not None:
            parse_listeners(value, _check_names=False)  # names are checked against the map later

    def describe(self) -> str:
        return "NAME://host:port,..."


# ---------------------------------------------------------------------------------------------------
# The declarative tables.


class ConfigKey:
    """One configuration key: its Kafka type, default, validator and what minibroker does with it.

    ``dynamic``: Kafka lets AlterConfigs change it at run time (broker keys; topic keys always are).
    ``no_effect``: accepted because Kafka knows it, but it changes nothing on a single node.
    ``minibroker_only``: not an Apache Kafka key.
    ``kafka_default``: Kafka's default where minibroker's embedded default differs (for the docs).
    """

    __slots__ = (
        "name", "type", "default", "doc", "importance", "validator", "dynamic", "no_effect",
        "minibroker_only", "kafka_default", "topic_config",
    )

    def __init__(self, name: str, type: ConfigType, default: Any, doc: str, *, importance: str = "medium",
                 validator: Any = None, dynamic: bool = False, no_effect: bool = False,
                 minibroker_only: bool = False, kafka_default: str | None = None):
        self.name = name
        self.type = type
        self.default = default
        self.doc = doc
        self.importance = importance
        self.validator = validator
        self.dynamic = dynamic
        self.no_effect = no_effect
        self.minibroker_only = minibroker_only
        self.kafka_default = kafka_default
        self.topic_config: str | None = None  # filled in from TOPIC_CONFIG_SYNONYMS below

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    def parse(self, raw: str) -> Any:
        """Parse and validate a string value; raises ValueError(reason)."""
        value = parse_typed(self.type, raw)
        if self.validator is not None:
            self.validator(value)
        return value

    def __repr__(self) -> str:
        return f"ConfigKey({self.name!r}, {self.type.name}, default={self.default!r})"


_BOOL, _STR, _INT, _SHORT, _LONG, _DOUBLE, _LIST, _CLASS, _PASSWORD = (
    ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG,
    ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS, ConfigType.PASSWORD,
)
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_GZIP_LEVEL = Between(1, 9, also=(-1,))
_LZ4_LEVEL = Between(1, 17)
_ZSTD_LEVEL = Between(-131072, 22)
_TIMESTAMP_TYPES = OneOf("CreateTime", "LogAppendTime")
_CLEANUP_POLICIES = ListOf("compact", "delete", allow_empty=True)  # empty: neither deleted nor compacted
_DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


def _k(name, type, default, doc, **kw) -> ConfigKey:
    return ConfigKey(name, type, default, doc, **kw)


_BROKER_KEYS = [
    # --- identity, listeners, storage location
    _k("node.id", _INT, 1, "Id of this broker, reported in Metadata; broker.id is the same setting.",
       importance="high", validator=AtLeast(0), kafka_default="-1 (must be set in KRaft mode)"),
    _k("broker.id", _INT, 1, "Older name of node.id; if only one is set the other follows it.",
       importance="high", validator=AtLeast(0), kafka_default="-1"),
    _k("listeners", _STR, "PLAINTEXT://127.0.0.1:9092",
       "Comma-separated NAME://host:port addresses to accept connections on; empty host means all "
       "interfaces, port 0 an ephemeral port.",
       importance="high", validator=ListenerList(), kafka_default="PLAINTEXT://:9092"),
    _k("advertised.listeners", _STR, None,
       "Addresses given to clients in Metadata, same form as listeners; unset means the listeners.",
       importance="high", validator=ListenerList()),
    _k("listener.security.protocol.map", _STR, _DEFAULT_PROTOCOL_MAP,
       "Listener name to security protocol: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over "
       "TLS). Any listener key can be set for one listener as "
       "listener.name.<listener name, lower case>.<key>.",
       importance="low"),
    _k("inter.broker.listener.name", _STR, None, "Listener used between brokers (a single node has none).",
       no_effect=True),
    _k("security.inter.broker.protocol", _STR, "PLAINTEXT", "Protocol used between brokers.", no_effect=True,
       validator=OneOf("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    _k("control.plane.listener.name", _STR, None, "Separate controller listener.", no_effect=True),
    _k("controller.listener.names", _STR, None, "Listeners used by the KRaft controller.", no_effect=True),
    _k("controller.quorum.voters", _LIST, [], "KRaft controller quorum.", no_effect=True),
    _k("controller.quorum.bootstrap.servers", _LIST, [], "KRaft controller bootstrap.", no_effect=True),
    _k("process.roles", _LIST, [], "KRaft roles of this node; minibroker is always broker and controller.",
       no_effect=True, validator=None),
    _k("early.start.listeners", _STR, None, "Listeners started before recovery finishes.", no_effect=True),
    _k("broker.rack", _STR, None, "Rack of this broker, reported in Metadata.", no_effect=False),
    _k("log.dirs", _STR, "./minibroker-data",
       "Comma-separated directories holding the topic partitions (JBOD: a new partition goes to the dir "
       "holding the fewest); broker metadata lives in the first.",
       importance="high", kafka_default="null (log.dir is used)"),
    _k("log.dir", _STR, "./minibroker-data", "Data directory used when log.dirs is not set.",
       importance="high", kafka_default="/tmp/kafka-logs"),
    _k("metadata.log.dir", _STR, None, "Directory of the KRaft metadata log.", no_effect=True),
    _k("num.recovery.threads.per.data.dir", _INT, 1, "Threads recovering logs at start-up.",
       validator=AtLeast(1), dynamic=True, no_effect=True),
    _k("metrics.port", _INT, None,
       "Optional HTTP port serving Prometheus metrics at /metrics; unset disables it.",
       validator=Between(0, 65535), minibroker_only=True),
    # --- topics and requests
    _k("num.partitions", _INT, 1, "Partitions of an auto-created topic.", validator=AtLeast(1)),
    _k("default.replication.factor", _INT, 1,
       "Replication factor of auto-created topics; a single node only allows 1.", validator=Between(1, 1)),
    _k("auto.create.topics.enable", _BOOL, True, "Create a topic when Metadata asks for an unknown one.",
       importance="high"),
    _k("delete.topic.enable", _BOOL, True, "Allow DeleteTopics.", importance="high"),
    _k("message.max.bytes", _INT, 1048588, "Largest record batch accepted, after compression.",
       importance="high", validator=AtLeast(0), dynamic=True),
    _k("socket.request.max.bytes", _INT, 104857600, "Largest request frame accepted before allocating it.",
       importance="high", validator=AtLeast(1)),
    _k("fetch.max.bytes", _INT, 57671680, "Upper bound on the bytes one Fetch response returns.",
       validator=AtLeast(1024)),
    _k("max.incremental.fetch.session.cache.slots", _INT, 1000, "Fetch sessions kept (KIP-227).",
       validator=AtLeast(0)),
    _k("max.request.partition.size.limit", _INT, 2000,
       "Most partitions one DescribeTopicPartitions response carries (the client may ask for fewer).",
       validator=AtLeast(1)),
    _k("telemetry.max.bytes", _INT, 1048576,
       "Largest client telemetry payload PushTelemetry accepts (KIP-714), and what "
       "GetTelemetrySubscriptions tells clients.", importance="low", validator=AtLeast(1)),
    _k("compression.type", _STR, "producer",
       "Compression of stored batches; producer keeps what the client sent.",
       importance="high", validator=OneOf(*_COMPRESSION_TYPES), dynamic=True),
    _k("compression.gzip.level", _INT, -1, "gzip level used when the broker recompresses.",
       validator=_GZIP_LEVEL, dynamic=True),
    _k("compression.lz4.level", _INT, 9, "lz4 level used when the broker recompresses.",
       validator=_LZ4_LEVEL, dynamic=True),
    _k("compression.zstd.level", _INT, 3, "zstd level used when the broker recompresses.",
       validator=_ZSTD_LEVEL, dynamic=True),
    _k("min.insync.replicas", _INT, 1,
       "Replicas that must hold a write for acks=all; the only replica is this broker.",
       importance="high", validator=AtLeast(1), dynamic=True),
    _k("unclean.leader.election.enable", _BOOL, False, "Allow an out-of-sync replica to lead.",
       importance="high", dynamic=True, no_effect=True),
    _k("request.timeout.ms", _INT, 30000, "Client request timeout.", no_effect=True),
    _k("connections.max.idle.ms", _LONG, 600000,
       "A connection with no bytes read or written for this long is closed, unless one of its requests "
       "is being answered (a long poll) while the client reads; checked every min(1 s, a tenth of it). "
       "-1: never.",
       importance="medium"),
    # --- segments and indexes
    _k("log.segment.bytes", _INT, 1073741824, "Size at which a segment file is rolled.",
       importance="high", validator=AtLeast(14), dynamic=True),
    _k("log.roll.ms", _LONG, None, "Age at which a segment is rolled; overrides log.roll.hours.",
       importance="high", validator=AtLeast(1), dynamic=True),
    _k("log.roll.hours", _INT, 168, "Age in hours at which a segment is rolled.",
       importance="high", validator=AtLeast(1)),
    _k("log.roll.jitter.ms", _LONG, None, "Random jitter subtracted from the roll age.",
       validator=AtLeast(0), dynamic=True),
    _k("log.roll.jitter.hours", _INT, 0, "Roll jitter in hours.", validator=AtLeast(0)),
    _k("log.index.interval.bytes", _INT, 4096, "Bytes of log between two offset index entries.",
       validator=AtLeast(0), dynamic=True),
    _k("log.index.size.max.bytes", _INT, 10485760, "Size of the offset and time index files.",
       validator=AtLeast(4), dynamic=True),
    _k("log.preallocate", _BOOL, False, "Preallocate segment files.", dynamic=True, no_effect=True),
    _k("log.segment.delete.delay.ms", _LONG, 60000, "Delay before a deleted segment's files are removed.",
       validator=AtLeast(0), dynamic=True),
    # --- retention and cleanup
    _k("log.retention.ms", _LONG, None, "Age after which segments are deleted; -1 keeps them forever.",
       importance="high", dynamic=True),
    _k("log.retention.minutes", _INT, None, "Retention age in minutes, used when log.retention.ms is unset.",
       importance="high"),
    _k("log.retention.hours", _INT, 168, "Retention age in hours, used when ms and minutes are unset.",
       importance="high"),
    _k("log.retention.bytes", _LONG, -1, "Partition size beyond which old segments are deleted; -1: none.",
       importance="high", dynamic=True),
    _k("log.retention.check.interval.ms", _LONG, 300000, "How often retention is enforced.",
       validator=AtLeast(1)),
    _k("log.cleanup.policy", _LIST, ["delete"], "delete and/or compact old segments.",
       validator=_CLEANUP_POLICIES, dynamic=True),
    _k("log.cleaner.enable", _BOOL, True, "Run the log cleaner for compacted topics.", dynamic=False),
    _k("log.cleaner.threads", _INT, 1, "Log cleaner threads; minibroker runs one pass at a time (the dedupe "
       "buffer is still split between them, as Kafka does).", validator=AtLeast(0), dynamic=True),
    _k("log.cleaner.backoff.ms", _LONG, 15000, "Sleep of the log cleaner when no log is due.",
       validator=AtLeast(0), dynamic=True),
    _k("log.cleaner.dedupe.buffer.size", _LONG, 134217728, "Memory of the cleaner's offset map (24 bytes "
       "a key): a dirty section with more keys than fit is cleaned in several passes.", dynamic=True),
    _k("log.cleaner.io.buffer.load.factor", _DOUBLE, 0.9, "Fill ratio of the cleaner's offset map.",
       dynamic=True),
    _k("log.cleaner.io.max.bytes.per.second", _DOUBLE, 1.7976931348623157e308,
       "Bytes per second the cleaner reads and writes at most.", dynamic=True),
    _k("log.cleaner.delete.retention.ms", _LONG, 86400000, "How long tombstones survive compaction.",
       validator=AtLeast(0), dynamic=True),
    _k("log.cleaner.min.compaction.lag.ms", _LONG, 0, "Minimum age before a record may be compacted.",
       validator=AtLeast(0), dynamic=True),
    _k("log.cleaner.max.compaction.lag.ms", _LONG, LONG_MAX, "Maximum age before a record must be compacted.",
       validator=AtLeast(1), dynamic=True),
    _k("log.cleaner.min.cleanable.ratio", _DOUBLE, 0.5, "Dirty ratio that makes a log eligible for cleaning.",
       validator=Between(0, 1), dynamic=True),
    _k("log.local.retention.ms", _LONG, -2, "Local retention with tiered storage.",
       validator=AtLeast(-2), dynamic=True, no_effect=True),
    _k("log.local.retention.bytes", _LONG, -2, "Local retention size with tiered storage.",
       validator=AtLeast(-2), dynamic=True, no_effect=True),
    # --- flushing
    _k("log.flush.interval.messages", _LONG, LONG_MAX, "Messages appended before the log is fsynced.",
       importance="high", validator=AtLeast(1), dynamic=True),
    _k("log.flush.interval.ms", _LONG, None,
       "Time a message may stay unflushed; unset uses log.flush.scheduler.interval.ms.",
       importance="high", dynamic=True),
    _k("log.flush.scheduler.interval.ms", _LONG, LONG_MAX, "How often the flusher checks for logs to flush.",
       importance="high"),
    _k("log.flush.offset.checkpoint.interval.ms", _INT, 60000, "How often recovery points are checkpointed.",
       validator=AtLeast(0)),
    _k("log.flush.start.offset.checkpoint.interval.ms", _INT, 60000,
       "How often log start offsets are checkpointed.", validator=AtLeast(0)),
    # --- message format and timestamps
    _k("log.message.format.version", _STR, "3.0-IV1",
       "Record magic of new topics: 0.8.x/0.9.x keep v0, 0.10.x v1, 0.11 and later v2. Deprecated "
       "(Kafka 3.x ignores it); minibroker honours it for teaching (docs/teaching.md).",
       validator=MessageFormatValidator()),
    _k("log.message.timestamp.type", _STR, "CreateTime",
       "CreateTime keeps the producer's timestamp; LogAppendTime stamps the broker's clock.",
       validator=_TIMESTAMP_TYPES, dynamic=True),
    _k("log.message.timestamp.difference.max.ms", _LONG, LONG_MAX,
       "Deprecated: largest allowed gap between a CreateTime timestamp and the broker clock.",
       validator=AtLeast(0), dynamic=True),
    _k("log.message.timestamp.before.max.ms", _LONG, LONG_MAX,
       "How far in the past a CreateTime timestamp may be.", validator=AtLeast(0), dynamic=True),
    _k("log.message.timestamp.after.max.ms", _LONG, LONG_MAX,
       "How far in the future a CreateTime timestamp may be.", validator=AtLeast(0), dynamic=True),
    _k("log.message.downconversion.enable", _BOOL, True,
       "Convert batches for old Fetch versions (v0-v3); off answers them UNSUPPORTED_VERSION.",
       importance="low", dynamic=True),
    # --- consumer groups and offsets
    _k("group.initial.rebalance.delay.ms", _INT, 0,
       "How long the first rebalance of a new (Empty) group waits for more members to join. Kafka's code "
       "default is 3000; the config/server.properties Kafka shipped up to 3.9 sets 0 \"for a better "
       "out-of-the-box experience for development and testing\", and so do the apache/kafka image's "
       "example compose files. minibroker does too, so a lone consumer gets its first records at once; "
       "set 3000 to test or keep the delay.", kafka_default="3000"),
    _k("group.min.session.timeout.ms", _INT, 6000, "Smallest session timeout a member may ask for."),
    _k("group.max.session.timeout.ms", _INT, 1800000, "Largest session timeout a member may ask for."),
    _k("group.max.size", _INT, INT_MAX, "Most members in one classic group.", validator=AtLeast(1)),
    _k("group.coordinator.rebalance.protocols", _LIST, ["classic", "consumer", "share"],
       "Group protocols enabled (KIP-848 consumer groups need 'consumer', KIP-932 share groups 'share'; "
       "without it ShareGroupHeartbeat answers UNSUPPORTED_VERSION). Kafka 4.2 switches share groups on "
       "with the share.version feature, finalized at 1 here, so 'share' is in minibroker's default.",
       validator=ListOf("classic", "consumer", "share"), kafka_default="classic,consumer,streams"),
    _k("group.consumer.heartbeat.interval.ms", _INT, 5000,
       "Heartbeat interval given to consumer (KIP-848) group members.", validator=AtLeast(1)),
    _k("group.consumer.session.timeout.ms", _INT, 45000,
       "How long a consumer (KIP-848) group member may go without a heartbeat before it is removed.",
       validator=AtLeast(1)),
    _k("group.consumer.max.size", _INT, INT_MAX, "Most members in one consumer (KIP-848) group.",
       validator=AtLeast(1)),
    _k("group.consumer.migration.policy", _STR, "bidirectional",
       "Online conversion of groups with members between the classic and the consumer (KIP-848) "
       "protocols: bidirectional, upgrade (classic to consumer only), downgrade (consumer to classic only) "
       "or disabled. Empty groups convert whatever the policy.",
       validator=OneOf("bidirectional", "upgrade", "downgrade", "disabled")),
    _k("group.consumer.min.session.timeout.ms", _INT, 45000,
       "Smallest consumer.session.timeout.ms a group config may set.", validator=AtLeast(1)),
    _k("group.consumer.max.session.timeout.ms", _INT, 60000,
       "Largest consumer.session.timeout.ms a group config may set.", validator=AtLeast(1)),
    _k("group.consumer.min.heartbeat.interval.ms", _INT, 5000,
       "Smallest consumer.heartbeat.interval.ms a group config may set.", validator=AtLeast(1)),
    _k("group.consumer.max.heartbeat.interval.ms", _INT, 15000,
       "Largest consumer.heartbeat.interval.ms a group config may set.", validator=AtLeast(1)),
    _k("group.share.session.timeout.ms", _INT, 45000,
       "Session timeout of share group members (share groups: issue 21; the default of the group config "
       "share.session.timeout.ms).", validator=AtLeast(1)),
    _k("group.share.min.session.timeout.ms", _INT, 45000,
       "Smallest share.session.timeout.ms a group config may set.", validator=AtLeast(1)),
    _k("group.share.max.session.timeout.ms", _INT, 60000,
       "Largest share.session.timeout.ms a group config may set.", validator=AtLeast(1)),
    _k("group.share.heartbeat.interval.ms", _INT, 5000,
       "Heartbeat interval of share group members (the default of share.heartbeat.interval.ms).",
       validator=AtLeast(1)),
    _k("group.share.min.heartbeat.interval.ms", _INT, 5000,
       "Smallest share.heartbeat.interval.ms a group config may set.", validator=AtLeast(1)),
    _k("group.share.max.heartbeat.interval.ms", _INT, 15000,
       "Largest share.heartbeat.interval.ms a group config may set.", validator=AtLeast(1)),
    _k("group.share.record.lock.duration.ms", _INT, 30000,
       "How long a share group member holds acquired records (the default of "
       "share.record.lock.duration.ms).", validator=Between(1000, 3600000)),
    _k("group.share.min.record.lock.duration.ms", _INT, 15000,
       "Smallest share.record.lock.duration.ms a group config may set.", validator=Between(1000, 30000)),
    _k("group.share.max.record.lock.duration.ms", _INT, 60000,
       "Largest share.record.lock.duration.ms a group config may set.", validator=Between(30000, 3600000)),
    _k("group.share.delivery.count.limit", _INT, 5,
       "Deliveries of a record to share group members before it is archived (the default of "
       "share.delivery.count.limit).", validator=Between(2, 10)),
    _k("group.share.min.delivery.count.limit", _INT, 2,
       "Smallest share.delivery.count.limit a group config may set.", validator=Between(2, 5)),
    _k("group.share.max.delivery.count.limit", _INT, 10,
       "Largest share.delivery.count.limit a group config may set.", validator=Between(5, 10)),
    _k("group.share.max.size", _INT, 200, "Most members in one share group; one more gets "
       "GROUP_MAX_SIZE_REACHED.", validator=Between(1, 1000)),
    _k("group.share.assignors", _LIST, ["simple"],
       "Share group assignors; 'simple' (every member may read every partition of its subscribed "
       "topics) is the only one.", validator=ListOf("simple")),
    _k("group.share.max.share.sessions", _INT, 2000,
       "Share sessions (one per share consumer and broker) this broker holds at most; a ShareFetch opening "
       "one more gets SHARE_SESSION_LIMIT_REACHED after its MaxWaitMs.", validator=AtLeast(1)),
    _k("share.fetch.max.fetch.records", _INT, 2147483647,
       "Records one ShareFetch acquires at most, whatever its MaxRecords asks.", validator=AtLeast(1)),
    _k("group.share.partition.max.record.locks", _INT, 2000,
       "In-flight records (between the share-partition start and end offsets) one share partition holds "
       "at most; a fetch acquires no new records past it until earlier ones are acknowledged.",
       validator=Between(100, 10000)),
    _k("group.streams.session.timeout.ms", _INT, 45000,
       "Session timeout of streams group members (streams groups are not served; the default of the "
       "group config streams.session.timeout.ms).", validator=AtLeast(1)),
    _k("group.streams.min.session.timeout.ms", _INT, 45000,
       "Smallest streams.session.timeout.ms a group config may set.", validator=AtLeast(1)),
    _k("group.streams.max.session.timeout.ms", _INT, 60000,
       "Largest streams.session.timeout.ms a group config may set.", validator=AtLeast(1)),
    _k("group.streams.heartbeat.interval.ms", _INT, 5000,
       "Heartbeat interval of streams group members (the default of streams.heartbeat.interval.ms).",
       validator=AtLeast(1)),
    _k("group.streams.min.heartbeat.interval.ms", _INT, 5000,
       "Smallest streams.heartbeat.interval.ms a group config may set.", validator=AtLeast(1)),
    _k("group.streams.max.heartbeat.interval.ms", _INT, 15000,
       "Largest streams.heartbeat.interval.ms a group config may set.", validator=AtLeast(1)),
    _k("group.streams.num.standby.replicas", _INT, 0,
       "Standby replicas per task of streams groups (the default of streams.num.standby.replicas).",
       validator=AtLeast(0)),
    _k("group.streams.max.standby.replicas", _INT, 2,
       "Largest streams.num.standby.replicas a group config may set.", validator=AtLeast(0)),
    _k("group.streams.initial.rebalance.delay.ms", _INT, 3000,
       "Initial rebalance delay of streams groups (the default of streams.initial.rebalance.delay.ms).",
       validator=AtLeast(0)),
    _k("group.consumer.assignors", _LIST, ["uniform", "range"],
       "Server-side assignors of consumer (KIP-848) groups, the first being the default: uniform, range "
       "(or Kafka's class names of them). A member picks one with group.remote.assignor.",
       kafka_default="org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
                     "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
       validator=ListOf("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                        "org.apache.kafka.coordinator.group.assignor.RangeAssignor")),
    _k("offsets.topic.num.partitions", _INT, 50, "Partitions of __consumer_offsets.", importance="high",
       validator=AtLeast(1)),
    _k("offsets.topic.replication.factor", _SHORT, 1,
       "Replication factor of __consumer_offsets. Kafka's code default is 3; Kafka's shipped "
       "server.properties and the apache/kafka image set 1, the only factor a single node can hold.",
       importance="high", validator=AtLeast(1), no_effect=True, kafka_default="3"),
    _k("offsets.topic.segment.bytes", _INT, 104857600, "Segment size of __consumer_offsets.",
       importance="high", validator=AtLeast(1)),
    _k("offsets.retention.minutes", _INT, 10080, "How long committed offsets of an empty group are kept.",
       importance="high", validator=AtLeast(1)),
    _k("offsets.retention.check.interval.ms", _LONG, 600000, "How often expired offsets are removed.",
       importance="high", validator=AtLeast(1)),
    _k("offsets.commit.timeout.ms", _INT, 5000, "Timeout of an offset commit write.", validator=AtLeast(1)),
    _k("offsets.load.buffer.size", _INT, 5242880, "Read size when loading __consumer_offsets.",
       validator=AtLeast(1)),
    _k("offset.metadata.max.bytes", _INT, 4096, "Largest metadata string stored with a committed offset.",
       importance="high"),
    # --- transactions and producer state
    _k("transaction.state.log.num.partitions", _INT, 50,
       "Partitions of __transaction_state, created (compacted) on the first transactional FindCoordinator; "
       "a transactional id lives in partition abs(hashCode(id)) % partitions.",
       importance="high", validator=AtLeast(1)),
    _k("transaction.state.log.replication.factor", _SHORT, 1,
       "Replication factor of __transaction_state. Kafka's code default is 3; Kafka's shipped "
       "server.properties and the apache/kafka image set 1 (one node).",
       importance="high", validator=AtLeast(1), no_effect=True, kafka_default="3"),
    _k("transaction.state.log.min.isr", _INT, 1,
       "min.insync.replicas of __transaction_state. Kafka's code default is 2; Kafka's shipped "
       "server.properties and the apache/kafka image set 1 (one node).",
       importance="high", validator=AtLeast(1), no_effect=True, kafka_default="2"),
    _k("transaction.state.log.segment.bytes", _INT, 104857600, "Segment size of __transaction_state.",
       importance="high", validator=AtLeast(1)),
    _k("transaction.state.log.load.buffer.size", _INT, 5242880,
       "Read size when loading __transaction_state at start-up.", validator=AtLeast(1)),
    _k("share.coordinator.state.topic.replication.factor", _SHORT, 1,
       "Replication factor of __share_group_state. Kafka's code default is 3; Kafka's shipped KRaft "
       "server.properties and the apache/kafka image set 1 (one node).",
       validator=AtLeast(1), no_effect=True, kafka_default="3"),
    _k("share.coordinator.state.topic.min.isr", _SHORT, 1,
       "min.insync.replicas of __share_group_state. Kafka's code default is 2; Kafka's shipped KRaft "
       "server.properties and the apache/kafka image set 1 (one node).",
       validator=AtLeast(1), no_effect=True, kafka_default="2"),
    _k("share.coordinator.state.topic.num.partitions", _INT, 50,
       "Partitions of __share_group_state, created on the first write of share-partition state; the state "
       "of (group, topic id, partition) lives in partition abs(hashCode(\"group:topicId:partition\")) % "
       "partitions.", validator=AtLeast(1)),
    _k("share.coordinator.state.topic.segment.bytes", _INT, 104857600,
       "Segment size of __share_group_state.", validator=AtLeast(1)),
    _k("share.coordinator.snapshot.update.records.per.snapshot", _INT, 500,
       "ShareUpdate records written for one share partition before the next write is a full ShareSnapshot "
       "(the state merged so far); after a snapshot the records no state needs any more are deleted.",
       validator=AtLeast(0)),
    _k("share.coordinator.load.buffer.size", _INT, 5242880,
       "Read size when loading __share_group_state at start-up.", validator=AtLeast(1)),
    _k("share.coordinator.state.topic.prune.interval.ms", _INT, 300000,
       "How often Kafka deletes the __share_group_state records no state needs; minibroker deletes them "
       "right after each ShareSnapshot instead.", validator=AtLeast(1), no_effect=True),
    _k("share.coordinator.cold.partition.snapshot.interval.ms", _INT, 300000,
       "Kafka rewrites the snapshot of share partitions not written for this long; minibroker does not "
       "(its state topic has retention.ms=-1, so old snapshots are never deleted by time).",
       validator=AtLeast(1), no_effect=True),
    _k("share.coordinator.threads", _INT, 1, "Share coordinator threads (one event loop here).",
       validator=AtLeast(1), no_effect=True),
    _k("share.coordinator.write.timeout.ms", _INT, 5000,
       "Longest a share coordinator write may take (writes are synchronous here).", validator=AtLeast(1),
       no_effect=True),
    _k("share.coordinator.append.linger.ms", _INT, 5,
       "How long Kafka's share coordinator waits to batch writes (each write is its own batch here).",
       validator=AtLeast(0), no_effect=True),
    _k("transaction.max.timeout.ms", _INT, 900000,
       "Largest transaction.timeout.ms a producer may ask for in InitProducerId (larger: "
       "INVALID_TRANSACTION_TIMEOUT).", importance="high", validator=AtLeast(1)),
    _k("transactional.id.expiration.ms", _INT, 604800000,
       "Time without a transaction after which a transactional id is forgotten (a tombstone in "
       "__transaction_state); its next producer starts afresh.", importance="high", validator=AtLeast(1)),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", _INT, 10000,
       "How often transactions open longer than their transaction.timeout.ms are aborted (the producer "
       "is fenced by an epoch bump).", importance="low", validator=AtLeast(1)),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", _INT, 3600000,
       "How often transactional ids past transactional.id.expiration.ms are removed.", importance="low",
       validator=AtLeast(1)),
    _k("producer.id.expiration.ms", _INT, 86400000, "Idle time after which producer state is dropped.",
       validator=AtLeast(1), dynamic=True),
    _k("transaction.partition.verification.enable", _BOOL, True, "Verify partitions joined a transaction.",
       dynamic=True),
    # --- threads, sockets, quotas: Kafka knows them, a single asyncio process has no use for them
    _k("num.network.threads", _INT, 3, "Network threads.",
       validator=AtLeast(1), dynamic=True, no_effect=True),
    _k("num.io.threads", _INT, 8, "Request handler threads.", validator=AtLeast(1), dynamic=True,
       no_effect=True),
    _k("background.threads", _INT, 10, "Background task threads.", validator=AtLeast(1), dynamic=True,
       no_effect=True),
    _k("num.replica.fetchers", _INT, 1, "Replica fetcher threads.", dynamic=True, no_effect=True),
    _k("num.replica.alter.log.dirs.threads", _INT, None, "Threads moving replicas between dirs.",
       no_effect=True),
    _k("replica.alter.log.dirs.io.max.bytes.per.second", _LONG, 9223372036854775807,
       "Bytes per second a partition move between log dirs (AlterReplicaLogDirs) copies at most.",
       validator=AtLeast(1), dynamic=True),
    _k("queued.max.requests", _INT, 500, "Requests queued before network threads block.",
       validator=AtLeast(1), no_effect=True),
    _k("queued.max.request.bytes", _LONG, -1,
       "Request bytes all connections together may hold: each frame's size counts from the moment its "
       "size prefix arrives until it is handled. When reached, a connection that would start a new "
       "request is not read until bytes are released (one frame may overshoot it). -1 or 0: no bound; "
       "otherwise at least socket.request.max.bytes."),
    _k("socket.send.buffer.bytes", _INT, 102400,
       "SO_SNDBUF of accepted sockets; -1 keeps the OS default (and its auto-tuning)."),
    _k("socket.receive.buffer.bytes", _INT, 102400,
       "SO_RCVBUF of the listening sockets, inherited by accepted ones; -1 keeps the OS default (and its "
       "auto-tuning)."),
    _k("socket.listen.backlog.size", _INT, 50,
       "Listen backlog of each listener: connections the kernel holds while the broker is not accepting "
       "(at max.connections, or before the logs are loaded).", validator=AtLeast(1)),
    _k("max.connections", _INT, INT_MAX,
       "Most connections open at once, all listeners together. At the limit the broker stops accepting "
       "until one closes (new clients wait in the listen backlog); lowered at run time, the least "
       "recently active connections are closed.", validator=AtLeast(0), dynamic=True),
    _k("max.connections.per.ip", _INT, INT_MAX,
       "Most connections from one address; a connection over it is accepted and closed at once. 0 only "
       "with max.connections.per.ip.overrides.", validator=AtLeast(0), dynamic=True),
    _k("max.connections.per.ip.overrides", _STR, "",
       "Per-address limits replacing max.connections.per.ip, as host:count pairs separated by commas; a "
       "host name counts for its first resolved address.", validator=HostCounts(), dynamic=True),
    _k("max.connection.creation.rate", _INT, INT_MAX,
       "New connections per second, all listeners together, measured over quota.window.num windows of "
       "quota.window.size.seconds: over it, the broker waits the throttle time (at most one window) before "
       "accepting the next connection. Per client address: the connection_creation_rate client quota "
       "(docs/security.md).", validator=AtLeast(0), dynamic=True),
    _k("quota.window.num", _INT, 11,
       "Samples kept per client quota sensor (docs/security.md, Quotas); rates are measured over them, "
       "never over less than quota.window.num - 1 whole windows.", importance="low", validator=AtLeast(1)),
    _k("quota.window.size.seconds", _INT, 1, "Length of each client quota sample, in seconds.",
       importance="low", validator=AtLeast(1)),
    _k("replica.lag.time.max.ms", _LONG, 30000, "Follower lag before it leaves the ISR.", no_effect=True),
    _k("replica.fetch.max.bytes", _INT, 1048576, "Follower fetch size per partition.", no_effect=True),
    _k("replica.fetch.wait.max.ms", _INT, 500, "Follower fetch wait.", no_effect=True),
    _k("replica.socket.timeout.ms", _INT, 30000, "Follower socket timeout.", no_effect=True),
    _k("auto.leader.rebalance.enable", _BOOL, True, "Move leadership back to preferred replicas.",
       no_effect=True),
    _k("leader.imbalance.check.interval.seconds", _LONG, 300, "Leader balance check interval.",
       no_effect=True),
    _k("controlled.shutdown.enable", _BOOL, True, "Move leadership away before shutting down.",
       no_effect=True),
    _k("broker.id.generation.enable", _BOOL, True, "Generate broker ids (ZooKeeper mode).", no_effect=True),
    _k("reserved.broker.max.id", _INT, 1000, "Highest configurable broker id (ZooKeeper mode).",
       validator=AtLeast(0), no_effect=True),
    _k("zookeeper.connect", _STR, None, "ZooKeeper connection string (ZooKeeper mode).", no_effect=True),
    _k("inter.broker.protocol.version", _STR, None, "Inter-broker protocol version.", no_effect=True),
    _k("authorizer.class.name", _STR, "",
       "ACL authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer (or "
       "kafka.security.authorizer.AclAuthorizer) checks every request against the ACLs; empty: no "
       "authorization (ACL APIs answer SECURITY_DISABLED). docs/security.md.",
       validator=AuthorizerClassName()),
    _k("super.users", _STR, "", "Principals allowed everything by the authorizer, separated by semicolons "
       "(User:admin;User:ops).", validator=PrincipalList()),
    _k("allow.everyone.if.no.acl.found", _BOOL, False,
       "With an authorizer: allow an action on a resource that no ACL applies to (else deny)."),
    _k("create.topic.policy.class.name", _CLASS, None, "CreateTopics policy plug-in.", importance="low",
       no_effect=True),
    _k("alter.config.policy.class.name", _CLASS, None, "AlterConfigs policy plug-in.", importance="low",
       no_effect=True),
    _k("metric.reporters", _LIST, [], "Metrics reporter classes.", importance="low", dynamic=True,
       no_effect=True),
    _k("unstable.api.versions.enable", _BOOL, False, "Advertise unreleased API versions.", no_effect=True),
    # --- TLS on SSL and SASL_SSL listeners (minibroker/security/tls.py). Each can be set per listener as
    # listener.name.<listener>.ssl.*. The dynamic ones are Kafka's (DynamicBrokerConfig): altered per broker,
    # the key and trust store ones only with the listener prefix (LISTENER_ONLY_DYNAMIC below); a change
    # rebuilds the listeners' TLS contexts for new connections.
    _k("ssl.keystore.type", _STR, "PEM",
       "Format of ssl.keystore.location: PEM (certificate chain and private key in one file) or PKCS12. "
       "JKS is not read (convert it: keytool -importkeystore -deststoretype PKCS12). Dynamic per listener.",
       kafka_default="JKS", validator=OneOf("PEM", "PKCS12", "JKS"), dynamic=True),
    _k("ssl.keystore.location", _STR, None,
       "Key store file: the listener's certificate chain and private key. Dynamic per listener "
       "(listener.name.<listener>.ssl.keystore.location): new connections get the new certificate, "
       "established ones keep theirs; altering it to the same path reloads the file.",
       importance="high", dynamic=True),
    _k("ssl.keystore.password", _PASSWORD, None,
       "Password of a PKCS12 key store (for PEM, see ssl.key.password). Dynamic per listener.",
       importance="high", dynamic=True),
    _k("ssl.key.password", _PASSWORD, None,
       "Password of an encrypted private key (PEM). Dynamic per listener.", importance="high", dynamic=True),
    _k("ssl.keystore.certificate.chain", _PASSWORD, None,
       "The certificate chain as PEM text, instead of ssl.keystore.location (with ssl.keystore.key). "
       "Dynamic per listener.", dynamic=True),
    _k("ssl.keystore.key", _PASSWORD, None,
       "The private key as PEM text (PKCS#8; encrypted with ssl.key.password or not), with "
       "ssl.keystore.certificate.chain. Dynamic per listener.", dynamic=True),
    _k("ssl.truststore.type", _STR, "PEM",
       "Format of ssl.truststore.location: PEM (CA certificates) or PKCS12. Dynamic per listener.",
       kafka_default="JKS", validator=OneOf("PEM", "PKCS12", "JKS"), dynamic=True),
    _k("ssl.truststore.location", _STR, None,
       "CA certificates that client certificates must chain to (ssl.client.auth); unset: the system's. "
       "Dynamic per listener, when the listener started with a trust store.", dynamic=True),
    _k("ssl.truststore.password", _PASSWORD, None, "Password of a PKCS12 trust store. Dynamic per listener.",
       dynamic=True),
    _k("ssl.truststore.certificates", _PASSWORD, None,
       "CA certificates as PEM text, instead of ssl.truststore.location. Dynamic per listener.",
       dynamic=True),
    _k("ssl.client.auth", _STR, "none",
       "Client certificates on SSL listeners: required (the handshake fails without a trusted one), "
       "requested (checked when sent) or none. On SASL_SSL listeners only a "
       "listener.name.<listener>.ssl.client.auth value applies, as in Kafka.",
       validator=OneOf("required", "requested", "none"), dynamic=True),
    _k("ssl.enabled.protocols", _LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted (TLSv1.2, TLSv1.3).",
       dynamic=True),
    _k("ssl.protocol", _STR, "TLSv1.3",
       "TLS protocol of the context: the highest version offered (TLS, TLSv1.2 or TLSv1.3).", dynamic=True),
    _k("ssl.cipher.suites", _LIST, [],
       "TLS 1.2 cipher suites by OpenSSL name (ECDHE-RSA-AES128-GCM-SHA256, ...); empty: OpenSSL's defaults. "
       "TLS 1.3 suites (TLS_AES_128_GCM_SHA256, ...) are always OpenSSL's: naming only those turns TLS 1.2 "
       "off.", dynamic=True),
    _k("ssl.allow.dn.changes", _BOOL, False,
       "Allow a dynamic key store change to a certificate with another subject (distinguished name).",
       importance="low"),
    _k("ssl.allow.san.changes", _BOOL, False,
       "Allow a dynamic key store change to a certificate that drops subject alternative names.",
       importance="low"),
    _k("ssl.principal.mapping.rules", _STR, "DEFAULT",
       "Rules mapping a client certificate's subject (RFC 2253, e.g. CN=alice,OU=eng,O=acme) to the User "
       "principal: RULE:pattern/replacement/[LU] items separated by commas, and DEFAULT (the subject as is).",
       importance="low", validator=PrincipalMappingRules()),
    # --- SASL on SASL_PLAINTEXT and SASL_SSL listeners (minibroker/security/sasl, docs/security.md). Read
    # once, at start-up; the per-listener forms are listener.name.<listener>.[<mechanism>.]<key>.
    _k("sasl.enabled.mechanisms", _LIST, ["GSSAPI"],
       "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER. GSSAPI "
       "(Kerberos, Kafka's default) is not served: a SASL listener must name another.", importance="high"),
    _k("sasl.jaas.config", _PASSWORD, None,
       "JAAS login configuration. A broker reads it only per listener and mechanism, as Kafka does: "
       "listener.name.<listener>.plain.sasl.jaas.config holds PLAIN's users (user_<name>=\"<password>\"), "
       "listener.name.<listener>.oauthbearer.sasl.jaas.config the unsecured OAUTHBEARER validator's "
       "options."),
    _k("sasl.server.callback.handler.class", _CLASS, None,
       "As listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class: the OAUTHBEARER token "
       "validator, a Python callable package.module:function(token) -> (principal name, expiry in epoch ms) "
       "instead of the unsecured JWS validator."),
    _k("sasl.server.max.receive.size", _INT, 524288, "Largest request accepted before SASL authentication "
       "succeeds; a larger one closes the connection.", validator=AtLeast(1)),
    _k("connections.max.reauth.ms", _LONG, 0,
       "SASL session lifetime (KIP-368): told to clients in SaslAuthenticate, which re-authenticate before "
       "it ends; a connection that does not is closed at its next request. 0: sessions do not expire "
       "(except with an expiring OAUTHBEARER token)."),
    _k("connection.failed.authentication.delay.ms", _INT, 100,
       "Delay before a failed SASL authentication is answered and its connection closed (slows password "
       "guessing).", importance="low", validator=AtLeast(0)),
]

BROKER_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in _BROKER_KEYS}
"""Every broker key minibroker accepts, in documentation order."""

# Kafka's broker-level synonym groups (DescribeConfigs lists them, highest priority first).
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    name: group
    for group in (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    )
    for name in group
}
BROKER_SYNONYMS["log.flush.interval.ms"] = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")

# minibroker-only alternative spellings, folded into the Kafka key while loading.
KEY_ALIASES: dict[str, str] = {"log.segment.index.bytes": "log.index.size.max.bytes"}

# Topic key -> broker keys that supply its default, highest priority first, with the factor that
# converts the broker unit to the topic unit (hours and minutes to milliseconds).
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", MINUTE_MS),
                     ("log.retention.hours", HOUR_MS)),
    "max.message.bytes": (("message.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.format.version": (("log.message.format.version", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.difference.max.ms": (("log.message.timestamp.difference.max.ms", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "message.downconversion.enable": (("log.message.downconversion.enable", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
}

_TOPIC_KEYS = [
    _k("cleanup.policy", _LIST, ["delete"], "delete and/or compact old segments.",
       validator=_CLEANUP_POLICIES),
    _k("compression.type", _STR, "producer", "Compression of stored batches; producer keeps the client's.",
       validator=OneOf(*_COMPRESSION_TYPES)),
    _k("compression.gzip.level", _INT, -1, "gzip level when recompressing.", validator=_GZIP_LEVEL),
    _k("compression.lz4.level", _INT, 9, "lz4 level when recompressing.", validator=_LZ4_LEVEL),
    _k("compression.zstd.level", _INT, 3, "zstd level when recompressing.", validator=_ZSTD_LEVEL),
    _k("delete.retention.ms", _LONG, 86400000, "How long tombstones survive compaction.",
       validator=AtLeast(0)),
    _k("file.delete.delay.ms", _LONG, 60000, "Delay before a deleted segment's files are removed.",
       validator=AtLeast(0)),
    _k("flush.messages", _LONG, LONG_MAX, "Messages appended before an fsync.", validator=AtLeast(1)),
    _k("flush.ms", _LONG, LONG_MAX, "Time before an fsync.", validator=AtLeast(0)),
    _k("follower.replication.throttled.replicas", _LIST, [], "Throttled follower replicas.", no_effect=True),
    _k("index.interval.bytes", _INT, 4096, "Bytes of log between two index entries.", validator=AtLeast(0)),
    _k("leader.replication.throttled.replicas", _LIST, [], "Throttled leader replicas.", no_effect=True),
    _k("local.retention.bytes", _LONG, -2, "Local retention size with tiered storage.", validator=AtLeast(-2),
       no_effect=True),
    _k("local.retention.ms", _LONG, -2, "Local retention with tiered storage.", validator=AtLeast(-2),
       no_effect=True),
    _k("max.compaction.lag.ms", _LONG, LONG_MAX, "Maximum age before a record must be compacted.",
       validator=AtLeast(1)),
    _k("max.message.bytes", _INT, 1048588, "Largest record batch accepted, after compression.",
       validator=AtLeast(0)),
    _k("message.downconversion.enable", _BOOL, True, "Convert batches for Fetch v0-v3."),
    _k("message.format.version", _STR, "3.0-IV1",
       "Record magic this topic keeps: 0.8.x/0.9.x v0, 0.10.x v1, 0.11 and later v2 (deprecated; "
       "honoured for teaching).", validator=MessageFormatValidator()),
    _k("message.timestamp.after.max.ms", _LONG, LONG_MAX, "How far in the future a CreateTime may be.",
       validator=AtLeast(0)),
    _k("message.timestamp.before.max.ms", _LONG, LONG_MAX, "How far in the past a CreateTime may be.",
       validator=AtLeast(0)),
    _k("message.timestamp.difference.max.ms", _LONG, LONG_MAX, "Deprecated gap limit for CreateTime.",
       validator=AtLeast(0)),
    _k("message.timestamp.type", _STR, "CreateTime", "CreateTime or LogAppendTime.",
       validator=_TIMESTAMP_TYPES),
    _k("min.cleanable.dirty.ratio", _DOUBLE, 0.5, "Dirty ratio that makes the log eligible for cleaning.",
       validator=Between(0, 1)),
    _k("min.compaction.lag.ms", _LONG, 0, "Minimum age before a record may be compacted.",
       validator=AtLeast(0)),
    _k("min.insync.replicas", _INT, 1, "Replicas that must hold a write for acks=all.", validator=AtLeast(1)),
    _k("preallocate", _BOOL, False, "Preallocate segment files.", no_effect=True),
    _k("remote.log.copy.disable", _BOOL, False, "Stop copying to tiered storage.", no_effect=True),
    _k("remote.log.delete.on.disable", _BOOL, False, "Delete tiered data when disabling it.", no_effect=True),
    _k("remote.storage.enable", _BOOL, False, "Tiered storage for this topic (not supported).",
       validator=OneOf(False)),
    _k("retention.bytes", _LONG, -1, "Partition size beyond which old segments are deleted; -1: none."),
    _k("retention.ms", _LONG, 604800000, "Age after which segments are deleted; -1 keeps them forever.",
       validator=AtLeast(-1)),
    _k("segment.bytes", _INT, 1073741824, "Size at which a segment is rolled.", validator=AtLeast(14)),
    _k("segment.index.bytes", _INT, 10485760, "Size of the index files.", validator=AtLeast(4)),
    _k("segment.jitter.ms", _LONG, 0, "Random jitter subtracted from segment.ms.", validator=AtLeast(0)),
    _k("segment.ms", _LONG, 604800000, "Age at which a segment is rolled.", validator=AtLeast(1)),
    _k("unclean.leader.election.enable", _BOOL, False, "Allow an out-of-sync replica to lead.",
       no_effect=True),
]

TOPIC_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in _TOPIC_KEYS}
"""Every topic-level key (CreateTopics / AlterConfigs), with Kafka's topic-level defaults."""

for _topic, _syns in TOPIC_CONFIG_SYNONYMS.items():
    for _broker, _factor in _syns:
        BROKER_CONFIGS[_broker].topic_config = _topic
for _key in TOPIC_CONFIGS.values():
    _key.dynamic = True  # every topic key can be altered

# ---------------------------------------------------------------------------------------------------
# Typed values.


def parse_typed(type: ConfigType, raw: str) -> Any:
    """Parse a string as Kafka's ConfigDef would for ``type``; raises ValueError(reason)."""
    text = raw.strip()
    if type is ConfigType.BOOLEAN:
        low = text.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise ValueError("expected a boolean: true or false")
    if type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError(f"expected a whole number ({type.name.lower()})")
        value = int(text)
        low, high = {ConfigType.INT: (INT_MIN, INT_MAX), ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
                     ConfigType.LONG: (LONG_MIN, LONG_MAX)}[type]
        if not low <= value <= high:
            raise ValueError(f"out of range for a {type.name.lower()} ({low}..{high})")
        return value
    if type is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise ValueError("expected a number") from None
    if type is ConfigType.LIST:
        return [] if not text else [item.strip() for item in text.split(",")]
    return text  # STRING, CLASS, PASSWORD


def format_value(type: ConfigType, value: Any) -> str | None:
    """Render a typed value as Kafka's DescribeConfigs does (None stays None)."""
    if value is None:
        return None
    if type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if type is ConfigType.LIST:
        return ",".join(value)
    if type is ConfigType.DOUBLE:
        return _java_double(float(value))
    return str(value)


def _java_double(value: float) -> str:
    """``Double.toString``: plain between 10^-3 and 10^7, else ``d.dddE<exp>`` (1.7976931348623157E308)."""
    if value == 0 or not math.isfinite(value) or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    import decimal  # rare: only doubles outside [10^-3, 10^7)

    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent + len(text) - 1}"


# ---------------------------------------------------------------------------------------------------
# The rest of Kafka's broker configuration definition.


def _validator_from_text(valid: str) -> Any:
    """Kafka's valid-values text (``[1,...]``, ``[2,...,10]``, ``[a, b]``) as a validator; None for ""."""
    if not valid:
        return None
    items = [v.strip() for v in valid.strip("[]").split(",")]
    if items[1:2] == ["..."]:
        low = int(items[0])
        return AtLeast(low) if len(items) == 2 else Between(low, int(items[2]))
    return OneOf(*items)


def _kafka_only_keys() -> list[ConfigKey]:
    """A ``no_effect`` key for every row of ``kafka_broker_keys`` (Kafka keys minibroker does not use)."""
    from minibroker.kafka_broker_keys import KAFKA_ONLY_BROKER_KEYS

    keys = []
    for name, type_name, default, valid, importance, dynamic, doc in KAFKA_ONLY_BROKER_KEYS:
        ctype = ConfigType[type_name.upper()]
        keys.append(_k(name, ctype, None if default is None else parse_typed(ctype, default), doc,
                       importance=importance, validator=_validator_from_text(valid), dynamic=dynamic,
                       no_effect=True))
    return keys


# Kafka accepts every name of its broker configuration definition, so minibroker does too: loaded,
# described with Kafka's default (DescribeConfigs), alterable when Kafka's are (AlterConfigs), and
# documented as having no effect.
for _key in _kafka_only_keys():
    BROKER_CONFIGS.setdefault(_key.name, _key)


# ---------------------------------------------------------------------------------------------------
# Java .properties parsing.

_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            break  # a lone trailing backslash is dropped
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i:i + 4]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"Malformed \\uxxxx escape in properties: {text!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def _ends_with_continuation(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def parse_properties(text: str, line_numbers: dict[str, int] | None = None) -> dict[str, str]:
    """Parse Java ``.properties`` text as ``java.util.Properties.load`` does; later keys win.

    Comments start with ``#`` or ``!``; ``key=value``, ``key:value`` and ``key value`` all work;
    a line ending in an odd number of backslashes continues on the next (whose leading blanks are
    dropped); ``\\t \\n \\r \\f \\uXXXX`` escapes are decoded and any other escaped character stands
    for itself (``\\=``, ``\\:``, ``\\ `` and ``\\#`` in keys).
    """
    lines = re.split(r"\r\n|\r|\n", text)
    result: dict[str, str] = {}
    i, n = 0, len(lines)
    while i < n:
        line = lines[i].lstrip(_WS)
        i += 1
        first_line = i  # 1-based, for ``line_numbers``
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line):
            line = line[:-1]
            if i >= n:
                break
            line += lines[i].lstrip(_WS)
            i += 1
        # the key ends at the first unescaped '=', ':' or blank
        key_end, value_start, has_sep, escaped = len(line), len(line), False, False
        for pos, c in enumerate(line):
            if not escaped and c in "=:":
                key_end, value_start, has_sep = pos, pos + 1, True
                break
            if not escaped and c in _WS:
                key_end, value_start = pos, pos + 1
                break
            escaped = (c == "\\") and not escaped
        while value_start < len(line):
            c = line[value_start]
            if c in _WS:
                value_start += 1
            elif not has_sep and c in "=:":
                has_sep = True
                value_start += 1
            else:
                break
        result[_unescape(line[:key_end])] = _unescape(line[value_start:])
        if line_numbers is not None:  # key -> the line it (last) starts on, for messages
            line_numbers[_unescape(line[:key_end])] = first_line
    return result


def _read_properties_file(path: str, line_numbers: dict[str, int] | None = None) -> dict[str, str]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"Cannot read configuration file {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # what Java's Properties.load(InputStream) assumes
    return parse_properties(text, line_numbers)


# ---------------------------------------------------------------------------------------------------
# Environment variables, as the apache/kafka image maps them.

# Variables the image (and Kafka's launch scripts) use for the JVM and logging, never as broker keys.
ENV_NOT_CONFIG = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_HOSTNAME", "KAFKA_JMX_PORT", "KAFKA_DEBUG", "KAFKA_HOME",
})
ENV_NOT_CONFIG_PREFIXES = ("KAFKA_JMX_", "KAFKA_LOG4J_")


def env_var_to_key(var: str) -> str:
    """``KAFKA_LOG_DIRS`` -> ``log.dirs``: drop the prefix, lower-case, ``_`` -> ``.``, ``__`` -> ``_``,
    ``___`` -> ``-`` (the apache/kafka image's rule)."""
    return var[len("KAFKA_"):].lower().replace("_", ".").replace("...", "-").replace("..", "_")


def key_to_env_var(key: str) -> str:
    """The inverse of ``env_var_to_key``: ``log.dirs`` -> ``KAFKA_LOG_DIRS``."""
    return "KAFKA_" + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def env_to_properties(environ: Mapping[str, str]) -> dict[str, str]:
    """Broker properties given as ``KAFKA_*`` environment variables.

    As in the apache/kafka image, when ``KAFKA_ADVERTISED_LISTENERS`` is set and ``KAFKA_LISTENERS``
    is not, the listeners are derived from the advertised ones bound to all interfaces (0.0.0.0).
    """
    props: dict[str, str] = {}
    for var in sorted(environ):
        if (not var.startswith("KAFKA_") or var in ENV_NOT_CONFIG
                or var.startswith(ENV_NOT_CONFIG_PREFIXES) or len(var) == len("KAFKA_")):
            continue
        props[env_var_to_key(var)] = environ[var]
    advertised = environ.get("KAFKA_ADVERTISED_LISTENERS")
    is_controller_only = environ.get("KAFKA_PROCESS_ROLES") == "controller"
    if advertised and not environ.get("KAFKA_LISTENERS") and not is_controller_only:
        props["listeners"] = re.sub(r"://(\[[^\]]*\]|[^:]*):", "://0.0.0.0:", advertised)
    return props


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """``["key=value", ...]`` as given to ``--override``; the value may itself contain ``=``."""
    props: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"Invalid --override {item!r}: expected key=value")
        props[key.strip()] = value
    return props


# ---------------------------------------------------------------------------------------------------
# Listeners.

Listener = collections.namedtuple("Listener", "name host port")
Listener.__doc__ = "One listener: upper-case name, host ('' = all interfaces), port (0 = ephemeral)."

_LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """``"PLAINTEXT:PLAINTEXT,SSL:SSL"`` -> ``{"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}``."""
    result: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"bad listener.security.protocol.map entry {item!r}: expected NAME:PROTOCOL")
        result[name.strip().upper()] = protocol
    return result


def parse_listeners(value: str, protocol_map: Mapping[str, str] | None = None, *,
                    _check_names: bool = True) -> list[Listener]:
    """Parse ``"PLAINTEXT://host:port,..."`` into ``Listener(name, host, port)`` tuples.

    Names are upper-cased and must be unique and present in ``protocol_map`` (Kafka's default map
    when None); IPv6 hosts are written in brackets; raises ValueError(reason).
    """
    if protocol_map is None:
        protocol_map = parse_security_protocol_map(_DEFAULT_PROTOCOL_MAP)
    result: list[Listener] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        m = _LISTENER_RE.match(item)
        if not m:
            raise ValueError(f"listener {item!r} is not of the form NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        if not name:
            raise ValueError(f"listener {item!r} has no name")
        if not 0 <= port <= 65535:
            raise ValueError(f"listener {item!r}: port must be between 0 and 65535")
        if _check_names and name not in protocol_map:
            raise ValueError(f"listener name {name} is not in listener.security.protocol.map")
        if any(lst.name == name for lst in result):
            raise ValueError(f"listener name {name} appears more than once")
        result.append(Listener(name, host, port))
    return result


def resolve_advertised(advertised: Iterable[Listener], bound_ports: Mapping[str, int],
                       default_host: str = "") -> list[Listener]:
    """Advertised listeners with port 0 replaced by the port each listener actually bound
    (``bound_ports`` by listener name) and an empty host by ``default_host`` (the server passes
    its bound address or host name)."""
    result = []
    for lst in advertised:
        port = bound_ports.get(lst.name, lst.port) if lst.port == 0 else lst.port
        result.append(Listener(lst.name, lst.host or default_host, port))
    return result


# ---------------------------------------------------------------------------------------------------
# DescribeConfigs answers.

ConfigSynonym = collections.namedtuple("ConfigSynonym", "name value source")


class ConfigEntry:
    """One DescribeConfigs result entry."""

    __slots__ = ("name", "value", "source", "read_only", "sensitive", "synonyms", "config_type",
                 "documentation")

    def __init__(self, name: str, value: str | None, source: ConfigSource, read_only: bool, sensitive: bool,
                 synonyms: list[ConfigSynonym], config_type: ConfigType, documentation: str | None):
        self.name = name
        self.value = value
        self.source = source
        self.read_only = read_only
        self.sensitive = sensitive
        self.synonyms = synonyms
        self.config_type = config_type
        self.documentation = documentation

    @property
    def is_default(self) -> bool:
        """The v0 ``is_default`` flag."""
        return self.source == ConfigSource.DEFAULT_CONFIG

    def __repr__(self) -> str:
        return f"ConfigEntry({self.name}={self.value!r}, {self.source.name})"


# ---------------------------------------------------------------------------------------------------
# Which broker keys AlterConfigs may set, and at which level (Kafka's DynamicBrokerConfig).

# The key and trust store keys (Kafka's SslConfigs.RECONFIGURABLE_CONFIGS): only in their listener form,
# listener.name.<listener>.ssl.keystore.location, never as the broker-wide key.
LISTENER_ONLY_DYNAMIC = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})
# Listener keys are set per broker only, never as the cluster default (Kafka's PerBrokerConfigs: the
# security keys and DynamicListenerConfig's, but for the cluster-wide max.connections,
# max.connection.creation.rate and num.network.threads); a listener-prefixed key is per broker too.
PER_BROKER_DYNAMIC = LISTENER_ONLY_DYNAMIC | frozenset({
    "listeners", "advertised.listeners", "listener.security.protocol.map", "principal.builder.class",
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
    ``ssl.*`` key (the only listener form minibroker applies at run time) the broker key it prefixes;
    None for anything else."""
    spec = BROKER_CONFIGS.get(key)
    if spec is None and (per_listener := split_listener_key(key)) is not None:
        _, mechanism, base = per_listener
        if mechanism is None and base.startswith("ssl."):
            return BROKER_CONFIGS[base]
    return spec


def check_dynamic(key: str, value: str | None, *, cluster_default: bool = False) -> Any:
    """``value`` parsed for ``key``'s dynamic layer (None to remove it), after Kafka's checks in their
    order: a known key, a dynamic one, the listener form for key and trust stores, a valid value,
    per broker for listener keys. Raises KafkaError."""
    spec = dynamic_spec(key)
    if spec is None:
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
    if cluster_default and (key in PER_BROKER_DYNAMIC or key not in BROKER_CONFIGS):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                         f"broker id must be specified: {key}")
    return parsed


# ---------------------------------------------------------------------------------------------------
# The broker configuration.

_STATIC_SOURCES = ("override", "env", "file")  # highest first


class BrokerConfig:
    """The broker's configuration: typed values by Kafka key, where each came from, dynamic layers.

    ``cfg["log.segment.bytes"]`` or ``cfg.log_segment_bytes`` give the effective typed value.
    Owned by the broker; handlers read it and AlterConfigs changes it through ``set_dynamic``.
    """

    def __init__(self, static: Mapping[str, Mapping[str, Any]] | None = None,
                 unknown: Mapping[str, str] | None = None):
        # source name ("file" / "env" / "override") -> key -> typed value
        self._static = {src: dict((static or {}).get(src, {})) for src in _STATIC_SOURCES}
        self._dynamic_broker: dict[str, Any] = {}
        self._dynamic_default: dict[str, Any] = {}
        self.unknown: dict[str, str] = dict(unknown or {})  # unknown keys, as given

    # -- reading
    def _layer_values(self, key: str) -> list[tuple[ConfigSource, Any]]:
        """Every value ``key`` has, highest precedence first (one static entry at most)."""
        out = []
        if key in self._dynamic_broker:
            out.append((ConfigSource.DYNAMIC_BROKER_CONFIG, self._dynamic_broker[key]))
        if key in self._dynamic_default:
            out.append((ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._dynamic_default[key]))
        for src in _STATIC_SOURCES:
            if key in self._static[src]:
                out.append((ConfigSource.STATIC_BROKER_CONFIG, self._static[src][key]))
                break
        spec = BROKER_CONFIGS.get(key)  # None for a listener-prefixed key: it has no default
        if spec is not None and spec.default is not None:
            out.append((ConfigSource.DEFAULT_CONFIG, spec.default))
        return out

    def __getitem__(self, key: str) -> Any:
        key = KEY_ALIASES.get(key, key)
        if key not in BROKER_CONFIGS:
            raise KeyError(key)
        layers = self._layer_values(key)
        return layers[0][1] if layers else None

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __contains__(self, key: object) -> bool:
        return key in BROKER_CONFIGS or key in KEY_ALIASES

    def __getattr__(self, attr: str) -> Any:
        key = attr.replace("_", ".")
        if key in BROKER_CONFIGS:
            return self[key]
        raise AttributeError(attr)

    def listener_override(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """The value set for ``key`` on one listener (``listener.name.<listener>.[<mechanism>.]<key>``,
        dynamically for this broker or in a static source), or None when none is."""
        full = listener_key(listener, key, mechanism)
        if full in self._dynamic_broker:
            return self._dynamic_broker[full]
        for src in _STATIC_SOURCES:
            if full in self._static[src]:
                return self._static[src][full]
        return None

    def for_listener(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """``key``'s value on ``listener``, as Kafka resolves it: the listener-prefixed (and, given a
        SASL mechanism, the mechanism-prefixed) value wins over the broker-wide one."""
        for mech in ((mechanism, None) if mechanism else (None,)):
            value = self.listener_override(listener, key, mech)
            if value is not None:
                return value
        return self[key]

    def listener_keys(self) -> dict[str, str]:
        """Every listener-prefixed key set in a static source, with the source (for checks and logs)."""
        return {k: src for src in reversed(_STATIC_SOURCES) for k in self._static[src]
                if k.startswith(LISTENER_PREFIX)}

    def source_of(self, key: str) -> str:
        """``"default"``, ``"file"``, ``"env"``, ``"override"``, ``"dynamic"`` or ``"dynamic-default"``."""
        key = KEY_ALIASES.get(key, key)
        if key in self._dynamic_broker:
            return "dynamic"
        if key in self._dynamic_default:
            return "dynamic-default"
        for src in _STATIC_SOURCES:
            if key in self._static[src]:
                return src
        return "default"

    def effective(self) -> dict[str, Any]:
        """Every known key with its effective value (passwords masked), for the start-up log."""
        out = {}
        for name, key in BROKER_CONFIGS.items():
            value = self[name]
            out[name] = "[hidden]" if key.sensitive and value is not None else value
        return out

    def non_default(self) -> dict[str, Any]:
        """Only the keys set somewhere other than the embedded defaults (listener-prefixed ones too),
        for a short start-up banner."""
        out = {k: v for k, v in self.effective().items() if self.source_of(k) != "default"}
        for key, src in self.listener_keys().items():
            value = self._static[src][key]
            out[key] = "[hidden]" if BROKER_CONFIGS[split_listener_key(key)[2]].sensitive else value
        return out

    # -- derived values
    @property
    def node_id(self) -> int:
        return self["node.id"]

    @property
    def data_dir(self) -> str:
        """The first log dir, which holds the broker's metadata files (as Kafka's metadata.log.dir
        defaults to the first of log.dirs)."""
        return self.log_dirs[0]

    @property
    def log_dirs(self) -> list[str]:
        """Every log dir: ``log.dirs`` if set anywhere, else ``log.dir`` (comma-separated)."""
        if self.source_of("log.dirs") != "default" or self.source_of("log.dir") == "default":
            value = self["log.dirs"]
        else:
            value = self["log.dir"]
        return [d.strip() for d in value.split(",") if d.strip()] or [value.strip()]

    def security_protocol_map(self) -> dict[str, str]:
        return parse_security_protocol_map(self["listener.security.protocol.map"])

    def listener_endpoints(self) -> list[Listener]:
        return parse_listeners(self["listeners"], self.security_protocol_map())

    def advertised_endpoints(self) -> list[Listener]:
        """``advertised.listeners``, or the listeners when it is unset."""
        value = self["advertised.listeners"]
        if value is None:
            return self.listener_endpoints()
        return parse_listeners(value, self.security_protocol_map())

    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level effective defaults (segment.bytes, retention.ms, ...) from the broker keys."""
        return {name: self._topic_default(name)[0] for name in TOPIC_CONFIGS}

    def _topic_default(self, topic_key: str) -> tuple[Any, list[ConfigSynonym]]:
        """(value, synonyms) a topic key inherits from the broker, honouring synonym order."""
        value = None
        synonyms: list[ConfigSynonym] = []
        for broker_key, factor in TOPIC_CONFIG_SYNONYMS.get(topic_key, ()):
            btype = BROKER_CONFIGS[broker_key].type
            for source, v in self._layer_values(broker_key):
                synonyms.append(ConfigSynonym(broker_key, format_value(btype, v), source))
                if value is None:
                    value = v * factor if factor != 1 else v
        if value is None:
            value = TOPIC_CONFIGS[topic_key].default
        if topic_key == "retention.ms" and value < 0:
            value = -1  # any negative retention means unlimited
        return value, synonyms

    # -- dynamic changes (AlterConfigs on the broker resource)
    def set_dynamic(self, key: str, value: str | None, *, cluster_default: bool = False) -> None:
        """Set (or with None remove) a dynamic broker value, validated (``check_dynamic``); raises
        KafkaError."""
        parsed = check_dynamic(key, value, cluster_default=cluster_default)
        layer = self._dynamic_default if cluster_default else self._dynamic_broker
        if value is None:
            layer.pop(key, None)
        else:
            layer[key] = parsed

    def dynamic_values(self, *, cluster_default: bool = False) -> dict[str, str]:
        """The dynamic layer as strings, for persisting it."""
        layer = self._dynamic_default if cluster_default else self._dynamic_broker
        return {k: format_value(dynamic_spec(k).type, v) for k, v in layer.items()}

    # -- DescribeConfigs
    def describe(self, keys: Iterable[str] | None = None, *, include_synonyms: bool = True,
                 include_documentation: bool = True) -> list[ConfigEntry]:
        """DescribeConfigs entries for the broker resource (all known keys when ``keys`` is None;
        unknown names are skipped, as Kafka does). Listener keys set dynamically are described too, with
        the broker key they prefix as their next synonym, as Kafka does."""
        listener_keys = sorted(k for k in self._dynamic_broker if k not in BROKER_CONFIGS)
        if keys is None:
            names = [*BROKER_CONFIGS, *listener_keys]
        else:
            names = [k for k in keys if k in BROKER_CONFIGS or k in self._dynamic_broker]
        entries = []
        for name in names:
            spec = dynamic_spec(name) if name in listener_keys else BROKER_CONFIGS[name]
            chain = (name, spec.name) if name in listener_keys else BROKER_SYNONYMS.get(name, (name,))
            synonyms = [
                ConfigSynonym(syn, format_value(dynamic_spec(syn).type, v), source)
                for syn in chain
                for source, v in self._layer_values(syn)
            ]
            current = self._dynamic_broker[name] if name in listener_keys else self[name]
            value = None if spec.sensitive else format_value(spec.type, current)
            if spec.sensitive:
                synonyms = [s._replace(value=None) for s in synonyms]
            entries.append(ConfigEntry(
                name, value, synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=not spec.dynamic, sensitive=spec.sensitive,
                synonyms=synonyms if include_synonyms else [], config_type=spec.type,
                documentation=spec.doc if include_documentation else None))
        return entries


# ---------------------------------------------------------------------------------------------------
# Loading.


LISTENER_PREFIX = "listener.name."


def listener_key(listener: str, key: str, mechanism: str | None = None) -> str:
    """Kafka's per-listener form of ``key``: ``listener.name.<listener lower-cased>.[<mechanism
    lower-cased>.]<key>`` (``listener.name.ssl.ssl.keystore.location``)."""
    middle = f"{mechanism.lower()}." if mechanism else ""
    return f"{LISTENER_PREFIX}{listener.lower()}.{middle}{key}"


def split_listener_key(key: str) -> tuple[str, str | None, str] | None:
    """``listener.name.<listener>.[<mechanism>.]<broker key>`` as (listener, mechanism or None, broker
    key); None for anything else. A mechanism prefix goes only before ``sasl.*`` keys and
    ``connections.max.reauth.ms``, as Kafka reads them
    (``listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config``)."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    listener, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    if not listener or not rest:
        return None
    if rest in BROKER_CONFIGS:
        return listener, None, rest
    mechanism, _, base = rest.partition(".")
    per_mechanism = base.startswith("sasl.") or base == "connections.max.reauth.ms"
    if mechanism and per_mechanism and base in BROKER_CONFIGS:
        return listener, mechanism, base
    return None


def _parse_layer(props: Mapping[str, str], source: str, unknown: dict[str, str]) -> dict[str, Any]:
    typed: dict[str, Any] = {}
    # an alias is applied first so that the Kafka spelling wins when a source gives both
    for key, raw in sorted(props.items(), key=lambda kv: kv[0] not in KEY_ALIASES):
        key = KEY_ALIASES.get(key, key)
        spec = BROKER_CONFIGS.get(key)
        if spec is None and (per_listener := split_listener_key(key)) is not None:
            spec = BROKER_CONFIGS[per_listener[2]]  # parsed and validated as the broker key
        if spec is None:
            unknown[key] = raw
            continue
        try:
            typed[key] = spec.parse(raw)
        except ValueError as e:
            where = {"env": f"environment variable {key_to_env_var(key)}", "file": "the properties file",
                     "override": "--override"}[source]
            allowed = spec.validator.describe() if spec.validator is not None else spec.type.name.lower()
            raise ConfigError(f"Invalid value {raw!r} for configuration {key} (from {where}): {e}; "
                              f"allowed: {allowed}") from None
    return typed


def load_config(properties_file: str | None, overrides: list[str],
                environ: Mapping[str, str]) -> BrokerConfig:
    """Build the broker configuration from defaults, a properties file, ``KAFKA_*`` variables and
    ``--override key=value`` items (that precedence, lowest first). Raises ConfigError."""
    unknown: dict[str, str] = {}
    file_lines: dict[str, int] = {}
    per_layer: dict[str, dict[str, str]] = {"file": {}, "env": {}, "override": {}}
    layers = {
        "file": _parse_layer(_read_properties_file(properties_file, file_lines) if properties_file else {},
                             "file", per_layer["file"]),
        "env": _parse_layer(env_to_properties(environ), "env", per_layer["env"]),
        "override": _parse_layer(parse_overrides(overrides), "override", per_layer["override"]),
    }
    for source, found in per_layer.items():
        for key in sorted(found):
            if source == "file":
                where = f"{properties_file}, line {file_lines[key]}" if key in file_lines else properties_file
            elif source == "env":
                where = "environment " + next((v for v in sorted(environ) if v.startswith("KAFKA_")
                                               and env_var_to_key(v) == key), key_to_env_var(key))
            else:
                where = "--override"
            log.warning("Unknown configuration %s=%r (from %s) is ignored%s", key, found[key], where,
                        did_you_mean(key))
        unknown.update(found)
    cfg = BrokerConfig(layers, unknown)
    _check_cross_key(cfg)
    return cfg


def did_you_mean(key: str) -> str:
    """``"; did you mean log.retention.hours?"`` for the closest known key, or ``""``."""
    import difflib

    close = difflib.get_close_matches(key, [*BROKER_CONFIGS, *KEY_ALIASES], n=1, cutoff=0.8)
    return f"; did you mean {close[0]}?" if close else ""


def _check_cross_key(cfg: BrokerConfig) -> None:
    """Rules spanning several keys; also makes node.id and broker.id follow each other."""
    node_set, broker_set = cfg.source_of("node.id") != "default", cfg.source_of("broker.id") != "default"
    if node_set and broker_set and cfg["node.id"] != cfg["broker.id"]:
        raise ConfigError(f"node.id ({cfg['node.id']}) and broker.id ({cfg['broker.id']}) must be equal "
                          "when both are set")
    for have, follower in (("node.id", "broker.id"), ("broker.id", "node.id")):
        if cfg.source_of(have) != "default" and cfg.source_of(follower) == "default":
            cfg._static[cfg.source_of(have)][follower] = cfg[have]
    try:
        protocol_map = cfg.security_protocol_map()
    except ValueError as e:
        raise ConfigError(f"Invalid value for configuration listener.security.protocol.map: {e}") from None
    for key in ("listeners", "advertised.listeners"):
        if cfg[key] is None:
            continue
        try:
            parsed = parse_listeners(cfg[key], protocol_map)
        except ValueError as e:
            raise ConfigError(f"Invalid value {cfg[key]!r} for configuration {key}: {e}") from None
        if not parsed:
            raise ConfigError(f"Invalid value {cfg[key]!r} for configuration {key}: no listener given")
        for lst in parsed:
            if key == "advertised.listeners" and lst.host in ("0.0.0.0", "::"):
                raise ConfigError(f"Invalid value {cfg[key]!r} for configuration {key}: cannot advertise "
                                  f"the non-routable address {lst.host}")
    listener_names = {lst.name for lst in cfg.listener_endpoints()}
    for key in sorted(cfg.listener_keys()):
        named = split_listener_key(key)[0]
        if named.upper() not in listener_names:
            log.warning("Configuration %s names no listener in listeners (%s) and is ignored%s", key,
                        ", ".join(sorted(listener_names)),
                        "; listener names are written in lower case in these keys" if named != named.lower()
                        else "")
        elif named != named.lower():
            log.warning("Configuration %s is ignored: Kafka reads listener.name.%s.*, in lower case", key,
                        named.lower())
    extra = {lst.name for lst in cfg.advertised_endpoints()} - listener_names
    if extra:
        raise ConfigError(f"Invalid value {cfg['advertised.listeners']!r} for configuration "
                          "advertised.listeners: "
                          f"listener names {', '.join(sorted(extra))} are not in listeners")
    dirs_key = "log.dirs" if cfg.source_of("log.dirs") != "default" or cfg.source_of("log.dir") == "default" \
        else "log.dir"
    dirs = [d.strip() for d in cfg[dirs_key].split(",") if d.strip()]
    if not dirs:
        raise ConfigError(f"Invalid value {cfg[dirs_key]!r} for configuration {dirs_key}: no directory")
    real = [os.path.realpath(d) for d in dirs]
    if len(set(real)) != len(real):  # Kafka's LogManager refuses a dir named twice
        raise ConfigError(f"Invalid value {cfg[dirs_key]!r} for configuration {dirs_key}: duplicate log "
                          "directory")
    # Kafka's KafkaConfig.validateValues, for the socket server's keys
    queued, request_max = cfg["queued.max.request.bytes"], cfg["socket.request.max.bytes"]
    if queued > 0 and queued < request_max:
        raise ConfigError(f"Invalid value {queued} for configuration queued.max.request.bytes: must be -1, "
                          f"0 or at least socket.request.max.bytes ({request_max})")
    if cfg["max.connections.per.ip"] == 0 and not parse_host_counts(cfg["max.connections.per.ip.overrides"]):
        raise ConfigError("Invalid value 0 for configuration max.connections.per.ip: it can be 0 only if "
                          "max.connections.per.ip.overrides is set")
    from minibroker.security.sasl.settings import SaslConfigError, sasl_listener_settings

    try:  # a SASL listener nobody could log in to (no served mechanism, PLAIN without users ...)
        sasl_listener_settings(cfg, warn=False)
    except SaslConfigError as e:
        raise ConfigError(str(e)) from None


# ---------------------------------------------------------------------------------------------------
# Topic configuration (CreateTopics, AlterConfigs, IncrementalAlterConfigs, DescribeConfigs).


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


# ---------------------------------------------------------------------------------------------------
# docs/configuration.md


def _doc_default(key: ConfigKey) -> str:
    if key.default is None:
        return "null"
    if key.type is ConfigType.LIST:
        return ",".join(key.default) if key.default else '""'
    if key.default == "":
        return '""'
    return format_value(key.type, key.default)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def config_reference_markdown() -> str:
    """The text of docs/configuration.md, generated from the tables above."""
    out = [
        "# Configuration",
        "",
        "<!-- Generated by minibroker.config.config_reference_markdown(); do not edit by hand. -->",
        "",
        "minibroker uses Apache Kafka's broker and topic property names, types, defaults and synonyms,",
        "so a Kafka `server.properties` mostly works unchanged and DescribeConfigs answers one to one.",
        "",
        "## Sources and precedence",
        "",
        "Lowest to highest; a later source replaces a key set by an earlier one:",
        "",
        "1. Embedded defaults (the tables below).",
        "2. The properties file: `minibroker serve FILE` (Java `.properties` syntax: `#`/`!` comments,",
        "   `key=value`, `key: value` or `key value`, backslash line continuation, `\\uXXXX` escapes).",
        "3. `KAFKA_*` environment variables.",
        "4. `--override key=value` options, in order (as `kafka-server-start.sh` takes them).",
        "",
        "This is the order the official apache/kafka image produces: it appends the environment-derived",
        "properties to the mounted `server.properties`, and `--override` beats the file in",
        "`kafka-server-start.sh`. One difference: when any `KAFKA_*` variable is set the image drops its",
        "own default file, while minibroker always starts from its embedded defaults.",
        "",
        "At run time, AlterConfigs / IncrementalAlterConfigs on the broker resource may set the keys",
        "marked *dynamic* per broker or as cluster default; these sit above every static source, as in",
        "Kafka. Topic keys are set per topic (CreateTopics, AlterConfigs) and otherwise inherit the broker",
        "key listed beside them.",
        "",
        "Unknown keys are logged as warnings and ignored; each warning says where the key came from (the",
        "file and line, the `KAFKA_*` variable, or `--override`) and the closest known key when one is",
        "close (`num.partition` -> did you mean `num.partitions`?). An invalid value stops start-up with a",
        "message naming the key, the value, where it came from and what is allowed.",
        "",
        "## Environment variables",
        "",
        "As in the apache/kafka image: take a variable starting with `KAFKA_`, drop that prefix, lower-case",
        "it, then turn `_` into `.`, `___` into `-` and `__` into `_`. So `KAFKA_LOG_DIRS` sets `log.dirs`,",
        "`KAFKA_LISTENER_SECURITY_PROTOCOL_MAP` sets `listener.security.protocol.map` and",
        "`KAFKA_LOG_RETENTION_HOURS=24` sets `log.retention.hours`.",
        "",
        "Variables the image and Kafka's scripts use for the JVM and logging are not configuration: "
        + ", ".join(f"`{v}`" for v in sorted(ENV_NOT_CONFIG)) + ", and every `KAFKA_JMX_*` and "
        "`KAFKA_LOG4J_*`.",
        "",
        "When `KAFKA_ADVERTISED_LISTENERS` is set and `KAFKA_LISTENERS` is not, `listeners` becomes the",
        "advertised listeners bound to `0.0.0.0`, as the image's configure script does.",
        "",
        "## Differences from Kafka's defaults",
        "",
        "minibroker is a development broker meant to run without a file, so a few embedded defaults",
        "differ from Kafka's code defaults (what a Kafka broker takes for a key its file leaves out). The",
        "listener, data directory and node id suit a local process. The group and internal-topic keys",
        "take the values of the files Kafka itself ships for one development broker: its",
        "`config/server.properties` (`group.initial.rebalance.delay.ms=0` up to 3.9; the replication",
        "factor and min ISR of `__consumer_offsets`, `__transaction_state` and `__share_group_state` at 1),",
        "the apache/kafka image's default file and its example compose files. Each key's description",
        "below says which. `num.partitions` (1) and the log, socket and retention keys those files set",
        "are Kafka's code defaults already.",
        "",
    ]
    for key in BROKER_CONFIGS.values():
        if key.kafka_default is not None:
            out.append(f"- `{key.name}`: `{_doc_default(key)}` (Kafka's code default: `{key.kafka_default}`)")
    out += [
        "",
        "Listeners speak PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL, as",
        "`listener.security.protocol.map` maps their names (docs/security.md); any key can be set for one",
        "listener as `listener.name.<listener name in lower case>.<key>`",
        "(`listener.name.ssl.ssl.keystore.location`), which wins over the plain key. All data is kept in one",
        "directory. The listener forms are Kafka's: `NAME://host:port`, empty host for all interfaces (one",
        "dual-stack socket, IPv4 and IPv6, where the kernel has IPv6), `[::1]` for IPv6, port 0 for an",
        "ephemeral port; `advertised.listeners` defaults to `listeners`. As in Kafka, a host name binds its",
        "first resolved address only. Names are resolved once at start-up, before the event loop runs, so",
        "the broker process stays single-threaded (uvloop would otherwise start libuv's pool of four",
        "resolver threads).",
        "",
        "minibroker also accepts these spellings and treats them as the Kafka key (when a source",
        "gives both, the Kafka key wins):",
        "",
        *[f"- `{alias}` -> `{key}`" for alias, key in KEY_ALIASES.items()],
        "",
        "## Broker keys",
        "",
        "*Dynamic*: AlterConfigs may change it at run time. *No effect*: accepted because Kafka knows",
        "it, but it changes nothing on a single node. Keys marked **minibroker** are not Kafka keys.",
        "The table holds every key of Kafka 3.9's broker configuration definition (the ones minibroker",
        "does not use come last, from `minibroker/kafka_broker_keys.py`) and the share coordinator keys",
        "of Kafka 4 that the apache/kafka image's examples set.",
        "",
        "| Key | Type | Default | Valid values | Dynamic | No effect | Topic key | Description |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in BROKER_CONFIGS.values():
        valid = key.validator.describe() if key.validator is not None else ""
        desc = ("**minibroker**: " if key.minibroker_only else "") + key.doc
        syn = BROKER_SYNONYMS.get(key.name)
        if syn and len(syn) > 1 and key.name == syn[0]:
            desc += " Synonyms, highest priority first: " + ", ".join(f"`{s}`" for s in syn) + "."
        out.append(
            f"| `{key.name}` | {key.type.name.lower()} | `{_cell(_doc_default(key))}` | {_cell(valid)} | "
            f"{'yes' if key.dynamic else ''} | {'yes' if key.no_effect else ''} | "
            f"{f'`{key.topic_config}`' if key.topic_config else ''} | {_cell(desc)} |"
        )
    out += [
        "",
        "## Topic keys",
        "",
        "A topic without an override takes the first broker key in its row that has a value (hours and",
        "minutes are converted to milliseconds), else Kafka's topic default. An unknown topic key or a bad",
        "value is rejected with INVALID_CONFIG (40).",
        "",
        "| Key | Type | Topic default | Broker keys | Valid values | No effect | Description |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in TOPIC_CONFIGS.values():
        valid = key.validator.describe() if key.validator is not None else ""
        brokers = ", ".join(f"`{b}`" for b, _ in TOPIC_CONFIG_SYNONYMS.get(key.name, ()))
        out.append(
            f"| `{key.name}` | {key.type.name.lower()} | `{_cell(_doc_default(key))}` | {brokers} | "
            f"{_cell(valid)} | {'yes' if key.no_effect else ''} | {_cell(key.doc)} |"
        )
    out.append("")
    return "\n".join(out)
