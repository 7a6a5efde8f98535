"""Admin calls for the config resources that exist only through their configs, listed with ListConfigResources:
client-metrics subscriptions (KIP-714) and, from v1 (KIP-1142), groups with a config of their own. Both are then
described and altered like topic configs."""

from __future__ import annotations

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import UnsupportedVersionError, check
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ListConfigResourcesRequest, ListConfigResourcesResponse

CLIENT_METRICS_RESOURCE = 16  # ConfigResource.Type.CLIENT_METRICS
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
#: the first ListConfigResources version that names the resource types asked for
TYPED_LIST_VERSION = 1


async def list_client_metrics_resources(client: KafkaClient) -> list[str]:
    """The names of every client-metrics subscription, sorted."""
    connection = await client.connect()
    response = await connection.send(ListConfigResourcesRequest(), ListConfigResourcesResponse)
    check(response.error_code)
    return sorted(resource.resource_name for resource in response.config_resources)


async def list_group_config_resources(client: KafkaClient) -> list[str]:
    """The ids of the groups that have a config of their own, sorted; none from a broker that cannot list them
    (ListConfigResources v0 only, or UNSUPPORTED_VERSION for the type), as Kafka's ConfigCommand treats it."""
    connection = await client.connect()
    try:
        response = await connection.send(ListConfigResourcesRequest(resource_types=[GROUP_RESOURCE]),
                                         ListConfigResourcesResponse, min_version=TYPED_LIST_VERSION)
    except UnsupportedVersionError:
        return []
    if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
        return []
    check(response.error_code)
    return sorted(resource.resource_name for resource in response.config_resources)
