"""The transaction coordinator drops the markers of a topic its metadata does not have (deleted, as
Kafka's marker channel does), but not before its metadata knows the cluster's topics: a ZooKeeper-mode
broker learns them from the controller's first UpdateMetadata, and a coordinator that loaded its
transactions before it completed them without writing a marker (chaos rounds 3004 and 3007)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pybroker.controller.metadata import TopicRegistry
from pybroker.controller.zk_metadata import ZkMetadata
from pybroker.coordinator.txn_coordinator import MarkerRequest
from pybroker.server.txn_service import TxnService

MARKER = MarkerRequest("chaos-t0", 1000, 0, 3, True, (("txn", 5),))


class NoTopics(TopicRegistry):
    """A metadata cache without the marker's topic, told of the cluster's topics or not."""

    def __init__(self, told: bool) -> None:
        super().__init__()
        self.told = told

    @property
    def knows_topics(self) -> bool:
        return self.told

    def brokers(self) -> list:
        return []


def write(metadata: NoTopics) -> bool:
    service = object.__new__(TxnService)  # only write_markers' routing is exercised
    service._broker = SimpleNamespace(metadata=metadata, broker_id=0)
    return asyncio.run(service.write_markers(MARKER))


def test_markers_of_an_unknown_topic_wait_until_the_metadata_knows_the_topics() -> None:
    assert write(NoTopics(told=False)) is False  # not yet told: retried later, not completed
    assert write(NoTopics(told=True)) is True  # told, and the topic is not there: deleted, done


def test_a_zookeeper_mode_cache_knows_the_topics_from_its_first_update_metadata() -> None:
    cache = object.__new__(ZkMetadata)
    cache.controller_epoch = 0
    assert not cache.knows_topics
    cache.controller_epoch = 4
    assert cache.knows_topics
