"""``minibroker inject``: fault injection rules of a running broker, over its ``/faults`` HTTP API on the
metrics port (the broker runs with ``fault.injection.enable=true`` and ``metrics.port``).

    minibroker inject --url http://127.0.0.1:9404 add --api Produce --error NOT_LEADER_OR_FOLLOWER --count 3
    minibroker inject list | get ID | remove ID | clear | release [ID]

Answers are printed as JSON; a refused rule exits 1 with the broker's reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# add's flags: (flag, rule key, type, help)
_RULE_FLAGS = (
    ("--api", "api", str, "API name or key (repeatable); default: every API that can carry the fault"),
    ("--versions", "versions", str, "version range MIN-MAX, or one version"),
    ("--topic", "topic", str, "only requests naming this topic"),
    ("--partition", "partition", int, "only this partition of --topic"),
    ("--group", "group", str, "only requests for this group id"),
    ("--transactional-id", "transactional_id", str, "only requests for this transactional id"),
    ("--client-id", "client_id", str, "only requests from this client id"),
    ("--count", "count", int, "act on this many requests, then stop matching"),
    ("--probability", "probability", float, "act on a matching request with this probability (0-1]"),
    ("--starts-after-ms", "starts_after_ms", int, "start matching this long after the rule is added"),
    ("--lasts-ms", "lasts_ms", int, "stop matching this long after it starts"),
    ("--action", "action", str,
     "error, offline, drop, stop_reading, throttle or none (default: what the other flags say)"),
    ("--error", "error", str, "Kafka error name or code to answer with"),
    ("--delay-ms", "delay_ms", int, "wait this long before handling"),
    ("--jitter-ms", "jitter_ms", int, "and up to this much more"),
    ("--drop", "drop", str, "close the connection 'before' or 'after' handling"),
    ("--throttle-ms", "throttle_ms", int, "answer with this throttle time and mute the connection for it"),
)
_RULE_SWITCHES = (
    ("--after-handling", "after_handling", "handle the request for real, then answer with --error"),
    ("--bump-leader-epoch", "bump_leader_epoch", "start the matched partitions' next leader epoch"),
    ("--hold", "hold", "hold requests until released (release ID)"),
)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("inject", help="add, list and remove fault injection rules of a running broker",
                       description="Fault injection rules over a broker's /faults HTTP API (the broker "
                                   "runs with fault.injection.enable=true and metrics.port). See "
                                   "docs/testing.md, \"Faults on demand\".")
    p.add_argument("--url", default=os.environ.get("MINIBROKER_FAULTS_URL"),
                   help="the broker's metrics address, http://HOST:PORT (env MINIBROKER_FAULTS_URL)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per HTTP call (default: %(default)s)")
    commands = p.add_subparsers(dest="inject_command", required=True)
    add = commands.add_parser("add", help="add a rule (flags, or --json)")
    add.add_argument("--json", dest="rule_json", metavar="RULE", help="the whole rule as a JSON object")
    for flag, key, kind, text in _RULE_FLAGS:
        add.add_argument(flag, dest=key, type=kind, help=text, action="append" if key == "api" else "store")
    for flag, key, text in _RULE_SWITCHES:
        add.add_argument(flag, dest=key, action="store_true", help=text)
    commands.add_parser("list", help="every rule, with its match count")
    for name, text in (("get", "one rule"), ("remove", "remove one rule")):
        one = commands.add_parser(name, help=text)
        one.add_argument("id", type=int)
    commands.add_parser("clear", help="remove every rule")
    release = commands.add_parser("release", help="let held requests go on (one rule's, or all)")
    release.add_argument("id", type=int, nargs="?")
    p.set_defaults(func=run)
    return p


def rule_from_args(args) -> dict:
    rule = json.loads(args.rule_json) if args.rule_json else {}
    for _, key, _, _ in _RULE_FLAGS:
        value = getattr(args, key)
        if value is None:
            continue
        if key == "versions":
            low, _, high = value.partition("-")
            value = [int(low), int(high or low)]
        rule[key] = value
    for _, key, _ in _RULE_SWITCHES:
        if getattr(args, key):
            rule[key] = True
    return rule


def run(args) -> int:
    from minibroker.tools.faults_client import FaultApiError, FaultsHttp

    if not args.url:
        print("minibroker inject: --url http://HOST:PORT (the broker's metrics.port) is needed",
              file=sys.stderr)
        return 2
    api = FaultsHttp(args.url, args.timeout)
    command = args.inject_command
    try:
        if command == "add":
            answer = api.add(rule_from_args(args))
        elif command == "list":
            answer = api.rules()
        elif command == "get" or command == "remove":
            answer = api.get(args.id) if command == "get" else api.remove(args.id)
            if answer is None:
                print(f"minibroker inject: no rule {args.id}", file=sys.stderr)
                return 1
        elif command == "clear":
            answer = {"removed": api.clear()}
        else:
            answer = {"released": api.release(args.id)}
    except (FaultApiError, ValueError) as e:
        print(f"minibroker inject: {e}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0
