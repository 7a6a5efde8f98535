"""Stray logs: partition directories the metadata does not give this broker (Kafka's stray replicas).

A log on disk can outlive its topic's place in the metadata: a deletion's ``-delete`` rename undone by a
crash before the log dir was fsynced brings the old directory back; a broker that was down while its topic
was deleted and created again, or while its replica moved away, still holds the old log. Its
``partition.metadata`` then records a topic id the metadata does not know (or not with this broker among the
partition's replicas). Serving it would hand the old topic's records to the new topic's clients; refusing to
start over it would keep the broker down.

On a single node, whose embedded metadata plays the part of Kafka's KRaft metadata image, such a log is found
at start-up (``LogManager.move_strays``, Kafka's KRaft log loading with ``isStray``), renamed
``<topic>-<partition>.<uuid>-stray`` and no longer served; the topic's partition gets a new, empty log. Its
data is never deleted: the operator inspects and removes the directory, as with Kafka's stray logs (renamed,
not deleted, since KAFKA-15605 and KAFKA-16234; KAFKA-14616 had deleted them). In a ZooKeeper cluster the controller's LeaderAndIsr names the topic id, and a log with
another one is refused INCONSISTENT_TOPIC_ID and left as it is, as Kafka's ZooKeeper-mode brokers do.
"""

from __future__ import annotations

import os
import uuid
from typing import Callable, Sequence

from pybroker.common.topic import TopicPartition, topic_id_to_string
from pybroker.log.log_dirs import STRAY_DIR_SUFFIX, suffixed_dir_name

__all__ = ["ReplicasOf", "stray_path", "stray_reason"]

ReplicasOf = Callable[[uuid.UUID, int], Sequence[int] | None]
"""The replicas the metadata gives partition ``p`` of the topic with that id; None when it has no such
partition (the topic id is unknown, or the topic has fewer partitions)."""


def stray_reason(path: str, topic_id: uuid.UUID | None, partition: int, replicas_of: ReplicasOf,
                 broker_id: int) -> str | None:
    """Why the log in ``path`` is stray, in Kafka's words (its isStrayReplica); None when it is not.

    A log without a topic id is stray too, as in Kafka: ``partition.metadata`` is durable before the first
    record is appended, so such a log holds no data (its creation stopped half-way)."""
    if topic_id is None:
        return f"The topicId does not exist in {path}, treat it as a stray log."
    replicas = replicas_of(topic_id, partition)
    if replicas is None:
        return (f"Found stray log dir {path}: the topicId {topic_id_to_string(topic_id)} does not exist in the "
                f"metadata image.")
    if broker_id not in replicas:
        return (f"Found stray log dir {path}: the current replica assignment [{', '.join(map(str, replicas))}] "
                f"does not contain the local brokerId {broker_id}.")
    return None


def stray_path(root: str, tp: TopicPartition) -> str:
    """Where a stray log of ``tp`` in ``root`` is moved: ``<topic>-<partition>.<uuid>-stray``, which the
    loader skips (Kafka's logStrayDirName)."""
    return os.path.join(root, suffixed_dir_name(tp, STRAY_DIR_SUFFIX))
