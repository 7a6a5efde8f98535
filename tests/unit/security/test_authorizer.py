"""The authorizer's rules, with cases from Kafka's AclAuthorizerTest and StandardAuthorizerTest."""

from __future__ import annotations

import pytest

from pybroker.common.config import ConfigError
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
from pybroker.security.authorizer import Authorizer, authorizer_enabled, parse_super_users
from pybroker.security.principal import KafkaPrincipal

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
HOST = "192.168.1.1"
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
Op, Perm = AclOperation, AclPermissionType


def entry(principal: str, operation: AclOperation, permission: AclPermissionType = Perm.ALLOW,
          host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


def literal(name: str, resource_type: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(resource_type, name, PatternType.LITERAL)


def prefixed(name: str, resource_type: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(resource_type, name, PatternType.PREFIXED)


def test_no_acls_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not Authorizer().authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert Authorizer(allow_everyone_if_no_acl_found=True).authorize(ALICE, HOST, Op.READ, TOPIC, "t")


def test_acls_for_someone_else_deny_even_with_allow_everyone() -> None:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    authorizer.set_acls(literal("t"), [entry("User:bob", Op.READ)])
    assert not authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "other")  # no ACL on that one


def test_deny_wins_over_allow() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.READ), entry("User:alice", Op.READ, Perm.DENY)])
    assert not authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "t")


def test_deny_from_a_wildcard_principal_and_a_wildcard_resource() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.WRITE)])
    authorizer.set_acls(literal("*"), [entry("User:*", Op.WRITE, Perm.DENY, host=HOST)])
    assert not authorizer.authorize(ALICE, HOST, Op.WRITE, TOPIC, "t")
    assert authorizer.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "t")


def test_host_must_match_or_be_wildcard() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.READ, host=HOST)])
    assert authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert not authorizer.authorize(ALICE, "192.168.1.2", Op.READ, TOPIC, "t")


def test_wildcard_principal_allows_everyone() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:*", Op.READ)])
    assert authorizer.authorize(BOB, HOST, Op.READ, TOPIC, "t")
    assert not authorizer.authorize(BOB, HOST, Op.WRITE, TOPIC, "t")


def test_super_users_win_over_deny() -> None:
    authorizer = Authorizer(super_users=parse_super_users("User:admin; User:root"))
    authorizer.set_acls(literal("t"), [entry("User:admin", Op.ALL, Perm.DENY)])
    assert authorizer.authorize(KafkaPrincipal("User", "admin"), HOST, Op.WRITE, TOPIC, "t")
    assert authorizer.authorize(KafkaPrincipal("User", "root"), HOST, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not authorizer.authorize(ALICE, HOST, Op.WRITE, TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_allowed_operations_imply_describe(granted: AclOperation) -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", granted)])
    assert authorizer.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS])
def test_other_operations_do_not_imply_describe(granted: AclOperation) -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", granted)])
    assert not authorizer.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "t")


def test_alter_configs_implies_describe_configs_but_not_the_reverse() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.ALTER_CONFIGS)])
    authorizer.set_acls(literal("u"), [entry("User:alice", Op.DESCRIBE_CONFIGS)])
    assert authorizer.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not authorizer.authorize(ALICE, HOST, Op.ALTER_CONFIGS, TOPIC, "u")


def test_a_deny_for_read_does_not_deny_describe() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.WRITE), entry("User:alice", Op.READ, Perm.DENY)])
    assert authorizer.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "t")
    assert not authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "t")


def test_all_allows_and_denies_every_operation() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.ALL), entry("User:bob", Op.READ)])
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.ALL), entry("User:bob", Op.READ),
                                       entry("User:bob", Op.ALL, Perm.DENY)])
    assert all(authorizer.authorize(ALICE, HOST, op, TOPIC, "t") for op in (Op.READ, Op.ALTER_CONFIGS, Op.DELETE))
    assert not authorizer.authorize(BOB, HOST, Op.READ, TOPIC, "t")


def test_prefixed_acls_apply_to_names_that_start_with_the_prefix() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(prefixed("orders-"), [entry("User:alice", Op.WRITE)])
    authorizer.set_acls(literal("fo"), [entry("User:alice", Op.WRITE)])
    assert authorizer.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders-eu")
    assert authorizer.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders-")
    assert not authorizer.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders")
    assert not authorizer.authorize(ALICE, HOST, Op.WRITE, TOPIC, "foo")  # literal "fo" is not a prefix
    assert not authorizer.authorize(ALICE, HOST, Op.WRITE, GROUP, "orders-eu")  # another resource type


def test_prefixed_deny_beats_literal_allow() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("foo-bar"), [entry("User:alice", Op.READ)])
    authorizer.set_acls(prefixed("foo"), [entry("User:alice", Op.READ, Perm.DENY)])
    assert not authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "foo-bar")


def test_many_prefixes_are_searched_either_way() -> None:
    authorizer = Authorizer()
    for i in range(50):
        authorizer.set_acls(prefixed(f"p{i}-"), [entry("User:alice", Op.READ)])
    assert authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "p7-x")
    assert not authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "p7")


def test_a_change_is_seen_by_the_next_decision() -> None:
    authorizer = Authorizer()
    assert not authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.READ)])
    assert authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    authorizer.set_acls(literal("t"), [])
    assert not authorizer.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert authorizer.patterns() == []


def test_authorized_operations_bits() -> None:
    authorizer = Authorizer()
    authorizer.set_acls(literal("t"), [entry("User:alice", Op.READ)])
    bits = authorizer.authorized_operations(ALICE, HOST, TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_authorize_by_resource_type() -> None:
    authorizer = Authorizer()
    assert not authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)
    authorizer.set_acls(prefixed("a"), [entry("User:alice", Op.WRITE)])
    assert authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)
    authorizer.set_acls(prefixed(""), [])
    authorizer.set_acls(prefixed("a"), [entry("User:alice", Op.WRITE), entry("User:alice", Op.WRITE, Perm.DENY)])
    assert not authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)
    authorizer.set_acls(literal("b"), [entry("User:*", Op.ALL)])
    assert authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)
    authorizer.set_acls(literal("*"), [entry("User:alice", Op.WRITE, Perm.DENY)])
    assert not authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)


def test_filters_any_match_and_exact() -> None:
    authorizer = Authorizer()
    bindings = {
        "lit": AclBinding(literal("foo"), entry("User:alice", Op.READ)),
        "wild": AclBinding(literal("*"), entry("User:bob", Op.WRITE, Perm.DENY)),
        "pre": AclBinding(prefixed("fo"), entry("User:alice", Op.READ, host=HOST)),
        "other": AclBinding(literal("bar"), entry("User:alice", Op.READ)),
        "group": AclBinding(literal("foo", GROUP), entry("User:alice", Op.READ)),
    }
    for binding in bindings.values():
        authorizer.set_acls(binding.pattern, authorizer.entries(binding.pattern) | {binding.entry})

    def found(pattern_filter: ResourcePatternFilter, entry_filter: AccessControlEntryFilter | None = None) -> set[str]:
        result = authorizer.acls(AclBindingFilter(pattern_filter, entry_filter or AccessControlEntryFilter()))
        return {name for name, binding in bindings.items() if binding in result}

    assert found(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)) == set(bindings)
    assert found(ResourcePatternFilter(TOPIC, "foo", PatternType.MATCH)) == {"lit", "wild", "pre"}
    assert found(ResourcePatternFilter(TOPIC, "foo", PatternType.ANY)) == {"lit"}
    assert found(ResourcePatternFilter(TOPIC, "fo", PatternType.PREFIXED)) == {"pre"}
    assert found(ResourcePatternFilter(ResourceType.ANY, "foo", PatternType.LITERAL)) == {"lit", "group"}
    assert found(ResourcePatternFilter(TOPIC, None, PatternType.ANY),
                 AccessControlEntryFilter(principal="User:alice", host=HOST)) == {"pre"}
    assert found(ResourcePatternFilter(TOPIC, None, PatternType.ANY),
                 AccessControlEntryFilter(permission=Perm.DENY)) == {"wild"}


@pytest.mark.parametrize("binding, message", [
    (AclBinding(literal("t"), entry("alice", Op.READ)), "Could not parse principal from `alice`"),
    (AclBinding(literal("t"), entry("User:alice", Op.UNKNOWN)), "Invalid operation UNKNOWN"),
    (AclBinding(literal("t"), entry("User:alice", Op.ANY)), "Invalid operation ANY"),
    (AclBinding(literal("t", ResourceType.UNKNOWN), entry("User:alice", Op.READ)), "Invalid resourceType UNKNOWN"),
    (AclBinding(ResourcePattern(TOPIC, "t", PatternType.MATCH), entry("User:a", Op.READ)), "Invalid patternType MATCH"),
    (AclBinding(literal("t"), entry("User:a", Op.READ, Perm.ANY)), "Invalid permissionType ANY"),
    (AclBinding(literal(""), entry("User:a", Op.READ)), "Resource name should not be empty"),
    (AclBinding(literal("c", CLUSTER), entry("User:a", Op.ALTER)), "only valid name for the CLUSTER resource"),
])
def test_invalid_bindings_are_refused_with_kafkas_reason(binding: AclBinding, message: str) -> None:
    error = binding_error(binding)
    assert error is not None and message in error


def test_valid_binding_has_no_error() -> None:
    assert binding_error(AclBinding(literal("kafka-cluster", CLUSTER), entry("User:a", Op.ALTER))) is None


def test_authorizer_class_names() -> None:
    assert not authorizer_enabled(None)
    assert authorizer_enabled("kafka.security.authorizer.AclAuthorizer")
    assert authorizer_enabled("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        authorizer_enabled("com.example.MyAuthorizer")
    with pytest.raises(ConfigError, match="super.users"):
        parse_super_users("User:a;bob")


def test_names_round_trip() -> None:
    assert ResourceType.TRANSACTIONAL_ID.camel == "TransactionalId"
    assert AclOperation.parse("IdempotentWrite") is Op.IDEMPOTENT_WRITE
    assert AclOperation.parse("describe_configs") is Op.DESCRIBE_CONFIGS
    assert AclOperation.parse("Fly") is Op.UNKNOWN
    assert AclOperation.of(99) is Op.UNKNOWN
    assert str(AclBinding(literal("t"), entry("User:alice", Op.READ)).entry) == \
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    assert str(literal("t")) == "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
