"""``minibroker scram``: SCRAM credentials, in the shape of kafka-configs.sh's user entity commands.

    minibroker scram --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=x]'
    minibroker scram --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --delete-config SCRAM-SHA-512
    minibroker scram --bootstrap-server H:P --describe [--entity-type users] [--entity-name alice]

Online, the tool sends AlterUserScramCredentials / DescribeUserScramCredentials through our own wire
client, salting the password with PBKDF2 before it leaves the machine as Kafka's admin client does, one
request per mechanism (Kafka refuses two alterations of one user in one request); ``--command-config``
names a client properties file as Kafka's tools take it (minibroker/tools/client_config.py), so it can
reach a SASL or TLS listener. Connecting, ``--timeout`` and errors are every tool's
(minibroker/tools/command.py).

Offline, ``--data-dir DIR`` writes (or, with ``--describe``, reads) the credentials file of a log dir no
broker is running on, as ``kafka-storage.sh format --add-scram`` seeds users before the first start; a
running broker holds the directory's lock and the tool refuses.

Iterations default to 4096 and must lie in [4096, 16384]. Exit codes: 0 success, 1 when the broker (or
the directory) refused or the broker could not be reached in time, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import re
import sys

from minibroker.security.sasl.scram import MAX_ITERATIONS, MECHANISMS, credential_from_password
from minibroker.tools.client_config import add_command_config_argument
from minibroker.tools.wire import ToolError

DEFAULT_ITERATIONS = 4096
# "key=value" items of one mechanism's brackets; a value runs to the next ",iterations=" or ",password="
_KEY_VALUE = re.compile(r"(?:^|,)\s*(iterations|password)=((?:(?!,\s*(?:iterations|password)=).)*)")


DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51


def parse_add_config(text: str) -> dict[str, tuple[int, str]]:
    """``SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=y]`` -> mechanism ->
    (iterations, password). Raises ValueError. A password may hold commas and "=" but not "]"."""
    out: dict[str, tuple[int, str]] = {}
    pos = 0
    text = text.strip()
    item = re.compile(r"\s*([A-Za-z0-9-]+)=\[([^\]]*)\]\s*(,|$)")
    while pos < len(text):
        m = item.match(text, pos)
        if m is None:
            raise ValueError(f"expected MECHANISM=[iterations=N,password=P] at {text[pos:]!r}")
        mechanism, body = m[1], m[2]
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism} (use {' or '.join(MECHANISMS)})")
        iterations, password = DEFAULT_ITERATIONS, None
        # "password=" is last or followed only by other known keys; split on the known keys
        for key, value in _KEY_VALUE.findall(body):
            if key == "iterations":
                try:
                    iterations = int(value)
                except ValueError:
                    raise ValueError(f"{mechanism}: iterations={value!r} is not a number") from None
            else:
                password = value
        if password is None:
            raise ValueError(f"{mechanism}: password=... is required")
        out[mechanism] = (iterations, password)
        pos = m.end()
    if not out:
        raise ValueError("nothing to add")
    return out


def parse_delete_config(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {name} (use {' or '.join(MECHANISMS)})")
    return names


def _check_iterations(adds: dict[str, tuple[int, str]]) -> None:
    for mechanism, (iterations, _) in adds.items():
        if not MECHANISMS[mechanism].min_iterations <= iterations <= MAX_ITERATIONS:
            raise ToolError(f"{mechanism}: iterations must be between {MECHANISMS[mechanism].min_iterations} "
                            f"and {MAX_ITERATIONS}, not {iterations}")


def _describe_line(user: str, infos: list[tuple[str, int]]) -> str:
    configs = ", ".join(f"{mechanism}=iterations={iterations}" for mechanism, iterations in infos)
    return f"SCRAM credential configs for user-principal '{user}' are {configs}"


def _offline(args, adds, deletes, out) -> int:
    from minibroker.security.scram_credentials import read_offline, write_offline
    from minibroker.storage.dir_lock import LogDirLockedError

    if args.describe:
        saved = read_offline(args.data_dir)
        users = [args.entity_name] if args.entity_name else sorted(saved)
        for user in users:
            if user not in saved:
                raise ToolError(f"Attempt to describe a user credential that does not exist: {user}")
            print(_describe_line(user, [(m, c.iterations) for m, c in sorted(saved[user].items())]), file=out)
        return 0
    upserts = [(args.entity_name, MECHANISMS[m], credential_from_password(MECHANISMS[m], password, n))
               for m, (n, password) in adds.items()]
    try:
        write_offline(args.data_dir, upserts, [(args.entity_name, MECHANISMS[m]) for m in deletes])
    except LogDirLockedError as e:
        raise ToolError(f"{e} Stop the broker, or use --bootstrap-server to change credentials "
                        "online.") from None
    except OSError as e:
        raise ToolError(f"cannot write the credentials in {args.data_dir}: {e}") from None
    print(f"Completed updating config for user {args.entity_name} in {args.data_dir}.", file=out)
    return 0


def _online(args, adds, deletes, out, security, deadline) -> int:
    from minibroker.security.sasl.scram import new_salt, salted_password
    from minibroker.tools.cluster import Cluster, error_text

    by_type = {m.type: name for name, m in MECHANISMS.items()}
    with Cluster(args.bootstrap_server, args.timeout, security, "minibroker-scram", deadline) as cluster:
        if args.describe:
            users = [{"name": args.entity_name}] if args.entity_name else None
            r = cluster.bootstrap.request(DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": users})
            if r.error_code:
                raise ToolError(error_text(r.error_code, r.error_message))
            failed = False
            for result in sorted(r.results, key=lambda r: r.user):
                if result.error_code:
                    print(f"minibroker scram: {error_text(result.error_code, result.error_message)}",
                          file=sys.stderr)
                    failed = True
                else:
                    infos = [(by_type.get(c.mechanism, str(c.mechanism)), c.iterations)
                             for c in result.credential_infos]
                    print(_describe_line(result.user, infos), file=out)
            return 1 if failed else 0
        alterations = [{"deletions": [{"name": args.entity_name, "mechanism": MECHANISMS[m].type}],
                        "upsertions": []} for m in deletes]
        for m, (iterations, password) in adds.items():
            salt = new_salt()  # salted here: the password never leaves this machine
            alterations.append({"deletions": [], "upsertions": [{
                "name": args.entity_name, "mechanism": MECHANISMS[m].type, "iterations": iterations,
                "salt": salt,
                "salted_password": salted_password(MECHANISMS[m], password, salt, iterations)}]})
        # one request per alteration: Kafka (KRaft) refuses two alterations of one user in one request
        for body in alterations:
            mechanism = by_type[(body["deletions"] or body["upsertions"])[0]["mechanism"]]
            for result in cluster.bootstrap.request(ALTER_USER_SCRAM_CREDENTIALS, body).results:
                if result.error_code:
                    raise ToolError(f"user {result.user}: {mechanism}: "
                                    f"{error_text(result.error_code, result.error_message)}")
    print(f"Completed updating config for user {args.entity_name}.", file=out)
    return 0


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    scram = sub.add_parser("scram", parents=[common], help="add, delete and describe SCRAM credentials "
                           "(as kafka-configs.sh --entity-type users)")
    action = scram.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="add (--add-config) or delete (--delete-config)")
    action.add_argument("--describe", action="store_true", help="list users' SCRAM mechanisms and iterations")
    scram.add_argument("--entity-type", default="users", choices=("users",), help="always users")
    scram.add_argument("--entity-name", metavar="USER", help="the user (required with --alter)")
    scram.add_argument("--add-config", metavar="'SCRAM-SHA-256=[iterations=N,password=P],...'",
                       help="credentials to set; iterations default to 4096")
    scram.add_argument("--delete-config", metavar="SCRAM-SHA-256[,SCRAM-SHA-512]",
                       help="credentials to delete")
    add_command_config_argument(scram)
    scram.add_argument("--data-dir", metavar="DIR",
                       help="offline: change (or describe) the credentials of a log dir no broker runs on")
    scram.set_defaults(func=run)


def run(args, out=None) -> int:
    from minibroker.tools.command import stdout_text

    out = out or stdout_text()  # a closed stdout ends quietly, not as an unreachable broker
    try:
        adds = parse_add_config(args.add_config) if args.add_config else {}
        deletes = parse_delete_config(args.delete_config) if args.delete_config else []
    except ValueError as e:
        print(f"minibroker scram: --add-config/--delete-config: {e}", file=sys.stderr)
        return 2
    if args.alter:
        if not args.entity_name:
            print("minibroker scram: --alter needs --entity-name USER", file=sys.stderr)
            return 2
        if not adds and not deletes:
            print("minibroker scram: --alter needs --add-config or --delete-config", file=sys.stderr)
            return 2
        if set(adds) & set(deletes):
            print("minibroker scram: a mechanism cannot be both added and deleted", file=sys.stderr)
            return 2
    try:
        _check_iterations(adds)
        if args.data_dir:
            return _offline(args, adds, deletes, out)
    except ToolError as e:
        print(f"minibroker scram: {e}", file=sys.stderr)
        return 1
    from minibroker.tools.command import run_tool

    return run_tool("scram", args, lambda security, deadline: _online(args, adds, deletes, out, security,
                                                                       deadline))
