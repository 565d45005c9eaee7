"""``minibroker produce``: kafka-console-producer.sh over our own wire client (no Kafka client library).

Each line of stdin (bytes, the trailing newline removed) becomes one record. With
``--key-separator SEP`` the text before the first SEP is the key (a line without SEP is an
error, as Kafka's ``parse.key=true`` makes it). ``--header k=v`` (repeatable) adds headers to
every record; ``--compression`` picks the batch codec; records carry a producer id and sequence numbers
(idempotent, as Kafka's producers are by default since 3.0) unless ``enable.idempotence=false`` or
``--acks`` is below all; ``--partition`` pins the partition, else a key's
partition is Kafka's (murmur2) and records without a key go round-robin
(minibroker/tools/records_client.py). What stdin has ready is sent as one Produce request per leader
before the next read, so an interactive line is sent at once and a piped file in large batches.

Connecting, ``--timeout`` and exit codes are every tool's (minibroker/tools/command.py); the timeout
bounds connecting and each request, not the wait for input. The exit code is 1 if any record failed or
any line was malformed (each counted on its own), 130 after Ctrl-C, which sends what was read for at
most two seconds and prints the summary.
"""

from __future__ import annotations

import argparse
import sys

from minibroker.records.codecs import Compression
from minibroker.tools.command import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    parse_client_properties,
    report,
    run_tool,
    stdout_text,
)

COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
# --producer-property keys (Kafka's names; kafka-python's spelling with underscores is read too)
PRODUCER_PROPERTIES = {"acks": str, "compression.type": str, "batch.size": int, "linger.ms": int,
                       "retries": int, "client.id": str, "enable.idempotence": str,
                       "magic": int}  # minibroker's own: 0 or 1 writes an old message format (teaching)


def parse_properties(items: list[str] | None) -> dict[str, object]:
    """``key=value`` producer settings among PRODUCER_PROPERTIES, converted. Raises ValueError naming the
    item."""
    return parse_client_properties(items, PRODUCER_PROPERTIES, "producer")


def parse_headers(items: list[str] | None) -> list[tuple[str, bytes]]:
    out = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"header {item!r} is not KEY=VALUE")
        out.append((key, value.encode()))
    return out


def _shown(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise ValueError(f'no key separator "{_shown(separator)}" in line "{_shown(line[:60])}"')
    return key, value


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[common], help="send lines from stdin as records")
    p.add_argument("--topic", required=True)
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value")
    p.add_argument("--header", action="append", metavar="KEY=VALUE",
                   help="header on every record (repeatable)")
    p.add_argument("--compression", choices=COMPRESSION, default="none")
    p.add_argument("--partition", type=int, default=None,
                   help="default: a key's partition (murmur2), round-robin without a key")
    p.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all")
    p.add_argument("--producer-property", action="append", metavar="KEY=VALUE",
                   help=f"producer setting, one of {', '.join(PRODUCER_PROPERTIES)} (repeatable)")
    p.set_defaults(func=run)


class Tally:
    """What happened to the input: lines read, malformed lines skipped, records sent, acknowledged and
    failed (with the first failure's reason)."""

    def __init__(self) -> None:
        self.lines = self.malformed = self.sent = self.acked = 0
        self.failed: list[str] = []
        self.first_malformed: str | None = None

    def summary(self, interrupted: bool) -> str:
        failed = len(self.failed)
        pending = max(0, self.sent - self.acked - failed)
        parts = [f"{self.lines} line{'s' if self.lines != 1 else ''} read",
                 f"{self.sent} record{'s' if self.sent != 1 else ''} sent", f"{self.acked} acknowledged",
                 f"{failed} failed"]
        if pending:
            parts.append(f"{pending} unconfirmed")
        parts.append(f"{self.malformed} malformed line{'s' if self.malformed != 1 else ''} skipped")
        lines = [f"minibroker produce: {'interrupted: ' if interrupted else ''}{', '.join(parts)}"]
        if failed:
            lines.append(f"minibroker produce: {failed} of {self.sent} records failed: {self.failed[0]}")
        if self.malformed:
            lines.append(f"minibroker produce: {self.malformed} malformed line"
                         f"{'s' if self.malformed != 1 else ''} skipped (first: {self.first_malformed})")
        return "\n".join(lines)


INTERRUPT_FLUSH_S = 2.0  # after Ctrl-C: how long sending what was read may take
READ_BYTES = 1 << 16


def run(args, stdin=None) -> int:
    """Exit 0 when every line became an acknowledged record; 1 when a record failed, a line was
    malformed or a record is unconfirmed at the end; 130 on Ctrl-C (after a bounded send and the
    summary); 2 for bad options."""
    stdin = stdin if stdin is not None else sys.stdin.buffer
    try:
        headers = parse_headers(args.header)
        settings = parse_properties(args.producer_property)
    except ValueError as e:
        report("produce", str(e))
        return EXIT_USAGE
    acks_text = str(settings.get("acks", args.acks))
    if acks_text not in ("0", "1", "all", "-1"):
        report("produce", f"acks={acks_text}: use 0, 1, all or -1")
        return EXIT_USAGE
    compression = str(settings.get("compression.type", args.compression))
    if compression not in COMPRESSION:
        report("produce", f"compression.type={compression}: use one of {', '.join(COMPRESSION)}")
        return EXIT_USAGE
    magic = int(settings.get("magic", 2))
    if magic not in (0, 1, 2):
        report("produce", f"magic={magic}: use 0, 1 or 2")
        return EXIT_USAGE
    idempotence = str(settings.get("enable.idempotence", "true" if magic == 2 else "false")).lower()
    if idempotence not in ("true", "false"):
        report("produce", f"enable.idempotence={idempotence}: use true or false")
        return EXIT_USAGE
    tally = Tally()

    def work(security, deadline) -> int:
        from minibroker.tools.cluster import Cluster
        from minibroker.tools.records_client import BATCH_BYTES, RecordProducer

        with Cluster(args.bootstrap_server, args.timeout, security,
                     str(settings.get("client.id", "minibroker-produce")), deadline) as cluster:
            producer = RecordProducer(cluster, acks=-1 if acks_text == "all" else int(acks_text),
                                      compression=Compression[compression.upper()],
                                      batch_bytes=int(settings.get("batch.size", BATCH_BYTES)),
                                      retries=settings.get("retries"),
                                      # as Kafka's producers since 3.0 (not with acks below all)
                                      idempotent=idempotence == "true" and acks_text in ("all", "-1"),
                                      magic=magic)
            producer.partition_count(args.topic)  # the topic (auto-created where the broker does) and
            if args.partition is not None:        # the partition exist, within the whole --timeout
                producer.choose_partition(args.topic, None, args.partition)
            deadline.restart(None)  # from here on, --timeout bounds each request; input may take its time
            return _produce_input(args, producer, stdin, headers, tally)

    try:
        code = run_tool("produce", args, work)
    except KeyboardInterrupt:  # before any input was read (connecting)
        print(tally.summary(interrupted=True), file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _prompt_for(stdin):
    """What to call before each read: print ``>`` when a person types the input (stdin and stdout
    terminals, where Kafka's console producer prompts too), nothing for a pipe or a file."""
    def interactive(stream) -> bool:
        try:
            return stream.isatty()
        except (AttributeError, ValueError):  # a test's in-memory stream, a closed one
            return False

    if not (interactive(stdin) and interactive(sys.stdout)):
        return lambda: None
    out = stdout_text()

    def prompt() -> None:
        out.write(">")
        out.flush()

    return prompt


def _produce_input(args, producer, stdin, headers, tally: Tally) -> int:
    separator = args.key_separator.encode() if args.key_separator is not None else None
    interrupted = False
    rest = b""
    pending: list[tuple] = []

    def send() -> None:
        if pending:
            records = list(pending)
            pending.clear()
            tally.sent += len(records)
            for outcome in producer.send(args.topic, records, args.partition):
                if outcome.error is None:
                    tally.acked += 1
                else:
                    tally.failed.append(outcome.error)

    def take(line: bytes) -> None:
        tally.lines += 1
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            key, value = split_line(line, separator)
        except ValueError as e:
            report("produce", f"line {tally.lines}: {e}")
            tally.malformed += 1
            tally.first_malformed = tally.first_malformed or f"line {tally.lines}: {e}"
            return
        pending.append((key, value, headers))

    read = getattr(stdin, "read1", stdin.read)
    prompt = _prompt_for(stdin)
    try:
        while True:
            prompt()
            chunk = read(READ_BYTES)
            if not chunk:
                break
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                take(line)
            send()  # what the input had ready: one request per leader, before waiting for more
        if rest:
            take(rest)
        send()
    except KeyboardInterrupt:
        interrupted = True
        producer.cluster.deadline.restart(INTERRUPT_FLUSH_S)
        try:
            send()
        except (KeyboardInterrupt, Exception):  # a second Ctrl-C, or no time left: reported unconfirmed
            pass
    failed = bool(tally.failed) or tally.malformed or tally.sent != tally.acked
    if interrupted or failed:
        print(tally.summary(interrupted), file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_ERROR if failed else 0
