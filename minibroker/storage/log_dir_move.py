"""Moving a partition between log dirs (AlterReplicaLogDirs): the future replica's files.

Kafka copies a partition to another dir through a "future" log, ``<topic>-<partition>.<32 hex>-future``
in the destination, which a ReplicaAlterLogDirsThread fills from the current log and then swaps in.
Here the future dir is filled by byte copies of the partition dir's files, in rounds run in a worker
thread while the partition keeps serving, then once more on the event loop, appends paused, by
``LogManager`` after it closed the current log (docs/storage.md, "Several log dirs").

On-disk contract:
- ``<dest>/<topic>-<partition>.<32 hex>-future``: a copy in progress. Discarded at start-up when the
  partition's current dir is still there (the move did not commit; the source is intact), and the move
  to ``<dest>`` started again (``LogManager.resume_moves``).
- ``MOVED_FROM_FILE`` inside a partition dir: written (fsynced) into the future dir just before it
  is renamed to ``<topic>-<partition>``, which is the move's commit point, and removed once the
  source dir has been renamed ``<topic>-<partition>.<32 hex>-delete``. At start-up a partition found
  in two dirs is resolved by it: the dir holding it (naming the other) wins and the other is removed;
  without it, start-up is refused naming both dirs, as Kafka does.

Not thread-safe: one ``copy_round`` at a time per move, and only ``MoveCopy`` touches its table.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from minibroker.storage import checkpoints as ckpt

__all__ = [
    "FUTURE_SUFFIX", "DELETE_SUFFIX", "MOVED_FROM_FILE", "MOVE_STEPS", "MOVE_CRASH_AT_ENV", "MoveCopy",
    "MoveStopped", "future_dir_name", "delete_dir_name", "parse_future_dir", "move_crash_hook_from_env",
]

log = logging.getLogger(__name__)

FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
MOVED_FROM_FILE = "moved-from"
# Files of the source dir that are never copied: a cleaner pass's or an atomic write's temporaries.
_TRANSIENT_SUFFIXES = (".tmp", ".cleaned", ".swap", ".deleted")
_CHUNK = 1 << 20

# Test hook: a broker started with MINIBROKER_MOVE_CRASH_AT=<step> exits (os._exit, as kill -9) when
# a move reaches that step. future_created: the empty future dir exists; copied: after the first
# copy round; future_complete: the future dir is complete and fsynced, its marker written, not yet
# renamed; future_renamed: the new dir has its final name, the source dir still too; source_renamed:
# the source dir is renamed -delete; swap_done: the new log serves, the marker is gone.
MOVE_STEPS = ("future_created", "copied", "future_complete", "future_renamed", "source_renamed", "swap_done")
MOVE_CRASH_AT_ENV = "MINIBROKER_MOVE_CRASH_AT"
MOVE_CRASH_EXIT_CODE = 86


class MoveStopped(Exception):
    """The move was cancelled (the partition was deleted, moved elsewhere, or the broker stops)."""


def future_dir_name(topic: str, partition: int, unique: str) -> str:
    return f"{topic}-{partition}.{unique}{FUTURE_SUFFIX}"


def delete_dir_name(topic: str, partition: int, unique: str) -> str:
    return f"{topic}-{partition}.{unique}{DELETE_SUFFIX}"


def parse_future_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a ``<topic>-<partition>.<32 hex>-future`` dir name, else None."""
    if not name.endswith(FUTURE_SUFFIX):
        return None
    stem, dot, unique = name[: -len(FUTURE_SUFFIX)].rpartition(".")
    if not dot or len(unique) != 32:
        return None
    topic, _, part = stem.rpartition("-")
    if not topic or not part.isdigit():
        return None
    return topic, int(part)


def crash_hook_from_env(env: str, steps, what: str, exit_code: int, *, suffix: str = "",
                        logger: logging.Logger = log) -> Callable[[str], None] | None:
    """The ``<env>=<step>[<suffix>]`` kill -9 test hook: ``crash(step)`` ends the process with
    os._exit(``exit_code``) when ``step`` is the one named; None when ``env`` is not set. ``what``
    names the operation ("partition move"), whose last word names its steps in the log."""
    at = os.environ.get(env, "").strip()
    if not at:
        return None
    if at.removesuffix(suffix) not in steps:
        hint = f" (optionally followed by {suffix})" if suffix else ""
        raise ValueError(f"{env}={at!r}: not one of {', '.join(steps)}{hint}")
    logger.warning("%s=%s: this process exits when a %s reaches that step (a test hook)", env, at, what)
    kind = what.rpartition(" ")[2]

    def crash(step: str) -> None:
        if step == at:
            logger.warning("%s: exiting at %s step %s", env, kind, step)
            logging.shutdown()
            os._exit(exit_code)

    return crash


def move_crash_hook_from_env() -> Callable[[str], None] | None:
    return crash_hook_from_env(MOVE_CRASH_AT_ENV, MOVE_STEPS, "partition move", MOVE_CRASH_EXIT_CODE)


class _Copied(NamedTuple):
    inode: int
    size: int  # bytes of the source file the copy holds
    mtime_ns: int


def _segment_base(name: str) -> int | None:
    from minibroker.storage.segment_swap import SEGMENT_SUFFIXES  # the segment code: with the first move

    stem, ext = os.path.splitext(name)
    if ext in SEGMENT_SUFFIXES and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class DestinationError(OSError):
    """A write in the destination dir failed (its dir goes offline); ``__cause__`` is the error."""


class MoveCopy:
    """The future dir of one move and what it holds of the source dir's files. (A plain class: this
    module is imported at start-up, and ``dataclasses`` with it cost 2 ms of it.)"""

    __slots__ = ("source", "future", "rate", "stop", "copied", "_sealed", "bytes_copied", "_budget_start",
                 "_budget_bytes")

    def __init__(self, source: str, future: str, rate: float = float("inf")):
        self.source = source  # the partition dir being copied
        self.future = future  # <dest>/<topic>-<partition>.<hex>-future
        self.rate = rate  # bytes per second at most (replica.alter.log.dirs.io.max.bytes.per.second)
        self.stop = threading.Event()
        self.copied: dict[str, _Copied] = {}
        self._sealed: set[str] = set()  # index files copied after their segment was sealed
        self.bytes_copied = 0
        self._budget_start = time.monotonic()
        self._budget_bytes = 0

    def pending_bytes(self, active_base: int) -> int:
        """Bytes a round would copy now (stat only), leaving out the active segment's indexes
        (preallocated while active; trimmed, and small, once the log is closed)."""
        total = 0
        for name, st in self._source_files():
            base = _segment_base(name)
            if base is not None and base >= active_base and not name.endswith(".log"):
                continue
            todo = self._todo(name, st)
            if todo is not None:
                total += st.st_size - todo
        return total

    def copy_round(self, active_base: int, *, final: bool, throttle: bool = True) -> int:
        """Bring the future dir up to the source dir's files as they are now; returns the bytes copied.

        ``active_base``: the base offset of the active segment when the round was asked for (on the
        loop). The indexes of the active segment are written through a memory map, with no size or
        mtime change to go by: rounds while appends go on leave them out; the ``final`` round (the
        log closed, its indexes trimmed) copies them whole. A sealed segment's indexes are copied
        once after it was sealed (the seal trimmed them; they no longer change), and again only if
        the file changed (a cleaner's swap). A ``.log`` file that grew (same inode) is copied from
        where the copy ended; any other changed file whole. Files gone from the source (retention,
        a cleaner's swap) go from the future dir too. Every file written is fsynced, then the future
        dir; the source ``.log`` files read are fsynced too, so that closing the log for the final
        step has little left to flush. Raises ``DestinationError`` for a failed write, ``OSError``
        for a failed read, ``MoveStopped`` when ``stop`` is set."""
        written = 0
        present = set()
        for name, st in self._source_files():
            present.add(name)
            base = _segment_base(name)
            volatile = base is not None and base >= active_base and not name.endswith(".log")
            if volatile and not final:
                continue
            todo = 0 if volatile else self._todo(name, st)
            if todo is None and base is not None and not name.endswith(".log") and name not in self._sealed:
                todo = 0  # copied while its segment was active: once more, as sealed
            if todo is None:
                continue
            if self.stop.is_set():
                raise MoveStopped()
            written += self._copy_file(name, todo, st, throttle, sync_source=not final)
            if not volatile and base is not None:
                self._sealed.add(name)
        for name in [n for n in self.copied if n not in present]:
            del self.copied[name]
            self._sealed.discard(name)
            try:
                os.unlink(os.path.join(self.future, name))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise DestinationError(exc.errno, str(exc)) from exc
        try:
            ckpt.fsync_dir(self.future)
        except OSError as exc:
            raise DestinationError(exc.errno, str(exc)) from exc
        self.bytes_copied += written
        return written

    def _source_files(self):
        for name in sorted(os.listdir(self.source)):
            if name.endswith(_TRANSIENT_SUFFIXES) or name == MOVED_FROM_FILE:
                continue
            try:
                st = os.stat(os.path.join(self.source, name))
            except FileNotFoundError:
                continue
            if os.path.isdir(os.path.join(self.source, name)):
                continue
            yield name, st

    def _todo(self, name: str, st: os.stat_result) -> int | None:
        """Where the copy of ``name`` must resume (0: whole), or None when it is up to date."""
        prev = self.copied.get(name)
        if prev is None:
            return 0
        same_file = prev.inode == st.st_ino
        if same_file and prev.size == st.st_size and prev.mtime_ns == st.st_mtime_ns:
            return None
        if same_file and name.endswith(".log") and st.st_size >= prev.size:
            return prev.size  # an append-only segment that grew
        return 0

    def _copy_file(self, name: str, start: int, st: os.stat_result, throttle: bool, sync_source: bool) -> int:
        src_path, dst_path = os.path.join(self.source, name), os.path.join(self.future, name)
        end = st.st_size
        src = os.open(src_path, os.O_RDONLY)
        try:
            try:
                flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if start == 0 else 0)
                dst = os.open(dst_path, flags, 0o644)
            except OSError as exc:
                raise DestinationError(exc.errno, f"{dst_path}: {exc.strerror}") from exc
            try:
                position = start
                try:
                    os.ftruncate(dst, start)  # a tail copy resumes exactly where the last one ended
                except OSError as exc:
                    raise DestinationError(exc.errno, f"{dst_path}: {exc.strerror}") from exc
                while position < end:
                    if self.stop.is_set():
                        raise MoveStopped()
                    data = os.pread(src, min(_CHUNK, end - position), position)
                    if not data:
                        break  # shrank meanwhile: the next round sees the new size
                    try:
                        _write_all(dst, data, position)
                    except OSError as exc:
                        raise DestinationError(exc.errno, f"{dst_path}: {exc.strerror}") from exc
                    position += len(data)
                    if throttle:
                        self._pace(len(data))
                try:
                    os.fsync(dst)
                except OSError as exc:
                    raise DestinationError(exc.errno, f"{dst_path}: {exc.strerror}") from exc
                if sync_source and name.endswith(".log"):
                    os.fsync(src)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        self.copied[name] = _Copied(st.st_ino, position, st.st_mtime_ns)
        return position - start

    def _pace(self, nbytes: int) -> None:
        if self.rate == float("inf"):
            return
        self._budget_bytes += nbytes
        ahead = self._budget_bytes / self.rate - (time.monotonic() - self._budget_start)
        while ahead > 0 and not self.stop.is_set():
            self.stop.wait(min(ahead, 0.1))
            ahead = self._budget_bytes / self.rate - (time.monotonic() - self._budget_start)


def _write_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[n:]
        position += n
