"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), as Kafka's AclApis serves them.

Without an authorizer every ACL request is answered SECURITY_DISABLED, each in its response's own
shape (DescribeAcls with a top-level error, CreateAcls with one failed result per creation,
DeleteAcls with one failed result per filter); advertising the APIs lets admin clients report
Kafka's SecurityDisabledException instead of "not supported by this broker version".

With one: DescribeAcls needs Describe on the cluster, the other two Alter (else
CLUSTER_AUTHORIZATION_FAILED for the whole request). A creation Kafka would refuse (a principal
without ``Type:``, an unknown or ANY operation, resource type or permission, a MATCH/ANY pattern,
an empty name, a cluster not named kafka-cluster) fails alone with INVALID_REQUEST and Kafka's
reason; the others are stored. DeleteAcls answers, per filter, the ACLs it deleted.
"""

from __future__ import annotations

from collections import defaultdict

from pybroker.controller.acl_store import Entries
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from pybroker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    binding_error,
)
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

# Kafka's own texts: AclApis words the describe answer differently from the two alter answers.
DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."


def _filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
            operation: int, permission: int) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.of(resource_type), name, PatternType.of(pattern_type)),
        AccessControlEntryFilter(principal, host, AclOperation.of(operation), AclPermissionType.of(permission)))


@api(ApiKey.DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=DESCRIBE_MESSAGE,
                                    resources=[])
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
    acl_filter = _filter(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                         request.principal_filter, request.host_filter, request.operation, request.permission_type)
    if acl_filter.is_unknown():
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                    error_message="The filter contains UNKNOWN elements", resources=[])
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for binding in authorizer.acls(acl_filter):
        by_pattern[binding.pattern].append(binding.entry)
    return DescribeAclsResponse(error_code=ErrorCode.NONE, error_message=None, resources=[
        DescribeAclsResponse.DescribeAclsResource(
            resource_type=pattern.resource_type, resource_name=pattern.name, pattern_type=pattern.pattern_type,
            acls=[DescribeAclsResponse.AclDescription(principal=e.principal, host=e.host, operation=e.operation,
                                                      permission_type=e.permission) for e in sorted(entries, key=str)])
        for pattern, entries in sorted(by_pattern.items(), key=lambda item: str(item[0]))])


@api(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    store = ctx.services.acl_store
    if store is None:
        return CreateAclsResponse(results=[
            CreateAclsResponse.AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=ALTER_MESSAGE)
            for _ in request.creations])
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return CreateAclsResponse(results=[
            CreateAclsResponse.AclCreationResult(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
            for _ in request.creations])
    results: list[CreateAclsResponse.AclCreationResult] = []
    to_add: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
    for creation in request.creations:
        binding = AclBinding(
            ResourcePattern(ResourceType.of(creation.resource_type), creation.resource_name,
                            PatternType.of(creation.resource_pattern_type)),
            AccessControlEntry(creation.principal, creation.host, AclOperation.of(creation.operation),
                               AclPermissionType.of(creation.permission_type)))
        error = binding_error(binding)
        if error is None:
            to_add[binding.pattern].add(binding.entry)
        results.append(CreateAclsResponse.AclCreationResult(
            error_code=ErrorCode.INVALID_REQUEST if error else ErrorCode.NONE, error_message=error))
    for pattern, entries in to_add.items():
        def add(current: Entries, new: Entries = frozenset(entries)) -> Entries:
            return current | new

        await store.update(pattern, add)
    return CreateAclsResponse(results=results)


@api(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    store, authorizer = ctx.services.acl_store, ctx.services.authorizer
    if store is None or authorizer is None:
        return DeleteAclsResponse(filter_results=[
            DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED,
                                                      error_message=ALTER_MESSAGE, matching_acls=[])
            for _ in request.filters])
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return DeleteAclsResponse(filter_results=[
            DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                      error_message=None, matching_acls=[])
            for _ in request.filters])
    filters = [_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                       f.host_filter, f.operation, f.permission_type) for f in request.filters]
    deleted: list[list[AclBinding]] = [[] for _ in filters]
    patterns = {pattern for acl_filter in filters if not acl_filter.is_unknown()
                for pattern in authorizer.patterns() if acl_filter.pattern.matches(pattern)}
    for pattern in sorted(patterns, key=str):
        def remove(current: Entries, pattern: ResourcePattern = pattern) -> Entries:
            for found in deleted:  # a retried update starts over from what ZooKeeper holds now
                found[:] = [b for b in found if b.pattern != pattern]
            kept = set(current)
            for index, acl_filter in enumerate(filters):
                if acl_filter.is_unknown():
                    continue
                for entry in current:
                    if acl_filter.matches(AclBinding(pattern, entry)):
                        kept.discard(entry)
                        deleted[index].append(AclBinding(pattern, entry))
            return frozenset(kept)

        await store.update(pattern, remove)
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(
            error_code=ErrorCode.INVALID_REQUEST if acl_filter.is_unknown() else ErrorCode.NONE,
            error_message="The filter contains UNKNOWN elements" if acl_filter.is_unknown() else None,
            matching_acls=[_matching(binding) for binding in found])
        for acl_filter, found in zip(filters, deleted)])


def _matching(binding: AclBinding) -> DeleteAclsResponse.DeleteAclsMatchingAcl:
    pattern, entry = binding.pattern, binding.entry
    return DeleteAclsResponse.DeleteAclsMatchingAcl(
        error_code=ErrorCode.NONE, error_message=None, resource_type=pattern.resource_type,
        resource_name=pattern.name, pattern_type=pattern.pattern_type, principal=entry.principal, host=entry.host,
        operation=entry.operation, permission_type=entry.permission)
