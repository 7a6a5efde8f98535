"""InternalTopic.ensure when the topic exists in the cluster but not yet in this broker's metadata cache.

In a cluster a broker's cache trails ZooKeeper: after a restart, or while the controller's UpdateMetadata
for a topic another broker just created is on its way. The chaos harness saw EndTxn answered
TOPIC_ALREADY_EXISTS that way, which librdkafka treats as fatal. Kafka never lets the creation race of
an internal topic reach a client: the coordinator lookup answers COORDINATOR_NOT_AVAILABLE until the
broker knows the topic's leaders. The race needs a lagging cache, so the cache here is a stand-in that
reports the topic missing and refuses its creation, as ZkMetadata.create_topic does when the znode exists.
"""

from __future__ import annotations

import asyncio
from typing import Mapping

from pybroker.controller.errors import TopicExistsError
from pybroker.server.internal_topic import InternalTopic
from tests.unit.server.test_metadata_cache import FakeMetadata


class LaggingMetadata(FakeMetadata):
    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str], *args: object, **kwargs: object) -> None:
        raise TopicExistsError(f"Topic '{name}' already exists.")


def test_an_internal_topic_created_elsewhere_is_not_an_error() -> None:
    metadata = LaggingMetadata()
    topic = InternalTopic(lambda: metadata, None, "__transaction_state", partitions=3, replication_factor=3,  # type: ignore[arg-type]
                          configs=lambda factor: {}, replication_timeout_ms=1000, clock=lambda: 0)
    asyncio.run(topic.ensure())
    assert topic.leader(0) is None  # unknown here yet: callers answer COORDINATOR_NOT_AVAILABLE
