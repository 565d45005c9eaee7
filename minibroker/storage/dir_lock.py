"""The ``.lock`` file of a log dir: one broker per directory, as Kafka's LogManager locks its dirs.

``flock`` on ``<dir>/.lock`` (exclusive, non-blocking). The kernel releases it when the holder's
descriptor closes, so a broker killed with -9 leaves no stale lock; and because a flock belongs to
an open file description, two brokers in one process (the test fixture's thread mode) exclude
each other too. The holder writes its pid into the file so the refusal can name it.
"""

from __future__ import annotations

import errno
import fcntl
import os

__all__ = ["LOCK_FILE", "LogDirLock", "LogDirLockedError"]

LOCK_FILE = ".lock"


class LogDirLockedError(Exception):
    """Another broker (process or thread) holds the lock of a log dir."""

    def __init__(self, directory: str, holder_pid: int | None):
        self.directory = directory
        self.holder_pid = holder_pid
        held = f" (held by pid {holder_pid})" if holder_pid else ""
        super().__init__(
            f"Failed to acquire lock on file {LOCK_FILE} in {directory}{held}. A Kafka instance in "
            "another process or thread is using this directory."
        )


class LogDirLock:
    """The held lock of one log dir; ``release()`` (or process exit) lets it go."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd = -1

    def acquire(self) -> LogDirLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            writable = True
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            fd = os.open(self.path, os.O_RDONLY)  # a read-only file system: lock without the pid
            writable = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise LogDirLockedError(self.directory, holder) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if writable:
            try:  # the pid is a courtesy for the next refusal; a full disk must not stop us here
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError:
                pass
        return self

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # closing the descriptor drops the flock

    def __del__(self) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
