"""ApiVersions (18): the advertised ranges come from the handler registry itself."""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from pybroker.server.context import RequestContext
from pybroker.server.registry import api


@api(ApiKey.API_VERSIONS, 0, 4)
async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=handler.api_key, min_version=handler.min_version,
                                       max_version=handler.max_version)
        for handler in sorted(ctx.broker.dispatcher.handlers.values(), key=lambda h: h.api_key)
    ]
    return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
