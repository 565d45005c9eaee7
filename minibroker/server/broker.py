"""The broker: listeners, the log manager, coordinators, and an orderly start and stop.

Owner of: the listening servers, the set of live connections and the background tasks.
Everything runs on one event loop; state has one owner each (logs: LogManager, groups:
the group coordinator, producers: each partition's producer state).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import NamedTuple

from minibroker.server.connection import KafkaConnection
from minibroker.server.metrics import Metrics, StartupProgress
from minibroker.server.metrics_http import start_metrics_http
from minibroker.server.sockets import listen_socket

log = logging.getLogger("minibroker.broker")

LISTEN_BACKLOG = 1024


class Endpoint(NamedTuple):
    listener: str  # listener name, e.g. PLAINTEXT
    host: str
    port: int


class Broker:
    """One Kafka node. ``await start()``, then ``await stop()``; usable in-process (tests, plugin)."""

    def __init__(self, config):
        self.config = config
        self.node_id: int = config.node_id
        self.metrics = Metrics()
        self.connections: set[KafkaConnection] = set()
        self.logs = None  # LogManager, set in start()
        self.groups = None  # group coordinator
        self.replicas = None  # ReplicaManager: appends, reads, producer state
        self.producer_ids = None
        self.fetch_sessions = None
        self.bound: list[Endpoint] = []
        self.advertised: list[Endpoint] = []
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self.started_at = 0.0
        self.ready = asyncio.Event()
        self._close_hooks: list = []
        self.metrics_http = None  # MetricsHttpServer (minibroker/server/metrics_http.py)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        t0 = time.perf_counter()
        from minibroker.handlers import load_handlers
        from minibroker.storage import LogManager

        load_handlers()
        log_dirs = [self.config.data_dir]
        for d in log_dirs:
            os.makedirs(d, exist_ok=True)
        self.load_dynamic_configs()  # before the logs, whose topic configs inherit from them
        self.logs = LogManager(log_dirs, self.config, self.node_id)
        with StartupProgress("loading logs", log) as progress:  # a line every 5 s while recovery is slow
            self.logs.load(progress=progress.update)
        self._start_services()
        max_request = self.config["socket.request.max.bytes"]
        loop = asyncio.get_running_loop()
        for name, host, port in self.config.listener_endpoints():
            server = await loop.create_server(lambda name=name: KafkaConnection(self, max_request, name),
                                              sock=listen_socket(host, port, LISTEN_BACKLOG),
                                              backlog=LISTEN_BACKLOG)
            self._servers.append(server)
            sock_port = server.sockets[0].getsockname()[1]
            self.bound.append(Endpoint(name, host, sock_port))
        self.advertised = self._advertised_endpoints()
        self.metrics_http = await start_metrics_http(self)  # /metrics, only when metrics.port is set
        self.logs.start_retention()
        self.started_at = time.time()
        self.ready.set()
        log.info("minibroker ready: node %d, cluster %s, listening on %s (advertised %s), data in %s, "
                 "started in %.0f ms", self.node_id, self.cluster_id,
                 ", ".join(f"{e.listener}://{e.host}:{e.port}" for e in self.bound),
                 ", ".join(f"{e.listener}://{e.host}:{e.port}" for e in self.advertised),
                 ", ".join(log_dirs), (time.perf_counter() - t0) * 1000)

    # Dynamic broker configs (AlterConfigs on the broker resource) survive restarts, as Kafka keeps
    # them in its metadata: here a JSON file at the log dir root, rewritten on every change.
    DYNAMIC_CONFIGS_FILE = "minibroker-dynamic-configs.json"

    def load_dynamic_configs(self) -> None:
        import json

        path = os.path.join(self.config.data_dir, self.DYNAMIC_CONFIGS_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable %s: %s", path, e)
            return
        for layer, cluster_default in (("broker", False), ("cluster_default", True)):
            for key, value in saved.get(layer, {}).items():
                try:
                    self.config.set_dynamic(key, value, cluster_default=cluster_default)
                except Exception as e:  # a key this version no longer accepts: keep starting
                    log.warning("ignoring saved dynamic config %s=%s: %s", key, value, e)

    def save_dynamic_configs(self) -> None:
        import json

        from minibroker.storage.checkpoints import write_atomically

        saved = {"broker": self.config.dynamic_values(), "cluster_default": self.config.dynamic_values(
            cluster_default=True)}
        write_atomically(os.path.join(self.config.data_dir, self.DYNAMIC_CONFIGS_FILE),
                         json.dumps(saved, indent=1, sort_keys=True) + "\n")

    def validate_topic_configs(self, configs: dict) -> dict:
        from minibroker.config import validate_topic_configs

        validate_topic_configs(configs)
        return {k: v for k, v in configs.items() if v is not None}

    def _start_services(self) -> None:
        """Coordinators and caches beside the log; each module is optional until it exists."""
        from minibroker.services import start_services

        start_services(self)

    def _advertised_endpoints(self) -> list[Endpoint]:
        configured = self.config.advertised_endpoints()
        out = []
        bound_by_name = {e.listener: e for e in self.bound}
        for name, host, port in configured:
            bound = bound_by_name.get(name)
            if port == 0 and bound is not None:
                port = bound.port
            if not host or host in ("0.0.0.0", "::"):
                host = socket.getfqdn()  # as Kafka advertises a wildcard listener: the host's name
            out.append(Endpoint(name, host, port))
        return out

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish briefly, flush and close everything."""
        if self._stopping:
            return
        self._stopping = True
        for server in self._servers:
            server.close()
        in_flight = [c.in_flight for c in self.connections if c.in_flight is not None]
        if in_flight:  # let requests being answered finish, briefly
            await asyncio.wait(in_flight, timeout=0.5)
        for conn in list(self.connections):
            conn.close()
        for server in self._servers:
            try:
                async with asyncio.timeout(0.5):
                    await server.wait_closed()
            except TimeoutError:
                pass
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for hook in reversed(self._close_hooks):
            try:
                result = hook()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("error while closing")
        if self.logs is not None:
            self.logs.close()
        log.info("minibroker stopped")

    def spawn(self, coro) -> asyncio.Task:
        """Run a background task owned by the broker (cancelled at stop)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def on_close(self, hook) -> None:
        self._close_hooks.append(hook)

    def connection_closed(self, conn: KafkaConnection) -> None:
        if self.fetch_sessions is not None:
            self.fetch_sessions.connection_closed(conn)

    # -- facts handlers ask for -----------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id

    def endpoint_for(self, listener: str | None = None) -> Endpoint:
        """The advertised endpoint of the listener a client came in on (first one by default)."""
        if listener is not None:
            for e in self.advertised:
                if e.listener == listener:
                    return e
        return self.advertised[0]

    @property
    def bootstrap_servers(self) -> str:
        e = self.bound[0]
        host = e.host or "127.0.0.1"
        return f"{host}:{e.port}"
