"""Small text files that record log progress, written atomically.

``OffsetCheckpointFile`` (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` in each log dir root) and ``LeaderEpochCheckpointFile``
(``leader-epoch-checkpoint`` in each partition dir) share Kafka's ``CheckpointFile`` format::

    0                  <- format version
    2                  <- number of entries
    orders 0 1523      <- one entry per line, fields separated by one space
    __consumer_offsets 12 98

``PartitionMetadataFile`` is ``partition.metadata``: ``version: 0\\ntopic_id: <id>`` with the
topic id as URL-safe base64 without padding (22 chars, Kafka's ``Uuid.toString``).

A write goes to ``<path>.tmp``, is flushed and fsynced, renamed over ``<path>`` with
``os.replace`` and the directory is fsynced, so a crash leaves either the old or the new file,
never a mix. A missing file reads as empty; a malformed one raises CorruptLogError.
"""

from __future__ import annotations

import base64
import os
import uuid
from abc import ABC, abstractmethod
from typing import Generic, Mapping, TypeVar

from pybroker.common.topic import TopicPartition
from pybroker.log.errors import CorruptLogError

__all__ = [
    "OffsetCheckpointFile",
    "LeaderEpochCheckpointFile",
    "LEADER_EPOCH_CHECKPOINT",
    "PartitionMetadataFile",
    "write_atomically",
    "topic_id_to_str",
    "topic_id_from_str",
]

K = TypeVar("K")

CHECKPOINT_VERSION = 0

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
"""File name of a partition dir's leader epochs (Kafka's LeaderEpochCheckpointFile.LEADER_EPOCH_CHECKPOINT_FILENAME)."""


def fsync_dir(dir_path: str) -> None:
    """fsync a directory so that a rename or unlink in it is durable."""
    fd = os.open(dir_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` via ``path.tmp`` + fsync + rename + directory fsync."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


class _CheckpointFile(ABC, Generic[K]):
    """Versioned "count + one entry per line" text file mapping K -> int."""

    FIELDS = 2

    def __init__(self, path: str) -> None:
        self.path = path

    @abstractmethod
    def _format(self, key: K, value: int) -> str:
        """One entry line without the newline."""

    @abstractmethod
    def _parse(self, fields: list[str]) -> tuple[K, int]:
        """One entry from its space-separated fields; ValueError when malformed."""

    def write(self, entries: Mapping[K, int]) -> None:
        """Atomically replace the file with ``entries``."""
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        lines += [self._format(k, v) for k, v in entries.items()]
        write_atomically(self.path, "\n".join(lines) + "\n")

    def read(self) -> dict[K, int]:
        """The entries, ``{}`` when the file does not exist."""
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError as exc:
            raise CorruptLogError(f"Malformed checkpoint {self.path}: {exc}") from None
        if len(lines) < 2:
            raise CorruptLogError(f"Malformed checkpoint {self.path}: missing version or count")
        try:
            version, count = int(lines[0]), int(lines[1])
        except ValueError:
            raise CorruptLogError(f"Malformed checkpoint {self.path}: bad header {lines[:2]}") from None
        if version != CHECKPOINT_VERSION:
            raise CorruptLogError(f"Unrecognised version {version} of checkpoint {self.path}")
        body = [line for line in lines[2:] if line.strip()]
        if len(body) != count:
            raise CorruptLogError(
                f"Malformed checkpoint {self.path}: expected {count} entries, found {len(body)}")
        out: dict[K, int] = {}
        for line in body:
            fields = line.split(" ")
            if len(fields) != self.FIELDS:
                raise CorruptLogError(f"Malformed line in checkpoint {self.path}: {line!r}")
            try:
                key, value = self._parse(fields)
            except ValueError:
                raise CorruptLogError(f"Malformed line in checkpoint {self.path}: {line!r}") from None
            out[key] = value
        return out


class OffsetCheckpointFile(_CheckpointFile[TopicPartition]):
    """``topic partition offset`` lines keyed by (topic, partition); see the module doc."""

    FIELDS = 3

    def _format(self, key: TopicPartition, value: int) -> str:
        topic, partition = key
        return f"{topic} {partition} {value}"

    def _parse(self, fields: list[str]) -> tuple[TopicPartition, int]:
        if not fields[0]:
            raise ValueError("empty topic")
        return TopicPartition(fields[0], int(fields[1])), int(fields[2])


class LeaderEpochCheckpointFile(_CheckpointFile[int]):
    """``leaderEpoch startOffset`` lines (``leader-epoch-checkpoint``) keyed by epoch."""

    def _format(self, key: int, value: int) -> str:
        return f"{key} {value}"

    def _parse(self, fields: list[str]) -> tuple[int, int]:
        return int(fields[0]), int(fields[1])


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    """Inverse of ``topic_id_to_str``; ValueError when it is not a 22-char id."""
    if len(text) != 22:
        raise ValueError(f"topic id {text!r} is not 22 characters")
    raw = base64.urlsafe_b64decode(text + "==")
    return uuid.UUID(bytes=raw)


class PartitionMetadataFile:
    """``partition.metadata`` in a partition dir: ``version: 0`` then ``topic_id: <id>``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def write(self, topic_id: uuid.UUID) -> None:
        """Atomically record the topic id."""
        write_atomically(self.path, f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n")

    def read(self) -> uuid.UUID | None:
        """The recorded topic id, None when the file is missing; CorruptLogError when malformed."""
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = [line.strip() for line in f.read().splitlines() if line.strip()]
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise CorruptLogError(f"Malformed partition metadata file {self.path}") from None
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if len(lines) != 2 or fields.get("version") != "0" or "topic_id" not in fields:
            raise CorruptLogError(f"Malformed partition metadata file {self.path}: {lines!r}")
        try:
            return topic_id_from_str(fields["topic_id"])
        except ValueError as exc:
            raise CorruptLogError(f"Malformed topic id in {self.path}: {exc}") from None
