"""The controller asks replicas for their log ends before it elects the longest log among ISR members
that may each have lost an unflushed tail (see election.offline_election).

Each broker gets one ListOffsets for all the partitions asked of it, with Kafka's debugging replica id
(-2), which any replica answers (not only the leader) with its log end offset and latest leader epoch.
A broker that does not answer in a few seconds is left out; the controller asks again later.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Mapping

from pybroker.client.errors import KafkaClientError
from pybroker.common.topic import TopicPartition
from pybroker.controller.channel import ControllerChannel
from pybroker.controller.election import LogEnd
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

log = logging.getLogger("pybroker.controller")

LIST_OFFSETS_VERSION = 7  # the first with the leader epoch of the answer is 4
DEBUGGING_REPLICA_ID = -2
LATEST_TIMESTAMP = -1
TIMEOUT_S = 3.0  # the controller's event queue waits for the answers: a paused broker must not hold it long
NO_LOG: LogEnd = (-1, 0)  # a broker without the replica's log has nothing of it


async def ask_log_ends(channel: ControllerChannel, wanted: Mapping[TopicPartition, tuple[int, ...]]
                       ) -> dict[TopicPartition, dict[int, LogEnd]]:
    """``{partition: brokers}`` to ``{partition: {broker: (latest leader epoch, log end offset)}}``; a
    broker that does not answer, or answers a partition with another error, is left out of it."""
    by_broker: dict[int, list[TopicPartition]] = defaultdict(list)
    for key, brokers in wanted.items():
        for broker_id in brokers:
            by_broker[broker_id].append(key)
    answers = await asyncio.gather(*(_ask(channel, broker_id, keys) for broker_id, keys in by_broker.items()))
    ends: dict[TopicPartition, dict[int, LogEnd]] = defaultdict(dict)
    for broker_id, answer in zip(by_broker, answers):
        for key, end in answer.items():
            ends[key][broker_id] = end
    return dict(ends)


async def _ask(channel: ControllerChannel, broker_id: int, keys: list[TopicPartition]) -> dict[TopicPartition, LogEnd]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(keys):
        by_topic[topic].append(partition)
    request = ListOffsetsRequest(replica_id=DEBUGGING_REPLICA_ID, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=LATEST_TIMESTAMP) for p in partitions])
        for topic, partitions in by_topic.items()])
    try:
        response = await channel.ask(broker_id, request, LIST_OFFSETS_VERSION, ListOffsetsResponse,
                                     timeout_s=TIMEOUT_S)
    except (KafkaClientError, OSError, KeyError) as exc:  # e.g. still starting, paused, or gone again
        log.info("Broker %d did not tell its log ends (%s); asking again later", broker_id, exc)
        return {}
    ends: dict[TopicPartition, LogEnd] = {}
    for topic in response.topics:  # type: ignore[attr-defined]
        for p in topic.partitions:
            if p.error_code == ErrorCode.NONE:
                ends[TopicPartition(topic.name, p.partition_index)] = (p.leader_epoch, p.offset)
            elif p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                ends[TopicPartition(topic.name, p.partition_index)] = NO_LOG
    return ends
