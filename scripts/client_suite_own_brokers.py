"""pytest plugin for kafka-python's integration suite: the tests that start a broker of their own get
minibroker.

kafka-python's SSL and SASL tests ignore ``KAFKA_URI``: they ask the suite's ``KafkaFixture`` for a
broker with ``transport='SSL'`` or ``'SASL_PLAINTEXT'`` and a SASL mechanism, and the fixture renders a
``kafka.properties`` from templates that are not in the sdist and starts Kafka's JVM with a JAAS file.
scripts/client_suite_kafka_python.py runs those test files in a second pytest pass with this module
loaded (``-p client_suite_own_brokers``). It replaces only what the fixture does to start and stop
Kafka, list topics and make TLS files; the tests, their client settings (``client_params``) and the
client code under test are the suite's own:

- SSL: ``minibroker certs`` makes a CA and a broker certificate; the CA is also written as
  ``ssl_dir/ca-cert``, the file the suite's clients trust;
- SASL PLAIN: the user ``alice`` (the fixture's ``broker_user``) in the listener's PlainLoginModule
  JAAS option ``user_alice``, as the suite's JAAS template does;
- SASL SCRAM: ``minibroker scram --data-dir`` adds the user before the first start, as the suite runs
  ``kafka-storage.sh format --add-scram``;
- the broker settings are the runner's ``BROKER_OVERRIDES`` (the suite's template), with the listener
  of the asked-for transport.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _BrokerProcess:
    """What the suite calls on ``fixture.child``: a minibroker process and its log."""

    def __init__(self, runner):
        self.runner = runner

    def dump_logs(self):
        sys.stderr.write(self.runner.log_text()[-20000:])

    def stop(self):
        self.runner.cleanup()


def _broker_overrides(fixture) -> dict[str, str]:
    from client_suite_kafka_python import BROKER_OVERRIDES

    transport = fixture.transport
    listener = f"{transport}://{fixture.host}:{fixture.port}"
    overrides = {**BROKER_OVERRIDES, "listeners": listener, "advertised.listeners": listener,
                 "inter.broker.listener.name": transport, "num.partitions": str(fixture.partitions)}
    if fixture.ssl_enabled:
        overrides.update({"ssl.keystore.type": "PEM",
                          "ssl.keystore.location": os.path.join(fixture.ssl_dir, "broker.pem"),
                          "ssl.truststore.type": "PEM",
                          "ssl.truststore.location": os.path.join(fixture.ssl_dir, "ca.pem")})
    if fixture.sasl_enabled:
        mechanism = fixture.sasl_mechanism
        overrides["sasl.enabled.mechanisms"] = mechanism
        if mechanism == "PLAIN":
            jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                    f'username="{fixture.broker_user}" password="{fixture.broker_password}" '
                    f'user_{fixture.broker_user}="{fixture.broker_password}";')
            overrides[f"listener.name.{transport.lower()}.plain.sasl.jaas.config"] = jaas
    return overrides


def _add_scram_user(fixture, data_dir: str) -> None:
    subprocess.run([sys.executable, "-m", "minibroker", "scram", "--data-dir", data_dir, "--alter",
                    "--entity-type", "users", "--entity-name", fixture.broker_user, "--add-config",
                    f"{fixture.sasl_mechanism}=[password={fixture.broker_password}]"],
                   check=True, capture_output=True, cwd=ROOT)


def _open(self):
    """KafkaFixture.open: start minibroker with the transport and SASL mechanism asked for."""
    from minibroker.testing import BrokerRunner
    from minibroker.tools.certs import generate_test_certs

    if self.running:
        return
    if self.tmp_dir is None:
        import py

        self.tmp_dir = py.path.local(tempfile.mkdtemp(prefix="kafka-python-fixture-"))
    self.tmp_dir.ensure(dir=True)
    if self.ssl_enabled:
        self.ssl_dir = os.path.join(self.tmp_dir.strpath, "ssl")
        paths = generate_test_certs(self.ssl_dir, hosts=[self.host])
        shutil.copyfile(paths["ca"], os.path.join(self.ssl_dir, "ca-cert"))
    data_dir = os.path.join(self.tmp_dir.strpath, "data")
    if self.sasl_enabled and self.sasl_mechanism.startswith("SCRAM-SHA-"):
        _add_scram_user(self, data_dir)
    runner = BrokerRunner(_broker_overrides(self), data_dir=data_dir, mode="process", host=self.host)
    runner.start()
    self.child = _BrokerProcess(runner)
    self.running = True


def _stop(self):
    if self.running and self.child is not None:
        self.child.stop()
    self.child = None
    self.running = False


def _get_topic_names(self):
    from kafka import KafkaAdminClient

    with KafkaAdminClient(**self._enrich_client_params({"client_id": "topic_lister"})) as admin:
        return admin.list_topics()


def pytest_configure(config):  # pragma: no cover - runs inside the suite's pytest
    from test.integration.fixtures import KafkaFixture

    KafkaFixture.open = _open
    KafkaFixture.start = _open
    KafkaFixture.stop = _stop
    KafkaFixture.get_topic_names = _get_topic_names
