"""Incremental fetch sessions (KIP-227): the broker remembers what a consumer fetches.

Owner of: every fetch session of the broker. A full fetch with epoch 0 creates a session
(answered with its id); later requests with that id and the next epoch carry only changes
(added or changed partitions, ``forgotten_topics_data`` removed) and get back only the
partitions that have something new. Epoch -1 closes a session. Sessions beyond
``max.incremental.fetch.session.cache.slots`` evict the least recently used one.
"""

from __future__ import annotations

import collections
import itertools
import random
import time

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


class SessionPartition:
    __slots__ = ("topic_id", "fetch_offset", "max_bytes", "leader_epoch", "last_fetched_epoch",
                 "high_watermark", "log_start_offset")

    def __init__(self, topic_id: bytes, fetch_offset: int, max_bytes: int, leader_epoch: int = -1,
                 last_fetched_epoch: int = -1):
        self.topic_id = topic_id
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        # as the client last sent them (Kafka's CachedPartition keeps both): -1 is "no check"
        self.leader_epoch = leader_epoch
        self.last_fetched_epoch = last_fetched_epoch
        # what the last response told the client, to send the partition again only when it changes
        self.high_watermark = -1
        self.log_start_offset = -1


class FetchSession:
    __slots__ = ("id", "epoch", "partitions", "last_used")

    def __init__(self, id: int, epoch: int, last_used: float = 0.0):
        self.id = id
        self.epoch = epoch  # the epoch the next request must carry
        self.partitions: dict[tuple[str, int], SessionPartition] = {}
        self.last_used = last_used


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000) -> None:
        self.max_slots = max_slots
        self._sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()
        self._ids = itertools.count(random.randint(1, 1 << 20))

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        while len(self._sessions) >= self.max_slots:
            self._sessions.popitem(last=False)  # least recently used
        sid = next(self._ids) & 0x7FFFFFFF or next(self._ids)
        session = FetchSession(sid, INITIAL_EPOCH + 1, last_used=time.monotonic())
        self._sessions[sid] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used = time.monotonic()
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def connection_closed(self, conn) -> None:
        """Sessions outlive connections in Kafka (clients reconnect); nothing to drop here."""
        return None
