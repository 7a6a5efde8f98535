"""In a cluster the broker taking a CreateTopics checks only its own descriptor budget. Another broker asked
(LeaderAndIsr) for more new replicas than its open files limit holds answers KAFKA_STORAGE_ERROR for those it
cannot open: the controller treats them as offline replicas and elects leaders among the others, that broker's
log dir stays online, it keeps accepting connections, and the partitions it already led keep serving."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.eventually import eventually
from tests.cluster.conftest import running_cluster

OPEN_FILES = 400  # broker 1's RLIMIT_NOFILE: 300 descriptors for partitions (a quarter kept free)
WIDE = 400  # partitions with a replica on broker 1: more than it can open


def produce(bootstrap: str, topic: str, partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    errors: list[object] = []
    producer.produce(topic, b"value", partition=partition, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None], errors


def test_a_broker_past_its_open_files_limit_reports_new_replicas_offline(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2, open_files={1: OPEN_FILES}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("kept", 1, replica_assignment=[[1, 0]])])["kept"].result(30)
        eventually(lambda: admin.list_topics("kept", timeout=10).topics["kept"].partitions[0].leader == 1,
                   "broker 1 to lead kept-0")
        produce(cluster.bootstrap, "kept", 0)

        # asked of broker 0, whose own budget holds them; broker 1 is the preferred leader of every one
        admin.create_topics([NewTopic("wide", WIDE, replica_assignment=[[1, 0]] * WIDE)])["wide"].result(60)

        def led() -> dict[int, int]:
            partitions = admin.list_topics("wide", timeout=10).topics["wide"].partitions
            return {p: partition.leader for p, partition in partitions.items()}

        eventually(lambda: len(led()) == WIDE and 0 in led().values()
                   and all(leader in (0, 1) for leader in led().values()),
                   "the controller to move the replicas broker 1 could not open to broker 0")
        leaders = led()
        assert 0 < list(leaders.values()).count(1) < WIDE, "broker 1 leads those it could open, broker 0 the rest"
        produce(cluster.bootstrap, "wide", next(p for p, leader in leaders.items() if leader == 0))
        produce(cluster.bootstrap, "wide", next(p for p, leader in leaders.items() if leader == 1))

        produce(cluster.brokers[1].bootstrap, "kept", 0)  # a new connection to broker 1, still serving
        assert cluster.brokers[1].wait_for_log(r"Refusing replica wide-\d+: .*RLIMIT_NOFILE 400")
        assert "Stopping serving logs" not in cluster.brokers[1].log_text()
        assert "Too many open files" not in cluster.brokers[1].log_text()
