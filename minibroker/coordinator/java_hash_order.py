"""The iteration order of Java's ``HashMap`` and ``HashSet``, which Kafka's assignors' tie-breaks follow.

Kafka's share-group ``simple`` assignor walks hash maps and sets: which member is counted first, which
partition a full member gives up, which short member is offered a partition next. To give the same
answers minibroker walks its maps in the order Java would: ``JavaHashMap`` keeps Java's table capacity
(the initial one, doubled whenever the size passes three quarters of it) and iterates by bucket
(``h ^ (h >>> 16)`` masked by the capacity), entries of one bucket in insertion order, as Java's linked
bins keep them (a resize splits a bin without reordering it). Java turns a bin of eight or more entries
into a tree once the table has 64 buckets; that is not modelled (no realistic group comes near it).

The hashes are Java's: ``String.hashCode`` (member ids), Kafka's ``Uuid.hashCode`` (topic ids),
``Objects.hash(topicId, partition)`` (Kafka's server-common ``TopicIdPartition``), ``Integer.hashCode``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

_DEFAULT_CAPACITY = 16


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, in 32 bits."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def uuid_hash(uuid: bytes) -> int:
    """Kafka's ``Uuid.hashCode``: the two 64-bit halves xored, then the 32-bit halves of that xored."""
    h = int.from_bytes(uuid[:8], "big") ^ int.from_bytes(uuid[8:16], "big")
    return _int32((h >> 32) ^ h)


def topic_partition_hash(key: tuple[bytes, int]) -> int:
    """``Objects.hash(topicId, partitionId)`` of Kafka's server-common ``TopicIdPartition``."""
    topic_id, partition = key
    return _int32(31 * (31 + uuid_hash(topic_id)) + partition)


def integer_hash(value: int) -> int:
    return _int32(value)


def _table_size_for(capacity: int) -> int:
    """Java's ``HashMap.tableSizeFor``: the power of two at or above ``capacity`` (1 at least)."""
    size = 1
    while size < capacity:
        size <<= 1
    return size


def expected_size_capacity(entries: int) -> int:
    """The initial capacity Kafka's ``AssignorHelpers.newHashMap``/``newHashSet`` ask for (float arithmetic
    as Java does it: ``(int) (((n + 1) / 0.75f) + 1)``)."""
    return int((entries + 1) / 0.75 + 1)


class JavaHashMap:
    """A dict iterated in Java ``HashMap`` order. ``capacity``: the constructor's initial capacity (None:
    ``new HashMap<>()``). Not thread-safe; keys are hashed with ``hash_of``."""

    __slots__ = ("_hash_of", "_table", "_entries", "_seq")

    def __init__(self, hash_of: Callable[[Any], int], capacity: int | None = None):
        self._hash_of = hash_of
        self._table = _DEFAULT_CAPACITY if capacity is None else _table_size_for(capacity)
        self._entries: dict[Hashable, tuple[int, Any]] = {}  # key -> (insertion number, value)
        self._seq = 0

    @classmethod
    def expected(cls, hash_of: Callable[[Any], int], entries: int) -> JavaHashMap:
        """As ``AssignorHelpers.newHashMap(entries)`` (or ``newHashSet``) creates it."""
        return cls(hash_of, expected_size_capacity(entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __getitem__(self, key: Hashable) -> Any:
        return self._entries[key][1]

    def get(self, key: Hashable, default: Any = None) -> Any:
        entry = self._entries.get(key)
        return default if entry is None else entry[1]

    def put(self, key: Hashable, value: Any = None) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries[key] = (entry[0], value)
            return
        self._entries[key] = (self._seq, value)
        self._seq += 1
        if len(self._entries) > self._table * 3 // 4:
            self._table *= 2

    add = put  # a HashSet is a HashMap of keys

    def setdefault(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """``computeIfAbsent``: the value of ``key``, put from ``make()`` when absent."""
        if key not in self._entries:
            self.put(key, make())
        return self._entries[key][1]

    def remove(self, key: Hashable) -> bool:
        return self._entries.pop(key, None) is not None

    def _bucket(self, key: Hashable) -> int:
        h = self._hash_of(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (self._table - 1)

    def keys(self) -> list:
        """The keys in Java's iteration order (a snapshot)."""
        return sorted(self._entries, key=lambda k: (self._bucket(k), self._entries[k][0]))

    def __iter__(self) -> Iterator:
        return iter(self.keys())

    def items(self) -> list[tuple[Any, Any]]:
        return [(k, self._entries[k][1]) for k in self.keys()]


def java_hash_set(hash_of: Callable[[Any], int], items=(), capacity: int | None = None) -> JavaHashMap:
    """A ``HashSet`` (a ``JavaHashMap`` of keys), filled with ``items`` in order."""
    s = JavaHashMap(hash_of, capacity)
    for item in items:
        s.add(item)
    return s
