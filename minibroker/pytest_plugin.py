"""pytest plugin: a running minibroker as a fixture, registered through the ``pytest11`` entry point.

Fixtures:
- ``minibroker`` (session scope): one broker for the whole run, with ``.bootstrap_servers``,
  ``.create_topic(name, partitions=1, config=None)``, ``.delete_topic``, ``.produce``, ``.consume``,
  ``.restart()``, ``.data_dir`` (see ``minibroker.testing.BrokerRunner``);
- ``minibroker_factory`` (function scope): ``minibroker_factory(overrides=None, mode=None)`` starts
  more brokers with their own config; all are stopped and their data removed after the test. Security
  keywords pass through to ``BrokerRunner``: ``minibroker_factory(security_protocol="SASL_SSL",
  sasl_mechanism="SCRAM-SHA-256")`` starts a broker with throwaway certificates and SASL users, and
  ``broker.client_config("confluent-kafka")`` (or "kafka-python", "aiokafka") gives matching settings.

Options (command line, or the ini keys of the same name with ``_`` for ``-``):
- ``--minibroker-mode thread|process``: in-process on a background event-loop thread (default,
  fastest), or a subprocess (for tests that kill or restart it);
- ``--minibroker-override key=value`` (repeatable; ini ``minibroker_overrides``, one per line).
The broker's log is attached to the report of a failing test that used one. A process-mode broker
stops when the pytest process (or pytest-xdist worker) that started it ends, kill -9 included
(``minibroker.testing.tied_to_this_process``).

kafka-python (which the fixtures' helpers use) is imported when pytest starts, with the
DeprecationWarnings it raises on import silenced: kafka-python 3.0 reads its protocol schemas
with ``importlib.resources.read_text``, deprecated since Python 3.11, once per message type
(over 200 warnings, from code neither minibroker nor its users can change).
"""

from __future__ import annotations

import warnings

import pytest

from minibroker.testing import BrokerRunner

_LOG_SECTION = "minibroker log"


def pytest_addoption(parser):
    group = parser.getgroup("minibroker")
    group.addoption("--minibroker-mode", choices=("thread", "process"), default=None,
                    help="run the minibroker fixture in-process (thread, default) or as a subprocess")
    group.addoption("--minibroker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config override for the minibroker fixtures (repeatable)")
    parser.addini("minibroker_mode", "thread or process", default="thread")
    parser.addini("minibroker_overrides", "broker config overrides, KEY=VALUE per line", type="linelist",
                  default=[])


def pytest_configure(config):
    _import_kafka_python_quietly()


# kafka-python 3.0's protocol schemas are loaded on import by kafka/protocol/schemas/load_json.py with
# importlib.resources.read_text, which warns twice per schema on Python 3.11 and 3.12 (read_text, and
# the open_text it calls). Only these two messages are silenced, and only for that import.
_KAFKA_IMPORT_WARNINGS = (r"read_text is deprecated\. Use files\(\) instead",
                          r"open_text is deprecated\. Use files\(\) instead")


def _import_kafka_python_quietly() -> None:
    with warnings.catch_warnings():
        for message in _KAFKA_IMPORT_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
        try:
            import kafka  # noqa: F401
        except ImportError:  # a trimmed install: the fixtures' helpers say so when used
            pass


def _settings(config) -> tuple[str, dict[str, str]]:
    mode = config.getoption("--minibroker-mode") or config.getini("minibroker_mode") or "thread"
    overrides: dict[str, str] = {}
    for item in list(config.getini("minibroker_overrides")) + list(config.getoption("--minibroker-override")):
        key, sep, value = item.partition("=")
        if not sep:
            raise pytest.UsageError(f"minibroker override {item!r} is not KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return mode, overrides


@pytest.fixture(scope="session")
def minibroker(request):
    """A broker running for the whole test session."""
    mode, overrides = _settings(request.config)
    runner = BrokerRunner(overrides, mode=mode)
    runner.start()
    request.config.stash.setdefault(_RUNNERS, []).append(runner)
    yield runner
    runner.cleanup()
    request.config.stash[_RUNNERS].remove(runner)


@pytest.fixture
def minibroker_factory(request):
    """Start brokers with custom config: ``minibroker_factory({"num.partitions": "3"})``."""
    mode_default, base = _settings(request.config)
    started: list[BrokerRunner] = []

    def start(overrides: dict[str, str] | None = None, *, mode: str | None = None,
              data_dir: str | None = None, **security) -> BrokerRunner:
        runner = BrokerRunner({**base, **(overrides or {})}, mode=mode or mode_default, data_dir=data_dir,
                              **security)
        started.append(runner)
        request.config.stash.setdefault(_RUNNERS, []).append(runner)
        return runner.start()

    yield start
    for runner in started:
        runner.cleanup()
        request.config.stash[_RUNNERS].remove(runner)


_RUNNERS = pytest.StashKey[list]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        for runner in item.config.stash.get(_RUNNERS, []):
            text = runner.log_text()
            if text:
                report.sections.append((f"{_LOG_SECTION} ({runner.bootstrap_servers})", text[-20000:]))
