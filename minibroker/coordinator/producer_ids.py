"""Producer ids, unique across restarts (InitProducerId): Kafka's ProducerIdManager, on one node."""

from __future__ import annotations

import logging
import os

from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.producers")


class ProducerIdAllocator:
    """Hands out producer ids, unique across restarts: blocks reserved in a file at the log dir root.

    File ``producer-id-block`` holds the first id not yet reserved; a block of ``BLOCK`` ids is
    reserved (file rewritten) before any id of it is handed out, as Kafka's controller does.
    """

    BLOCK = 1000

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, "producer-id-block")
        self.next_id = 0
        self.block_end = 0
        try:
            with open(self.path) as f:
                self.block_end = self.next_id = int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            pass

    def allocate(self) -> int:
        """The next producer id; COORDINATOR_NOT_AVAILABLE (retriable) when a new block cannot be
        reserved on disk (a full disk): an id handed out unreserved could be handed out again."""
        if self.next_id >= self.block_end:
            block_end = self.next_id + self.BLOCK
            tmp = self.path + ".tmp"
            try:
                with open(tmp, "w") as f:
                    f.write(f"{block_end}\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:
                log.error("cannot reserve producer ids in %s: %s", self.path, exc)
                why = f"cannot reserve producer ids: {exc}"
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, why) from exc
            self.block_end = block_end
        pid = self.next_id
        self.next_id += 1
        return pid
