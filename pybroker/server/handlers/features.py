"""UpdateFeatures (57, v0-2): the controller validates each update as Kafka's ZooKeeper controller does.

Kafka's order: Alter on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the request and every feature),
then the controller (a ZooKeeper-mode broker that is not answers NOT_CONTROLLER), then each update on its
own (`features.validate`). v0's AllowDowngrade stands for v1's SAFE_DOWNGRADE. ValidateOnly (v1+) stops
before the write. v2 answers without per-feature results: the first failure becomes the top-level error, so
with v2 nothing is written unless every update is valid.
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import UpdateFeaturesRequest, UpdateFeaturesResponse
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.features import FeatureUpdate, UpdateError, UpgradeType, apply, validate
from pybroker.server.registry import api

Result = UpdateFeaturesResponse.UpdatableFeatureResult
FIRST_TOP_LEVEL_ONLY_VERSION = 2


def _upgrade_type(item: UpdateFeaturesRequest.FeatureUpdateKey, version: int) -> UpgradeType:
    if version == 0:
        return UpgradeType.SAFE_DOWNGRADE if item.allow_downgrade else UpgradeType.UPGRADE
    return UpgradeType(item.upgrade_type) if item.upgrade_type in UpgradeType._value2member_map_ \
        else UpgradeType.UNKNOWN


def _answer(version: int, errors: dict[str, UpdateError | None],
            top: UpdateError | None = None) -> UpdateFeaturesResponse:
    if version >= FIRST_TOP_LEVEL_ONLY_VERSION and top is None:
        top = next((error for error in errors.values() if error is not None), None)
    return UpdateFeaturesResponse(
        error_code=top.code if top else ErrorCode.NONE, error_message=top.message if top else None,
        results=[Result(feature=name, error_code=error.code if error else ErrorCode.NONE,
                        error_message=error.message if error else None) for name, error in errors.items()])


@api(ApiKey.UPDATE_FEATURES, 0, 2)
async def update_features(ctx: RequestContext, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    names = [item.feature for item in request.feature_updates]
    if not authorize_cluster(ctx, AclOperation.ALTER):
        refused = UpdateError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        return _answer(ctx.api_version, dict.fromkeys(names, refused), refused)
    zk_mode = ctx.services.zk_mode
    if zk_mode is not None and (zk_mode.controller is None or not zk_mode.controller.active):
        return _answer(ctx.api_version, {}, UpdateError(ErrorCode.NOT_CONTROLLER,
                                                        "This node is not the active controller."))
    store = ctx.services.features
    existing = store.current.levels
    updates = [FeatureUpdate(item.feature, item.max_version_level, _upgrade_type(item, ctx.api_version))
               for item in request.feature_updates]
    errors = {update.feature: validate(update, existing.get(update.feature)) for update in updates}
    valid = [update for update in updates if errors[update.feature] is None]
    atomic = ctx.api_version >= FIRST_TOP_LEVEL_ONLY_VERSION
    if valid and not request.validate_only and not (atomic and len(valid) < len(updates)):
        try:
            await store.write(apply(existing, valid))
        except Exception as exc:  # e.g. a racing writer changed /feature: the valid updates fail, nothing is half-done
            failed = UpdateError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to write the finalized features: {exc!r}")
            errors.update(dict.fromkeys((update.feature for update in valid), failed))
    return _answer(ctx.api_version, errors)
