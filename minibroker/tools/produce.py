"""``minibroker produce``: kafka-console-producer.sh with kafka-python underneath.

Each line of stdin (bytes, the trailing newline removed) becomes one record. With
``--key-separator SEP`` the text before the first SEP is the key (a line without SEP is an
error, as Kafka's ``parse.key=true`` makes it). ``--header k=v`` (repeatable) adds headers to
every record; ``--compression`` picks the batch codec; ``--partition`` pins the partition.
Records are sent asynchronously and flushed at the end of input; the exit code is 1 if any
record failed or any line was malformed (each counted on its own), 130 after Ctrl-C, which flushes
what was sent for at most two seconds and prints the summary.
"""

from __future__ import annotations

import argparse
import sys

from minibroker.tools.wire import kafka_python_tool_settings

COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


def missing_kafka_python(tool: str) -> int:
    """The message every kafka-python based tool prints when the client is not installed."""
    print(f"minibroker {tool}: this tool needs kafka-python; install it with\n"
          f"    pip install 'kafka-python>=3.0,<4'", file=sys.stderr)
    return 3


def parse_properties(items: list[str] | None) -> dict[str, object]:
    """``key=value`` client settings (kafka-python's names); ints, floats and booleans converted."""
    out: dict[str, object] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"property {item!r} is not KEY=VALUE")
        value: object = text
        if key.strip() in ("api_version", "api.version"):  # kafka-python wants a tuple: (0, 10, 0)
            try:
                value = tuple(int(part) for part in text.split("."))
            except ValueError:
                raise ValueError(f"property {item!r}: a version is numbers with dots, e.g. 0.10.0") from None
        elif text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for convert in (int, float):
                try:
                    value = convert(text)
                    break
                except ValueError:
                    pass
        out[key.strip().replace(".", "_")] = value
    return out


def parse_headers(items: list[str] | None) -> list[tuple[str, bytes]]:
    out = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"header {item!r} is not KEY=VALUE")
        out.append((key, value.encode()))
    return out


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise ValueError(f"no key separator {separator!r} in line {line[:60]!r}")
    return key, value


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[common], help="send lines from stdin as records (kafka-python)")
    p.add_argument("--topic", required=True)
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value")
    p.add_argument("--header", action="append", metavar="KEY=VALUE",
                   help="header on every record (repeatable)")
    p.add_argument("--compression", choices=COMPRESSION, default="none")
    p.add_argument("--partition", type=int, default=None, help="default: the partitioner decides")
    p.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all")
    p.add_argument("--producer-property", action="append", metavar="KEY=VALUE",
                   help="extra kafka-python KafkaProducer setting, e.g. linger_ms=5 (repeatable)")
    p.set_defaults(func=run)


class Tally:
    """What happened to the input: lines read, malformed lines skipped, records handed to the
    producer, acknowledged and failed (the last two counted by the producer's I/O thread)."""

    def __init__(self) -> None:
        self.lines = self.malformed = self.sent = self.acked = 0
        self.failed: list[BaseException] = []
        self.first_malformed: str | None = None

    def on_ack(self, _metadata) -> None:
        self.acked += 1

    def on_error(self, exc: BaseException) -> None:
        self.failed.append(exc)

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
            lines.append(f"minibroker produce: {failed} of {self.sent} records failed: {self.failed[0]!r}")
        if self.malformed:
            lines.append(f"minibroker produce: {self.malformed} malformed line"
                         f"{'s' if self.malformed != 1 else ''} skipped (first: {self.first_malformed})")
        return "\n".join(lines)


INTERRUPT_FLUSH_S = 2.0  # after Ctrl-C: how long to wait for records already sent


def run(args, stdin=None) -> int:
    """Exit 0 when every line became an acknowledged record; 1 when a record failed, a line was
    malformed or a record is unconfirmed at the end; 130 on Ctrl-C (after a bounded flush and
    the summary); 2 for bad options; 3 without kafka-python."""
    try:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError
    except ImportError:
        return missing_kafka_python("produce")
    stdin = stdin if stdin is not None else sys.stdin.buffer
    try:
        headers = parse_headers(args.header)
        extra = parse_properties(args.producer_property)
    except ValueError as e:
        print(f"minibroker produce: {e}", file=sys.stderr)
        return 2
    settings, code = kafka_python_tool_settings(args, "produce")
    if code:
        return code
    separator = args.key_separator.encode() if args.key_separator is not None else None
    acks = "all" if args.acks in ("all", "-1") else int(args.acks)
    tally = Tally()
    try:
        producer = KafkaProducer(bootstrap_servers=args.bootstrap_server, acks=acks,
                                 compression_type=None if args.compression == "none" else args.compression,
                                 client_id="minibroker-produce", **{**settings, **extra})
    except KafkaError as e:
        print(f"minibroker produce: cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(tally.summary(interrupted=True), file=sys.stderr)
        return 130
    interrupted = False
    flush_timeout = args.timeout
    try:
        try:
            for raw in stdin:
                tally.lines += 1
                line = raw[:-1] if raw.endswith(b"\n") else raw
                if line.endswith(b"\r"):
                    line = line[:-1]
                try:
                    key, value = split_line(line, separator)
                except ValueError as e:
                    print(f"minibroker produce: line {tally.lines}: {e}", file=sys.stderr)
                    tally.malformed += 1
                    tally.first_malformed = tally.first_malformed or f"line {tally.lines}: {e}"
                    continue
                try:
                    future = producer.send(args.topic, value=value, key=key, headers=headers or None,
                                           partition=args.partition)
                except KafkaError as e:  # not sent at all (e.g. no metadata within max_block_ms)
                    tally.sent += 1
                    tally.on_error(e)
                    continue
                tally.sent += 1
                future.add_callback(tally.on_ack)
                future.add_errback(tally.on_error)
        except KeyboardInterrupt:
            interrupted = True
        flush_timeout = min(args.timeout, INTERRUPT_FLUSH_S) if interrupted else args.timeout
        try:
            producer.flush(timeout=flush_timeout)
        except KafkaError:
            pass  # what was not acknowledged in time is reported as unconfirmed
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            interrupted = True
            flush_timeout = 0
    except KeyboardInterrupt:
        interrupted, flush_timeout = True, 0
    finally:
        try:
            producer.close(timeout=min(flush_timeout, INTERRUPT_FLUSH_S) if interrupted else args.timeout)
        except KeyboardInterrupt:
            interrupted = True
    failed = bool(tally.failed) or tally.malformed or tally.sent != tally.acked
    if interrupted or failed:
        print(tally.summary(interrupted), file=sys.stderr)
    if interrupted:
        return 130
    return 1 if failed else 0
