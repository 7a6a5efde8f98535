"""`pybroker leader-election` and `pybroker reassign-partitions` against three brokers and ZooKeeper.

auto.leader.rebalance.enable is off here (the shared fixture turns it on), so leadership returns to
preferred replicas only because the tool asked for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from tests.eventually import eventually
from tests.cluster import conftest
from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import consume, create_topic, partition_states, wait_for_full_isr
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_topics import run


@pytest.fixture(scope="module", autouse=True)
def no_auto_rebalance() -> Iterator[None]:
    """Runs before the module's cluster starts (autouse fixtures of a scope come first)."""
    with pytest.MonkeyPatch.context() as patch:
        shared = conftest.broker_overrides
        patch.setattr(conftest, "broker_overrides", lambda broker_id, zk: {
            **shared(broker_id, zk), "auto.leader.rebalance.enable": "false"})
        yield


def test_preferred_election_moves_leadership_back_after_a_restart(cluster: Cluster) -> None:
    create_topic(cluster, "elect", 3)
    wait_for_full_isr(cluster, "elect")
    assert cluster.brokers[0].stop() == 0
    # Broker 0 (the first to start) was the controller: the tool follows the controller to its successor,
    # retrying NOT_CONTROLLER and the broken connection while the cluster elects one.
    following = run("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "UNCLEAN",
                    "--topic", "elect", "--partition", "0")
    assert (following.returncode, following.stdout) == (0, "Valid replica already elected for partitions elect-0\n"), \
        following.stderr
    cluster.brokers[0].start()
    states = wait_for_full_isr(cluster, "elect")
    moved = sorted(f"elect-{p}" for p, (leader, replicas, _) in states.items() if leader != replicas[0])
    assert moved  # broker 0 is the preferred leader of one partition and leads none after its restart

    result = run("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "PREFERRED",
                 "--all-topic-partitions")
    assert result.returncode == 0, result.stderr
    elected = result.stdout.splitlines()[0]
    assert elected.startswith("Successfully completed leader election (PREFERRED) for partitions ")
    assert set(moved) <= set(elected.split(" for partitions ")[1].split(", "))
    eventually(lambda: all(leader == replicas[0] for leader, replicas, _ in partition_states(cluster, "elect").values()),
               "the preferred leaders back")

    again = run("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "unclean",
                "--topic", "elect", "--partition", "0")
    assert (again.returncode, again.stdout) == (0, "Valid replica already elected for partitions elect-0\n")
    unknown = run("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "PREFERRED",
                  "--topic", "elect", "--partition", "9")
    assert unknown.returncode == 1
    assert unknown.stdout.startswith("Error completing leader election (PREFERRED) for partition: elect-9: "
                                     "UnknownTopicOrPartitionException")
    assert "1 replica(s) could not be elected" in unknown.stderr


def topic_with_records(cluster: Cluster, name: str, replicas: list[int]) -> list[bytes]:
    """A one-partition topic on ``replicas`` holding 1000 acknowledged records: what a move must carry over. Each
    test makes its own, so that none depends on another having run first (or on the same worker)."""
    create_topic(cluster, name, 1, assignment=[replicas])
    wait_for_full_isr(cluster, name)
    records = [f"r-{i}".encode() for i in range(1000)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for record in records:
        producer.produce(name, record)
    assert producer.flush(30) == 0
    return records


def test_reassignment_moves_a_partition_to_new_brokers(cluster: Cluster, tmp_path: Path) -> None:
    expected = topic_with_records(cluster, "moving", [0, 1])

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"topics": [{"topic": "moving"}], "version": 1}))
    generated = run("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--generate",
                    "--topics-to-move-json-file", str(topics_file), "--broker-list", "1,2")
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[3] == "Proposed partition reassignment configuration"
    assert json.loads(lines[1])["partitions"] == [{"topic": "moving", "partition": 0, "replicas": [0, 1],
                                                   "log_dirs": ["any", "any"]}]
    assert sorted(json.loads(lines[4])["partitions"][0]["replicas"]) == [1, 2]

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [1, 2]}]}))
    executed = run("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
                   "--reassignment-json-file", str(plan))
    assert executed.returncode == 0, executed.stderr
    assert executed.stdout.splitlines()[-1] == "Successfully started partition reassignment for moving-0"

    def verified() -> bool:
        result = run("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                     "--reassignment-json-file", str(plan))
        assert result.returncode == 0 and result.stdout.startswith("Status of partition reassignment:\n")
        return "Reassignment of partition moving-0 is completed." in result.stdout

    eventually(verified, "the reassignment to complete", timeout=60)
    leader, replicas, isr = wait_for_full_isr(cluster, "moving")[0]
    assert replicas == [1, 2] and sorted(isr) == [1, 2] and leader in (1, 2)
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        assignment = json.loads(zk.get("/brokers/topics/moving")[0])
    finally:
        zk.stop()
        zk.close()
    assert (assignment["partitions"], assignment["adding_replicas"], assignment["removing_replicas"]) == \
        ({"0": [1, 2]}, {}, {})
    eventually(lambda: not (cluster.brokers[0].data_dir / "logs" / "moving-0").exists(),
               "broker 0 to delete its replica")

    # Every record is on the new replicas: read it from each as leader in turn.
    assert consume(cluster, "moving", 1, 1000)[0] == expected
    assert cluster.brokers[leader].stop() == 0  # controlled shutdown hands leadership to the other new replica
    assert consume(cluster, "moving", 1, 1000)[0] == expected
    cluster.brokers[leader].start()
    wait_for_full_isr(cluster, "moving")


def test_zookeeper_tooling_can_request_a_reassignment_through_its_znode(cluster: Cluster) -> None:
    expected = topic_with_records(cluster, "znode-moving", [1, 2])
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        zk.create("/admin/reassign_partitions", json.dumps(
            {"version": 1, "partitions": [{"topic": "znode-moving", "partition": 0, "replicas": [2, 0]}]}).encode())
        eventually(lambda: not zk.exists("/admin/reassign_partitions"), "the controller to take the request")
    finally:
        zk.stop()
        zk.close()
    leader, replicas, isr = eventually(lambda: (s := partition_states(cluster, "znode-moving")[0])[1] == [2, 0] and
                                       sorted(s[2]) == [0, 2] and s, "the move to [2, 0]", timeout=60)
    assert leader in (0, 2)
    assert consume(cluster, "znode-moving", 1, 1000)[0] == expected


def test_bad_input_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args in (["leader-election", "--all-topic-partitions"],
                 ["leader-election", "--election-type", "PREFERRED", "--topic", "t"],
                 ["reassign-partitions", "--verify"],
                 ["reassign-partitions", "--execute", "--reassignment-json-file", str(bad)]):
        result = run(*args, "--bootstrap-server", "127.0.0.1:1")
        assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, (args, result.stderr)


def test_a_single_broker_needs_no_election_and_refuses_reassignment(broker: BrokerProcess, tmp_path: Path) -> None:
    assert run("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "alone").returncode == 0
    elected = run("leader-election", "--bootstrap-server", broker.bootstrap, "--election-type", "PREFERRED",
                  "--all-topic-partitions")
    # As one-node KRaft Kafka: "every partition" answers leave out those whose leader is already preferred;
    # the tool says it found nothing to elect.
    assert (elected.returncode, elected.stdout) == (0, "No partition needed a leader election (PREFERRED): every "
                                                       "partition already has its preferred leader.\n")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "alone", "partition": 0, "replicas": [1]}]}))
    refused = run("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--execute",
                  "--reassignment-json-file", str(plan))
    assert refused.returncode == 1 and "includes broker 1, but no such broker is registered" in refused.stderr
