"""pytest plugin: a running minibroker as a fixture, registered through the ``pytest11`` entry point.

PYTEST_DONT_REWRITE (this module's asserts are its own business, not pytest's to rewrite).

Fixtures:
- ``minibroker`` (session scope): one broker for the whole run, with ``.bootstrap_servers``,
  ``.create_topic(name, partitions=1, config=None)``, ``.delete_topic``, ``.produce``, ``.consume``,
  ``.restart()``, ``.data_dir``, ``.start_seconds``, ``.inject(**rule)`` (fault injection, docs/testing.md;
  the fixtures set ``fault.injection.enable=true``) (see ``minibroker.testing.BrokerRunner``);
- ``minibroker_factory`` (function scope): ``minibroker_factory(overrides=None, mode=None)`` starts
  more brokers with their own config; all are stopped and their data removed after the test. Security
  keywords pass through to ``BrokerRunner``: ``minibroker_factory(security_protocol="SASL_SSL",
  sasl_mechanism="SCRAM-SHA-256")`` starts a broker with throwaway certificates and SASL users, and
  ``broker.client_config("confluent-kafka")`` (or "kafka-python", "aiokafka") gives matching settings.

Options (command line, or the ini keys of the same name with ``_`` for ``-``):
- ``--minibroker-mode thread|process``: in-process on a background event-loop thread (default,
  fastest), or a subprocess (for tests that kill or restart it);
- ``--minibroker-override key=value`` (repeatable; ini ``minibroker_overrides``, one per line).
The broker's log is attached to the report of a failing test that used one. With the overrides
``ui.enable=true`` and ``metrics.port=0``, the live view's URL (``BrokerRunner.ui_url``, docs/ui.md) is
logged at set-up (``minibroker.testing``, WARNING: shown with a failing test and by ``--pdb``).
A process-mode broker stops when the pytest process (or pytest-xdist worker) that started it ends,
kill -9 included (``minibroker.testing.tied_to_this_process``).

What registering costs: nothing of minibroker is imported until a fixture is used, and the broker's
modules are not put under pytest's assertion rewriting. pytest marks every top-level package of a
distribution with a ``pytest11`` entry point for rewriting, which for ``minibroker`` would mean parsing,
rewriting and compiling the whole broker from source at a fixture's first use (about 0.8 s); the
plugin's ``pytest_addoption`` takes the mark off again (``unmark_for_rewrite``). Users' own test files
and conftests are rewritten as always.

kafka-python is not imported either. If a test (or anything else) imports it, the two
DeprecationWarnings kafka-python 3.0 raises while loading its protocol schemas on Python 3.11 and 3.12
(``importlib.resources.read_text``/``open_text``, once per message type: over 200) are silenced for that
import alone (``QuietKafkaImport``), so that ``-W error::DeprecationWarning`` runs pass.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import time
import warnings

import pytest

_LOG_SECTION = "minibroker log"
_PACKAGE = "minibroker"


def pytest_addoption(parser, pluginmanager):
    unmark_for_rewrite(pluginmanager, _PACKAGE)
    QuietKafkaImport.install()
    group = parser.getgroup("minibroker")
    group.addoption("--minibroker-mode", choices=("thread", "process"), default=None,
                    help="run the minibroker fixture in-process (thread, default) or as a subprocess")
    group.addoption("--minibroker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config override for the minibroker fixtures (repeatable)")
    parser.addini("minibroker_mode", "thread or process", default="thread")
    parser.addini("minibroker_overrides", "broker config overrides, KEY=VALUE per line", type="linelist",
                  default=[])


def unmark_for_rewrite(pluginmanager, package: str) -> bool:
    """Take ``package`` (marked because its distribution registers a pytest plugin) off the assertion
    rewriting hook's list. The hook keeps its marks in ``_must_rewrite`` (a set of names) and caches each
    module's verdict in ``_marked_for_rewrite_cache``; both have been there since pytest 5. Modules
    already imported (this one, the package's ``__init__``) stay as they are. Returns whether the mark was
    taken off (False under ``--assert=plain``, where there is no hook, or with another pytest)."""
    hook = getattr(pluginmanager, "rewrite_hook", None)
    marks = getattr(hook, "_must_rewrite", None)
    if not isinstance(marks, set) or package not in marks:
        return False
    marks.discard(package)
    cache = getattr(hook, "_marked_for_rewrite_cache", None)
    if isinstance(cache, dict):
        for name in [n for n in cache if n == package or n.startswith(package + ".")]:
            del cache[name]
    return True


# kafka-python 3.0's protocol schemas are loaded on import by kafka/protocol/schemas/load_json.py with
# importlib.resources.read_text, which warns twice per schema on Python 3.11 and 3.12 (read_text, and
# the open_text it calls). Only these two messages are silenced, and only during that import.
_KAFKA_IMPORT_WARNINGS = (r"read_text is deprecated\. Use files\(\) instead",
                          r"open_text is deprecated\. Use files\(\) instead")


class QuietKafkaImport(importlib.abc.MetaPathFinder):
    """A finder for the top-level ``kafka`` package alone: it finds it as Python would and runs its import
    (the whole of kafka-python's import, submodules included) with ``_KAFKA_IMPORT_WARNINGS`` ignored.
    Nothing happens until something imports kafka; without kafka-python installed, nothing at all."""

    @classmethod
    def install(cls) -> None:
        if "kafka" not in sys.modules and not any(isinstance(f, cls) for f in sys.meta_path):
            sys.meta_path.insert(0, cls())  # before the path finder, which would find kafka first

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "kafka":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    """``loader``, with its module's execution under the warning filters above."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # resource readers, get_data, ...: the real loader's
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        with warnings.catch_warnings():
            for message in _KAFKA_IMPORT_WARNINGS:
                warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
            self._loader.exec_module(module)


def _settings(config) -> tuple[str, dict[str, str]]:
    mode = config.getoption("--minibroker-mode") or config.getini("minibroker_mode") or "thread"
    overrides: dict[str, str] = {}
    for item in list(config.getini("minibroker_overrides")) + list(config.getoption("--minibroker-override")):
        key, sep, value = item.partition("=")
        if not sep:
            raise pytest.UsageError(f"minibroker override {item!r} is not KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return mode, overrides


def _started(config, make, keep: list):
    """``make(BrokerRunner)``'s runner, kept in ``keep`` (for clean-up), registered for log reports and
    started; its ``start_seconds`` is the whole setup: importing the broker, its temporary directory,
    starting it."""
    began = time.perf_counter()
    from minibroker.testing import BrokerRunner

    runner = make(BrokerRunner)
    keep.append(runner)
    config.stash.setdefault(_RUNNERS, []).append(runner)
    runner.start()
    runner.start_seconds = time.perf_counter() - began
    if runner.ui_url:  # ui.enable=true: shown with a failing test's captured log, and by --pdb
        import logging

        logging.getLogger("minibroker.testing").warning("live view of the broker at %s: %s",
                                                        runner.bootstrap_servers, runner.ui_url)
    return runner


@pytest.fixture(scope="session")
def minibroker(request):
    """A broker running for the whole test session."""
    mode, overrides = _settings(request.config)
    kept: list = []
    try:
        runner = _started(request.config, lambda cls: cls(with_faults(overrides), mode=mode), kept)
        yield runner
    finally:
        for runner in kept:
            runner.cleanup()
            _forget(request.config, runner)


@pytest.fixture
def minibroker_factory(request):
    """Start brokers with custom config: ``minibroker_factory({"num.partitions": "3"})``."""
    mode_default, base = _settings(request.config)
    started: list = []

    def start(overrides: dict[str, str] | None = None, *, mode: str | None = None,
              data_dir: str | None = None, **security):
        runner = _started(request.config, lambda cls: cls(with_faults({**base, **(overrides or {})}),
                                                          mode=mode or mode_default, data_dir=data_dir,
                                                          **security), started)
        return runner

    yield start
    for runner in started:
        runner.cleanup()
        _forget(request.config, runner)


_RUNNERS = pytest.StashKey[list]()


def with_faults(overrides: dict[str, str]) -> dict[str, str]:
    """The fixtures' brokers take fault rules (``broker.inject(...)``, minibroker/server/faults.py): with
    ``fault.injection.enable=true`` added, unless the overrides set it, or set listeners beyond loopback
    (where the broker would refuse it)."""
    if "fault.injection.enable" in overrides:
        return overrides
    listeners = overrides.get("listeners")
    if listeners is not None:
        from minibroker.server.faults import loopback_only

        hosts = [endpoint.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
                 for endpoint in listeners.split(",")]
        if not loopback_only(hosts):
            return overrides
    return {"fault.injection.enable": "true", **overrides}


def _forget(config, runner) -> None:
    runners = config.stash.get(_RUNNERS, [])
    if runner in runners:
        runners.remove(runner)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        for runner in item.config.stash.get(_RUNNERS, []):
            text = runner.log_text()
            if text:
                report.sections.append((f"{_LOG_SECTION} ({runner.bootstrap_servers})", text[-20000:]))
