"""The broker: listeners, the log manager, coordinators, and an orderly start and stop.

Owner of: the socket server (listeners, connection quotas, idle expiry), the set of live
connections and the background tasks.
Everything runs on one event loop; state has one owner each (logs: LogManager, groups:
the group coordinator, transactional ids: the transaction coordinator, producers: each partition's
producer state).
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
from minibroker.server.sockets import Listener, SocketServer, listen_socket

log = logging.getLogger("minibroker.broker")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ListenerBindError(OSError):
    """A listener (or ``metrics.port``) could not be bound; the message names which, and the setting."""


class LogDirError(OSError):
    """The data directory cannot be created, locked or used; the message names ``log.dirs`` (or
    ``log.dir``), where it was set, and the path."""


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
        # Built on first use by __getattr__ (minibroker/services/__init__.py, LAZY_SERVICES): replicas
        # (the ReplicaManager: appends, reads, producer state), fetch_sessions, groups (the group
        # coordinator), transactions, producer_ids, share_state, share_partitions,
        # share_sessions (KIP-932), client_quotas, authorizer (None unless authorizer.class.name is
        # set), scram_credentials, sasl_listeners.
        self.bound: list[Endpoint] = []
        self.advertised: list[Endpoint] = []
        self.socket_server: SocketServer | None = None  # accepting, connection quotas, idle expiry
        self._all_closed: asyncio.Event | None = None  # set in stop() once every connection is gone
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self.started_at = 0.0
        self.ready = asyncio.Event()
        self._close_hooks: list = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.metrics_http = None  # MetricsHttpServer (minibroker/server/metrics_http.py)
        # Extra routes of the metrics port, path prefix -> async handler(head, reader, writer), added
        # before start() by what sits above the server (the live view: minibroker/tools/live_view.py;
        # fault injection: minibroker/server/faults_http.py).
        self.metrics_mounts: dict = {}
        # Called with each append while a live-view page listens (ReplicaManager._append_validated);
        # None otherwise, so the append path pays one attribute check.
        self.append_feed = None
        # The live view's GroupEventRing while ui.enable is set: the group coordinators record joins,
        # syncs, heartbeats, leaves and rebalances in it; None otherwise (one check at each point).
        self.group_events = None
        self.faults = None  # FaultInjector (minibroker/server/faults.py) with fault.injection.enable=true

    def __getattr__(self, name: str):
        """A lazy service (minibroker/services/__init__.py) read for the first time: build it now, on
        the event loop, and keep it as a plain attribute (later reads never come here)."""
        from minibroker.services import LAZY_SERVICES

        build = LAZY_SERVICES.get(name)
        if build is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        loop = self.__dict__.get("_loop")
        if loop is not None and not loop.is_closed() and _running_loop() is not loop:
            # read from another thread (a test beside a thread-mode broker): built on the broker's loop
            async def build_there():
                return getattr(self, name)

            return asyncio.run_coroutine_threadsafe(build_there(), loop).result(30)
        service = build(self)
        setattr(self, name, service)
        log.debug("%s loaded on first use", name)
        return service

    def loaded(self, name: str) -> bool:
        """Whether the lazy service ``name`` is built (reading the attribute would build it)."""
        return name in vars(self)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start in the order that keeps a failed start from touching the data: read the TLS key
        stores, lock the log dirs, bind every listener (and ``metrics.port``), and only then load and
        recover the logs, then accept. A second broker on the same dirs, or a port in use, stops here
        with nothing written."""
        t0 = time.perf_counter()
        self._loop = asyncio.get_running_loop()  # where lazy services are built (__getattr__)
        from minibroker.storage import LogManager
        from minibroker.storage.log_manager import LogDirConflictError

        if self.config.source_of("log.message.format.version") != "default":
            from minibroker.config.message_format import deprecation_warning

            log.warning("%s", deprecation_warning("log.message.format.version",
                                                  self.config["log.message.format.version"]))
        # Dynamic configs first (a read, nothing written): TLS keys altered at run time apply to the
        # contexts built next, and topic configs inherit from them when the logs load.
        readable = self.load_dynamic_configs()
        if self.config["fault.injection.enable"]:  # refused here, before anything is bound or locked
            from minibroker.server.faults import enable as enable_faults

            self.faults = enable_faults(self)
        from minibroker.services.features import ensure_elr_min_isr

        # in memory here; saved once the dirs are locked, unless that would overwrite an unreadable file
        elr_min_isr_change = ensure_elr_min_isr(self.config)
        tls_by_listener = self._listener_tls()
        log_dirs = self.config.log_dirs
        self.logs = LogManager(log_dirs, self.config, self.node_id)
        try:
            self.logs.lock()  # raises LogDirLockedError naming the dir and the holder's pid
        except OSError as exc:  # missing and uncreatable, a file, read-only, no permission
            raise self._log_dir_error(exc) from exc
        listening: list[tuple[str, str, socket.socket]] = []  # bound, not yet handed to a server
        metrics_sock = None
        backlog = self.config["socket.listen.backlog.size"]
        recv_buffer = self.config["socket.receive.buffer.bytes"]
        try:
            for name, host, port in self.config.listener_endpoints():
                listening.append((name, host, self._bind(name, host, port, backlog, recv_buffer,
                                                         setting=self._setting("listeners"))))
            metrics_port = self.config["metrics.port"]
            metrics_host = listening[0][1] if listening else ""
            if metrics_port is not None:
                metrics_sock = self._bind("metrics.port", metrics_host, metrics_port, 128,
                                          setting=self._setting("metrics.port"))
            with StartupProgress("loading logs", log) as progress:  # a line every 5 s while recovery is slow
                try:
                    self.logs.load(progress=progress.update)
                except (LogDirError, LogDirConflictError):
                    raise
                except OSError as exc:  # e.g. a read-only dir: meta.properties cannot be written
                    raise self._log_dir_error(exc) from exc
            if elr_min_isr_change and readable:
                self.save_dynamic_configs()
                log.info("eligible leader replicas are on: %s", elr_min_isr_change)
            self._start_services()
            self.socket_server = SocketServer(self, self.config)
            protocols = self.config.security_protocol_map()
            self.socket_server.start([Listener(name, sock, protocols.get(name, "PLAINTEXT"),
                                               tls_by_listener.get(name))
                                      for name, _, sock in listening])
            self.bound = [Endpoint(name, host, sock.getsockname()[1]) for name, host, sock in listening]
            listening.clear()  # the socket server owns them now
            self.advertised = self._advertised_endpoints()
            if metrics_sock is not None:
                sock, metrics_sock = metrics_sock, None
                from minibroker.server.metrics_http import start_metrics_http  # only with metrics.port

                if self.faults is not None:
                    from minibroker.server.faults_http import serve_faults

                    serve_faults(self, self.faults)
                self.metrics_http = await start_metrics_http(self, metrics_host, sock)
        except BaseException:
            for sock in [s for _, _, s in listening] + [metrics_sock]:
                if sock is not None:
                    sock.close()
            if self.socket_server is not None:
                self.socket_server.close()
            self.logs.close()  # releases the locks; writes nothing if the logs never loaded
            raise
        self.logs.start_retention()
        self.logs.resume_moves()  # partition moves between log dirs a restart cut short
        self.started_at = time.time()
        self.ready.set()
        log.info("minibroker ready: node %d, cluster %s, listening on %s (advertised %s), data in %s, "
                 "started in %.0f ms", self.node_id, self.cluster_id,
                 ", ".join(f"{e.listener}://{e.host}:{e.port}" for e in self.bound),
                 ", ".join(f"{e.listener}://{e.host}:{e.port}" for e in self.advertised),
                 ", ".join(log_dirs), (time.perf_counter() - t0) * 1000)

    def _listener_tls(self) -> dict:
        """Each SSL and SASL_SSL listener's TLS settings (minibroker/security/tls.py, imported only when
        there is one). Key stores and trust stores are read here: a bad one (TlsConfigError, naming the
        key and the file) stops start-up before anything is locked, bound or loaded."""
        protocols = self.config.security_protocol_map()
        if not any(protocols.get(name, "").endswith("SSL") for name, *_ in self.config.listener_endpoints()):
            return {}
        from minibroker.security.tls import TlsConfigError, is_tls_key, listener_tls

        try:
            return listener_tls(self.config)
        except TlsConfigError as exc:
            if not any(is_tls_key(k) for k in self.config.dynamic_values()):
                raise
            path = os.path.join(self.config.data_dir, self.DYNAMIC_CONFIGS_FILE)
            raise TlsConfigError(f"{exc}; the dynamic broker configs are kept in {path} (AlterConfigs can "
                                 "change them only while the broker runs)") from None

    def _setting(self, key: str) -> str:
        """``setting listeners (from --override)``: which config key, and where it was set."""
        source = self.config.source_of(key)
        if source == "env":
            from minibroker.config import key_to_env_var

            where = f"environment {key_to_env_var(key)}"
            if key == "listeners" and "KAFKA_LISTENERS" not in os.environ:
                where = "environment, derived from KAFKA_ADVERTISED_LISTENERS"
        else:
            where = {"file": "the config file", "override": "--override",
                     "default": "the default"}.get(source, source)
        return f"setting {key}, from {where}"

    def _log_dir_error(self, exc: OSError) -> LogDirError:
        config = self.config
        key = "log.dirs" if (config.source_of("log.dirs") != "default"
                             or config.source_of("log.dir") == "default") else "log.dir"
        path = os.path.abspath(config.data_dir)
        failed = os.path.abspath(str(exc.filename)) if exc.filename else ""
        for d in map(os.path.abspath, config.log_dirs):  # with several log dirs: the one that failed
            if failed == d or failed.startswith(d + os.sep):
                path = d
        detail = exc.strerror or str(exc)
        if os.path.exists(path) and not os.path.isdir(path):
            detail = "a file is there, not a directory"
        elif exc.filename and os.path.abspath(str(exc.filename)) != path:
            detail += f" ({exc.filename})"
        return LogDirError(f"cannot use data directory {path} ({self._setting(key)}): {detail}; "
                           f"point {key} at a directory this user can create and write")

    @staticmethod
    def _bind(name: str, host: str, port: int, backlog: int, recv_buffer: int = -1, *,
              setting: str = "") -> socket.socket:
        try:
            return listen_socket(host, port, backlog, recv_buffer)
        except OSError as exc:
            what = f"metrics.port {host}:{port}" if name == "metrics.port" else f"listener {name}://{host}:{port}"
            where = f" ({setting})" if setting else ""
            raise ListenerBindError(f"cannot bind {what}{where}: {exc.strerror or exc}") from exc

    # Dynamic broker configs (AlterConfigs on the broker resource) survive restarts, as Kafka keeps
    # them in its metadata: here a JSON file at the log dir root, rewritten on every change.
    DYNAMIC_CONFIGS_FILE = "minibroker-dynamic-configs.json"

    def load_dynamic_configs(self) -> bool:
        """Apply the saved dynamic layers; False when the file is there but unreadable."""
        from minibroker.storage.metadata_file import MetadataFileError, load_metadata

        if not os.path.isdir(self.config.data_dir):  # nothing saved yet; or unusable, which the lock reports
            return True
        try:
            saved = load_metadata(self.config.data_dir, self.DYNAMIC_CONFIGS_FILE, {})
        except MetadataFileError as e:  # settings, unlike ACLs or credentials: start on the static ones
            log.warning("ignoring unreadable dynamic configs: %s", e)
            return False
        for layer, cluster_default in (("broker", False), ("cluster_default", True)):
            for key, value in saved.get(layer, {}).items():
                try:
                    self.config.set_dynamic(key, value, cluster_default=cluster_default)
                except Exception as e:  # a key this version no longer accepts: keep starting
                    log.warning("ignoring saved dynamic config %s=%s: %s", key, value, e)
        return True

    def save_dynamic_configs(self) -> None:
        from minibroker.storage.metadata_file import save_metadata

        saved = {"broker": self.config.dynamic_values(), "cluster_default": self.config.dynamic_values(
            cluster_default=True)}
        save_metadata(self.config.data_dir, self.DYNAMIC_CONFIGS_FILE, saved)

    def validate_topic_configs(self, configs: dict) -> dict:
        from minibroker.config import validate_topic_configs

        validate_topic_configs(configs)
        return {k: v for k, v in configs.items() if v is not None}

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict):
        """Check and create a topic (minibroker/services/topic_admin.py); returns its TopicInfo. The
        coordinators create their internal topics through it: they sit below the services and do not
        import them, as Kafka's coordinators leave topic creation to the broker."""
        from minibroker.services.topic_admin import create_topic

        return create_topic(self, name, partitions, replication_factor, configs)

    def _start_services(self) -> None:
        """Caches beside the log, and the coordinators whose state exists (the rest load on first use)."""
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
        if self.socket_server is not None:
            self.socket_server.close()
        in_flight = [c.in_flight for c in self.connections if c.in_flight is not None]
        if in_flight:  # let requests being answered finish, briefly
            await asyncio.wait(in_flight, timeout=0.5)
        for conn in list(self.connections):
            conn.close()
        if self.connections:  # transports flush what they hold, briefly, then go
            self._all_closed = asyncio.Event()
            try:
                async with asyncio.timeout(0.5):
                    await self._all_closed.wait()
            except TimeoutError:
                pass
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
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
        if self.socket_server is not None:
            self.socket_server.release(conn)
        if self._all_closed is not None and not self.connections:
            self._all_closed.set()
        if self.loaded("fetch_sessions"):
            self.fetch_sessions.connection_closed(conn)
        if self.loaded("share_sessions"):  # its sessions end and their members' records are released
            self.share_sessions.connection_closed(conn)

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
