"""Share sessions (KIP-932): what each share group member fetches from this broker, and its epoch.

Owner of: every share session of the broker, keyed by (group id, member id), and which connection
opened each one. ShareFetch with epoch 0 opens a session with the request's partitions (replacing
the member's old one, whose acquired records stay acquired until their locks run out, as Kafka
does); later ShareFetch requests carry the session's next epoch and add partitions (their
``topics``) or remove them (``forgotten_topics_data``); ShareFetch and ShareAcknowledge both move
the epoch on by one (1, 2, ... 2^31-1, then 1 again); epoch -1 closes the session. More than
``group.share.max.share.sessions`` sessions: a new one is refused with SHARE_SESSION_LIMIT_REACHED
(no eviction: Kafka's share session cache evicts nothing either).

A dropped connection drops the sessions it opened and gives back every record their members hold
(``broker.share_partitions.release_member``), as Kafka 4.2's ShareSessionCache does through its
ConnectionDisconnectListener (the share group listener's onMemberLeave releases the member's
acquired records); a session reopened on another connection since is not touched.

Everything runs on the event loop; nothing here awaits.
"""

from __future__ import annotations

import logging

from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.share")

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF


def next_epoch(epoch: int) -> int:
    """Kafka's ShareRequestMetadata.nextEpoch: after 2^31-1 comes 1 (0 only ever opens a session)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class ShareSession:
    """One member's share session: the partitions it fetches, in the order they were added."""

    __slots__ = ("group_id", "member_id", "epoch", "partitions", "connection")

    def __init__(self, group_id: str, member_id: str, connection) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = next_epoch(INITIAL_EPOCH)  # the epoch the next request must carry
        # (topic id, partition) -> None: an ordered set
        self.partitions: dict[tuple[bytes, int], None] = {}
        self.connection = connection

    def add(self, keys) -> None:
        for key in keys:
            self.partitions.setdefault(key, None)

    def forget(self, keys) -> None:
        for key in keys:
            self.partitions.pop(key, None)


class ShareSessionCache:
    """``broker.share_sessions``."""

    def __init__(self, broker, max_sessions: int) -> None:
        self.broker = broker
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[object, set[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    def open(self, group_id: str, member_id: str, partitions, connection) -> ShareSession:
        """ShareFetch epoch 0: a new session replacing the member's old one (whose records are not
        released: the member asked for a fresh session, not to give its records back)."""
        key = (group_id, member_id)
        self._drop(key)
        if len(self._sessions) >= self.max_sessions:
            raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                             f"the broker holds group.share.max.share.sessions={self.max_sessions} sessions")
        session = ShareSession(group_id, member_id, connection)
        session.add(partitions)
        self._sessions[key] = session
        if connection is not None:
            self._by_connection.setdefault(connection, set()).add(key)
        return session

    def next_request(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """A request with an epoch other than 0 and -1: the session, its epoch checked and moved on."""
        if epoch == INITIAL_EPOCH:  # only ShareAcknowledge gets here with 0: it cannot open a session
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "epoch 0 opens a session with ShareFetch")
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"no share session for member {member_id} of group {group_id}")
        if epoch != session.epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"expected share session epoch {session.epoch}, got {epoch}")
        session.epoch = next_epoch(session.epoch)
        return session

    def existing(self, group_id: str, member_id: str) -> ShareSession:
        """A closing request (epoch -1): the session, which must exist."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"no share session for member {member_id} of group {group_id}")
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        """Epoch -1: drop the session and give back every record the member holds."""
        session = self._drop((group_id, member_id))
        if session is not None:
            self._release(session)
        return session

    def connection_closed(self, conn) -> None:
        """The sessions ``conn`` opened end with it, and their members' records are released."""
        keys = self._by_connection.pop(conn, None)
        if not keys:
            return
        for key in keys:
            session = self._sessions.get(key)
            if session is None or session.connection is not conn:
                continue  # closed already, or reopened on another connection
            del self._sessions[key]
            log.debug("share session of member %s of group %s dropped with its connection",
                      session.member_id, session.group_id)
            self._release(session)

    def forget_group(self, group_id: str) -> None:
        """The group is gone (deleted): its sessions go too (nothing left to release)."""
        for key in [k for k in self._sessions if k[0] == group_id]:
            self._drop(key)

    def close_all(self) -> None:
        self._sessions.clear()
        self._by_connection.clear()

    def _drop(self, key: tuple[str, str]) -> ShareSession | None:
        session = self._sessions.pop(key, None)
        if session is not None and session.connection is not None:
            keys = self._by_connection.get(session.connection)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[session.connection]
        return session

    def _release(self, session: ShareSession) -> None:
        partitions = getattr(self.broker, "share_partitions", None)
        if partitions is None:
            return
        try:
            partitions.release_member(session.group_id, session.member_id)
        except KafkaError as e:  # a failed state write: the locks still run out and release them
            log.warning("releasing the records of member %s of group %s failed: %s",
                        session.member_id, session.group_id, e)
