"""GetTelemetrySubscriptions (71), PushTelemetry (72) and ListConfigResources (74): client
telemetry (KIP-714), answered by the broker's ClientMetricsManager (pybroker.server.telemetry.manager).

Kafka checks no ACL for the first two (any client may push its own metrics) and Describe on the cluster
for the list of subscription names.

ListConfigResources v1 (KIP-1142) lists the resources of the types asked (every supported one for none): topics,
brokers, client-metrics subscriptions and groups with a config of their own (none: this broker stores no group
config). A type this broker has no configs for (BROKER_LOGGER) is UNSUPPORTED_VERSION for the whole request, as
Kafka answers a type it does not support. v0 lists the client-metrics subscriptions only.
"""

from __future__ import annotations

from typing import Callable, Iterable

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.registry import api
from pybroker.server.telemetry.manager import ACCEPTED_COMPRESSION, ZERO


def client_selectors(ctx: RequestContext) -> dict[str, str]:
    """What a subscription's ``match`` patterns see of the client (Kafka's ClientMetricsInstanceMetadata)."""
    host, _, port = ctx.client_host.rpartition(":")
    return {"client_id": ctx.client_id or "", "client_software_name": ctx.session.client_software_name,
            "client_software_version": ctx.session.client_software_version,
            "client_source_address": host.strip("[]"), "client_source_port": port}


@api(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
async def get_subscriptions(ctx: RequestContext,
                            request: GetTelemetrySubscriptionsRequest) -> GetTelemetrySubscriptionsResponse:
    manager = ctx.services.client_metrics
    error, instance = manager.get_subscriptions(request.client_instance_id, client_selectors(ctx), ctx.now_ms)
    if error != ErrorCode.NONE:
        return GetTelemetrySubscriptionsResponse(throttle_time_ms=0, error_code=error, client_instance_id=ZERO,
                                                 accepted_compression_types=[], requested_metrics=[])
    return GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, client_instance_id=instance.instance_id,
        subscription_id=instance.subscription_id, accepted_compression_types=[int(c) for c in ACCEPTED_COMPRESSION],
        push_interval_ms=instance.push_interval_ms, telemetry_max_bytes=manager.telemetry_max_bytes,
        delta_temporality=True, requested_metrics=list(instance.metrics))


@api(ApiKey.PUSH_TELEMETRY, 0, 0)
async def push(ctx: RequestContext, request: PushTelemetryRequest) -> PushTelemetryResponse:
    result = ctx.services.client_metrics.push(request.client_instance_id, request.subscription_id, request.terminating,
                                            request.compression_type, request.metrics, client_selectors(ctx),
                                            ctx.now_ms)
    return PushTelemetryResponse(throttle_time_ms=0, error_code=result.error)


TOPIC, BROKER, CLIENT_METRICS, GROUP = 2, 4, 16, 32
LISTED_TYPES = (TOPIC, BROKER, CLIENT_METRICS, GROUP)


@api(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def list_resources(ctx: RequestContext,
                         request: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return ListConfigResourcesResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                           config_resources=[])
    types = (request.resource_types or list(LISTED_TYPES)) if ctx.api_version >= 1 else [CLIENT_METRICS]
    if any(t not in LISTED_TYPES for t in types):
        return ListConfigResourcesResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION,
                                           config_resources=[])
    Resource = ListConfigResourcesResponse.ConfigResource
    metadata = ctx.services.metadata
    names: dict[int, Callable[[], Iterable[str]]] = {
        TOPIC: lambda: sorted(metadata.topics()), BROKER: lambda: (str(b.broker_id) for b in metadata.brokers()),
        CLIENT_METRICS: ctx.services.client_metrics.names, GROUP: lambda: sorted(ctx.services.share.configs.store.all())}
    return ListConfigResourcesResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE,
        config_resources=[Resource(resource_name=name, resource_type=t) for t in dict.fromkeys(types)
                          for name in names[t]()])
