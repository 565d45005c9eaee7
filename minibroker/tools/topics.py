"""``minibroker topics``: kafka-topics.sh and the topic part of kafka-configs.sh, over the wire.

Actions: ``create``, ``list``, ``describe``, ``delete``, ``alter`` (partition count) and
``alter-config`` (``--add-config k=v`` / ``--delete-config k``). Every action talks to a
running broker through ``WireClient`` and our own codec (no kafka-python needed); versions are
negotiated with ApiVersions, so the tool also works against an Apache Kafka broker.

Connecting, ``--timeout``, errors and exit codes are every tool's (minibroker/tools/command.py): 0
success, 1 when the broker answered with an error (printed to stderr) or could not be reached in time,
2 for usage errors.
"""

from __future__ import annotations

import argparse

from minibroker.errors import ErrorCode
from minibroker.protocol import codec
from minibroker.tools.cluster import error_text
from minibroker.tools.command import run_admin
from minibroker.tools.wire import BrokerConnection, ToolError, split_host_port

API_VERSIONS, METADATA, CREATE_TOPICS, DELETE_TOPICS = 18, 3, 19, 20
DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 32, 37, 44
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1
OP_SET, OP_DELETE = 0, 1


class TopicAdmin(BrokerConnection):
    """Admin requests to one broker, each at the highest version both sides speak. Not thread-safe."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, security=None, deadline=None):
        host, port = split_host_port(bootstrap)
        super().__init__(host, port, timeout, security, client_id="minibroker-topics", deadline=deadline)
        self.timeout_ms = int(timeout * 1000)

    # -- requests -------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None) -> codec.Struct:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        return self.request(METADATA, body)

    def create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
               validate_only: bool = False) -> tuple[int, str | None]:
        r = self.request(CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout_ms": self.timeout_ms, "validate_only": validate_only})
        t = r.topics[0]
        return t.error_code, t.error_message

    def delete(self, name: str) -> tuple[int, str | None]:
        # v0-v5 carry names in topic_names, v6+ in topics; the codec writes the one the version has.
        r = self.request(DELETE_TOPICS, {"topic_names": [name], "topics": [{"name": name}],
                                         "timeout_ms": self.timeout_ms})
        t = r.responses[0]
        return t.error_code, getattr(t, "error_message", None)

    def create_partitions(self, name: str, count: int) -> tuple[int, str | None]:
        r = self.request(CREATE_PARTITIONS, {"topics": [{"name": name, "count": count, "assignments": None}],
                                             "timeout_ms": self.timeout_ms, "validate_only": False})
        return r.results[0].error_code, r.results[0].error_message

    def describe_configs(self, names: list[str]) -> dict[str, list]:
        r = self.request(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": n, "configuration_keys": None}
                          for n in names], "include_synonyms": False, "include_documentation": False})
        out = {}
        for res in r.results:
            if res.error_code:
                raise ToolError(f"describe configs of {res.resource_name}: "
                                f"{error_text(res.error_code, res.error_message)}")
            out[res.resource_name] = list(res.configs)
        return out

    def alter_configs(self, name: str, set_: dict[str, str], delete: list[str]) -> tuple[int, str | None]:
        configs = [{"name": k, "config_operation": OP_SET, "value": v} for k, v in set_.items()]
        configs += [{"name": k, "config_operation": OP_DELETE, "value": None} for k in delete]
        r = self.request(INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configs": configs}],
            "validate_only": False})
        return r.responses[0].error_code, r.responses[0].error_message


def is_overridden(entry) -> bool:
    """A topic-level override: source DYNAMIC_TOPIC_CONFIG (v1+), or not is_default (v0)."""
    source = getattr(entry, "config_source", -1)
    if source is not None and source >= 0:
        return source == DYNAMIC_TOPIC_CONFIG
    return not getattr(entry, "is_default", True)


def parse_configs(items: list[str] | None) -> dict[str, str]:
    """``k=v`` items, each possibly a comma-separated list as kafka-configs.sh accepts."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise ToolError(f"config {part!r} is not KEY=VALUE")
            out[key.strip()] = value.strip()
    return out


# -- actions --------------------------------------------------------------------------------------

def _create(admin: TopicAdmin, args, out) -> int:
    code, message = admin.create(args.topic, args.partitions, args.replication_factor,
                                 parse_configs(args.config))
    if code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
        return 0
    return _done(code, message, f"cannot create topic {args.topic}", f"Created topic {args.topic}.", out)


def _done(code: int, message: str | None, failure: str, success: str, out) -> int:
    """An admin request's end: ToolError with ``failure`` and the error, else ``success`` printed."""
    if code:
        raise ToolError(f"{failure}: {error_text(code, message)}")
    print(success, file=out)
    return 0


def _list(admin: TopicAdmin, args, out) -> int:
    md = admin.metadata(None)
    for t in sorted(md.topics, key=lambda t: t.name):
        if args.exclude_internal and t.is_internal:
            continue
        print(t.name, file=out)
    return 0


def _describe(admin: TopicAdmin, args, out) -> int:
    md = admin.metadata([args.topic] if args.topic else None)
    topics = sorted(md.topics, key=lambda t: t.name)
    for t in topics:
        if t.error_code:
            raise ToolError(f"topic {t.name}: {error_text(t.error_code)}")
    topics = [t for t in topics if not (args.exclude_internal and t.is_internal)]
    configs = admin.describe_configs([t.name for t in topics]) if topics else {}
    for t in topics:
        overrides = ",".join(f"{c.name}={c.value}" for c in configs.get(t.name, []) if is_overridden(c))
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        rf = len(parts[0].replica_nodes) if parts else 0
        topic_id = getattr(t, "topic_id", None)
        id_text = f"\tTopicId: {_uuid_text(topic_id)}" if topic_id else ""
        print(f"Topic: {t.name}{id_text}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\t"
              f"Configs: {overrides}", file=out)
        for p in parts:
            print(f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                  f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}",
                  file=out)
    return 0


def _uuid_text(raw) -> str:
    """Kafka prints topic ids as url-safe base64 without padding."""
    import base64

    if isinstance(raw, (bytes, bytearray)):
        return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    return str(raw)


def _delete(admin: TopicAdmin, args, out) -> int:
    code, message = admin.delete(args.topic)
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
        return 0
    return _done(code, message, f"cannot delete topic {args.topic}", f"Deleted topic {args.topic}.", out)


def _alter(admin: TopicAdmin, args, out) -> int:
    code, message = admin.create_partitions(args.topic, args.partitions)
    return _done(code, message, f"cannot alter topic {args.topic}",
                 f"Topic {args.topic} now has {args.partitions} partitions.", out)


def _alter_config(admin: TopicAdmin, args, out) -> int:
    to_set = parse_configs(args.add_config)
    to_delete = [k.strip() for item in args.delete_config or [] for k in item.split(",") if k.strip()]
    if not to_set and not to_delete:
        raise ToolError("nothing to change: give --add-config and/or --delete-config")
    code, message = admin.alter_configs(args.topic, to_set, to_delete)
    return _done(code, message, f"cannot alter configs of {args.topic}",
                 f"Completed updating config for topic {args.topic}.", out)


ACTIONS = {"create": _create, "list": _list, "describe": _describe, "delete": _delete, "alter": _alter,
           "alter-config": _alter_config}


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, delete and alter topics")
    actions = topics.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config (repeatable)")
    create.add_argument("--if-not-exists", action="store_true")

    lst = actions.add_parser("list", parents=[common], help="list topic names")
    lst.add_argument("--exclude-internal", action="store_true")

    describe = actions.add_parser("describe", parents=[common], help="partitions and config overrides")
    describe.add_argument("--topic", help="one topic (default: all)")
    describe.add_argument("--exclude-internal", action="store_true")

    delete = actions.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--if-exists", action="store_true")

    alter = actions.add_parser("alter", parents=[common], help="increase the partition count")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, required=True)

    alter_config = actions.add_parser("alter-config", parents=[common],
                                      help="set or remove topic config overrides (as kafka-configs.sh)")
    alter_config.add_argument("--topic", required=True)
    alter_config.add_argument("--add-config", action="append", metavar="K=V[,K=V]")
    alter_config.add_argument("--delete-config", action="append", metavar="K[,K]")
    topics.set_defaults(func=run)


def run(args, out=None) -> int:
    return run_admin("topics", TopicAdmin, ACTIONS, args, out)
