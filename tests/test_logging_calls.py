"""Issue 13: log calls on cold paths must not break the path they log (or the log line).

A logging call's arguments are evaluated at every level, DEBUG line or not, and its message is
%-formatted only when a handler takes the record. So two classes of bug hide until a rare path
runs: an argument that raises when evaluated (the producer-state replay named ``plog.dir``, and
every idempotent produce after an unclean restart failed), and a format string whose
conversions do not match its arguments (``--- Logging error ---`` on stderr, the line lost).

- ``test_log_format_strings_match_their_arguments``: every logging call in the package whose
  message is a string literal, checked statically (conversions against positional arguments);
- ``test_crash_and_recovery_paths_with_debug_logging``: the storage crash and recovery paths,
  producer-state replay, retention and group loading run in-process with the ``minibroker``
  loggers at DEBUG and a handler that formats every record and fails the test on any error.
"""

from __future__ import annotations

import ast
import logging
import os
import pathlib
import re
import time

import pytest

import minibroker
from minibroker.testing import BrokerRunner

PACKAGE = pathlib.Path(minibroker.__file__).parent
LEVEL_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal"}
# a logger: log, logger, append_log, request_log, self.log, logging.getLogger(...) ...
LOGGER_RECEIVER = re.compile(r"(^|\.)\w*log(ger)?\w*$|^logging\.getLogger\(.*\)$|^logging$", re.IGNORECASE)
CONVERSION = re.compile(
    r"%(?P<key>\([^)]*\))?(?P<flags>[#0+ -]*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?[hlL]?"
    r"(?P<type>[diouxXeEfFgGcrsa%])"
)


def format_problem(fmt: str, args: list[ast.expr]) -> str | None:
    """What is wrong with ``fmt % args`` for a logging call, or None."""
    needed, keys, pos = 0, [], 0
    while True:
        pos = fmt.find("%", pos)
        if pos < 0:
            break
        m = CONVERSION.match(fmt, pos)
        if m is None:
            if not args:
                return None  # never formatted: a lone % is literal text then
            return f"invalid conversion at {fmt[pos:pos + 6]!r}"
        pos = m.end()
        if not args:  # never formatted; but a plain %s or %(name)s there lost its argument
            if m["type"] != "%" and not m["flags"] and not m["width"] and m["precision"] is None:
                return f"{m[0]!r} and no arguments"
            continue
        if m["type"] == "%":
            continue
        if m["key"] is not None:
            keys.append(m["key"][1:-1])
        else:
            needed += 1 + (m["width"] == "*") + (m["precision"] == "*")
    if keys:
        if needed:
            return "mixes %(name)s and positional conversions"
        if len(args) != 1:
            return f"named conversions need one mapping argument, got {len(args)} arguments"
        if isinstance(args[0], ast.Dict):
            have = {k.value for k in args[0].keys if isinstance(k, ast.Constant)}
            if None not in args[0].keys and set(keys) - have:
                return f"keys {sorted(set(keys) - have)} missing from the mapping"
        return None
    if len(args) == 1 and isinstance(args[0], ast.Dict) and needed in (0, 1):
        return None  # logging passes a lone mapping as the mapping
    if needed != len(args):
        return f"{needed} conversions, {len(args)} arguments"
    return None


def logging_calls(tree: ast.AST):
    """(call, format string, positional arguments after it) of every logging call with a literal message."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        if method not in LEVEL_METHODS and method != "log":
            continue
        if not LOGGER_RECEIVER.search(ast.unparse(node.func.value)):
            continue
        args = node.args[1:] if method == "log" else node.args
        if not args or any(isinstance(a, ast.Starred) for a in node.args):
            continue
        first = args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            yield node, first.value, args[1:]


def check_source(source: str, filename: str = "<test>") -> list[str]:
    problems = []
    for call, fmt, args in logging_calls(ast.parse(source, filename)):
        problem = format_problem(fmt, args)
        if problem:
            problems.append(f"{filename}:{call.lineno}: {problem}: {ast.unparse(call)[:160]}")
    return problems


def test_the_checker_catches_what_it_should():
    assert check_source('log.info("%s and %d", a)')
    assert check_source('log.debug("%s", a, b)')
    assert check_source('logger.warning("found %s")' + "\n" + 'log.error("x %s", *rest)') == [
        "<test>:1: '%s' and no arguments: logger.warning('found %s')"
    ]
    assert check_source('self.log.info("%s: %5.1f %% done %y", a, b)')  # %y is no conversion
    assert check_source('append_log.log(logging.DEBUG, "%s-%d", topic)')
    assert check_source('logging.getLogger("x").error("%(a)s %(b)s", {"a": 1})')
    assert check_source('log.info("%(a)s", a, b)')
    assert not check_source('log.info("%s-%d: %.3f %%, %r %*d", a, b, c, d, width, e)')
    assert not check_source('log.info("100% sure")')  # no arguments: never formatted
    assert not check_source('log.info("%(a)s %(b)d", {"a": 1, "b": 2})')
    assert not check_source('log.log(logging.INFO, "%s", x, exc_info=True)')
    assert not check_source('parser.error("%s %s", x)')  # not a logger
    assert not check_source('log.debug(f"{x} %s", y)')  # not a literal: not checked


@pytest.mark.slow
def test_log_format_strings_match_their_arguments():
    problems, calls = [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        calls += sum(1 for _ in logging_calls(ast.parse(source, str(path))))
        problems += check_source(source, str(path.relative_to(PACKAGE.parent)))
    assert calls > 50, f"only {calls} logging calls found: is the receiver pattern stale?"
    assert not problems, "\n".join(problems)


# -- the cold paths at DEBUG --------------------------------------------------------------------


class StrictHandler(logging.Handler):
    """Formats every record as a real handler would; keeps any failure, and any error record."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []
        self.failures: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(self.format(record))
        except Exception as e:  # the message does not format with its arguments
            self.failures.append(f"{record.pathname}:{record.lineno}: {e!r} formatting {record.msg!r}")
            return
        if record.exc_info or record.levelno >= logging.ERROR:
            self.failures.append(self.messages[-1])

    def saw(self, text: str) -> bool:
        return any(text in m for m in self.messages)


@pytest.fixture
def strict_debug_logging():
    logger = logging.getLogger("minibroker")
    handler = StrictHandler()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    failures = "\n".join(handler.failures[:20])
    assert not handler.failures, f"log records that failed or reported errors:\n{failures}"


def test_strict_handler_reports_bad_records():
    handler = StrictHandler()
    logger = logging.getLogger("minibroker.test-strict")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # pytest's own capture handler raises on a bad record
    try:
        logger.debug("%d entries", "many")
        logger.debug("%s and %s", "one")
        logger.info("fine %s", "line")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("handler failed")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True
    assert len(handler.failures) == 3, handler.failures
    assert "TypeError" in handler.failures[0] and "handler failed" in handler.failures[2]
    assert handler.saw("fine line")


TOPIC = "cold"
BROKER_OVERRIDES = {
    "offsets.topic.num.partitions": "2",
    "log.flush.offset.checkpoint.interval.ms": "100",  # recovery points on disk before the kill
}


def idempotent_produce(bootstrap: str, values: list[int]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        for i in range(0, len(values), 20):  # many small batches: many segments
            futures = [producer.send(TOPIC, b"%06d" % v, partition=v % 2) for v in values[i : i + 20]]
            producer.flush(10)
            for f in futures:
                f.get(0)
    finally:
        producer.close(5)


def commit_group_offsets(bootstrap: str) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="cold-group", enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(5, "", -1) for p in range(2)})
    finally:
        consumer.close()


def on_loop(runner: BrokerRunner, fn):
    """Run ``fn()`` on the in-process broker's event loop thread and return its result."""
    import asyncio

    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), runner._loop).result(10)


def damage(data_dir: str) -> None:
    """What a crash (and bad luck) leaves: a torn tail, clobbered and missing indexes, unreadable
    checkpoints, a bad producer snapshot, a stray partition directory, unreadable dynamic configs."""
    p0, p1 = os.path.join(data_dir, f"{TOPIC}-0"), os.path.join(data_dir, f"{TOPIC}-1")
    logs0 = sorted(f for f in os.listdir(p0) if f.endswith(".log"))
    logs1 = sorted(f for f in os.listdir(p1) if f.endswith(".log"))
    assert len(logs0) > 3 and len(logs1) > 3, (logs0, logs1)
    with open(os.path.join(p0, logs0[-1]), "rb") as f:
        tail = f.read()
    with open(os.path.join(p0, logs0[-1]), "ab") as f:  # half of a copy of the tail: a torn write
        f.write(tail[: max(len(tail) // 2, 30)])
    with open(os.path.join(p0, logs0[1].replace(".log", ".index")), "r+b") as f:
        f.seek(0)
        f.write(os.urandom(64))
    os.unlink(os.path.join(p1, logs1[1].replace(".log", ".index")))
    for name in logs1[1:]:  # the snapshots of the rolls: whichever the load tries first is garbage
        with open(os.path.join(p1, name.replace(".log", ".snapshot")), "wb") as f:
            f.write(b"\x00\x01garbage, not a producer snapshot")
    with open(os.path.join(p0, "leader-epoch-checkpoint"), "w") as f:
        f.write("0\nnot a count\n")
    with open(os.path.join(data_dir, "log-start-offset-checkpoint"), "w") as f:
        f.write("0\n1\nno-such-line\n")
    os.makedirs(os.path.join(data_dir, f"{TOPIC}-9"))
    with open(os.path.join(data_dir, "minibroker-dynamic-configs.json"), "w") as f:
        f.write("{not json")


@pytest.mark.slow  # a broker process killed, then the same data in-process
def test_crash_and_recovery_paths_with_debug_logging(tmp_path, strict_debug_logging):
    handler = strict_debug_logging
    data_dir = str(tmp_path / "data")
    overrides = dict(BROKER_OVERRIDES, **{"log.dirs": data_dir})

    # 1. a real broker process writes idempotent batches and group offsets, then is killed
    crashed = BrokerRunner(overrides, data_dir=data_dir, mode="process", log_level="DEBUG")
    try:
        crashed.start()
        crashed.create_topic(TOPIC, 2, {"segment.bytes": 600, "index.interval.bytes": 100})
        idempotent_produce(crashed.bootstrap_servers, list(range(400)))
        commit_group_offsets(crashed.bootstrap_servers)
        time.sleep(0.5)  # sealed segments flushed, recovery points checkpointed
        crashed.kill()
        process_log = crashed.log_text()
        assert "Traceback" not in process_log and "--- Logging error ---" not in process_log, process_log
    finally:
        crashed.cleanup()
    damage(data_dir)

    # 2. the same data in-process, every minibroker record formatted at DEBUG
    broker = BrokerRunner(overrides, data_dir=data_dir, mode="thread", log_level="DEBUG")
    try:
        broker.start()  # unclean load: recovery, index rebuilds, checkpoints, group loading
        deadline = time.monotonic() + 20  # the groups load in the background after start-up
        while not handler.saw("loaded 1 groups") and time.monotonic() < deadline:
            time.sleep(0.02)
        for seen in (
            "unclean shutdown",
            "truncated",  # the torn tail
            "rebuilding indexes of",  # the clobbered index
            "rebuilding the missing indexes of",
            "ignoring stray partition dir",
            "ignoring unreadable",  # dynamic configs
            "loaded 1 groups",
        ):
            assert handler.saw(seen), f"no log line with {seen!r}:\n" + "\n".join(handler.messages[-60:])
        # producer-state replay from the log (a bad snapshot is skipped first), through a real
        # idempotent produce: a new producer id on partitions that hold the old one's batches
        idempotent_produce(broker.bootstrap_servers, list(range(400, 440)))
        assert handler.saw("ignoring producer snapshot")
        assert handler.saw("producer state rebuilt from")
        assert handler.saw("ApiVersions v")  # DEBUG is on: the request lines are there
        # retention (time-based: everything but the active segments is past 7 days from now)
        later = int(time.time() * 1000) + 8 * 86400_000
        deleted = on_loop(broker, lambda: broker.broker.logs.run_retention(later))
        assert deleted > 0 and handler.saw("deleted")
        # expired group offsets (the group is empty: its offsets expire after 7 days)
        removed = on_loop(broker, lambda: broker.broker.groups.expire_offsets(later))
        assert removed == 2 and handler.saw("removed 2 expired offsets")
        broker.stop()  # clean: producer snapshots and checkpoints written

        broker.start()  # clean load: the snapshot replaces the replay
        assert handler.saw("(clean shutdown)")
        idempotent_produce(broker.bootstrap_servers, list(range(440, 460)))
    finally:
        broker.cleanup()


def test_a_debug_broker_after_an_info_one_logs_debug_then_puts_the_level_back(tmp_path):
    """In-process brokers share the 'minibroker' logger: a DEBUG one started after an INFO one must still
    log DEBUG lines (it once got INFO), and its DEBUG level must not outlive it."""
    logger = logging.getLogger("minibroker")
    info = BrokerRunner(data_dir=str(tmp_path / "info"), mode="thread", log_level="INFO")
    info.start()
    level_before = logger.level
    assert logger.getEffectiveLevel() <= logging.INFO
    info.cleanup()
    debug = BrokerRunner(data_dir=str(tmp_path / "debug"), mode="thread", log_level="DEBUG")
    try:
        debug.start()
        assert logger.getEffectiveLevel() == logging.DEBUG
        logging.getLogger("minibroker.test").debug("a debug line of the second broker")
        assert "a debug line of the second broker" in debug.log_text()
    finally:
        debug.cleanup()
    assert logger.level == level_before
