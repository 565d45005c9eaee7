"""The brokers of a cluster as a tool sees them: one ``BrokerConnection`` per broker it needs, found through
Metadata (partition leaders) and FindCoordinator (group and transaction coordinators), each request sent
where Kafka's own clients send it. Every connection shares the command's ``Deadline``.

Used by every console tool that talks to a broker (through ``minibroker.tools.command.run_tool``) and by
the test fixture's ``produce``/``consume`` helpers. Not thread-safe.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.protocol import codec
from minibroker.tools.wire import BrokerConnection, Deadline, ToolError, split_host_port

METADATA, LIST_OFFSETS, FIND_COORDINATOR = 3, 2, 10
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps


def error_text(code: int, message: str | None = None) -> str:
    """A Kafka error as Kafka's tools print it: the code's name, then the broker's message if any."""
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    return f"{name}: {message}" if message else name


class Cluster:
    """The bootstrap broker and the others a command reaches; ``close`` closes every connection."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, security=None, client_id: str = "minibroker",
                 deadline: Deadline | None = None):
        self.timeout = timeout
        self.security = security  # every broker connection authenticates alike (--command-config)
        self.client_id = client_id
        self.deadline = deadline
        self.bootstrap = BrokerConnection(*split_host_port(bootstrap), timeout, security, client_id, deadline)
        self._by_address = {self.bootstrap.address: self.bootstrap}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topic_ids: dict[bytes, str] = {}

    def close(self) -> None:
        for conn in self._by_address.values():
            conn.close()
        self._by_address.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- finding brokers ------------------------------------------------------------------------

    def connect(self, host: str, port: int) -> BrokerConnection:
        conn = self._by_address.get((host, port))
        if conn is None:
            conn = self._by_address[(host, port)] = BrokerConnection(host, port, self.timeout, self.security,
                                                                     self.client_id, self.deadline)
        return conn

    def metadata(self, topics: list[str] | None) -> codec.Struct:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        md = self.bootstrap.request(METADATA, body, at_least=1)  # v0 cannot ask for no topics; v10+: ids
        self._brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        for t in md.topics:
            topic_id = getattr(t, "topic_id", None)
            if topic_id:
                self._topic_ids[bytes(topic_id)] = t.name
        return md

    def topic_name(self, topic_id) -> str | None:
        """The name of a topic id seen in Metadata (asking again once when it is new)."""
        key = bytes(topic_id)
        if key not in self._topic_ids:
            self.metadata(None)
        return self._topic_ids.get(key)

    def broker_ids(self) -> list[int]:
        self.metadata([])
        return sorted(self._brokers)

    def node(self, node_id: int) -> BrokerConnection:
        if node_id not in self._brokers:
            self.metadata([])
        if node_id not in self._brokers:
            raise ToolError(f"broker {node_id} is not in the cluster's metadata")
        return self.connect(*self._brokers[node_id])

    def partitions(self, topics: list[str] | None) -> list[tuple[str, int, int, list[int]]]:
        """(topic, partition, leader, replicas) of ``topics`` (None: every topic, internal ones too); a
        topic that does not exist is a ToolError naming Kafka's error."""
        out = []
        for t in self.metadata(topics).topics:
            if t.error_code:
                raise ToolError(f"topic {t.name}: {error_text(t.error_code)}")
            out += [(t.name, p.partition_index, p.leader_id, list(p.replica_nodes)) for p in t.partitions]
        return sorted(out)

    def partition_ids(self, topic: str) -> list[int]:
        return [p for _, p, _, _ in self.partitions([topic])]

    def leader(self, topic: str, partition: int) -> int:
        for _topic, index, leader, _replicas in self.partitions([topic]):
            if index == partition:
                if leader < 0:
                    raise ToolError(f"{topic}-{partition}: {ErrorCode.LEADER_NOT_AVAILABLE.name}")
                return leader
        raise ToolError(f"{topic}-{partition}: {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name}: the topic has no "
                        f"partition {partition}")

    def leaders(self, tps) -> dict[int, list[tuple[str, int]]]:
        """Leader node id -> its partitions among ``tps`` ((topic, partition) pairs)."""
        topics = sorted({t for t, _ in tps})
        known = {(t, p): leader for t, p, leader, _ in self.partitions(topics)}
        by_node: dict[int, list[tuple[str, int]]] = {}
        for tp in tps:
            if tp not in known:
                raise ToolError(f"{tp[0]}-{tp[1]}: {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name}: the topic "
                                f"has no partition {tp[1]}")
            by_node.setdefault(known[tp], []).append(tp)
        return by_node

    def coordinator(self, key: str, key_type: int = GROUP_KEY_TYPE) -> tuple[int, BrokerConnection]:
        """(node id, connection) of the coordinator of a group (or, ``key_type`` 1, a transactional id)."""
        body = {"key": key, "key_type": key_type, "coordinator_keys": [key]}
        r = self.bootstrap.request(FIND_COORDINATOR, body, at_least=key_type)  # v0 finds groups only
        found = r.coordinators[0] if getattr(r, "coordinators", None) else r
        if found.error_code:
            what = "transactional-id" if key_type == TRANSACTION_KEY_TYPE else "group"
            raise ToolError(f"Failed to find the coordinator of {what} `{key}`: "
                            f"{error_text(found.error_code, found.error_message)}")
        return found.node_id, self.connect(found.host, found.port)

    # -- offsets --------------------------------------------------------------------------------

    def list_offsets(self, tps, timestamp: int) -> dict[tuple[str, int], int]:
        """Each partition's offset for ``timestamp`` (EARLIEST, LATEST, or ms: the first record at or after
        it, -1 when there is none), asked of its leader."""
        out: dict[tuple[str, int], int] = {}
        for node_id, node_tps in self.leaders(list(tps)).items():
            by_topic: dict[str, list[int]] = {}
            for t, p in node_tps:
                by_topic.setdefault(t, []).append(p)
            body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": int(self.timeout * 1000),
                    "topics": [
                {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                            "timestamp": timestamp, "max_num_offsets": 1} for p in ps]}
                for t, ps in by_topic.items()]}
            r = self.node(node_id).request(LIST_OFFSETS, body, at_least=1)
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise ToolError(f"{t.name}-{p.partition_index}: cannot list offsets: "
                                        f"{error_text(p.error_code)}")
                    out[(t.name, p.partition_index)] = p.offset
        return out
