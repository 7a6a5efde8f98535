"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37): thin calls into cluster metadata.

An OSError on the way (ENOSPC, EIO while creating partition directories or writing the metadata
file) is Kafka's KafkaStorageException: KAFKA_STORAGE_ERROR, not UNKNOWN_SERVER_ERROR.

With an authorizer, KafkaApis' checks: CreateTopics needs Create on the cluster or the topic, and only
topics the principal may DescribeConfigs show their configs; DeleteTopics needs Delete (and a topic
named by id Describe, else it is unknown); CreatePartitions needs Alter.

The request's timeout_ms applies as in Kafka's ZkAdminManager: every topic of the request is started first;
with timeout_ms <= 0 (or validate_only) the answer goes at once, NONE for each one started; otherwise it
waits until every started topic is done in this broker's metadata (created with a leader for every
partition, or gone), and answers REQUEST_TIMED_OUT for those that are not when timeout_ms has passed (as
DelayedCreatePartitions and DelayedDeleteTopics do). What was started goes on either way, also when the
client goes away: the phase that starts the request's topics runs to its end (`run_to_end`) when the handler is
cancelled with its connection, as Kafka's handler thread writes them all whatever the connection does. On a
single node every operation is done once started.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Callable, Mapping

from pybroker.common.uncancellable import run_to_end
from pybroker.controller.metadata import ClusterMetadata, has_leaders
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from pybroker.protocol.primitives import ZERO_UUID
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server import topic_creation
from pybroker.server.authorization import allowed_names, authorize, authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.quota.enforcement import MutationQuota
from pybroker.server.registry import api

CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult
DEFAULT_FROM_BROKER = -1
#: controller_mutation_rate is strict from these versions on (KIP-599), permissive before
STRICT_CREATE_TOPICS, STRICT_DELETE_TOPICS, STRICT_CREATE_PARTITIONS = 6, 5, 3
THROTTLED = "The throttling quota has been exceeded."


def _failure(exc: Exception) -> tuple[ErrorCode, str | None]:
    if isinstance(exc, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR, f"Error while writing to the log dir: {exc}"
    return error_code_for(exc), error_message_for(exc)


async def _timed_out(metadata: ClusterMetadata, done: Mapping[str, Callable[[], bool]], timeout_ms: int) -> set[str]:
    """The started topics (name -> whether it is done) still not done after ``timeout_ms``; none when the
    answer does not wait (timeout_ms <= 0)."""
    if timeout_ms <= 0 or not done:
        return set()
    if await metadata.wait_until(lambda: all(check() for check in done.values()), timeout_ms / 1000):
        return set()
    return {name for name, check in done.items() if not check()}


def _elected(metadata: ClusterMetadata, name: str, partitions: int) -> Callable[[], bool]:
    return lambda: has_leaders(metadata.topic(name), partitions)


@api(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    counts = Counter(topic.name for topic in request.topics)
    names = list(counts)
    creatable = set(names) if authorize_cluster(ctx, AclOperation.CREATE) else \
        allowed_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, names)
    describable = allowed_names(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    results = await run_to_end(_start_creations(ctx, request, counts, creatable))
    metadata = ctx.services.metadata
    started = {} if request.validate_only else {
        r.name: _elected(metadata, r.name, r.num_partitions) for r in results if r.error_code == ErrorCode.NONE}
    late = await _timed_out(metadata, started, request.timeout_ms)
    for result in results:
        if result.name in late:
            result.error_code, result.error_message = ErrorCode.REQUEST_TIMED_OUT, None
    for result in results:
        if result.name in describable:
            continue
        if result.error_code in (ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT):  # created, configs not to be seen
            result.configs, result.num_partitions, result.replication_factor = [], -1, -1
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif counts[result.name] > 1 or result.name not in creatable:  # Kafka resets it only after a failed create
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


async def _start_creations(ctx: RequestContext, request: CreateTopicsRequest, counts: Counter[str],
                           creatable: set[str]) -> list[CreatableTopicResult]:
    """Each topic of the request checked and, when it may be, created (started, in ZooKeeper mode)."""
    mutations = MutationQuota(strict=ctx.api_version >= STRICT_CREATE_TOPICS)
    results = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(CreatableTopicResult(name=topic.name, error_code=ErrorCode.INVALID_REQUEST,
                                                error_message=f"Create topics request from client `{ctx.client_id}` "
                                                              f"contains multiple entries for the topic {topic.name}"))
            continue
        if topic.name not in creatable:
            results.append(CreatableTopicResult(name=topic.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                error_message="Authorization failed."))
            continue
        results.append(await _create_one(ctx, topic, request.validate_only, mutations))
    return results


async def _create_one(ctx: RequestContext, topic: CreateTopicsRequest.CreatableTopic,
                      validate_only: bool, mutations: MutationQuota) -> CreatableTopicResult:
    services = ctx.services
    partitions = topic.num_partitions
    factor = topic.replication_factor
    assignments = {a.partition_index: a.broker_ids for a in topic.assignments} or None
    if assignments and (partitions != DEFAULT_FROM_BROKER or factor != DEFAULT_FROM_BROKER):
        return CreatableTopicResult(name=topic.name, error_code=ErrorCode.INVALID_REQUEST,
                                    error_message="Both numPartitions or replicationFactor and replicasAssignments "
                                                  "were set. Both cannot be used at the same time.")
    if partitions == DEFAULT_FROM_BROKER:
        partitions = services.config["num.partitions"]
    if factor == DEFAULT_FROM_BROKER:
        factor = services.config["default.replication.factor"]
    nulls = [config.name for config in topic.configs if config.value is None]
    if nulls:  # refused as Kafka's ZkAdminManager does, every one named, before the quota is charged
        return CreatableTopicResult(name=topic.name, error_code=ErrorCode.INVALID_CONFIG,
                                    error_message=f"Null value not supported for topic configs: {','.join(nulls)}")
    configs = {config.name: config.value for config in topic.configs if config.value is not None}
    if not validate_only and not mutations.admit(len(assignments) if assignments else partitions,
                                                 ctx.services.clock.wall_ms()):
        return CreatableTopicResult(name=topic.name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                    error_message=THROTTLED)
    try:
        info = await topic_creation.create_topic(services, topic.name, partitions, factor, configs, assignments,
                                                 validate_only=validate_only)
    except Exception as exc:
        code, message = _failure(exc)
        return CreatableTopicResult(name=topic.name, error_code=code, error_message=message)
    described = [
        CreateTopicsResponse.CreatableTopicConfigs(name=c.name, value=c.value, read_only=False,
                                                   config_source=c.source, is_sensitive=False)
        for c in services.topic_configs.describe(info.configs)
    ]
    return CreatableTopicResult(name=topic.name, topic_id=info.topic_id, error_code=0, error_message=None,
                                num_partitions=len(info.partitions), replication_factor=info.replication_factor,
                                configs=described)


@api(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    metadata = ctx.services.metadata
    results = await run_to_end(_start_deletions(ctx, request))
    started = {r.name: _deleted(metadata, r.name) for r in results if r.name is not None and r.error_code == 0}
    late = await _timed_out(metadata, started, request.timeout_ms)
    for result in results:
        if result.name in late:
            result.error_code = ErrorCode.REQUEST_TIMED_OUT
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def _start_deletions(ctx: RequestContext,
                           request: DeleteTopicsRequest) -> list[DeleteTopicsResponse.DeletableTopicResult]:
    """Each topic of the request checked and, when it may be, deleted (queued, in ZooKeeper mode)."""
    metadata = ctx.services.metadata
    requested: list[tuple[str | None, uuid.UUID]] = [(t.name, t.topic_id) for t in request.topics] \
        if ctx.api_version >= 6 else [(name, ZERO_UUID) for name in request.topic_names]  # no ids before v6
    mutations = MutationQuota(strict=ctx.api_version >= STRICT_DELETE_TOPICS)
    results = []
    for name, topic_id in requested:
        result = DeleteTopicsResponse.DeletableTopicResult(name=name, error_code=0)
        if name is None:
            info = metadata.topic_by_id(topic_id)
            if info is None:
                result.topic_id = topic_id
                result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                results.append(result)
                continue
            if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                result.topic_id, result.error_code = topic_id, ErrorCode.UNKNOWN_TOPIC_ID  # its name not disclosed
                results.append(result)
                continue
            name = result.name = info.name
        if not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
            result.topic_id = topic_id
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            results.append(result)
            continue
        info = metadata.topic(name)
        if info is not None:
            result.topic_id = info.topic_id
        if not mutations.admit(len(info.partitions) if info is not None else 0, ctx.services.clock.wall_ms()):
            result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED
            results.append(result)
            continue
        try:
            await metadata.delete_topic(name)
        except Exception as exc:
            result.error_code, result.error_message = _failure(exc)
        results.append(result)
    return results


def _deleted(metadata: ClusterMetadata, name: str) -> Callable[[], bool]:
    return lambda: metadata.topic(name) is None


@api(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    results = await run_to_end(_start_growths(ctx, request))
    metadata = ctx.services.metadata
    totals = {topic.name: topic.count for topic in request.topics}
    started = {} if request.validate_only else {
        r.name: _elected(metadata, r.name, totals[r.name]) for r in results if r.error_code == ErrorCode.NONE}
    late = await _timed_out(metadata, started, request.timeout_ms)
    for result in results:
        if result.name in late:
            result.error_code, result.error_message = ErrorCode.REQUEST_TIMED_OUT, None
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


async def _start_growths(ctx: RequestContext, request: CreatePartitionsRequest
                         ) -> list[CreatePartitionsResponse.CreatePartitionsTopicResult]:
    """Each topic of the request checked and, when it may be, grown (started, in ZooKeeper mode)."""
    counts = Counter(topic.name for topic in request.topics)
    mutations = MutationQuota(strict=ctx.api_version >= STRICT_CREATE_PARTITIONS)
    results = []
    alterable = allowed_names(ctx, AclOperation.ALTER, ResourceType.TOPIC, counts)
    for topic in request.topics:
        result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=topic.name, error_code=0)
        if counts[topic.name] > 1:
            result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic in request."
        elif topic.name not in alterable:
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "The topic authorization is failed."
        else:
            assignments = None if topic.assignments is None else [a.broker_ids for a in topic.assignments]
            info = ctx.services.metadata.topic(topic.name)
            added = max(topic.count - len(info.partitions), 0) if info is not None else 0
            if not request.validate_only and not mutations.admit(added, ctx.services.clock.wall_ms()):
                result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED
                results.append(result)
                continue
            try:
                await topic_creation.create_partitions(ctx.services, topic.name, topic.count, assignments,
                                                       validate_only=request.validate_only)
            except Exception as exc:
                result.error_code, result.error_message = _failure(exc)
        results.append(result)
    return results
