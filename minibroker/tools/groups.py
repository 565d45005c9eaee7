"""``minibroker groups``: kafka-consumer-groups.sh over our own wire client (each request to the group's
coordinator, FindCoordinator).

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

Connecting, ``--timeout`` (the whole command), errors (Kafka's code names) and exit codes are every
tool's (minibroker/tools/command.py).
"""

from __future__ import annotations

import argparse
import struct
import sys

from minibroker.errors import ErrorCode
from minibroker.tools.cluster import EARLIEST, LATEST, Cluster, error_text
from minibroker.tools.command import run_admin
from minibroker.tools.records_client import commit_offsets, fetch_committed
from minibroker.tools.wire import ToolError

LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS = 16, 15, 42
CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE = 69, 77
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS = 90, 91
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


class GroupAdmin(Cluster):
    """The requests of kafka-consumer-groups.sh, each to the group's coordinator."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, security=None, deadline=None):
        super().__init__(bootstrap, timeout, security, "minibroker-groups", deadline)
        self._coordinators: dict = {}

    def to_coordinator(self, group_id: str):
        if group_id not in self._coordinators:
            self._coordinators[group_id] = self.coordinator(group_id)[1]
        return self._coordinators[group_id]

    def list_groups(self) -> list:
        out = []
        for broker_id in self.broker_ids():
            r = self.node(broker_id).request(LIST_GROUPS, {"states_filter": [], "types_filter": []})
            if r.error_code:
                raise ToolError(f"cannot list groups: {error_text(r.error_code)}")
            out += list(r.groups)
        return out

    def state_and_members(self, group_id: str) -> tuple[str, list[dict]]:
        """A consumer group's state and members (member_id, client_id, client_host, assigned: (topic,
        partitions) pairs): ConsumerGroupDescribe for a KIP-848 group, else DescribeGroups ("Dead" when
        the group does not exist)."""
        consumer = self.group_of_type(CONSUMER_GROUP_DESCRIBE, group_id)
        if consumer is not None:
            return consumer.group_state, [
                {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                 "assigned": [(t.topic_name, list(t.partitions)) for t in m.assignment.topic_partitions]}
                for m in consumer.members]
        r = self.to_coordinator(group_id).request(DESCRIBE_GROUPS, {"groups": [group_id],
                                                                   "include_authorized_operations": False})
        group = r.groups[0]
        if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return "Dead", []
        if group.error_code:
            raise ToolError(f"cannot describe group '{group_id}': "
                            f"{error_text(group.error_code, getattr(group, 'error_message', None))}")
        return group.group_state or "Dead", [
            {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
             "assigned": consumer_assignment(m.member_assignment)} for m in group.members]

    def group_of_type(self, api_key: int, group_id: str):
        """The group of a <Type>GroupDescribe (``api_key``) answer, None when the broker does not serve the
        API or the group is not of that type."""
        conn = self.to_coordinator(group_id)
        if api_key not in conn.broker_max:
            return None
        answer = conn.request(api_key, {"group_ids": [group_id], "include_authorized_operations": False})
        group = answer.groups[0]
        return group if group.error_code == 0 else None

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        return fetch_committed(self.to_coordinator(group_id), group_id)

    def delete(self, group_id: str) -> int:
        r = self.to_coordinator(group_id).request(DELETE_GROUPS, {"groups_names": [group_id]})
        return r.results[0].error_code


def consumer_assignment(data) -> list[tuple[str, list[int]]]:
    """(topic, partitions) of a classic consumer's assignment (the consumer protocol's
    ConsumerProtocolAssignment: version, then topics with their partitions); [] when unreadable."""
    try:
        data = bytes(data or b"")
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (k,) = struct.unpack_from(">i", data, pos)
            partitions = list(struct.unpack_from(f">{max(k, 0)}i", data, pos + 4))
            pos += 4 + 4 * max(k, 0)
            out.append((topic, partitions))
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def _list(admin: GroupAdmin, args, out) -> int:
    groups = sorted(admin.list_groups(), key=lambda g: g.group_id)
    with_type = getattr(args, "type", False)
    if args.state or with_type:
        header = ["GROUP"] + (["TYPE"] if with_type else []) + (["STATE"] if args.state else [])
        rows = [[g.group_id] + ([getattr(g, "group_type", None) or "classic"] if with_type else [])
                + ([getattr(g, "group_state", None) or ""] if args.state else []) for g in groups]
        _table([header] + rows, out)
    else:
        for g in groups:
            print(g.group_id, file=out)
    return 0


def _describe(admin: GroupAdmin, args, out) -> int:
    shared = _describe_share_group(admin, args, out)
    if shared is not None:
        return shared
    state, members = admin.state_and_members(args.group)
    committed = admin.committed(args.group)
    owners = {(topic, p): m for m in members for topic, partitions in m["assigned"] for p in partitions}
    tps = sorted(set(committed) | set(owners))
    if state == "Dead" and not tps:
        raise ToolError(f"Consumer group '{args.group}' does not exist.")  # stderr, as Kafka's tool
    if not members:
        print(f"Consumer group '{args.group}' has no active members.", file=out)
    ends = admin.list_offsets(tps, LATEST) if tps else {}
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"]]
    for tp in tps:
        current, end = committed.get(tp), ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        m = owners.get(tp, {})
        rows.append([args.group, tp[0], tp[1], _dash(current), _dash(end), _dash(lag),
                     m.get("member_id") or "-", m.get("client_host") or "-", m.get("client_id") or "-"])
    print(f"GROUP STATE: {state}", file=out)
    _table(rows, out)
    return 0


def _share_group(admin: GroupAdmin, group_id: str):
    """(ShareGroupDescribe's group, {(topic, partition): (start offset, lag)} for the partitions with
    state or assigned) of a share (KIP-932) group; None when the group is not one (or the broker has no
    share groups)."""
    group = admin.group_of_type(SHARE_GROUP_DESCRIBE, group_id)
    if group is None:
        return None
    conn = admin.to_coordinator(group_id)
    assigned = {(t.topic_name, p) for m in group.members for t in m.assignment.topic_partitions
                for p in t.partitions}
    offsets = conn.request(DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group_id, "topics": None}]})
    offsets = offsets.groups[0]
    if offsets.error_code != 0:
        raise ToolError(f"cannot describe the offsets of share group '{group_id}': "
                        f"{error_text(offsets.error_code)}")
    rows: dict[tuple[str, int], tuple[int, int]] = {}
    for t in offsets.topics:
        for p in t.partitions:
            rows[(t.topic_name, p.partition_index)] = (p.start_offset, p.lag)
    missing = sorted(assigned - set(rows))
    if missing:  # assigned partitions no member has fetched yet: no share state
        by_topic: dict[str, list[int]] = {}
        for topic, p in missing:
            by_topic.setdefault(topic, []).append(p)
        extra = conn.request(DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group_id, "topics": [
            {"topic_name": topic, "partitions": ps} for topic, ps in sorted(by_topic.items())]}]})
        for t in extra.groups[0].topics:
            for p in t.partitions:
                rows[(t.topic_name, p.partition_index)] = (p.start_offset, p.lag)
    return group, rows


def _describe_share_group(admin: GroupAdmin, args, out) -> int | None:
    """Describe a share group as kafka-share-groups.sh --describe and --members do; None when the group
    is not a share group."""
    found = _share_group(admin, args.group)
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


def _partitions_to_reset(admin: GroupAdmin, args, every: list) -> list:
    """The partitions reset-offsets acts on: ``every`` (the group's) with --all-topics, else those of each
    --topic TOPIC[:P,...]."""
    if args.all_topics:
        return every
    tps: list = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            try:
                tps += [(topic, int(p)) for p in parts.split(",") if p]
            except ValueError:
                raise ToolError(f"--topic {spec}: partitions are numbers (TOPIC:P,P,...)") from None
        else:
            try:
                tps += [(topic, p) for p in admin.partition_ids(topic)]
            except ToolError:
                raise ToolError(f"topic {topic} does not exist") from None
    return tps


def _reset_plan(admin: GroupAdmin, args, candidates, none_text: str) -> dict:
    """Each chosen partition's new offset: --to-earliest, --to-latest or --to-offset, kept within the log
    (with a warning, as Kafka's tool, when --to-offset lies outside)."""
    tps = _partitions_to_reset(admin, args, candidates)
    if not tps:
        raise ToolError(f"{none_text} to reset")
    earliest = admin.list_offsets(tps, EARLIEST)
    latest = admin.list_offsets(tps, LATEST)
    plan = {}
    for tp in tps:
        low, high = earliest[tp], latest[tp]
        target = low if args.to_earliest else high if args.to_latest else args.to_offset
        plan[tp] = min(max(target, low), high)
        if not args.to_earliest and not args.to_latest and plan[tp] != target:
            side = "higher than the latest" if target > high else "lower than the earliest"
            print(f"minibroker groups: new offset ({target}) is {side} offset of {tp[0]}-{tp[1]}; using "
                  f"{plan[tp]}", file=sys.stderr)
    return plan


def _reset_share_group(admin: GroupAdmin, args, out, group, rows) -> int:
    """reset-offsets of a share group: AlterShareGroupOffsets, as kafka-share-groups.sh --reset-offsets;
    the group must be Empty."""
    if group.members:
        raise ToolError(f"share group '{args.group}' is not empty (state {group.group_state}): its start "
                        "offsets can only be reset while it has no members.")
    plan = _reset_plan(admin, args, [tp for tp, (start, _lag) in sorted(rows.items()) if start >= 0],
                       f"share group '{args.group}' has no start offsets")
    if args.execute:
        by_topic: dict[str, list] = {}
        for (topic, p), offset in sorted(plan.items()):
            by_topic.setdefault(topic, []).append({"partition_index": p, "start_offset": offset})
        r = admin.to_coordinator(args.group).request(ALTER_SHARE_GROUP_OFFSETS, {
            "group_id": args.group,
            "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]})
        failed = [f"{t.topic_name}-{p.partition_index}: {error_text(p.error_code)}" for t in r.responses
                  for p in t.partitions if p.error_code]
        if r.error_code or failed:
            why = error_text(r.error_code) if r.error_code else ", ".join(failed)
            raise ToolError(f"reset failed: {why}")
    return _print_plan(args, plan, "NEW-START-OFFSET", "set these start offsets", out)


def _print_plan(args, plan, column: str, what: str, out) -> int:
    """A reset's table (each partition's new offset), and on a dry run how to carry it out."""
    rows = [["GROUP", "TOPIC", "PARTITION", column]]
    rows += [[args.group, tp[0], tp[1], plan[tp]] for tp in sorted(plan)]
    _table(rows, out)
    if not args.execute:
        print(f"(dry run: add --execute to {what})", file=sys.stderr)
    return 0


def _dash(value) -> str:
    return "-" if value is None else str(value)


def _reset(admin: GroupAdmin, args, out) -> int:
    share = _share_group(admin, args.group)
    if share is not None:
        return _reset_share_group(admin, args, out, *share)
    state, _ = admin.state_and_members(args.group)
    if state not in INACTIVE:
        raise ToolError(f"assignments can only be reset if the group '{args.group}' is inactive, but the "
                        f"current state is {state}.")
    committed = admin.committed(args.group)
    plan = _reset_plan(admin, args, sorted(committed), f"group '{args.group}' has no offsets")
    if args.execute:
        commit_offsets(admin.to_coordinator(args.group), args.group, plan)
    return _print_plan(args, plan, "NEW-OFFSET", "commit these offsets", out)


def _delete(admin: GroupAdmin, args, out) -> int:
    code = admin.delete(args.group)
    if code:
        raise ToolError(f"cannot delete group '{args.group}': {error_text(code)}")
    print(f"Deleted consumer group '{args.group}'.", file=out)
    return 0


ACTIONS = {"list": _list, "describe": _describe, "reset-offsets": _reset, "delete": _delete}


def run(args, out=None) -> int:
    return run_admin("groups", GroupAdmin, ACTIONS, args, out)
