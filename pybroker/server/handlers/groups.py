"""Group membership APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16) and DeleteGroups (42).

Thin: each handler makes sure the coordinator's topic exists, then hands the request to the
group coordinator through its runtime; the coordinator decides everything else.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from pybroker.coordinator.coordinator import JoinRequest, join_error
from pybroker.coordinator.runtime import CoordinatorStorageError, NotCoordinatorError
from pybroker.coordinator.share_state.records import parse_share_key
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import (
    OPERATIONS_NOT_REQUESTED,
    allowed_names,
    authorize,
    authorize_cluster,
    authorized_operations,
)
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.request_channel import leave_request_queue
from pybroker.server.registry import api

log = logging.getLogger("pybroker.server")

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2
"""KIP-932: a share-partition's share coordinator, asked by partition leaders with "groupId:topicId:partition"."""
FIRST_SHARE_FIND_VERSION = 6
FIRST_BATCHED_FIND_VERSION = 4


async def coordinate(ctx: RequestContext, group_ids: Iterable[str], operation: Callable[[Any, int], Any],
                     on_error: Callable[[ErrorCode], Any]) -> Any:
    """Run one coordinator operation on ``group_ids``: NOT_COORDINATOR unless this broker has loaded
    their partitions; GROUP_ID_NOT_FOUND for a share group's id (Kafka: not a classic or consumer group);
    storage or topic-creation failures become COORDINATOR_NOT_AVAILABLE."""
    service = ctx.services.groups
    try:
        await service.topic.ensure()  # not led yet: NOT_COORDINATOR below, as Kafka's
        for group_id in group_ids:
            if not service.owns(group_id):
                return on_error(service.not_owned_error(group_id))
            if group_id in ctx.services.share.groups.groups:
                return on_error(ErrorCode.GROUP_ID_NOT_FOUND)
        leave_request_queue()  # a JoinGroup may wait for the whole rebalance
        return await service.call(operation)
    except NotCoordinatorError:
        return on_error(ErrorCode.NOT_COORDINATOR)
    except CoordinatorStorageError:
        return on_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    except Exception as exc:
        code = error_code_for(exc)
        return on_error(ErrorCode.COORDINATOR_NOT_AVAILABLE if code is ErrorCode.UNKNOWN_SERVER_ERROR else code)


def client_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as Java's InetAddress.toString: "/127.0.0.1"."""
    host = ctx.client_host.rsplit(":", 1)[0]
    return "/" + host.strip("[]")


@api(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = request.coordinator_keys if ctx.api_version >= FIRST_BATCHED_FIND_VERSION else [request.key]
    coordinators = [await _find_one(ctx, key, request.key_type) for key in keys]
    if ctx.api_version >= FIRST_BATCHED_FIND_VERSION:
        return FindCoordinatorResponse(coordinators=coordinators)
    found = coordinators[0]
    # v1-3 carry Kafka's Errors.message(): the error's default message, "NONE" on success; v4+
    # coordinators carry no message at all ("").
    message = ErrorCode(found.error_code).message if found.error_code else "NONE"
    return FindCoordinatorResponse(error_code=found.error_code, error_message=message,
                                   node_id=found.node_id, host=found.host, port=found.port)


async def _find_one(ctx: RequestContext, key: str, key_type: int) -> FindCoordinatorResponse.Coordinator:
    def failed(code: ErrorCode, message: str | None = None) -> FindCoordinatorResponse.Coordinator:
        if message:
            log.info("FindCoordinator for %r: %s", key, message)
        return FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code,
                                                   error_message="")

    services = ctx.services
    # Kafka's checks: Describe on the group or transactional id looked up.
    if key_type == KEY_TYPE_GROUP and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if key_type == KEY_TYPE_TRANSACTION and not authorize(ctx, AclOperation.DESCRIBE,
                                                          ResourceType.TRANSACTIONAL_ID, key):
        return failed(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if key_type == KEY_TYPE_TRANSACTION:
        try:
            await services.txns.topic.ensure()
        except Exception as exc:
            return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))
        node_id: int | None = services.txns.coordinator_node(key)
    elif key_type == KEY_TYPE_GROUP:
        try:
            await services.groups.topic.ensure()
        except Exception as exc:
            return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))
        node_id = services.groups.topic.leader(services.groups.coordinator.partition_of(key))
    elif key_type == KEY_TYPE_SHARE:
        if ctx.api_version < FIRST_SHARE_FIND_VERSION:
            return failed(ErrorCode.UNSUPPORTED_VERSION)
        if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
            return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        share_key = parse_share_key(key)
        if share_key is None:
            return failed(ErrorCode.INVALID_REQUEST, "Share coordinator keys are groupId:topicId:partition")
        try:
            await services.share_state.topic.ensure()
        except Exception as exc:
            return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))
        node_id = services.share_state.coordinator_node(share_key)
    else:
        return failed(ErrorCode.INVALID_REQUEST, f"Unknown coordinator key type {key_type}")
    node = next((b for b in services.metadata.brokers() if b.broker_id == node_id), None)
    endpoint = node.endpoint(ctx.listener) if node is not None else None  # of the listener asked on
    if node is None or endpoint is None:
        return failed(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return FindCoordinatorResponse.Coordinator(key=key, node_id=node.broker_id, host=endpoint[0], port=endpoint[1],
                                               error_code=0, error_message="")


@api(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return join_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, request.member_id, ctx.api_version)
    join = JoinRequest(request, ctx.api_version, ctx.client_id or "", client_host(ctx),
                       ctx.services.groups.topic_image())
    coordinator = ctx.services.groups.coordinator
    return await coordinate(ctx, [request.group_id], lambda waiter, now: coordinator.join_group(waiter, join, now),
                            lambda code: join_error(code, request.member_id, ctx.api_version))


@api(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    coordinator = ctx.services.groups.coordinator
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return await coordinate(ctx, [request.group_id], lambda waiter, now: coordinator.sync_group(waiter, request, now),
                            lambda code: SyncGroupResponse(error_code=code))


@api(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    coordinator = ctx.services.groups.coordinator
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return await coordinate(ctx, [request.group_id], lambda waiter, now: coordinator.heartbeat(waiter, request, now),
                            lambda code: HeartbeatResponse(error_code=code))


@api(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    coordinator = ctx.services.groups.coordinator
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return await coordinate(ctx, [request.group_id],
                            lambda waiter, now: coordinator.leave_group(waiter, request, ctx.api_version, now),
                            lambda code: LeaveGroupResponse(error_code=code))


@api(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    service = ctx.services.groups
    allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.groups)
    described = [
        DescribeGroupsResponse.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id)
        if group_id not in allowed else
        service.coordinator.describe_group(group_id, ctx.api_version, request.include_authorized_operations)
        if service.owns(group_id) else
        DescribeGroupsResponse.DescribedGroup(error_code=service.not_owned_error(group_id), group_id=group_id)
        for group_id in request.groups]
    if request.include_authorized_operations:  # Kafka fills them for groups described without error
        for group in described:
            group.authorized_operations = OPERATIONS_NOT_REQUESTED if group.error_code else \
                authorized_operations(ctx, ResourceType.GROUP, group.group_id)
    return DescribeGroupsResponse(groups=described)


@api(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    groups = ctx.services.groups.coordinator.list_groups(request.states_filter, request.types_filter)
    groups += ctx.services.share.groups.listed(request.states_filter, request.types_filter)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):  # Kafka: Describe on the cluster lists all, else each group
        allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id in allowed]
    return ListGroupsResponse(error_code=0, groups=groups)


@api(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coordinator = ctx.services.groups.coordinator
    allowed = allowed_names(ctx, AclOperation.DELETE, ResourceType.GROUP, request.groups_names)
    share = ctx.services.share
    permitted = [g for g in request.groups_names if g in allowed and g not in share.groups.groups]
    refused = [DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
               for g in request.groups_names if g not in allowed]
    refused += [DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=await share.delete_group(g))
                for g in request.groups_names if g in allowed and g in share.groups.groups]

    def failed(code: ErrorCode) -> DeleteGroupsResponse:
        return DeleteGroupsResponse(results=[DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code)
                                             for g in permitted])

    if not permitted:
        return DeleteGroupsResponse(results=refused)
    answered: DeleteGroupsResponse = await coordinate(
        ctx, permitted, lambda waiter, now: coordinator.delete_groups(waiter, permitted, now), failed)
    answered.results = refused + list(answered.results)
    return answered
