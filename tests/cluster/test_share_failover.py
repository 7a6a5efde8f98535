"""A share-partition's state across failovers in a real three-broker cluster (KIP-932's share coordinator).

The topic's partition is led by one broker (L) and its share-partition's state is kept by the share coordinator on
another (C: the leader of ``__share_group_state``'s one partition), so every state read and write goes over the
wire (the persister's remote path). A member acquires ten records and acknowledges five (accepts 0-3, rejects 4);
L is SIGKILLed: the new leader (T, the third broker) reads the state and serves only the five records not
acknowledged. Then C is SIGKILLed: T becomes the share coordinator too, the state reads back as written, and an
acknowledgement is written to it.
"""

from __future__ import annotations

import os
import signal
import uuid

from confluent_kafka.admin import AdminClient

from pybroker.common.topic import topic_id_to_string
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    MetadataRequest,
    MetadataResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic, partition_states, wait_for_full_isr
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import _fetch, _produce

TOPIC, GROUP = "share-failover", "share-failover-group"
ACCEPT, REJECT = 1, 3
GROUP_KEY, SHARE_KEY = 0, 2


def _coordinator(cluster: Cluster, key: str, key_type: int) -> int:
    """The node id FindCoordinator answers for ``key``, once there is one that is running."""
    last: list[FindCoordinatorResponse.Coordinator] = []

    def found() -> tuple[int] | None:
        client = WireClient(cluster.bootstrap.split(",")[0])
        try:
            last[:] = client.request(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 6,
                                     FindCoordinatorResponse).coordinators
        finally:
            client.close()
        node = last[0].node_id
        # Right after a kill the answer can still name the killed broker, until its partition's leader moves.
        running = last[0].error_code == ErrorCode.NONE and cluster.brokers[node].process is not None
        return (node,) if running else None  # a tuple: node 0 is falsy

    return eventually(found, lambda: f"the coordinator of {key} (last answer {last})")[0]


def one_commit_needs_two(write_timeout_ms: int = 1000) -> dict[str, str]:
    """Broker configs under which no write of ``__share_group_state`` is committed while the follower of its one
    partition is stopped: two replicas, min ISR 2, and a write given up after ``write_timeout_ms``."""
    return {"share.coordinator.state.topic.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "2", "share.coordinator.state.topic.min.isr": "2",
            "share.coordinator.write.timeout.ms": str(write_timeout_ms)}


def coordinator_and_follower(cluster: Cluster, key: str) -> tuple[int, int]:
    """The share coordinator of ``key`` and the other replica of its state partition, once both are in its ISR."""
    coordinator = _coordinator(cluster, key, SHARE_KEY)
    _, replicas, _ = wait_for_full_isr(cluster, "__share_group_state")[0]
    return coordinator, next(b for b in replicas if b != coordinator)


def _broker(cluster: Cluster, node_id: int) -> WireClient:
    return WireClient(cluster.brokers[node_id].bootstrap)


def _join(cluster: Cluster, member: str) -> None:
    """ShareGroupHeartbeat at the group's coordinator (found again while it moves or loads), then at the member's
    epoch until it is assigned the topic's partition. A partition is assigned only once the share coordinator has
    initialized its state, which the first heartbeat waits for only a second: a ShareFetch sent before that finds
    no state, and the share-partition, read later, would start at the end, past the records produced meanwhile."""
    from pybroker.protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse

    epoch = 0

    def assigned() -> bool:
        nonlocal epoch
        client = _broker(cluster, _coordinator(cluster, GROUP, GROUP_KEY))
        try:
            answer = client.request(ShareGroupHeartbeatRequest(group_id=GROUP, member_id=member, member_epoch=epoch,
                                                               subscribed_topic_names=[TOPIC]), 1,
                                    ShareGroupHeartbeatResponse)
        finally:
            client.close()
        if answer.error_code != ErrorCode.NONE:
            return False
        epoch = answer.member_epoch
        return answer.assignment is not None and any(t.partitions for t in answer.assignment.topic_partitions)

    eventually(assigned, f"{member} to join {GROUP} and be assigned {TOPIC}")


def _topic_id(client: WireClient, topic: str) -> uuid.UUID:
    """The topic's id as the broker ``client`` talks to knows it. A broker learns a new topic from the controller's
    UpdateMetadata, which may reach it after another broker already answers the topic with a full ISR (and even
    after its LeaderAndIsr made it the leader): until then it answers an error and the zero id, which ShareFetch
    would refuse as UNKNOWN_TOPIC_ID at every try."""
    last: list[MetadataResponse.MetadataResponseTopic] = []

    def known() -> uuid.UUID | None:
        last[:] = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                                 allow_auto_topic_creation=False), 12, MetadataResponse).topics
        return last[0].topic_id if last[0].error_code == ErrorCode.NONE else None

    return eventually(known, lambda: f"the id of {topic} at {client.sock.getpeername()} (last answer {last})")


def _open(client: WireClient, member: str, topic_id: uuid.UUID, coordinator: WireClient,
          group: str = GROUP) -> tuple[int, tuple[int, list[tuple[int, int, int, int]]]]:
    """Open ``member``'s share session at the partition's leader while there is nothing to acquire, fetching until
    the share-partition has started there: its first read of the state (initialized by the group's coordinator
    without a start offset) takes the start offset from ``share.auto.offset.reset``, "latest" being the log's end
    then, and writes it to the share coordinator (``coordinator``) before serving anything. That read may fail (the
    share coordinator slow to commit under load: the partition answered COORDINATOR_NOT_AVAILABLE) and is tried again
    at the next fetch, and one that ends only after a produce starts past what was produced, as Kafka's
    share-partition would: a test that produces next waits for the stored start offset, not for the first fetch's
    answer. The next session epoch, and the state stored."""
    epoch = 0
    stored: list[tuple[int, list[tuple[int, int, int, int]]]] = []

    def started() -> bool:
        nonlocal epoch
        answer = _fetch(client, group, member, epoch, topic_id)
        partitions = [p for t in answer.responses for p in t.partitions]
        assert answer.error_code == ErrorCode.NONE and all(
            p.error_code in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE) and not p.acquired_records
            for p in partitions), answer
        epoch += 1
        state = _stored(coordinator, topic_id, group)
        stored[:] = [] if state is None or state[0] < 0 else [state]
        return bool(stored)

    eventually(started, f"the share-partition of {group} to start for {member}")
    return epoch, stored[0]


def _acquire(client: WireClient, member: str, topic_id: uuid.UUID, epoch: int = 0) -> tuple[list[tuple[int, int, int]],
                                                                                           int]:
    """The first acquisition of ``member`` in a new share session (the state is read first), and the next epoch."""
    last: list[ShareFetchResponse] = []

    def acquired() -> list[tuple[int, int, int]] | None:
        nonlocal epoch
        answer = _fetch(client, GROUP, member, epoch, topic_id)
        last[:] = [answer]
        if answer.error_code == ErrorCode.NONE:  # a refused fetch leaves the session's epoch where it was
            epoch += 1
        partitions = [p for t in answer.responses for p in t.partitions]
        got = [(a.first_offset, a.last_offset, a.delivery_count) for p in partitions for a in p.acquired_records]
        return got or None

    return eventually(acquired, lambda: f"{member} to acquire records (last answer {last})"), epoch


def _acknowledge(client: WireClient, member: str, epoch: int, topic_id: uuid.UUID, first: int,
                 types: list[int]) -> int:
    batch = ShareFetchRequest.AcknowledgementBatch(first_offset=first, last_offset=first + len(types) - 1,
                                                   acknowledge_types=types)
    answer = _fetch(client, GROUP, member, epoch, topic_id, [batch])
    return answer.responses[0].partitions[0].acknowledge_error_code


def _stored(client: WireClient, topic_id: uuid.UUID,
            group: str = GROUP) -> tuple[int, list[tuple[int, int, int, int]]] | None:
    R = ReadShareGroupStateRequest
    found = client.request(R(group_id=group, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
        R.PartitionData(partition=0, leader_epoch=-1)])]), 0, ReadShareGroupStateResponse).results[0].partitions[0]
    if found.error_code != ErrorCode.NONE:
        return None
    return found.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                for b in found.state_batches]


def test_share_state_survives_the_leader_and_the_share_coordinator_being_killed(tmp_path) -> None:
    extra = {"share.coordinator.state.topic.num.partitions": "1", "share.coordinator.state.topic.min.isr": "1"}
    with running_cluster(tmp_path, extra=extra) as cluster:
        coordinator = _coordinator(cluster, f"{GROUP}:{topic_id_to_string(uuid.uuid4())}:0", SHARE_KEY)
        wait_for_full_isr(cluster, "__share_group_state")
        leader, third = [b for b in range(3) if b != coordinator]
        create_topic(cluster, TOPIC, 1, assignment=[[leader, third, coordinator]])
        wait_for_full_isr(cluster, TOPIC)
        client, at_coordinator = _broker(cluster, leader), _broker(cluster, coordinator)
        topic_id = _topic_id(client, TOPIC)
        _join(cluster, "m1")
        epoch, stored = _open(client, "m1", topic_id, at_coordinator)
        at_coordinator.close()
        assert stored == (0, [])  # starts at the end: 0
        _produce(client, TOPIC, 10)
        acquired, epoch = _acquire(client, "m1", topic_id, epoch)
        assert acquired == [(0, 9, 1)]
        assert _acknowledge(client, "m1", epoch, topic_id, 0, [ACCEPT] * 4 + [REJECT]) == ErrorCode.NONE
        client.close()
        wait_for_full_isr(cluster, "__share_group_state")

        cluster.brokers[leader].kill()
        eventually(lambda: partition_states(cluster, TOPIC)[0][0] == third, f"broker {third} to lead {TOPIC}")
        _join(cluster, "m2")
        client = _broker(cluster, third)
        acquired, epoch = _acquire(client, "m2", topic_id)
        assert acquired == [(5, 9, 1)]  # held by m1 when its leader died: delivered again, never as a second try

        cluster.brokers[coordinator].kill()
        admin = AdminClient({"bootstrap.servers": cluster.brokers[third].bootstrap})
        eventually(lambda: admin.list_topics("__share_group_state", timeout=10).topics[
            "__share_group_state"].partitions[0].leader == third, f"broker {third} to lead __share_group_state")
        assert eventually(lambda: _stored(client, topic_id), "the state read back") == (5, [(5, 9, 0, 0)])
        assert _acknowledge(client, "m2", epoch, topic_id, 5, [ACCEPT] * 5) == ErrorCode.NONE
        assert _stored(client, topic_id) == (10, [])
        client.close()


def test_released_records_wait_until_the_share_coordinator_took_their_delivery_count(tmp_path) -> None:
    """Chaos seed 17: records released while the share coordinator could not commit a write were delivered again
    at once, so when the coordinator then lost that write (its leader lost power) a new leader read the older
    delivery counts and counted them from 1 again. Here the coordinator's follower (S) is stopped, so no write of
    ``__share_group_state`` (two replicas, min ISR 2) is acknowledged: a record m1 releases (its share session
    closes) is not delivered to m2 until S is back and the write of its delivery count is taken."""
    with running_cluster(tmp_path, extra=one_commit_needs_two()) as cluster:
        coordinator, follower = coordinator_and_follower(cluster, f"{GROUP}:{topic_id_to_string(uuid.uuid4())}:0")
        leader = next(b for b in range(3) if b not in (coordinator, follower))
        create_topic(cluster, TOPIC, 1, assignment=[[leader, coordinator]])
        wait_for_full_isr(cluster, TOPIC)
        client, at_coordinator = _broker(cluster, leader), _broker(cluster, coordinator)
        topic_id = _topic_id(client, TOPIC)
        _join(cluster, "m1")
        _join(cluster, "m2")
        epoch, stored = _open(client, "m1", topic_id, at_coordinator)
        assert stored == (0, [])  # starts at the end: 0
        _produce(client, TOPIC, 10)
        acquired, _ = _acquire(client, "m1", topic_id, epoch)
        assert acquired == [(0, 9, 1)]
        assert _fetch(client, GROUP, "m2", 0, topic_id).error_code == ErrorCode.NONE  # m2's session: nothing yet

        stopped = cluster.brokers[follower].process
        assert stopped is not None
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            assert _fetch(client, GROUP, "m1", -1, None).error_code == ErrorCode.NONE  # m1's session closes
            held = _fetch(client, GROUP, "m2", 1, topic_id).responses
            assert [a for t in held for p in t.partitions for a in p.acquired_records] == []
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        redelivered, _ = _acquire(client, "m2", topic_id, 2)
        assert redelivered == [(0, 9, 2)]
        assert eventually(lambda: _stored(at_coordinator, topic_id), "the state read back") == \
            (0, [(0, 9, 0, 1)])  # m2's acquisition is not written: the count m1's release left
        client.close()
        at_coordinator.close()


def _loaded(client: WireClient, topic_id: uuid.UUID) -> None:
    """The share coordinator ``client`` talks to has loaded the share-partition's state partition: FindCoordinator
    names it as soon as the partition has a leader, before that broker has heard it leads (NOT_COORDINATOR) or has
    replayed the partition (COORDINATOR_LOAD_IN_PROGRESS), so a read (which changes nothing) is asked until it
    answers otherwise."""
    R = ReadShareGroupStateRequest

    def answered() -> bool:
        found = client.request(R(group_id=GROUP, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
            R.PartitionData(partition=0, leader_epoch=-1)])]), 0, ReadShareGroupStateResponse).results[0].partitions[0]
        return found.error_code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR)

    eventually(answered, "the share coordinator's partition loaded")


def _write(client: WireClient, topic_id: uuid.UUID, start_offset: int,
           batches: list[tuple[int, int, int, int]]) -> int:
    W = WriteShareGroupStateRequest
    return client.request(W(group_id=GROUP, topics=[W.WriteStateData(topic_id=topic_id, partitions=[W.PartitionData(
        partition=0, state_epoch=0, leader_epoch=0, start_offset=start_offset, state_batches=[
            W.StateBatch(first_offset=f, last_offset=la, delivery_state=st, delivery_count=c)
            for f, la, st, c in batches])])]), 0, WriteShareGroupStateResponse).results[0].partitions[0].error_code


def test_the_share_coordinator_answers_a_read_from_committed_state_only(tmp_path) -> None:
    """A write whose records the ISR did not take in time is answered COORDINATOR_NOT_AVAILABLE, but its records
    stay in the coordinator's log (a leader failure may drop them) and were applied to its state: a read must not
    answer with them until they are committed, or a share-partition leader would start from state that can still
    vanish."""
    with running_cluster(tmp_path, extra=one_commit_needs_two()) as cluster:
        topic_id = uuid.uuid4()  # the share coordinator keys on the id alone
        coordinator, follower = coordinator_and_follower(cluster, f"{GROUP}:{topic_id_to_string(topic_id)}:0")
        client = _broker(cluster, coordinator)
        _loaded(client, topic_id)
        I = InitializeShareGroupStateRequest
        assert client.request(I(group_id=GROUP, topics=[I.InitializeStateData(topic_id=topic_id, partitions=[
            I.PartitionData(partition=0, state_epoch=0, start_offset=0)])]), 0,
            InitializeShareGroupStateResponse).results[0].partitions[0].error_code == ErrorCode.NONE
        assert _write(client, topic_id, 0, [(0, 4, 0, 1)]) == ErrorCode.NONE
        assert _stored(client, topic_id) == (0, [(0, 4, 0, 1)])

        stopped = cluster.brokers[follower].process
        assert stopped is not None
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            assert _write(client, topic_id, 0, [(0, 4, 0, 2)]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert _stored(client, topic_id) is None  # not (0, [(0, 4, 0, 2)]): the ISR does not hold it
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert eventually(lambda: _stored(client, topic_id), "the write committed") == (0, [(0, 4, 0, 2)])
        client.close()
