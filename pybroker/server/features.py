"""Feature versioning (KIP-584): the features a broker supports and the cluster's finalized levels.

Supported: `share.version` 0-1 and `transaction.version` 0-2 (Kafka 4.2's ranges). At `share.version` 1 share
groups (KIP-932) are served; at 0 (or not finalized) their APIs answer UNSUPPORTED_VERSION, as Kafka 4.2 answers
them with share groups disabled (they stay listed in ApiVersions). `transaction.version`: At level 2 the Java 4.x producer runs transactions V2
(KIP-890 part 2: Produce v12+ adds the partitions, EndTxn v5 bumps the epoch); below it the classic flow. The
coordinator serves both at once, each client's EndTxn as its version says, so a change of level never strands an
open transaction: the clients read the new level from ApiVersions on their next connection. The ends the
coordinator starts itself (fences, timeout aborts) follow the level, as Kafka's do. `metadata.version` is KRaft-only and
`group.version` 1 is left out: the consumer group protocol (KIP-848) is served whatever the level says.

Finalized features live where Kafka keeps them in ZooKeeper mode: the `/feature` znode, FeatureZNode JSON v2
(`{"version":2,"status":1,"features":{name: {"max_version_level": n}}}`), created when missing as Kafka's
controller does, with only `share.version=1` finalized (share groups on in a new cluster, as in a new 4.2 one;
`transaction.version` stays unfinalized as a Kafka 3.9 ZooKeeper cluster has it); an existing znode is left as it
is: an upgraded cluster turns share groups on with UpdateFeatures (`pybroker features upgrade`). The epoch is
the znode's version. A single node keeps the same document, with its epoch, in `pybroker-features.json` in its
first log dir; a new one starts with `share.version=1` and `transaction.version=2` finalized, as
`kafka-storage format` finalizes them for a new 4.2 cluster.

UpdateFeatures follows Kafka's ZooKeeper controller (KafkaController.validateFeatureUpdate): each update is
checked on its own, with INVALID_REQUEST and Kafka's messages; valid ones are written together, invalid
ones are not.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

from kazoo.exceptions import NodeExistsError

from pybroker.common.durable_json import write_json_durably_off_loop
from pybroker.common.uncancellable import finishes_once_started
from pybroker.protocol.error_codes import ErrorCode

if TYPE_CHECKING:
    from pybroker.zk.client import ZkClient, ZkEvent

TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"
#: name -> (min, max) level this broker supports.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {SHARE_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2)}
#: What a new single node finalizes (a new Kafka 4.2 cluster's defaults, of the features supported here).
NEW_NODE_LEVELS: dict[str, int] = {SHARE_VERSION: 1, TRANSACTION_VERSION: 2}
#: What a new ZooKeeper-mode cluster's `/feature` znode finalizes (see the module doc).
NEW_ZNODE_LEVELS: dict[str, int] = {SHARE_VERSION: 1}
FEATURES_FILE = "pybroker-features.json"

FEATURE_ZNODE = "/feature"
FEATURE_ZNODE_VERSION = 2
STATUS_ENABLED = 1
_WATCH = "feature-changed"


class UpgradeType(IntEnum):
    """UpdateFeatures v1+'s UpgradeType (v0's AllowDowngrade maps to UPGRADE / SAFE_DOWNGRADE)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True)
class FinalizedFeatures:
    epoch: int
    levels: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: UpgradeType


@dataclass(frozen=True)
class UpdateError:
    code: ErrorCode
    message: str


def validate(update: FeatureUpdate, existing: int | None) -> UpdateError | None:
    """Kafka's per-feature rules, in its order; None when the update may be applied."""

    def invalid(message: str) -> UpdateError:
        return UpdateError(ErrorCode.INVALID_REQUEST, message)

    name = update.feature
    if not name:
        return invalid("Feature name can not be empty.")
    if update.upgrade_type == UpgradeType.UNKNOWN:
        return invalid("Received unknown upgrade type.")
    if update.level < 1:  # a deletion
        if update.upgrade_type == UpgradeType.UPGRADE:
            return invalid(f"Can not provide versionLevel: {update.level} less than 1 without setting the "
                           "SAFE_DOWNGRADE (or UNSAFE_DOWNGRADE) flag in the request.")
        if existing is None:
            return invalid("Can not delete non-existing finalized feature.")
        return None
    if existing is not None:
        if update.level == existing:
            verb = "upgrade" if update.upgrade_type == UpgradeType.UPGRADE else "downgrade"
            return invalid(f"Can not {verb} a finalized feature: '{name}' from existing versionLevel:{existing} "
                           "to the same value.")
        if update.level < existing and update.upgrade_type == UpgradeType.UPGRADE:
            return invalid(f"Can not downgrade finalized feature: '{name}' from existing versionLevel:{existing} "
                           f"to provided versionLevel:{update.level} without setting the downgrade type to "
                           "SAFE_DOWNGRADE in the request.")
        if update.level > existing and update.upgrade_type != UpgradeType.UPGRADE:
            return invalid(f"When the downgradeType is set to SAFE in the request, the provided "
                           f"versionLevel:{update.level} can not be greater than existing versionLevel:{existing}.")
    supported = SUPPORTED_FEATURES.get(name)
    if supported is None:
        return invalid("Could not apply finalized feature update because the provided feature is not supported.")
    if not supported[0] <= update.level <= supported[1]:
        return invalid(f"Could not apply finalized feature update because the provided versionLevel:{update.level} "
                       f"is outside the supported range [{supported[0]}, {supported[1]}].")
    return None


def apply(levels: dict[str, int], updates: list[FeatureUpdate]) -> dict[str, int]:
    """The finalized levels after the (validated) updates; level < 1 removes the feature."""
    result = dict(levels)
    for update in updates:
        if update.level < 1:
            result.pop(update.feature, None)
        else:
            result[update.feature] = update.level
    return result


def encode_feature_znode(levels: dict[str, int]) -> bytes:
    features = {name: {"max_version_level": level} for name, level in sorted(levels.items())}
    return json.dumps({"version": FEATURE_ZNODE_VERSION, "status": STATUS_ENABLED, "features": features},
                      separators=(",", ":")).encode()


def decode_feature_znode(data: bytes) -> dict[str, int]:
    """Finalized levels of a FeatureZNode (v1 or v2); a disabled node finalizes nothing."""
    document = json.loads(data)
    if document.get("status") != STATUS_ENABLED:
        return {}
    return {name: int(info["max_version_level"]) for name, info in document.get("features", {}).items()}


def share_groups_enabled(features: FinalizedFeatures) -> bool:
    """Whether share groups are served: `share.version` 1 or more finalized (Kafka's ShareVersion.SV_1)."""
    return features.levels.get(SHARE_VERSION, 0) >= 1


class FeatureStore(Protocol):
    """Where the finalized features live: `current` is what ApiVersions answers."""

    current: FinalizedFeatures

    async def write(self, levels: dict[str, int]) -> None: ...


class LocalFeatures:
    """A single node's finalized features, kept in its first log dir (NEW_NODE_LEVELS at epoch 0 until changed)."""

    def __init__(self, data_dir: str) -> None:
        self._path = os.path.join(data_dir, FEATURES_FILE)
        self._writes = asyncio.Lock()
        try:
            with open(self._path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            self.current = FinalizedFeatures(0, dict(NEW_NODE_LEVELS))
            return
        self.current = FinalizedFeatures(int(json.loads(data)["epoch"]), decode_feature_znode(data))

    @finishes_once_started
    async def write(self, levels: dict[str, int]) -> None:
        async with self._writes:  # one epoch after another, each on disk before it is current
            epoch = self.current.epoch + 1
            document = json.loads(encode_feature_znode(levels))
            await write_json_durably_off_loop(self._path, {**document, "epoch": epoch})
            self.current = FinalizedFeatures(epoch, dict(levels))


class ZkFeatures:
    """The `/feature` znode, read at start and again on every change (a one-shot watch re-armed each read)."""

    def __init__(self, zk: "ZkClient") -> None:
        self._zk = zk
        self.current = FinalizedFeatures(-1)
        zk.on(_WATCH, self._on_change)

    async def start(self) -> None:
        try:
            await self._zk.create(FEATURE_ZNODE, encode_feature_znode(NEW_ZNODE_LEVELS))
        except NodeExistsError:
            pass
        await self._reload()

    async def write(self, levels: dict[str, int]) -> None:
        """Replace the finalized levels, conditional on the version read (a racing writer fails the update)."""
        stat = await self._zk.set(FEATURE_ZNODE, encode_feature_znode(levels), self.current.epoch)
        self.current = FinalizedFeatures(stat.version, dict(levels))

    async def _on_change(self, _: "ZkEvent") -> None:
        await self._reload()

    async def _reload(self) -> None:
        node = await self._zk.get(FEATURE_ZNODE, watch=_WATCH)
        self.current = FinalizedFeatures(-1) if node is None else \
            FinalizedFeatures(node[1].version, decode_feature_znode(node[0]))
