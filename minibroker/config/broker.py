"""The broker configuration (``BrokerConfig``) and its loading (``load_config``): the key catalogue's
typed values (minibroker/config/keys.py) from every source, layered, with the checks spanning keys.

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
``KafkaError(INVALID_CONFIG)`` for the CreateTopics / AlterConfigs handlers
(minibroker/config/topic.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from minibroker.config import sources
from minibroker.config.dynamic import check_dynamic, dynamic_spec
from minibroker.config.keys import (
    BROKER_CONFIGS,
    BROKER_SYNONYMS,
    KEY_ALIASES,
    LISTENER_PREFIX,
    REMOVED_BROKER_KEYS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    format_value,
    listener_key,
    split_listener_key,
)
from minibroker.config.listeners import Listener, parse_listeners, parse_security_protocol_map
from minibroker.config.sources import ConfigError
from minibroker.config.validators import parse_host_counts

__all__ = ["BrokerConfig", "did_you_mean", "load_config"]

log = logging.getLogger("minibroker.config")

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

    def _given(self, key: str) -> bool:
        """Whether a layer above the default sets ``key``."""
        return any(source != ConfigSource.DEFAULT_CONFIG for source, _ in self._layer_values(key))

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
        dynamically for this broker or the cluster, or in a static source), or None when none is."""
        full = listener_key(listener, key, mechanism)
        for layer in (self._dynamic_broker, self._dynamic_default):
            if full in layer:
                return layer[full]
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

    def static_value(self, key: str) -> Any:
        """``key``'s value from the static sources, else its default: what it would be without the
        dynamic layers (Kafka's controller reads its own static config the same way)."""
        for source, value in self._layer_values(key):
            if source in (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG):
                return value
        return None

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
        for a short start-up banner: read from the layers, not the whole catalogue (BROKER_CONFIGS
        reads Kafka's other keys only for a name it lacks)."""
        out = {}
        for layer in (self._dynamic_broker, self._dynamic_default, *self._static.values()):
            for name in layer:
                if name not in out and not name.startswith(LISTENER_PREFIX) and name in BROKER_CONFIGS:
                    value = self[name]
                    out[name] = "[hidden]" if BROKER_CONFIGS[name].sensitive and value is not None else value
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
        listener_keys = sorted({k for layer in (self._dynamic_broker, self._dynamic_default) for k in layer
                                if k not in BROKER_CONFIGS})
        if keys is None:
            names = [*BROKER_CONFIGS, *listener_keys]
        else:
            names = [k for k in keys if k in BROKER_CONFIGS or k in listener_keys]
        entries = []
        for name in names:
            if name in REMOVED_BROKER_KEYS and not self._given(name):
                continue  # Kafka 4 does not define it: listed only when given, as Kafka lists any key given
            spec = dynamic_spec(name) if name in listener_keys else BROKER_CONFIGS[name]
            chain = (name, spec.name) if name in listener_keys else BROKER_SYNONYMS.get(name, (name,))
            synonyms = [
                ConfigSynonym(syn, format_value(dynamic_spec(syn).type, v), source)
                for syn in chain
                for source, v in self._layer_values(syn)
            ]
            current = self._layer_values(name)[0][1] if name in listener_keys else self[name]
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
            where = {"env": f"environment variable {sources.key_to_env_var(key)}",
                     "file": "the properties file", "override": "--override"}[source]
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
        "file": _parse_layer(sources.read_properties_file(properties_file, file_lines)
                             if properties_file else {}, "file", per_layer["file"]),
        "env": _parse_layer(sources.env_to_properties(environ), "env", per_layer["env"]),
        "override": _parse_layer(sources.parse_overrides(overrides), "override", per_layer["override"]),
    }
    def where(source: str, key: str) -> str:
        if source == "file":
            return f"{properties_file}, line {file_lines[key]}" if key in file_lines else str(properties_file)
        if source == "env":
            return "environment " + next((v for v in sorted(environ) if v.startswith("KAFKA_")
                                          and sources.env_var_to_key(v) == key), sources.key_to_env_var(key))
        return "--override"

    for source, found in per_layer.items():
        for key in sorted(found):
            log.warning("Unknown configuration %s=%r (from %s) is ignored%s", key, found[key],
                        where(source, key), did_you_mean(key))
        unknown.update(found)
    for source, values in layers.items():
        for key in sorted(k for k in values if k in REMOVED_BROKER_KEYS):
            release, why = REMOVED_BROKER_KEYS[key]
            log.warning("Configuration %s (from %s) was removed in Apache Kafka %s (%s): a Kafka %s broker "
                        "ignores it; minibroker still accepts it, as Kafka 3.9 did", key, where(source, key),
                        release, why, release)
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
    protocols = cfg.security_protocol_map()
    if any(protocols.get(lst.name, "").startswith("SASL_") for lst in cfg.listener_endpoints()):
        # the SASL settings' module only where a listener needs it: a plaintext broker never does
        from minibroker.config.sasl import SaslConfigError, sasl_listener_settings

        try:  # a SASL listener nobody could log in to (no served mechanism, PLAIN without users ...)
            sasl_listener_settings(cfg, warn=False)
        except SaslConfigError as e:
            raise ConfigError(str(e)) from None

