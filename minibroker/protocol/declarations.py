"""The vocabulary the generated ``schema`` module is written in: fields and messages."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

ZERO_UUID = b"\x00" * 16
ALL = (0, 32767)


class F(NamedTuple):
    """One field of a message or struct, as declared for every version."""

    name: str  # snake_case
    type: str  # a primitive, "[]<primitive>", "struct" or "[]struct"
    versions: tuple[int, int] | None
    nullable: tuple[int, int] | None = None
    tag: int | None = None
    flexible: tuple[int, int] | None = None  # overrides the message's flexible versions (header ClientId)
    default: Any = ...  # Ellipsis: the type's zero value ("" , 0, [], None for structs)
    fields: tuple[F, ...] | None = None


class Message(NamedTuple):
    name: str
    kind: str  # request | response | header | data
    api_key: int
    valid: tuple[int, int]
    flexible: tuple[int, int] | None
    fields: tuple[F, ...]


def in_range(version: int, rng: tuple[int, int] | None) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


def _field(raw: tuple) -> F:
    name, type_, versions, nullable, tag, flexible, default, fields = raw
    return F(name, type_, versions, nullable, tag, flexible, default,
             tuple(_field(f) for f in fields) if fields is not None else None)


class MessageTable(Mapping):
    """Message declarations by name, built on first use from the generated index (schema.py) and the
    fields of the message's module (``minibroker.protocol.messages.<module>``, imported then): a broker
    holds the fields of the APIs its clients use, not of all of them."""

    def __init__(self, index: dict[str, tuple]):
        self._index = index
        self._built: dict[str, Message] = {}

    def __getitem__(self, name: str) -> Message:
        message = self._built.get(name)
        if message is None:
            kind, api_key, valid, flexible, module = self._index[name]
            fields = importlib.import_module(f"minibroker.protocol.messages.{module}").FIELDS[name]
            message = Message(name, kind, api_key, valid, flexible, tuple(_field(f) for f in fields))
            self._built[name] = message
        return message

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def flexible_versions(self, name: str) -> tuple[int, int] | None:
        """The message's flexible version range, without building its declaration."""
        return self._index[name][3]

    def kinds(self) -> Iterator[tuple[str, str, int]]:
        """(name, kind, api_key) of every message, without building declarations."""
        for name, entry in self._index.items():
            yield name, entry[0], entry[1]
