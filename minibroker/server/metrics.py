"""Broker-wide counters, their Prometheus text rendering, and progress lines for slow startup work.

``Metrics``: requests and latency per API, bytes in and out. Owner: the event loop thread
(plain attribute updates, no locks). ``render_prometheus(broker)`` reads them together with the
live state that needs no counter (open connections, log start/end offsets, consumer group lag);
it runs on the event loop too, so it sees one consistent moment. Served by the optional
``/metrics`` endpoint (minibroker/server/metrics_http.py).

``StartupProgress``: a periodic "still working" log line while the loop is blocked in
synchronous startup work (log recovery), from a helper thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time


class Metrics:
    def __init__(self) -> None:
        self.requests: collections.Counter[int] = collections.Counter()
        self.request_seconds: collections.Counter[int] = collections.Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self.connections_opened = 0

    def observe_request(self, api_key: int, seconds: float) -> None:
        self.requests[api_key] += 1
        self.request_seconds[api_key] += seconds


# -- Prometheus text format (version 0.0.4) ------------------------------------------------------

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(**labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(int(value))


class _Series:
    """Lines of one metric family: HELP, TYPE, then samples."""

    def __init__(self, out: list[str], name: str, kind: str, help_text: str):
        self.out = out
        self.name = name
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")

    def sample(self, value, **labels) -> None:
        self.out.append(f"{self.name}{_labels(**labels)} {_number(value)}")


def committed_offsets(groups) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, committed offset) from the group coordinator, if it exposes them.

    Uses the coordinator's public ``list_groups()`` and ``fetch_offsets(group, None)``; anything
    else (no coordinator yet, still loading ``__consumer_offsets``) gives no rows.
    """
    if groups is None or not hasattr(groups, "list_groups") or not hasattr(groups, "fetch_offsets"):
        return []
    try:
        listed = groups.list_groups()
    except Exception:  # COORDINATOR_LOAD_IN_PROGRESS and the like: no lag series this scrape
        return []
    rows = []
    for entry in listed:
        group_id = entry[0]
        try:
            offsets = groups.fetch_offsets(group_id, None)
        except Exception:
            continue
        for (topic, partition), value in offsets.items():
            if value is not None and value.offset >= 0:
                rows.append((group_id, topic, partition, value.offset))
    return sorted(rows)


def render_prometheus(broker) -> str:
    """Every series, as one Prometheus text exposition. Call on the broker's event loop."""
    from minibroker import __version__
    from minibroker.protocol.codec import API_NAMES

    m: Metrics = broker.metrics
    out: list[str] = []
    info = _Series(out, "minibroker_info", "gauge", "Constant 1, labelled with version and cluster id.")
    info.sample(1, version=__version__, cluster_id=broker.cluster_id if broker.logs is not None else "",
                node_id=broker.node_id)
    if broker.started_at:
        _Series(out, "minibroker_start_time_seconds", "gauge",
                "Unix time the broker became ready.").sample(round(broker.started_at, 3))

    requests = _Series(out, "minibroker_requests_total", "counter", "Requests answered, per API.")
    for key in sorted(m.requests):
        requests.sample(m.requests[key], api=API_NAMES.get(key, str(key)), api_key=key)
    seconds = _Series(out, "minibroker_request_seconds_total", "counter",
                      "Time spent handling requests (receive to response queued), per API; "
                      "divide by minibroker_requests_total for the mean latency.")
    for key in sorted(m.request_seconds):
        seconds.sample(float(m.request_seconds[key]), api=API_NAMES.get(key, str(key)), api_key=key)
    _Series(out, "minibroker_bytes_in_total", "counter",
            "Record batch bytes appended by Produce.").sample(m.bytes_in)
    _Series(out, "minibroker_bytes_out_total", "counter",
            "Bytes of responses sent in parts (responses carrying record data).").sample(m.bytes_out)
    _Series(out, "minibroker_connections", "gauge",
            "Open client connections.").sample(len(broker.connections))

    logs = list(broker.logs.logs()) if broker.logs is not None else []
    logs.sort(key=lambda p: (p.topic, p.partition))
    end = _Series(out, "minibroker_log_end_offset", "gauge", "Offset the next record appended will get.")
    for plog in logs:
        end.sample(plog.log_end_offset, topic=plog.topic, partition=plog.partition)
    start = _Series(out, "minibroker_log_start_offset", "gauge", "First offset still readable.")
    for plog in logs:
        start.sample(plog.log_start_offset, topic=plog.topic, partition=plog.partition)

    end_of = {(p.topic, p.partition): p.log_end_offset for p in logs}
    rows = committed_offsets(vars(broker).get("groups"))  # a scrape does not build the coordinator
    committed = _Series(out, "minibroker_consumer_group_committed_offset", "gauge",
                        "Last offset a consumer group committed.")
    for group_id, topic, partition, offset in rows:
        committed.sample(offset, group=group_id, topic=topic, partition=partition)
    lag = _Series(out, "minibroker_consumer_group_lag", "gauge",
                  "Log end offset minus the group's committed offset (0 if ahead).")
    for group_id, topic, partition, offset in rows:
        if (topic, partition) in end_of:
            lag.sample(max(0, end_of[(topic, partition)] - offset), group=group_id, topic=topic,
                       partition=partition)
    return "\n".join(out) + "\n"


# -- progress of long startup work ---------------------------------------------------------------

class StartupProgress:
    """Logs "<what>: still running after N s" every ``interval`` seconds until the block exits.

    Synchronous startup work (``LogManager.load()``) blocks the event loop, so the line comes from
    a helper thread. ``update(done, total, detail)`` may be called from the working thread to add
    "done/total (detail)" to the next line; it is the callback a storage hook should call (see
    docs/operations.md). The final line, with the elapsed time, is logged only when at least one
    progress line was, so a fast start stays quiet.

        with StartupProgress("loading logs", log) as progress:
            logs.load()  # or logs.load(progress=progress.update) once storage offers the hook
    """

    def __init__(self, what: str, logger: logging.Logger, interval: float = 5.0):
        self.what = what
        self.log = logger
        self.interval = interval
        self.lines = 0
        self._done: int | None = None
        self._total: int | None = None
        self._detail = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def update(self, done: int, total: int, detail: str = "") -> None:
        """Progress so far; cheap (three attribute writes), so call it per segment if you like."""
        self._done, self._total, self._detail = done, total, detail

    def _progress_text(self) -> str:
        if self._done is None:
            return ""
        pct = f" ({100 * self._done / self._total:.0f}%)" if self._total else ""
        detail = f", at {self._detail}" if self._detail else ""
        return f"; {self._done}/{self._total}{pct}{detail}"

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.lines += 1
            self.log.info("%s: still running after %.0f s%s", self.what, time.monotonic() - self._started,
                          self._progress_text())

    def __enter__(self) -> StartupProgress:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"progress: {self.what}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lines:
            self.log.info("%s: done after %.1f s", self.what, time.monotonic() - self._started)
