"""DescribeTopicPartitions (75): topic and partition leadership, paginated by a cursor (KIP-966).

kafka-clients 3.9's admin `describeTopics` sends this before falling back to Metadata. Topics are
answered in name order and partitions in index order, from the request's cursor on, until
`response_partition_limit` partitions (at most Kafka's default max.request.partition.size.limit,
2000) are in the answer; `next_cursor` then names the first partition left out. An empty topic list
means every topic, and then topics that cannot be described are left out instead of reported.
Eligible leader replicas (ELR, a KRaft feature) are not kept here: both ELR lists are empty, as from a
Kafka broker with ELR off, and never null (kafka-clients' admin dereferences them). Answers are kept
encoded while the metadata they describe is unchanged (`metadata_cache`).

Under an authorizer (answers then depend on the principal and are not cached) topics are filtered as
Metadata filters them: left out of an every-topic answer, TOPIC_AUTHORIZATION_FAILED when named.
"""

from __future__ import annotations

from pybroker.common.topic import INTERNAL_TOPICS, ZERO_UUID
from pybroker.controller.metadata import ClusterMetadata, TopicInfo
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import EncodedBody
from pybroker.protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names
from pybroker.server.context import RequestContext
from pybroker.server.metadata_cache import answer_cache
from pybroker.server.registry import api

Response = DescribeTopicPartitionsResponse
Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
MAX_PARTITIONS_PER_RESPONSE = 2000


@api(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def handle(ctx: RequestContext, request: DescribeTopicPartitionsRequest) -> EncodedBody:
    metadata = ctx.services.metadata
    assert metadata is not None
    every_topic = not request.topics
    names = sorted(metadata.topics()) if every_topic else sorted({t.name for t in request.topics})
    cursor = request.cursor
    if ctx.services.authorizer is not None:
        allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        response = _answer(metadata, request, every_topic, [n for n in names if n in allowed])
        response.topics += [Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=n, topic_id=ZERO_UUID,
                                  is_internal=n in INTERNAL_TOPICS)
                            for n in names if n not in allowed and not every_topic]
        return EncodedBody(ctx.api_version, response.encode(ctx.api_version))
    shape = (ApiKey.DESCRIBE_TOPIC_PARTITIONS, ctx.api_version, request.response_partition_limit,
             None if cursor is None else (cursor.topic_name, cursor.partition_index))
    requested = None if every_topic else tuple((name, None) for name in names)
    cache = answer_cache(metadata)
    body = cache.get(metadata, shape, requested)
    if body is None:  # the answer is built without awaiting, so from exactly the topics resolved here
        body = _answer(metadata, request, every_topic, names).encode(ctx.api_version)
        cache.put(metadata, shape, requested, [] if every_topic else [metadata.topic(n) for n in names], body)
    return EncodedBody(ctx.api_version, body)


def _answer(metadata: ClusterMetadata, request: DescribeTopicPartitionsRequest, every_topic: bool,
            names: list[str]) -> DescribeTopicPartitionsResponse:
    cursor = request.cursor
    if cursor is not None:
        if cursor.topic_name not in names and not every_topic or cursor.partition_index < 0:
            # Kafka's error answer for an invalid request: every requested topic with the error
            return Response(topics=[Topic(error_code=ErrorCode.INVALID_REQUEST, name=name)
                                    for name in names or [cursor.topic_name]])
        names = [n for n in names if n >= cursor.topic_name]
    remaining = max(min(request.response_partition_limit, MAX_PARTITIONS_PER_RESPONSE), 1)
    live = {b.broker_id for b in metadata.brokers()}
    topics: list[Topic] = []
    for name in names:
        if remaining == 0:
            return Response(topics=topics, next_cursor=Response.Cursor(topic_name=name, partition_index=0))
        info = metadata.topic(name)
        if info is None:
            if not every_topic:
                topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = sorted(i for i in info.partitions if i >= first)
        shown = indexes[:remaining]
        topics.append(_describe(info, shown, live))
        remaining -= len(shown)
        if len(shown) < len(indexes):
            return Response(topics=topics, next_cursor=Response.Cursor(topic_name=name,
                                                                       partition_index=indexes[len(shown)]))
    return Response(topics=topics)


def _describe(info: TopicInfo, indexes: list[int], live: set[int]) -> Topic:
    partitions = []
    for index in indexes:
        p = info.partitions[index]
        partitions.append(Partition(
            error_code=0 if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
            leader_id=p.leader, leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
            offline_replicas=p.offline_replicas(live), eligible_leader_replicas=[], last_known_elr=[]))
    return Topic(error_code=0, name=info.name, topic_id=info.topic_id or ZERO_UUID,
                 is_internal=info.name in INTERNAL_TOPICS, partitions=partitions)

