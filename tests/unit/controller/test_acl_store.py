"""The ACL znodes' and change notifications' bytes, as Kafka's ZkData writes them, and the file store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pybroker.controller.acl_store import (
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    FileAclStore,
    decode_change,
    decode_entries,
    encode_change,
    encode_entries,
    znode_path,
)
from pybroker.security.acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern
from pybroker.security.acl import ResourceType
from pybroker.security.authorizer import Authorizer

READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
DENY = AccessControlEntry("User:bob", "10.0.0.1", AclOperation.IDEMPOTENT_WRITE, AclPermissionType.DENY)


def test_paths() -> None:
    assert znode_path(ResourcePattern(ResourceType.TOPIC, "orders")) == "/kafka-acl/Topic/orders"
    assert znode_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx-", PatternType.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx-"


def test_entries_json_is_kafkas() -> None:
    data = encode_entries([READ, DENY])
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "IdempotentWrite", "host": "10.0.0.1"}]}
    assert decode_entries(data) == {READ, DENY}


def test_change_notifications() -> None:
    literal = ResourcePattern(ResourceType.GROUP, "g:1")
    assert encode_change(literal) == (LITERAL_CHANGES, b"GROUP:g:1")
    assert decode_change(LITERAL_CHANGES, b"Group:g:1") == literal
    prefixed = ResourcePattern(ResourceType.TOPIC, "a", PatternType.PREFIXED)
    root, data = encode_change(prefixed)
    assert root == EXTENDED_CHANGES
    assert json.loads(data) == {"version": 1, "resourceType": "TOPIC", "name": "a", "patternType": "PREFIXED"}
    assert decode_change(root, data) == prefixed


def test_file_store_keeps_acls_across_instances(tmp_path: Path) -> None:
    pattern = ResourcePattern(ResourceType.TOPIC, "t", PatternType.PREFIXED)

    async def go() -> None:
        store = FileAclStore(str(tmp_path), Authorizer())
        await store.start()
        await store.update(pattern, lambda current: current | {READ, DENY})
        await store.update(pattern, lambda current: current - {DENY})
        again = Authorizer()
        await FileAclStore(str(tmp_path), again).start()
        assert again.entries(pattern) == {READ}
        await store.update(pattern, lambda current: frozenset())
        emptied = Authorizer()
        await FileAclStore(str(tmp_path), emptied).start()
        assert emptied.patterns() == []

    asyncio.run(go())
