#!/usr/bin/env python3
"""Run aiokafka's own SSL, SASL and ACL tests, unmodified, against a minibroker this script starts.

aiokafka's sdist ships no tests; they are in its repository at the release tag. This script clones
that tag (``git clone --depth 1``; or takes ``--source DIR``, a checkout or ``git archive`` of it),
copies ``tests/`` and ``pyproject.toml`` into a temporary directory (so ``import aiokafka`` is the
installed release with its C extensions, which the suite's conftest asserts) and runs ``TESTS`` there
with this file loaded as a pytest plugin. The suite's conftest starts Kafka in docker; the plugin
answers those fixtures first:

- ``kafka_server``: one minibroker (``BrokerRunner``, process mode) with the four listeners and the
  settings of the suite's ``docker/scripts/start-kafka.sh``: PEM files from ``minibroker certs`` for
  its JKS stores, the PLAIN users of its ``kafka_server_jaas.conf`` as listener keys, AclAuthorizer
  for ``SimpleAclAuthorizer`` (gone since Kafka 3.0);
- ``ssl_folder``: ``ca.crt``, ``client.crt``, ``client.key``, the names ``gen-ssl-certs.sh`` writes;
- ``acl_manager``, ``kafka_config``: kafka-acls.sh and kafka-configs.sh (ZooKeeper, inside the
  container) become CreateAcls/DeleteAcls/DescribeAcls and AlterUserScramCredentials with
  kafka-python's admin client, logged in as the super user ``admin``;
- ``kerberos_utils``: skips its tests (GSSAPI is not served); ``docker``, ``kafka_image``: none, the
  image tag the ``@kafka_versions`` gates read says ``KAFKA_VERSION``.

    python scripts/client_suite_aiokafka_security.py                    # clone the tag, run, ~25 s
    python scripts/client_suite_aiokafka_security.py --source ~/aiokafka -- -k deny_topic

Exit status: pytest's. docs/security.md ("Client test suites") lists the outcomes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
from client_suite_kafka_python import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIOKAFKA_VERSION = "0.14.0"
REPOSITORY = "https://github.com/aio-libs/aiokafka"
KAFKA_VERSION = "2.8.1"  # the image of the suite's Makefile, the newest its CI runs
TESTS = ["tests/test_sasl.py", "tests/test_consumer.py::TestConsumerIntegration::test_ssl_consume",
         "tests/test_producer.py::TestKafkaProducerIntegration::test_producer_ssl",
         "tests/test_helpers.py::test_create_ssl_context",
         "tests/test_conn.py::ConnIntegrationTest::test__do_sasl_handshake_v0",
         "tests/test_conn.py::ConnIntegrationTest::test__do_sasl_handshake_v1",
         "tests/test_conn.py::ConnIntegrationTest::test__send_sasl_token"]
HOST = "127.0.0.1"
USERS = {"admin": "admin", "test": "test", "test2": "test2"}  # kafka_server_jaas.conf's user_<name>


# -- the pytest plugin (loaded in the suite's pytest with -p client_suite_aiokafka_security) ----------

class _Session:
    runner = certs_dir = ssl_folder = server = admin = None


def _ssl_folder() -> pathlib.Path:
    if _Session.ssl_folder is None:
        from minibroker.tools.certs import generate_test_certs

        _Session.certs_dir = tempfile.mkdtemp(prefix="aiokafka-suite-certs-")
        certs = generate_test_certs(_Session.certs_dir, hosts=[HOST, "localhost"])
        folder = pathlib.Path(_Session.certs_dir, "ssl_cert")
        folder.mkdir()
        for name, key in (("ca.crt", "ca"), ("client.crt", "client_cert"), ("client.key", "client_key")):
            shutil.copy(certs[key], folder / name)
        _Session.ssl_folder = folder
    return _Session.ssl_folder


class _Server:
    def __init__(self, ports: dict[str, int]):
        self.host, self.container = HOST, None
        self.port, self.ssl_port = ports["PLAINTEXT"], ports["SSL"]
        self.sasl_plain_port, self.sasl_ssl_port = ports["SASL_PLAINTEXT"], ports["SASL_SSL"]
        self.hosts = [f"{HOST}:{self.port}"]


def _kafka_server() -> _Server:
    if _Session.server is None:
        from minibroker.testing import BrokerRunner

        certs = os.path.dirname(_ssl_folder())
        ports = {proto: free_port() for proto in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
        listeners = ",".join(f"{proto}://{HOST}:{port}" for proto, port in ports.items())
        plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                 'password="admin" ' + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
        overrides = {
            # Kafka 2.8.1's config/server.properties
            "broker.id": "0", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            # docker/scripts/start-kafka.sh
            "num.partitions": "2", "ssl.protocol": "TLS", "ssl.enabled.protocols": "TLSv1.2,TLSv1.1,TLSv1",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": os.path.join(certs, "broker.pem"),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": os.path.join(certs, "ca.pem"),
            "ssl.client.auth": "required", "ssl.endpoint.identification.algorithm": "",
            "sasl.enabled.mechanisms": "PLAIN,GSSAPI,SCRAM-SHA-256,SCRAM-SHA-512",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true", "auto.create.topics.enable": "true",
            "listeners": listeners, "advertised.listeners": listeners, "super.users": "User:admin",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
        }
        _Session.runner = BrokerRunner(overrides, mode="process", host=HOST).start()
        _Session.server = _Server(ports)
    return _Session.server


def _admin():
    if _Session.admin is None:
        from kafka.admin import KafkaAdminClient

        _Session.admin = KafkaAdminClient(
            bootstrap_servers=f"{HOST}:{_kafka_server().sasl_plain_port}", security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN", sasl_plain_username="admin", sasl_plain_password=USERS["admin"])
    return _Session.admin


class WireACLManager:
    """The suite's ACLManager (kafka-acls.sh --add / --remove --force / --list) over the ACL APIs."""

    def __init__(self):
        self._active_acls = []

    @staticmethod
    def _bindings(cluster=None, topic=None, group=None, transactional_id=None, allow_principal=None,
                  deny_principal=None, operation=None, **rest):
        from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

        if any(v is not None for v in rest.values()):
            raise NotImplementedError(f"ACLManager options not used by the suite: {rest}")
        # kafka-acls.sh takes operation names in any case: All, READ, IdempotentWrite
        op = ACLOperation[re.sub(r"(?<=[a-z])(?=[A-Z])", "_", operation).upper()]
        named = ((ResourceType.CLUSTER, "kafka-cluster" if cluster else None), (ResourceType.TOPIC, topic),
                 (ResourceType.GROUP, group), (ResourceType.TRANSACTIONAL_ID, transactional_id))
        resources = [ResourcePattern(kind, name) for kind, name in named if name is not None]
        return [ACL(f"User:{who}", "*", op, permission, resource) for resource in resources
                for who, permission in ((allow_principal, ACLPermissionType.ALLOW),
                                        (deny_principal, ACLPermissionType.DENY)) if who is not None]

    def add_acl(self, **params):
        failed = _admin().create_acls(self._bindings(**params))["failed"]
        if failed:
            raise RuntimeError(f"Failed to apply ACL: {failed}")
        self._active_acls.append(params)

    def remove_acl(self, **params):
        from kafka.admin import ACLFilter, ResourcePatternFilter

        filters = [ACLFilter(b.principal, b.host, b.operation, b.permission_type,
                             ResourcePatternFilter(p.resource_type, p.resource_name, p.pattern_type))
                   for b in self._bindings(**params) for p in [b.resource_pattern]]
        for _filter, _acls, error in _admin().delete_acls(filters):
            if error.errno:
                raise RuntimeError(f"Failed to remove ACL: {error.__name__}")
        self._active_acls.remove(params)

    def list_acl(self, principal=None):
        from kafka import admin

        who = f"User:{principal}" if principal else None
        acls, _error = _admin().describe_acls(admin.ACLFilter(
            who, None, admin.ACLOperation.ANY, admin.ACLPermissionType.ANY,
            admin.ResourcePatternFilter(admin.ResourceType.ANY, None, admin.ACLResourcePatternType.ANY)))
        return "\n".join(map(str, acls)).encode()

    def cleanup(self):
        for params in self._active_acls[:]:
            self.remove_acl(**params)


class WireKafkaConfig:
    def add_scram_user(self, username, password):
        from kafka.admin import ScramMechanism, UserScramCredentialUpsertion

        # one request per mechanism: KRaft's controller, and minibroker, answer DUPLICATE_RESOURCE to two
        # alterations of one user in one request (ZooKeeper, which the suite's tool writes to, took both)
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            errors = _admin().alter_user_scram_credentials([UserScramCredentialUpsertion(
                username, mechanism, password, iterations=4096)])
            if any(errors.values()):
                raise RuntimeError(f"Failed to apply Config: {errors}")


class NoKerberos:
    def __getattr__(self, name):
        pytest.skip("GSSAPI: needs the docker image's Kerberos KDC; minibroker does not serve GSSAPI")


_FIXTURES = {"docker": lambda: "no docker: minibroker",  # None would mean "not answered"
             "kafka_image": lambda: f"minibroker:2.13_{KAFKA_VERSION}", "ssl_folder": _ssl_folder,
             "kafka_server": _kafka_server, "acl_manager": WireACLManager, "kafka_config": WireKafkaConfig,
             "kerberos_utils": NoKerberos}


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if not getattr(config.option, "docker_image", None):  # setup_test_class reads the version from its tag
        config.option.docker_image = f"minibroker:2.13_{KAFKA_VERSION}"


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    factory = _FIXTURES.get(fixturedef.argname)
    if factory is None:
        return None
    value = factory()
    fixturedef.cached_result = (value, fixturedef.cache_key(request), None)
    return value


def pytest_sessionfinish(session, exitstatus):
    if _Session.admin is not None:
        left = WireACLManager().list_acl()
        if left:  # every test removes its ACLs in tearDown
            print(f"\nACLs left after the run:\n{left.decode()}", file=sys.stderr)
        _Session.admin.close()
    if _Session.runner is not None:
        _Session.runner.stop()
        log_copy = os.environ.get("MINIBROKER_BROKER_LOG")
        if log_copy:
            pathlib.Path(log_copy).write_text(_Session.runner.log_text())
        _Session.runner.cleanup()
    if _Session.certs_dir is not None:
        shutil.rmtree(_Session.certs_dir, ignore_errors=True)


# -- the runner ---------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="an aiokafka checkout (or git archive) of the tag; default: clone")
    parser.add_argument("--repository", default=REPOSITORY, help="where to clone the tag from")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the broker's log)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    installed = importlib.metadata.version("aiokafka")
    if installed != AIOKAFKA_VERSION:
        print(f"aiokafka {installed} is installed; the tests are {AIOKAFKA_VERSION}'s", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="aiokafka-security-suite-")
    code = 2
    try:
        source = args.source
        if source is None:
            source = os.path.join(work, "src")
            subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", f"v{AIOKAFKA_VERSION}",
                            args.repository, source], check=True)
        run = os.path.join(work, "run")
        shutil.copytree(os.path.join(source, "tests"), os.path.join(run, "tests"))
        shutil.copy(os.path.join(source, "pyproject.toml"), run)
        env = {**os.environ, "MINIBROKER_BROKER_LOG": os.path.join(work, "broker.log"),
               "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), ROOT])}
        cmd = [sys.executable, "-m", "pytest", "-p", "client_suite_aiokafka_security",
               "-p", "no:cacheprovider", "-v", "-rA", "--timeout", "180", *TESTS, *args.pytest_args]
        code = subprocess.run(cmd, cwd=run, env=env).returncode
        return code
    finally:
        if code or args.keep:
            print(f"work directory kept: {work} (broker.log, run/)")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
