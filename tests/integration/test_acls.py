"""CreateAcls/DescribeAcls/DeleteAcls on a broker without an authorizer: advertised at Kafka 3.9's versions
and answered SECURITY_DISABLED in each response's own shape, as Kafka's AclApis does."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

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
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."


def test_api_versions_lists_the_acl_apis_at_kafka_42_versions(shared_broker):
    """v0 went with KIP-896 in Kafka 4.0."""
    client = WireClient(shared_broker.bootstrap)
    try:
        response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                  ApiVersionsResponse)
    finally:
        client.close()
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert (ranges.get(29), ranges.get(30), ranges.get(31)) == ((1, 3), (1, 3), (1, 3))


@pytest.mark.parametrize("version", [1, 2, 3])
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


# With an authorizer: ACLs created, described and deleted through the APIs (User:ANONYMOUS, the
# PLAINTEXT principal, is a super user here so that it may manage them).

AUTHORIZER_OVERRIDES = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                        "super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("acls"), AUTHORIZER_OVERRIDES).start()
    yield process
    process.kill()


def test_confluent_kafka_creates_describes_and_deletes_acls(acl_broker):
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap})
    read = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    write = AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:alice", "10.0.0.1",
                       AclOperation.WRITE, AclPermissionType.DENY)
    group = AclBinding(ResourceType.GROUP, "billing", ResourcePatternType.LITERAL, "User:bob", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([read, write, group], request_timeout=30).values():
        assert future.result(timeout=30) is None
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
    assert set(admin.describe_acls(any_acl, request_timeout=30).result(timeout=30)) == {read, write, group}
    matching = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(matching, request_timeout=30).result(timeout=30) == [write]
    alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                             AclPermissionType.ANY)
    [deleted] = admin.delete_acls([alice], request_timeout=30).values()
    assert set(deleted.result(timeout=30)) == {read, write}
    assert admin.describe_acls(any_acl, request_timeout=30).result(timeout=30) == [group]
    nothing = AclBindingFilter(ResourceType.TOPIC, "none", ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
    [none_deleted] = admin.delete_acls([nothing], request_timeout=30).values()
    assert none_deleted.result(timeout=30) == []


def test_bad_creations_fail_alone_with_invalid_request(acl_broker):
    creations = [
        CreateAclsRequest.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                                      principal="alice", host="*", operation=3, permission_type=3),
        CreateAclsRequest.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                                      principal="User:alice", host="*", operation=42, permission_type=3),
        CreateAclsRequest.AclCreation(resource_type=99, resource_name="t", resource_pattern_type=3,
                                      principal="User:alice", host="*", operation=3, permission_type=3),
        CreateAclsRequest.AclCreation(resource_type=4, resource_name="my-cluster", resource_pattern_type=3,
                                      principal="User:alice", host="*", operation=7, permission_type=3),
        CreateAclsRequest.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=2,
                                      principal="User:alice", host="*", operation=3, permission_type=3),
        CreateAclsRequest.AclCreation(resource_type=2, resource_name="bad-acl-ok", resource_pattern_type=3,
                                      principal="User:carol", host="*", operation=3, permission_type=3),
    ]
    client = WireClient(acl_broker.bootstrap)
    try:
        created = client.request(CreateAclsRequest(creations=creations), 3, CreateAclsResponse)
        described = client.request(DescribeAclsRequest(resource_type_filter=2, resource_name_filter="bad-acl-ok",
                                                       pattern_type_filter=3, principal_filter=None, host_filter=None,
                                                       operation=1, permission_type=1), 3, DescribeAclsResponse)
    finally:
        client.close()
    codes = [r.error_code for r in created.results]
    assert codes == [ErrorCode.INVALID_REQUEST] * 5 + [ErrorCode.NONE]
    assert "Could not parse principal from `alice`" in created.results[0].error_message
    assert created.results[1].error_message == "Invalid operation UNKNOWN"
    assert "kafka-cluster" in created.results[3].error_message
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == \
           [("bad-acl-ok", ["User:carol"])]


def test_acls_survive_a_restart(tmp_path: Path):
    process = BrokerProcess(tmp_path, AUTHORIZER_OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        binding = AclBinding(ResourceType.TRANSACTIONAL_ID, "tx-", ResourcePatternType.PREFIXED, "User:alice", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)
        [created] = admin.create_acls([binding], request_timeout=30).values()
        created.result(timeout=30)
        process.stop()
        process.start()
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                   AclPermissionType.ANY)
        assert admin.describe_acls(any_acl, request_timeout=30).result(timeout=30) == [binding]
    finally:
        process.kill()


def test_an_unknown_authorizer_class_stops_start_up_naming_the_key(tmp_path: Path):
    process = BrokerProcess(tmp_path, {"authorizer.class.name": "com.example.Custom"})
    with pytest.raises(RuntimeError, match="authorizer.class.name"):
        process.start(timeout=20)
