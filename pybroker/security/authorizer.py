"""The ACL authorizer: Kafka's AclAuthorizer (ZooKeeper mode) and StandardAuthorizer (KRaft), which agree.

A request for operation O on resource (type T, name N) by principal P from host H is decided so:

1. P in ``super.users`` (``User:a;User:b``): allowed, whatever the ACLs say.
2. The ACLs that apply to (T, N): the LITERAL ones named N, the LITERAL ``*`` ones, and every
   PREFIXED one whose name N starts with. None at all (for anyone): ``allow.everyone.if.no.acl.found``.
3. Of those, an entry matches when its principal is P or ``User:*``, its host is H or ``*``, and its
   operation is O or ALL. Any matching DENY: denied (deny wins). Else any matching ALLOW: allowed,
   where an ALLOW for READ, WRITE, DELETE or ALTER also grants DESCRIBE and one for ALTER_CONFIGS
   grants DESCRIBE_CONFIGS. Else denied.

Speed: the ACLs are indexed by pattern; the entries applying to one (T, N) are collected once and
kept until the next ACL change, and so is each decision, so the produce path's check is one dict
lookup once warm. The caches are bounded and dropped whole on any change.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from pybroker.common.config import ConfigError
from pybroker.security.acl import (
    IMPLIED_BY,
    RESOURCE_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
)
from pybroker.security.principal import KafkaPrincipal

AUTHORIZER_CLASSES = frozenset({"kafka.security.authorizer.AclAuthorizer",
                                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
CACHE_LIMIT = 100_000

_Entries = tuple[AccessControlEntry, ...]


def authorizer_enabled(class_name: str | None) -> bool:
    """Whether ``authorizer.class.name`` turns the authorizer on; ConfigError naming the key for a class we lack."""
    if not class_name:
        return False
    if class_name.strip() not in AUTHORIZER_CLASSES:
        raise ConfigError(f"Invalid value {class_name} for configuration authorizer.class.name: "
                          f"unsupported authorizer (supported: {', '.join(sorted(AUTHORIZER_CLASSES))})")
    return True


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons; ConfigError naming the key for a bad one."""
    users = set()
    for item in (text or "").split(";"):
        if item.strip():
            try:
                users.add(str(parse_principal(item.strip())))
            except ValueError as exc:
                raise ConfigError(f"Invalid value {text} for configuration super.users: {exc}") from None
    return frozenset(users)


class Authorizer:
    def __init__(self, super_users: frozenset[str] = frozenset(), allow_everyone_if_no_acl_found: bool = False):
        self.super_users = super_users
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self._applying: dict[tuple[ResourceType, str], _Entries] = {}
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}

    # The ACL set (the stores call these)

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the entries of one pattern (none: the pattern has no ACLs any more)."""
        frozen = frozenset(entries)
        if frozen:
            self._acls[pattern] = frozen
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type is PatternType.PREFIXED:
            by_prefix = self._prefixed.setdefault(pattern.resource_type, {})
            if frozen:
                by_prefix[pattern.name] = frozen
            else:
                by_prefix.pop(pattern.name, None)
        self._applying.clear()
        self._decisions.clear()

    def load(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        for pattern, entries in acls.items():
            self.set_acls(pattern, entries)

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        return list(self._acls)

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """Every stored binding the filter matches (DescribeAcls, DeleteAcls)."""
        return [AclBinding(pattern, entry) for pattern, entries in self._acls.items()
                if binding_filter.pattern.matches(pattern)
                for entry in entries if binding_filter.entry.matches(entry)]

    # Decisions

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        key = (str(principal), host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(key[0], host, operation, resource_type, name)
            if len(self._decisions) >= CACHE_LIMIT:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """The 32-bit field of operation codes allowed on the resource (authorized_operations)."""
        bits = 0
        for operation in RESOURCE_OPERATIONS[resource_type]:
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type (Authorizer's
        authorizeByResourceType: some ALLOW pattern not covered by a DENY one; exact operation or ALL)."""
        who = str(principal)
        if who in self.super_users:
            return True
        allowed: list[ResourcePattern] = []
        denied: set[ResourcePattern] = set()
        any_acl = False
        for pattern, entries in self._acls.items():
            if pattern.resource_type is not resource_type:
                continue
            any_acl = True
            for entry in entries:
                if entry.principal not in (who, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD) \
                        or entry.operation not in (operation, AclOperation.ALL):
                    continue
                if entry.permission is AclPermissionType.DENY:
                    if pattern.pattern_type is PatternType.LITERAL and pattern.name == WILDCARD:
                        return False
                    denied.add(pattern)
                else:
                    allowed.append(pattern)
        if not any_acl:
            return self.allow_if_no_acl
        deny_prefixes = [p.name for p in denied if p.pattern_type is PatternType.PREFIXED]
        for pattern in allowed:
            if pattern.pattern_type is PatternType.LITERAL and pattern.name == WILDCARD:
                return True
            if pattern in denied or any(pattern.name.startswith(prefix) for prefix in deny_prefixes):
                continue
            return True
        return False

    def _decide(self, who: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if who in self.super_users:
            return True
        entries = self._applying_to(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        granting = IMPLIED_BY.get(operation, frozenset((operation,)))
        allowed = False
        for entry in entries:
            if entry.principal not in (who, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD):
                continue
            if entry.permission is AclPermissionType.DENY:
                if entry.operation is operation or entry.operation is AclOperation.ALL:
                    return False
            elif entry.operation is AclOperation.ALL or entry.operation in granting:
                allowed = True
        return allowed

    def _applying_to(self, resource_type: ResourceType, name: str) -> _Entries:
        key = (resource_type, name)
        found = self._applying.get(key)
        if found is None:
            collected: list[AccessControlEntry] = []
            collected += self._acls.get(ResourcePattern(resource_type, name, PatternType.LITERAL), ())
            if name != WILDCARD:
                collected += self._acls.get(ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL), ())
            prefixed = self._prefixed.get(resource_type)
            if prefixed:
                if len(prefixed) < len(name):
                    for prefix, entries in prefixed.items():
                        if name.startswith(prefix):
                            collected += entries
                else:
                    for end in range(1, len(name) + 1):
                        collected += prefixed.get(name[:end], ())
            found = tuple(collected)
            if len(self._applying) >= CACHE_LIMIT:
                self._applying.clear()
            self._applying[key] = found
        return found
