"""``minibroker consume``: kafka-console-consumer.sh with kcat's ``-f`` format, over our own wire client.

Where to start: ``--from-beginning``, ``--offset N|earliest|latest`` or ``--timestamp MS`` (the
first record at or after that time, by ListOffsets), else the end (as Kafka's console consumer).
With ``--group`` and none of ``--partition``/``--offset``/``--timestamp`` the tool is a member of a
consumer group through KIP-848's ConsumerGroupHeartbeat (the broker assigns the partitions; a
partition starts at the group's committed offset, or where ``--from-beginning`` or the end says
when none is) and commits what it printed, every second and when it stops, then leaves the group;
otherwise partitions are assigned directly, and a ``--group`` only receives commits.
``-e/--exit`` stops once every assigned partition is read up to the end offset it had when it
was assigned (kcat's ``-e``); ``--max-messages`` and ``--timeout-ms`` stop earlier.

Output is bytes on stdout: the value and a newline by default, or ``--format`` with kcat's
tokens: %t topic, %p partition, %o offset, %k key, %s value, %K / %S key / value length (-1 for
null), %T timestamp (ms), %h headers as k=v,k=v, %% a percent sign; escapes \\n \\r \\t \\\\.

Connecting, ``--timeout`` and exit codes are every tool's (minibroker/tools/command.py): the timeout
bounds the whole start (connecting, the topic's partitions, joining the group, the start offsets) and
then each request; Ctrl-C ends with 130, after committing and leaving the group.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from minibroker.tools.command import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    parse_client_properties,
    report,
    run_tool,
    stdout_bytes,
)

_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\", "0": b"\0"}


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _headers(headers) -> bytes:
    return b",".join(k.encode() + b"=" + (v if v is not None else b"") for k, v in headers or ())


_TOKENS: dict[str, Callable] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "k": lambda r: r.key or b"",
    "s": lambda r: r.value or b"",
    "K": lambda r: _length(r.key),
    "S": lambda r: _length(r.value),
    "T": lambda r: str(r.timestamp).encode(),
    "h": lambda r: _headers(r.headers),
}


def compile_format(fmt: str) -> Callable[[object], bytes]:
    """kcat's ``-f`` format -> a function from a record (kafka-python ConsumerRecord) to bytes."""
    parts: list[bytes | Callable] = []
    literal = bytearray()
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\" and i + 1 < len(fmt):
            nxt = fmt[i + 1]
            if c == "%" and nxt in _TOKENS:
                if literal:
                    parts.append(bytes(literal))
                    literal.clear()
                parts.append(_TOKENS[nxt])
                i += 2
                continue
            if c == "%" and nxt == "%":
                literal += b"%"
                i += 2
                continue
            if c == "\\" and nxt in _ESCAPES:
                literal += _ESCAPES[nxt]
                i += 2
                continue
        literal += c.encode()
        i += 1
    if literal:
        parts.append(bytes(literal))

    def render(record) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(record) for p in parts)

    return render


CONSUMER_PROPERTIES = {"client.id": str, "fetch.max.wait.ms": int, "max.partition.fetch.bytes": int}
COMMIT_INTERVAL_S = 1.0


def parse_properties(items: list[str] | None) -> dict[str, object]:
    """``key=value`` consumer settings among CONSUMER_PROPERTIES, converted. Raises ValueError naming the
    item."""
    return parse_client_properties(items, CONSUMER_PROPERTIES, "consumer")


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("consume", parents=[common], help="print records (kcat-style --format)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", help="N, earliest or latest (every selected partition)")
    start.add_argument("--timestamp", type=int, metavar="MS", help="first record at or after this time")
    p.add_argument("--group", help="consumer group id (KIP-848 member; commits its position)")
    p.add_argument("--max-messages", type=int, default=None)
    p.add_argument("--format", "-f", dest="format", default=None, help="kcat-style format, e.g. '%%k:%%s\\n'")
    p.add_argument("--exit", "-e", action="store_true", help="exit at the end of the partitions")
    p.add_argument("--timeout-ms", type=int, default=None, help="exit after this long without a record")
    p.add_argument("--consumer-property", action="append", metavar="KEY=VALUE",
                   help=f"consumer setting, one of {', '.join(CONSUMER_PROPERTIES)} (repeatable)")
    p.set_defaults(func=run)


def _start(args):
    """Where partitions start without a committed offset: EARLIEST, LATEST, an offset or a timestamp."""
    from minibroker.tools.cluster import EARLIEST, LATEST

    if args.from_beginning or args.offset == "earliest":
        return EARLIEST
    if args.offset == "latest":
        return LATEST
    if args.offset is not None:
        return int(args.offset)
    if args.timestamp is not None:
        return ("timestamp", args.timestamp)
    return LATEST


class Consumption:
    """One run of the tool: the fetcher, the group member (if any), what was printed."""

    def __init__(self, args, cluster, settings, out, render):
        from minibroker.tools.records_client import RecordFetcher

        self.args, self.cluster, self.out, self.render = args, cluster, out, render
        self.fetcher = RecordFetcher(
            cluster, max_wait_ms=int(settings.get("fetch.max.wait.ms", 100)),
            partition_max_bytes=int(settings.get("max.partition.fetch.bytes", 1 << 20)))
        self.member = None
        self.count = 0
        self.ends: dict = {}  # -e: each partition's end offset when it was assigned
        self.printed: dict = {}  # partition -> offset after the last record printed (what a commit says)
        self._committed_at = time.monotonic()

    def setup(self) -> None:
        from minibroker.errors import ErrorCode
        from minibroker.tools.records_client import GroupMember
        from minibroker.tools.wire import ToolError

        args = self.args
        try:
            partitions = self.cluster.partition_ids(args.topic)
        except ToolError as e:
            if ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name in str(e):
                raise ToolError(f"topic {args.topic} does not exist (UNKNOWN_TOPIC_OR_PARTITION)") from None
            raise
        subscribe = args.group is not None and not args.partition and args.offset is None \
            and args.timestamp is None
        if subscribe:
            self.member = GroupMember(self.cluster, args.group, [args.topic])
            self.follow_assignment(self.member.poll())
            return
        for p in args.partition or []:
            if p not in partitions:
                raise ToolError(f"{args.topic}-{p}: UNKNOWN_TOPIC_OR_PARTITION: topic {args.topic} has "
                                f"{len(partitions)} partition{'s' if len(partitions) != 1 else ''}")
        self.add([(args.topic, p) for p in (args.partition or partitions)], _start(args))

    def add(self, tps, where) -> None:
        from minibroker.tools.cluster import LATEST

        if not tps:
            return
        self.fetcher.seek(tps, where)
        if self.args.exit:
            self.ends.update(self.cluster.list_offsets(tps, LATEST))
        for tp in tps:
            self.printed[tp] = self.fetcher.positions[tp]

    def follow_assignment(self, assigned: set) -> None:
        """Start newly assigned partitions (committed offset, else the start options); drop revoked ones
        after committing them."""
        current = set(self.fetcher.positions)
        revoked = current - assigned
        if revoked:
            self.member.commit({tp: self.printed[tp] for tp in revoked if tp in self.printed})
            for tp in revoked:
                self.fetcher.positions.pop(tp, None)
                self.printed.pop(tp, None)
                self.ends.pop(tp, None)
        new = sorted(assigned - current)
        if new:
            committed = self.member.committed(new)
            self.add([tp for tp in new if tp not in committed], _start(self.args))
            for tp, offset in committed.items():
                self.add([tp], offset)

    def commit(self, force: bool = False) -> None:
        if self.args.group is None or not self.printed:
            return
        if not force and time.monotonic() - self._committed_at < COMMIT_INTERVAL_S:
            return
        from minibroker.tools.records_client import commit_offsets

        if self.member is not None:
            self.member.commit(dict(self.printed))
        else:
            _, coordinator = self.cluster.coordinator(self.args.group)
            commit_offsets(coordinator, self.args.group, dict(self.printed))
        self._committed_at = time.monotonic()

    def loop(self) -> None:
        args = self.args
        last_record = time.monotonic()
        while args.max_messages is None or self.count < args.max_messages:
            if self.member is not None:
                self.follow_assignment(self.member.poll())
            records = self.fetcher.fetch()
            if args.max_messages is not None:
                records = records[:args.max_messages - self.count]
            for record in records:
                self.out.write(self.render(record))
                self.printed[(record.topic, record.partition)] = record.offset + 1
                self.count += 1
            if records:
                self.out.flush()
                last_record = time.monotonic()
            self.commit()
            if args.exit and self.fetcher.positions and self.fetcher.at_end(self.ends):
                break
            if args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                break

    def finish(self) -> None:
        """Commit and leave the group, in at most the timeout."""
        self.cluster.deadline.restart(self.args.timeout)
        try:
            self.commit(force=True)
        finally:
            if self.member is not None:
                self.member.leave()


def run(args, stdout=None) -> int:
    out = stdout if stdout is not None else stdout_bytes()
    if args.offset not in (None, "earliest", "latest") and not args.offset.lstrip("-").isdigit():
        report("consume", f"--offset {args.offset!r} is not a number, earliest or latest")
        return EXIT_USAGE
    render = compile_format(args.format) if args.format is not None else (lambda r: (r.value or b"") + b"\n")
    try:
        settings = parse_properties(args.consumer_property)
    except ValueError as e:
        report("consume", str(e))
        return EXIT_USAGE
    state: dict = {}

    def work(security, deadline) -> int:
        from minibroker.tools.cluster import Cluster

        with Cluster(args.bootstrap_server, args.timeout, security,
                     str(settings.get("client.id", "minibroker-consume")), deadline) as cluster:
            consumption = state["run"] = Consumption(args, cluster, settings, out, render)
            interrupted = False
            try:
                consumption.setup()
                deadline.restart(None)  # --timeout bounds each request from here on
                consumption.loop()
            except KeyboardInterrupt:
                interrupted = True
            try:
                consumption.finish()
            except KeyboardInterrupt:
                interrupted = True
            return EXIT_INTERRUPTED if interrupted else 0

    try:
        code = run_tool("consume", args, work)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        if "run" in state:
            print(f"Processed a total of {state['run'].count} messages", file=sys.stderr)
    return code if code in (0, EXIT_INTERRUPTED, EXIT_USAGE) else EXIT_ERROR
