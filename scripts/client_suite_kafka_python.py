#!/usr/bin/env python3
"""Run kafka-python's own integration suite against minibroker and compare with the expectations.

kafka-python's sdist on PyPI ships its integration tests (``test/integration``), which can run
against an external broker: ``KAFKA_URI=PLAINTEXT://host:port`` plus ``KAFKA_VERSION``. This
script:

1. downloads the sdist of the pinned version (``KAFKA_PYTHON_VERSION``, checked against
   ``SDIST_SHA256``) with pip, once, into ``${XDG_CACHE_HOME:-~/.cache}/minibroker/client-suites``;
2. unpacks it into a fresh temporary directory;
3. starts minibroker (``python -m minibroker serve``, a free port, a fresh data directory) with the
   settings of the suite's own broker template (``BROKER_OVERRIDES``);
4. runs ``python -m pytest test/integration`` there, so the suite tests the client code it ships
   with, recording each test's outcome through this module used as a pytest plugin;
5. stops the broker, then runs the SSL and SASL test files (``OWN_BROKER_FILES``), which start brokers
   of their own whatever ``KAFKA_URI`` says, with scripts/client_suite_own_brokers.py making the
   suite's ``KafkaFixture`` start minibroker with the transport and SASL mechanism each test asks for;
6. compares every outcome with ``tests/client_suites/kafka-python-<version>
   .expected``: a test not listed there must pass; a listed one must end as listed.

Exit status 0 when every outcome is as expected; 1 when a test newly fails, newly passes, or ends
otherwise than listed (the report says which and what to change); 2 when the suite could not run.

    python scripts/client_suite_kafka_python.py              # the whole suite, once
    python scripts/client_suite_kafka_python.py --runs 3     # three times, reporting flaky tests
    python scripts/client_suite_kafka_python.py -- -k admin  # pytest arguments after --

docs/testing.md ("kafka-python's own integration suite") says how to update the expectations.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The one place the suite's version is pinned. It should follow the kafka-python that pyproject.toml
# installs (kafka-python>=3.0,<4); the suite runs the client code of its own sdist, not the
# installed one, so the two may differ for a while without confusing the results.
KAFKA_PYTHON_VERSION = "3.0.12"
SDIST_SHA256 = "4ccda3616b9aa5c353d74a97f2770d6cd1b950890d77ab0e8890e09a48eeed65"
EXPECTATIONS = os.path.join(ROOT, "tests", "client_suites", f"kafka-python-{KAFKA_PYTHON_VERSION}.expected")

# The Kafka version the suite is told it talks to. kafka-python infers a broker's version from its
# ApiVersions answer; for minibroker's (DescribeLogDirs up to v5, ListOffsets up to v11, Produce up
# to v13, as Kafka 4.3 serves them) it infers 4.3 (DescribeLogDirs v5 is 4.3's marker), and the
# suite's test_kafka_version_infer checks that the inference equals KAFKA_VERSION. The suite also
# uses it to pick code paths (4.x: KRaft, no ZooKeeper) and to skip tests of APIs a version lacks.
KAFKA_VERSION = "4.3"

# Settings of the broker the suite would start itself: its template
# servers/resources/default/kafka.properties in the kafka-python repository (not in the sdist),
# rendered by test/integration/fixtures.py with broker_id=0, transport=PLAINTEXT, host=127.0.0.1,
# a free port, partitions=4, replicas=1 and, for Kafka >= 4.0, an authorizer allowing everyone.
# listeners and advertised.listeners (both PLAINTEXT://{host}:{port}) are added by broker_overrides().
# Left out: the CONTROLLER listener, controller.quorum.bootstrap.servers and controller.listener.names
# (minibroker has no separate controller listener), the SASL/SSL sections (empty for PLAINTEXT) and keys
# the template sets to Kafka's default (log.retention.*, log.segment.bytes, socket.*, num.*.threads).
# The authorizer is on, as in the template: every request of the suite goes through the ACL checks
# (User:ANONYMOUS, allowed wherever no ACL applies), and the ACL APIs are served.
BROKER_OVERRIDES = {
    "node.id": "0",  # node.id={broker_id}
    "process.roles": "broker,controller",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "4",  # num.partitions={partitions}
    "default.replication.factor": "1",  # default.replication.factor={replicas}
    "replica.lag.time.max.ms": "1000",
    "replica.socket.timeout.ms": "1000",
    "offsets.topic.replication.factor": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.cleaner.enable": "false",
    "offsets.commit.timeout.ms": "500",
    "offsets.topic.num.partitions": "2",
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def broker_overrides(port: int) -> dict[str, str]:
    """BROKER_OVERRIDES plus the listener on ``port``: the template sets both listeners and
    advertised.listeners (test_describe_configs_broker_resource_returns_configs checks that
    advertised.listeners comes from STATIC_BROKER_CONFIG), so the port is chosen before start-up,
    as the suite's fixture chooses it (a port the OS just handed out and released)."""
    listener = f"PLAINTEXT://127.0.0.1:{port}"
    return {"listeners": listener, "advertised.listeners": listener, **BROKER_OVERRIDES}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Test dependencies of the suite beyond pytest: its pyproject.toml's addopts pass --timeout, which
# needs pytest-timeout (also in minibroker's own [test] extra). Installed here when missing.
SUITE_REQUIREMENTS = {"pytest_timeout": "pytest-timeout==2.4.0"}

OUTCOMES = ("fail", "error", "skip", "deselect", "flaky")  # what an expectation line may say
PER_TEST_TIMEOUT = 120  # seconds, pytest-timeout; the suite's own setting is 300
SUITE_TIMEOUT = 600  # seconds for one whole run of the suite (about 25 s today)


# -- the pytest plugin: loaded into the suite's pytest with -p, records one JSON line per phase ----

def pytest_runtest_logreport(report):  # pragma: no cover - runs inside the suite's pytest
    path = os.environ.get("MINIBROKER_SUITE_OUTCOMES")
    if not path:
        return
    message = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    elif report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else report.longreprtext.strip().splitlines()[-1:]
        message = message if isinstance(message, str) else " ".join(message)
    line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "message": message[:2000], "duration": round(report.duration, 3),
            "details": report.longreprtext[-20000:] if report.failed else ""}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def pytest_configure(config):  # pragma: no cover - runs inside the suite's pytest
    # Stopped with SIGTERM (scripts/run-tests.sh stops its process group; run_pytest passes it on), the
    # suite's pytest tears its fixtures down as on Ctrl-C: brokers stopped, temporary directories removed
    from minibroker.testing import sigterm_as_keyboard_interrupt

    sigterm_as_keyboard_interrupt()
    apply_client_fixes()


def apply_client_fixes() -> None:
    """The client races this script fixes in the kafka-python it drives (tests/client_fixes.py applies
    the same to minibroker's own suite), each explained at its function."""
    import kafka.cluster
    import kafka.coordinator.base
    import kafka.coordinator.consumer

    patch_stale_metadata_response(kafka.cluster.ClusterMetadata)
    patch_join_completed_between_polls(kafka.coordinator.base.BaseCoordinator,
                                       kafka.coordinator.consumer.ConsumerCoordinator)


def patch_stale_metadata_response(cluster_class) -> None:
    """Fix, in the suite's own client code, kafka-python's lost subscription update (the Java client's
    KAFKA-7831, still open in kafka-python 3.0.12: see "TODO: handle future when old metadata request is
    currently in-flight" in kafka/cluster.py).

    KafkaConsumer(topic) bootstraps on its IO thread while the caller's thread subscribes. When the
    bootstrap's Metadata request is built before subscribe() runs, it asks for no topics; subscribe()
    sets the topics and flags an update, and the answer to the older request then clears that flag
    (``_need_update = len(_retry_topics) > 0``). The consumer holds no partitions and the next refresh
    is metadata.max.age.ms (5 minutes) away: every consumer without a group in the suite can sit
    idle for its whole test. Seen once in CI (test_kafka_consumer_max_bytes_simple: no record in 90
    polls; minibroker's log shows the consumer's one Metadata request and nothing after) and about
    one consumer in 150 with three busy cores; the same client fails the same way against Apache
    Kafka, which answers an empty topic list with no topics too.

    The fix remembers which topic set a request asked for and, when the answer is for another set,
    flags a new update, as the Java client does with its request version. Attribute names are
    checked first, so a kafka-python that reorganizes this code fails loudly here, not silently."""
    needed = ("metadata_request", "update_metadata", "request_update")
    missing = [name for name in needed if not hasattr(cluster_class, name)]
    if missing:
        raise RuntimeError(f"cannot patch kafka-python's ClusterMetadata: no {', '.join(missing)}")
    if "_minibroker_unpatched" in vars(cluster_class):
        return  # patched already (a subclass of a patched class is patched through it)
    original_request = cluster_class.metadata_request
    original_update = cluster_class.update_metadata

    def wanted(cluster):
        return cluster.need_all_topic_metadata, frozenset(cluster._topics)

    def metadata_request(self):
        self._minibroker_requested = wanted(self)
        return original_request(self)

    def update_metadata(self, metadata):
        requested = getattr(self, "_minibroker_requested", None)
        result = original_update(self, metadata)
        if requested is not None and requested != wanted(self):
            self.request_update()  # the subscription changed while this request was in flight
        return result

    cluster_class.metadata_request = metadata_request
    cluster_class.update_metadata = update_metadata
    cluster_class._minibroker_unpatched = {"metadata_request": original_request,
                                           "update_metadata": original_update}


def patch_join_completed_between_polls(base_class, consumer_class) -> None:
    """Fix, in the suite's own client code, kafka-python's lost group join (3.0.12): a join attempt that
    completes while no ``poll()`` awaits it is dropped, and the member stops heartbeating for good.

    ``poll()`` runs a join attempt (JoinGroup, then SyncGroup) as a task on the client's IO thread and
    awaits it for what is left of its timeout; a task still running then is left in flight for the next
    ``poll()``. Two things go wrong when the task finishes in between:

    - when the rejoin was asked for by the leader's own metadata check (``assignment_snapshot !=
      metadata_snapshot``: a topic got partitions, or its metadata came after the first assignment),
      the leader's assignment inside the task brings the snapshots level, ``need_rejoin()`` turns False,
      and no ``poll()`` looks at the finished task again: the new assignment is never taken up, and the
      heartbeats disabled for the join stay disabled. The coordinator expires the member after
      ``session.timeout.ms``; the consumer, hearing nothing, never rejoins and keeps its old partitions.
      Seen in CI as ``test_groups_clients.py::test_mixed_group`` (kafka-python's member "left group gm
      (session timeout expired)" after generation 2 and sent nothing more for 34 s);
    - otherwise the next ``poll()`` finds the task done and starts a new JoinGroup, discarding the
      finished one: a needless extra rebalance.

    The Java client keeps the pending join in ``rejoinNeededOrPending()`` and completes a finished one
    on the next poll; the fix does the same: a join task not yet taken up counts as a rejoin to finish,
    and a successful finished one completes the join (assignment taken up, heartbeats enabled) instead
    of being sent again. Attribute names are checked first, so a kafka-python that reorganizes this
    code fails loudly here, not silently."""
    needed = {base_class: ("join_group_async", "_on_join_complete_async", "_enable_heartbeat"),
              consumer_class: ("need_rejoin",)}
    missing = [name for cls, names in needed.items() for name in names if not hasattr(cls, name)]
    if missing:
        raise RuntimeError(f"cannot patch kafka-python's group coordinator: no {', '.join(missing)}")
    if "_minibroker_unpatched" in vars(consumer_class):
        return
    from kafka.structs import MemberState

    original_join = base_class.join_group_async
    original_need_rejoin = consumer_class.need_rejoin

    def need_rejoin(self):
        return getattr(self, "_join_task", None) is not None or original_need_rejoin(self)

    async def join_group_async(self, timeout_ms=None):
        task = getattr(self, "_join_task", None)
        if task is not None and task.is_done and task.succeeded() and not self._generation.is_lost():
            self._join_task = None  # finished while no poll() awaited it: take it up now
            with self._lock:
                self.rejoining = False
                self.rejoin_needed = False
                self.state = MemberState.STABLE
                self._enable_heartbeat()
            generation = self._generation
            await self._on_join_complete_async(generation.generation_id, generation.member_id,
                                               generation.protocol, task.value)
        return await original_join(self, timeout_ms)

    base_class.join_group_async = join_group_async
    consumer_class.need_rejoin = need_rejoin
    base_class._minibroker_unpatched = {"join_group_async": original_join}
    consumer_class._minibroker_unpatched = {"need_rejoin": original_need_rejoin}


def pytest_deselected(items):  # pragma: no cover - runs inside the suite's pytest
    path = os.environ.get("MINIBROKER_SUITE_OUTCOMES")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps({"nodeid": item.nodeid, "when": "collect", "outcome": "deselected",
                                "message": "", "duration": 0}) + "\n")


# -- expectations ------------------------------------------------------------------------------------

@dataclass
class Expectation:
    outcome: str
    reason: str
    line: int


def read_expectations(path: str) -> dict[str, Expectation]:
    """``<node id>  <outcome>  # <reason>`` per line; ``#`` starts a comment line."""
    expected: dict[str, Expectation] = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            text = raw.strip()
            if not text or text.startswith("#"):
                continue
            body, sep, reason = text.partition("  # ")
            fields = body.split()
            where = f"{os.path.relpath(path, ROOT)}:{number}"
            if len(fields) != 2 or not sep or not reason.strip():
                raise SystemExit(f"{where}: expected '<node id>  <outcome>  # <reason>', got: {text}")
            nodeid, outcome = fields
            if outcome not in OUTCOMES:
                raise SystemExit(f"{where}: outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
            if outcome == "flaky" and not reason.strip().startswith("flaky:"):
                raise SystemExit(f"{where}: a flaky test's reason starts with 'flaky:'")
            if nodeid in expected:
                raise SystemExit(f"{where}: {nodeid} is listed twice")
            expected[nodeid] = Expectation(outcome, reason.strip(), number)
    return expected


# -- getting and preparing the suite ----------------------------------------------------------------

def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "minibroker", "client-suites")


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist() -> str:
    """The pinned sdist, from the cache or from PyPI through pip (hash-checked either way)."""
    directory = cache_dir()
    path = os.path.join(directory, f"kafka_python-{KAFKA_PYTHON_VERSION}.tar.gz")
    if os.path.exists(path) and sha256(path) == SDIST_SHA256:
        return path
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        requirements = os.path.join(tmp, "requirements.txt")
        with open(requirements, "w") as f:
            f.write(f"kafka-python=={KAFKA_PYTHON_VERSION} --hash=sha256:{SDIST_SHA256}\n")
        print(f"downloading the kafka-python {KAFKA_PYTHON_VERSION} sdist into {directory}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                        "--no-deps", "--no-binary", "kafka-python", "--require-hashes", "-r", requirements,
                        "-d", tmp], check=True)
        shutil.move(os.path.join(tmp, os.path.basename(path)), path)
    if sha256(path) != SDIST_SHA256:
        os.unlink(path)
        raise SystemExit(f"{path}: sha256 differs from SDIST_SHA256")
    return path


def ensure_requirements() -> None:
    missing = [req for module, req in SUITE_REQUIREMENTS.items() if importlib.util.find_spec(module) is None]
    if missing:
        print(f"installing the suite's test dependencies: {' '.join(missing)}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *missing], check=True)


# Modules the suite's integration tests import that its sdist leaves out (it packages test.integration
# but not the top-level test package). Written only when absent; ours, minimal, for external-broker
# mode, where the suite never starts a broker of its own.
SHIM_INIT = '''\
"""Written by minibroker's scripts/client_suite_kafka_python.py: the sdist lacks test/__init__.py."""
from kafka.future import Future

Future.error_on_callbacks = True  # as the kafka-python repository runs its tests: callback errors raise
'''

SHIM_SERVICE = '''\
"""Written by minibroker's scripts/client_suite_kafka_python.py: the sdist lacks test/service.py.

With KAFKA_URI set the suite only wraps the running broker; it never spawns one."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def open(self):
        pass

    def close(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run uses an external broker (KAFKA_URI); it cannot spawn a Kafka process")
'''


def unpack(sdist: str, workdir: str) -> str:
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(workdir, filter="data")
        else:  # Python < 3.11.4
            tar.extractall(workdir)  # noqa: S202 - a hash-checked sdist
    suite = os.path.join(workdir, f"kafka_python-{KAFKA_PYTHON_VERSION}")
    for name, text in (("__init__.py", SHIM_INIT), ("service.py", SHIM_SERVICE)):
        path = os.path.join(suite, "test", name)
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    return suite


# -- one run -----------------------------------------------------------------------------------------

@dataclass
class Result:
    outcome: str  # pass, fail, error, skip, deselect
    message: str
    duration: float
    details: str = ""  # pytest's traceback of a failure


def combine(lines: list[dict]) -> dict[str, Result]:
    """Phase reports -> one outcome per test, as pytest's summary counts them."""
    results: dict[str, Result] = {}
    for line in lines:
        nodeid, when, outcome = line["nodeid"], line["when"], line["outcome"]
        current = results.get(nodeid)
        if when == "collect":
            results[nodeid] = Result("deselect", "", 0.0)
        elif when == "setup":
            mapped = {"passed": "pass", "skipped": "skip", "failed": "error"}[outcome]
            results[nodeid] = Result(mapped, line["message"], line["duration"], line.get("details", ""))
        elif current is not None:
            current.duration += line["duration"]
            if when == "call":
                current.outcome = {"passed": "pass", "skipped": "skip", "failed": "fail"}[outcome]
                current.message, current.details = line["message"], line.get("details", "")
            elif when == "teardown" and outcome == "failed" and current.outcome in ("pass", "skip"):
                current.outcome, current.message = "error", line["message"]
                current.details = line.get("details", "")
    return results


# Test files that start a broker of their own (KafkaFixture.instance with an SSL or SASL transport),
# whatever KAFKA_URI says: run in a second pass where that fixture starts minibroker
# (scripts/client_suite_own_brokers.py).
OWN_BROKER_FILES = ("test/integration/test_sasl_integration.py", "test/integration/test_ssl_integration.py")


def run_suite(suite: str, workdir: str, run: int, pytest_args: list[str],
              deselect: list[str]) -> tuple[int, dict[str, Result], str, str]:
    """Start a broker, run the suite against it, stop the broker; then run the files that start their
    own brokers. Returns (pytest exit code, results, path of pytest's output, path of the broker's log)."""
    sys.path.insert(0, ROOT)
    from minibroker.testing import BrokerRunner

    outcomes = os.path.join(workdir, f"outcomes-{run}.jsonl")
    output = os.path.join(workdir, f"pytest-{run}.log")
    broker_log = os.path.join(workdir, f"minibroker-{run}.log")
    kafka_root = os.path.join(workdir, "kafka-root")  # the fixtures insist that KAFKA_ROOT exists
    os.makedirs(kafka_root, exist_ok=True)
    for attempt in range(3):  # the released port may be taken again in between; pick another
        broker = BrokerRunner(broker_overrides(free_port()), mode="process")
        try:
            broker.start()
            break
        except (RuntimeError, TimeoutError):
            broker.cleanup()
            if attempt == 2:
                raise
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "PYTEST_"))}
    env.update({
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKA_ROOT": kafka_root,
        "MINIBROKER_SUITE_OUTCOMES": outcomes,
        "PYTHONPATH": os.pathsep.join(p for p in (os.path.dirname(os.path.abspath(__file__)), ROOT,
                                                  env.get("PYTHONPATH")) if p),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    options = [*[f"--deselect={nodeid}" for nodeid in deselect], *pytest_args]
    started = time.monotonic()
    try:
        with open(output, "w", encoding="utf-8") as out:
            ignore = [f"--ignore={f}" for f in OWN_BROKER_FILES]
            code = _pytest(suite, {**env, "KAFKA_URI": f"PLAINTEXT://{broker.bootstrap_servers}"},
                           ["test/integration"], [*ignore, *options], out)
    finally:
        text = broker.log_text()
        broker.cleanup()
        with open(broker_log, "w", encoding="utf-8") as f:
            f.write(text)
    with open(output, "a", encoding="utf-8") as out:
        out.write("\n*** the test files that start brokers of their own ***\n")
        own_code = _pytest(suite, env, list(OWN_BROKER_FILES), ["-p", "client_suite_own_brokers", *options],
                           out)
    if pytest_args:  # a selection given on the command line may pick nothing in one of the passes
        code, own_code = (0 if code == 5 else code), (0 if own_code == 5 else own_code)
    if code in (0, 5) and own_code not in (0, 5):
        code = own_code  # one exit code for both passes: the first failure's
    print(f"run {run}: pytest exited with {code} after {time.monotonic() - started:.0f} s", flush=True)
    lines = []
    if os.path.exists(outcomes):
        with open(outcomes, encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
    return code, combine(lines), output, broker_log


def _pytest(suite: str, env: dict[str, str], targets: list[str], options: list[str], out) -> int:
    """One pytest run of the suite with this module recording outcomes; its exit code (-1: timed out)."""
    cmd = [sys.executable, "-m", "pytest", *targets,
           "-p", "client_suite_kafka_python",  # this module: the outcome recorder above
           "-p", "no:minibroker", "-p", "no:cacheprovider",  # our own plugin is not for this suite
           f"--timeout={PER_TEST_TIMEOUT}", "--timeout-method=signal",
           "--tb=short", "--show-capture=no", "-q", "-rN", "--durations=0", "--durations-min=5", *options]
    out.flush()
    try:
        return run_pytest(cmd, SUITE_TIMEOUT, cwd=suite, env=env, stdout=out, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired:
        out.write(f"\n*** the suite did not finish in {SUITE_TIMEOUT} s; killed\n")
        return -1


STOP_GRACE_S = 4  # a stopped run: how long the suite's pytest has to tear down before SIGKILL


def run_pytest(cmd: list[str], timeout: float, **popen_kwargs) -> int:
    """``subprocess.run(cmd, timeout=timeout, **popen_kwargs).returncode``, except when this script is
    stopped meanwhile (SIGTERM, turned into SystemExit below; Ctrl-C): run() would SIGKILL the suite's
    pytest, leaving its fixtures' temporary directories behind; here it gets SIGTERM (which its
    pytest_configure above turns into KeyboardInterrupt) and STOP_GRACE_S seconds to tear down first.
    Also used by scripts/client_suite_confluent_share.py."""
    proc = subprocess.Popen(cmd, **popen_kwargs)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt):  # Ctrl-C reached the suite's pytest too (same group)
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


# -- comparison --------------------------------------------------------------------------------------

def compare(expected: dict[str, Expectation], results: dict[str, Result], full_run: bool) -> list[str]:
    problems = []
    for nodeid, result in sorted(results.items()):
        if not full_run and result.outcome == "deselect":
            continue  # left out by the selection given on the command line
        exp = expected.get(nodeid)
        want = exp.outcome if exp else "pass"
        if want == "flaky" or result.outcome == want:
            continue
        detail = f": {result.message}" if result.message else ""
        if result.details:
            detail += "\n      | " + "\n      | ".join(result.details.splitlines()[-40:])
        if exp is None:
            problems.append(f"NEW {result.outcome.upper()}: {nodeid}{detail}\n"
                            f"    not listed, so expected to pass. Find the cause; if it is a feature "
                            f"minibroker does not serve yet, add the line\n"
                            f"    {nodeid}  {result.outcome}  # <the feature>")
        elif result.outcome == "pass":
            problems.append(f"NEWLY PASSING: {nodeid}\n    listed (line {exp.line}) as {exp.outcome}: "
                            f"{exp.reason}\n    remove its line from the expectation file")
        else:
            problems.append(f"CHANGED: {nodeid} ended as {result.outcome}{detail}\n"
                            f"    listed (line {exp.line}) as {exp.outcome}: {exp.reason}")
    if full_run:
        for nodeid, exp in sorted(expected.items()):
            if nodeid not in results:
                problems.append(f"GONE: {nodeid} (line {exp.line}) was not collected: remove its line")
    return problems


def counts(results: dict[str, Result]) -> str:
    tally: dict[str, int] = {}
    for result in results.values():
        tally[result.outcome] = tally.get(result.outcome, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(tally.items()))


def run_and_compare(runs: int, expected: dict[str, Expectation], full_run: bool, name: str,
                    run_once) -> int:
    """Run the suite ``runs`` times (``run_once(run)`` -> (pytest exit code, results, path of pytest's
    output, path of the broker's log)), report every outcome that differs from the expectations and the
    tests whose outcome varied across runs. Returns the exit status: 0, 1 (an outcome differs) or 2 (a
    run recorded nothing). Also used by scripts/client_suite_confluent_share.py."""
    status = 0
    seen: dict[str, set[str]] = {}
    for run in range(1, runs + 1):
        code, results, output, broker_log = run_once(run)
        for nodeid, result in results.items():
            seen.setdefault(nodeid, set()).add(result.outcome)
        problems = compare(expected, results, full_run)
        if code not in (0, 1) or not results:
            problems.insert(0, f"the suite itself did not complete (pytest exit code {code}, "
                               f"{len(results)} tests recorded)")
        print(f"run {run}: {counts(results)}", flush=True)
        if problems:
            status = 2 if not results else max(status, 1)
            print(f"run {run}: {len(problems)} outcome(s) differ from the expectation file:")
            for problem in problems:
                print("  " + problem)
            if os.path.exists(output):
                with open(output, encoding="utf-8", errors="replace") as f:
                    tail = [line for line in f.read().splitlines() if line.strip()][-3:]
                print(f"  pytest's output ({output}) ends:\n    " + "\n    ".join(tail))
            print(f"  minibroker's log: {broker_log}", flush=True)
    flaky = sorted(n for n, outs in seen.items() if len(outs) > 1)
    if runs > 1:
        print(f"{runs} runs; tests with differing outcomes across runs: {len(flaky)}")
        for nodeid in flaky:
            print(f"  {nodeid}: {', '.join(sorted(seen[nodeid]))}")
    if status == 0:
        print(f"{name}: every outcome is as expected")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="run the suite this many times (flakiness)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, outcomes)")
    parser.add_argument("--expectations", default=EXPECTATIONS, help="expectation file (default: pinned)")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments (a selection)")
    args = parser.parse_args(argv)

    expected = read_expectations(args.expectations)
    deselect = sorted(nodeid for nodeid, exp in expected.items() if exp.outcome == "deselect")
    full_run = not args.pytest_args
    ensure_requirements()
    sdist = fetch_sdist()
    workdir = tempfile.mkdtemp(prefix="kafka-python-suite-")
    keep = args.keep
    try:
        suite = unpack(sdist, workdir)
        try:
            installed = importlib.metadata.version("kafka-python")
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != KAFKA_PYTHON_VERSION:
            print(f"note: the installed kafka-python is {installed}; the suite runs its own sdist's "
                  f"client, {KAFKA_PYTHON_VERSION} (KAFKA_PYTHON_VERSION in {os.path.basename(__file__)})")
        print(f"kafka-python {KAFKA_PYTHON_VERSION} integration suite against minibroker "
              f"(KAFKA_VERSION={KAFKA_VERSION}); expectations: {os.path.relpath(args.expectations, ROOT)}",
              flush=True)
        status = run_and_compare(args.runs, expected, full_run, "kafka-python suite",
                                 lambda run: run_suite(suite, workdir, run, args.pytest_args, deselect))
        keep = keep or status != 0
        return status
    finally:
        if keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    # scripts/run-tests.sh stops a suite running in the background with SIGTERM (on Ctrl-C): exit
    # through the finally blocks, which stop the broker and kill the suite's pytest
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(main())
