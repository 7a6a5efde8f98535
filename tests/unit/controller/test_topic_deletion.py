"""Topic deletion's replica states (Kafka's TopicDeletionManager): a deletion halts while a replica's broker
is away or failed to delete it, resumes when that broker registers again, and the topic is done only when
every replica answered StopReplica(delete=true) without error. A topic being reassigned is held, left in the
context, until its last move ends."""

from __future__ import annotations

from pybroker.common.topic import TopicPartition
from pybroker.controller.context import ControllerContext
from pybroker.controller.election import Reassignment
from pybroker.controller.requests import StopReplicas
from pybroker.controller.topic_deletion import EPOCH_DURING_DELETE, TopicDeletions
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import StopReplicaResponse
from pybroker.zk import paths as zp


def broker(broker_id: int) -> zp.BrokerRegistration:
    return zp.BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, None, epoch=100 + broker_id)


def context(brokers: tuple[int, ...] = (1, 2, 3)) -> ControllerContext:
    ctx = ControllerContext(brokers={b: broker(b) for b in brokers})
    ctx.assignments["t"] = zp.TopicAssignment({0: (1, 2), 1: (2, 3)}, None)
    ctx.states[("t", 0)] = zp.LeaderAndIsr(1, 3, (1, 2), 1, 0)
    ctx.states[("t", 1)] = zp.LeaderAndIsr(2, 4, (2, 3), 1, 0)
    ctx.assignments["kept"] = zp.TopicAssignment({0: (1,)}, None)
    return ctx


def answer(*partitions: tuple[int, ErrorCode], error: ErrorCode = ErrorCode.NONE) -> StopReplicaResponse:
    return StopReplicaResponse(error_code=error, partition_errors=[
        StopReplicaResponse.StopReplicaPartitionError(topic_name="t", partition_index=p, error_code=code)
        for p, code in partitions])


def sent_to(requests: StopReplicas) -> dict[int, list[int]]:
    return {b: sorted(s.partition_index for s in topics["t"]) for b, topics in requests.items()}


def test_a_queued_topic_leaves_the_context_and_every_live_replica_is_deleted() -> None:
    ctx = context()
    deletions = TopicDeletions(ctx)
    deletions.enqueue("t")
    assert "t" not in ctx.assignments and not any(key[0] == "t" for key in ctx.states)
    assert "kept" in ctx.assignments
    assert deletions.marked() == {"t": [0, 1]}
    requests, sent, done, halted = deletions.next_steps()
    assert sent_to(requests) == {1: [0], 2: [0, 1], 3: [1]}
    assert all(s.delete_partition and s.leader_epoch == EPOCH_DURING_DELETE
               for topics in requests.values() for s in topics["t"])
    assert (done, halted) == ([], set())
    assert deletions.next_steps()[0] == {}  # in progress: nothing sent twice
    deletions.answered(1, sent, answer((0, ErrorCode.NONE)))
    deletions.answered(2, sent, answer((0, ErrorCode.NONE), (1, ErrorCode.NONE)))
    assert deletions.next_steps()[2] == []  # broker 3 has not answered
    deletions.answered(3, sent, answer((1, ErrorCode.NONE)))
    assert deletions.next_steps()[2] == ["t"]
    assert not deletions.is_queued("t")


def test_a_replica_on_a_broker_that_is_down_halts_the_deletion_until_the_broker_is_back() -> None:
    ctx = context(brokers=(1, 2))
    deletions = TopicDeletions(ctx)
    deletions.enqueue("t")
    requests, sent, done, halted = deletions.next_steps()
    assert sent_to(requests) == {1: [0], 2: [0, 1]}
    assert halted == {"t"}
    deletions.answered(1, sent, answer((0, ErrorCode.NONE)))
    deletions.answered(2, sent, answer((0, ErrorCode.NONE), (1, ErrorCode.NONE)))
    assert deletions.next_steps() == ({}, {}, [], set())  # halted: the topic stays queued
    assert deletions.is_queued("t")
    assert deletions.brokers_started({1}) == {"t"}  # a broker of the topic: resumed, broker 3 still away
    assert deletions.next_steps()[3] == {"t"}
    ctx.brokers[3] = broker(3)
    assert deletions.brokers_started({3}) == {"t"}
    requests, sent, done, _ = deletions.next_steps()
    assert sent_to(requests) == {3: [1]}  # only the replica not deleted yet
    deletions.answered(3, sent, answer((1, ErrorCode.NONE)))
    assert deletions.next_steps()[2] == ["t"]


def test_a_failed_or_unanswered_stop_replica_halts_the_deletion() -> None:
    ctx = context()
    deletions = TopicDeletions(ctx)
    deletions.enqueue("t")
    _, sent, _, _ = deletions.next_steps()
    deletions.answered(1, sent, answer((0, ErrorCode.KAFKA_STORAGE_ERROR)))
    deletions.answered(2, sent, answer(error=ErrorCode.STALE_BROKER_EPOCH))
    assert deletions.brokers_failed({3}) == {"t"}  # gone before answering
    assert deletions.next_steps() == ({}, {}, [], set())
    assert deletions.brokers_started({2}) == {"t"}
    assert sent_to(deletions.next_steps()[0]) == {1: [0], 2: [0, 1], 3: [1]}  # every replica not deleted


def test_an_answer_for_an_earlier_deletion_of_the_same_name_is_ignored() -> None:
    ctx = context()
    deletions = TopicDeletions(ctx)
    assignment = ctx.assignments["t"]
    deletions.enqueue("t")
    _, earlier, _, _ = deletions.next_steps()
    deletions.clear()  # a new controllership reads the queue again
    ctx.assignments["t"] = assignment
    deletions.enqueue("t")
    _, now, _, _ = deletions.next_steps()
    for broker_id in (1, 2, 3):
        deletions.answered(broker_id, earlier, answer((0, ErrorCode.NONE), (1, ErrorCode.NONE)))
    assert deletions.next_steps()[2] == []  # still waiting for the answers to its own requests
    for broker_id in (1, 2, 3):
        deletions.answered(broker_id, now, answer((0, ErrorCode.NONE), (1, ErrorCode.NONE)))
    assert deletions.next_steps()[2] == ["t"]


def test_a_topic_being_reassigned_is_held_in_the_context_until_its_moves_end() -> None:
    ctx = context()
    moving = (TopicPartition("t", 0), TopicPartition("t", 1))
    for key in moving:
        ctx.reassignments[key] = Reassignment((3,), ctx.assignments["t"].partitions[key[1]])
    deletions = TopicDeletions(ctx)
    assert deletions.enqueue("t") is False
    assert deletions.is_queued("t")
    assert "t" in ctx.assignments and ("t", 0) in ctx.states  # still served, still moving
    assert deletions.marked() == {}
    assert deletions.next_steps() == ({}, {}, [], set())  # nothing sent: no replica is being deleted
    del ctx.reassignments[moving[0]]
    assert deletions.release_reassigned() == set()  # partition 1 still moves
    assert deletions.next_steps() == ({}, {}, [], set())
    del ctx.reassignments[moving[1]]
    assert deletions.release_reassigned() == {"t"}
    assert "t" not in ctx.assignments and deletions.marked() == {"t": [0, 1]}
    assert sent_to(deletions.next_steps()[0]) == {1: [0], 2: [0, 1], 3: [1]}
    assert deletions.release_reassigned() == set()


def test_a_held_topic_is_queued_afresh_by_a_new_controllership() -> None:
    ctx = context()
    ctx.reassignments[TopicPartition("t", 0)] = Reassignment((3,), (1, 2))
    deletions = TopicDeletions(ctx)
    deletions.enqueue("t")
    deletions.clear()
    assert not deletions.is_queued("t")
    del ctx.reassignments[TopicPartition("t", 0)]
    assert deletions.release_reassigned() == set()
