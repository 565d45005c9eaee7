"""The data source's options: the names, defaults and checks of Spark's Kafka source and sink.

Pure Python (no pyspark import), so it can be checked without a Spark session. Option names are
case-insensitive as in Spark; ``kafka.*`` options go to the Kafka client with the prefix removed.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EARLIEST = -2
LATEST = -1

# Kafka client properties Spark's Kafka source and sink refuse, because the connector manages them.
_SOURCE_FORBIDDEN = {
    "auto.offset.reset": "Set startingOffsets/endingOffsets instead",
    "key.deserializer": "Keys are always read as bytes (cast the key column)",
    "value.deserializer": "Values are always read as bytes (cast the value column)",
    "enable.auto.commit": "The source does not commit offsets to Kafka; Spark's checkpoint tracks them",
    "interceptor.classes": "Interceptors are not supported",
}
_SINK_FORBIDDEN = {
    "key.serializer": "The key column is written as bytes (string or binary column)",
    "value.serializer": "The value column is written as bytes (string or binary column)",
}
# Java client properties librdkafka has no use for; dropped instead of failing.
_JAVA_ONLY = {"key.deserializer", "value.deserializer", "key.serializer", "value.serializer"}


class OptionError(ValueError):
    """An invalid option, with a message naming it (what Spark raises as IllegalArgumentException)."""


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest`` or per-partition offsets (``{(topic, partition): offset}``, -2/-1 allowed)."""

    kind: str  # "earliest" | "latest" | "specific" | "timestamp" | "timestamp_by_partition"
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass
class KafkaOptions:
    bootstrap_servers: str
    client_config: dict[str, str]
    strategy: str  # "subscribe" | "subscribePattern" | "assign"
    topics: list[str] = field(default_factory=list)
    pattern: str | None = None
    assigned: list[tuple[str, int]] = field(default_factory=list)
    starting: OffsetSpec | None = None
    ending: OffsetSpec | None = None
    starting_by_timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    group_id_prefix: str = "spark-kafka-source"

    def matches(self, topic: str) -> bool:
        """Whether a topic belongs to this subscription (subscribe / subscribePattern)."""
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribePattern":
            return re.fullmatch(self.pattern or "", topic) is not None
        return any(t == topic for t, _ in self.assigned)

    def consumer_config(self, role: str) -> dict[str, Any]:
        """librdkafka consumer properties; ``role`` is "driver" or "executor" (group id suffix)."""
        conf: dict[str, Any] = {k: v for k, v in self.client_config.items() if k not in _JAVA_ONLY}
        conf["bootstrap.servers"] = self.bootstrap_servers
        # librdkafka wants a group id even for assign(); the source never joins or commits to it.
        conf.setdefault("group.id", f"{self.group_id_prefix}-{uuid.uuid4()}-{role}")
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        conf["auto.offset.reset"] = "error"
        conf["enable.partition.eof"] = True
        return conf

    def admin_config(self) -> dict[str, Any]:
        conf = {k: v for k, v in self.client_config.items() if k not in _JAVA_ONLY and k != "group.id"
                and k != "isolation.level"}
        conf["bootstrap.servers"] = self.bootstrap_servers
        return conf

    @property
    def read_committed(self) -> bool:
        return self.client_config.get("isolation.level", "read_uncommitted") == "read_committed"


def _get(options: Mapping[str, str], name: str) -> str | None:
    lower = name.lower()
    for k, v in options.items():
        if k.lower() == lower:
            return None if v is None else str(v)
    return None


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    return {k[len("kafka."):].lower(): str(v) for k, v in options.items() if k.lower().startswith("kafka.")}


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"Invalid value '{raw}' for option '{name}', must be a positive integer") from None
    if value <= 0:
        raise OptionError(f"Invalid value '{raw}' for option '{name}', must be a positive integer")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"Invalid value '{raw}' for option '{name}', must be true or false")


def parse_partition_offsets(text: str, name: str) -> dict[tuple[str, int], int]:
    """Spark Kafka's offsets JSON, ``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}``."""
    try:
        data = json.loads(text)
        out = {}
        for topic, parts in data.items():
            for p, off in parts.items():
                out[(str(topic), int(p))] = int(off)
        return out
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}},\"topicB\":{{\"0\":-2}}}}, "
                          f"got {text} (option '{name}')") from None


def offsets_to_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """The offset dict Spark stores in the checkpoint (topics and partitions sorted, as Spark writes them)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p) in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]] | None) -> dict[tuple[str, int], int]:
    if not data:
        return {}
    return {(topic, int(p)): int(off) for topic, parts in data.items() for p, off in parts.items()}


def _offset_spec(options: Mapping[str, str], prefix: str, *, streaming: bool,
                 ending: bool) -> OffsetSpec | None:
    ts = _get(options, f"{prefix}Timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(ts))
        except ValueError:
            raise OptionError(f"Invalid value '{ts}' for option '{prefix}Timestamp', "
                              "must be milliseconds since the epoch") from None
    by_ts = _get(options, f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamp_by_partition", offsets=parse_partition_offsets(by_ts,
                                                                                     f"{prefix}OffsetsByTimestamp"))
    raw = _get(options, f"{prefix}Offsets")
    if raw is None:
        return None
    name = f"{prefix}Offsets"
    value = raw.strip()
    if value.lower() == "earliest":
        if ending:
            raise OptionError("Ending offset not valid in batch queries: endingOffsets='earliest'")
        return OffsetSpec("earliest")
    if value.lower() == "latest":
        if not ending and not streaming:
            raise OptionError("Starting offset not valid in batch queries: startingOffsets='latest'")
        return OffsetSpec("latest")
    offsets = parse_partition_offsets(value, name)
    for (topic, p), off in offsets.items():
        if off < EARLIEST:
            raise OptionError(f"Invalid offset {off} for {topic}-{p} in '{name}'")
        if ending and off == EARLIEST:
            raise OptionError(f"Ending offset for {topic}-{p} can't be earliest (-2) in batch queries")
        if not ending and not streaming and off == LATEST:
            raise OptionError(f"Starting offset for {topic}-{p} can't be latest (-1) in batch queries")
    return OffsetSpec("specific", offsets=offsets)


def _servers_and_client(options: Mapping[str, str], role: str, forbidden: Mapping[str, str]
                        ) -> tuple[str, dict[str, str]]:
    """``kafka.bootstrap.servers`` (required) and the other ``kafka.*`` options as a client config, none
    of the ``forbidden`` ones (Spark's rules for a consumer or producer)."""
    servers = _get(options, "kafka.bootstrap.servers")
    if not servers:
        raise OptionError(f"Option 'kafka.bootstrap.servers' must be specified for configuring Kafka {role}")
    client = _client_config(options)
    for key, why in forbidden.items():
        if key in client:
            raise OptionError(f"Kafka option '{key}' is not supported. {why}.")
    client.pop("bootstrap.servers", None)
    return servers, client


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> KafkaOptions:
    """Validate the options of a read (batch when ``streaming`` is false)."""
    servers, client = _servers_and_client(options, "consumer", _SOURCE_FORBIDDEN)

    given = [name for name in ("subscribe", "subscribePattern", "assign") if _get(options, name) is not None]
    if len(given) != 1:
        if not given:
            raise OptionError("One of the following options must be specified for Kafka source: subscribe, "
                              "subscribePattern, assign. See the docs for more details.")
        raise OptionError(f"Only one of {', '.join(given)} can be specified for Kafka source")
    strategy = given[0]
    opts = KafkaOptions(bootstrap_servers=servers, client_config=client, strategy=strategy)
    if strategy == "subscribe":
        opts.topics = [t.strip() for t in (_get(options, "subscribe") or "").split(",") if t.strip()]
        if not opts.topics:
            raise OptionError(f"No topics to subscribe to as specified value for option "
                              f"'subscribe' is '{_get(options, 'subscribe')}'")
    elif strategy == "subscribePattern":
        opts.pattern = (_get(options, "subscribePattern") or "").strip()
        if not opts.pattern:
            raise OptionError("Pattern to subscribe is empty as specified value for option "
                              "'subscribePattern'")
        try:
            re.compile(opts.pattern)
        except re.error as e:
            raise OptionError(f"Invalid subscribePattern '{opts.pattern}': {e}") from None
    else:
        raw = _get(options, "assign") or ""
        try:
            data = json.loads(raw)
            opts.assigned = sorted({(str(t), int(p)) for t, parts in data.items() for p in parts})
        except (ValueError, AttributeError, TypeError):
            raise OptionError(f"Expected e.g. {{\"topicA\":[0,1],\"topicB\":[0,1]}}, got {raw} "
                              "(option 'assign')") from None
        if not opts.assigned:
            raise OptionError(f"No topic partitions to assign as specified value for option 'assign' "
                              f"is '{raw}'")

    opts.starting = _offset_spec(options, "starting", streaming=streaming, ending=False)
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if _get(options, name) is not None:
                raise OptionError(f"Ending offset not valid in streaming queries: option '{name}'")
    else:
        opts.ending = _offset_spec(options, "ending", streaming=False, ending=True)
    if opts.starting is None:
        opts.starting = OffsetSpec("latest" if streaming else "earliest")
    if opts.ending is None and not streaming:
        opts.ending = OffsetSpec("latest")

    strategy_name = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy_name not in ("error", "latest"):
        raise OptionError(f"Invalid value '{strategy_name}' for option 'startingOffsetsByTimestampStrategy', "
                          "must be 'error' or 'latest'")
    opts.starting_by_timestamp_strategy = strategy_name
    opts.max_offsets_per_trigger = _positive_int(options, "maxOffsetsPerTrigger")
    opts.min_partitions = _positive_int(options, "minPartitions")
    opts.max_records_per_partition = _positive_int(options, "maxRecordsPerPartition")
    opts.fail_on_data_loss = _bool(options, "failOnDataLoss", True)
    opts.include_headers = _bool(options, "includeHeaders", False)
    opts.poll_timeout_ms = _positive_int(options, "kafkaConsumer.pollTimeoutMs") or 120_000
    retries = _get(options, "fetchOffset.numRetries")
    opts.fetch_offset_num_retries = int(retries) if retries is not None else 3
    opts.fetch_offset_retry_interval_ms = _positive_int(options, "fetchOffset.retryIntervalMs") or 10
    opts.group_id_prefix = _get(options, "groupIdPrefix") or "spark-kafka-source"
    return opts


@dataclass
class SinkOptions:
    bootstrap_servers: str
    client_config: dict[str, str]
    topic: str | None

    def producer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {k: v for k, v in self.client_config.items() if k not in _JAVA_ONLY}
        conf["bootstrap.servers"] = self.bootstrap_servers
        # The Java client's default partitioner (murmur2 of the key), so keyed records land on the
        # same partitions as when Spark's own Kafka sink or a Java producer writes them.
        conf.setdefault("partitioner", "murmur2_random")
        conf.setdefault("linger.ms", 5)
        return conf


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    servers, client = _servers_and_client(options, "producer", _SINK_FORBIDDEN)
    topic = _get(options, "topic")
    return SinkOptions(bootstrap_servers=servers, client_config=client,
                       topic=topic.strip() if topic else None)
