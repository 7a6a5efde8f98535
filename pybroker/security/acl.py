"""Kafka's ACL model: resource patterns, access control entries, bindings and the filters that match them.

The codes are the wire codes of Kafka's ResourceType, PatternType, AclOperation and
AclPermissionType; the names and ``__str__`` forms are the ones kafka-acls.sh prints and Kafka's
ZooKeeper JSON stores (``"operation":"Read"``, ``/kafka-acl/Topic/<name>``). Filters follow
ResourcePatternFilter / AccessControlEntryFilter: ANY matches everything, MATCH a pattern type
matches every stored pattern that would apply to the filter's name (the literal name, the literal
``*`` and every prefix of it). Pure: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

from pybroker.security.principal import KafkaPrincipal

WILDCARD = "*"  # a literal resource name matching every name, and the any-host / any-principal name
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


def _camel(name: str) -> str:
    """TRANSACTIONAL_ID -> TransactionalId (SecurityUtils.resourceTypeName / operationName)."""
    return "".join(part.capitalize() for part in name.split("_"))


_E = TypeVar("_E", bound="_Named")


class _Named(enum.IntEnum):
    @property
    def camel(self) -> str:
        return _camel(self.name)

    @classmethod
    def parse(cls: type[_E], text: str) -> _E:
        """Kafka's fromString: the enum name or the camel-case name, case-insensitive; UNKNOWN otherwise."""
        key = text.strip().replace("_", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == key:
                return member
        return cls(0)

    @classmethod
    def of(cls: type[_E], code: int) -> _E:
        """The member for a wire code, UNKNOWN for a code Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Which allowed operations grant an operation besides itself and ALL (only for ALLOW entries: a
# DENY for READ does not deny DESCRIBE), as in AclAuthorizer and StandardAuthorizerData.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}

# The operations each resource type knows (Kafka's ResourceType -> supported operations; what
# authorized_operations reports and what kafka-acls.sh accepts per resource).
RESOURCE_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def parse_principal(text: str) -> KafkaPrincipal:
    """``Type:name`` (split at the first colon, as SecurityUtils.parseKafkaPrincipal); ValueError otherwise."""
    kind, colon, name = text.partition(":")
    if not colon or not kind:
        raise ValueError(f"Could not parse principal from `{text}` "
                         "(no colon is present separating the principal type from the principal name)")
    return KafkaPrincipal(kind, name)


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice", as stored and sent on the wire
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def binding_error(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create ``binding`` (INVALID_REQUEST with this text), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern.pattern_type.name}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {entry.operation.name}"
    if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {entry.permission.name}"
    if not pattern.name:
        return "Resource name should not be empty"
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if "/" in pattern.name:  # it would be a ZooKeeper path (AuthorizerUtils.validateAclBinding)
        return f"ACL binding contains invalid resource name: {pattern.name}"
    try:
        parse_principal(entry.principal)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType
    name: str | None  # None: any name
    pattern_type: PatternType

    def is_unknown(self) -> bool:
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        return self.name.startswith(pattern.name)  # PREFIXED

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def is_unknown(self) -> bool:
        return self.operation is AclOperation.UNKNOWN or self.permission is AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not entry.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission is entry.permission


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def is_unknown(self) -> bool:
        return self.pattern.is_unknown() or self.entry.is_unknown()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


ANY_BINDING = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY))
