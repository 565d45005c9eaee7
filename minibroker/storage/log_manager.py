"""All partition logs of the broker's ``log.dirs``, the topics they belong to, and their upkeep.

Files at each log dir root: ``meta.properties`` (cluster and node id), the
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` of that dir's partitions,
``.kafka_cleanshutdown`` after a clean shutdown, and ``minibroker-topics.json`` (every topic's id,
partition count and config overrides; the same file in each dir, the first dir's copy wins).
See docs/storage.md.

Owner: the event loop thread. ``start_retention`` runs one background task that flushes per
``flush.ms``, fsyncs sealed segments in a worker thread, applies retention every
``log.retention.check.interval.ms`` and writes checkpoints every
``log.flush.offset.checkpoint.interval.ms``, when it also lets index maps and writers unused since
the last time go (docs/storage.md, "File descriptors"); it also starts the ``LogCleaner``
(storage/cleaner.py) of compacted logs, which keeps ``cleaner-offset-checkpoint`` at each log dir root.
The cleaner is made when the first compacted topic exists (at load, creation or a config change), so a
broker without one never imports it.

Several log dirs (JBOD): each locked, with its own ``meta.properties`` (one cluster and node id, else
start-up is refused) and checkpoints; a new partition goes to the online dir holding the fewest; a
failed dir goes offline alone. ``move_partition`` (AlterReplicaLogDirs) moves a partition to another
dir through a ``-future`` copy (storage/log_dir_move.py) swapped in on the loop; start-up settles what
a crash left (``_settle_duplicates``; a ``-future`` dir of a move that did not commit is discarded and
the move started again by ``resume_moves``). See docs/storage.md, "Several log dirs".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import os
import string
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage import checkpoints as ckpt
from minibroker.storage.dir_lock import LogDirLock
from minibroker.storage.topic_config import broker_setting, effective_topic_config

if TYPE_CHECKING:  # each imported when first needed: a broker that has no use for it never does
    from minibroker.storage import log_dir_move as mv  # by a move, or a dir a move left
    from minibroker.storage.partition_log import PartitionLog  # with the first partition (_partition_log)

__all__ = ["LogDirConflictError", "LogManager", "TopicInfo", "TOPICS_FILE"]

log = logging.getLogger(__name__)

TOPICS_FILE = "minibroker-topics.json"
MAX_TOPIC_NAME_LENGTH = 249
# Kafka's legal topic name characters, checked with str.strip: no regex to compile at start-up
TOPIC_NAME_CHARS = string.ascii_letters + string.digits + "._-"
_SKIPPED_DIR_SUFFIXES = ("-delete", "-future", "-stray")
MOVE_CRASH_AT_ENV = "MINIBROKER_MOVE_CRASH_AT"  # log_dir_move's, named here: see LogManager.__init__


def is_legal_topic_name(name: str) -> bool:
    """1-249 of ``[a-zA-Z0-9._-]``, never ``.`` or ``..``, as Kafka's Topic.validate."""
    return (0 < len(name) <= MAX_TOPIC_NAME_LENGTH and not name.strip(TOPIC_NAME_CHARS)
            and name not in (".", ".."))


# A move's final step (on the loop, appends paused) copies at most about this much; more is left to
# another round in the worker thread, up to _MOVE_MAX_ROUNDS rounds.
_MOVE_FINAL_BYTES = 4 << 20
_MOVE_MAX_ROUNDS = 50


class LogDirConflictError(OSError):
    """The log dirs disagree (cluster or node id, a partition in two dirs): start-up is refused."""


class _Move:
    """A partition's move to another log dir in progress (LogManager._move)."""

    def __init__(self, topic: str, partition: int, source: str, destination: str, plog: PartitionLog):
        self.topic, self.partition = topic, partition
        self.source, self.destination = source, destination
        self.plog = plog
        self.copy: mv.MoveCopy | None = None
        self.copied_offset = 0  # every offset below it is in the future dir
        self.cancelled = False
        self.task: asyncio.Task | None = None


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
        self.cleaner = None  # LogCleaner, made with the first compacted topic, run by start_retention()
        self._loaded = False
        self._locks: list[LogDirLock] = []
        self.had_clean_shutdown = False
        # Log dirs a write failed in (full disk, I/O error, read-only file system) -> why. Their
        # partitions answer KAFKA_STORAGE_ERROR to appends and keep serving reads, until a restart.
        self.offline_dirs: dict[str, str] = {}
        self._moves: dict[tuple[str, int], _Move] = {}  # AlterReplicaLogDirs moves in progress
        # moves a restart cut short (their future dirs, found by load()) -> destination; resume_moves()
        self._moves_to_resume: dict[tuple[str, int], str] = {}
        self._move_crash = None  # tests: MINIBROKER_MOVE_CRASH_AT, whose module is imported only when set
        if MOVE_CRASH_AT_ENV in os.environ:
            from minibroker.storage import log_dir_move as mv

            self._move_crash = mv.move_crash_hook_from_env()
        self._delayed_deletes: list[asyncio.TimerHandle] = []  # moved partitions' old "-delete" dirs

    # ---- locking ------------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the ``.lock`` of every log dir (creating missing dirs), before anything else is
        read or written there; raises ``LogDirLockedError`` naming the dir (and holder's pid) when
        another broker has one. Released by ``close()``."""
        try:
            for d in self.log_dirs:
                os.makedirs(d, exist_ok=True)
                self._locks.append(LogDirLock(d).acquire())
        except BaseException:
            self.unlock()
            raise

    def unlock(self) -> None:
        for held in self._locks:
            held.release()
        self._locks = []

    # ---- loading ------------------------------------------------------------------------------
    def load(self, progress=None) -> None:
        """Open every log dir: identity files, topics, partition logs (recovering after an unclean
        shutdown), then remove the clean-shutdown markers so a crash from now on is unclean.

        ``progress(done, total, "topic-partition")``, if given, is called after each partition is
        opened, from this thread; it must be cheap and must not raise (the broker's startup progress
        line uses it while recovery of many segments runs)."""
        started = time.monotonic()
        cluster_ids: dict[str, list[str]] = {}  # cluster id -> the dirs that say so
        new_dirs = 0
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            props = ckpt.read_properties(os.path.join(d, ckpt.META_PROPERTIES))
            if props is None:
                new_dirs += 1
                continue
            if "node.id" in props and int(props["node.id"]) != self.node_id:
                raise LogDirConflictError(
                    f"log dir {d} belongs to node {props['node.id']} ({ckpt.META_PROPERTIES}), this is node "
                    f"{self.node_id}"
                )
            if props.get("cluster.id"):
                cluster_ids.setdefault(props["cluster.id"], []).append(d)
        if len(cluster_ids) > 1:  # as Kafka's meta.properties ensemble check: refuse to start
            said = "; ".join(f"{', '.join(dirs)}: cluster.id={cid}" for cid, dirs in cluster_ids.items())
            raise LogDirConflictError(f"the log dirs belong to different clusters ({ckpt.META_PROPERTIES}: "
                                      f"{said}); every dir of log.dirs must hold this node's data")
        self._cluster_id = next(iter(cluster_ids)) if cluster_ids else ckpt.uuid_to_str(ckpt.random_uuid())
        for d in self.log_dirs:
            path = os.path.join(d, ckpt.META_PROPERTIES)
            props = ckpt.read_properties(path)
            if props is None or props.get("cluster.id") != self._cluster_id:
                try:
                    ckpt.write_properties(
                        path, {"cluster.id": self._cluster_id, "node.id": str(self.node_id), "version": "1"}
                    )
                except OSError as exc:
                    self.dir_failed(d, exc, "writing meta.properties")

        self._topics = self._read_topics_file()
        clean_dirs = {d: os.path.exists(os.path.join(d, ckpt.CLEAN_SHUTDOWN_FILE)) for d in self.log_dirs}
        self.had_clean_shutdown = all(clean_dirs.values())
        candidates: dict[tuple[str, int], list[tuple[str, str]]] = {}  # (topic, p) -> [(log dir, dir)]
        futures: list[tuple[tuple[str, int], str]] = []
        for d in self.log_dirs:
            for name in sorted(os.listdir(d)):
                full = os.path.join(d, name)
                if not os.path.isdir(full):
                    continue
                if name.endswith(_SKIPPED_DIR_SUFFIXES) or "-" not in name:
                    if name.endswith("-delete"):
                        _rmtree(full)
                    elif name.endswith("-future"):  # a move's copy (storage/log_dir_move.py)
                        from minibroker.storage import log_dir_move as mv

                        if (key := mv.parse_future_dir(name)) is not None:
                            futures.append((key, full))
                    continue
                topic, _, part = name.rpartition("-")
                if not part.isdigit():
                    continue
                candidates.setdefault((topic, int(part)), []).append((d, full))
        found = {key: self._settle_duplicates(key, where) for key, where in candidates.items()}
        for key, full in futures:  # moves that did not commit: the source dir is intact
            if key in found:
                destination = os.path.dirname(full)
                log.warning("%s-%d: the move to %s did not finish before the last shutdown; it starts "
                            "again once the logs are loaded (its copy %s is discarded)", key[0], key[1],
                            destination, full)
                _rmtree(full)
                if destination != found[key][0]:
                    self._moves_to_resume[key] = destination
            else:
                log.error("%s is a partition move's copy, but %s-%d is in no log dir: left as it is, not "
                          "served", full, key[0], key[1])
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
                plog = self._open_log(d, full, topic, partition, info, starts, recovery, clean_dirs[d])
                if plog is None:
                    continue
                self._register(plog, d)
                opened += 1
                if progress is not None:  # e.g. the broker's startup progress line
                    progress(opened, total, f"{topic}-{partition}")
        for topic, info in self._topics.items():  # partitions whose dirs are missing
            for partition in range(info.partitions):
                if (topic, partition) not in self._logs:
                    log.warning("partition %s-%d had no directory; creating it empty", topic, partition)
                    try:
                        self._create_log(topic, partition, info)
                    except KafkaError as exc:  # no log dir to create it in
                        log.error("partition %s-%d is not served: %s", topic, partition, exc.message)
        self._try_write_topics_file()
        self.write_checkpoints()
        for d in self.log_dirs:
            marker = os.path.join(d, ckpt.CLEAN_SHUTDOWN_FILE)
            if os.path.exists(marker):
                try:
                    os.unlink(marker)
                    ckpt.fsync_dir(d)
                except OSError as exc:
                    self.dir_failed(d, exc, "removing the clean-shutdown marker")
        self._loaded = True
        self.start_cleaner_if_compacted()
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

    def _settle_duplicates(self, key: tuple[str, int], where: list[tuple[str, str]]) -> tuple[str, str]:
        """The one dir of a partition found in ``where`` (one or more (log dir, partition dir)).

        Two copies, one holding ``MOVED_FROM_FILE`` naming the other's log dir and the other's last
        segment as it was at the commit: a move committed (the copy was complete and fsynced before
        its rename) and then stopped before the source was renamed away: the moved copy wins, the
        source goes. Any other duplicate (a source written to after the marker was made, too) refuses
        start-up, naming the dirs, as Kafka's LogManager does: which one holds the data is not known."""
        marks = {full: _read_moved_from(full) for _, full in where}
        if len(where) == 2:
            (d1, full1), (d2, full2) = where
            winner = loser = None
            if marks[full1] == (d2, _last_segment(full2)) and marks[full2] is None:
                winner, loser = (d1, full1), full2
            elif marks[full2] == (d1, _last_segment(full1)) and marks[full1] is None:
                winner, loser = (d2, full2), full1
            if winner is not None:
                from minibroker.storage import log_dir_move as mv

                log.warning("%s-%d: found in %s and %s; its move to %s had committed: removing %s",
                            key[0], key[1], d1, d2, winner[0], loser)
                doomed = os.path.join(os.path.dirname(loser),
                                      mv.delete_dir_name(key[0], key[1], os.urandom(16).hex()))
                os.rename(loser, doomed)
                ckpt.fsync_dir(os.path.dirname(loser))
                _rmtree(doomed)
                _drop_moved_from(winner[1])
                return winner
        if len(where) > 1:
            raise LogDirConflictError(
                f"partition {key[0]}-{key[1]} is in several log dirs: {', '.join(f for _, f in where)}. "
                "A log dir failure during a partition move can cause this; delete the copy in the dir "
                "that failed (keep the other) and start again"
            )
        if marks[where[0][1]] is not None:
            _drop_moved_from(where[0][1])  # its move finished; only the marker was left
        return where[0]

    def _open_log(self, d, full, topic, partition, info, starts, recovery, clean) -> PartitionLog | None:
        """Open (recovering if need be) one partition. A write that fails on the way (a full
        disk cannot take a rebuilt index) takes the dir offline, and the partition is opened
        read-only instead: indexes in memory, a damaged tail left on disk but not served."""
        kwargs = dict(
            log_start_offset=starts.get((topic, partition), 0),
            recovery_point=recovery.get((topic, partition), 0),
            clean=clean,
            clock=self._clock,
        )
        config = self.effective_config(topic)
        if d not in self.offline_dirs:
            try:
                return _partition_log().open(full, topic, partition, info.id, config, **kwargs)
            except OSError as exc:
                self.dir_failed(d, exc, f"opening {topic}-{partition}")
        try:
            plog = _partition_log().open(full, topic, partition, info.id, config, read_only=True, **kwargs)
        except OSError as exc:
            log.error("partition %s-%d is not served: %s cannot be read: %s", topic, partition, full, exc)
            return None
        plog.offline_reason = self.offline_dirs[d]
        log.warning("%s-%d: opened read-only (indexes in memory, nothing written)", topic, partition)
        return plog

    def dir_failed(self, d: str, exc: BaseException, doing: str) -> None:
        """A write in log dir ``d`` failed: take it offline (appends to its partitions answer
        KAFKA_STORAGE_ERROR, reads go on) until the broker restarts, as Kafka does."""
        first = d not in self.offline_dirs
        if first:
            self.offline_dirs[d] = f"log dir {d} is offline: {doing}: {exc}"
        reason = self.offline_dirs[d]
        for key, plog in self._logs.items():
            if self._dir_of[key] == d:
                plog.offline_reason = reason
        if first:
            log.error(
                "%s. Appends to its partitions answer KAFKA_STORAGE_ERROR and reads are still served "
                "until the broker is restarted (free space first)",
                reason,
            )

    def _storage_error_from(self, plog: PartitionLog, exc: BaseException) -> None:
        """PartitionLog's hook: a write in its directory failed."""
        d = self._dir_of.get((plog.topic, plog.partition))
        if d is not None:
            self.dir_failed(d, exc, f"writing {plog.topic}-{plog.partition}")

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
        """Every online dir's copy; raises KAFKA_STORAGE_ERROR when none could be written."""
        text = _topics_text(self._topics)
        written = 0
        for d in self.log_dirs:  # a missing file reads as no topics: none is written for none
            if d in self.offline_dirs:
                continue
            try:
                ckpt.write_atomically(os.path.join(d, TOPICS_FILE), text, empty=_topics_text({}))
                written += 1
            except OSError as exc:
                self.dir_failed(d, exc, f"writing {TOPICS_FILE}")
        if not written:
            raise self._no_writable_dir()

    def _no_writable_dir(self) -> KafkaError:
        why = "; ".join(self.offline_dirs.values())
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"no log dir can be written: {why}")

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

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir holding the partition, None when it is not here."""
        return self._dir_of.get((topic, partition))

    # ---- moves between log dirs (AlterReplicaLogDirs) -------------------------------------------
    def move_partition(self, topic: str, partition: int, destination: str) -> None:
        """Place the partition in log dir ``destination`` (one of ``log_dirs``, online), as Kafka's
        ReplicaManager.alterReplicaLogDirs: nothing to do when it is there already (a move elsewhere
        in progress is then cancelled, as Kafka drops the future replica); otherwise a move starts
        (or goes on, when it was asked already) in the background: the future replica is filled
        while the partition serves, then swapped in (``_move``). REPLICA_NOT_AVAILABLE for a
        partition not here, KAFKA_STORAGE_ERROR when its current dir is offline."""
        key = (topic, partition)
        current = self._dir_of.get(key)
        plog = self._logs.get(key)
        if current is None or plog is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"{topic}-{partition} is not here")
        if destination not in self.log_dirs:
            raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"{destination} is not one of log.dirs")
        if destination in self.offline_dirs:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self.offline_dirs[destination])
        running = self._moves.get(key)
        if running is not None:
            if running.destination == destination:
                return
            self._stop_move(key, "another destination was asked for")
        if current == destination:
            return
        if plog.offline_reason is not None or plog.read_only:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             plog.offline_reason or f"{topic}-{partition} is read-only")
        move = _Move(topic, partition, current, destination, plog)
        self._moves[key] = move
        move.task = asyncio.get_running_loop().create_task(self._move(move), name=f"move-{topic}-{partition}")

    def resume_moves(self) -> None:
        """Start again each move a restart cut short (load() found its future dir), as Kafka's broker
        goes on filling a future replica it finds at start-up: the partition still ends in the dir
        AlterReplicaLogDirs asked for. The copy starts over (Kafka's goes on from the future log's
        end). On the event loop, once the logs are loaded."""
        pending, self._moves_to_resume = self._moves_to_resume, {}
        for (topic, partition), destination in sorted(pending.items()):
            try:
                self.move_partition(topic, partition, destination)
            except KafkaError as exc:
                log.warning("%s-%d: the move to %s is not resumed: %s", topic, partition, destination,
                            exc.message)

    def is_moving(self, topic: str, partition: int) -> bool:
        """A move of the partition to another log dir is in progress: the log cleaner leaves it alone
        (its swaps would only make the copy start over)."""
        return (topic, partition) in self._moves

    def future_replicas(self) -> list[tuple[str, int, str, int, int]]:
        """(topic, partition, destination dir, bytes copied, offset lag) of every move in progress, for
        DescribeLogDirs' future replicas (is_future_key)."""
        out = []
        for (topic, partition), move in sorted(self._moves.items()):
            lag = max(0, move.plog.log_end_offset - move.copied_offset) if not move.plog.closed else 0
            size = sum(c.size for c in move.copy.copied.values()) if move.copy is not None else 0
            out.append((topic, partition, move.destination, size, lag))
        return out

    def _stop_move(self, key: tuple[str, int], why: str) -> None:
        move = self._moves.pop(key, None)
        if move is None:
            return
        log.info("%s-%d: move to %s cancelled: %s", key[0], key[1], move.destination, why)
        move.cancelled = True
        if move.copy is not None:
            move.copy.stop.set()  # the copy thread stops at its next chunk; the task removes the copy

    def _move_rate(self) -> float:
        try:
            rate = float(self.config.get("replica.alter.log.dirs.io.max.bytes.per.second") or 0)
        except (TypeError, ValueError):
            rate = 0.0
        return rate if 0 < rate < 2**63 - 1 else float("inf")

    def _crash_step(self, step: str) -> None:
        if self._move_crash is not None:
            self._move_crash(step)

    async def _move(self, move: _Move) -> None:
        """One move: copy rounds in a worker thread until little is left, then the swap on the loop."""
        from minibroker.storage import log_dir_move as mv

        key = (move.topic, move.partition)
        loop = asyncio.get_running_loop()
        future = os.path.join(move.destination,
                              mv.future_dir_name(move.topic, move.partition, os.urandom(16).hex()))
        source = move.plog.directory
        committed = False
        log.info("%s-%d: moving from %s to %s (future replica %s)", move.topic, move.partition, move.source,
                 move.destination, future)
        try:
            try:
                os.makedirs(future)
                ckpt.fsync_dir(move.destination)
            except OSError as exc:
                raise mv.DestinationError(exc.errno, f"{future}: {exc.strerror}") from exc
            move.copy = mv.MoveCopy(source, future, rate=self._move_rate())
            self._crash_step("future_created")
            rounds = 0
            while True:
                self._check_move(move)
                active_base = move.plog.segments[-1].base_offset
                target = move.plog.log_end_offset
                move.copy.rate = self._move_rate()
                copied = await loop.run_in_executor(None, functools.partial(
                    move.copy.copy_round, active_base, final=False))
                move.copied_offset = target
                rounds += 1
                if rounds == 1:
                    self._crash_step("copied")
                self._check_move(move)
                if copied > _MOVE_FINAL_BYTES and rounds < _MOVE_MAX_ROUNDS:
                    continue
                if move.plog.swap_in_progress:  # a cleaner swap's files are moving: not now
                    await asyncio.sleep(0.05)
                    continue
                active_base = move.plog.segments[-1].base_offset
                last_chance = rounds >= _MOVE_MAX_ROUNDS
                if move.copy.pending_bytes(active_base) > _MOVE_FINAL_BYTES and not last_chance:
                    continue
                sealed = move.plog.sealed_unflushed()
                if sealed and not last_chance:  # fsynced off the loop: the final step's close flushes less
                    failed = await asyncio.to_thread(_fsync_files, [seg.file for seg in sealed])
                    if failed:
                        self._storage_error_from(move.plog, next(iter(failed.values())))
                    elif not move.plog.closed:
                        move.plog.mark_flushed(sealed)
                    continue
                committed = self._swap_in_future(move, future, active_base)
                return
        except mv.MoveStopped:
            pass
        except asyncio.CancelledError:  # the broker stops: the next start discards the future dir
            if move.copy is not None:
                move.copy.stop.set()
            committed = True  # (nothing to remove now: the copy thread may still be writing there)
            raise
        except mv.DestinationError as exc:
            self.dir_failed(move.destination, exc, f"moving {move.topic}-{move.partition} into it")
        except OSError as exc:
            log.error("%s-%d: move to %s failed reading %s: %s; the partition stays there", move.topic,
                      move.partition, move.destination, source, exc)
        except Exception:
            log.exception("%s-%d: move to %s failed; the partition stays in %s", move.topic, move.partition,
                          move.destination, move.source)
        finally:
            if self._moves.get(key) is move:
                del self._moves[key]
            if not committed:
                await loop.run_in_executor(None, _rmtree, future)

    def _check_move(self, move: _Move) -> None:
        from minibroker.storage import log_dir_move as mv

        key = (move.topic, move.partition)
        if move.cancelled or self._logs.get(key) is not move.plog or move.plog.closed:
            raise mv.MoveStopped()
        if move.source in self.offline_dirs or move.plog.offline_reason is not None:
            raise mv.MoveStopped()
        if move.destination in self.offline_dirs:
            raise mv.MoveStopped()

    def _swap_in_future(self, move: _Move, future: str, active_base: int) -> bool:
        """The final step, on the loop in one go, so no append comes in: close the current log, copy
        what changed since the last round (the active segment's tail, its trimmed indexes), fsync;
        write the destination's checkpoints (with this partition) and the marker; rename the future
        dir to ``<topic>-<partition>`` (the commit point), rename the source ``-delete`` (removed after
        file.delete.delay.ms), open the log from its new dir. Returns True once committed."""
        from minibroker.storage import log_dir_move as mv

        topic, partition, plog = move.topic, move.partition, move.plog
        key = (topic, partition)
        started = time.monotonic()
        source, real = plog.directory, os.path.join(move.destination, f"{topic}-{partition}")
        info = self._topics[topic]
        log_start = plog.log_start_offset
        listeners = list(plog._listeners)
        try:
            plog.close()  # flushes: the source is complete on disk and its indexes trimmed
        except OSError as exc:
            self.dir_failed(move.source, exc, f"closing {topic}-{partition} for its move")
            self._reopen(key, move.source, source, info, log_start, plog.recovery_point, clean=False,
                         listeners=listeners, producer_state=plog.loaded_producer_state)
            return False
        try:
            move.copy.copy_round(active_base, final=True, throttle=False)
            if os.path.exists(real):
                raise mv.DestinationError(errno.EEXIST, f"{real} exists")
            self._write_dir_checkpoint(move.destination, ckpt.RECOVERY_POINT_CHECKPOINT,
                                       lambda p: p.recovery_point, extra={key: plog.log_end_offset})
            self._write_dir_checkpoint(move.destination, ckpt.LOG_START_OFFSET_CHECKPOINT,
                                       lambda p: p.log_start_offset, extra={key: log_start})
            if move.destination in self.offline_dirs:
                raise mv.DestinationError(errno.EIO, self.offline_dirs[move.destination])
            try:
                last = plog.segments[-1]  # the source as it is at the commit (see _settle_duplicates)
                ckpt.write_atomically(os.path.join(future, mv.MOVED_FROM_FILE),
                                      f"{move.source}\n{last.base_offset} {last.size}\n")
            except OSError as exc:
                raise mv.DestinationError(exc.errno, str(exc)) from exc
            self._crash_step("future_complete")
            try:
                os.rename(future, real)
            except OSError as exc:
                raise mv.DestinationError(exc.errno, str(exc)) from exc
            try:
                ckpt.fsync_dir(move.destination)
            except OSError as exc:  # the rename may not last: undo it, the source serves on
                try:
                    os.rename(real, future)
                except OSError:  # the marker no longer matches the source once it is appended to
                    pass
                raise mv.DestinationError(exc.errno, str(exc)) from exc
        except (mv.DestinationError, mv.MoveStopped, OSError) as exc:
            if isinstance(exc, mv.DestinationError):
                self.dir_failed(move.destination, exc, f"moving {topic}-{partition} into it")
            else:
                log.error("%s-%d: move to %s failed: %s; the partition stays in %s", topic, partition,
                          move.destination, exc, move.source)
            self._reopen(key, move.source, source, info, log_start, plog.log_end_offset, clean=True,
                         listeners=listeners, producer_state=plog.loaded_producer_state)
            return False
        # Committed: the new dir is complete and named; the source is stale from here on.
        self._crash_step("future_renamed")
        doomed = os.path.join(move.source, mv.delete_dir_name(topic, partition, os.urandom(16).hex()))
        try:
            os.rename(source, doomed)
            ckpt.fsync_dir(move.source)
        except OSError as exc:  # the marker settles the two copies at the next start
            self.dir_failed(move.source, exc, f"renaming {source} after its move")
            doomed = None
        self._crash_step("source_renamed")
        self._reopen(key, move.destination, real, info, log_start, plog.log_end_offset, clean=True,
                     listeners=listeners, producer_state=plog.loaded_producer_state)
        if doomed is not None:
            _drop_moved_from(real)
        self.write_checkpoints()
        if doomed is not None:
            delay = float(plog.config.get("file.delete.delay.ms", 60000)) / 1000
            loop = asyncio.get_running_loop()
            handle = loop.call_later(max(0.0, delay), self._delete_later, doomed)
            self._delayed_deletes.append(handle)
        log.info("%s-%d: moved from %s to %s (%d bytes copied; final step %.1f ms with appends paused)",
                 topic, partition, move.source, move.destination, move.copy.bytes_copied,
                 (time.monotonic() - started) * 1000)
        self._crash_step("swap_done")
        return True

    def _delete_later(self, path: str) -> None:
        asyncio.get_running_loop().run_in_executor(None, _rmtree, path)

    def _reopen(self, key, d, full, info, log_start, recovery_point, *, clean, listeners,
                producer_state=None) -> None:
        """Open ``full`` as the partition's log in dir ``d`` (read-only when ``d`` is offline), with the
        closed log's listeners and loaded producer state."""
        topic, partition = key
        plog = self._open_log(d, full, topic, partition, info, {key: log_start}, {key: recovery_point}, clean)
        if plog is None:
            self._logs.pop(key, None)
            self._dir_of.pop(key, None)
            return
        self._register(plog, d)
        plog.adopt_producer_state(producer_state)
        for callback in listeners:
            plog.add_append_listener(callback)

    def start_cleaner_if_compacted(self, topics: Iterable[str] | None = None) -> None:
        """Make the log cleaner (and run it, if the upkeep runs) once one of ``topics`` (default: all)
        is compacted; the topic changes that can make one call this."""
        if self.cleaner is not None or not self._loaded:
            return
        if not any("compact" in str(self.effective_config(t).get("cleanup.policy", ""))
                   for t in (self._topics if topics is None else topics)):
            return
        from minibroker.storage.cleaner import LogCleaner  # imports partition_log, as this module does

        self.cleaner = LogCleaner(self, self.config, clock=self._clock)
        log.debug("log cleaner made: a compacted topic exists")
        if self._task is not None:
            self.cleaner.start()  # log.cleaner.enable=false: not started

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
        if not is_legal_topic_name(name):
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {name!r}")
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "the number of partitions must be at least 1")
        info = TopicInfo(topic_id or ckpt.random_uuid(), partitions, self._validated(configs))
        _warn_deprecated_format(name, info.configs)
        self._online_dirs()  # fail before anything changes when no dir can take it
        self._topics[name] = info
        try:
            self._write_topics_file()
            for partition in range(partitions):
                self._create_log(name, partition, info)
        except KafkaError:
            self._undo_partitions(name, 0, partitions)
            del self._topics[name]
            self._try_write_topics_file()
            raise
        self.write_checkpoints()
        self.start_cleaner_if_compacted([name])
        return info

    def add_partitions(self, name: str, new_total: int) -> TopicInfo:
        info = self._topic(name)
        if new_total <= info.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {info.partitions} partitions; {new_total} would not add any",
            )
        old_info, old = info, info.partitions
        self._online_dirs()
        info = info._replace(partitions=new_total)
        self._topics[name] = info
        try:
            self._write_topics_file()
            for partition in range(old, new_total):
                self._create_log(name, partition, info)
        except KafkaError:
            self._undo_partitions(name, old, new_total)
            self._topics[name] = old_info
            self._try_write_topics_file()
            raise
        self.write_checkpoints()
        return info

    def _undo_partitions(self, name: str, start: int, end: int) -> None:
        for partition in range(start, end):
            plog = self._logs.pop((name, partition), None)
            self._dir_of.pop((name, partition), None)
            if plog is not None:
                plog.delete()

    def _try_write_topics_file(self) -> None:
        try:
            self._write_topics_file()
        except KafkaError:
            pass  # the dirs are offline; a restart reads the file as it was last written

    def delete_topic(self, name: str) -> None:
        info = self._topic(name)
        del self._topics[name]
        try:
            self._write_topics_file()
        except KafkaError:
            self._topics[name] = info
            raise
        for partition in range(info.partitions):
            self._stop_move((name, partition), "the topic was deleted")
            plog = self._logs.pop((name, partition), None)
            self._dir_of.pop((name, partition), None)
            if plog is not None:
                plog.delete()
        self.write_checkpoints()

    def alter_topic_configs(self, name: str, configs: Mapping[str, Any]) -> TopicInfo:
        """Replace the topic's overrides with ``configs`` (None values are dropped), persist them
        and apply them to its live logs."""
        old = self._topic(name)
        info = old._replace(configs=self._validated(configs))
        if info.configs.get("message.format.version") != old.configs.get("message.format.version"):
            _warn_deprecated_format(name, info.configs)
        self._topics[name] = info
        try:
            self._write_topics_file()
        except KafkaError:
            self._topics[name] = old
            raise
        effective = self.effective_config(name)
        for partition in range(info.partitions):
            self._logs[(name, partition)].update_config(effective)
        self.start_cleaner_if_compacted([name])
        return info

    def _topic(self, name: str) -> TopicInfo:
        try:
            return self._topics[name]
        except KeyError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}") from None

    def _online_dirs(self) -> list[str]:
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online:
            raise self._no_writable_dir()
        return online

    def _create_log(self, topic: str, partition: int, info: TopicInfo) -> PartitionLog:
        """A new partition in the online dir holding the fewest; KAFKA_STORAGE_ERROR (and that dir
        offline) when its files cannot be created."""
        online = self._online_dirs()
        counts = {d: 0 for d in online}
        for d in self._dir_of.values():
            if d in counts:
                counts[d] += 1
        d = min(online, key=lambda x: counts[x])
        full = os.path.join(d, f"{topic}-{partition}")
        try:
            config = self.effective_config(topic)
            plog = _partition_log().create(full, topic, partition, info.id, config, clock=self._clock)
        except OSError as exc:
            self.dir_failed(d, exc, f"creating {topic}-{partition}")
            _rmtree(full)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self.offline_dirs[d]) from exc
        self._register(plog, d)
        return plog

    def _register(self, plog: PartitionLog, log_dir: str) -> None:
        key = (plog.topic, plog.partition)
        self._logs[key] = plog
        self._dir_of[key] = log_dir
        plog.on_log_start_offset_change = self._start_offset_changed
        plog.on_storage_error = self._storage_error_from
        plog.producer_id_expiration_ms = broker_setting(self.config, "producer.id.expiration.ms")

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """One pass of Kafka's PeriodicProducerExpirationCheck over every log whose producer state is
        loaded, with the current ``producer.id.expiration.ms`` (a dynamic setting); returns how many
        producer ids were forgotten."""
        expiration_ms = broker_setting(self.config, "producer.id.expiration.ms")
        removed = 0
        for plog in self.logs():
            plog.producer_id_expiration_ms = expiration_ms
            removed += len(plog.remove_expired_producers(now_ms))
        return removed

    def _start_offset_changed(self, plog: PartitionLog) -> None:
        d = self._dir_of.get((plog.topic, plog.partition))
        if d is not None:
            self._write_dir_checkpoint(d, ckpt.LOG_START_OFFSET_CHECKPOINT, lambda p: p.log_start_offset)

    # ---- checkpoints and upkeep ---------------------------------------------------------------
    def _write_dir_checkpoint(self, d: str, name: str, value, extra: Mapping | None = None) -> None:
        if d in self.offline_dirs:
            return  # its checkpoints stay as last written: a restart recovers from there
        offsets = {key: value(plog) for key, plog in self._logs.items() if self._dir_of[key] == d}
        offsets.update(extra or {})  # a partition moving in (LogManager._swap_in_future)
        try:
            ckpt.write_offset_checkpoint(os.path.join(d, name), offsets)
        except OSError as exc:
            self.dir_failed(d, exc, f"writing {name}")

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
        """fsync rolled segments in a worker thread, then advance the recovery points. The
        partition directory is fsynced too: a roll created files there (as Kafka flushes the dir
        after a roll), so their entries survive a power loss. A log whose cleaner swap is moving
        files waits for the next tick (its old segments' files are being renamed)."""
        work = [(plog, plog.sealed_unflushed()) for plog in self.logs() if not plog.swap_in_progress]
        work = [(plog, segs) for plog, segs in work if segs]
        if not work:
            return
        files = [seg.file for _, segs in work for seg in segs if seg.file is not None]
        dirs = [plog.directory for plog, _ in work]
        # the producer snapshot each roll wrote unsynced, named after the segment that followed
        from minibroker.storage.producer_state import snapshot_path  # with the partitions that have some

        snapshots = [snapshot_path(plog.directory, seg.next_offset) for plog, segs in work for seg in segs]
        failed = await asyncio.to_thread(_fsync_files, files, dirs, snapshots)
        for plog, segs in work:
            bad = [f for f in [seg.file for seg in segs] + [plog.directory] if f in failed]
            if bad:
                self._storage_error_from(plog, failed[bad[0]])
            elif not plog.closed and not plog.swap_in_progress:  # a swap begun meanwhile: next tick
                try:
                    plog.mark_flushed(segs)
                except OSError as exc:
                    self._storage_error_from(plog, exc)

    def start_retention(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task:
        """Start the background upkeep task (see the module docstring); returns it."""
        if self._task is None or self._task.done():
            loop = loop or asyncio.get_running_loop()
            self._task = loop.create_task(self._upkeep(), name="log-manager-upkeep")
            if self.cleaner is not None:
                self.cleaner.start(loop)  # log.cleaner.enable=false: not started
        return self._task

    async def _upkeep(self) -> None:
        retention_ms = broker_setting(self.config, "log.retention.check.interval.ms")
        checkpoint_ms = broker_setting(self.config, "log.flush.offset.checkpoint.interval.ms")
        expiration_check_ms = broker_setting(self.config, "producer.id.expiration.check.interval.ms")
        tick = max(0.01, min(retention_ms, checkpoint_ms, expiration_check_ms, 1000) / 1000)
        now = time.monotonic()
        next_retention, next_checkpoint = now + retention_ms / 1000, now + checkpoint_ms / 1000
        next_expiration = now + expiration_check_ms / 1000
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
                    for plog in self.logs():
                        plog.release_idle_descriptors()
                if now >= next_expiration:
                    next_expiration = now + expiration_check_ms / 1000
                    self.remove_expired_producers()
            except Exception:
                log.exception("log upkeep failed; retrying at the next tick")

    async def aclose(self) -> None:
        """Stop the upkeep task and close (flush, checkpoints, clean-shutdown marker)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.cleaner is not None:
            await self.cleaner.aclose()
        moving = [m.task for m in self._moves.values() if m.task is not None]
        self._cancel_moves()
        for move_task in moving:
            try:
                await move_task
            except asyncio.CancelledError:
                pass
        self.close()

    def _cancel_moves(self) -> None:
        """Stop every move (its future dir is discarded at the next start) and the delayed removals of
        moved partitions' old dirs (done at the next start)."""
        for move in list(self._moves.values()):
            if move.copy is not None:
                move.copy.stop.set()
            if move.task is not None:
                move.task.cancel()
        self._moves.clear()
        for handle in self._delayed_deletes:
            handle.cancel()
        self._delayed_deletes = []

    def close(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown markers."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.cleaner is not None:
            self.cleaner.stop()
        self._cancel_moves()
        if not self._loaded:
            self.unlock()
            return
        for plog in self.logs():
            try:
                plog.close()
            except OSError as exc:
                self._storage_error_from(plog, exc)
            except Exception:
                self._storage_error_from(plog, RuntimeError("closing failed"))
                log.exception("closing %s failed", plog)
        self.write_checkpoints()
        for d in self.log_dirs:  # an offline dir was not closed cleanly: its next start recovers
            if d in self.offline_dirs:
                continue
            try:
                with open(os.path.join(d, ckpt.CLEAN_SHUTDOWN_FILE), "w") as f:
                    f.flush()
                    os.fsync(f.fileno())
                ckpt.fsync_dir(d)
            except OSError as exc:
                log.error("could not mark %s cleanly shut down: %s", d, exc)
        self._loaded = False
        self.unlock()


def _warn_deprecated_format(topic: str, overrides: Mapping[str, str]) -> None:
    value = overrides.get("message.format.version")
    if value is not None:
        from minibroker.config.message_format import deprecation_warning

        log.warning("%s", deprecation_warning("message.format.version", value, topic))


def _fsync_files(files, dirs=(), paths=()) -> dict:
    """fsync each file, each file at ``paths`` (missing ones skipped), then each directory; returns
    {file or dir: OSError} for those that failed (an fsync error means the data may not be on disk:
    the segment stays unflushed and its dir goes offline; a snapshot that failed is only logged, as
    a torn one is passed over at load)."""
    failed = {}
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("could not open producer snapshot %s to fsync it: %s", path, exc)
            continue
        try:
            os.fsync(fd)
        except OSError as exc:
            log.warning("could not fsync producer snapshot %s: %s", path, exc)
        finally:
            os.close(fd)
    for f in files:
        try:
            os.fsync(f.fileno())
        except ValueError:
            pass  # closed since (deleted by retention): nothing left to flush
        except OSError as exc:
            failed[f] = exc
    for d in dirs:
        try:
            ckpt.fsync_dir(d)
        except FileNotFoundError:
            pass  # deleted since
        except OSError as exc:
            failed[d] = exc
    return failed


def _partition_log() -> type[PartitionLog]:
    from minibroker.storage.partition_log import PartitionLog

    return PartitionLog


def _read_moved_from(partition_dir: str) -> tuple[str, tuple[int, int]] | None:
    """A moved partition's marker (log_dir_move.MOVED_FROM_FILE): the source log dir and the (base
    offset, size) of the source's last segment at the commit; None when absent or unreadable."""
    from minibroker.storage import log_dir_move as mv

    try:
        with open(os.path.join(partition_dir, mv.MOVED_FROM_FILE), encoding="utf-8") as f:
            source, last = f.read().splitlines()[:2]
        base, size = (int(x) for x in last.split())
        return source, (base, size)
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _last_segment(partition_dir: str) -> tuple[int, int] | None:
    """(base offset, size) of the last ``.log`` file in a partition dir."""
    try:
        bases = [int(n[:20]) for n in os.listdir(partition_dir)
                 if n.endswith(".log") and len(n) == 24 and n[:20].isdigit()]
        if not bases:
            return None
        last = max(bases)
        return last, os.path.getsize(os.path.join(partition_dir, f"{last:020d}.log"))
    except OSError:
        return None


def _drop_moved_from(partition_dir: str) -> None:
    from minibroker.storage import log_dir_move as mv

    try:
        os.unlink(os.path.join(partition_dir, mv.MOVED_FROM_FILE))
        ckpt.fsync_dir(partition_dir)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove %s from %s: %s", mv.MOVED_FROM_FILE, partition_dir, exc)


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
