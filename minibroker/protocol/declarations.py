"""The vocabulary the generated ``schema`` module is written in: fields and messages."""

from __future__ import annotations

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
