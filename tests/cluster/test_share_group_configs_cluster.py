"""A share group's configs reach every broker: ``share.auto.offset.reset=earliest`` set through one broker
applies on the broker that leads the group's share partition, so a share consumer reads from offset 0 (before,
the leader started from ``latest`` and skipped the backlog)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.error_codes import ErrorCode
from tests.cluster.conftest import running_cluster
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_group_configs_durable import alter_group, group_overrides, listed_groups

TOPIC, GROUP = "spread-configs", "spread-configs-group"


def test_a_group_config_set_on_one_broker_applies_on_the_partition_leader(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        first, leader = cluster.brokers
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1]])])[TOPIC].result(timeout=20)
        assert alter_group(WireClient(first.bootstrap), GROUP, {"share.auto.offset.reset": "earliest"}) \
            == ErrorCode.NONE
        eventually(lambda: group_overrides(WireClient(leader.bootstrap), GROUP)
                   == {"share.auto.offset.reset": "earliest"}, "the leader to see the group config")
        assert listed_groups(WireClient(leader.bootstrap)) == {GROUP}
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
        for i in range(5):
            producer.produce(TOPIC, value=f"r{i}".encode())
        assert producer.flush(20) == 0

        consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                                  "share.acknowledgement.mode": "implicit"})
        try:
            consumer.subscribe([TOPIC])
            seen: list[bytes] = []

            def all_five() -> bool:
                seen.extend(m.value() for m in consumer.poll(0.5) if m.error() is None)
                return len(seen) >= 5

            eventually(all_five, "the five records produced before the group existed")
            assert seen == [f"r{i}".encode() for i in range(5)]
        finally:
            consumer.close()
