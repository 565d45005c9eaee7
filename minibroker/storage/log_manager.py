"""All partition logs of the broker's ``log.dirs``, the topics they belong to, and their upkeep.

Files at each log dir root: ``meta.properties`` (cluster and node id), the
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` of that dir's partitions,
``.kafka_cleanshutdown`` after a clean shutdown, and ``minibroker-topics.json`` (every topic's id,
partition count and config overrides; the same file in each dir, the first dir's copy wins).
See docs/storage.md.

Owner: the event loop thread. ``start_retention`` runs one background task that flushes per
``flush.ms``, fsyncs sealed segments in a worker thread, applies retention every
``log.retention.check.interval.ms`` and writes checkpoints every
``log.flush.offset.checkpoint.interval.ms``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage import checkpoints as ckpt
from minibroker.storage.partition_log import PartitionLog
from minibroker.storage.topic_config import broker_setting, effective_topic_config

__all__ = ["LogManager", "TopicInfo", "TOPICS_FILE"]

log = logging.getLogger(__name__)

TOPICS_FILE = "minibroker-topics.json"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_SKIPPED_DIR_SUFFIXES = ("-delete", "-future", "-stray")


class TopicInfo(NamedTuple):
    id: bytes  # 16-byte uuid
    partitions: int
    configs: dict[str, str]  # overrides only; see LogManager.effective_config


class LogManager:
    """Owns the partition directories under ``log_dirs`` and the topic metadata file."""

    def __init__(
        self, log_dirs: list[str] | str, config: Mapping[str, Any] | None, node_id: int, *, clock=time.time
    ):
        if isinstance(log_dirs, str):
            log_dirs = [d for d in log_dirs.split(",") if d]
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.config = config if config is not None else {}
        self.node_id = int(node_id)
        self._clock = clock
        self._cluster_id: str | None = None
        self._topics: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self._task: asyncio.Task | None = None
        self._loaded = False
        self.had_clean_shutdown = False

    # ---- loading ------------------------------------------------------------------------------
    def load(self, progress=None) -> None:
        """Open every log dir: identity files, topics, partition logs (recovering after an unclean
        shutdown), then remove the clean-shutdown markers so a crash from now on is unclean.

        ``progress(done, total, "topic-partition")``, if given, is called after each partition is
        opened, from this thread; it must be cheap and must not raise (the broker's startup progress
        line uses it while recovery of many segments runs)."""
        started = time.monotonic()
        cluster_ids = set()
        new_dirs = 0
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            props = ckpt.read_properties(os.path.join(d, ckpt.META_PROPERTIES))
            if props is None:
                new_dirs += 1
                continue
            if "node.id" in props and int(props["node.id"]) != self.node_id:
                raise KafkaError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"{d} belongs to node {props['node.id']}, this is node {self.node_id}",
                )
            if props.get("cluster.id"):
                cluster_ids.add(props["cluster.id"])
        if len(cluster_ids) > 1:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dirs disagree on cluster id: {cluster_ids}")
        self._cluster_id = cluster_ids.pop() if cluster_ids else ckpt.uuid_to_str(ckpt.random_uuid())
        for d in self.log_dirs:
            path = os.path.join(d, ckpt.META_PROPERTIES)
            props = ckpt.read_properties(path)
            if props is None or props.get("cluster.id") != self._cluster_id:
                ckpt.write_properties(
                    path, {"cluster.id": self._cluster_id, "node.id": str(self.node_id), "version": "1"}
                )

        self._topics = self._read_topics_file()
        clean_dirs = {d: os.path.exists(os.path.join(d, ckpt.CLEAN_SHUTDOWN_FILE)) for d in self.log_dirs}
        self.had_clean_shutdown = all(clean_dirs.values())
        found: dict[tuple[str, int], tuple[str, str]] = {}  # (topic, p) -> (log dir, partition dir)
        for d in self.log_dirs:
            for name in os.listdir(d):
                full = os.path.join(d, name)
                if not os.path.isdir(full):
                    continue
                if name.endswith(_SKIPPED_DIR_SUFFIXES) or "-" not in name:
                    if name.endswith("-delete"):
                        _rmtree(full)
                    continue
                topic, _, part = name.rpartition("-")
                if not part.isdigit():
                    continue
                if (topic, int(part)) in found:
                    log.error(
                        "partition %s exists in two log dirs; using %s", name, found[(topic, int(part))][0]
                    )
                    continue
                found[(topic, int(part))] = (d, full)
        # Topics only known from their directories (e.g. the topics file was lost): adopt them.
        for (topic, _partition), (_d, full) in sorted(found.items()):
            if topic in self._topics:
                continue
            try:
                topic_id = ckpt.read_partition_metadata(os.path.join(full, ckpt.PARTITION_METADATA))
            except (ckpt.CheckpointError, ValueError):
                topic_id = None
            parts = 1 + max(p for (t, p) in found if t == topic)
            self._topics[topic] = TopicInfo(topic_id or ckpt.random_uuid(), parts, {})
            log.warning("adopted topic %s (%d partitions) from its directories", topic, parts)

        opened, total = 0, len(found)
        for d in self.log_dirs:
            recovery = self._read_checkpoint(os.path.join(d, ckpt.RECOVERY_POINT_CHECKPOINT))
            starts = self._read_checkpoint(os.path.join(d, ckpt.LOG_START_OFFSET_CHECKPOINT))
            for (topic, partition), (log_dir, full) in found.items():
                if log_dir != d:
                    continue
                info = self._topics[topic]
                if partition >= info.partitions:
                    log.warning("ignoring stray partition dir %s", full)
                    continue
                plog = PartitionLog.open(
                    full,
                    topic,
                    partition,
                    info.id,
                    self.effective_config(topic),
                    log_start_offset=starts.get((topic, partition), 0),
                    recovery_point=recovery.get((topic, partition), 0),
                    clean=clean_dirs[d],
                    clock=self._clock,
                )
                self._register(plog, d)
                opened += 1
                if progress is not None:  # e.g. the broker's startup progress line
                    progress(opened, total, f"{topic}-{partition}")
        for topic, info in self._topics.items():  # partitions whose dirs are missing
            for partition in range(info.partitions):
                if (topic, partition) not in self._logs:
                    log.warning("partition %s-%d had no directory; creating it empty", topic, partition)
                    self._create_log(topic, partition, info)
        self._write_topics_file()
        self.write_checkpoints()
        for d in self.log_dirs:
            marker = os.path.join(d, ckpt.CLEAN_SHUTDOWN_FILE)
            if os.path.exists(marker):
                os.unlink(marker)
                ckpt.fsync_dir(d)
        self._loaded = True
        log.info(
            "loaded %d partitions of %d topics from %s in %.3f s (%s shutdown)",
            len(self._logs),
            len(self._topics),
            self.log_dirs,
            time.monotonic() - started,
            "new log dir, no previous"
            if new_dirs == len(self.log_dirs)
            else "clean"
            if self.had_clean_shutdown
            else "unclean",
        )

    @staticmethod
    def _read_checkpoint(path: str) -> dict[tuple[str, int], int]:
        try:
            return ckpt.read_offset_checkpoint(path)
        except ckpt.CheckpointError as exc:
            log.warning("ignoring %s", exc)
            return {}

    def _read_topics_file(self) -> dict[str, TopicInfo]:
        for d in self.log_dirs:
            path = os.path.join(d, TOPICS_FILE)
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
            except FileNotFoundError:
                continue
            except ValueError as exc:
                log.error("cannot parse %s: %s", path, exc)
                continue
            if doc.get("version") != 1:
                raise KafkaError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"{path}: unknown version {doc.get('version')}"
                )
            return {
                name: TopicInfo(
                    ckpt.str_to_uuid(t["topic_id"]),
                    int(t["partitions"]),
                    {k: str(v) for k, v in t.get("configs", {}).items()},
                )
                for name, t in doc["topics"].items()
            }
        return {}

    def _write_topics_file(self) -> None:
        text = _topics_text(self._topics)
        for d in self.log_dirs:  # a missing file reads as no topics: none is written for none
            ckpt.write_atomically(os.path.join(d, TOPICS_FILE), text, empty=_topics_text({}))

    # ---- queries ------------------------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            raise RuntimeError("LogManager.load() has not run")
        return self._cluster_id

    @property
    def topics(self) -> dict[str, TopicInfo]:
        """name -> TopicInfo (a copy)."""
        return dict(self._topics)

    def topic_name(self, topic_id: bytes) -> str | None:
        for name, info in self._topics.items():
            if info.id == topic_id:
                return name
        return None

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        try:
            return self._logs[(topic, partition)]
        except KeyError:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not here"
            ) from None

    def logs(self) -> Iterator[PartitionLog]:
        return iter(list(self._logs.values()))

    def default_topic_config(self) -> dict[str, Any]:
        return effective_topic_config(self.config)

    def effective_config(self, topic: str) -> dict[str, Any]:
        """Every topic-level setting of ``topic`` with overrides applied over the broker defaults."""
        info = self._topics.get(topic)
        return effective_topic_config(self.config, info.configs if info else None)

    # ---- topic changes ------------------------------------------------------------------------
    def _validated(self, configs: Mapping[str, Any] | None) -> dict[str, str]:
        overrides = {
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in (configs or {}).items()
            if v is not None
        }
        try:
            effective = effective_topic_config(self.config, overrides)
        except (TypeError, ValueError) as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid topic config: {exc}") from exc
        if effective["segment.bytes"] < 14 or effective["segment.bytes"] > 2**31 - 1:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "segment.bytes must be in [14, 2147483647]")
        if effective["segment.index.bytes"] < 8 or effective["index.interval.bytes"] < 0:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "segment.index.bytes must be >= 8")
        return overrides

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, Any] | None = None,
        topic_id: bytes | None = None,
    ) -> TopicInfo:
        if not _LEGAL_TOPIC.match(name) or name in (".", ".."):
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {name!r}")
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "the number of partitions must be at least 1")
        info = TopicInfo(topic_id or ckpt.random_uuid(), partitions, self._validated(configs))
        self._topics[name] = info
        self._write_topics_file()
        for partition in range(partitions):
            self._create_log(name, partition, info)
        self.write_checkpoints()
        return info

    def add_partitions(self, name: str, new_total: int) -> TopicInfo:
        info = self._topic(name)
        if new_total <= info.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {info.partitions} partitions; {new_total} would not add any",
            )
        old = info.partitions
        info = info._replace(partitions=new_total)
        self._topics[name] = info
        self._write_topics_file()
        for partition in range(old, new_total):
            self._create_log(name, partition, info)
        self.write_checkpoints()
        return info

    def delete_topic(self, name: str) -> None:
        info = self._topic(name)
        del self._topics[name]
        self._write_topics_file()
        for partition in range(info.partitions):
            plog = self._logs.pop((name, partition), None)
            self._dir_of.pop((name, partition), None)
            if plog is not None:
                plog.delete()
        self.write_checkpoints()

    def alter_topic_configs(self, name: str, configs: Mapping[str, Any]) -> TopicInfo:
        """Replace the topic's overrides with ``configs`` (None values are dropped), persist them
        and apply them to its live logs."""
        info = self._topic(name)._replace(configs=self._validated(configs))
        self._topics[name] = info
        self._write_topics_file()
        effective = self.effective_config(name)
        for partition in range(info.partitions):
            self._logs[(name, partition)].update_config(effective)
        return info

    def _topic(self, name: str) -> TopicInfo:
        try:
            return self._topics[name]
        except KeyError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}") from None

    def _create_log(self, topic: str, partition: int, info: TopicInfo) -> PartitionLog:
        counts = {d: 0 for d in self.log_dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        d = min(self.log_dirs, key=lambda x: counts[x])
        plog = PartitionLog.create(
            os.path.join(d, f"{topic}-{partition}"),
            topic,
            partition,
            info.id,
            self.effective_config(topic),
            clock=self._clock,
        )
        self._register(plog, d)
        return plog

    def _register(self, plog: PartitionLog, log_dir: str) -> None:
        key = (plog.topic, plog.partition)
        self._logs[key] = plog
        self._dir_of[key] = log_dir
        plog.on_log_start_offset_change = self._start_offset_changed

    def _start_offset_changed(self, plog: PartitionLog) -> None:
        d = self._dir_of.get((plog.topic, plog.partition))
        if d is not None:
            self._write_dir_checkpoint(d, ckpt.LOG_START_OFFSET_CHECKPOINT, lambda p: p.log_start_offset)

    # ---- checkpoints and upkeep ---------------------------------------------------------------
    def _write_dir_checkpoint(self, d: str, name: str, value) -> None:
        offsets = {key: value(plog) for key, plog in self._logs.items() if self._dir_of[key] == d}
        ckpt.write_offset_checkpoint(os.path.join(d, name), offsets)

    def write_checkpoints(self) -> None:
        """Recovery points and log start offsets of every partition, one file pair per log dir."""
        for d in self.log_dirs:
            self._write_dir_checkpoint(d, ckpt.RECOVERY_POINT_CHECKPOINT, lambda p: p.recovery_point)
            self._write_dir_checkpoint(d, ckpt.LOG_START_OFFSET_CHECKPOINT, lambda p: p.log_start_offset)

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        deleted = 0
        for plog in self.logs():
            try:
                deleted += plog.apply_retention(now_ms)
            except Exception:
                log.exception("retention of %s failed", plog)
        return deleted

    async def flush_sealed_segments(self) -> None:
        """fsync rolled segments in a worker thread, then advance the recovery points."""
        work = [(plog, plog.sealed_unflushed()) for plog in self.logs()]
        work = [(plog, segs) for plog, segs in work if segs]
        if not work:
            return
        files = [seg.file for _, segs in work for seg in segs if seg.file is not None]
        await asyncio.to_thread(_fsync_files, files)
        for plog, segs in work:
            if not plog.closed:
                plog.mark_flushed(segs)

    def start_retention(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task:
        """Start the background upkeep task (see the module docstring); returns it."""
        if self._task is None or self._task.done():
            loop = loop or asyncio.get_running_loop()
            self._task = loop.create_task(self._upkeep(), name="log-manager-upkeep")
        return self._task

    async def _upkeep(self) -> None:
        retention_ms = broker_setting(self.config, "log.retention.check.interval.ms")
        checkpoint_ms = broker_setting(self.config, "log.flush.offset.checkpoint.interval.ms")
        tick = max(0.01, min(retention_ms, checkpoint_ms, 1000) / 1000)
        now = time.monotonic()
        next_retention, next_checkpoint = now + retention_ms / 1000, now + checkpoint_ms / 1000
        while True:
            await asyncio.sleep(tick)
            try:
                for plog in self.logs():
                    plog.flush_if_due()
                await self.flush_sealed_segments()
                now = time.monotonic()
                if now >= next_retention:
                    next_retention = now + retention_ms / 1000
                    self.run_retention()
                if now >= next_checkpoint:
                    next_checkpoint = now + checkpoint_ms / 1000
                    self.write_checkpoints()
            except Exception:
                log.exception("log upkeep failed; retrying at the next tick")

    async def aclose(self) -> None:
        """Stop the upkeep task and close (flush, checkpoints, clean-shutdown marker)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self.close()

    def close(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown markers."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if not self._loaded:
            return
        failed = False
        for plog in self.logs():
            try:
                plog.close()
            except Exception:
                failed = True
                log.exception("closing %s failed", plog)
        self.write_checkpoints()
        if not failed:
            for d in self.log_dirs:
                with open(os.path.join(d, ckpt.CLEAN_SHUTDOWN_FILE), "w") as f:
                    f.flush()
                    os.fsync(f.fileno())
                ckpt.fsync_dir(d)
        self._loaded = False


def _fsync_files(files) -> None:
    for f in files:
        try:
            os.fsync(f.fileno())
        except (OSError, ValueError):
            pass


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _topics_text(topics: Mapping[str, TopicInfo]) -> str:
    doc = {
        "version": 1,
        "topics": {
            name: {
                "topic_id": ckpt.uuid_to_str(info.id),
                "partitions": info.partitions,
                "configs": dict(sorted(info.configs.items())),
            }
            for name, info in sorted(topics.items())
        },
    }
    return json.dumps(doc, indent=1) + "\n"
