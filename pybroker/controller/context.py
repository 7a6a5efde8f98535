"""What the controller knows of the cluster (Kafka's ControllerContext): registered brokers, topic
assignments, partition states as last read or written, ongoing reassignments. Only the event queue's
consumer changes it; it is rebuilt from ZooKeeper on every failover.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from pybroker.common.topic import ZERO_UUID, TopicPartition, topic_id_from_string
from pybroker.zk import paths as zp
from pybroker.controller.election import Reassignment



@dataclass
class ControllerContext:
    brokers: dict[int, zp.BrokerRegistration] = field(default_factory=dict)
    assignments: dict[str, zp.TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, zp.LeaderAndIsr] = field(default_factory=dict)
    reassignments: dict[TopicPartition, Reassignment] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)  # brokers in controlled shutdown
    # Replicas in a broker's failed log dir, with the broker epoch they were reported in (a broker that
    # registers again, after a restart, has its dirs back): see log_dir_failure.py.
    offline_replicas: dict[int, tuple[int, set[TopicPartition]]] = field(default_factory=dict)

    def clear_topics(self) -> None:
        self.assignments.clear()
        self.states.clear()
        self.reassignments.clear()

    def replicas(self, key: TopicPartition) -> tuple[int, ...]:
        return self.assignments[key[0]].partitions[key[1]]

    def electable(self) -> set[int]:
        """Live brokers that may lead or join an ISR: registered and not shutting down."""
        return set(self.brokers) - self.shutting_down

    def mark_offline(self, broker_id: int, keys: set[TopicPartition]) -> bool:
        """Record replicas of ``broker_id`` as offline; True if any was not already."""
        epoch = self.brokers[broker_id].epoch
        known_epoch, known = self.offline_replicas.get(broker_id, (epoch, set()))
        if known_epoch != epoch:
            known = set()
        if keys <= known:
            return False
        self.offline_replicas[broker_id] = (epoch, known | keys)
        return True

    def offline_on(self, key: TopicPartition) -> set[int]:
        """The brokers whose replica of ``key`` is offline (in a failed log dir, same registration)."""
        return {broker_id for broker_id, (epoch, keys) in self.offline_replicas.items()
                if key in keys and broker_id in self.brokers and self.brokers[broker_id].epoch == epoch}

    def partitions_on(self, brokers: set[int]) -> set[TopicPartition]:
        """Partitions with a replica on any of `brokers`."""
        return {TopicPartition(topic, p) for topic, assignment in self.assignments.items()
                for p, replicas in assignment.partitions.items() if brokers.intersection(replicas)}

    def set_replicas(self, key: TopicPartition, replicas: tuple[int, ...]) -> None:
        assignment = self.assignments[key[0]]
        self.assignments[key[0]] = zp.TopicAssignment({**assignment.partitions, key[1]: replicas},
                                                      assignment.topic_id)

    def forget_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        for key in [key for key in self.states if key[0] == topic]:
            del self.states[key]
            self.reassignments.pop(key, None)

    def topic_id(self, topic: str) -> uuid.UUID:
        topic_id = self.assignments[topic].topic_id
        return topic_id_from_string(topic_id) if topic_id else ZERO_UUID
