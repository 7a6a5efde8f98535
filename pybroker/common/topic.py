"""Topic names and topic ids, with Kafka's rules."""

from __future__ import annotations

import base64
import re
import uuid
from typing import NamedTuple

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
ZERO_UUID = uuid.UUID(int=0)


class TopicPartition(NamedTuple):
    """Kafka's TopicPartition. A tuple: hashing, comparing and unpacking run in C on the hot paths (a frozen
    dataclass hashes in Python, about twice as slow), and it equals the plain ``(topic, partition)`` pair."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def topic_name_error(name: str) -> str | None:
    """Why `name` is not a legal topic name (Kafka's `Topic.validate`), or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL_NAME.fullmatch(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's `Uuid.toString`: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_string(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def new_topic_id() -> uuid.UUID:
    """A random id that is neither zero nor Kafka's reserved METADATA_TOPIC_ID (1)."""
    while True:
        candidate = uuid.uuid4()
        if candidate.int > 1 and not topic_id_to_string(candidate).startswith("-"):
            return candidate
