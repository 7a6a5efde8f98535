"""CreateAcls/DescribeAcls/DeleteAcls on a broker without an authorizer: advertised at Kafka 3.9's versions
and answered SECURITY_DISABLED in each response's own shape, as Kafka's AclApis does."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import SecurityDisabledError

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from tests.integration.test_bad_input import WireClient

DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."


def test_api_versions_lists_the_acl_apis_at_kafka_39_versions(shared_broker):
    client = WireClient(shared_broker.bootstrap)
    try:
        response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                  ApiVersionsResponse)
    finally:
        client.close()
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert (ranges.get(29), ranges.get(30), ranges.get(31)) == ((0, 3), (0, 3), (0, 3))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_raw_requests_get_security_disabled_in_each_response_shape(shared_broker, version):
    client = WireClient(shared_broker.bootstrap)
    try:
        described = client.request(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                                       principal_filter=None, host_filter=None, operation=1,
                                                       permission_type=1), version, DescribeAclsResponse)
        creation = CreateAclsRequest.AclCreation(resource_type=2, resource_name="t", principal="User:a", host="*",
                                                 operation=3, permission_type=3)
        created = client.request(CreateAclsRequest(creations=[creation, creation]), version, CreateAclsResponse)
        acl_filter = DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=1, resource_name_filter=None,
                                                        principal_filter=None, host_filter=None, operation=1,
                                                        permission_type=1)
        deleted = client.request(DeleteAclsRequest(filters=[acl_filter] * 3), version, DeleteAclsResponse)
    finally:
        client.close()
    assert (described.error_code, described.error_message, described.resources) == \
           (ErrorCode.SECURITY_DISABLED, DESCRIBE_MESSAGE, [])
    assert [(r.error_code, r.error_message) for r in created.results] == \
           [(ErrorCode.SECURITY_DISABLED, ALTER_MESSAGE)] * 2
    assert [(r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results] == \
           [(ErrorCode.SECURITY_DISABLED, ALTER_MESSAGE, [])] * 3


def assert_security_disabled(future) -> None:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=30)
    assert raised.value.args[0].code() == KafkaError.SECURITY_DISABLED, raised.value


def test_confluent_kafka_acl_calls_fail_with_security_disabled(shared_broker):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    # librdkafka drops DescribeAcls' top-level error (rd_kafka_DescribeAclsResponse_parse), so against Kafka
    # too this is an empty list; before the APIs were advertised it failed with _UNSUPPORTED_FEATURE.
    assert admin.describe_acls(any_acl, request_timeout=30).result(timeout=30) == []
    [created] = admin.create_acls([binding], request_timeout=30).values()
    assert_security_disabled(created)
    [deleted] = admin.delete_acls([any_acl], request_timeout=30).values()
    assert_security_disabled(deleted)


def test_kafka_python_acl_calls_fail_with_security_disabled(shared_broker):
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        any_acl = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                            permission_type=ACLPermissionType.ANY,
                            resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                   ACLResourcePatternType.ANY))
        acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KpResourceType.TOPIC, "orders"))
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(any_acl)
        created = admin.create_acls([acl])
        assert created == {"succeeded": [], "failed": [SecurityDisabledError]}
        [(_, matched, error)] = admin.delete_acls([any_acl])
        assert (matched, error) == ([], SecurityDisabledError)
    finally:
        admin.close()
