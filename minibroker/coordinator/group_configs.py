"""Group configs: the per-group overrides of Kafka 4's GroupConfig (config resource type GROUP, 32).

Owner of: every group's config overrides (``consumer.session.timeout.ms``, ``share.*``, ``streams.*``),
which IncrementalAlterConfigs sets and DescribeConfigs reads. Kafka keeps them in its metadata log as
ConfigRecords of resource type GROUP; minibroker keeps them, like its other cluster metadata, in a JSON
file at the log dir root (``minibroker-group-configs.json``), rewritten whole on every change. A group
need not exist to have configs, and deleting a group keeps them (whether Kafka drops them then is
unchecked).

A key's default is the broker key it overrides (``consumer.session.timeout.ms`` ->
``group.consumer.session.timeout.ms``), or a fixed default for the keys without one
(``share.auto.offset.reset``, ``share.isolation.level``). Values are checked as Kafka's GroupConfig
checks them: the type and the key's own bound, then the broker's min/max bounds for the keys that have
them (``group.consumer.min.session.timeout.ms`` ...), then session timeout > heartbeat interval.
Only the consumer keys change anything today (the consumer group coordinator reads them); the share keys
wait for share groups, the streams keys for streams groups.
"""

from __future__ import annotations

import logging
import re
from typing import Any, NamedTuple

from minibroker.config import (
    AlterOp,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    check_list_op,
    format_value,
    parse_typed,
)
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.groups")

GROUP_CONFIGS_FILE = "minibroker-group-configs.json"
GROUP_CONFIG_SOURCE = 8  # DescribeConfigs' GROUP_CONFIG source (Kafka 4)


class GroupConfigKey(NamedTuple):
    name: str
    type: ConfigType
    broker_key: str | None  # the broker key giving the default, or None for a fixed default
    default: Any
    low: int | None  # the key's own lower bound (Kafka's ConfigDef atLeast)
    bounds: tuple[str | None, str | None]  # broker keys bounding the value (min, max)
    allowed: tuple[str, ...]
    doc: str


def _key(name, type, broker_key, doc, *, default=None, low=None, bounds=(None, None), allowed=()):
    return GroupConfigKey(name, type, broker_key, default, low, bounds, allowed, doc)


def _bounded(name, low, doc):
    """An int key overriding ``group.<name>``, bounded by the broker's ``group.<kind>.min|max.<rest>``."""
    kind, rest = name.split(".", 1)
    return _key(name, ConfigType.INT, f"group.{name}", doc, low=low,
                bounds=(f"group.{kind}.min.{rest}", f"group.{kind}.max.{rest}"))


_INT, _STR = ConfigType.INT, ConfigType.STRING
GROUP_CONFIG_KEYS: dict[str, GroupConfigKey] = {k.name: k for k in (
    _bounded("consumer.session.timeout.ms", 1,
             "How long a member of this consumer group may go without a heartbeat before it is removed."),
    _bounded("consumer.heartbeat.interval.ms", 1,
             "Heartbeat interval given to the members of this consumer group."),
    _bounded("share.session.timeout.ms", 1,
             "Session timeout of this share group's members."),
    _bounded("share.heartbeat.interval.ms", 1,
             "Heartbeat interval of this share group's members."),
    _bounded("share.record.lock.duration.ms", 1000,
             "How long this share group's members hold acquired records."),
    _bounded("share.delivery.count.limit", 2,
             "Deliveries of a record to this share group before it is archived."),
    _key("share.auto.offset.reset", _STR, None,
         "Where this share group starts reading a partition: earliest, latest or by_duration:<ISO-8601 "
         "duration>.", default="latest"),
    _key("share.isolation.level", _STR, None,
         "Whether this share group delivers aborted transactional records: read_committed or "
         "read_uncommitted.", default="read_uncommitted", allowed=("read_committed", "read_uncommitted")),
    _bounded("streams.session.timeout.ms", 1,
             "Session timeout of this streams group's members."),
    _bounded("streams.heartbeat.interval.ms", 1,
             "Heartbeat interval of this streams group's members."),
    _key("streams.num.standby.replicas", _INT, "group.streams.num.standby.replicas",
         "Standby replicas per task of this streams group.", low=0,
         bounds=(None, "group.streams.max.standby.replicas")),
    _key("streams.initial.rebalance.delay.ms", _INT, "group.streams.initial.rebalance.delay.ms",
         "Initial rebalance delay of this streams group.", low=0),
)}
# session timeout key -> heartbeat interval key: the first must be greater
_SESSION_OVER_HEARTBEAT = {"consumer.session.timeout.ms": "consumer.heartbeat.interval.ms",
                           "share.session.timeout.ms": "share.heartbeat.interval.ms",
                           "streams.session.timeout.ms": "streams.heartbeat.interval.ms"}
# Java's Duration.parse, without negative parts (Kafka refuses a negative by_duration)
_ISO_DURATION = re.compile(r"P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:[.,]\d{0,9})?S)?)?", re.IGNORECASE)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG, message)


def check_group_name(name: str | None) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")


class GroupConfigs:
    """The group config overrides of every group. ``config`` is the broker's (a BrokerConfig, or a
    mapping in unit tests); ``data_dir`` None keeps them in memory only."""

    def __init__(self, config, data_dir: str | None) -> None:
        self.config = config
        self.data_dir = data_dir
        self._overrides: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the saved overrides (MetadataFileError for a damaged file stops start-up)."""
        if self.data_dir is None:
            return
        from minibroker.storage.metadata_file import load_metadata

        saved = load_metadata(self.data_dir, GROUP_CONFIGS_FILE, {})
        self._overrides = {group: {k: str(v) for k, v in values.items() if k in GROUP_CONFIG_KEYS}
                           for group, values in saved.get("groups", {}).items()}

    # -- reading ---------------------------------------------------------------------------------

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._overrides.get(group_id, {}))

    def groups(self) -> list[str]:
        """The groups with at least one override."""
        return sorted(self._overrides)

    def _broker_value(self, name: str | None, fallback: Any = None) -> Any:
        if name is None:
            return fallback
        try:
            return self.config[name]
        except KeyError:  # a partial configuration (unit tests)
            from minibroker.config import BROKER_CONFIGS

            return BROKER_CONFIGS[name].default

    def default(self, key: GroupConfigKey) -> Any:
        return self._broker_value(key.broker_key, key.default)

    def value(self, group_id: str, name: str) -> Any:
        """The value ``name`` has for ``group_id``: its override, else the default."""
        key = GROUP_CONFIG_KEYS[name]
        raw = self._overrides.get(group_id, {}).get(name)
        return parse_typed(key.type, raw) if raw is not None else self.default(key)

    def describe(self, group_id: str, names, *, synonyms: bool, documentation: bool) -> list[ConfigEntry]:
        """DescribeConfigs' entries: an override's source is GROUP_CONFIG (8), a default's DEFAULT_CONFIG;
        the synonyms are the entry itself, as Kafka reports them. Unknown names are skipped."""
        overrides = self._overrides.get(group_id, {})
        out = []
        for name, key in sorted(GROUP_CONFIG_KEYS.items()):
            if names is not None and name not in names:
                continue
            if name in overrides:
                text, source = overrides[name], GROUP_CONFIG_SOURCE
            else:
                text, source = format_value(key.type, self.default(key)), ConfigSource.DEFAULT_CONFIG
            out.append(ConfigEntry(name, text, source, False, False,
                                   [ConfigSynonym(name, text, source)] if synonyms else [],
                                   key.type, key.doc if documentation else None))
        return out

    # -- changing ---------------------------------------------------------------------------------

    def alter(self, group_id: str, ops: list[tuple[str, AlterOp, str | None]], validate_only: bool) -> None:
        """Apply IncrementalAlterConfigs operations to a group's overrides, all or nothing: checked as
        Kafka's GroupConfig checks them (INVALID_CONFIG, 40), saved, then in force."""
        new = self.overrides(group_id)
        for name, op, value in ops:
            if name not in GROUP_CONFIG_KEYS:
                raise _invalid(f"Unknown group config name: {name}")
            if op is AlterOp.SET:
                new[name] = value or ""
            elif op is AlterOp.DELETE:
                new.pop(name, None)
            else:
                check_list_op(name, None, op)  # no group config is a list
        self.replace(group_id, new, validate_only)

    def replace(self, group_id: str, new: dict[str, str], validate_only: bool) -> None:
        """Make ``new`` the group's whole set of overrides (AlterConfigs), after the same checks."""
        if not group_id:  # Kafka's controller: no cluster-wide group default
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        for name in new:
            if name not in GROUP_CONFIG_KEYS:
                raise _invalid(f"Unknown group config name: {name}")
        new = dict(new)
        self._validate(new)
        if validate_only:
            return
        if new == self._overrides.get(group_id, {}):
            return
        saved = dict(self._overrides)
        if new:
            saved[group_id] = new
        else:
            saved.pop(group_id, None)
        if self.data_dir is not None:
            from minibroker.storage.metadata_file import save_metadata

            try:
                save_metadata(self.data_dir, GROUP_CONFIGS_FILE, {"groups": saved})
            except OSError as e:
                log.error("could not save the group configs: %s", e)
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "Could not save the group configs") from None
        self._overrides = saved

    def _validate(self, overrides: dict[str, str]) -> None:
        parsed: dict[str, Any] = {}
        for name, raw in overrides.items():
            key = GROUP_CONFIG_KEYS[name]
            try:
                value = parse_typed(key.type, raw)
            except ValueError as e:
                raise _invalid(f"Invalid value {raw} for configuration {name}: {e}") from None
            if key.low is not None and value < key.low:
                raise _invalid(f"Invalid value {raw} for configuration {name}: Value must be at least "
                               f"{key.low}")
            if key.allowed and value not in key.allowed:
                raise _invalid(f"Invalid value {raw} for configuration {name}: String must be one of: "
                               f"{', '.join(key.allowed)}")
            if name == "share.auto.offset.reset":
                _check_auto_offset_reset(raw)
            low_key, high_key = key.bounds
            low = self._broker_value(low_key) if low_key else None
            high = self._broker_value(high_key) if high_key else None
            if low is not None and high is not None and not low <= value <= high:
                raise _invalid(f"{name} must be in the range {low} to {high} inclusive.")
            if low is None and high is not None and value > high:
                raise _invalid(f"{name} must be less than or equal to {high}")
            parsed[name] = value
        for session, heartbeat in _SESSION_OVER_HEARTBEAT.items():
            if session not in parsed and heartbeat not in parsed:
                continue
            session_ms = parsed.get(session, self.default(GROUP_CONFIG_KEYS[session]))
            heartbeat_ms = parsed.get(heartbeat, self.default(GROUP_CONFIG_KEYS[heartbeat]))
            if session_ms <= heartbeat_ms:
                raise _invalid(f"{session} must be greater than {heartbeat}")


def _check_auto_offset_reset(raw: str) -> None:
    text = raw.strip().lower()
    if text in ("earliest", "latest"):
        return
    prefix, _, duration = text.partition(":")
    if prefix == "by_duration" and duration and _ISO_DURATION.fullmatch(duration.strip()) \
            and duration.strip().upper() not in ("P", "PT"):
        return
    raise _invalid(f"Invalid value `{raw}` for configuration share.auto.offset.reset. The value must be "
                   "either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")
