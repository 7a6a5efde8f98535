"""The share-group offsets admin APIs (KIP-932), keys 90-92 at Kafka 4.2's versions: DescribeShareGroupOffsets v0-1,
AlterShareGroupOffsets v0 and DeleteShareGroupOffsets v0, answered by the group's coordinator (``share_offsets.py``).

ACLs as Kafka checks them: Describe on the group and on each topic to describe, Read on the group and its topics to
alter, Delete on the group and Read on its topics to delete. With share groups off (share.version 0) every group is
answered UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import uuid

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize
from pybroker.server.context import RequestContext
from pybroker.server.features import share_groups_enabled
from pybroker.server.registry import api
from pybroker.server.share_offsets import PartitionOffsets, ShareOffsets

D = DescribeShareGroupOffsetsResponse
A = AlterShareGroupOffsetsResponse
X = DeleteShareGroupOffsetsResponse
ZERO_ID = uuid.UUID(int=0)


def _offsets(ctx: RequestContext) -> ShareOffsets:
    metadata = ctx.services.metadata
    assert metadata is not None  # set at the broker's start, before it takes requests
    return ShareOffsets(ctx.services.share, metadata, ctx.services.replica_manager)


async def _group_refusal(ctx: RequestContext, group_id: str, operation: AclOperation) -> ErrorCode | None:
    """The error of the whole group: share groups off, not authorized, or not coordinated here."""
    if not share_groups_enabled(ctx.services.features.current):
        return ErrorCode.UNSUPPORTED_VERSION
    if not authorize(ctx, operation, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    groups = ctx.services.groups
    await groups.topic.ensure()  # not led yet: NOT_COORDINATOR below, as Kafka's
    if not groups.owns(group_id):
        return groups.not_owned_error(group_id)
    return None


@api(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def describe_share_group_offsets(ctx: RequestContext, request: DescribeShareGroupOffsetsRequest
                                       ) -> DescribeShareGroupOffsetsResponse:
    answered = []
    offsets = _offsets(ctx)
    for group in request.groups:
        refused = await _group_refusal(ctx, group.group_id, AclOperation.DESCRIBE)
        if refused is None:
            refused = offsets.group_error(group.group_id, must_exist=group.topics is None, must_be_empty=False)
        if refused is not ErrorCode.NONE:
            answered.append(D.DescribeShareGroupOffsetsResponseGroup(group_id=group.group_id, topics=[],
                                                                     error_code=refused, error_message=refused.message))
            continue
        wanted = offsets.assigned_topics(group.group_id) if group.topics is None else \
            {t.topic_name: list(t.partitions) for t in group.topics}
        allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)
        topics = []
        for name, partitions in wanted.items():
            if name in allowed:
                described = await offsets.describe(group.group_id, name, partitions)
            else:
                described = [PartitionOffsets(p, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in partitions]
            topics.append(D.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=offsets.topic_id(name) or ZERO_ID, partitions=[
                    D.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p.partition, start_offset=p.start_offset, leader_epoch=p.leader_epoch,
                        lag=p.lag, error_code=p.error, error_message=p.error.message if p.error else None)
                    for p in described]))
        answered.append(D.DescribeShareGroupOffsetsResponseGroup(group_id=group.group_id, topics=topics))
    return DescribeShareGroupOffsetsResponse(groups=answered)


@api(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def alter_share_group_offsets(ctx: RequestContext, request: AlterShareGroupOffsetsRequest
                                    ) -> AlterShareGroupOffsetsResponse:
    offsets = _offsets(ctx)
    refused = await _group_refusal(ctx, request.group_id, AclOperation.READ)
    if refused is None:
        refused = offsets.group_error(request.group_id, must_exist=False, must_be_empty=True)
    allowed = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.topic_name for t in request.topics))
    responses = []
    for topic in request.topics:
        codes: dict[int, ErrorCode]
        if refused is not ErrorCode.NONE or topic.topic_name not in allowed:
            code = refused if refused is not ErrorCode.NONE else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            codes = {p.partition_index: code for p in topic.partitions}
        else:
            codes = await offsets.alter(request.group_id, topic.topic_name,
                                        {p.partition_index: p.start_offset for p in topic.partitions})
        responses.append(A.AlterShareGroupOffsetsResponseTopic(
            topic_name=topic.topic_name, topic_id=offsets.topic_id(topic.topic_name) or ZERO_ID, partitions=[
                A.AlterShareGroupOffsetsResponsePartition(partition_index=index, error_code=code,
                                                          error_message=code.message if code else None)
                for index, code in codes.items()]))
    if refused is not ErrorCode.NONE:
        return AlterShareGroupOffsetsResponse(error_code=refused, error_message=refused.message, responses=responses)
    return AlterShareGroupOffsetsResponse(responses=responses)


@api(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def delete_share_group_offsets(ctx: RequestContext, request: DeleteShareGroupOffsetsRequest
                                     ) -> DeleteShareGroupOffsetsResponse:
    offsets = _offsets(ctx)
    refused = await _group_refusal(ctx, request.group_id, AclOperation.DELETE)
    if refused is None:
        refused = offsets.group_error(request.group_id, must_exist=True, must_be_empty=True)
    if refused is not ErrorCode.NONE:
        return DeleteShareGroupOffsetsResponse(error_code=refused, error_message=refused.message)
    allowed = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.topic_name for t in request.topics))
    responses = []
    for topic in request.topics:
        code = await offsets.delete(request.group_id, topic.topic_name) if topic.topic_name in allowed \
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        responses.append(X.DeleteShareGroupOffsetsResponseTopic(
            topic_name=topic.topic_name, topic_id=offsets.topic_id(topic.topic_name) or ZERO_ID, error_code=code,
            error_message=code.message if code else None))
    return DeleteShareGroupOffsetsResponse(responses=responses)
