"""The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Served only while ``group.coordinator.rebalance.protocols`` lists "consumer" (the dispatcher's rule).
Each request carries a snapshot of the cluster's topics (names, ids, partition counts), from which
the coordinator resolves subscriptions, so topics created, deleted or grown are seen at the next
heartbeat, as Kafka re-reads its metadata image.

Authorization as Kafka 4's KafkaApis and group coordinator: a heartbeat needs Read on the group and
Describe on every topic it subscribes to by name (else TOPIC_AUTHORIZATION_FAILED, the same answer
whether the topic exists or not); its regex reaches only topics the member may Describe
(``consumer_regex.py``). A described group that names a topic the caller may not Describe (in an
assignment, a target, or, beyond Kafka, a subscription) is answered TOPIC_AUTHORIZATION_FAILED
without its members. A regex is checked in the regex worker before the coordinator sees it: one RE2
refuses is INVALID_REGULAR_EXPRESSION (``topic_regex.py``).
"""

from __future__ import annotations

from typing import Iterable

from pybroker.coordinator.consumer import Heartbeat
from pybroker.coordinator.topic_regex import invalid_message
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import OPERATIONS_NOT_REQUESTED, allowed_names, authorize, authorized_operations
from pybroker.server.context import RequestContext
from pybroker.server.handlers.groups import client_host, coordinate
from pybroker.server.registry import api

UNDESCRIBABLE = "The group has described topic(s) that the client is not authorized to describe."

@api(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext,
                                   request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    names = request.subscribed_topic_names
    if names and not _describable(ctx, names):
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    service = ctx.broker.groups
    regex = request.subscribed_topic_regex
    if regex:
        reason = await service.regexes.invalid_reason(regex)
        if reason is not None:
            return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                                                  error_message=invalid_message(regex, reason))
    heartbeat = Heartbeat(request, ctx.api_version, ctx.client_id or "", client_host(ctx), service.topic_image(),
                          None if ctx.broker.authorizer is None else
                          lambda topics: allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics))
    coordinator = service.coordinator
    return await coordinate(ctx, [request.group_id],
                            lambda waiter, now: coordinator.consumer_group_heartbeat(waiter, heartbeat, now),
                            lambda code: ConsumerGroupHeartbeatResponse(error_code=code))


@api(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx: RequestContext,
                                  request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    service = ctx.broker.groups
    allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_ids)
    image = service.topic_image()
    described = [
        ConsumerGroupDescribeResponse.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                     group_id=group_id)
        if group_id not in allowed else
        service.coordinator.consumer_group_describe(group_id, image)
        if service.owns(group_id) else
        ConsumerGroupDescribeResponse.DescribedGroup(error_code=service.not_owned_error(group_id), group_id=group_id)
        for group_id in request.group_ids]
    if ctx.broker.authorizer is not None:
        described = [group if _describable(ctx, _topics_named(group)) else
                     ConsumerGroupDescribeResponse.DescribedGroup(
                         group_id=group.group_id, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                         error_message=UNDESCRIBABLE, members=[])
                     for group in described]
    for group in described:
        group.authorized_operations = authorized_operations(ctx, ResourceType.GROUP, group.group_id) \
            if request.include_authorized_operations and not group.error_code else OPERATIONS_NOT_REQUESTED
    return ConsumerGroupDescribeResponse(groups=described)


def _describable(ctx: RequestContext, topics: Iterable[str]) -> bool:
    """Whether the principal may Describe every one of ``topics``."""
    wanted = set(topics)
    return len(allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)) == len(wanted)


def _topics_named(group: ConsumerGroupDescribeResponse.DescribedGroup) -> set[str]:
    """Every topic a described group names: its members' assignments, targets and subscribed names."""
    topics: set[str] = set()
    for member in group.members or ():
        topics.update(member.subscribed_topic_names or ())
        for assignment in (member.assignment, member.target_assignment):
            if assignment is not None:
                topics.update(tp.topic_name for tp in assignment.topic_partitions)
    return topics
