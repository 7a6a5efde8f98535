"""The Admin client's feature calls (describeFeatures, updateFeatures).

describeFeatures reads ApiVersions of a bootstrap broker, as Kafka's Admin does; updateFeatures goes to the
controller at v1 at most, whose answer names each feature's outcome (v2 answers with one top-level error).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Mapping

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError, check
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)

PER_FEATURE_RESULTS_MAX_VERSION = 1


class UpgradeType(IntEnum):
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True)
class FeatureMetadata:
    supported: dict[str, tuple[int, int]]
    finalized: dict[str, int]
    epoch: int | None  # None: the broker does not know it (-1)


@dataclass(frozen=True)
class FeatureChange:
    level: int
    upgrade_type: UpgradeType


async def describe_features(client: KafkaClient) -> FeatureMetadata:
    connection = await client.connect()
    response = await connection.send(ApiVersionsRequest(), ApiVersionsResponse, min_version=3)
    check(response.error_code)
    return FeatureMetadata(
        supported={f.name: (f.min_version, f.max_version) for f in response.supported_features},
        finalized={f.name: f.max_version_level for f in response.finalized_features},
        epoch=None if response.finalized_features_epoch < 0 else response.finalized_features_epoch)


async def update_features(client: KafkaClient, changes: Mapping[str, FeatureChange], *,
                          validate_only: bool = False, timeout_ms: int = 60000) -> dict[str, ResponseError | None]:
    """feature -> None when it was (or, validating only, would be) applied, else the controller's error."""
    connection = await client.controller()
    version = min(connection.versions.version_for(UpdateFeaturesRequest.API_KEY), PER_FEATURE_RESULTS_MAX_VERSION)
    if version == 0 and (validate_only or any(c.upgrade_type == UpgradeType.UNSAFE_DOWNGRADE
                                              for c in changes.values())):
        raise ResponseError(ErrorCode.UNSUPPORTED_VERSION, "The controller does not support validateOnly or "
                                                           "UNSAFE_DOWNGRADE (UpdateFeatures v0 only)")
    request = UpdateFeaturesRequest(timeout_ms=timeout_ms, validate_only=validate_only, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(feature=name, max_version_level=change.level,
                                               upgrade_type=change.upgrade_type,
                                               allow_downgrade=change.upgrade_type != UpgradeType.UPGRADE)
        for name, change in changes.items()])
    response = await connection.send_at(request, version, UpdateFeaturesResponse)
    if response.error_code != ErrorCode.NONE:
        top = ResponseError(response.error_code, response.error_message)
        return dict.fromkeys(changes, top)
    by_name = {r.feature: r for r in response.results}
    return {name: None if name in by_name and by_name[name].error_code == ErrorCode.NONE else
            ResponseError(by_name[name].error_code if name in by_name else ErrorCode.UNKNOWN_SERVER_ERROR,
                          by_name[name].error_message if name in by_name else "no result for this feature")
            for name in changes}
