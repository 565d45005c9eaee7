"""Run a broker for tests: in-process on a background event-loop thread, or as a subprocess.

``BrokerRunner`` is what the pytest plugin's fixtures hand out; it works without pytest too:

    with BrokerRunner() as broker:
        broker.produce("orders", [b"a", b"b"])  # or any Kafka client at broker.bootstrap_servers

Port 0 (the OS picks a free port, so parallel test runs never collide), a temporary data
directory removed at the end unless one was given, and cleanup guaranteed by ``stop()``. A
process-mode broker also stops when the process that started it ends, kill -9 included
(``tied_to_this_process``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping

READY_RE = re.compile(r"minibroker ready: .* listening on [A-Z_]+://([^:,\s]*):(\d+)")
UI_RE = re.compile(r"also serving (http://\S+/ui)\b")  # metrics_http's line for the live view
METRICS_RE = re.compile(r"metrics at (http://[^/\s]+)/metrics")

# The pipe that ties this process's ``minibroker serve`` children to it: (pid, read end, write end).
# One per process, made on first use; a forked child makes its own (the pid differs).
_tie: tuple[int, int, int] | None = None
_tie_lock = threading.Lock()


def tied_to_this_process(env: Mapping[str, str] | None = None) -> dict:
    """Keyword arguments for ``subprocess.Popen`` (or ``run``) that start ``minibroker serve`` so that it
    stops when this process ends, however it ends (kill -9 included):
    ``subprocess.Popen(cmd, stdout=log, **tied_to_this_process(env))``.

    The child gets the read end of a pipe (``pass_fds``) and its number in ``MINIBROKER_PARENT_PIPE_FD``
    (added to ``env``, default ``os.environ``); the only write end stays here, never inherited (close on
    exec). When this process is gone the broker reads end of file and stops: SIGTERM to itself (a clean
    shutdown), SIGKILL 5 s later if it still runs (``minibroker.server.parent_watch``). Which thread starts
    the child does not matter. Other commands ignore the variable."""
    global _tie
    from minibroker.server.parent_watch import PARENT_PIPE_ENV

    with _tie_lock:
        if _tie is None or _tie[0] != os.getpid():
            read_end, write_end = os.pipe()  # both close on exec; pass_fds opens the read end to the child
            _tie = (os.getpid(), read_end, write_end)
        read_end = _tie[1]
    child_env = dict(os.environ if env is None else env)
    child_env[PARENT_PIPE_ENV] = str(read_end)
    return {"env": child_env, "pass_fds": (read_end,)}


def sigterm_as_keyboard_interrupt() -> bool:
    """Make SIGTERM end this process as Ctrl-C does, with KeyboardInterrupt: called from a conftest's
    ``pytest_configure``, pytest then tears its fixtures down on SIGTERM (brokers stopped, temporary
    directories removed) instead of dying at once. Further SIGTERMs are ignored meanwhile, as a process
    group's SIGTERM often arrives twice (from the group's signal and from a parent passing it on); SIGKILL
    ends a teardown that hangs. Only in the main thread, and only where SIGTERM still has its default
    action; returns whether it was installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False

    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, lambda *_: None)  # not SIG_IGN, which children would inherit
        raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")

    signal.signal(signal.SIGTERM, interrupt)
    return True


class _LogCapture(logging.Handler):
    """Keeps the broker's log lines of an in-process broker (attached to failing test reports)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < 100_000:
            self.lines.append(self.format(record))


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_USERS = {"admin": "admin-secret", "alice": "alice-secret"}


class _Security:
    """A test broker's listener security: throwaway certificates (``minibroker certs``) for SSL and
    SASL_SSL, users for SASL (PLAIN from the listener's JAAS config; SCRAM credentials written into the
    data directory before the first start, as ``kafka-storage.sh format --add-scram`` does), and the
    matching settings of each client."""

    def __init__(self, protocol: str, mechanism: str, users: dict[str, str] | None, client_auth: str,
                 host: str):
        self.protocol = protocol
        self.mechanism = mechanism.upper()
        self.users = dict(users or DEFAULT_USERS)
        self.client_auth = client_auth
        self.tls = protocol in ("SSL", "SASL_SSL")
        self.sasl = protocol.startswith("SASL_")
        self.certs: dict[str, str] = {}
        self._certs_dir: str | None = None
        if self.tls:
            from minibroker.tools.certs import generate_test_certs

            self._certs_dir = tempfile.mkdtemp(prefix="minibroker-certs-")
            self.certs = generate_test_certs(self._certs_dir, hosts=[host])
        self._scram_written = False

    def broker_overrides(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.tls:
            out.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": self.certs["broker_keystore"],
                        "ssl.truststore.type": "PEM", "ssl.truststore.location": self.certs["ca"],
                        "ssl.client.auth": self.client_auth})
        if self.sasl:
            out["sasl.enabled.mechanisms"] = self.mechanism
            if self.mechanism == "PLAIN":
                options = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
                out[f"listener.name.{self.protocol.lower()}.plain.sasl.jaas.config"] = (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {options};")
            elif self.mechanism == "OAUTHBEARER":
                out[f"listener.name.{self.protocol.lower()}.oauthbearer.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;")
        return out

    def before_start(self, data_dir: str) -> None:
        if self.sasl and self.mechanism in SCRAM_MECHANISMS and not self._scram_written:
            from minibroker.security.sasl.scram import MECHANISMS, credential_from_password
            from minibroker.security.scram_credentials import write_offline

            mechanism = MECHANISMS[self.mechanism]
            write_offline(data_dir, [(user, mechanism, credential_from_password(mechanism, password, 4096))
                                     for user, password in self.users.items()], [])
            self._scram_written = True

    def client_config(self, client: str, bootstrap: str, user: str | None) -> dict:
        user = user or next(iter(self.users))
        password = self.users.get(user, "")
        mutual = self.client_auth in ("required", "requested")
        if client == "properties":  # Kafka's client properties: Java clients, --command-config
            out = {"bootstrap.servers": bootstrap, "security.protocol": self.protocol}
            if self.tls:
                out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.certs["ca"]})
                if mutual:
                    out.update({"ssl.keystore.type": "PEM",
                                "ssl.keystore.location": self.certs["client_pem"]})
            if self.sasl:
                out["sasl.mechanism"] = self.mechanism
                module = {"PLAIN": "plain.PlainLoginModule",
                          "OAUTHBEARER": "oauthbearer.OAuthBearerLoginModule"}.get(self.mechanism,
                                                                                 "scram.ScramLoginModule")
                options = (f'unsecuredLoginStringClaim_sub="{user}"' if self.mechanism == "OAUTHBEARER"
                           else f'username="{user}" password="{password}"')
                out["sasl.jaas.config"] = f"org.apache.kafka.common.security.{module} required {options};"
            return out
        if client == "confluent-kafka":
            out = {"bootstrap.servers": bootstrap, "security.protocol": self.protocol}
            if self.tls:
                out["ssl.ca.location"] = self.certs["ca"]
                if mutual:
                    out.update({"ssl.certificate.location": self.certs["client_cert"],
                                "ssl.key.location": self.certs["client_key"]})
            if self.sasl:
                out["sasl.mechanism"] = self.mechanism
                if self.mechanism == "OAUTHBEARER":
                    out.update({"enable.sasl.oauthbearer.unsecure.jwt": True,
                                "sasl.oauthbearer.config": f"principal={user}"})
                else:
                    out.update({"sasl.username": user, "sasl.password": password})
            return out
        if client not in ("kafka-python", "aiokafka"):
            raise ValueError("client must be kafka-python, aiokafka, confluent-kafka or properties")
        out = {"bootstrap_servers": bootstrap, "security_protocol": self.protocol}
        if self.tls:
            cert, key = (self.certs["client_cert"], self.certs["client_key"]) if mutual else (None, None)
            if client == "aiokafka":
                from aiokafka.helpers import create_ssl_context

                out["ssl_context"] = create_ssl_context(cafile=self.certs["ca"], certfile=cert, keyfile=key)
            else:
                out.update({"ssl_cafile": self.certs["ca"], "ssl_check_hostname": True})
                if mutual:
                    out.update({"ssl_certfile": cert, "ssl_keyfile": key})
        if self.sasl:
            if self.mechanism == "OAUTHBEARER":
                raise ValueError("OAUTHBEARER settings are given for confluent-kafka only")
            out.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": user,
                        "sasl_plain_password": password})
        return out

    def cleanup(self) -> None:
        if self._certs_dir is not None:
            shutil.rmtree(self._certs_dir, ignore_errors=True)
            self._certs_dir = None


class BrokerRunner:
    """A broker started on demand; ``mode`` is ``"thread"`` (fastest) or ``"process"``.

    ``security_protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) gives the listener; with TLS the
    runner makes throwaway certificates (``ssl_client_auth`` "required" for mutual TLS), with SASL it
    enables ``sasl_mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER unsecured) for ``users``
    (name -> password; default admin and alice). ``client_config(client)`` hands out matching settings.
    """

    def __init__(
        self,
        overrides: dict[str, str] | None = None,
        *,
        data_dir: str | None = None,
        mode: str = "thread",
        host: str = "127.0.0.1",
        log_level: str = "INFO",
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str = "PLAIN",
        users: dict[str, str] | None = None,
        ssl_client_auth: str = "none",
    ):
        if mode not in ("thread", "process"):
            raise ValueError("mode must be 'thread' or 'process'")
        if security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        self.mode = mode
        self.host = host
        self.log_level = log_level
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="minibroker-")
        self.security = _Security(security_protocol, sasl_mechanism, users, ssl_client_auth, host)
        self.overrides = {
            "listeners": f"{security_protocol}://{host}:0",
            "log.dirs": self.data_dir,
            **self.security.broker_overrides(),
            **(overrides or {}),
        }
        self.port: int | None = None
        self.start_seconds: float | None = None  # wall time of the last start() (a fixture's: its setup)
        self.broker = None  # the Broker object in thread mode
        self.process: subprocess.Popen | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._capture = _LogCapture()
        self._lowered_from: int | None = None  # the 'minibroker' logger's level before this broker's
        self._metrics_url: str | None = None  # a process's metrics port, from its log
        self._log_path = os.path.join(tempfile.gettempdir(), f"minibroker-{os.getpid()}-{id(self)}.log")

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> BrokerRunner:
        """Start the broker and wait until it accepts connections; ``start_seconds`` says how long that
        took (the fixtures set it to their whole setup, the import of the broker included)."""
        began = time.perf_counter()
        if self.mode == "thread":
            self._start_thread(timeout)
        else:
            self._start_process(timeout)
        self.start_seconds = time.perf_counter() - began
        return self

    def _start_thread(self, timeout: float) -> None:
        from minibroker.config import load_config
        from minibroker.server.broker import Broker

        overrides = [f"{k}={v}" for k, v in self.overrides.items()]
        if self.port is not None:  # a restart keeps its port so clients reconnect
            overrides.append(f"listeners={self.security.protocol}://{self.host}:{self.port}")
        self.security.before_start(self.data_dir)
        config = load_config(None, overrides, {})
        broker_logger = logging.getLogger("minibroker")
        wanted = logging.getLevelName(self.log_level.upper())
        # Set when unset (the root's WARNING would drop the INFO lines) or above what this broker asks
        # (an INFO broker earlier in the process must not hide a DEBUG one's lines); a lowered level is
        # put back when this broker stops, so that DEBUG logging does not outlive the test that asked.
        self._lowered_from = None
        if broker_logger.level == logging.NOTSET:
            broker_logger.setLevel(wanted)
        elif isinstance(wanted, int) and wanted < broker_logger.level:
            self._lowered_from = broker_logger.level
            broker_logger.setLevel(wanted)
        self._capture.setLevel(self.log_level)
        broker_logger.addHandler(self._capture)
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="minibroker", daemon=True)
        self._thread.start()
        self.broker = Broker(config)
        if config["ui.enable"]:  # the live view (docs/ui.md); ui_url says where
            from minibroker.tools.live_view import attach

            attach(self.broker)
        future = asyncio.run_coroutine_threadsafe(self.broker.start(), loop)
        try:
            future.result(timeout)
        except BaseException:
            self._stop_loop()
            raise
        self.port = self.broker.bound[0].port

    def _start_process(self, timeout: float) -> None:
        cmd = [sys.executable, "-m", "minibroker", "serve", "--log-level", self.log_level]
        overrides = dict(self.overrides)
        if _true(overrides.get("fault.injection.enable")) and overrides.get("metrics.port") is None:
            overrides["metrics.port"] = "0"  # inject() reaches a process's rules through /faults
        if self.port is not None:
            overrides["listeners"] = f"{self.security.protocol}://{self.host}:{self.port}"
        self.security.before_start(self.data_dir)
        for k, v in overrides.items():
            cmd += ["--override", f"{k}={v}"]
        log_file = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        start_offset = log_file.tell()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
        # tied: the broker stops when this process ends, even by kill -9 (no orphan broker)
        self.process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                        **tied_to_this_process(env))
        self._log_file = log_file
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self._log_path, "rb") as f:
                f.seek(start_offset)
                text = f.read().decode("utf-8", "replace")
            m = READY_RE.search(text)
            if m:
                self.port = int(m.group(2))
                metrics = METRICS_RE.search(text)
                self._metrics_url = metrics.group(1) if metrics else None
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"minibroker exited with {self.process.returncode}:\n{text}")
            time.sleep(0.01)
        self.kill()
        raise TimeoutError(f"minibroker did not become ready in {timeout} s")

    def stop(self) -> None:
        """Stop cleanly (flush, checkpoints); the data directory stays until ``cleanup()``."""
        if self.mode == "thread":
            if self._loop is not None and self.broker is not None:
                future = asyncio.run_coroutine_threadsafe(self.broker.stop(), self._loop)
                try:
                    future.result(10)
                finally:
                    self._stop_loop()
        elif self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
            self._log_file.close()

    def kill(self) -> None:
        """Process mode: SIGKILL, no clean shutdown (crash tests)."""
        if self.process is None:
            raise RuntimeError("kill() needs mode='process'")
        self.process.kill()
        self.process.wait()
        self.process = None
        self._log_file.close()

    def restart(self, timeout: float = 20.0) -> BrokerRunner:
        """Stop and start again on the same port and data directory."""
        self.stop()
        return self.start(timeout)

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(10)
            loop.close()
        self._loop = self._thread = None
        self.broker = None
        broker_logger = logging.getLogger("minibroker")
        broker_logger.removeHandler(self._capture)
        if self._lowered_from is not None:
            broker_logger.setLevel(self._lowered_from)
            self._lowered_from = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.security.cleanup()
        if os.path.exists(self._log_path):
            os.unlink(self._log_path)

    def __enter__(self) -> BrokerRunner:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

    @property
    def ui_url(self) -> str | None:
        """The live view's address (``ui.enable=true`` and ``metrics.port`` set; docs/ui.md), from the
        broker's log line; None when it is not served."""
        found = UI_RE.findall(self.log_text())
        return found[-1] if found else None

    def log_text(self) -> str:
        """The broker's log so far (for failing test reports)."""
        if self.mode == "thread":
            return "\n".join(self._capture.lines)
        try:
            with open(self._log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    # -- fault injection (minibroker/server/faults.py) ----------------------------------------------

    @property
    def metrics_url(self) -> str | None:
        """``http://host:port`` of the broker's metrics port (``/metrics``, ``/faults``), if it has one."""
        if self.mode == "thread":
            server = self.broker.metrics_http if self.broker is not None else None
            return None if server is None else f"http://{server.host or '127.0.0.1'}:{server.port}"
        return self._metrics_url

    def faults(self):
        """The broker's fault rules: straight on the event loop of a thread-mode broker, over the HTTP
        API (``/faults`` on the metrics port) of a process."""
        if self.mode == "thread":
            if self.broker is None or self.broker.faults is None:
                raise RuntimeError("fault injection needs fault.injection.enable=true")
            return _InProcessFaults(self.broker.faults, self._loop)
        from minibroker.tools.faults_client import FaultsHttp

        if self.metrics_url is None:
            raise RuntimeError("fault injection needs fault.injection.enable=true (and metrics.port)")
        return FaultsHttp(self.metrics_url)

    def inject(self, **rule):
        """Add a fault rule (docs/testing.md, "Faults on demand"): ``inject(api="Produce",
        error="NOT_LEADER_OR_FOLLOWER", count=3)``. Returns a ``FaultHandle``: ``.matched``, ``.remove()``,
        ``.release()``, ``wait_until_matched(n, timeout)``; a context manager that removes the rule."""
        from minibroker.tools.faults_client import FaultHandle

        api = self.faults()
        return FaultHandle(api, api.add(rule))

    # -- client settings -------------------------------------------------------------------------

    def client_config(self, client: str = "kafka-python", user: str | None = None) -> dict:
        """Settings that connect ``client`` to this broker: "kafka-python", "aiokafka" (keyword
        arguments), "confluent-kafka" (the config dict) or "properties" (Kafka's client properties, as Java
        clients and ``--command-config`` files take them). On a SASL listener they log in as ``user``
        (default: the first of ``users``); on a TLS one they trust the test CA, and on a listener with
        ``ssl_client_auth`` they present the client certificate."""
        return self.security.client_config(client, self.bootstrap_servers, user)

    # -- conveniences over the wire -------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        from minibroker.tools.topics import error_text

        with self._topic_admin() as admin:
            code, message = admin.create(name, partitions, 1, {k: str(v) for k, v in (config or {}).items()})
        if code:
            raise RuntimeError(f"create_topic({name!r}) failed: {error_text(code, message)}")

    def delete_topic(self, name: str) -> None:
        from minibroker.tools.topics import error_text

        with self._topic_admin() as admin:
            code, message = admin.delete(name)
        if code:
            raise RuntimeError(f"delete_topic({name!r}) failed: {error_text(code, message)}")

    def _security(self):
        """The ClientSecurity of this broker's listener (None for PLAINTEXT), for our own wire client."""
        if self.security.protocol == "PLAINTEXT":
            return None
        from minibroker.tools.client_config import client_security_from_properties

        return client_security_from_properties(self.client_config("properties"), "BrokerRunner")

    def _topic_admin(self):
        from minibroker.tools.topics import TopicAdmin

        return TopicAdmin(self.bootstrap_servers, security=self._security())

    def _cluster(self, timeout: float):
        from minibroker.tools.cluster import Cluster

        return Cluster(self.bootstrap_servers, timeout, self._security(), "minibroker-testing")

    def produce(
        self,
        topic: str,
        values,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers=None,
        timeout: float = 30.0,
        **producer_config,
    ) -> list[int]:
        """Send values (bytes or str) and return their offsets; a record the broker refuses raises
        RuntimeError naming Kafka's error. Our own wire client (no Kafka client library needed); a key's
        partition is Kafka's (murmur2). ``producer_config`` takes kafka-python's names of the settings
        that mean something here: ``acks`` (0, 1, "all"), ``compression_type`` (None, "gzip", "snappy",
        "lz4", "zstd"), ``enable_idempotence``, ``max_request_size`` and ``batch_size`` (bytes per batch);
        ``linger_ms`` is accepted: the values of one call go out together anyway."""
        from minibroker.records.codecs import Compression
        from minibroker.tools.records_client import BATCH_BYTES, RecordProducer

        unknown = set(producer_config) - set(PRODUCER_CONFIG)
        if unknown:
            raise TypeError(f"produce() got {', '.join(sorted(unknown))}; it takes "
                            f"{', '.join(PRODUCER_CONFIG)}")
        acks = producer_config.get("acks", "all")
        compression = producer_config.get("compression_type") or "none"
        batch_bytes = min(producer_config.get("max_request_size", BATCH_BYTES),
                          producer_config.get("batch_size", BATCH_BYTES))
        records = [(key, v.encode() if isinstance(v, str) else v, headers) for v in values]
        with self._cluster(timeout) as cluster:
            producer = RecordProducer(cluster, acks=-1 if acks in ("all", -1) else int(acks),
                                      compression=Compression[compression.upper()], batch_bytes=batch_bytes,
                                      idempotent=bool(producer_config.get("enable_idempotence")))
            outcomes = producer.send(topic, records, partition)
        failed = [o.error for o in outcomes if o.error is not None]
        if failed:
            raise RuntimeError(f"produce({topic!r}): {len(failed)} of {len(outcomes)} records failed: "
                               f"{failed[0]}")
        return [o.offset for o in outcomes]

    def consume(
        self,
        topic: str,
        count: int,
        *,
        timeout: float = 10.0,
        partition: int | None = None,
        **consumer_config,
    ) -> list:
        """Read ``count`` records from the start of ``topic`` (or of one partition), waiting at most
        ``timeout`` seconds; fewer when fewer came. Records have kafka-python's ``ConsumerRecord`` field
        names (``.topic``, ``.partition``, ``.offset``, ``.timestamp``, ``.key``, ``.value``,
        ``.headers``). ``consumer_config``: ``max_partition_fetch_bytes``, ``fetch_max_wait_ms``."""
        from minibroker.tools.cluster import EARLIEST
        from minibroker.tools.records_client import RecordFetcher

        unknown = set(consumer_config) - {"max_partition_fetch_bytes", "fetch_max_wait_ms"}
        if unknown:
            raise TypeError(f"consume() got {', '.join(sorted(unknown))}; it takes "
                            "max_partition_fetch_bytes, fetch_max_wait_ms")
        out: list = []
        deadline = time.monotonic() + timeout
        with self._cluster(timeout) as cluster:
            fetcher = RecordFetcher(
                cluster, max_wait_ms=consumer_config.get("fetch_max_wait_ms", 200),
                partition_max_bytes=consumer_config.get("max_partition_fetch_bytes", 1 << 20))
            tps = None
            while len(out) < count and time.monotonic() < deadline:
                if tps is None:
                    try:
                        parts = [partition] if partition is not None else cluster.partition_ids(topic)
                    except Exception:  # not created yet: wait for it, as a consumer would
                        time.sleep(0.1)
                        continue
                    tps = [(topic, p) for p in parts]
                    fetcher.seek(tps, EARLIEST)
                out += fetcher.fetch()
        return out[:count]


def _true(value) -> bool:
    return str(value).strip().lower() == "true"


class _InProcessFaults:
    """A thread-mode broker's ``FaultInjector``, called on its event loop from the test's thread; the
    methods and answers of ``minibroker.tools.faults_client.FaultsHttp``."""

    def __init__(self, faults, loop: asyncio.AbstractEventLoop):
        self._faults = faults
        self._loop = loop

    def _on_loop(self, fn, *args):
        async def call():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(10)

    def add(self, spec: dict) -> dict:
        return self._on_loop(lambda: self._faults.add(spec).to_json())

    def get(self, rule_id: int) -> dict | None:
        rule = self._faults.get(rule_id)
        return None if rule is None else rule.to_json()

    def rules(self) -> list[dict]:
        return self._on_loop(lambda: [r.to_json() for r in self._faults.rules])

    def remove(self, rule_id: int) -> dict | None:
        def remove():
            rule = self._faults.get(rule_id)
            return None if rule is None or not self._faults.remove(rule_id) else rule.to_json()

        return self._on_loop(remove)

    def clear(self) -> int:
        return self._on_loop(self._faults.clear)

    def release(self, rule_id: int | None = None) -> int:
        return self._on_loop(self._faults.release, rule_id)


# kafka-python's names; linger_ms is accepted and has nothing to wait for: one call's values go out together,
# in as few batches per partition as batch_size allows
PRODUCER_CONFIG = ("acks", "compression_type", "enable_idempotence", "max_request_size", "batch_size",
                   "linger_ms")
