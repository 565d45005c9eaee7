"""``minibroker groups``: kafka-consumer-groups.sh with kafka-python's admin client underneath.

Actions:
- ``list`` (``--type`` adds the group type, classic, consumer (KIP-848) or share (KIP-932), ``--state``
  the state);
- ``describe --group G``: one row per committed or assigned partition with CURRENT-OFFSET,
  LOG-END-OFFSET, LAG and the owning member, like ``kafka-consumer-groups.sh --describe``; a consumer
  (KIP-848) group's members and state come from ConsumerGroupDescribe; a share (KIP-932) group is
  described as ``kafka-share-groups.sh --describe`` and ``--members`` do: each partition's share-partition
  START-OFFSET and LAG (DescribeShareGroupOffsets), then its members (ShareGroupDescribe);
- ``reset-offsets --group G (--topic T[:P,P] ... | --all-topics) --to-earliest|--to-latest|
  --to-offset N [--execute]``: prints the plan and only commits it with ``--execute`` (Kafka's
  dry-run default); refused unless the group is inactive (Empty or Dead), as Kafka does; for a share
  group it sets the share-partition start offsets (AlterShareGroupOffsets, the group must be Empty;
  ``--all-topics``: the partitions with share state), as ``kafka-share-groups.sh --reset-offsets``;
- ``delete --group G``: DeleteGroups (the group must be empty).
"""

from __future__ import annotations

import argparse
import sys

from minibroker.tools.produce import missing_kafka_python
from minibroker.tools.wire import kafka_python_tool_settings

INACTIVE = ("Empty", "Dead")


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    groups = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer and share "
                            "groups")
    actions = groups.add_subparsers(dest="action", required=True)
    lst = actions.add_parser("list", parents=[common], help="group ids")
    lst.add_argument("--state", action="store_true", help="also print each group's state")
    lst.add_argument("--type", action="store_true",
                     help="also print each group's type (classic, consumer, share)")
    describe = actions.add_parser("describe", parents=[common], help="offsets, lag and members of a group")
    describe.add_argument("--group", required=True)
    reset = actions.add_parser("reset-offsets", parents=[common],
                               help="move an inactive group's committed offsets")
    reset.add_argument("--group", required=True)
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="repeatable")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N", help="clamped to [earliest, latest]")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print them (the default)")
    delete = actions.add_parser("delete", parents=[common], help="delete an empty group")
    delete.add_argument("--group", required=True)
    groups.set_defaults(func=run)


def _table(rows: list[list], out) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print(" ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _describe_one(admin, group_id: str):
    return admin.describe_groups([group_id])[group_id]


def _list(admin, args, out) -> int:
    groups = sorted(admin.list_groups(), key=lambda g: g["group_id"])
    with_type = getattr(args, "type", False)
    if args.state or with_type:
        header = ["GROUP"] + (["TYPE"] if with_type else []) + (["STATE"] if args.state else [])
        rows = [[g["group_id"]] + ([g.get("group_type") or "classic"] if with_type else [])
                + ([g.get("group_state") or ""] if args.state else []) for g in groups]
        _table([header] + rows, out)
    else:
        for g in groups:
            print(g["group_id"], file=out)
    return 0


def _describe(admin, args, out) -> int:
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    shared = _describe_share_group(args, out)
    if shared is not None:
        return shared
    info = _describe_one(admin, args.group)
    committed = admin.list_group_offsets(args.group).get(args.group, {})
    owners: dict = {}
    for m in info.get("members") or []:
        assignment = m.get("member_assignment") or {}
        for a in assignment.get("assigned_partitions") or [] if isinstance(assignment, dict) else []:
            for p in a["partitions"]:
                owners[TopicPartition(a["topic"], p)] = m
    state = info.get("group_state") or "Dead"
    if state == "Dead":  # perhaps a consumer (KIP-848) group, which DescribeGroups does not describe
        described = _describe_consumer_group(args)
        if described is not None:
            state, members = described
            info = {"members": members}
            for m in members:
                for topic, partitions in m["assigned"]:
                    for p in partitions:
                        owners[TopicPartition(topic, p)] = m
    tps = sorted(set(committed) | set(owners))
    if state == "Dead" and not tps:
        print(f"Consumer group '{args.group}' does not exist.", file=out)
        return 1
    if not info.get("members"):
        print(f"Consumer group '{args.group}' has no active members.", file=out)
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps}) if tps else {}
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"]]
    for tp in tps:
        c = committed.get(tp)
        current = c.offset if c is not None and c.offset >= 0 else None
        end = ends[tp].offset if tp in ends else None
        lag = end - current if current is not None and end is not None else None
        m = owners.get(tp, {})
        rows.append([args.group, tp.topic, tp.partition, _dash(current), _dash(end), _dash(lag),
                     m.get("member_id") or "-", m.get("client_host") or "-", m.get("client_id") or "-"])
    print(f"GROUP STATE: {state}", file=out)
    _table(rows, out)
    return 0


def _describe_consumer_group(args) -> tuple[str, list[dict]] | None:
    """(state, members) of a consumer (KIP-848) group from ConsumerGroupDescribe; None if it is not one."""
    with _wire_admin(args) as admin:
        group = _group_of_type(admin, 69, args.group)  # ConsumerGroupDescribe
    if group is None:
        return None
    return group.group_state, [
        {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
         "assigned": [(t.topic_name, list(t.partitions)) for t in m.assignment.topic_partitions]}
        for m in group.members]


def _group_of_type(admin, api_key: int, group_id: str):
    """The group of a <Type>GroupDescribe (``api_key``) answer, None when the broker does not serve the API
    or the group is not of that type."""
    from minibroker.protocol.codec import Struct
    from minibroker.tools.topics import ToolError

    try:
        answer = admin.request(api_key, Struct(group_ids=[group_id], include_authorized_operations=False))
    except ToolError:
        return None
    group = answer.groups[0]
    return group if group.error_code == 0 else None


def _wire_admin(args):
    """A raw-request admin connection (for the APIs kafka-python's admin client lacks)."""
    from minibroker.tools.client_config import read_client_config
    from minibroker.tools.topics import TopicAdmin

    return TopicAdmin(args.bootstrap_server, timeout=args.timeout,
                      security=read_client_config(args.command_config))


def _share_group(args):
    """(ShareGroupDescribe's group, {(topic, partition): (start offset, lag)} for the partitions with
    state or assigned) of a share (KIP-932) group; None when the group is not one (or the broker has no
    share groups)."""
    from minibroker.protocol.codec import Struct
    from minibroker.tools.topics import ToolError

    with _wire_admin(args) as admin:
        group = _group_of_type(admin, 77, args.group)  # ShareGroupDescribe
        if group is None:
            return None
        assigned = {(t.topic_name, p) for m in group.members for t in m.assignment.topic_partitions
                    for p in t.partitions}
        offsets = admin.request(90, Struct(groups=[Struct(group_id=args.group, topics=None)])).groups[0]
        if offsets.error_code != 0:
            raise ToolError(f"cannot describe the offsets of share group '{args.group}': error "
                            f"{offsets.error_code}")
        rows: dict[tuple[str, int], tuple[int, int]] = {}
        for t in offsets.topics:
            for p in t.partitions:
                rows[(t.topic_name, p.partition_index)] = (p.start_offset, p.lag)
        missing = sorted(assigned - set(rows))
        if missing:  # assigned partitions no member has fetched yet: no share state
            by_topic: dict[str, list[int]] = {}
            for topic, p in missing:
                by_topic.setdefault(topic, []).append(p)
            extra = admin.request(90, Struct(groups=[Struct(group_id=args.group, topics=[
                Struct(topic_name=topic, partitions=ps) for topic, ps in sorted(by_topic.items())])]))
            for t in extra.groups[0].topics:
                for p in t.partitions:
                    rows[(t.topic_name, p.partition_index)] = (p.start_offset, p.lag)
    return group, rows


def _describe_share_group(args, out) -> int | None:
    """Describe a share group as kafka-share-groups.sh --describe and --members do; None when the group
    is not a share group."""
    found = _share_group(args)
    if found is None:
        return None
    group, rows = found
    print(f"GROUP STATE: {group.group_state}", file=out)
    if not group.members:
        print(f"Share group '{args.group}' has no active members.", file=out)
    table = [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]]
    for (topic, p), (start, lag) in sorted(rows.items()):
        table.append([args.group, topic, p, _dash(start if start >= 0 else None),
                      _dash(lag if lag >= 0 else None)])
    _table(table, out)
    if group.members:
        print(file=out)
        members = [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]]
        for m in sorted(group.members, key=lambda m: m.member_id):
            parts = [(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions]
            text = ",".join(f"{topic}:{p}" for topic, p in sorted(parts)) or "-"
            members.append([args.group, m.member_id, m.client_host or "-", m.client_id or "-", len(parts),
                            text])
        _table(members, out)
    return 0


def _partitions_to_reset(admin, args, every: list) -> list | None:
    """The partitions reset-offsets acts on: ``every`` (the group's) with --all-topics, else those of each
    --topic TOPIC[:P,...]; None, after saying so, when a named topic does not exist."""
    from kafka import TopicPartition

    if args.all_topics:
        return every
    tps: list = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            try:
                tps += [TopicPartition(topic, int(p)) for p in parts.split(",") if p]
            except ValueError:
                print(f"minibroker groups: --topic {spec}: partitions are numbers (TOPIC:P,P,...)",
                      file=sys.stderr)
                return None
        else:
            described = admin.describe_topics([topic])
            if not described or described[0].get("error_code"):
                print(f"minibroker groups: topic {topic} does not exist", file=sys.stderr)
                return None
            tps += [TopicPartition(topic, p["partition_index"]) for p in described[0]["partitions"]]
    return tps


def _reset_targets(admin, args, tps: list) -> dict:
    """Each partition's new offset: --to-earliest, --to-latest or --to-offset, kept within the log."""
    from kafka.admin import OffsetSpec

    earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
    latest = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
    plan = {}
    for tp in tps:
        low, high = earliest[tp].offset, latest[tp].offset
        target = low if args.to_earliest else high if args.to_latest else args.to_offset
        plan[tp] = min(max(target, low), high)
    return plan


def _reset_plan(admin, args, candidates, none_text: str):
    """The reset's target offset of each partition the options choose among ``candidates``; None (after
    saying why) when there is nothing to reset."""
    tps = _partitions_to_reset(admin, args, candidates)
    if tps is None:
        return None
    if not tps:
        print(f"minibroker groups: {none_text} to reset", file=sys.stderr)
        return None
    return _reset_targets(admin, args, tps)


def _reset_share_group(admin, args, out, group, rows) -> int:
    """reset-offsets of a share group: AlterShareGroupOffsets, as kafka-share-groups.sh --reset-offsets;
    the group must be Empty."""
    from kafka import TopicPartition

    from minibroker.protocol.codec import Struct

    if group.members:
        print(f"minibroker groups: share group '{args.group}' is not empty (state {group.group_state}): "
              "its start offsets can only be reset while it has no members.", file=sys.stderr)
        return 1
    plan = _reset_plan(admin, args, [TopicPartition(t, p) for (t, p), (start, _lag) in sorted(rows.items())
                                     if start >= 0], f"share group '{args.group}' has no start offsets")
    if plan is None:
        return 1
    if args.execute:
        by_topic: dict[str, list] = {}
        for tp, offset in sorted(plan.items()):
            by_topic.setdefault(tp.topic, []).append(Struct(partition_index=tp.partition,
                                                            start_offset=offset))
        with _wire_admin(args) as wire:
            r = wire.request(91, Struct(group_id=args.group, topics=[
                Struct(topic_name=t, partitions=ps) for t, ps in by_topic.items()]))
        failed = {(t.topic_name, p.partition_index): p.error_code for t in r.responses for p in t.partitions
                  if p.error_code}
        if r.error_code or failed:
            print(f"minibroker groups: reset failed: error {r.error_code} {failed or ''}".rstrip(),
                  file=sys.stderr)
            return 1
    return _print_plan(args, plan, "NEW-START-OFFSET", "set these start offsets", out)


def _print_plan(args, plan, column: str, what: str, out) -> int:
    """A reset's table (each partition's new offset), and on a dry run how to carry it out."""
    rows = [["GROUP", "TOPIC", "PARTITION", column]]
    rows += [[args.group, tp.topic, tp.partition, plan[tp]] for tp in sorted(plan)]
    _table(rows, out)
    if not args.execute:
        print(f"(dry run: add --execute to {what})", file=sys.stderr)
    return 0


def _dash(value) -> str:
    return "-" if value is None else str(value)


def _reset(admin, args, out) -> int:
    share = _share_group(args)
    if share is not None:
        return _reset_share_group(admin, args, out, *share)
    info = _describe_one(admin, args.group)
    state = info.get("group_state") or "Dead"
    described = _describe_consumer_group(args) if state == "Dead" else None
    if described is not None:
        state = described[0]
    if state not in INACTIVE:
        print(f"minibroker groups: assignments can only be reset if the group '{args.group}' is inactive, "
              f"but the current state is {state}.", file=sys.stderr)
        return 1
    committed = admin.list_group_offsets(args.group).get(args.group, {})
    plan = _reset_plan(admin, args, sorted(committed), f"group '{args.group}' has no offsets")
    if plan is None:
        return 1
    if args.execute:
        result = admin.reset_group_offsets(args.group, dict(plan))
        failed = {tp: r["error"] for tp, r in result.items() if r["error"].errno != 0}
        if failed:
            print(f"minibroker groups: reset failed: {failed}", file=sys.stderr)
            return 1
    return _print_plan(args, plan, "NEW-OFFSET", "commit these offsets", out)


def _delete(admin, args, out) -> int:
    result = admin.delete_groups([args.group])
    outcome = result.get(args.group)
    if outcome != "OK":
        print(f"minibroker groups: cannot delete group '{args.group}': {outcome}", file=sys.stderr)
        return 1
    print(f"Deleted consumer group '{args.group}'.", file=out)
    return 0


ACTIONS = {"list": _list, "describe": _describe, "reset-offsets": _reset, "delete": _delete}


def run(args, out=None) -> int:
    try:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError
    except ImportError:
        return missing_kafka_python("groups")
    out = out or sys.stdout
    settings, code = kafka_python_tool_settings(args, "groups")
    if code:
        return code
    try:
        admin = KafkaAdminClient(bootstrap_servers=args.bootstrap_server, client_id="minibroker-groups",
                                 request_timeout_ms=int(args.timeout * 1000), **settings)
    except KafkaError as e:
        print(f"minibroker groups: cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    from minibroker.tools.topics import ToolError, report_failure

    try:
        return ACTIONS[args.action](admin, args, out)
    except KafkaError as e:
        print(f"minibroker groups: {e!r}", file=sys.stderr)
        return 1
    except ToolError as e:
        return report_failure("groups", args, e)
    finally:
        admin.close()
