"""The Admin client's ACL calls (createAcls, describeAcls, deleteAcls) over Kafka's ACL model."""

from __future__ import annotations

from typing import Sequence

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError, check
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
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def _binding(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
             permission: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.of(resource_type), name, PatternType.of(pattern_type)),
                      AccessControlEntry(principal, host, AclOperation.of(operation), AclPermissionType.of(permission)))


async def create_acls(client: KafkaClient, bindings: Sequence[AclBinding]) -> list[ResponseError | None]:
    """One result per binding: None, or the broker's refusal of it."""
    request = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
        resource_pattern_type=b.pattern.pattern_type, principal=b.entry.principal, host=b.entry.host,
        operation=b.entry.operation, permission_type=b.entry.permission) for b in bindings])
    response = await (await client.connect()).send(request, CreateAclsResponse)
    return [ResponseError(r.error_code, r.error_message) if r.error_code else None for r in response.results]


async def describe_acls(client: KafkaClient, acl_filter: AclBindingFilter) -> list[AclBinding]:
    pattern, entry = acl_filter.pattern, acl_filter.entry
    request = DescribeAclsRequest(
        resource_type_filter=pattern.resource_type, resource_name_filter=pattern.name,
        pattern_type_filter=pattern.pattern_type, principal_filter=entry.principal, host_filter=entry.host,
        operation=entry.operation, permission_type=entry.permission)
    response = await (await client.connect()).send(request, DescribeAclsResponse)
    check(response.error_code, response.error_message)
    return [_binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                     a.permission_type) for r in response.resources for a in r.acls]


async def delete_acls(client: KafkaClient, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
    """The bindings each filter deleted; ResponseError for the first filter or deletion refused."""
    request = DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=f.pattern.resource_type, resource_name_filter=f.pattern.name,
        pattern_type_filter=f.pattern.pattern_type, principal_filter=f.entry.principal, host_filter=f.entry.host,
        operation=f.entry.operation, permission_type=f.entry.permission) for f in filters])
    response = await (await client.connect()).send(request, DeleteAclsResponse)
    results = []
    for result in response.filter_results:
        check(result.error_code, result.error_message)
        deleted = []
        for acl in result.matching_acls:
            check(acl.error_code, acl.error_message)
            deleted.append(_binding(acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
                                    acl.operation, acl.permission_type))
        results.append(deleted)
    return results
