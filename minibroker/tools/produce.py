"""``minibroker produce``: kafka-console-producer.sh with kafka-python underneath.

Each line of stdin (bytes, the trailing newline removed) becomes one record. With
``--key-separator SEP`` the text before the first SEP is the key (a line without SEP is an
error, as Kafka's ``parse.key=true`` makes it). ``--header k=v`` (repeatable) adds headers to
every record; ``--compression`` picks the batch codec; ``--partition`` pins the partition.
Records are sent asynchronously and flushed at the end of input; the exit code is 1 if any
record failed.
"""

from __future__ import annotations

import argparse
import sys

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
        if text.lower() in ("true", "false"):
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


def run(args, stdin=None) -> int:
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
    separator = args.key_separator.encode() if args.key_separator is not None else None
    acks = "all" if args.acks in ("all", "-1") else int(args.acks)
    try:
        producer = KafkaProducer(bootstrap_servers=args.bootstrap_server, acks=acks,
                                 compression_type=None if args.compression == "none" else args.compression,
                                 client_id="minibroker-produce", **extra)
    except KafkaError as e:
        print(f"minibroker produce: cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    failures = []
    sent = 0
    try:
        for raw in stdin:
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            try:
                key, value = split_line(line, separator)
            except ValueError as e:
                print(f"minibroker produce: {e}", file=sys.stderr)
                failures.append(e)
                continue
            future = producer.send(args.topic, value=value, key=key, headers=headers or None,
                                   partition=args.partition)
            future.add_errback(failures.append)
            sent += 1
        producer.flush(timeout=args.timeout)
    except KafkaError as e:
        failures.append(e)
    finally:
        producer.close(timeout=args.timeout)
    if failures:
        print(f"minibroker produce: {len(failures)} of {sent} records failed: {failures[0]!r}",
              file=sys.stderr)
        return 1
    return 0
