"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) on a broker without an authorizer.

pybroker has no authorizer, so, as Kafka's AclApis does when `authorizer.class.name` is unset, every
ACL request is answered SECURITY_DISABLED, each in its response's own shape: DescribeAcls with a
top-level error, CreateAcls with one failed result per creation, DeleteAcls with one failed result
per filter. Advertising the APIs (rather than leaving them out) lets admin clients report Kafka's
SecurityDisabledException instead of "not supported by this broker version".
"""

from __future__ import annotations

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
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

# Kafka's own texts: AclApis words the describe answer differently from the two alter answers.
DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."


@api(ApiKey.DESCRIBE_ACLS, 0, 3)
async def describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=DESCRIBE_MESSAGE, resources=[])


@api(ApiKey.CREATE_ACLS, 0, 3)
async def create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    return CreateAclsResponse(results=[
        CreateAclsResponse.AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=ALTER_MESSAGE)
        for _ in request.creations])


@api(ApiKey.DELETE_ACLS, 0, 3)
async def delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED,
                                                  error_message=ALTER_MESSAGE, matching_acls=[])
        for _ in request.filters])
