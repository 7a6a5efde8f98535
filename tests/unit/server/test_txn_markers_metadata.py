"""The transaction coordinator drops the markers of a topic its metadata does not have (deleted, as
Kafka's marker channel does), but in ZooKeeper mode only once ZooKeeper confirms the topic is gone: a
restarted broker's cache lacks the topics until the controller's UpdateMetadata, and a coordinator that
loaded its transactions before it completed them without writing a marker (chaos rounds 3004, 3007, 3013)."""

from __future__ import annotations

import asyncio

from pybroker.zk import paths as zp
from pybroker.controller.metadata import TopicRegistry
from pybroker.coordinator.txn_coordinator import MarkerRequest
from pybroker.protocol.error_codes import ErrorCode
from pybroker.server.txn_service import TxnService

MARKER = MarkerRequest("chaos-t0", 1000, 0, 3, True, (("txn", 5),))


class NoTopics(TopicRegistry):
    """A metadata cache without the marker's topic."""

    def brokers(self) -> list:
        return []


class FakeZk:
    def __init__(self, nodes: set[str]) -> None:
        self.nodes = nodes

    async def get(self, path: str) -> tuple[bytes, object] | None:
        return (b"{}", object()) if path in self.nodes else None


def write(zk_nodes: set[str] | None) -> dict[tuple[str, int], ErrorCode]:
    service = object.__new__(TxnService)  # only write_markers' routing is exercised
    metadata = NoTopics()
    service._metadata, service._broker_id = lambda: metadata, 0
    service._zk = None if zk_nodes is None else FakeZk(zk_nodes)
    return asyncio.run(service.write_markers(MARKER))


def test_a_topic_the_metadata_lacks_but_zookeeper_has_keeps_its_markers_waiting() -> None:
    waiting = {("txn", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}  # not in this broker's cache yet: retried
    assert write({zp.topic_path("txn")}) == waiting
    done = {("txn", 5): ErrorCode.NONE}
    assert write(set()) == done  # gone from ZooKeeper: deleted, done
    assert write({zp.topic_path("txn"), zp.delete_topic_path("txn")}) == done  # being deleted
    assert write(None) == done  # a single broker's metadata is the cluster's
