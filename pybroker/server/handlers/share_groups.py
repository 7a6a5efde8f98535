"""Share groups' coordinator APIs (KIP-932): ShareGroupHeartbeat (76) and ShareGroupDescribe (77), v1 as Kafka 4.2.

Served by the broker that coordinates the group (the leader of its ``__consumer_offsets`` partition, as for every
group); elsewhere NOT_COORDINATOR. A group id held by a classic or consumer group is not a share group:
GROUP_ID_NOT_FOUND, as Kafka answers. Authorization as Kafka: Read on the group and Describe on each subscribed topic
for a heartbeat, Describe on the group to describe it.
"""

from __future__ import annotations

from pybroker.coordinator.runtime import CoordinatorStorageError, NotCoordinatorError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import OPERATIONS_NOT_REQUESTED, allowed_names, authorize, authorized_operations
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.features import share_groups_enabled
from pybroker.server.handlers.groups import client_host
from pybroker.server.registry import api

DescribedGroup = ShareGroupDescribeResponse.DescribedGroup


@api(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def share_group_heartbeat(ctx: RequestContext,
                                request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    if not share_groups_enabled(ctx.services.features.current):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    names = request.subscribed_topic_names or []
    if names and len(allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)) != len(set(names)):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    groups = ctx.services.groups
    await groups.topic.ensure()  # not led yet: NOT_COORDINATOR below, as Kafka's
    if request.group_id and not groups.owns(request.group_id):
        return ShareGroupHeartbeatResponse(error_code=groups.not_owned_error(request.group_id))
    share = ctx.services.share
    if share.is_other_group(request.group_id):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                           error_message=f"Group {request.group_id} is not a share group.")
    image = groups.topic_image()
    response, left = share.groups.heartbeat(request, ctx.client_id or "", client_host(ctx), image, share.now_ms())
    for member_id in left:
        share.member_left(request.group_id, member_id)
    try:
        if response.error_code or left:
            await share.write_group(request.group_id)
            return response
        return await share.after_heartbeat(request.group_id, request.member_id, image, request.member_epoch == 0,
                                           response)
    except (CoordinatorStorageError, NotCoordinatorError) as exc:  # the group's records could not be written
        return ShareGroupHeartbeatResponse(error_code=error_code_for(exc))


@api(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def share_group_describe(ctx: RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    groups, share = ctx.services.groups, ctx.services.share
    allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_ids)
    image = groups.topic_image()
    described = []
    enabled = share_groups_enabled(ctx.services.features.current)
    for group_id in request.group_ids:
        if not enabled:
            described.append(DescribedGroup(group_id=group_id, error_code=ErrorCode.UNSUPPORTED_VERSION))
        elif group_id not in allowed:
            described.append(DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
        elif not groups.owns(group_id):
            described.append(DescribedGroup(group_id=group_id, error_code=groups.not_owned_error(group_id)))
        elif share.is_other_group(group_id):
            described.append(DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                            error_message=f"Group {group_id} is not a share group."))
        else:
            described.append(share.groups.describe(group_id, image))
    for group in described:
        group.authorized_operations = authorized_operations(ctx, ResourceType.GROUP, group.group_id) \
            if request.include_authorized_operations and not group.error_code else OPERATIONS_NOT_REQUESTED
    return ShareGroupDescribeResponse(groups=described)
