"""Where ACLs live, and how every broker's authorizer learns of a change.

ZooKeeper mode, Kafka's layout (ZkAclStore), so Kafka's tools and brokers read the same znodes:

- LITERAL patterns: ``/kafka-acl/<ResourceType>/<name>`` (``Topic``, ``Group``, ``Cluster``,
  ``TransactionalId``, ``DelegationToken``, ``User``); PREFIXED: ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``.
  Each holds ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}``; a pattern without ACLs has no znode.
- Changes are announced by sequential znodes: ``/kafka-acl-changes/acl_changes_<seq>`` holding
  ``TOPIC:<name>`` for a literal pattern, ``/kafka-acl-extended-changes/acl_changes_<seq>`` holding
  ``{"version":1,"resourceType":"TOPIC","name":"..","patternType":"PREFIXED"}``. Every broker
  watches both and re-reads the named pattern; notifications older than 15 minutes are deleted,
  as Kafka's ZkNodeChangeNotificationListener does: their age is the broker's clock (common/clock.py, Kafka's
  `Time`) less the znode's creation time, which ZooKeeper stamps.
- Writes are read-modify-write with the znode version (create if absent, set with the version,
  delete with the version when the last ACL goes), retried when another broker won the race.

Single node: ``pybroker-acls.json`` beside the embedded metadata document, replaced whole (temp,
fsync, rename): ``{"version":1,"resources":[{"resourceType":"Topic","patternType":"LITERAL",
"name":"..","acls":[...]}]}``.

Either store applies what it wrote (or read) to the authorizer, whose reads are from memory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Callable, Iterable, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.common.durable_json import write_json_durably_off_loop
from pybroker.common.uncancellable import finishes_once_started
from pybroker.zk.client import ZkClient, ZkEvent
from pybroker.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from pybroker.security.authorizer import Authorizer

log = logging.getLogger("pybroker.authorizer")

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000
ACLS_FILE = "pybroker-acls.json"
_WATCH = "acl-changes"

Entries = frozenset[AccessControlEntry]
Change = Callable[[Entries], Entries]


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": e.permission.camel, "operation": e.operation.camel,
             "host": e.host} for e in sorted(entries, key=str)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(data: bytes) -> Entries:
    return _entries(json.loads(data.decode()).get("acls", []) if data else [])


def _entries(acls: list[dict[str, Any]]) -> Entries:
    return frozenset(AccessControlEntry(str(a["principal"]), str(a["host"]), AclOperation.parse(str(a["operation"])),
                                        AclPermissionType.parse(str(a["permissionType"]))) for a in acls)


def znode_path(pattern: ResourcePattern) -> str:
    root = LITERAL_ROOT if pattern.pattern_type is PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{pattern.resource_type.camel}/{pattern.name}"


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The notification root and data announcing a change of ``pattern``."""
    if pattern.pattern_type is PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.name}:{pattern.name}".encode()
    event = {"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
             "patternType": pattern.pattern_type.name}
    return EXTENDED_CHANGES, json.dumps(event, separators=(",", ":")).encode()


def decode_change(root: str, data: bytes) -> ResourcePattern:
    if root == LITERAL_CHANGES:
        kind, _, name = data.decode().partition(":")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
    event = json.loads(data.decode())
    return ResourcePattern(ResourceType.parse(str(event["resourceType"])), str(event["name"]),
                           PatternType.parse(str(event["patternType"])))


class AclStore(Protocol):
    async def start(self) -> None: ...

    async def update(self, pattern: ResourcePattern, change: Change) -> Entries:
        """Apply ``change`` to the pattern's stored entries (atomically); the entries it left."""


class FileAclStore:
    """The single-node store."""

    def __init__(self, data_dir: str, authorizer: Authorizer) -> None:
        self._path = os.path.join(data_dir, ACLS_FILE)
        self._authorizer = authorizer
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            with open(self._path, encoding="utf-8") as handle:
                document = json.load(handle)
        except FileNotFoundError:
            return
        for item in document.get("resources", []):
            pattern = ResourcePattern(ResourceType.parse(item["resourceType"]), item["name"],
                                      PatternType.parse(item["patternType"]))
            self._authorizer.set_acls(pattern, _entries(item.get("acls", [])))

    @finishes_once_started
    async def update(self, pattern: ResourcePattern, change: Change) -> Entries:
        async with self._lock:
            entries = change(self._authorizer.entries(pattern))
            if entries == self._authorizer.entries(pattern):
                return entries
            resources = [self._resource(p, self._authorizer.entries(p)) for p in self._authorizer.patterns()
                         if p != pattern]
            if entries:
                resources.append(self._resource(pattern, entries))
            await write_json_durably_off_loop(self._path, {"version": 1, "resources": resources})
            self._authorizer.set_acls(pattern, entries)
            return entries

    @staticmethod
    def _resource(pattern: ResourcePattern, entries: Entries) -> dict[str, Any]:
        return {"resourceType": pattern.resource_type.camel, "patternType": pattern.pattern_type.name,
                "name": pattern.name, **json.loads(encode_entries(entries))}


class ZkAclStore:
    """The ZooKeeper store: the whole ACL set read at start, then kept fresh by the change znodes."""

    def __init__(self, zk: ZkClient, authorizer: Authorizer, clock: Clock = SYSTEM_CLOCK) -> None:
        self._zk = zk
        self._clock = clock
        self._authorizer = authorizer
        self._seen: dict[str, set[str]] = {LITERAL_CHANGES: set(), EXTENDED_CHANGES: set()}
        self._created_ms: dict[str, int] = {}  # notifications read: path -> creation time, for the purge
        zk.on(_WATCH, self._on_changes)

    async def start(self) -> None:
        await self._zk.ensure_paths(LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES)
        for root in self._seen:
            self._seen[root] = set(await self._zk.children(root, watch=_WATCH))
        for root, pattern_type in ((LITERAL_ROOT, PatternType.LITERAL), (PREFIXED_ROOT, PatternType.PREFIXED)):
            for kind in await self._zk.children(root):
                resource_type = ResourceType.parse(kind)
                for name in await self._zk.children(f"{root}/{kind}"):
                    await self._reload(ResourcePattern(resource_type, name, pattern_type))

    async def update(self, pattern: ResourcePattern, change: Change) -> Entries:
        path = znode_path(pattern)
        while True:
            node = await self._zk.get(path)
            current = decode_entries(node[0]) if node is not None else frozenset()
            entries = change(current)
            if entries == current:
                self._authorizer.set_acls(pattern, current)
                return current
            try:
                if node is None:
                    await self._zk.create(path, encode_entries(entries), makepath=True)
                elif entries:
                    await self._zk.set(path, encode_entries(entries), node[1].version)
                else:
                    transaction = self._zk.transaction()
                    transaction.delete(path, version=node[1].version)
                    await self._zk.commit(transaction)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed it first: start over from what it wrote
            break
        root, data = encode_change(pattern)
        await self._zk.create(f"{root}/{CHANGE_PREFIX}", data, sequence=True)
        self._authorizer.set_acls(pattern, entries)
        return entries

    async def _on_changes(self, _: ZkEvent) -> None:
        for root, seen in self._seen.items():
            children = await self._zk.children(root, watch=_WATCH)
            for name in sorted(set(children) - seen):
                seen.add(name)
                node = await self._zk.get(f"{root}/{name}")
                if node is None:
                    continue
                self._created_ms[f"{root}/{name}"] = node[1].ctime
                try:
                    await self._reload(decode_change(root, node[0]))
                except (ValueError, KeyError):
                    log.warning("Ignoring a malformed ACL change notification %s/%s", root, name)
            seen.intersection_update(children)
        expired = [path for path, created in self._created_ms.items()
                   if created < self._clock.wall_ms() - NOTIFICATION_EXPIRY_MS]
        for path in expired:
            del self._created_ms[path]
            await self._zk.delete(path)

    async def _reload(self, pattern: ResourcePattern) -> None:
        node = await self._zk.get(znode_path(pattern))
        self._authorizer.set_acls(pattern, decode_entries(node[0]) if node is not None else frozenset())
