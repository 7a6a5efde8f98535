"""Committed offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47).

Partitions of topics this cluster does not have are answered UNKNOWN_TOPIC_OR_PARTITION here,
as Kafka's request layer does, and never reach the coordinator. OffsetFetch with require_stable
(v7+, KIP-447) answers UNSTABLE_OFFSET_COMMIT for a partition while a transaction that commits
its offset is still open, or an OffsetCommit of it is not replicated yet, so a new consumer does not
start from an offset about to change. A refused OffsetFetch v0-1, whose answer has no top-level
error code, carries the error on every partition asked for, as Kafka's does. From v10 both name topics by id
(KIP-848): ids are turned into names on the way in (an id no topic has is UNKNOWN_TOPIC_ID) and back on the way out
(a topic with committed offsets that no longer exists is left out of an all-topics OffsetFetch: it has no id).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize
from pybroker.server.context import RequestContext
from pybroker.server.handlers.groups import coordinate
from pybroker.server.registry import api

FIRST_BATCHED_FETCH_VERSION = 8
FIRST_TOPIC_ID_VERSION = 10
FIRST_TOP_LEVEL_ERROR_VERSION = 2
NO_OFFSET = -1


def _known_topics(ctx: RequestContext, topics: list[Any]) -> list[Any]:
    """The request's topics, keeping only partitions that exist."""
    kept = []
    for topic in topics:
        info = ctx.services.metadata.topic(topic.name)
        partitions = [p for p in topic.partitions if info is not None and p.partition_index in info.partitions]
        if partitions:
            kept.append(dataclasses.replace(topic, partitions=partitions))
    return kept


def _merge(requested: list[Any], answered: list[Any], topic_cls: Any, partition_cls: Any,
           refused: frozenset[str] | set[str] = frozenset()) -> list[Any]:
    """Answers in request order; partitions the coordinator never saw are unknown, those of
    ``refused`` topics TOPIC_AUTHORIZATION_FAILED."""
    codes = {(t.name, p.partition_index): p.error_code for t in answered for p in t.partitions}
    return [topic_cls(name=t.name, partitions=[partition_cls(
        partition_index=p.partition_index,
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if t.name in refused else
        codes.get((t.name, p.partition_index), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        for p in t.partitions]) for t in requested]


def _named(ctx: RequestContext, topics: list[Any]) -> tuple[list[Any], list[Any]]:
    """v10+: (the topics whose id is known, with their name filled in; those whose id no topic has)."""
    if ctx.api_version < FIRST_TOPIC_ID_VERSION:
        return topics, []
    known, unknown = [], []
    for topic in topics:
        info = ctx.services.metadata.topic_by_id(topic.topic_id)
        if info is None:
            unknown.append(topic)
        else:
            known.append(dataclasses.replace(topic, name=info.name))
    return known, unknown


def _with_ids(ctx: RequestContext, topics: list[Any]) -> list[Any]:
    """v10+: answered topics with their id (those without one, deleted since, left out)."""
    if ctx.api_version < FIRST_TOPIC_ID_VERSION:
        return topics
    named = [(topic, ctx.services.metadata.topic(topic.name)) for topic in topics]
    return [dataclasses.replace(topic, topic_id=info.topic_id) for topic, info in named if info is not None]


@api(ApiKey.OFFSET_COMMIT, 2, 10)
async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    topics, unknown_ids = _named(ctx, request.topics)
    response = await _offset_commit(ctx, dataclasses.replace(request, topics=topics))
    for topic, answered in zip(topics, response.topics):
        answered.topic_id = topic.topic_id
    response.topics += [OffsetCommitResponse.OffsetCommitResponseTopic(topic_id=t.topic_id, partitions=[
        OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                           error_code=ErrorCode.UNKNOWN_TOPIC_ID)
        for p in t.partitions]) for t in unknown_ids]
    return response


async def _offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    # Kafka's checks: Read on the group (else every partition GROUP_AUTHORIZATION_FAILED), Read on each topic.
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return OffsetCommitResponse(topics=[OffsetCommitResponse.OffsetCommitResponseTopic(
            name=t.name, partitions=[OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
                for p in t.partitions]) for t in request.topics])
    allowed = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    refused = {t.name for t in request.topics} - allowed
    known_topics = _known_topics(ctx, [t for t in request.topics if t.name in allowed])
    known_request = dataclasses.replace(request, topics=known_topics)
    coordinator = ctx.services.groups.coordinator

    def failed(code: ErrorCode) -> OffsetCommitResponse:
        return OffsetCommitResponse(topics=[OffsetCommitResponse.OffsetCommitResponseTopic(
            name=t.name, partitions=[OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=code) for p in t.partitions]) for t in known_topics])

    answered: OffsetCommitResponse = await coordinate(
        ctx, [request.group_id], lambda waiter, now: coordinator.commit_offsets(waiter, known_request, now), failed)
    return OffsetCommitResponse(topics=_merge(request.topics, answered.topics,
                                              OffsetCommitResponse.OffsetCommitResponseTopic,
                                              OffsetCommitResponse.OffsetCommitResponsePartition, refused))


@api(ApiKey.OFFSET_FETCH, 1, 10)
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    service = ctx.services.groups
    await service.topic.ensure()  # not led yet: NOT_COORDINATOR below, as Kafka's
    coordinator = service.coordinator
    # Kafka's checks: Describe on each group (GROUP_AUTHORIZATION_FAILED), Describe on each topic (its
    # partitions TOPIC_AUTHORIZATION_FAILED; left out when all topics are asked for).
    if ctx.api_version >= FIRST_BATCHED_FETCH_VERSION:
        allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in request.groups))
        return OffsetFetchResponse(groups=[OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=group.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            if group.group_id not in allowed else
            _fetched_group(ctx, coordinator, group, request.require_stable)
            if service.owns(group.group_id) else
            OffsetFetchResponse.OffsetFetchResponseGroup(group_id=group.group_id,
                                                         error_code=service.not_owned_error(group.group_id))
            for group in request.groups])
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        return _refused(ctx, request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not service.owns(request.group_id):
        return _refused(ctx, request, service.not_owned_error(request.group_id))
    return OffsetFetchResponse(error_code=0, topics=_describable(ctx, request.topics is None, _fetched(
        coordinator, request.group_id, request.topics, OffsetFetchResponse.OffsetFetchResponseTopic,
        OffsetFetchResponse.OffsetFetchResponsePartition, request.require_stable)))


def _fetched_group(ctx: RequestContext, coordinator: GroupCoordinator,
                   group: OffsetFetchRequest.OffsetFetchRequestGroup,
                   require_stable: bool) -> OffsetFetchResponse.OffsetFetchResponseGroup:
    """One owned group of a batched OffsetFetch: its member checked first (v9+, KIP-848), which fails
    the whole group as Kafka does."""
    error = coordinator.validate_offset_fetch(group.group_id, group.member_id, group.member_epoch)
    if error:
        return OffsetFetchResponse.OffsetFetchResponseGroup(group_id=group.group_id, error_code=error)
    return OffsetFetchResponse.OffsetFetchResponseGroup(
        group_id=group.group_id, topics=_fetched_by_id(ctx, coordinator, group, require_stable))


def _fetched_by_id(ctx: RequestContext, coordinator: GroupCoordinator,
                   group: OffsetFetchRequest.OffsetFetchRequestGroup,
                   require_stable: bool) -> list[OffsetFetchResponse.OffsetFetchResponseTopics]:
    """One group of a batched OffsetFetch (v8+), its topics named by id from v10."""
    topics, unknown_ids = (None, []) if group.topics is None else _named(ctx, group.topics)
    fetched = _describable(ctx, group.topics is None, _fetched(
        coordinator, group.group_id, topics, OffsetFetchResponse.OffsetFetchResponseTopics,
        OffsetFetchResponse.OffsetFetchResponsePartitions, require_stable))
    return _with_ids(ctx, fetched) + [OffsetFetchResponse.OffsetFetchResponseTopics(topic_id=t.topic_id, partitions=[
        OffsetFetchResponse.OffsetFetchResponsePartitions(partition_index=index, committed_offset=NO_OFFSET,
                                                          committed_leader_epoch=-1, metadata="",
                                                          error_code=ErrorCode.UNKNOWN_TOPIC_ID)
        for index in t.partition_indexes]) for t in unknown_ids]


def _refused(ctx: RequestContext, request: OffsetFetchRequest, code: ErrorCode) -> OffsetFetchResponse:
    """Kafka's OffsetFetchRequest.getErrorResponse: v0-1 have no top-level error code, so every
    partition asked for carries it (no offset, no metadata)."""
    if ctx.api_version >= FIRST_TOP_LEVEL_ERROR_VERSION:
        return OffsetFetchResponse(error_code=code)
    return OffsetFetchResponse(topics=[OffsetFetchResponse.OffsetFetchResponseTopic(name=topic.name, partitions=[
        OffsetFetchResponse.OffsetFetchResponsePartition(partition_index=index, committed_offset=NO_OFFSET,
                                                         committed_leader_epoch=-1, metadata="", error_code=code)
        for index in topic.partition_indexes]) for topic in request.topics or ()])


def _describable(ctx: RequestContext, all_topics: bool, fetched: list[Any]) -> list[Any]:
    """Kafka's topic Describe check of OffsetFetch: topics the principal may not Describe are left out
    of an all-topics answer, and named ones answer TOPIC_AUTHORIZATION_FAILED with no offset."""
    allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in fetched))
    if all_topics:
        return [t for t in fetched if t.name in allowed]
    for topic in fetched:
        if topic.name not in allowed:
            topic.partitions = [dataclasses.replace(p, committed_offset=NO_OFFSET, committed_leader_epoch=-1,
                                                    metadata="", error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                for p in topic.partitions]
    return fetched


def _fetched(coordinator: GroupCoordinator, group_id: str, topics: list[Any] | None, topic_cls: Any,
             partition_cls: Any, require_stable: bool) -> list[Any]:
    """Committed offsets as OffsetFetch reports them: -1 and empty metadata where nothing is committed."""
    wanted = None if topics is None else [(t.name, t.partition_indexes) for t in topics]
    pending = coordinator.pending_partitions(group_id) if require_stable else set()
    return [topic_cls(name=topic, partitions=[
        partition_cls(partition_index=index, committed_offset=NO_OFFSET, committed_leader_epoch=-1, metadata="",
                      error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT) if (topic, index) in pending else
        partition_cls(partition_index=index, committed_offset=c.offset if c else NO_OFFSET,
                      committed_leader_epoch=c.leader_epoch if c else -1, metadata=c.metadata if c else "")
        for index, c in partitions]) for topic, partitions in coordinator.fetch_offsets(group_id, wanted)]


@api(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    # Kafka's checks: Delete on the group (else the whole answer GROUP_AUTHORIZATION_FAILED), Read on each topic.
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    allowed = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    refused = {t.name for t in request.topics} - allowed
    known_topics = _known_topics(ctx, [t for t in request.topics if t.name in allowed])
    known_request = dataclasses.replace(request, topics=known_topics)
    coordinator = ctx.services.groups.coordinator
    answered: OffsetDeleteResponse = await coordinate(
        ctx, [request.group_id], lambda waiter, now: coordinator.delete_offsets(waiter, known_request, now),
        lambda code: OffsetDeleteResponse(error_code=code))
    if answered.error_code:
        return answered
    return OffsetDeleteResponse(error_code=0, topics=_merge(request.topics, answered.topics,
                                                            OffsetDeleteResponse.OffsetDeleteResponseTopic,
                                                            OffsetDeleteResponse.OffsetDeleteResponsePartition,
                                                            refused))
