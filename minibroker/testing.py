"""Run a broker for tests: in-process on a background event-loop thread, or as a subprocess.

``BrokerRunner`` is what the pytest plugin's fixtures hand out; it works without pytest too:

    with BrokerRunner() as broker:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)

Port 0 (the OS picks a free port, so parallel test runs never collide), a temporary data
directory removed at the end unless one was given, and cleanup guaranteed by ``stop()``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

READY_RE = re.compile(r"minibroker ready: .* listening on [A-Z_]+://([^:,\s]*):(\d+)")


class _LogCapture(logging.Handler):
    """Keeps the broker's log lines of an in-process broker (attached to failing test reports)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < 100_000:
            self.lines.append(self.format(record))


class BrokerRunner:
    """A broker started on demand; ``mode`` is ``"thread"`` (fastest) or ``"process"``."""

    def __init__(
        self,
        overrides: dict[str, str] | None = None,
        *,
        data_dir: str | None = None,
        mode: str = "thread",
        host: str = "127.0.0.1",
        log_level: str = "INFO",
    ):
        if mode not in ("thread", "process"):
            raise ValueError("mode must be 'thread' or 'process'")
        self.mode = mode
        self.host = host
        self.log_level = log_level
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="minibroker-")
        self.overrides = {
            "listeners": f"PLAINTEXT://{host}:0",
            "log.dirs": self.data_dir,
            **(overrides or {}),
        }
        self.port: int | None = None
        self.broker = None  # the Broker object in thread mode
        self.process: subprocess.Popen | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._capture = _LogCapture()
        self._log_path = os.path.join(tempfile.gettempdir(), f"minibroker-{os.getpid()}-{id(self)}.log")

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> BrokerRunner:
        if self.mode == "thread":
            self._start_thread(timeout)
        else:
            self._start_process(timeout)
        return self

    def _start_thread(self, timeout: float) -> None:
        from minibroker.config import load_config
        from minibroker.server.broker import Broker

        overrides = [f"{k}={v}" for k, v in self.overrides.items()]
        if self.port is not None:  # a restart keeps its port so clients reconnect
            overrides.append(f"listeners=PLAINTEXT://{self.host}:{self.port}")
        config = load_config(None, overrides, {})
        broker_logger = logging.getLogger("minibroker")
        if broker_logger.level == logging.NOTSET:  # otherwise the root's WARNING would drop the INFO lines
            broker_logger.setLevel(self.log_level)
        self._capture.setLevel(self.log_level)
        broker_logger.addHandler(self._capture)
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="minibroker", daemon=True)
        self._thread.start()
        self.broker = Broker(config)
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
        if self.port is not None:
            overrides["listeners"] = f"PLAINTEXT://{self.host}:{self.port}"
        for k, v in overrides.items():
            cmd += ["--override", f"{k}={v}"]
        log_file = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        start_offset = log_file.tell()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
        self.process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        self._log_file = log_file
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self._log_path, "rb") as f:
                f.seek(start_offset)
                text = f.read().decode("utf-8", "replace")
            m = READY_RE.search(text)
            if m:
                self.port = int(m.group(2))
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
        logging.getLogger("minibroker").removeHandler(self._capture)

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        if os.path.exists(self._log_path):
            os.unlink(self._log_path)

    def __enter__(self) -> BrokerRunner:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def log_text(self) -> str:
        """The broker's log so far (for failing test reports)."""
        if self.mode == "thread":
            return "\n".join(self._capture.lines)
        try:
            with open(self._log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    # -- conveniences over the wire -------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        from minibroker.tools.topics import TopicAdmin, error_text

        with TopicAdmin(self.bootstrap_servers) as admin:
            code, message = admin.create(name, partitions, 1, {k: str(v) for k, v in (config or {}).items()})
        if code:
            raise RuntimeError(f"create_topic({name!r}) failed: {error_text(code, message)}")

    def delete_topic(self, name: str) -> None:
        from minibroker.tools.topics import TopicAdmin, error_text

        with TopicAdmin(self.bootstrap_servers) as admin:
            code, message = admin.delete(name)
        if code:
            raise RuntimeError(f"delete_topic({name!r}) failed: {error_text(code, message)}")

    def produce(
        self,
        topic: str,
        values,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers=None,
        **producer_config,
    ) -> list[int]:
        """Send values (bytes or str) with kafka-python; returns their offsets."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, **producer_config)
        try:
            futures = [
                producer.send(
                    topic,
                    value=v.encode() if isinstance(v, str) else v,
                    key=key,
                    partition=partition,
                    headers=headers,
                )
                for v in values
            ]
            producer.flush(30)
            return [f.get(30).offset for f in futures]
        finally:
            producer.close(5)

    def consume(
        self,
        topic: str,
        count: int,
        *,
        timeout: float = 10.0,
        partition: int | None = None,
        **consumer_config,
    ) -> list:
        """Read ``count`` records from the start of ``topic`` with kafka-python (assign, no group)."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False, **consumer_config
        )
        try:
            if partition is None:
                parts = consumer.partitions_for_topic(topic) or {0}
                tps = [TopicPartition(topic, p) for p in sorted(parts)]
            else:
                tps = [TopicPartition(topic, partition)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            out: list = []
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    out.extend(records)
            return out[:count] if len(out) > count else out
        finally:
            consumer.close()
