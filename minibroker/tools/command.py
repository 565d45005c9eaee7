"""How every console tool that talks to a broker runs: one way to connect, time out, report and exit.

- connecting: ``--bootstrap-server`` and ``--command-config`` (minibroker/tools/client_config.py), through
  our own ``WireClient`` (no Kafka client library);
- timing out: ``--timeout`` seconds (default 10) bound the whole command, every connection, handshake and
  answer included (a ``Deadline`` shared by all its connections). Only a ``consume`` that follows new
  records, and a ``produce`` reading its input, wait longer: past their start, the timeout bounds each
  request instead (``Deadline.at`` None);
- reporting: one line on stderr, ``minibroker TOOL: ...``; a Kafka error as its code's name and the broker's
  message (``UNKNOWN_TOPIC_OR_PARTITION: ...``), never a Python repr or a traceback;
- exiting (``EXIT_*``): 0 done, 1 an error (the broker's answer, an unreachable broker, a timeout), 2 a usage
  error (options, an unusable ``--command-config``), 130 interrupted (Ctrl-C);
- a closed stdout (``| head``) ends the command quietly with 0, as ``head`` expects (``OutputClosed``,
  handled in ``minibroker.cli.main``); a ``BrokenPipeError`` that reaches ``run_tool`` is stdout's when
  polling stdout finds its reader gone, else a broker connection's.
"""

from __future__ import annotations

import os
import sys

from minibroker.tools.client_config import ClientConfigError, read_client_config
from minibroker.tools.wire import Deadline, ToolError, failure_text

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_TIMEOUT_S = 10.0


class UsageError(Exception):
    """Options that do not go together: reported with exit code 2."""


class OutputClosed(Exception):
    """stdout's reader has gone (``| head``): the command stops quietly with exit code 0."""


class GuardedOutput:
    """A stream (text or bytes) whose writes raise ``OutputClosed`` instead of ``BrokenPipeError``, so that a
    closed stdout is never mistaken for a broker that went away."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, data):
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            raise OutputClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise OutputClosed from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def stdout_text():
    return GuardedOutput(sys.stdout)


def stdout_bytes():
    return GuardedOutput(sys.stdout.buffer)


def silence_closed_stdout() -> None:
    """After ``OutputClosed``: point stdout at /dev/null, so that Python's final flush at exit does not
    complain about the pipe (and turn the exit code into 120)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a test's in-memory stdout
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll reports an error on it): tells a
    ``BrokenPipeError`` of an unguarded write to stdout from one of a broker's connection."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # no events asked: errors and hang-ups are always reported
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # a test's in-memory stdout; no poll on this platform
        return False


def report(tool: str, text: str) -> None:
    print(f"minibroker {tool}: {text}", file=sys.stderr)


def failure_exit(tool: str, args, error: Exception) -> int:
    """Report ``error`` on one line; the exit code: 2 for usage and client-config errors, 1 else."""
    if isinstance(error, UsageError):
        action = getattr(args, "action", None)
        report(f"{tool} {action}" if action else tool, str(error))
        return EXIT_USAGE
    text = failure_text(args.bootstrap_server, error) if isinstance(error, OSError) else str(error)
    report(tool, text)
    return EXIT_USAGE if isinstance(error, ClientConfigError) else EXIT_ERROR


def run_tool(tool: str, args, work, check_usage=None) -> int:
    """``work(security, deadline)``'s exit code, with every failure reported as above. ``check_usage(args)``
    runs first, before any connection."""
    try:
        if check_usage is not None:
            check_usage(args)
        security = read_client_config(args.command_config)
        return work(security, Deadline(args.timeout))
    except (ClientConfigError, UsageError, ToolError, OSError) as e:
        if isinstance(e, BrokenPipeError) and stdout_reader_gone():
            raise OutputClosed from None  # a write to stdout that no GuardedOutput wrapped
        return failure_exit(tool, args, e)


def run_admin(tool: str, admin_class, actions: dict, args, out=None, check_usage=None) -> int:
    """Run ``actions[args.action](admin, args, out)`` on an ``admin_class`` connection (topics,
    transactions, groups)."""
    out = out or stdout_text()

    def work(security, deadline) -> int:
        with admin_class(args.bootstrap_server, timeout=args.timeout, security=security,
                         deadline=deadline) as admin:
            return actions[args.action](admin, args, out)

    return run_tool(tool, args, work, check_usage)


def add_common_arguments(parser) -> None:
    """``--bootstrap-server`` and ``--timeout``, as every tool that talks to a broker takes them."""
    parser.add_argument("--bootstrap-server",
                        default=os.environ.get("MINIBROKER_BOOTSTRAP_SERVER", "127.0.0.1:9092"),
                        metavar="HOST:PORT", help="broker to talk to (env MINIBROKER_BOOTSTRAP_SERVER)")
    parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"bound on the whole command (default {DEFAULT_TIMEOUT_S:g})")


def positive_seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the timeout must be above 0")
    return value


def parse_client_properties(items: list[str] | None, known: dict, role: str) -> dict[str, object]:
    """``key=value`` settings of a tool's client (``--producer-property``, ``--consumer-property``), each
    among ``known`` (Kafka's name -> converter; kafka-python's spelling with underscores read as dots),
    converted. Raises ValueError naming the item; ``role`` ("producer", "consumer") says whose."""
    out: dict[str, object] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip().replace("_", ".")
        if not sep or not key:
            raise ValueError(f"property {item!r} is not KEY=VALUE")
        if key not in known:
            raise ValueError(f"property {key} is not one this {role} reads ({', '.join(known)})")
        try:
            out[key] = known[key](text.strip())
        except ValueError:
            raise ValueError(f"property {item!r}: {key} is a number") from None
    return out
