"""The key catalogue: every broker key minibroker accepts (``BROKER_CONFIGS``) and every topic key
(``TOPIC_CONFIGS``), with Apache Kafka's names, types, defaults, synonyms and validators.

Loading (minibroker/config/broker.py), validation, DescribeConfigs answers, the dynamic layers
(minibroker/config/dynamic.py) and docs/configuration.md (minibroker/config/reference.py) are all derived
from these tables, so they cannot drift apart. Also here: the typed values' text forms (Kafka's
ConfigDef parsing and DescribeConfigs rendering), the DescribeConfigs entry shapes, and the
listener-prefixed key names (``listener.name.<listener>.<key>``) that set a catalogue key for one
listener.

Stdlib only and cheap to import: the broker's start-up time budget includes this package.
"""

from __future__ import annotations

import collections
import collections.abc
import math
from enum import IntEnum
from typing import Any

from minibroker.config.listeners import DEFAULT_PROTOCOL_MAP
from minibroker.config.message_format import MessageFormatValidator
from minibroker.config.validators import (
    AtLeast,
    AuthorizerClassName,
    Between,
    HostCounts,
    ListenerList,
    ListOf,
    OneOf,
    PrincipalList,
    PrincipalMappingRules,
)

__all__ = [
    "BROKER_CONFIGS",
    "BROKER_SYNONYMS",
    "KEY_ALIASES",
    "LISTENER_PREFIX",
    "REMOVED_BROKER_KEYS",
    "REMOVED_TOPIC_KEYS",
    "TOPIC_CONFIG_SYNONYMS",
    "TOPIC_CONFIGS",
    "ConfigEntry",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "format_value",
    "listener_key",
    "parse_typed",
    "split_listener_key",
]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


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



# ---------------------------------------------------------------------------------------------------
# The declarative tables.


class ConfigKey:
    """One configuration key: its Kafka type, default, validator and what minibroker does with it.

    ``dynamic``: Kafka lets AlterConfigs change it at run time (broker keys; topic keys always are).
    ``no_effect``: accepted because Kafka knows it, but it changes nothing on a single node.
    ``minibroker_only``: not an Apache Kafka key.
    ``kafka_default``: Kafka's default where minibroker's embedded default differs (for the docs).
    ``removed_in``: the Apache Kafka release that dropped the key ("4.0"); minibroker still accepts it,
    so a 3.x configuration keeps starting, and warns when one is given.
    """

    __slots__ = (
        "name", "type", "default", "doc", "importance", "validator", "dynamic", "no_effect",
        "minibroker_only", "kafka_default", "topic_config", "removed_in",
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
        self.removed_in: str | None = None  # filled in from REMOVED_BROKER_KEYS below

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
    _k("listener.security.protocol.map", _STR, DEFAULT_PROTOCOL_MAP,
       "Listener name to security protocol: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over "
       "TLS). Any listener key can be set for one listener as "
       "listener.name.<listener name, lower case>.<key>.",
       importance="low"),
    _k("inter.broker.listener.name", _STR, None, "Listener used between brokers (a single node has none).",
       no_effect=True),
    _k("security.inter.broker.protocol", _STR, "PLAINTEXT", "Protocol used between brokers.", no_effect=True,
       validator=OneOf("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    _k("control.plane.listener.name", _STR, None, "Separate controller listener.", no_effect=True),
    _k("controller.listener.names", _LIST, None, "Listeners used by the KRaft controller.", no_effect=True),
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
    _k("num.recovery.threads.per.data.dir", _INT, 2, "Threads recovering logs at start-up.",
       validator=AtLeast(1), dynamic=True, no_effect=True),
    _k("metrics.port", _INT, None,
       "Optional HTTP port serving Prometheus metrics at /metrics; unset disables it.",
       validator=Between(0, 65535), minibroker_only=True),
    _k("ui.enable", _BOOL, False,
       "Serve the live view (docs/ui.md) at /ui on metrics.port: overview, append feed, partition and group "
       "views; read-only.", minibroker_only=True),
    _k("ui.allow.remote", _BOOL, False,
       "Serve the live view when metrics.port is bound to a non-loopback address (it is refused there "
       "otherwise); plain HTTP, authenticated only with an authorizer on (docs/ui.md).",
       minibroker_only=True),
    _k("fault.injection.enable", _BOOL, False,
       "Serve fault injection rules (docs/testing.md, \"Faults on demand\") through /faults on metrics.port "
       "and the pytest fixture; for tests only.", minibroker_only=True),
    _k("fault.injection.allow.remote", _BOOL, False,
       "Allow fault.injection.enable on a listener beyond loopback (logged as a warning); otherwise such a "
       "broker refuses to start.", minibroker_only=True),
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
       "Replicas that must hold a write for acks=all; the only replica is this broker. With eligible "
       "leader replicas on (KIP-966, as Kafka 4.1+), the first start also writes this value as the "
       "cluster-level dynamic default, which topics then report (DYNAMIC_DEFAULT_BROKER_CONFIG) and a "
       "later static change does not replace; it cannot be set per broker or removed.",
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
    # Kafka 4.x's default is an hour; unbounded here keeps the header-only append path (records/validator.py)
    _k("log.message.timestamp.after.max.ms", _LONG, LONG_MAX,
       "How far in the future a CreateTime timestamp may be.", validator=AtLeast(0), dynamic=True,
       kafka_default="3600000"),
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
       "Largest share.delivery.count.limit a group config may set.", validator=Between(5, 25)),
    _k("group.share.max.size", _INT, 200, "Most members in one share group; one more gets "
       "GROUP_MAX_SIZE_REACHED.", validator=Between(1, 1000)),
    _k("group.share.assignors", _LIST, ["simple"],
       "Share group assignors; 'simple' (partitions spread over the members, shared when members "
       "outnumber them) is the only one.", validator=ListOf("simple")),
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
    _k("share.coordinator.append.linger.ms", _INT, -1,
       "How long Kafka's share coordinator waits to batch writes, -1 adaptive (each write is its own "
       "batch here).", validator=AtLeast(-1), no_effect=True),
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
    _k("producer.id.expiration.ms", _INT, 86400000,
       "Time after which a partition forgets a producer id whose last batch or marker is older (by its "
       "timestamp) and that has no open transaction; its next batch must then start at sequence 0.",
       validator=AtLeast(1), dynamic=True),
    _k("producer.id.expiration.check.interval.ms", _INT, 600000,
       "How often producer ids past producer.id.expiration.ms are removed (an internal key in Kafka).",
       importance="low", validator=AtLeast(1)),
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
    _k("queued.max.requests", _INT, 500,
       "Whole requests read and waiting to be handled, all connections together (a connection holds the "
       "requests pipelined behind the one being answered). When reached, connections are not read, and a "
       "request already read is not handled, until one is taken in, as Kafka's network threads block on "
       "a full request queue.", validator=AtLeast(1)),
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
       "accepting the next connection. Per listener: listener.name.<listener>.max.connection.creation.rate "
       "(defaults to this value; dynamically settable per broker or as the cluster default, as Kafka's "
       "cluster-level listener keys). Per client address: the connection_creation_rate client quota "
       "(docs/security.md).", validator=AtLeast(0), dynamic=True),
    _k("quota.window.num", _INT, 11,
       "Samples kept per client quota sensor (docs/security.md, Quotas); rates are measured over them, "
       "never over less than quota.window.num - 1 whole windows.", importance="low", validator=AtLeast(1)),
    _k("quota.window.size.seconds", _INT, 1, "Length of each client quota sample, in seconds.",
       importance="low", validator=AtLeast(1)),
    _k("controller.quota.window.num", _INT, 11,
       "With controller.quota.window.size.seconds, the burst of the controller_mutation_rate client quota: "
       "a client may mutate rate x num x size partitions at once before it is throttled (Kafka's token "
       "bucket).", importance="low", validator=AtLeast(1)),
    _k("controller.quota.window.size.seconds", _INT, 1,
       "Seconds of each controller mutation quota window (see controller.quota.window.num).",
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
    _k("metric.reporters", _LIST, ["org.apache.kafka.common.metrics.JmxReporter"],
       "Metrics reporter classes (Kafka 4 lists JmxReporter by default, KIP-830).", importance="low",
       dynamic=True, no_effect=True),
    _k("unstable.api.versions.enable", _BOOL, False, "Advertise unreleased API versions.", no_effect=True),
    # --- TLS on SSL and SASL_SSL listeners (minibroker/security/tls.py). Each can be set per listener as
    # listener.name.<listener>.ssl.*. The dynamic ones are Kafka's (DynamicBrokerConfig): altered per broker,
    # the key and trust store ones only with the listener prefix (LISTENER_ONLY_DYNAMIC below); a change
    # rebuilds the listeners' TLS contexts for new connections.
    _k("ssl.keystore.type", _STR, "PEM",
       "Format of ssl.keystore.location: PEM (certificate chain and private key in one file), JKS (Java's "
       "key store; its first private key entry is served) or PKCS12. Unset, a JKS file is read as JKS "
       "(Kafka's default), a PKCS12 file declared JKS as PKCS12 (as Java does). JCEKS is not read. "
       "Dynamic per listener.",
       kafka_default="JKS", validator=OneOf("PEM", "PKCS12", "JKS"), dynamic=True),
    _k("ssl.keystore.location", _STR, None,
       "Key store file: the listener's certificate chain and private key. Dynamic per listener "
       "(listener.name.<listener>.ssl.keystore.location): new connections get the new certificate, "
       "established ones keep theirs; altering it to the same path reloads the file.",
       importance="high", dynamic=True),
    _k("ssl.keystore.password", _PASSWORD, None,
       "Password of a JKS or PKCS12 key store (required for them, as in Kafka; for PEM, see "
       "ssl.key.password). Dynamic per listener.",
       importance="high", dynamic=True),
    _k("ssl.key.password", _PASSWORD, None,
       "Password of an encrypted private key (PEM), or of a JKS store's key when it differs from "
       "ssl.keystore.password. Dynamic per listener.", importance="high", dynamic=True),
    _k("ssl.keystore.certificate.chain", _PASSWORD, None,
       "The certificate chain as PEM text, instead of ssl.keystore.location (with ssl.keystore.key). "
       "Dynamic per listener.", dynamic=True),
    _k("ssl.keystore.key", _PASSWORD, None,
       "The private key as PEM text (PKCS#8; encrypted with ssl.key.password or not), with "
       "ssl.keystore.certificate.chain. Dynamic per listener.", dynamic=True),
    _k("ssl.truststore.type", _STR, "PEM",
       "Format of ssl.truststore.location: PEM (CA certificates), JKS (its trusted certificate entries, "
       "and the certificate of each private key entry, as Java trusts them) or PKCS12; unset, a JKS file "
       "is read as JKS, as for ssl.keystore.type. Dynamic per listener.",
       kafka_default="JKS", validator=OneOf("PEM", "PKCS12", "JKS"), dynamic=True),
    _k("ssl.truststore.location", _STR, None,
       "CA certificates that client certificates must chain to (ssl.client.auth); unset: the system's. "
       "Dynamic per listener, when the listener started with a trust store.", dynamic=True),
    _k("ssl.truststore.password", _PASSWORD, None,
       "Password of a PKCS12 or JKS trust store (JKS: optional, as in Kafka; unset, the store's integrity "
       "is not checked). Dynamic per listener.", dynamic=True),
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

class BrokerKeyCatalogue(collections.abc.MutableMapping):
    """``BROKER_CONFIGS``: the keys declared above, then Kafka's other broker keys (``kafka_broker_keys``,
    226 of them), which are read and made into ConfigKeys only when first needed: a lookup of a name
    the declared keys lack (an unknown or Kafka-only key given, an AlterConfigs of one), or a walk over
    all of them (DescribeConfigs of the broker, docs/configuration.md). Each answer is what a table
    holding both from the start gives; a broker whose configuration names only declared keys never
    builds the rest (about 0.1 MB)."""

    __slots__ = ("_keys", "_complete")

    def __init__(self, declared: dict[str, ConfigKey]):
        self._keys = declared
        self._complete = False

    def _all(self) -> dict[str, ConfigKey]:
        if not self._complete:
            self._complete = True
            added = [key for key in _kafka_only_keys() if key.name not in self._keys]
            self._keys.update((key.name, key) for key in added)
            for key in added:  # once all are in: a removed one may be named by its prefix alone
                key.removed_in = REMOVED_BROKER_KEYS.release(key.name)
        return self._keys

    def __getitem__(self, name: str) -> ConfigKey:
        key = self._keys.get(name)
        return key if key is not None else self._all()[name]

    def get(self, name: str, default: Any = None) -> Any:
        key = self._keys.get(name)
        return key if key is not None else self._all().get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._keys or name in self._all()

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __setitem__(self, name: str, key: ConfigKey) -> None:
        self._all()[name] = key

    def __delitem__(self, name: str) -> None:
        del self._all()[name]

    def keys(self):
        return self._all().keys()

    def values(self):
        return self._all().values()

    def items(self):
        return self._all().items()


BROKER_CONFIGS = BrokerKeyCatalogue({k.name: k for k in _BROKER_KEYS})
"""Every broker key minibroker accepts, in documentation order (Kafka's other keys last)."""

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
        digits = text[1:] if text[:1] in ("+", "-") else text
        if not (digits.isascii() and digits.isdigit()):  # [+-]?[0-9]+, with no regex to compile at start
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
    from minibroker.config.kafka_broker_keys import KAFKA_ONLY_BROKER_KEYS

    keys = []
    for name, type_name, default, valid, importance, dynamic, doc in KAFKA_ONLY_BROKER_KEYS:
        ctype = ConfigType[type_name.upper()]
        keys.append(_k(name, ctype, None if default is None else parse_typed(ctype, default), doc,
                       importance=importance, validator=_validator_from_text(valid), dynamic=dynamic,
                       no_effect=True))
    return keys


# Kafka accepts every name of its broker configuration definition, so minibroker does too: loaded,
# described with Kafka's default (DescribeConfigs), alterable when Kafka's are (AlterConfigs), and
# documented as having no effect. BROKER_CONFIGS adds them when first needed (BrokerKeyCatalogue).


class RemovedBrokerKeys(collections.abc.Mapping):
    """``REMOVED_BROKER_KEYS``: name -> (Kafka release that dropped it, why): every catalogue key with one
    of ``prefixes`` (in catalogue order), then the ones ``named``. Looking a name up reads Kafka's other
    keys (BrokerKeyCatalogue) only when it has one of the prefixes: load_config asks about every key
    given."""

    __slots__ = ("_prefixes", "_prefixed", "_named")

    def __init__(self, prefixes: tuple[str, ...], prefixed: tuple[str, str],
                 named: dict[str, tuple[str, str]]):
        self._prefixes = prefixes
        self._prefixed = prefixed
        self._named = named

    def __getitem__(self, name: str) -> tuple[str, str]:
        entry = self._named.get(name)
        if entry is not None:
            return entry
        if name.startswith(self._prefixes) and name in BROKER_CONFIGS:
            return self._prefixed
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return name in self._named or (isinstance(name, str) and name.startswith(self._prefixes)
                                       and name in BROKER_CONFIGS)

    def __iter__(self):
        yield from (name for name in BROKER_CONFIGS
                    if name.startswith(self._prefixes) and name not in self._named)
        yield from self._named

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def release(self, name: str) -> str | None:
        """The release that dropped ``name``, None for a key Kafka 4 still has."""
        return self[name][0] if name in self else None


# Broker keys Apache Kafka 4 dropped from its configuration definition (none is among the keys a Kafka
# 4.3.0 broker logs, tests/data/kafka43_broker_config_values.txt, nor in tests/data/kafka4_broker_keys.txt).
# Kafka 4.x takes such a name as any unknown one (AbstractConfig logs it as supplied but unused, and
# starts); minibroker keeps accepting them, as 3.9 did, and load_config warns that Kafka 4 no longer
# knows them.
_REMOVED_BY_NAME: dict[str, tuple[str, str]] = {
    "log.message.format.version": ("4.0", "KIP-724: brokers write record format v2 only"),
    "log.message.downconversion.enable": ("4.0", "KIP-724: record down-conversion was removed"),
    "log.message.timestamp.difference.max.ms": (
        "4.0", "KIP-937: use log.message.timestamp.before.max.ms and log.message.timestamp.after.max.ms"),
    "offsets.commit.required.acks": ("4.0", "KIP-1041: offset commits always wait for all in-sync replicas"),
    "auto.include.jmx.reporter": ("4.0", "KIP-830: list JmxReporter in metric.reporters instead"),
    "control.plane.listener.name": ("4.0", "the ZooKeeper-mode controller's own listener (KIP-291)"),
    "broker.id.generation.enable": ("4.0", "ZooKeeper mode was removed"),
    "reserved.broker.max.id": ("4.0", "ZooKeeper mode was removed"),
    "controlled.shutdown.max.retries": ("4.0", "ZooKeeper mode was removed"),
    "controlled.shutdown.retry.backoff.ms": ("4.0", "ZooKeeper mode was removed"),
    # absent from Kafka 4.3.0's definitions; the release that dropped each is not pinned down here
    "inter.broker.protocol.version": ("4.x", "KRaft clusters set metadata.version through features"),
    "delegation.token.master.key": ("4.x", "use delegation.token.secret.key"),
    "eligible.leader.replicas.enable": ("4.x", "the eligible.leader.replicas.version feature turns it on"),
    "leader.imbalance.per.broker.percentage": ("4.x", "a ZooKeeper-mode controller setting"),
    "group.share.max.groups": ("4.x", "not in Kafka 4.3's share group definitions"),
}
# ZooKeeper mode is gone (KIP-833); the password encoder only ever served ZooKeeper-stored configs
REMOVED_BROKER_KEYS = RemovedBrokerKeys(("zookeeper.", "password.encoder."),
                                        ("4.0", "ZooKeeper mode was removed"), _REMOVED_BY_NAME)
for _key in _BROKER_KEYS:  # Kafka's other keys get theirs when BROKER_CONFIGS adds them
    _key.removed_in = REMOVED_BROKER_KEYS.release(_key.name)

# Topic keys Kafka 4.0 dropped with their broker synonyms: Kafka 4's DescribeConfigs lists them only when
# a topic sets them (minibroker still honours message.format.version, for teaching)
REMOVED_TOPIC_KEYS: dict[str, str] = {
    topic_key: REMOVED_BROKER_KEYS[syns[0][0]][0] for topic_key, syns in TOPIC_CONFIG_SYNONYMS.items()
    if syns and all(broker_key in REMOVED_BROKER_KEYS for broker_key, _ in syns)
}



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
# Listener-prefixed key names: which catalogue key ``listener.name.<listener>.[<mechanism>.]<key>`` sets.


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

