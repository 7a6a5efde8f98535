"""Admin calls for client-metrics subscriptions (KIP-714): ListConfigResources. The subscriptions
themselves are config resources of type CLIENT_METRICS, described and altered like topic configs."""

from __future__ import annotations

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import check
from pybroker.protocol.messages import ListConfigResourcesRequest, ListConfigResourcesResponse

CLIENT_METRICS_RESOURCE = 16  # ConfigResource.Type.CLIENT_METRICS


async def list_client_metrics_resources(client: KafkaClient) -> list[str]:
    """The names of every client-metrics subscription, sorted."""
    connection = await client.connect()
    response = await connection.send(ListConfigResourcesRequest(), ListConfigResourcesResponse)
    check(response.error_code)
    return sorted(resource.resource_name for resource in response.config_resources)
