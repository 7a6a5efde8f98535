"""The Metadata handler's encoded-answer cache: reused while nothing changed, rebuilt after any change.

Each change below is made the way the metadata owners make it (a new immutable TopicInfo or broker
list); after it, the handler's answer must equal one built with no cache at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from pybroker.common.topic import new_topic_id
from pybroker.controller.metadata import BrokerInfo, PartitionInfo, TopicInfo, TopicRegistry
from pybroker.protocol.frame import EncodedBody
from pybroker.protocol.messages import DescribeTopicPartitionsRequest, MetadataRequest, MetadataResponse
from pybroker.server.context import RequestContext
from pybroker.server.handlers import describe_topic_partitions
from pybroker.server.handlers import metadata as handler
from pybroker.server import metadata_cache
from pybroker.server.metadata_cache import MetadataAnswerCache


class FakeMetadata(TopicRegistry):
    """Cluster metadata whose every field a test can replace, as ZkMetadata.apply_update does."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster_id = "cluster-a"
        self.controller_id = 0
        self.broker_list = [BrokerInfo(0, "127.0.0.1", 9092), BrokerInfo(1, "127.0.0.1", 9093)]

    def brokers(self) -> list[BrokerInfo]:
        return list(self.broker_list)  # a new list per call, like ZkMetadata

    def put(self, info: TopicInfo) -> None:
        self._topics[info.name] = info
        self._index(info)

    def drop(self, name: str) -> None:
        info = self._topics.pop(name)
        self._unindex(info)


def topic(name: str, partitions: int, *, leader: int = 0, isr: tuple[int, ...] = (0, 1), epoch: int = 0) -> TopicInfo:
    return TopicInfo(name, new_topic_id(), {p: PartitionInfo(p, (0, 1), leader, epoch, isr) for p in range(partitions)})


def with_partitions(info: TopicInfo, **changes: object) -> TopicInfo:
    return dataclasses.replace(info, partitions={p: dataclasses.replace(part, **changes)  # type: ignore[arg-type]
                                                 for p, part in info.partitions.items()})


def ask(metadata: FakeMetadata, request: MetadataRequest | DescribeTopicPartitionsRequest, version: int) -> bytes:
    broker = SimpleNamespace(metadata=metadata, config={"auto.create.topics.enable": False}, authorizer=None)
    ctx = RequestContext(broker, version, 1, "test", "127.0.0.1", 0)  # type: ignore[arg-type]
    api = handler if isinstance(request, MetadataRequest) else describe_topic_partitions
    answer = asyncio.run(api.handle.handle(ctx, request))
    return answer.body if isinstance(answer, EncodedBody) else answer.encode(version)


def uncached(metadata: FakeMetadata, request: MetadataRequest | DescribeTopicPartitionsRequest,
             version: int) -> bytes:
    metadata_cache._caches.pop(metadata, None)
    try:
        return ask(metadata, request, version)
    finally:
        metadata_cache._caches.pop(metadata, None)


def set_leader(m: FakeMetadata) -> None:
    m.put(with_partitions(m.topics()["orders"], leader=1, leader_epoch=1))


def shrink_isr(m: FakeMetadata) -> None:
    m.put(with_partitions(m.topics()["orders"], isr=(0,)))


def lose_leader(m: FakeMetadata) -> None:
    m.put(with_partitions(m.topics()["orders"], leader=-1))


def add_partitions(m: FakeMetadata) -> None:
    old = m.topics()["orders"]
    m.put(dataclasses.replace(topic("orders", 5), topic_id=old.topic_id))


def recreate(m: FakeMetadata) -> None:
    m.drop("orders")
    m.put(topic("orders", 3))


def register_broker(m: FakeMetadata) -> None:
    m.broker_list = [*m.broker_list, BrokerInfo(2, "127.0.0.1", 9094)]


def broker_gone(m: FakeMetadata) -> None:
    m.broker_list = m.broker_list[:1]


def broker_moved(m: FakeMetadata) -> None:
    m.broker_list = [BrokerInfo(0, "127.0.0.2", 9092, "rack-a"), *m.broker_list[1:]]


def new_controller(m: FakeMetadata) -> None:
    m.controller_id = 1


def create_other(m: FakeMetadata) -> None:
    m.put(topic("payments", 2))


def delete_other(m: FakeMetadata) -> None:
    m.drop("audit")


CHANGES: list[Callable[[FakeMetadata], None]] = [
    set_leader, shrink_isr, lose_leader, add_partitions, recreate, register_broker, broker_gone, broker_moved,
    new_controller, create_other, delete_other,
]
REQUESTS = {
    "all topics": MetadataRequest(topics=None),
    "by name": MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")]),
}
DTP = DescribeTopicPartitionsRequest
DTP_REQUESTS = {
    "all topics": DTP(topics=[]),
    "by name, one unknown": DTP(topics=[DTP.TopicRequest(name="orders"), DTP.TopicRequest(name="payments")]),
    "from a cursor, paged": DTP(topics=[], response_partition_limit=2,
                                cursor=DTP.Cursor(topic_name="orders", partition_index=1)),
}


@pytest.mark.parametrize("version", [1, 9, 12])
@pytest.mark.parametrize("shape", sorted(REQUESTS))
@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.__name__)
def test_answer_after_a_change_equals_an_uncached_one(change: Callable[[FakeMetadata], None], shape: str,
                                                      version: int) -> None:
    metadata = FakeMetadata()
    metadata.put(topic("orders", 3))
    metadata.put(topic("audit", 1))
    request = REQUESTS[shape]
    before = ask(metadata, request, version)
    assert ask(metadata, request, version) is before  # the second answer is the kept one
    change(metadata)
    after = ask(metadata, request, version)
    assert after == uncached(metadata, request, version)
    visible = shape == "all topics" or change not in (create_other, delete_other)
    if visible and (change is not recreate or version >= 10):  # topic ids are on the wire from v10
        assert after != before


@pytest.mark.parametrize("shape", sorted(DTP_REQUESTS))
@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.__name__)
def test_describe_topic_partitions_after_a_change_equals_an_uncached_answer(
        change: Callable[[FakeMetadata], None], shape: str) -> None:
    metadata = FakeMetadata()
    metadata.put(topic("orders", 3))
    metadata.put(topic("audit", 1))
    request = DTP_REQUESTS[shape]
    before = ask(metadata, request, 0)
    assert ask(metadata, request, 0) is before
    change(metadata)
    assert ask(metadata, request, 0) == uncached(metadata, request, 0)


def test_answer_by_id_is_kept_and_follows_recreation() -> None:
    metadata = FakeMetadata()
    info = topic("orders", 2)
    metadata.put(info)
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=info.topic_id)])
    first = ask(metadata, request, 12)
    assert ask(metadata, request, 12) is first
    metadata.drop("orders")
    gone = MetadataResponse.decode(ask(metadata, request, 12), 12)
    assert gone.topics[0].error_code == 100  # UNKNOWN_TOPIC_ID


def test_unknown_topics_are_never_kept() -> None:
    metadata = FakeMetadata()
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="later")])
    missing = MetadataResponse.decode(ask(metadata, request, 12), 12)
    assert missing.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    metadata.put(topic("later", 1))
    found = MetadataResponse.decode(ask(metadata, request, 12), 12)
    assert found.topics[0].error_code == 0 and len(found.topics[0].partitions) == 1


def test_cache_is_bounded() -> None:
    metadata = FakeMetadata()
    cache = MetadataAnswerCache(max_entries=2)
    for version in range(3):
        cache.put(metadata, version, None, [], b"body")
    assert cache.get(metadata, 2, None) == b"body"
    assert cache.get(metadata, 0, None) is None
