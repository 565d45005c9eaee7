"""Topic names as Kafka accepts them: 1-249 of ``[a-zA-Z0-9._-]``, never ``.`` or ``..``."""

from __future__ import annotations

import re

from minibroker.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+\Z")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name {name!r} is illegal, it contains a character other than "
                         "ASCII alphanumerics, '.', '_' and '-'")


def collision_key(name: str) -> str:
    """'.' and '_' collide in metric names, so Kafka refuses topics that differ only by them."""
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
