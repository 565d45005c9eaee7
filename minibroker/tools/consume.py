"""``minibroker consume``: kafka-console-consumer.sh with kcat's ``-f`` format, via kafka-python.

Where to start: ``--from-beginning``, ``--offset N|earliest|latest`` or ``--timestamp MS`` (the
first record at or after that time, by ListOffsets), else the end (as Kafka's console consumer).
With ``--group`` and none of ``--partition``/``--offset``/``--timestamp`` the consumer
subscribes (a group member; ``--from-beginning`` applies only where nothing is committed);
otherwise partitions are assigned directly, and a ``--group`` only receives commits.
``-e/--exit`` stops once every assigned partition is read up to the end offset it had when it
was assigned (kcat's ``-e``); ``--max-messages`` and ``--timeout-ms`` stop earlier.

Output is bytes on stdout: the value and a newline by default, or ``--format`` with kcat's
tokens: %t topic, %p partition, %o offset, %k key, %s value, %K / %S key / value length (-1 for
null), %T timestamp (ms), %h headers as k=v,k=v, %% a percent sign; escapes \\n \\r \\t \\\\.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from minibroker.tools.produce import missing_kafka_python, parse_properties
from minibroker.tools.wire import kafka_python_tool_settings

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


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("consume", parents=[common], help="print records (kafka-python; kcat-style --format)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", help="N, earliest or latest (every selected partition)")
    start.add_argument("--timestamp", type=int, metavar="MS", help="first record at or after this time")
    p.add_argument("--group", help="consumer group id (commits its position)")
    p.add_argument("--max-messages", type=int, default=None)
    p.add_argument("--format", "-f", dest="format", default=None, help="kcat-style format, e.g. '%%k:%%s\\n'")
    p.add_argument("--exit", "-e", action="store_true", help="exit at the end of the partitions")
    p.add_argument("--timeout-ms", type=int, default=None, help="exit after this long without a record")
    p.add_argument("--consumer-property", action="append", metavar="KEY=VALUE",
                   help="extra kafka-python KafkaConsumer setting (repeatable)")
    p.set_defaults(func=run)


def _start_positions(consumer, tps, args) -> None:
    """Seek assigned partitions as --from-beginning / --offset / --timestamp ask."""
    if args.from_beginning or args.offset == "earliest":
        consumer.seek_to_beginning(*tps)
    elif args.offset == "latest":
        consumer.seek_to_end(*tps)
    elif args.offset is not None:
        for tp in tps:
            consumer.seek(tp, int(args.offset))
    elif args.timestamp is not None:
        found = consumer.offsets_for_times({tp: args.timestamp for tp in tps})
        for tp in tps:
            hit = found.get(tp)
            if hit is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, hit.offset)
    elif args.group is None:
        consumer.seek_to_end(*tps)
    # else: a group's committed offsets, or auto_offset_reset where none


def run(args, stdout=None) -> int:
    try:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError
    except ImportError:
        return missing_kafka_python("consume")
    out = stdout if stdout is not None else sys.stdout.buffer
    if args.offset not in (None, "earliest", "latest") and not args.offset.lstrip("-").isdigit():
        print(f"minibroker consume: --offset {args.offset!r} is not a number, earliest or latest",
              file=sys.stderr)
        return 2
    render = compile_format(args.format) if args.format is not None else (lambda r: (r.value or b"") + b"\n")
    try:
        extra = parse_properties(args.consumer_property)
    except ValueError as e:
        print(f"minibroker consume: {e}", file=sys.stderr)
        return 2
    settings, code = kafka_python_tool_settings(args, "consume")
    if code:
        return code
    subscribe = (args.group is not None and not args.partition
                 and args.offset is None and args.timestamp is None)
    try:
        consumer = KafkaConsumer(bootstrap_servers=args.bootstrap_server, group_id=args.group,
                                 enable_auto_commit=args.group is not None,
                                 auto_offset_reset="earliest" if args.from_beginning else "latest",
                                 client_id="minibroker-consume", **{**settings, **extra})
    except KafkaError as e:
        print(f"minibroker consume: cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    count = 0
    try:
        if subscribe:
            consumer.subscribe([args.topic])
        else:
            partitions = args.partition or sorted(consumer.partitions_for_topic(args.topic) or ())
            if not partitions:
                print(f"minibroker consume: topic {args.topic} does not exist", file=sys.stderr)
                return 1
            tps = [TopicPartition(args.topic, p) for p in partitions]
            consumer.assign(tps)
            _start_positions(consumer, tps, args)
        ends: dict = {}
        last_record = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            left = None if args.max_messages is None else args.max_messages - count
            batch = consumer.poll(timeout_ms=100, max_records=left)
            for records in batch.values():
                for record in records:
                    out.write(render(record))
                    count += 1
            if batch:
                out.flush()
                last_record = time.monotonic()
            if args.exit and _at_end(consumer, ends):
                break
            if args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    except KafkaError as e:
        print(f"minibroker consume: {e!r}", file=sys.stderr)
        return 1
    finally:
        out.flush()
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _at_end(consumer, ends: dict) -> bool:
    """Every assigned partition read up to the end offset it had when first seen here."""
    assigned = consumer.assignment()
    if not assigned:
        return False
    missing = [tp for tp in assigned if tp not in ends]
    if missing:
        ends.update(consumer.end_offsets(missing))
    return all(consumer.position(tp) >= ends[tp] for tp in assigned)
