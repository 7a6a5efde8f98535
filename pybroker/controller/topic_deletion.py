"""Topic deletion (Kafka's TopicDeletionManager and the ReplicaStateMachine's deletion states), pure: it
reads and changes the context and says what to send and which topics are gone; controller.py sends and
writes.

A topic named in /admin/delete_topics is queued: it leaves the context (no election, LeaderAndIsr or
reassignment touches it; brokers are told it is being deleted, leader -2) and each replica goes through
ReplicaDeletionStarted (StopReplica with delete=true sent) to ReplicaDeletionSuccessful (answered without
error). A replica whose broker is not registered, whose StopReplica failed or whose broker went away before
answering is ReplicaDeletionIneligible, and so is its topic: the deletion halts until one of the topic's
replica brokers registers again (onBrokerStartup -> resumeDeletionForTopics), when every replica not yet
deleted is sent StopReplica again. Only when every replica is deleted are the topic's znodes removed, so a
broker that was down never keeps the log of a topic that no longer exists, and the name cannot be created
again meanwhile (/brokers/topics/T is still there: TOPIC_ALREADY_EXISTS). A new controller finds the queue
in /admin/delete_topics and starts every deletion over.

A topic with a partition being reassigned is queued but held, as Kafka marks it ineligible for deletion
("topic reassignment in progress"): it stays in the context, served and moving, until its last
reassignment ends; only then does its deletion start. delete.topic.enable=false is the controller's
business (controller.py drops the queue's entries unapplied).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from pybroker.common.topic import TopicPartition
from pybroker.controller.context import ControllerContext
from pybroker.controller.requests import StopReplicas
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import StopReplicaRequest, StopReplicaResponse
from pybroker.zk import paths as zp

EPOCH_DURING_DELETE = -2  # Kafka's LeaderAndIsr.EpochDuringDelete: the replica is deleted whatever its epoch

Replica = tuple[int, int]  # (partition, broker id)


class ReplicaDeletion(enum.Enum):
    STARTED = "ReplicaDeletionStarted"
    SUCCESSFUL = "ReplicaDeletionSuccessful"
    INELIGIBLE = "ReplicaDeletionIneligible"


@dataclass(eq=False)
class TopicDeletion:
    """One queued topic: its assignment when it was queued and where each replica's deletion stands (a
    replica not in `replicas` was not asked yet)."""

    assignment: zp.TopicAssignment
    replicas: dict[Replica, ReplicaDeletion] = field(default_factory=dict)
    ineligible: bool = False

    def all_replicas(self) -> list[Replica]:
        return [(p, b) for p, brokers in sorted(self.assignment.partitions.items()) for b in brokers]

    def replicas_in(self, state: ReplicaDeletion) -> list[Replica]:
        return [replica for replica in self.all_replicas() if self.replicas.get(replica) == state]


Sent = dict[str, TopicDeletion]
"""The deletions a StopReplica was sent for, by topic: an answer counts only for the same deletion."""


class TopicDeletions:
    def __init__(self, ctx: ControllerContext):
        self._ctx = ctx
        self._queued: dict[str, TopicDeletion] = {}
        self._held: set[str] = set()  # queued while reassigned: still in the context

    def clear(self) -> None:
        """A new controllership reads the queue from ZooKeeper again."""
        self._queued.clear()
        self._held.clear()

    def is_queued(self, topic: str) -> bool:
        """Queued for deletion, started or held (Kafka's isTopicQueuedUpForDeletion)."""
        return topic in self._queued or topic in self._held

    def marked(self, topics: set[str] | None = None) -> dict[str, list[int]]:
        """The queued topics (of `topics` only when given) with their partition ids, for UpdateMetadata's
        leader -2 entries."""
        return {topic: sorted(d.assignment.partitions) for topic, d in self._queued.items()
                if topics is None or topic in topics}

    def enqueue(self, topic: str) -> bool:
        """Queue a topic of the context for deletion: it leaves the context at once (True), or stays there,
        held, while one of its partitions is being reassigned (False)."""
        if any(key[0] == topic for key in self._ctx.reassignments):
            self._held.add(topic)
            return False
        self._start(topic)
        return True

    def release_reassigned(self) -> set[str]:
        """Start the deletion of the held topics none of whose partitions is being reassigned any more (Kafka's
        resumeDeletionForTopics once onPartitionReassignment completes); returns them."""
        reassigning = {key[0] for key in self._ctx.reassignments}
        released = self._held - reassigning
        self._held -= released
        released &= set(self._ctx.assignments)  # a topic whose znode went meanwhile has nothing left to delete
        for topic in sorted(released):
            self._start(topic)
        return released

    def _start(self, topic: str) -> None:
        self._queued[topic] = TopicDeletion(self._ctx.assignments[topic])
        self._ctx.forget_topic(topic)

    def brokers_failed(self, brokers: set[int]) -> set[str]:
        """Replicas on `brokers` (gone, or registered again: their requests were dropped) whose deletion was
        started become ineligible, and so do their topics; returns the topics halted."""
        halted = set()
        for topic, deletion in self._queued.items():
            for replica in deletion.replicas_in(ReplicaDeletion.STARTED):
                if replica[1] in brokers:
                    deletion.replicas[replica] = ReplicaDeletion.INELIGIBLE
                    deletion.ineligible = True
                    halted.add(topic)
        return halted

    def brokers_started(self, brokers: set[int]) -> set[str]:
        """Topics with a replica on a (re)started broker are eligible again; returns them."""
        resumed = {topic for topic, deletion in self._queued.items()
                   if any(b in brokers for _, b in deletion.all_replicas())}
        for topic in resumed:
            self._queued[topic].ineligible = False
        return resumed

    def answered(self, broker_id: int, sent: Sent, response: StopReplicaResponse | None) -> None:
        """A StopReplica(delete=true) answer (None: the request could not be sent): each replica it names
        is deleted, or ineligible with its topic when the broker answered an error."""
        errors: dict[tuple[str, int], int] = {}
        if response is not None and response.error_code == ErrorCode.NONE:
            errors = {(e.topic_name, e.partition_index): e.error_code for e in response.partition_errors}
        for topic, deletion in sent.items():
            if self._queued.get(topic) is not deletion:
                continue  # completed, or queued again since
            for replica in deletion.replicas_in(ReplicaDeletion.STARTED):
                if replica[1] != broker_id:
                    continue
                if errors.get((topic, replica[0]), ErrorCode.UNKNOWN_SERVER_ERROR) == ErrorCode.NONE:
                    deletion.replicas[replica] = ReplicaDeletion.SUCCESSFUL
                else:
                    deletion.replicas[replica] = ReplicaDeletion.INELIGIBLE
                    deletion.ineligible = True

    def next_steps(self) -> tuple[StopReplicas, Sent, list[str], set[str]]:
        """Kafka's resumeDeletions: (StopReplica(delete=true) to send, the deletions they are for, the topics
        whose every replica is deleted (dequeued: the caller removes their znodes), the topics halted now
        because a replica's broker is not registered)."""
        requests: StopReplicas = {}
        sent: Sent = {}
        done: list[str] = []
        halted: set[str] = set()
        for topic, deletion in list(self._queued.items()):
            if len(deletion.replicas_in(ReplicaDeletion.SUCCESSFUL)) == len(deletion.all_replicas()):
                done.append(topic)
                del self._queued[topic]
                continue
            if deletion.ineligible or deletion.replicas_in(ReplicaDeletion.STARTED):
                continue
            for p, broker_id in deletion.all_replicas():
                if deletion.replicas.get((p, broker_id)) == ReplicaDeletion.SUCCESSFUL:
                    continue
                if broker_id not in self._ctx.brokers or \
                        broker_id in self._ctx.offline_on(TopicPartition(topic, p)):
                    deletion.replicas[(p, broker_id)] = ReplicaDeletion.INELIGIBLE
                    deletion.ineligible = True
                    halted.add(topic)
                    continue
                deletion.replicas[(p, broker_id)] = ReplicaDeletion.STARTED
                sent[topic] = deletion
                requests.setdefault(broker_id, {}).setdefault(topic, []).append(
                    StopReplicaRequest.StopReplicaPartitionState(
                        partition_index=p, leader_epoch=EPOCH_DURING_DELETE, delete_partition=True))
        return requests, sent, done, halted
