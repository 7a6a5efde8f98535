"""A partition whose recorded leader is not a live broker: Metadata answers LEADER_NOT_AVAILABLE with no
leader (-1), as Kafka's ZkMetadataCache does, not the dead broker's id.

That happens between a leader's death and the new leader's election. Given the dead id, which is absent
from the answer's broker list, the Java admin client (ListOffsets, hence Spark's Kafka source) waited for
that node until its 60 s API timeout instead of looking the leader up again.
"""

from __future__ import annotations

from pybroker.controller.metadata import BrokerInfo
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import MetadataRequest, MetadataResponse
from tests.unit.server.test_metadata_cache import FakeMetadata, ask, topic


def test_a_leader_that_is_not_a_live_broker_is_reported_as_no_leader() -> None:
    metadata = FakeMetadata()
    metadata.put(topic("orders", 2, leader=0, isr=(0, 1), epoch=3))
    metadata.broker_list = [BrokerInfo(1, "127.0.0.1", 9093)]  # broker 0 died; no election yet
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")])
    answer = MetadataResponse.decode(ask(metadata, request, 12), 12)
    assert [b.node_id for b in answer.brokers] == [1]
    for partition in answer.topics[0].partitions:
        assert partition.error_code == ErrorCode.LEADER_NOT_AVAILABLE
        assert partition.leader_id == -1 and partition.leader_epoch == 3
        assert list(partition.replica_nodes) == [0, 1] and list(partition.offline_replicas) == [0]
