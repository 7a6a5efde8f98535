"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments on one broker without ZooKeeper
answer as a one-node Kafka 3.9 (KRaft) does: a cluster of one, where every election is not needed and the
only reassignment target, this broker alone, completes at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NoReassignmentInProgressError, UnknownTopicOrPartitionError

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_cli_topics import run

TOPIC = "moves"
BROKER_ID = 0  # BrokerProcess writes broker.id=0
NOT_NEEDED = "Leader election not needed for topic partition."


@pytest.fixture(scope="module")
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=6, replication_factor=1)])
    finally:
        admin.close()
    return shared_broker


def reassign(client: WireClient, targets: dict[tuple[str, int], list[int] | None]
             ) -> AlterPartitionReassignmentsResponse:
    topics: dict[str, list[AlterPartitionReassignmentsRequest.ReassignablePartition]] = {}
    for (topic, partition), replicas in targets.items():
        topics.setdefault(topic, []).append(AlterPartitionReassignmentsRequest.ReassignablePartition(
            partition_index=partition, replicas=replicas))
    return client.request(AlterPartitionReassignmentsRequest(topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=t, partitions=p) for t, p in topics.items()]),
        0, AlterPartitionReassignmentsResponse)


def test_reassignment_answers_per_partition_with_kafkas_codes_and_messages(broker):
    client = WireClient(broker.bootstrap)
    try:
        response = reassign(client, {
            (TOPIC, 0): [BROKER_ID], (TOPIC, 1): [BROKER_ID, 7], (TOPIC, 2): [], (TOPIC, 3): [BROKER_ID, BROKER_ID],
            (TOPIC, 4): None, (TOPIC, 9): [BROKER_ID], ("no-such-topic", 0): [BROKER_ID]})
    finally:
        client.close()
    assert (response.error_code, response.error_message) == (ErrorCode.NONE, None)
    answers = {(t.name, p.partition_index): (p.error_code, p.error_message)
               for t in response.responses for p in t.partitions}
    bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert answers == {
        (TOPIC, 0): (ErrorCode.NONE, None),
        (TOPIC, 1): (bad, "The manual partition assignment includes broker 7, but no such broker is registered."),
        (TOPIC, 2): (bad, "The manual partition assignment includes an empty replica list."),
        (TOPIC, 3): (bad, "The manual partition assignment includes the broker 0 more than once."),
        (TOPIC, 4): (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
        (TOPIC, 9): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {TOPIC}:9."),
        ("no-such-topic", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named no-such-topic."),
    }


def test_elect_leaders_raw_answers_for_named_and_for_all_partitions(broker):
    client = WireClient(broker.bootstrap)
    try:
        named = client.request(ElectLeadersRequest(election_type=1, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=TOPIC, partitions=[0, 9]),
            ElectLeadersRequest.TopicPartitions(topic="no-such-topic", partitions=[0]),
            ElectLeadersRequest.TopicPartitions(topic=TOPIC, partitions=[])]), 2, ElectLeadersResponse)
        every = client.request(ElectLeadersRequest(election_type=0, topic_partitions=None), 2, ElectLeadersResponse)
    finally:
        client.close()
    assert [(r.topic, [(p.partition_id, p.error_code, p.error_message) for p in r.partition_result])
            for r in named.replica_election_results] == [
        (TOPIC, [(0, ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED),
                 (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {TOPIC}-9")]),
        ("no-such-topic", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as no-such-topic")]),
        (TOPIC, [])]
    # Every partition: each topic listed, without the partitions whose leader is already the wanted one.
    assert every.error_code == ErrorCode.NONE
    assert TOPIC in [r.topic for r in every.replica_election_results]
    assert [r.partition_result for r in every.replica_election_results if r.partition_result] == []


def test_kafka_python_reassigns_onto_the_one_broker_and_lists_nothing_ongoing(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        results = admin.alter_partition_reassignments({KpTopicPartition(TOPIC, 0): [BROKER_ID],
                                                       KpTopicPartition(TOPIC, 5): None,
                                                       KpTopicPartition("no-such-topic", 0): [BROKER_ID]})
        assert results == {KpTopicPartition(TOPIC, 0): None,
                           KpTopicPartition(TOPIC, 5): NoReassignmentInProgressError,
                           KpTopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError}
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments({TOPIC: [0, 1]}) == {}
        [meta] = admin.describe_topics([TOPIC])
        assert {p["partition_index"]: p["replica_nodes"] for p in meta["partitions"]}[0] == [BROKER_ID]
    finally:
        admin.close()


def test_confluent_kafka_elections_are_not_needed(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = admin.elect_leaders(election, [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 9)]) \
            .result(timeout=30)
        assert {(tp.partition, error.code()) for tp, error in results.items()} == \
               {(0, KafkaError.ELECTION_NOT_NEEDED), (9, KafkaError.UNKNOWN_TOPIC_OR_PART)}
        assert admin.elect_leaders(election, None).result(timeout=30) == {}


def test_reassign_partitions_cli_executes_and_verifies_a_move_onto_the_one_broker(broker, tmp_path: Path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 1,
                                                              "replicas": [BROKER_ID]}]}))
    args = ("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--reassignment-json-file", str(plan))
    executed = run(*args, "--execute")
    assert executed.returncode == 0, executed
    assert executed.stdout.splitlines()[-1] == f"Successfully started partition reassignment for {TOPIC}-1"
    verified = run(*args, "--verify")
    assert verified.returncode == 0, verified
    assert f"Reassignment of partition {TOPIC}-1 is completed." in verified.stdout.splitlines()

    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 1, "replicas": [5]}]}))
    refused = run(*args, "--execute")
    assert refused.returncode == 1, refused
    assert f"{TOPIC}-1: The manual partition assignment includes broker 5, but no such broker is registered." \
        in refused.stderr


def test_leader_election_cli_finds_every_leader_already_elected(broker):
    base = ("leader-election", "--bootstrap-server", broker.bootstrap)
    for election in ("PREFERRED", "UNCLEAN"):
        one = run(*base, "--election-type", election, "--topic", TOPIC, "--partition", "0")
        assert (one.returncode, one.stdout) == (0, f"Valid replica already elected for partitions {TOPIC}-0\n"), one
        every = run(*base, "--election-type", election, "--all-topic-partitions")
        leader = "its preferred leader" if election == "PREFERRED" else "a leader"
        assert (every.returncode, every.stderr) == (0, ""), every
        assert every.stdout == f"No partition needed a leader election ({election}): every partition already has " \
                               f"{leader}.\n"
