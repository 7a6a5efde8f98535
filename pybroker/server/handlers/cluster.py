"""DescribeCluster (60): the brokers (their endpoints of the listener asked on), the controller and the cluster id.

As in Kafka it refuses no one: cluster Describe decides only cluster_authorized_operations (0 without it).
v2's IncludeFencedBrokers (KIP-1073) changes nothing: a ZooKeeper-mode or single-node broker list holds no fenced
broker (a broker that is not registered is not listed), so every broker is answered with IsFenced false.
v1's EndpointType (KIP-919) asks for brokers (1) or controllers (2): a broker answers controllers with
MISMATCHED_ENDPOINT_TYPE (the Java Admin's MismatchedEndpointTypeException: it was given a broker as
``bootstrap.controllers``) and any other type with UNSUPPORTED_ENDPOINT_TYPE, as Kafka's AuthHelper does.
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import DescribeClusterRequest, DescribeClusterResponse
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import OPERATIONS_NOT_REQUESTED, authorize_cluster, authorized_operations
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

BROKERS_ENDPOINT_TYPE = 1
CONTROLLERS_ENDPOINT_TYPE = 2


@api(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    metadata = ctx.services.metadata
    if request.endpoint_type == CONTROLLERS_ENDPOINT_TYPE:
        return DescribeClusterResponse(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE, error_message=(
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"))
    if request.endpoint_type != BROKERS_ENDPOINT_TYPE:
        return DescribeClusterResponse(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message=f"Unsupported endpoint type {request.endpoint_type}")
    brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=b.broker_id, host=endpoint[0],
                                                             port=endpoint[1], rack=b.rack)
               for b in metadata.brokers() if (endpoint := b.endpoint(ctx.listener)) is not None]
    operations = OPERATIONS_NOT_REQUESTED
    if request.include_cluster_authorized_operations:
        operations = authorized_operations(ctx, ResourceType.CLUSTER) \
            if authorize_cluster(ctx, AclOperation.DESCRIBE) else 0
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, endpoint_type=BROKERS_ENDPOINT_TYPE,
                                   cluster_id=metadata.cluster_id, controller_id=metadata.controller_id,
                                   brokers=brokers, cluster_authorized_operations=operations)
