#!/usr/bin/env python3
"""Log compaction benchmarks (issue 18): each figure a ratio to a baseline measured in the same run.

    python scripts/bench_compaction.py --out /tmp/compaction.json
    python scripts/bench_compaction.py --quick            # smaller sizes, same shape, < 2 minutes
    python scripts/bench_compaction.py --only startup     # or: produce

1. startup: start-up of a broker whose ``__consumer_offsets`` saw 1M offset commits (quick: 100k) of
   100 groups, against one that saw 100 commits (goal: within 2x). A "commit" here is one committed
   offset, i.e. one offset-commit record: 100 simple (generation-less) groups, each committing its 10
   partitions of one topic per OffsetCommit request (v8, generation -1, empty member id), so each
   request is one batch of 10 records, exactly what the broker's group coordinator writes for a
   consumer committing 10 partitions. The requests are pre-encoded and pipelined over one socket (no
   client library in the way). The history is written with the cleaner running
   (``log.cleaner.backoff.ms`` small, ``offsets.topic.segment.bytes`` small so segments roll), then the
   run waits until the cleaner is quiescent (``/metrics``: no pass started for a while and every
   ``__consumer_offsets`` partition's dirty ratio under ``min.cleanable.dirty.ratio``). For contrast
   the same history is written to another data dir with ``log.cleaner.enable=false``. The three data
   dirs (baseline, cleaned, uncleaned) are started in turn, ``--reps`` times each, a fresh process
   every time: process start to "minibroker ready" in its log, and to the group coordinator's
   "loaded N groups from M records" line (loading runs after ready, in the background). Page cache
   warm in every case.
2. produce: produce p99 latency while the cleaner runs on a 1 GiB (quick: 64 MiB) compacted log,
   against the same load with the cleaner disabled, then idle. The log is filled by confluent-kafka
   (1 KiB values, ``--keys`` distinct keys written round-robin, so every key is overwritten many
   times) into a ``cleanup.policy=compact`` topic with ``segment.bytes`` 64 MiB (quick: 8 MiB), with the
   cleaner off. Then three phases on that data dir, each with the same load: one confluent-kafka
   producer, acks=1, linger 0, one 1 KiB record at a time to another topic (produce, then flush:
   each send's latency), paced at ``--rate`` records/s:
   A. a fresh broker with ``log.cleaner.enable=false`` (baseline);
   B. a fresh broker with the cleaner on: samples from the producer's warm-up end until the log
      line saying the pass over the compacted log finished;
   C. the same broker after that pass (cleaner idle).
   Reported: p50/p99/max of each, B/A and B/C ratios of p99, the pass's duration and broker CPU.
   With ``--stall-ms N``: every broker runs a watchdog thread (``STALL_WATCHDOG``, loaded through a
   ``sitecustomize`` in the temp dir) that notes each time its event loop did not tick for N ms and
   where the main thread was meanwhile (stack samples every 5 ms); the stalls of each phase are
   reported with their place in minibroker's code. It costs a thread waking every 5 ms: leave it off
   for the latency figures.

Results: JSON (``--out``) and a summary on stdout. Nothing is written to docs/. Temp dirs are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import bench  # noqa: E402  (helpers: free_port, bench_env, create_topic, versions, machine, ...)

from minibroker.protocol import codec  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
OFFSET_COMMIT = 8
OFFSET_COMMIT_VERSION = 8
READY_RE = re.compile(r"minibroker ready")
LOADED_RE = re.compile(r"loaded (\d+) groups from (\d+) records of __consumer_offsets")
STALL_LOG_ENV = "MB_BENCH_STALL_LOG"
STALL_MS_ENV = "MB_BENCH_STALL_MS"
# The broker-side watchdog of --stall-ms, written as sitecustomize.py (Python imports it at start in
# every process started with that directory on PYTHONPATH; it acts only in `minibroker serve`). A
# heartbeat callback every 10 ms on the loop `asyncio.run` runs (uvloop or not); a thread checks every
# 5 ms and, while the heartbeat is late by more than the threshold, samples the main thread's stack.
# One JSON line per stall: wall time at its start, duration, samples by innermost minibroker frame.
STALL_WATCHDOG = r'''
import asyncio, json, os, sys, threading, time, traceback

def _install(path, threshold_s):
    out = open(path, "a", buffering=1)
    last, main = [time.monotonic()], threading.main_thread().ident
    run = asyncio.run

    def beat(loop):
        last[0] = time.monotonic()
        loop.call_later(0.01, beat, loop)

    async def with_heartbeat(coro):
        beat(asyncio.get_running_loop())
        return await coro

    asyncio.run = lambda coro, **kw: run(with_heartbeat(coro), **kw)

    def where(frame):
        frames = traceback.extract_stack(frame)
        ours = [f for f in frames if "/minibroker/" in f.filename]
        pick = ours[-1] if ours else frames[-1]
        inner = frames[-1]
        name = pick.filename.rsplit("/minibroker/", 1)[-1]
        if name == "cli.py" and pick.name == "cmd_serve":  # no Python frame of ours under the loop's run
            return "the loop itself (its C code, or the process not running)"
        return f"{name}:{pick.lineno} {pick.name}" + (f" > {inner.name}" if inner is not pick else "")

    def watch():
        stall = None
        while True:
            time.sleep(0.005)
            late = time.monotonic() - last[0]
            if late > threshold_s:
                if stall is None:
                    stall = {"pid": os.getpid(), "t": time.time() - late, "at": {}}
                frame = sys._current_frames().get(main)
                if frame is not None:
                    key = where(frame)
                    stall["at"][key] = stall["at"].get(key, 0) + 1
            elif stall is not None:
                stall["ms"] = round((time.time() - stall["t"]) * 1000, 1)
                out.write(json.dumps(stall) + "\n")
                stall = None

    threading.Thread(target=watch, name="bench-stall-watchdog", daemon=True).start()

if os.environ.get("MB_BENCH_STALL_LOG") and sys.orig_argv[1:4] == ["-m", "minibroker", "serve"]:
    _install(os.environ["MB_BENCH_STALL_LOG"], float(os.environ["MB_BENCH_STALL_MS"]) / 1000)
'''
STALL_SITE: dict | None = None  # with --stall-ms: {"dir": sitecustomize's dir, "log": path, "ms": N}


def setup_stall_watchdog(root: str, ms: float) -> None:
    global STALL_SITE
    site = os.path.join(root, "stall-site")
    os.makedirs(site)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(STALL_WATCHDOG)
    STALL_SITE = {"dir": site, "log": os.path.join(root, "stalls.jsonl"), "ms": ms}


def stalls_between(pid: int, t0: float, t1: float) -> dict:
    """The watchdog's stalls of broker ``pid`` that began in [t0, t1] (wall clock): count, longest,
    and the five longest with the places their stack samples were taken most."""
    if STALL_SITE is None or not os.path.exists(STALL_SITE["log"]):
        return {}
    with open(STALL_SITE["log"]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r["pid"] == pid and t0 <= r["t"] <= t1]
    rows.sort(key=lambda r: -r["ms"])
    worst = [
        {"ms": r["ms"], "at_s": round(r["t"] - t0, 2),
         "where": sorted(r["at"].items(), key=lambda kv: -kv[1])[:3]}
        for r in rows[:5]
    ]
    return {"over_ms": STALL_SITE["ms"], "count": len(rows), "max_ms": rows[0]["ms"] if rows else 0.0,
            "worst": worst}


# ------------------------------------------------------------------------------------------------
# a broker process whose log lines are timestamped as they arrive


class LoggedBroker:
    """``python -m minibroker serve --log-level INFO`` on a given data dir; every stdout/stderr line
    is kept with the seconds since just before ``Popen``."""

    def __init__(self, data_dir: str, overrides: dict[str, str] | None = None, metrics: bool = False):
        self.dir = data_dir
        self.port = bench.free_port()
        self.metrics_port = bench.free_port() if metrics else None
        self.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": data_dir,
            "group.initial.rebalance.delay.ms": "0",
            **(overrides or {}),
        }
        if self.metrics_port:
            self.overrides["metrics.port"] = str(self.metrics_port)
        self.proc: subprocess.Popen | None = None
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self.t0 = 0.0

    def start(self, timeout: float = 60.0) -> LoggedBroker:
        cmd = [sys.executable, "-m", "minibroker", "serve", "--log-level", "INFO"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        self.t0 = time.perf_counter()
        env = bench.bench_env()
        if STALL_SITE is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (STALL_SITE["dir"], env.get("PYTHONPATH")) if p)
            env[STALL_LOG_ENV] = STALL_SITE["log"]
            env[STALL_MS_ENV] = str(STALL_SITE["ms"])
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )
        threading.Thread(target=self._reader, args=(self.proc.stdout,), daemon=True).start()
        self.wait_line(READY_RE, timeout)
        return self

    def _reader(self, stream) -> None:
        for raw in stream:
            t = time.perf_counter() - self.t0
            with self._cond:
                self.lines.append((t, raw.decode("utf-8", "replace").rstrip()))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, regex: re.Pattern, timeout: float, after: int = 0) -> tuple[float, re.Match, int]:
        """(seconds since start, match, line index) of the first line from index ``after`` matching."""
        deadline = time.perf_counter() + timeout
        i = after
        with self._cond:
            while True:
                while i < len(self.lines):
                    m = regex.search(self.lines[i][1])
                    if m:
                        return self.lines[i][0], m, i
                    i += 1
                if self.proc.poll() is not None and i >= len(self.lines):
                    tail = "\n".join(line for _, line in self.lines[-30:])
                    raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{tail}")
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise TimeoutError(f"no line matching {regex.pattern!r} in {timeout} s")
                self._cond.wait(min(left, 0.5))

    def find_lines(self, regex: re.Pattern) -> list[tuple[float, re.Match]]:
        with self._cond:
            return [(t, m) for t, line in self.lines if (m := regex.search(line))]

    def metrics(self) -> dict:
        """The cleaner's series from /metrics: runs, bytes, and dirty ratios per (topic, partition)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {"ratios": {}}
        for line in text.splitlines():
            if line.startswith("minibroker_log_cleaner_dirty_ratio{"):
                labels, value = line.rsplit(" ", 1)
                topic = re.search(r'topic="([^"]*)"', labels).group(1)
                part = int(re.search(r'partition="(\d+)"', labels).group(1))
                out["ratios"][(topic, part)] = float(value)
            elif line.startswith("minibroker_log_cleaner_") and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name.replace("minibroker_log_cleaner_", "")] = float(value)
        return out

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# ------------------------------------------------------------------------------------------------
# 1. __consumer_offsets start-up


def offset_commit_frames(topic: str, groups: int, partitions: int, rounds: int):
    """Pre-encoded OffsetCommit v8 requests of simple groups: round r commits offset r*100+p of each of
    a group's ``partitions``; rounds interleave the groups as concurrent consumers would."""
    corr = 0
    for r in range(rounds):
        for g in range(groups):
            corr += 1
            body = {
                "group_id": f"group-{g:03d}",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": r * 100 + p,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                            for p in range(partitions)
                        ],
                    }
                ],
            }
            yield corr, codec.encode_request(OFFSET_COMMIT, OFFSET_COMMIT_VERSION, corr, body, "bench-commit")


def write_commits(port: int, topic: str, groups: int, partitions: int, rounds: int) -> dict:
    """Send every request pipelined on one connection (a sender thread; responses read and checked
    here). Returns counts and seconds."""
    total = groups * rounds
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    error: list[BaseException] = []
    window = threading.Semaphore(256)  # requests in flight

    def sender():
        try:
            batch = []
            for _, frame in offset_commit_frames(topic, groups, partitions, rounds):
                window.acquire()
                batch.append(frame)
                if len(batch) >= 32:
                    sock.sendall(b"".join(batch))
                    batch = []
            if batch:
                sock.sendall(b"".join(batch))
        except BaseException as e:  # noqa: BLE001
            error.append(e)

    t0 = time.perf_counter()
    th = threading.Thread(target=sender, daemon=True)
    th.start()
    buf = bytearray()
    seen = bad = 0
    expected = 1
    while seen < total:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError(f"broker closed the connection after {seen} responses: {error}")
        buf += chunk
        bounds, used = bench.frame_bounds(buf)
        for start, end in bounds:
            corr, resp = codec.decode_response(OFFSET_COMMIT, OFFSET_COMMIT_VERSION, bytes(buf[start:end]))
            if corr != expected:
                raise RuntimeError(f"correlation {corr} != {expected}")
            expected += 1
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        bad += 1
            seen += 1
            window.release()
        del buf[:used]
    th.join()
    sock.close()
    if error:
        raise error[0]
    if bad:
        raise RuntimeError(f"{bad} partitions of OffsetCommit answered with an error")
    return {"requests": total, "records": total * partitions, "seconds": time.perf_counter() - t0}


def offsets_dir_facts(data_dir: str) -> dict:
    segs = size = 0
    for d in os.listdir(data_dir):
        if d.startswith("__consumer_offsets-"):
            for f in os.listdir(os.path.join(data_dir, d)):
                if f.endswith(".log"):
                    segs += 1
                    size += os.path.getsize(os.path.join(data_dir, d, f))
    return {"segments": segs, "log_bytes": size}


def wait_cleaner_quiet(
    broker: LoggedBroker, topic: str, min_ratio: float, quiet_s: float, timeout: float
) -> dict:
    """Until no pass has started for ``quiet_s`` and every partition of ``topic`` is under the ratio."""
    t0 = time.perf_counter()
    last_runs, last_change = -1.0, time.perf_counter()
    while True:
        m = broker.metrics()
        runs = m.get("runs_total", 0.0)
        if runs != last_runs:
            last_runs, last_change = runs, time.perf_counter()
        ratios = [v for (t, _), v in m["ratios"].items() if t == topic]
        if time.perf_counter() - last_change >= quiet_s and all(v < min_ratio for v in ratios):
            m["waited_s"] = time.perf_counter() - t0
            m["max_dirty_ratio"] = max(ratios, default=0.0)
            m.pop("ratios")
            return m
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(
                f"cleaner not quiet after {timeout} s (runs {runs}, ratios max {max(ratios, default=0):.2f})"
            )
        time.sleep(0.5)


def fill_offsets_dir(
    data_dir: str, overrides: dict, commits: int, groups: int, partitions: int, cleaner: bool
) -> dict:
    rounds = max(1, commits // (groups * partitions))
    ov = {**overrides, "log.cleaner.enable": "true" if cleaner else "false"}
    broker = LoggedBroker(data_dir, ov, metrics=cleaner).start()
    try:
        bench.create_topic(broker.port, "events", partitions)
        out = write_commits(broker.port, "events", groups, partitions, rounds)
        if cleaner:
            out["cleaner"] = wait_cleaner_quiet(
                broker,
                "__consumer_offsets",
                float(ov.get("log.cleaner.min.cleanable.ratio", 0.5)),
                quiet_s=max(3.0, 20 * int(ov["log.cleaner.backoff.ms"]) / 1000),
                timeout=900,
            )
            out["cleaner_passes_logged"] = len(
                broker.find_lines(re.compile(r"__consumer_offsets-\d+: cleaned"))
            )
    finally:
        broker.stop()
    out.update(offsets_dir_facts(data_dir))
    return out


def time_startup(data_dir: str, overrides: dict) -> dict:
    broker = LoggedBroker(data_dir, overrides).start()
    try:
        ready = broker.wait_line(READY_RE, 60)[0]
        loaded, m, _ = broker.wait_line(LOADED_RE, 600)
        return {"ready_s": ready, "loaded_s": loaded, "groups": int(m.group(1)), "records": int(m.group(2))}
    finally:
        broker.stop()


def summarize(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "all": values}


def bench_startup(opts, root: str) -> dict:
    groups, partitions = 100, 10
    commits = opts.commits
    seg = str(opts.offsets_segment_bytes)
    common = {
        "offsets.topic.segment.bytes": seg,
        "log.cleaner.backoff.ms": str(opts.backoff_ms),
        "log.segment.delete.delay.ms": "1000",
    }
    dirs = {k: os.path.join(root, f"offsets-{k}") for k in ("baseline", "cleaned", "uncleaned")}
    fills = {}
    print("[startup] baseline: 100 commits of 100 groups", flush=True)
    # 100 commits of 100 groups: one request of one partition each, cleaner on (nothing to clean)
    fills["baseline"] = fill_offsets_dir(dirs["baseline"], common, 100, groups, 1, cleaner=True)
    print(f"[startup] cleaned: {commits} commits, cleaner on", flush=True)
    fills["cleaned"] = fill_offsets_dir(dirs["cleaned"], common, commits, groups, partitions, cleaner=True)
    print(f"  {fills['cleaned']}", flush=True)
    print(f"[startup] uncleaned: {commits} commits, log.cleaner.enable=false", flush=True)
    fills["uncleaned"] = fill_offsets_dir(
        dirs["uncleaned"], common, commits, groups, partitions, cleaner=False
    )
    print(f"  {fills['uncleaned']}", flush=True)
    runs = {k: [] for k in dirs}
    for rep in range(opts.reps):
        for k, d in dirs.items():
            ov = {**common, "log.cleaner.enable": "false" if k == "uncleaned" else "true"}
            r = time_startup(d, ov)
            runs[k].append(r)
            print(
                f"  rep {rep} {k}: ready {r['ready_s'] * 1000:.0f} ms, loaded {r['loaded_s'] * 1000:.0f} ms "
                f"({r['groups']} groups, {r['records']} records)",
                flush=True,
            )
    out = {
        "groups": groups,
        "partitions_per_group": partitions,
        "commits": commits,
        "offsets.topic.segment.bytes": int(seg),
        "log.cleaner.backoff.ms": opts.backoff_ms,
        "fills": fills,
        "runs": runs,
        "cases": {},
    }
    for k in dirs:
        out["cases"][k] = {
            "ready_s": summarize([r["ready_s"] for r in runs[k]]),
            "loaded_s": summarize([r["loaded_s"] for r in runs[k]]),
            "records_loaded": runs[k][-1]["records"],
            "groups_loaded": runs[k][-1]["groups"],
            **offsets_dir_facts(dirs[k]),
        }
    base = out["cases"]["baseline"]
    for k in ("cleaned", "uncleaned"):
        c = out["cases"][k]
        c["ratio_ready"] = c["ready_s"]["median"] / base["ready_s"]["median"]
        c["ratio_loaded"] = c["loaded_s"]["median"] / base["loaded_s"]["median"]
    return out


# ------------------------------------------------------------------------------------------------
# 2. produce latency while cleaning


def fill_compacted(bootstrap: str, topic: str, total_bytes: int, keys: int, size: int) -> dict:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    n = total_bytes // (size + 30)  # ~30 B of record and batch overhead per 1 KiB record
    base = os.urandom(size // 2).hex().encode()[:size]
    key_list = [f"key-{i:06d}".encode() for i in range(keys)]
    t0 = time.perf_counter()
    for i in range(n):
        value = b"%012d" % i + base[12:]
        while True:
            try:
                p.produce(topic, value, key=key_list[i % keys], partition=0)
                break
            except BufferError:
                p.poll(0.001)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(600):
        raise RuntimeError("fill did not drain in 600 s")
    return {"records": n, "keys": keys, "value_bytes": size, "seconds": time.perf_counter() - t0}


def log_bytes(path: str) -> int:
    """Bytes of the ``.log`` files of a partition dir (indexes are sparse and preallocated)."""
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))


def set_topic_config(port: int, topic: str, key: str, value: str) -> None:
    from minibroker.tools.wire import WireClient

    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": topic,
                "configs": [{"name": key, "config_operation": 0, "value": value}],
            }
        ],
        "validate_only": False,
    }
    with WireClient("127.0.0.1", port, timeout=30) as c:
        resp = c.request(44, 0, body)
    codes = [r.error_code for r in resp.responses]
    if any(codes):
        raise RuntimeError(f"IncrementalAlterConfigs {topic} {key}={value}: {codes}")


class Load:
    """One confluent-kafka producer: acks=1, linger 0, one record at a time (produce + flush), paced."""

    def __init__(self, bootstrap: str, topic: str, rate: float, size: int):
        from confluent_kafka import Producer

        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "1",
                "linger.ms": 0,
                "enable.idempotence": False,
                "socket.nagle.disable": True,
            }
        )
        self.topic, self.interval, self.value = topic, 1.0 / rate, os.urandom(size)
        self.errors = 0

    def _cb(self, err, msg):
        if err is not None:
            self.errors += 1

    def run(
        self, seconds: float | None = None, until=None, max_seconds: float = 600
    ) -> list[tuple[float, float]]:
        """(send time, latency) per record, for ``seconds`` or until ``until()`` is true."""
        out = []
        t_start = time.perf_counter()
        nxt = t_start
        while True:
            now = time.perf_counter()
            if seconds is not None and now - t_start >= seconds:
                break
            if now - t_start >= max_seconds or (until is not None and until()):
                break
            if nxt > now:
                time.sleep(nxt - now)
            t0 = time.perf_counter()
            self.p.produce(self.topic, self.value, partition=0, on_delivery=self._cb)
            self.p.flush(30)
            out.append((t0, time.perf_counter() - t0))
            nxt += self.interval
            if nxt < t0 - 1.0:  # fell far behind (a stall): do not burst to catch up
                nxt = t0
        return out


def lat_stats(samples: list[tuple[float, float]]) -> dict:
    lat = [s for _, s in samples]
    if not lat:
        return {"n": 0}
    return {
        "n": len(lat),
        "p50_ms": bench.percentile_ms(lat, 0.50),
        "p99_ms": bench.percentile_ms(lat, 0.99),
        "p999_ms": bench.percentile_ms(lat, 0.999),
        "max_ms": max(lat) * 1000,
    }


CLEANED_RE = re.compile(r"compacted-0: cleaned up to offset (\d+) in ([\d.]+) s")
WORKER_RE = re.compile(r"log cleaner worker process (\d+) started in ([\d.]+) s")


def peak_rss_bytes(pid: int) -> int | None:
    """VmHWM (peak resident set) of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def bench_produce(opts, root: str) -> dict:
    data = os.path.join(root, "produce")
    seg = str(opts.segment_bytes)
    common = {
        "log.cleaner.backoff.ms": str(opts.backoff_ms),
        "log.segment.delete.delay.ms": "1000",
        "auto.create.topics.enable": "false",
    }
    print(f"[produce] filling {opts.log_bytes / MiB:.0f} MiB log ({opts.keys} keys)", flush=True)
    b = LoggedBroker(data, {**common, "log.cleaner.enable": "false"}).start()
    try:
        # cleanup.policy=delete (nothing expires) until the measured phase sets compact: the pass then
        # starts at a known moment, after the load's warm-up. The bytes are what a compacted topic
        # holds: every record has a key.
        bench.create_topic(
            b.port, "compacted", 1, {"cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": seg}
        )
        bench.create_topic(b.port, "load", 1)
        fill = fill_compacted(b.bootstrap, "compacted", opts.log_bytes, opts.keys, 1024)
    finally:
        b.stop()
    pdir = os.path.join(data, "compacted-0")
    fill["log_bytes"] = log_bytes(pdir)
    fill["segments"] = sum(f.endswith(".log") for f in os.listdir(pdir))
    print(f"  {fill}", flush=True)
    out = {
        "log_bytes_target": opts.log_bytes,
        "segment.bytes": int(seg),
        "rate": opts.rate,
        "record_bytes": 1024,
        "fill": fill,
        "phases": {},
    }

    def phase(broker, name, compact_after_warmup: bool, **kw):
        load = Load(broker.bootstrap, "load", opts.rate, 1024)
        load.run(seconds=opts.warmup)  # bootstrap, connection, first appends: not measured
        if compact_after_warmup:
            set_topic_config(broker.port, "compacted", "cleanup.policy", "compact")
        cpu0, t0, wall0 = bench.proc_cpu_seconds(broker.proc.pid), time.perf_counter(), time.time()
        samples = load.run(**kw)
        cpu = bench.proc_cpu_seconds(broker.proc.pid) - cpu0
        st = lat_stats(samples)
        st.update({"seconds": time.perf_counter() - t0, "broker_cpu_s": cpu, "errors": load.errors})
        if STALL_SITE is not None:
            time.sleep(0.1)  # a stall still open when the load stopped is written when it ends
            st["loop_stalls"] = stalls_between(broker.proc.pid, wall0, time.time())
        out["phases"][name] = st
        print(f"  {name}: {st}", flush=True)
        return samples

    # A: cleaner disabled, fresh broker; the topic turns compact after the warm-up as in B
    b = LoggedBroker(data, {**common, "log.cleaner.enable": "false"}).start()
    try:
        phase(b, "A_cleaner_disabled", True, seconds=opts.idle_seconds)
    finally:
        b.stop()
    # A left the topic compact: back to delete, so B's pass starts when B says so
    b = LoggedBroker(data, {**common, "log.cleaner.enable": "false"}).start()
    try:
        set_topic_config(b.port, "compacted", "cleanup.policy", "delete")
    finally:
        b.stop()
    # B: cleaner on; compact set after the warm-up, samples until the pass's log line.
    # C: the same broker once its pass ended (cleaner idle, backing off).
    b = LoggedBroker(data, {**common, "log.cleaner.enable": "true"}, metrics=True).start()
    try:
        done = lambda: bool(b.find_lines(CLEANED_RE))  # noqa: E731
        samples = phase(b, "B_cleaner_running", True, until=done, max_seconds=1200)
        passes = b.find_lines(CLEANED_RE)
        if not passes:
            raise RuntimeError("the cleaner pass did not finish")
        workers = b.find_lines(WORKER_RE)
        if workers:  # the worker process: its start cost and peak memory (still running: idle < 60 s)
            pid = int(workers[0][1].group(1))
            out["worker"] = {"pid": pid, "start_s": float(workers[0][1].group(2)),
                             "peak_rss_bytes": peak_rss_bytes(pid),
                             "broker_peak_rss_bytes": peak_rss_bytes(b.proc.pid)}
        out["pass_seconds"] = float(passes[0][1].group(2))
        out["pass_cleaned_to_offset"] = int(passes[0][1].group(1))
        out["cleaner_metrics"] = {k: v for k, v in b.metrics().items() if k != "ratios"}
        # the worst sends while cleaning, when they happened (seconds after the first sample)
        t_first = samples[0][0] if samples else 0.0
        worst = sorted(samples, key=lambda x: -x[1])[:10]
        out["B_worst_sends"] = [(round(t - t_first, 3), round(lat * 1000, 2)) for t, lat in worst]
        if out["phases"]["B_cleaner_running"]["n"] < 200:
            out["warning"] = "fewer than 200 samples while cleaning"
        phase(b, "C_cleaner_idle_after_pass", False, seconds=opts.idle_seconds)
    finally:
        b.stop()
    out["after_log_bytes"] = log_bytes(pdir)
    out["after_segments"] = sum(f.endswith(".log") for f in os.listdir(pdir))
    ph = out["phases"]
    out["ratio_p99_running_vs_disabled"] = (
        ph["B_cleaner_running"]["p99_ms"] / ph["A_cleaner_disabled"]["p99_ms"]
    )
    out["ratio_p99_running_vs_idle_after"] = (
        ph["B_cleaner_running"]["p99_ms"] / ph["C_cleaner_idle_after_pass"]["p99_ms"]
    )
    out["ratio_p50_running_vs_disabled"] = (
        ph["B_cleaner_running"]["p50_ms"] / ph["A_cleaner_disabled"]["p50_ms"]
    )
    return out


# ------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, same shape (< 2 minutes)")
    ap.add_argument("--only", default="startup,produce", help="startup,produce")
    ap.add_argument("--out", help="write the raw results as JSON to this file")
    ap.add_argument("--reps", type=int, help="start-ups per case (default 5, quick 3)")
    ap.add_argument("--commits", type=int, help="offset commits (records) of the big case (1M, quick 100k)")
    ap.add_argument(
        "--offsets-segment-bytes",
        type=int,
        help="offsets.topic.segment.bytes (64 KiB, quick 8 KiB: about 20 segments a partition either way)",
    )
    ap.add_argument("--backoff-ms", type=int, default=100, help="log.cleaner.backoff.ms (default 100)")
    ap.add_argument("--log-bytes", type=int, help="compacted log size (1 GiB, quick 64 MiB)")
    ap.add_argument(
        "--segment-bytes", type=int, help="segment.bytes of the compacted topic (64 MiB, quick 8 MiB)"
    )
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys of the compacted log")
    ap.add_argument("--rate", type=float, default=500.0, help="records/s of the latency load")
    ap.add_argument("--idle-seconds", type=float, help="length of the idle phases (20 s, quick 6 s)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of load not measured in each phase")
    ap.add_argument(
        "--stall-ms",
        type=float,
        default=0.0,
        help="run a loop-stall watchdog in each broker and report stalls longer than this (0: off)",
    )
    opts = ap.parse_args(argv)
    q = opts.quick
    opts.reps = opts.reps or (3 if q else 5)
    opts.commits = opts.commits or (100_000 if q else 1_000_000)
    opts.offsets_segment_bytes = opts.offsets_segment_bytes or (8 * 1024 if q else 64 * 1024)
    opts.log_bytes = opts.log_bytes or (64 * MiB if q else GiB)
    opts.segment_bytes = opts.segment_bytes or (8 * MiB if q else 64 * MiB)
    opts.idle_seconds = opts.idle_seconds or (6.0 if q else 20.0)
    only = set(opts.only.split(","))

    tmp_parent = tempfile.gettempdir()
    free = shutil.disk_usage(tmp_parent).free
    need = 3 * GiB
    if "produce" in only and free < need:
        print(
            f"refusing to run: {free / GiB:.1f} GiB free in {tmp_parent}, the produce benchmark needs "
            f"at least {need / GiB:.0f} GiB (a {opts.log_bytes / GiB:.2f} GiB log, its cleaned copy "
            "and the segments kept for file.delete.delay.ms)",
            file=sys.stderr,
        )
        return 2
    results = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "quick": q,
        "machine": bench.machine(),
        "versions": bench.versions(),
        "free_disk_gib": free / GiB,
    }
    root = tempfile.mkdtemp(prefix="mb-bench-compaction-")
    t0 = time.perf_counter()
    if opts.stall_ms > 0:
        setup_stall_watchdog(root, opts.stall_ms)
        results["stall_ms"] = opts.stall_ms
    try:
        if "startup" in only:
            results["startup"] = bench_startup(opts, root)
        if "produce" in only:
            results["produce"] = bench_produce(opts, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["total_seconds"] = time.perf_counter() - t0
    print_summary(results)
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(results, f, indent=1, default=str)
        print(f"raw results: {opts.out}")
    return 0


def print_summary(r: dict) -> None:
    print(
        f"\n== {r['when']} ({'quick' if r['quick'] else 'full'}), {r['machine']}, {r['total_seconds']:.0f} s"
    )
    s = r.get("startup")
    if s:
        print(
            f"start-up, __consumer_offsets with {s['commits']:,} commits of {s['groups']} groups "
            f"(offsets.topic.segment.bytes {s['offsets.topic.segment.bytes']}), "
            f"median of {len(s['runs']['baseline'])}:"
        )
        for k, c in s["cases"].items():
            extra = (
                f", ratio ready {c['ratio_ready']:.2f}, loaded {c['ratio_loaded']:.2f}"
                if "ratio_ready" in c
                else ""
            )
            print(
                f"  {k:10s}: ready {c['ready_s']['median'] * 1000:7.1f} ms, groups loaded "
                f"{c['loaded_s']['median'] * 1000:8.1f} ms ({c['groups_loaded']} groups, "
                f"{c['records_loaded']:,} records; {c['segments']} segments, {c['log_bytes']:,} B){extra}"
            )
    p = r.get("produce")
    if p:
        print(
            f"produce p99 while cleaning a {p['fill']['log_bytes'] / MiB:.0f} MiB compacted log "
            f"({p['fill']['records']:,} records, {p['fill']['keys']:,} keys, "
            f"{p['fill']['segments']} segments) -> "
            f"{p['after_log_bytes'] / MiB:.1f} MiB in {p['after_segments']} segments; "
            f"pass {p['pass_seconds']:.1f} s; load {p['rate']:.0f} records/s:"
        )
        for k, st in p["phases"].items():
            print(
                f"  {k:26s}: n {st['n']:6d}, p50 {st['p50_ms']:.2f} ms, p99 {st['p99_ms']:.2f} ms, "
                f"max {st['max_ms']:.1f} ms, broker CPU {st['broker_cpu_s']:.1f} s in {st['seconds']:.1f} s"
            )
            stalls = st.get("loop_stalls")
            if stalls is not None:
                print(f"    loop stalls over {stalls.get('over_ms', r.get('stall_ms'))} ms: "
                      f"{stalls.get('count', 0)}, longest {stalls.get('max_ms', 0.0):.0f} ms")
                for w in stalls.get("worst", []):
                    print(f"      {w['ms']:.0f} ms at +{w['at_s']} s: {w['where']}")
        w = p.get("worker")
        if w:
            rss = (w["peak_rss_bytes"] or 0) / MiB
            print(f"  cleaner worker process: started in {w['start_s'] * 1000:.0f} ms, "
                  f"peak RSS {rss:.1f} MiB (broker {(w['broker_peak_rss_bytes'] or 0) / MiB:.1f} MiB)")
        print(
            f"  ratio p99 running/disabled {p['ratio_p99_running_vs_disabled']:.2f}, "
            f"running/idle-after {p['ratio_p99_running_vs_idle_after']:.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
