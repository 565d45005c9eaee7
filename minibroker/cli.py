"""The ``minibroker`` command: ``serve`` and the console tools.

Every subcommand is a function of parsed arguments; ``main(argv=None)`` is testable.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # argparse is imported to parse a command line serve_arguments() does not take
    import argparse


class JsonLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        import json

        out = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


def log_config_banner(config, config_file: str | None) -> None:
    """The startup banner at INFO: where config came from, then each non-default setting with its
    source, one per line. At DEBUG also every effective key, one per line (passwords masked)."""
    from minibroker import __version__

    log = logging.getLogger("minibroker.config")
    if not log.isEnabledFor(logging.INFO):
        return
    log.info("minibroker %s starting; config file: %s", __version__,
             config_file or "none (embedded defaults)")
    for key, value in sorted(config.non_default().items()):
        log.info("  %s = %s  (from %s)", key, value, config.source_of(key))
    if log.isEnabledFor(logging.DEBUG):  # ~600 keys: building them costs time nobody wants at INFO
        log.debug("effective config (every key):")
        for key, value in sorted(config.effective().items()):
            log.debug("  %s = %s", key, value)


def log_record_layer() -> None:
    """Once at start, at INFO: which record layer appends run on, the C accelerator or pure Python,
    and why (docs/records.md, "The C accelerator")."""
    from minibroker.records import accelerator

    logging.getLogger("minibroker.records").info("record layer: %s", accelerator.describe())


def raise_open_file_limit() -> None:
    """Once at start, as the JVM does for Kafka (``-XX:+MaxFDLimit``, on by default): the soft limit
    on open files (RLIMIT_NOFILE) up to the hard limit, since every log segment keeps its ``.log``
    open (docs/storage.md, "File descriptors"). Logged at INFO; never fails the start. Only for
    ``serve``: an in-process broker leaves its host process's limits alone."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return
    log = logging.getLogger("minibroker.broker")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY and sys.platform == "darwin":
        target = 10240  # macOS refuses more than OPEN_MAX for an unlimited hard limit, as the JVM knows
    if soft == resource.RLIM_INFINITY or (target != resource.RLIM_INFINITY and target <= soft):
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        log.info("open files limit (RLIMIT_NOFILE) stays at %d: raising it to %d was refused: %s",
                 soft, target, exc)
        return
    log.info("raised the open files limit (RLIMIT_NOFILE) from %d to %s (hard limit %s)", soft,
             *("unlimited" if n == resource.RLIM_INFINITY else n for n in (target, hard)))


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    """argparse ``type`` of ``--log-level``: one of LOG_LEVELS, any case; anything else is an error
    (also when it comes from MINIBROKER_LOG_LEVEL, the option's default)."""
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        env = os.environ.get("MINIBROKER_LOG_LEVEL")
        where = " (from MINIBROKER_LOG_LEVEL)" if env is not None and env == text else ""
        import argparse

        raise argparse.ArgumentTypeError(f"invalid log level {text!r}{where}: choose from "
                                         f"{', '.join(LOG_LEVELS)} (any case)")
    return level


def timeout_seconds(text: str) -> float:
    """argparse ``type`` of healthcheck's ``--timeout``: the tools' own check, imported only when used (the
    parser is also ``serve``'s, whose start-up does not need the tools' modules)."""
    from minibroker.tools.command import positive_seconds

    return positive_seconds(text)


def choose_event_loop(name: str) -> None:
    """``auto``: uvloop when importable; ``asyncio``: the default loop; ``uvloop``: required."""
    if name == "asyncio":
        return
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise SystemExit("minibroker: --loop uvloop but uvloop is not installed") from None
        return
    import asyncio

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def run_broker(config) -> None:
    import asyncio

    from minibroker.server.broker import Broker

    broker = Broker(config)
    if config["ui.enable"]:  # the live view: imported only when asked for (docs/ui.md)
        from minibroker.tools.live_view import attach

        attach(broker)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    await broker.start()
    # A server process of its own (not the in-process test fixture, whose host process is the
    # user's): start-up objects move out of the collector's sight, and the young generation is
    # collected every 50k allocations instead of 700, which request handling reaches constantly.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    gc.enable()  # paused by cmd_serve for the start
    try:
        await stop.wait()
    finally:
        logging.getLogger("minibroker.broker").info("shutting down")
        await broker.stop()


def cmd_serve(args) -> int:
    # Imports and the config table make objects that live as long as the process, and no garbage:
    # the collector's 25-30 young-generation passes over them took 5-9 ms of the start (docs/
    # operations.md). run_broker freezes what the start made and turns the collector back on; a start
    # that fails turns it back on here.
    gc.disable()
    try:
        return _serve(args)
    finally:
        gc.enable()


def _serve(args) -> int:
    from minibroker.config import ConfigError, load_config

    setup_logging(args.log_level, args.log_format)
    if "MINIBROKER_PARENT_PIPE_FD" in os.environ:  # a test's broker: stop when its parent is gone
        from minibroker.server.parent_watch import watch_pipe_from_environment

        watch_pipe_from_environment()
    try:
        config = load_config(args.config_file, args.override or [], os.environ)
    except (ConfigError, OSError) as e:
        print(f"minibroker: configuration error: {e}", file=sys.stderr)
        return 2
    log_config_banner(config, args.config_file)
    log_record_layer()
    raise_open_file_limit()
    choose_event_loop(args.loop)
    import asyncio

    from minibroker.storage.dir_lock import LogDirLockedError

    try:
        asyncio.run(run_broker(config))
    except (OSError, LogDirLockedError, ConfigError) as e:  # a port in use, a locked log dir, fault.injection
        print(f"minibroker: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_apis(args) -> int:
    from minibroker.handlers import load_handlers
    from minibroker.handlers.registry import HANDLERS

    load_handlers()
    rows = sorted(HANDLERS.values(), key=lambda h: h.api_key)
    if args.markdown:
        print("| API | key | versions |")
        print("|---|---|---|")
        for h in rows:
            note = "" if h.advertised else " (answered, not advertised)"
            print(f"| {h.name} | {h.api_key} | {h.min_version}-{h.max_version}{note} |")
    else:
        for h in rows:
            note = "" if h.advertised else "  (answered, not advertised)"
            print(f"{h.name:<28} {h.api_key:>3}  v{h.min_version}-v{h.max_version}{note}")
    return 0


def cmd_dump_log(args) -> int:
    from minibroker.tools.dump_log import run

    return run(args.rest)  # parses its own options (kafka-dump-log.sh's); quiet on a closed pipe


def cmd_healthcheck(args) -> int:
    """Exit 0 when a broker answers ApiVersions at ``--bootstrap-server`` within the timeout."""
    from minibroker.tools.client_config import ClientConfigError, read_client_config
    from minibroker.tools.wire import api_versions_probe, failure_text, split_host_port

    try:
        host, port = split_host_port(args.bootstrap_server)
    except ValueError:
        print(f"minibroker healthcheck: --bootstrap-server {args.bootstrap_server!r} is not HOST:PORT",
              file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.timeout
    try:  # with --command-config: through TLS and SASL authentication, as a client would
        security = read_client_config(args.command_config)
        ok = api_versions_probe(host, port, timeout=args.timeout, security=security)
    except ClientConfigError as e:
        print(f"unhealthy: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"unhealthy: {failure_text(f'{host}:{port}', e)}", file=sys.stderr)
        return 1
    if not ok:
        print("unhealthy: unexpected ApiVersions answer", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"healthy ({(args.timeout - (deadline - time.monotonic())) * 1000:.1f} ms)")
    return 0


# serve's options (each takes a value), and the allowed values of those that take a choice
SERVE_FLAGS = ("--override", "--log-level", "--log-format", "--loop")
SERVE_CHOICES = {"log_format": ("text", "json"), "loop": ("auto", "asyncio", "uvloop")}


def serve_defaults() -> dict[str, str]:
    """serve's option defaults, from the environment (its parser's and serve_arguments')."""
    return {"log_level": os.environ.get("MINIBROKER_LOG_LEVEL", "INFO"),
            "log_format": os.environ.get("MINIBROKER_LOG_FORMAT", "text"),
            "loop": os.environ.get("MINIBROKER_LOOP", "auto")}


def build_parser(console_tools: bool = True, client_config: bool = True,
                 only_tool: str | None = None) -> argparse.ArgumentParser:
    import argparse

    from minibroker import __version__

    defaults = serve_defaults()
    ap = argparse.ArgumentParser(prog="minibroker", description="A single-node Kafka-compatible broker.")
    ap.add_argument("--version", action="version", version=f"minibroker {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("config_file", nargs="?", help="a server.properties file (optional)")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set a config property (repeatable; wins over file and environment)")
    serve.add_argument("--log-level", type=log_level, default=defaults["log_level"],
                       help="DEBUG, INFO, WARNING, ERROR or CRITICAL, any case (env MINIBROKER_LOG_LEVEL)")
    serve.add_argument("--log-format", choices=SERVE_CHOICES["log_format"], default=defaults["log_format"],
                       help="log line format (env MINIBROKER_LOG_FORMAT)")
    serve.add_argument("--loop", choices=SERVE_CHOICES["loop"], default=defaults["loop"],
                       help="event loop: uvloop when importable (auto), or force one (env MINIBROKER_LOOP)")
    serve.set_defaults(func=cmd_serve)

    apis = sub.add_parser("apis", help="list the served API keys and versions")
    apis.add_argument("--markdown", action="store_true", help="as a markdown table")
    apis.set_defaults(func=cmd_apis)

    # No option is this parser's (prefix_chars matches none): every argument, -h included, goes to
    # minibroker.tools.dump_log, whose own parser takes options and files in any order.
    dump = sub.add_parser("dump-log", help="print .log/.index/.timeindex files like kafka-dump-log.sh",
                          add_help=False, prefix_chars="\0")
    dump.add_argument("rest", nargs=argparse.REMAINDER)
    dump.set_defaults(func=cmd_dump_log)

    health = sub.add_parser("healthcheck", help="exit 0 if a broker answers ApiVersions",
                            description="Exit 0 when a broker answers an ApiVersions request (after the TLS "
                                        "handshake and SASL login --command-config asks for); otherwise "
                                        "print why on stderr and exit 1.")
    health.add_argument("--bootstrap-server",
                        default=os.environ.get("MINIBROKER_BOOTSTRAP_SERVER", "127.0.0.1:9092"),
                        metavar="HOST:PORT", help="broker to probe (env MINIBROKER_BOOTSTRAP_SERVER; "
                                                  "default 127.0.0.1:9092)")
    health.add_argument("--timeout", type=timeout_seconds, default=2.0, metavar="SECONDS",
                        help="bound on the whole probe: connecting, the TLS handshake, SASL and the answer "
                             "(default 2)")
    health.add_argument("--quiet", action="store_true", help="print nothing when healthy")
    health.set_defaults(func=cmd_healthcheck)

    if client_config:  # ``serve`` goes without the client config module: start-up spent for nothing
        from minibroker.tools.client_config import add_command_config_argument

        add_command_config_argument(health)
    if console_tools:  # ``serve`` and ``healthcheck`` skip them, for the same reason
        add_console_tools(sub, only_tool)
    return ap


# The console tools, in the order ``minibroker --help`` lists them: each module adds its own parser and
# ``run``. The last three never talk to a broker's Kafka port (explain reads a partition's files, inject
# the broker's /faults HTTP API, certs writes files): no common arguments.
CONSOLE_TOOLS = (
    "scram", "topics", "produce", "consume", "groups", "transactions", "explain", "inject", "certs",
)


def add_console_tools(sub, only: str | None = None) -> None:
    """Every tool's parser, or only the one a command line names: a tool's start does not import the
    other eight."""
    import argparse

    from minibroker.tools.client_config import add_command_config_argument
    from minibroker.tools.command import add_common_arguments

    common = argparse.ArgumentParser(add_help=False)
    add_common_arguments(common)
    with_config = argparse.ArgumentParser(add_help=False, parents=[common])
    add_command_config_argument(with_config)
    for name in CONSOLE_TOOLS if only is None else (only,):
        tool = _console_tool(name)
        if name == "scram":
            tool.add_parser(sub, common)  # adds its own --command-config
        elif name in ("explain", "inject", "certs"):
            tool.add_parser(sub)
        else:
            tool.add_parser(sub, with_config)


def _console_tool(name: str):
    match name:
        case "scram":
            from minibroker.tools import scram as tool
        case "topics":
            from minibroker.tools import topics as tool
        case "produce":
            from minibroker.tools import produce as tool
        case "consume":
            from minibroker.tools import consume as tool
        case "groups":
            from minibroker.tools import groups as tool
        case "transactions":
            from minibroker.tools import transactions as tool
        case "explain":
            from minibroker.tools import explain as tool
        case "inject":
            from minibroker.tools import inject as tool
        case "certs":
            from minibroker.tools import certs as tool
    return tool


def serve_arguments(argv: list[str]) -> SimpleNamespace | None:
    """A ``serve`` command line of the plain form, ``serve [FILE] [--override K=V]... [--log-level L]
    [--log-format F] [--loop L]`` (``--option=value`` too), read as serve's parser reads it; None for
    anything else (help, an error, an abbreviation, a value starting with ``-``), which parse_arguments
    leaves to argparse and its messages: a broker starts without importing argparse (0.4 MB of RSS)."""
    if not argv or argv[0] != "serve":
        return None
    values: dict[str, object] = {"config_file": None, "override": None, **serve_defaults()}
    i = 1
    while i < len(argv):
        word = argv[i]
        if not word:
            return None
        if not word.startswith("-"):
            if values["config_file"] is not None:
                return None
            values["config_file"] = word
            i += 1
            continue
        flag, has_value, value = word.partition("=")
        if flag not in SERVE_FLAGS:
            return None
        if not has_value:
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        if not value or (not has_value and value.startswith("-")):
            return None
        i += 1
        dest = flag[2:].replace("-", "_")
        if dest == "override":
            values["override"] = [*(values["override"] or ()), value]
        else:
            values[dest] = value
    if values["log_level"].strip().upper() not in LOG_LEVELS:  # given, or from the environment
        return None
    values["log_level"] = values["log_level"].strip().upper()
    if any(values[dest] not in choices for dest, choices in SERVE_CHOICES.items()):
        return None
    return SimpleNamespace(command="serve", **values, func=cmd_serve)


def parse_arguments(argv: list[str]) -> argparse.Namespace | SimpleNamespace:
    """argparse reports an unknown option with the usage of the parser that ran last, the top-level one:
    report it with the usage of the subcommand it was given to instead (``serve --bogus``)."""
    plain_serve = serve_arguments(argv)
    if plain_serve is not None:
        return plain_serve
    command = argv[0] if argv else None
    parser = build_parser(console_tools=command not in ("serve", "healthcheck", "apis", "dump-log"),
                          client_config=command != "serve",
                          only_tool=command if command in CONSOLE_TOOLS else None)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        subcommand_parser(parser, argv).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def subcommand_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The deepest subcommand parser ``argv`` names (``groups reset-offsets`` -> that one's parser)."""
    import argparse

    for word in argv:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers or word not in subparsers[0].choices:
            continue
        parser = subparsers[0].choices[word]
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_arguments(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C where a tool has no handling of its own: no traceback
        print(f"minibroker {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (| head) by a command that writes it unguarded
        pass
    except Exception as e:
        from minibroker.tools.command import OutputClosed

        if not isinstance(e, OutputClosed):
            raise
    from minibroker.tools.command import silence_closed_stdout

    silence_closed_stdout()  # quiet, exit 0, as head expects (minibroker/tools/command.py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
