"""ApiVersions (18): the advertised ranges come from the handler registry itself.

v3+ also carries the features (`pybroker.server.features`): none supported, as a ZooKeeper-mode Kafka 3.9
broker; the finalized ones with their epoch; ZkMigrationReady false (only a KRaft controller sets it).
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from pybroker.server.context import RequestContext
from pybroker.server.features import SUPPORTED_FEATURES
from pybroker.server.registry import api


@api(ApiKey.API_VERSIONS, 0, 4)
async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.api_version >= 3:
        ctx.session.client_software_name = request.client_software_name
        ctx.session.client_software_version = request.client_software_version
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=handler.api_key, min_version=handler.min_version,
                                       max_version=handler.max_version)
        for handler in sorted(ctx.services.apis.values(), key=lambda h: h.api_key)
    ]
    finalized = ctx.services.features.current
    return ApiVersionsResponse(
        error_code=0, api_keys=keys, throttle_time_ms=0,
        supported_features=[ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=low, max_version=high)
                            for name, (low, high) in sorted(SUPPORTED_FEATURES.items())],
        finalized_features_epoch=finalized.epoch,
        finalized_features=[ApiVersionsResponse.FinalizedFeatureKey(name=name, min_version_level=level,
                                                                    max_version_level=level)
                            for name, level in sorted(finalized.levels.items())],
        zk_migration_ready=False)
