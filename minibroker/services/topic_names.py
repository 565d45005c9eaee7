"""Topic names as Kafka accepts them: 1-249 of ``[a-zA-Z0-9._-]``, never ``.`` or ``..``."""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage.log_manager import MAX_TOPIC_NAME_LENGTH, TOPIC_NAME_CHARS

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if name.strip(TOPIC_NAME_CHARS):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name {name!r} is illegal, it contains a character other than "
                         "ASCII alphanumerics, '.', '_' and '-'")


def collision_key(name: str) -> str:
    """'.' and '_' collide in metric names, so Kafka refuses topics that differ only by them."""
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
