"""`pybroker acls` against a real broker with an authorizer, cross-checked with confluent-kafka."""

from __future__ import annotations

import subprocess
from typing import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.broker_process import BrokerProcess
from tests.integration.test_acls import AUTHORIZER_OVERRIDES
from tests.integration.test_cli_topics import failed, ok, run


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("cli-acls"), AUTHORIZER_OVERRIDES).start()
    yield process
    process.kill()


def acls(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run("acls", "--bootstrap-server", broker.bootstrap, *args)


def every_acl(broker: BrokerProcess) -> set[AclBinding]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return set(admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                    AclOperation.ANY, AclPermissionType.ANY)).result(timeout=30))


def test_add_prints_kafkas_lines_and_lists(acl_broker):
    out = ok(acls(acl_broker, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t"))
    assert out == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`: ",
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) ",
        "",
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`: ",
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) ",
        "",
    ]
    assert AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                      AclPermissionType.ALLOW) in every_acl(acl_broker)


def test_producer_and_consumer_conveniences_then_remove(acl_broker):
    ok(acls(acl_broker, "--add", "--allow-principal", "User:bob", "--producer", "--topic", "p-", "--resource-pattern-type",
            "prefixed", "--transactional-id", "tx", "--idempotent"))
    ok(acls(acl_broker, "--add", "--allow-principal", "User:carol", "--allow-host", "10.1.1.1", "--consumer",
            "--topic", "c", "--group", "g"))
    found = {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation)
             for b in every_acl(acl_broker) if b.principal in ("User:bob", "User:carol")}
    P, L = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    assert found == {
        (ResourceType.TOPIC, "p-", P, "User:bob", "*", AclOperation.WRITE),
        (ResourceType.TOPIC, "p-", P, "User:bob", "*", AclOperation.DESCRIBE),
        (ResourceType.TOPIC, "p-", P, "User:bob", "*", AclOperation.CREATE),
        (ResourceType.TRANSACTIONAL_ID, "tx", P, "User:bob", "*", AclOperation.WRITE),
        (ResourceType.TRANSACTIONAL_ID, "tx", P, "User:bob", "*", AclOperation.DESCRIBE),
        (ResourceType.BROKER, "kafka-cluster", L, "User:bob", "*", AclOperation.IDEMPOTENT_WRITE),  # BROKER: CLUSTER
        (ResourceType.TOPIC, "c", L, "User:carol", "10.1.1.1", AclOperation.READ),
        (ResourceType.TOPIC, "c", L, "User:carol", "10.1.1.1", AclOperation.DESCRIBE),
        (ResourceType.GROUP, "g", L, "User:carol", "10.1.1.1", AclOperation.READ),
    }
    listed = ok(acls(acl_broker, "--list", "--topic", "p-x", "--resource-pattern-type", "match"))
    assert listed[0] == "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=p-, patternType=PREFIXED)`: "
    ok(acls(acl_broker, "--remove", "--force", "--topic", "c", "--group", "g"))
    assert not any(b.principal == "User:carol" for b in every_acl(acl_broker))


def test_bad_arguments_are_kafkas_one_line_errors(acl_broker):
    assert "exactly one action" in failed(acls(acl_broker, "--topic", "t"))
    assert "You must specify one of: --allow-principal, --deny-principal" in \
        failed(acls(acl_broker, "--add", "--topic", "t"))
    assert "'any' or 'match' is not valid when adding acls" in failed(
        acls(acl_broker, "--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"))
    assert "With --consumer you must specify a --topic and a --group" in failed(
        acls(acl_broker, "--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"))
    assert "ResourceType GROUP only supports operations Read, Describe, Delete, All" in failed(
        acls(acl_broker, "--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"))
    assert failed(acls(acl_broker, "--add", "--allow-principal", "alice", "--topic", "t")) == \
        "Error while executing ACL command: Could not parse principal from `alice` (no colon is present " \
        "separating the principal type from the principal name)"
