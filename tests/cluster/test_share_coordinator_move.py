"""A share group's coordinator moves while its members hold records (KIP-932 in a real three-broker cluster).

The group's coordinator (C, the leader of its ``__consumer_offsets`` partition) is neither the share coordinator (S,
the leader of ``__share_group_state``'s one partition) nor a replica of the topic's partitions, so SIGKILLing C moves
only the group: two confluent-kafka ShareConsumers hold acquired records when C dies, their heartbeats go to the
broker that takes C's partition over, which loads the group from ``__consumer_offsets``. The held records are then
released and come back with delivery count 2 (the count survived), everything is accepted, a third member joins at
the new coordinator and moves every member to a new epoch, and no record is accepted twice or lost.

A deleted group stays deleted when its coordinator moves, and one whose deletion failed is still whole: the group is
forgotten only once its tombstones are on the in-sync replicas, so whichever replica leads next replays the same
group (it used to be dropped from the coordinator's memory before its tombstones were written, refused there as
deleted, and brought back by the next leader's replay).

Nor is a deleted group served from the copy of its state that a partition leader on another broker read: the leader
drops a group's share-partitions when the group's last share session there ends (Kafka's onGroupEmpty), so a group
created again with the same id reads the state its coordinator initialized anew (it used to get the old copy's
records, until the partition's leadership moved).
"""

from __future__ import annotations

import itertools
import time
import uuid

from confluent_kafka import AcknowledgeType, Message, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pybroker.common.topic import topic_id_to_string
from pybroker.coordinator.records import partition_for
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    ShareFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic, wait_for_full_isr
from tests.cluster.test_share_failover import GROUP_KEY, SHARE_KEY, _broker, _coordinator, _open, _topic_id
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_confluent import _produce
from tests.integration.test_share_groups_lifecycle import _min_isr
from tests.integration.test_share_groups_wire import _beat, _fetch, _join
from tests.integration.test_share_groups_wire import _produce as _produce_wire

TOPIC, PARTITIONS, RECORDS = "share-move", 2, 40
DEADLINE_S = 90
Seen = tuple[int, int, int]
"""(partition, offset, delivery count) of a delivered record."""


def _described(cluster: Cluster, node: int, group: str) -> ShareGroupDescribeResponse.DescribedGroup | None:
    client = _broker(cluster, node)
    try:
        found = client.request(ShareGroupDescribeRequest(group_ids=[group]), 1, ShareGroupDescribeResponse).groups[0]
    finally:
        client.close()
    return found if found.error_code == ErrorCode.NONE else None


def _consumer(cluster: Cluster, group: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    return consumer


def _records(consumer: ShareConsumer) -> list[Message]:
    return [m for m in consumer.poll(0.3) if m.error() is None]


def test_members_keep_reading_when_the_group_coordinator_moves(tmp_path) -> None:
    extra = {"share.coordinator.state.topic.num.partitions": "1", "share.coordinator.state.topic.min.isr": "1"}
    with running_cluster(tmp_path, extra=extra) as cluster:
        share_coordinator = _coordinator(cluster, f"probe:{topic_id_to_string(uuid.uuid4())}:0", SHARE_KEY)
        group = next(g for g in (f"share-move-{i}" for i in range(100))
                     if _coordinator(cluster, g, GROUP_KEY) != share_coordinator)
        wait_for_full_isr(cluster, "__consumer_offsets")
        wait_for_full_isr(cluster, "__share_group_state")
        coordinator = _coordinator(cluster, group, GROUP_KEY)
        other = next(b for b in range(3) if b not in (coordinator, share_coordinator))
        # Not on C: in ZooKeeper mode C's death takes it out of the ISR of every partition it holds, with a new leader
        # epoch, and a share-partition is read again at a new leader epoch, its unwritten acquisitions lost (as in
        # Kafka), which would deliver some records a third time.
        create_topic(cluster, TOPIC, PARTITIONS, assignment=[[other, share_coordinator], [share_coordinator, other]])
        wait_for_full_isr(cluster, TOPIC)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        _produce(cluster.bootstrap, TOPIC, [f"r{i}" for i in range(RECORDS)])

        seen: list[Seen] = []
        accepted: list[tuple[int, int]] = []
        consumers = [_consumer(cluster, group) for _ in range(2)]
        try:
            held: dict[int, list[Message]] = {}
            deadline = time.monotonic() + DEADLINE_S
            while len(held) < len(consumers) and time.monotonic() < deadline:  # each one holds records, unacked
                for index, consumer in enumerate(consumers):
                    if index not in held and (batch := _records(consumer)):
                        held[index] = batch
            assert len(held) == len(consumers), "every consumer to hold records"
            seen += [(m.partition(), m.offset(), m.delivery_count()) for b in held.values() for m in b]
            before = eventually(lambda: _described(cluster, coordinator, group), "the group described")
            members = {m.member_id for m in before.members}
            assert len(members) == 2

            cluster.brokers[coordinator].kill()
            moved = eventually(lambda: (node := _coordinator(cluster, group, GROUP_KEY)) != coordinator and (node,),
                               "the group coordinator to move")[0]
            for index, batch in held.items():  # held across the move: released, delivered again
                for message in batch:
                    consumers[index].acknowledge(message, AcknowledgeType.RELEASE)
                consumers[index].commit_sync()
            consumers.append(_consumer(cluster, group))
            while len(accepted) < RECORDS and time.monotonic() < deadline:
                for consumer in consumers:
                    batch = _records(consumer)
                    for message in batch:
                        seen.append((message.partition(), message.offset(), message.delivery_count()))
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                        accepted.append((message.partition(), message.offset()))
                    if batch:
                        consumer.commit_sync()
            after = eventually(lambda: (g := _described(cluster, moved, group)) and len(g.members) == 3 and all(
                m.member_epoch == g.assignment_epoch for m in g.members) and g,
                "every member at the new coordinator's assignment epoch")
        finally:
            for consumer in consumers:
                consumer.close()

        assert sorted(accepted) == sorted(set(accepted)), "a record accepted twice"
        assert len(accepted) == RECORDS, f"records lost: {RECORDS - len(set(accepted))}"
        held_records = {(m.partition(), m.offset()) for batch in held.values() for m in batch}
        counts: dict[tuple[int, int], list[int]] = {}
        for partition, offset, count in seen:
            counts.setdefault((partition, offset), []).append(count)
        assert all(c == sorted(set(c)) and c[0] == 1 for c in counts.values()), "a delivery count went back"
        # The first delivery after the move counts 2: the count survived. In about one run in six a third follows
        # (count 3) when the record lock times out 30 s later: while the third member's arrival reassigns the
        # partitions, a client can acquire records it never hands to the application. That is at-least-once, and
        # the checks above (counts never go back, each record accepted once) still hold.
        assert held_records and all(counts[r][:2] == [1, 2] for r in held_records)
        assert members <= {m.member_id for m in after.members}  # the same members, restored from the records
        assert after.assignment_epoch > before.assignment_epoch and after.group_epoch > before.group_epoch


def _delete(client: WireClient, group: str) -> ErrorCode:
    return ErrorCode(client.request(DeleteGroupsRequest(groups_names=[group]), 2,
                                    DeleteGroupsResponse).results[0].error_code)


def _moved_from(cluster: Cluster, group: str, old: int) -> int:
    return eventually(lambda: (node := _coordinator(cluster, group, GROUP_KEY)) != old and (node,),
                      f"the coordinator of {group} to move from broker {old}")[0]


def test_a_deleted_group_stays_deleted_when_its_coordinator_moves(tmp_path) -> None:
    group, topic = "share-deleted", "share-deleted-topic"
    with running_cluster(tmp_path) as cluster:
        create_topic(cluster, topic, 1)
        first = _coordinator(cluster, group, GROUP_KEY)
        wait_for_full_isr(cluster, "__consumer_offsets")
        client = _broker(cluster, first)
        epoch = _join(client, group, "m1", [topic]).member_epoch
        assert _beat(client, group, "m1", -1).error_code == ErrorCode.NONE
        # A new group on the same __consumer_offsets partition at each try: a join to a group that exists writes
        # nothing, so a probe created before the config arrived would never see the refusal.
        same = partition_for(group, 3)
        probes = (g for g in (f"probe-{i}" for i in itertools.count()) if partition_for(g, 3) == same)
        _min_isr(cluster.bootstrap, "__consumer_offsets", 4)  # more than its three replicas: no write succeeds
        eventually(lambda: _beat(client, next(probes), "p", 0, [topic]).error_code
                   == ErrorCode.COORDINATOR_NOT_AVAILABLE,
                   "the coordinator to apply min.insync.replicas=4 (announced through ZooKeeper)")
        assert _delete(client, group) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        client.close()

        cluster.brokers[first].kill()
        second = _moved_from(cluster, group, first)
        kept = eventually(lambda: _described(cluster, _coordinator(cluster, group, GROUP_KEY), group),
                          "the group at its new coordinator")
        assert (kept.group_state, kept.group_epoch) == ("Empty", epoch + 1)  # the failed deletion lost nothing
        _min_isr(cluster.bootstrap, "__consumer_offsets", 1)
        client = _broker(cluster, second)
        eventually(lambda: _delete(client, group) is ErrorCode.NONE, "the group deleted once writes succeed again")
        client.close()

        cluster.brokers[second].kill()
        third = _moved_from(cluster, group, second)
        client = _broker(cluster, third)
        answer = eventually(lambda: (code := ErrorCode(client.request(ShareGroupDescribeRequest(group_ids=[group]), 1,
                                                                      ShareGroupDescribeResponse).groups[0].error_code))
                            not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR) and (code,),
                            "the group's partition loaded by the last broker")[0]
        client.close()
        assert answer is ErrorCode.GROUP_ID_NOT_FOUND


def _acquired(client: WireClient, group: str, member: str, topic_id: uuid.UUID, epoch: int,
              acks: list[ShareFetchRequest.AcknowledgementBatch] | None = None) -> list[tuple[int, int, int]]:
    answer = _fetch(client, group, member, epoch, topic_id, acks)
    assert answer.error_code == ErrorCode.NONE, answer
    return [(a.first_offset, a.last_offset, a.delivery_count) for t in answer.responses for p in t.partitions
            for a in p.acquired_records]


def test_a_group_created_again_is_not_served_from_a_leader_s_copy_of_the_deleted_one(tmp_path) -> None:
    group, topic = "share-again", "share-again-topic"
    with running_cluster(tmp_path) as cluster:
        coordinator = _coordinator(cluster, group, GROUP_KEY)
        leader, third = [b for b in range(3) if b != coordinator]
        create_topic(cluster, topic, 1, assignment=[[leader, third, coordinator]])
        wait_for_full_isr(cluster, topic)
        at_coordinator, at_leader = _broker(cluster, coordinator), _broker(cluster, leader)
        topic_id = _topic_id(at_leader, topic)
        at_share = _broker(cluster, _coordinator(cluster, f"{group}:{topic_id_to_string(topic_id)}:0", SHARE_KEY))
        epoch = _join(at_coordinator, group, "m1", [topic]).member_epoch
        opened, stored = _open(at_leader, "m1", topic_id, at_share, group)
        assert stored == (0, [])  # starts at the end: 0
        _produce_wire(at_leader, topic, 10)
        session = [opened]

        def acquired() -> list[tuple[int, int, int]]:
            session[0] += 1
            return _acquired(at_leader, group, "m1", topic_id, session[0] - 1)

        assert eventually(acquired, "m1 to acquire the records") == [(0, 9, 1)]
        accept = ShareFetchRequest.AcknowledgementBatch(first_offset=0, last_offset=4, acknowledge_types=[1])
        closed = _fetch(at_leader, group, "m1", -1, topic_id, [accept])  # accepts 0-4, closes the session
        assert (closed.error_code, closed.responses[0].partitions[0].acknowledge_error_code) == (ErrorCode.NONE,) * 2
        assert _beat(at_coordinator, group, "m1", -1).error_code == ErrorCode.NONE and epoch > 0
        assert _delete(at_coordinator, group) is ErrorCode.NONE

        _join(at_coordinator, group, "m2", [topic])  # the same id again: a new group, reading from the end
        opened, stored = _open(at_leader, "m2", topic_id, at_share, group)  # 5-9 belonged to the deleted group
        assert stored == (10, [])
        _produce_wire(at_leader, topic, 1)
        session[0] = opened

        def acquired_again() -> list[tuple[int, int, int]]:
            session[0] += 1
            return _acquired(at_leader, group, "m2", topic_id, session[0] - 1)

        assert eventually(acquired_again, "m2 to acquire the new record") == [(10, 10, 1)]
        at_coordinator.close()
        at_leader.close()
        at_share.close()
