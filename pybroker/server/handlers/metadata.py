"""Metadata (3): brokers, controller, cluster id and topic/partition leadership.

An unknown topic named in the request is created when both the request (v4+) and
`auto.create.topics.enable` allow it; in a cluster it is answered LEADER_NOT_AVAILABLE once written, before its
leaders are elected, as Kafka's AutoTopicCreationManager answers it (clients ask again). An all-topics answer lists the internal topics too, marked
`is_internal` (clients leave them out by `exclude.internal.topics`), as Kafka's does. Topics are
asked for by id from v12; v10 and v11 carry the field but, as in Kafka, a request using it (or a
null name) is refused with INVALID_REQUEST for every topic.
With an authorizer, topics the principal may not Describe are left out or refused (see
`_authorized_answer`). An answer in which every topic exists is kept encoded (`metadata_cache`) and sent again as long
as the metadata it describes is unchanged. Brokers are listed with their endpoints of the listener
the request came in on; a broker without that listener is left out, as in Kafka.
"""

from __future__ import annotations

from pybroker.common.topic import INTERNAL_TOPICS, ZERO_UUID, topic_name_error
from pybroker.controller.metadata import ClusterMetadata, TopicInfo
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import EncodedBody
from pybroker.protocol.messages import MetadataRequest, MetadataResponse
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize, authorize_cluster, authorized_operations
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.metadata_cache import RequestedTopics, answer_cache, resolve
from pybroker.server.registry import api

Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponsePartition
FIRST_TOPIC_ID_VERSION = 12


# v13's top-level error code (KIP-1102, REBOOTSTRAP_REQUIRED) is for brokers that know the client must re-bootstrap;
# this one always answers with its metadata (error code 0).
@api(ApiKey.METADATA, 0, 13)
async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse | EncodedBody:
    metadata = ctx.services.metadata
    version = ctx.api_version
    asked = None if request.topics is None or (version == 0 and not request.topics) else request.topics  # None: all
    if asked is not None and version < FIRST_TOPIC_ID_VERSION and any(
            t.name is None or t.topic_id != ZERO_UUID for t in asked):
        return _invalid_request(asked)
    if ctx.services.authorizer is not None:
        return await _authorized_answer(ctx, request, asked)
    requested: RequestedTopics = None if asked is None else tuple((t.name, t.topic_id) for t in asked)
    cache = answer_cache(metadata)
    shape = (ApiKey.METADATA, version, ctx.listener)
    body = cache.get(metadata, shape, requested)
    if body is not None:
        return EncodedBody(version, body)
    live = {b.broker_id for b in metadata.brokers()}
    if asked is None:
        infos: list[TopicInfo | None] = [info for _, info in sorted(metadata.topics().items())]
    else:
        infos = [resolve(metadata, t.name, t.topic_id) for t in asked]
    known = [info for info in infos if info is not None]
    if len(known) == len(infos):  # built without awaiting anything, from exactly these objects
        body = _response(metadata, [_describe(info, live) for info in known], ctx.listener).encode(version)
        cache.put(metadata, shape, requested, known, body)
        return EncodedBody(version, body)
    assert asked is not None  # all topics are known ones
    topics = [await _lookup(ctx, t, request.allow_auto_topic_creation, live) for t in asked]
    return _response(metadata, topics, ctx.listener)


async def _authorized_answer(ctx: RequestContext, request: MetadataRequest,
                             asked: list[MetadataRequest.MetadataRequestTopic] | None) -> MetadataResponse:
    """The answer under an authorizer (never cached: it depends on the principal), as KafkaApis
    builds it: all topics means those the principal may Describe; a named topic it may not Describe
    is TOPIC_AUTHORIZATION_FAILED, and so is an unknown one it would auto-create without Create on
    the cluster or the topic; authorized_operations filled when asked for."""
    metadata = ctx.services.metadata
    live = {b.broker_id for b in metadata.brokers()}
    topics: list[Topic] = []
    if asked is None:
        infos = sorted(metadata.topics().items())
        allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (name for name, _ in infos))
        topics = [_describe(info, live) for name, info in infos if name in allowed]
    else:
        creating = request.allow_auto_topic_creation and ctx.services.config["auto.create.topics.enable"]
        for requested in asked:
            info = resolve(metadata, requested.name, requested.topic_id)
            name = info.name if info is not None else requested.name
            if name is not None and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=requested.name,
                                    topic_id=requested.topic_id))
            elif name is not None and info is None and creating and not topic_name_error(name) and not (
                    authorize_cluster(ctx, AclOperation.CREATE)
                    or authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)):
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
            else:
                topics.append(await _lookup(ctx, requested, request.allow_auto_topic_creation, live))
    response = _response(metadata, topics, ctx.listener)
    if request.include_topic_authorized_operations:
        for topic in response.topics:
            if topic.error_code == ErrorCode.NONE and topic.name is not None:
                topic.topic_authorized_operations = authorized_operations(ctx, ResourceType.TOPIC, topic.name)
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(ctx, ResourceType.CLUSTER)
    return response


def _response(metadata: ClusterMetadata, topics: list[Topic], listener: str) -> MetadataResponse:
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=b.broker_id, host=endpoint[0], port=endpoint[1],
                                                       rack=b.rack)
               for b in metadata.brokers() if (endpoint := b.endpoint(listener)) is not None]
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=metadata.cluster_id,
                            controller_id=metadata.controller_id, topics=topics)


def _invalid_request(asked: list[MetadataRequest.MetadataRequestTopic]) -> MetadataResponse:
    """Kafka's error answer (MetadataRequest.getErrorResponse): no brokers, no cluster id, every
    requested topic with the error and a null name sent as ""."""
    return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[
        Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name or "", topic_id=t.topic_id) for t in asked])


async def _lookup(ctx: RequestContext, requested: MetadataRequest.MetadataRequestTopic, allow_create: bool,
                  live: set[int]) -> Topic:
    metadata = ctx.services.metadata
    info = resolve(metadata, requested.name, requested.topic_id)
    if info is not None:
        return _describe(info, live)
    if requested.name is None or requested.topic_id != ZERO_UUID:
        return Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=requested.topic_id)
    if topic_name_error(requested.name):
        return Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=requested.name)
    if allow_create and ctx.services.config["auto.create.topics.enable"] and requested.name not in INTERNAL_TOPICS:
        try:
            await ctx.services.auto_create_topic(requested.name)
        except Exception as exc:  # a racing creation or a policy error: report it for this topic only
            code = error_code_for(exc)
            if code != ErrorCode.TOPIC_ALREADY_EXISTS and metadata.topic(requested.name) is None:
                return Topic(error_code=code, name=requested.name)
        info = metadata.topic(requested.name)
        if info is not None:  # a single node's creation is done once written: the topic is answered with its leaders
            return _describe(info, live)
        # Written to ZooKeeper, or found there (another creation, a deletion still pending): as Kafka's
        # AutoTopicCreationManager, which creates with timeout 0 and waits for no leader, LEADER_NOT_AVAILABLE at
        # once, which clients retry; the rest of the request is not held up by the election.
        return Topic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=requested.name)
    return Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=requested.name)


def _describe(info: TopicInfo, live: set[int]) -> Topic:
    """A partition without a live leader (none elected, or the recorded one is not registered: it died
    and no other is elected yet) reports LEADER_NOT_AVAILABLE and leader -1, as Kafka's ZkMetadataCache;
    a dead leader's id, absent from the broker list, leaves the Java admin client waiting for that node.
    Replicas on brokers that are not registered, or in a failed log dir, are listed as offline."""
    partitions = [
        Partition(error_code=0 if p.leader in live else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
                  leader_id=p.leader if p.leader in live else -1, leader_epoch=p.leader_epoch,
                  replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                  offline_replicas=p.offline_replicas(live))
        for index, p in sorted(info.partitions.items())
    ]
    return Topic(error_code=0, name=info.name, topic_id=info.topic_id or ZERO_UUID,
                 is_internal=info.name in INTERNAL_TOPICS, partitions=partitions)
