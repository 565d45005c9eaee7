"""A byte range of an open file, sent to a socket without copying it through Python."""

from __future__ import annotations

from typing import Any, NamedTuple


class FileRegion(NamedTuple):
    """``size`` bytes of ``file`` starting at ``position``.

    ``file`` is an object with ``fileno()`` (an open segment file); holding the region keeps
    that object, and so its descriptor, alive until the bytes have been sent.
    """

    file: Any
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        """Copy the bytes (for tools and tests; the network path uses sendfile)."""
        import os

        return os.pread(self.file.fileno(), self.size, self.position)
