#!/usr/bin/env python3
"""Run confluent-kafka-python's own share-consumer integration tests against minibroker.

confluent-kafka-python's repository has integration tests for its ``ShareConsumer`` (KIP-932 share
groups) in ``tests/integration/share_consumer``, runnable against an existing cluster: its
``kafka_cluster`` fixture (``tests/integration/conftest.py``) uses a bring-your-own-broker
``ByoFixture`` when ``BROKERS`` names bootstrap servers. Its sdist on PyPI prunes ``tests/``, so the
source is the repository at the pinned tag. This script:

1. gets the suite's files (``tests/``, ``pyproject.toml``, ``tox.ini``, ``LICENSE`` of the tag
   ``v<CONFLUENT_KAFKA_PYTHON_VERSION>``) from, in order: ``--source`` (or
   ``MINIBROKER_CONFLUENT_SUITE_SOURCE``: a git repository holding the tag, a checkout directory or
   a tarball of the tag), the cache ``${XDG_CACHE_HOME:-~/.cache}/minibroker/client-suites``, or
   GitHub's tarball of the tag; whatever the source, the files' content must hash to
   ``SUITE_CONTENT_SHA256``, and a verified copy is kept in the cache;
2. installs what the suite imports when missing (``SUITE_REQUIREMENTS``) and, when trivup (the
   suite's cluster launcher, imported but not used in this mode) is not installed, puts a stand-in
   on the suite's path;
3. starts minibroker (``python -m minibroker serve``, a free port, a fresh data directory) with the
   settings of the suite's own broker (``BROKER_OVERRIDES``, from ``TestUtils.broker_conf()``);
4. runs ``python -m pytest tests/integration/share_consumer`` in a fresh temporary directory with
   ``BROKERS`` set, against the *installed* confluent-kafka (the tests are Python; the client is the
   one minibroker's own tests use), recording each test's outcome through
   scripts/client_suite_kafka_python.py loaded as a pytest plugin;
5. compares every outcome with ``tests/client_suites/confluent-kafka-python-<version>.expected``: a
   test not listed there must pass; a listed one must end as listed.

Exit status 0 when every outcome is as expected; 1 when a test newly fails, newly passes, or ends
otherwise than listed (the report says which and what to change); 2 when the suite could not run;
3 when its source could not be had (no network to GitHub and nothing cached): nothing was tested.

    python scripts/client_suite_confluent_share.py               # the whole suite, once
    python scripts/client_suite_confluent_share.py --runs 3      # three times, reporting flaky tests
    python scripts/client_suite_confluent_share.py -- -k ack     # pytest arguments after --

docs/testing.md ("confluent-kafka-python's share-consumer suite") says how to update the expectations.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Outcome recording, expectation files and the comparison are the kafka-python runner's.
from client_suite_kafka_python import (  # noqa: E402
    cache_dir,
    combine,
    read_expectations,
    run_and_compare,
    run_pytest,
    sha256,
)

# The one place the suite's version is pinned: the git tag v<version> of confluent-kafka-python.
# The tests run against the installed confluent-kafka (pyproject.toml's, 2.16.1 when this was
# written); the suite should follow it when its tag can be had (see docs/testing.md).
CONFLUENT_KAFKA_PYTHON_VERSION = "2.15.0"
# sha256 over "<sha256 of the file>  <path>\n" for every file taken (SUITE_PATHS), sorted by path:
# independent of how the files arrived (git archive, a checkout, GitHub's tarball).
SUITE_CONTENT_SHA256 = "9b03384927124f5543c3121bc3deabb841190a4e4994899d09dc8a402f151841"
SUITE_PATHS = ("tests/", "pyproject.toml", "tox.ini", "LICENSE")
TARBALL_URL = ("https://codeload.github.com/confluentinc/confluent-kafka-python/tar.gz/refs/tags/"
               f"v{CONFLUENT_KAFKA_PYTHON_VERSION}")
SOURCE_ENV = "MINIBROKER_CONFLUENT_SUITE_SOURCE"
EXPECTATIONS = os.path.join(ROOT, "tests", "client_suites",
                            f"confluent-kafka-python-{CONFLUENT_KAFKA_PYTHON_VERSION}.expected")
TEST_DIR = "tests/integration/share_consumer"  # share_consumer_sasl/_oauth start trivup clusters

# The settings of the broker the suite starts itself: TestUtils.broker_conf() in tests/common,
# given to trivup's KafkaBrokerApp, whose server.properties template adds the rest (num.partitions 3
# for auto-created topics, auto-creation and topic deletion on, replication factor 1, the KRaft
# StandardAuthorizer with allow.everyone.if.no.acl.found). Left out: offsets.topic.min.isr (not a
# Kafka broker key; minibroker warns of unknown keys), trivup's listener, SASL and controller keys.
BROKER_OVERRIDES = {
    # TestUtils.broker_conf()
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.replication.factor": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.share.record.lock.duration.ms": "1000",  # short locks for the redelivery tests
    "group.share.min.record.lock.duration.ms": "1000",
    # trivup's server.properties.template
    "num.partitions": "3",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "default.replication.factor": "1",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}

# What the suite imports beyond confluent-kafka itself, pytest and pytest-timeout (our [test] extra):
# tests/integration/cluster_fixture.py imports the schema-registry clients (authlib, httpx2 (httpx
# works too, with a deprecation warning), cachetools), tests/common/schema_registry the legacy Avro
# consumer (avro, fastavro), and test_share_consumer_deserialization.py the Protobuf and JSON Schema
# serdes (protobuf, googleapis-common-protos, jsonschema). confluent-kafka's own
# extras ([avro,json,protobuf]) are not used: 2.16.1 asks for a certifi newer than PyPI had here.
# Installed by ensure_requirements() when missing; module -> requirement.
SUITE_REQUIREMENTS = {
    "pytest_timeout": "pytest-timeout==2.4.0",
    "pytest_asyncio": "pytest-asyncio>=0.23",  # the suite's pyproject sets asyncio_mode = "auto"
    "authlib": "authlib==1.9.6",
    "httpx2": "httpx2==2.16.2",
    "cachetools": "cachetools==8.0.0",
    "fastavro": "fastavro==1.13.1",
    "avro": "avro==1.12.2",
    "google.protobuf": "protobuf==7.36.2",
    "google.api": "googleapis-common-protos==1.76.0",
    "jsonschema": "jsonschema>=4.18",
}

# The suite's own environment variables: a schema registry (SR_URL) stays unset, so do the classic
# consumer's group protocol switch and a caller's BROKERS.
SUITE_ENV = ("BROKERS", "SR_URL", "TEST_CONSUMER_GROUP_PROTOCOL")
PER_TEST_TIMEOUT = 120  # seconds, pytest-timeout; the suite's tox.ini says 600
SUITE_TIMEOUT = 1500  # seconds for one whole run of the suite

# A stand-in for trivup when it is not installed: the suite's conftest imports TrivupFixture (and
# so trivup.clusters.KafkaCluster) at module level, but with BROKERS set it only builds ByoFixture.
TRIVUP_SHIM = '''\
"""Written by minibroker's scripts/client_suite_confluent_share.py: trivup is not installed.

With BROKERS set the suite uses the running broker (ByoFixture) and never starts a trivup cluster."""


class KafkaCluster:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run uses an external broker (BROKERS); it cannot start a trivup cluster")
'''


class SourceUnavailable(Exception):
    pass


# -- getting the suite -------------------------------------------------------------------------------

def _wanted(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in SUITE_PATHS)


def content_hash(root: str) -> str:
    lines = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if _wanted(rel):
                lines.append(f"{sha256(path)}  {rel}\n")
    lines.sort(key=lambda line: line.split("  ", 1)[1])
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _extract_tar(data: bytes, dest: str, strip_top: bool) -> None:
    """Extract the wanted members of a (gzipped) tarball into dest; strip_top drops the archive's
    top-level directory (GitHub's tarballs have one, confluent-kafka-python-<version>/)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            name = member.name.split("/", 1)[1] if strip_top and "/" in member.name else member.name
            if not (member.isfile() and _wanted(name)) or name.startswith("/") or ".." in name.split("/"):
                continue
            target = os.path.join(dest, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def _from_git(repo: str, dest: str) -> None:
    tag = f"v{CONFLUENT_KAFKA_PYTHON_VERSION}"
    git_dir = repo if not os.path.isdir(os.path.join(repo, ".git")) else os.path.join(repo, ".git")
    result = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", tag,
                             *[p.rstrip("/") for p in SUITE_PATHS]], capture_output=True)
    if result.returncode != 0:
        raise SourceUnavailable(f"{repo}: git archive {tag} failed: {result.stderr.decode().strip()}")
    _extract_tar(result.stdout, dest, strip_top=False)


def _from_source(source: str, dest: str) -> None:
    if os.path.isfile(source):
        with open(source, "rb") as f:
            data = f.read()
        try:
            _extract_tar(data, dest, strip_top=True)
        except tarfile.TarError as e:
            raise SourceUnavailable(f"{source}: not a tarball: {e}") from e
    elif os.path.isdir(source) and (os.path.exists(os.path.join(source, "HEAD"))
                                    or os.path.isdir(os.path.join(source, ".git"))):
        _from_git(source, dest)
    elif os.path.isdir(os.path.join(source, "tests")):
        for path in SUITE_PATHS:
            src = os.path.join(source, path)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(dest, path))
            elif os.path.isfile(src):
                shutil.copy(src, os.path.join(dest, path))
    else:
        raise SourceUnavailable(f"{source}: neither a tarball, a git repository nor a checkout")


def cached_copy() -> str:
    return os.path.join(cache_dir(), f"confluent-kafka-python-{CONFLUENT_KAFKA_PYTHON_VERSION}-tests.tar.gz")


def fetch_suite(dest: str, source: str | None) -> str:
    """Put the suite's files into dest (a fresh directory); returns where they came from."""
    attempts: list[tuple[str, object]] = []
    if source:
        attempts.append((source, lambda d: _from_source(source, d)))
    if os.path.exists(cached_copy()):
        attempts.append((cached_copy(), lambda d: _from_source(cached_copy(), d)))

    def download(d: str) -> None:
        print(f"downloading {TARBALL_URL}", flush=True)
        try:
            with urllib.request.urlopen(TARBALL_URL, timeout=60) as response:  # noqa: S310 - fixed https URL
                data = response.read()
        except OSError as e:
            raise SourceUnavailable(f"{TARBALL_URL}: {e}") from e
        _extract_tar(data, d, strip_top=True)

    attempts.append((TARBALL_URL, download))
    problems = []
    for origin, get in attempts:
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        try:
            get(dest)
        except SourceUnavailable as e:
            problems.append(str(e))
            continue
        digest = content_hash(dest)
        if digest != SUITE_CONTENT_SHA256:
            problems.append(f"{origin}: content hash {digest} is not SUITE_CONTENT_SHA256 "
                            f"({SUITE_CONTENT_SHA256}): another version, or altered")
            continue
        if origin != cached_copy():
            _save_cache(dest)
        return origin
    raise SourceUnavailable("\n  ".join(problems))


def _save_cache(tree: str) -> None:
    os.makedirs(cache_dir(), exist_ok=True)
    partial = cached_copy() + ".partial"
    with tarfile.open(partial, "w:gz") as tar:
        for path in SUITE_PATHS:
            if os.path.exists(os.path.join(tree, path)):
                tar.add(os.path.join(tree, path), arcname=f"suite/{path.rstrip('/')}")
    os.replace(partial, cached_copy())


def ensure_requirements() -> None:
    def missing(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except ModuleNotFoundError:
            return True

    wanted = [req for module, req in SUITE_REQUIREMENTS.items() if missing(module)]
    if wanted:
        print(f"installing the suite's test dependencies: {' '.join(wanted)}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *wanted], check=True)


def prepare(suite: str, workdir: str) -> str:
    """Stand-ins the suite's imports need here; returns the directory to put on PYTHONPATH ('' if none)."""
    if importlib.util.find_spec("trivup") is not None:
        return ""
    shims = os.path.join(workdir, "shims")
    package = os.path.join(shims, "trivup", "clusters")
    os.makedirs(package)
    for init in (os.path.join(shims, "trivup", "__init__.py"), os.path.join(package, "__init__.py")):
        open(init, "w").close()
    with open(os.path.join(package, "KafkaCluster.py"), "w", encoding="utf-8") as f:
        f.write(TRIVUP_SHIM)
    return shims


# -- one run -----------------------------------------------------------------------------------------

def run_suite(suite: str, workdir: str, run: int, pytest_args: list[str], deselect: list[str],
              shims: str, log_level: str = "INFO", tests: tuple[str, ...] = (TEST_DIR,),
              group_protocol: str = "classic"):
    """Start a broker, run the suite's ``tests`` against it, stop the broker. Returns (pytest exit
    code, results, path of pytest's output, path of the broker's log). ``group_protocol``
    "consumer" sets the suite's TEST_CONSUMER_GROUP_PROTOCOL: its consumers use KIP-848."""
    sys.path.insert(0, ROOT)
    from minibroker.testing import BrokerRunner

    outcomes = os.path.join(workdir, f"outcomes-{run}.jsonl")
    output = os.path.join(workdir, f"pytest-{run}.log")
    broker_log = os.path.join(workdir, f"minibroker-{run}.log")
    broker = BrokerRunner(dict(BROKER_OVERRIDES), mode="process", log_level=log_level)
    try:
        broker.start()
    except (RuntimeError, TimeoutError, OSError) as e:
        text = broker.log_text()
        broker.cleanup()
        with open(broker_log, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"run {run}: minibroker did not start: {str(e).splitlines()[0]}\n"
              f"  its log ({broker_log}) ends:\n    "
              + "\n    ".join(text.strip().splitlines()[-5:]), flush=True)
        return -1, {}, output, broker_log
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KAFKA_", "PYTEST_")) and k not in SUITE_ENV}
    env.update({
        "BROKERS": broker.bootstrap_servers,
        "MINIBROKER_SUITE_OUTCOMES": outcomes,
        "PYTHONPATH": os.pathsep.join(p for p in (os.path.dirname(os.path.abspath(__file__)), shims,
                                                  env.get("PYTHONPATH")) if p),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    if group_protocol == "consumer":
        env["TEST_CONSUMER_GROUP_PROTOCOL"] = "consumer"
    cmd = [sys.executable, "-m", "pytest", *tests,
           "-p", "client_suite_kafka_python",  # the outcome recorder
           "-p", "no:minibroker", "-p", "no:cacheprovider",  # our own plugin is not for this suite
           f"--timeout={PER_TEST_TIMEOUT}", "--timeout-method=signal",
           "--tb=short", "--show-capture=no", "-q", "-rN", "--durations=0", "--durations-min=5",
           *[f"--deselect={nodeid}" for nodeid in deselect], *pytest_args]
    started = time.monotonic()
    try:
        with open(output, "w", encoding="utf-8") as out:
            try:
                code = run_pytest(cmd, SUITE_TIMEOUT, cwd=suite, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
            except subprocess.TimeoutExpired:
                out.write(f"\n*** the suite did not finish in {SUITE_TIMEOUT} s; killed\n")
                code = -1
    finally:
        text = broker.log_text()
        broker.cleanup()
        with open(broker_log, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"run {run}: pytest exited with {code} after {time.monotonic() - started:.0f} s", flush=True)
    lines = []
    if os.path.exists(outcomes):
        with open(outcomes, encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
    return code, combine(lines), output, broker_log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="run the suite this many times (flakiness)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, outcomes)")
    parser.add_argument("--expectations", default=EXPECTATIONS, help="expectation file (default: pinned)")
    parser.add_argument("--source", default=os.environ.get(SOURCE_ENV),
                        help=f"the suite's source: a git repository with the tag "
                             f"v{CONFLUENT_KAFKA_PYTHON_VERSION}, a checkout or a tarball of it "
                             f"(default: ${SOURCE_ENV}, the cache, GitHub)")
    parser.add_argument("--broker-log-level", default="INFO",
                        help="minibroker's --log-level (DEBUG to triage a failure)")
    parser.add_argument("--tests", nargs="+", default=[TEST_DIR], metavar="PATH",
                        help=f"the suite's test paths to run (default: {TEST_DIR}); tests/integration "
                             "with --expectations for it runs the bring-your-own-broker suite whole")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic",
                        help="the consumers' group protocol (the suite's TEST_CONSUMER_GROUP_PROTOCOL)")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments (a selection)")
    args = parser.parse_args(argv)

    expected = read_expectations(args.expectations)
    deselect = sorted(nodeid for nodeid, exp in expected.items() if exp.outcome == "deselect")
    full_run = not args.pytest_args
    workdir = tempfile.mkdtemp(prefix="confluent-share-suite-")
    keep = args.keep
    try:
        suite = os.path.join(workdir, "suite")
        try:
            origin = fetch_suite(suite, args.source)
        except SourceUnavailable as e:
            print(f"confluent-kafka-python share-consumer suite: NOT RUN: its source (tag "
                  f"v{CONFLUENT_KAFKA_PYTHON_VERSION}) could not be had:\n  {e}\n"
                  f"  give a clone or tarball with --source or ${SOURCE_ENV} (docs/testing.md)", flush=True)
            return 3
        ensure_requirements()
        shims = prepare(suite, workdir)
        try:
            installed = importlib.metadata.version("confluent-kafka")
        except importlib.metadata.PackageNotFoundError:
            print("confluent-kafka is not installed (pip install -e '.[test]')")
            return 2
        print(f"confluent-kafka-python {CONFLUENT_KAFKA_PYTHON_VERSION} share-consumer tests ({origin}) with "
              f"the installed confluent-kafka {installed} against minibroker; expectations: "
              f"{os.path.relpath(args.expectations, ROOT)}", flush=True)
        label = ("confluent-kafka-python share-consumer suite" if args.tests == [TEST_DIR]
                 else f"confluent-kafka-python suite ({args.group_protocol} group protocol)")
        status = run_and_compare(args.runs, expected, full_run, label,
                                 lambda run: run_suite(suite, workdir, run, args.pytest_args, deselect, shims,
                                                       args.broker_log_level, tuple(args.tests),
                                                       args.group_protocol))
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
