"""Admin operations over the wire: topics, partitions, configs, offsets and API versions.

Results are small frozen dataclasses. Operations over several topics report per-topic errors in
their results (one bad topic does not hide the others); single-answer lookups raise
:class:`ResponseError`.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from pybroker.client.cluster import BrokerNode, KafkaClient
from pybroker.client.errors import ResponseError, check
from pybroker.client.versions import VersionRange
from pybroker.common.topic import INTERNAL_TOPICS, ZERO_UUID, TopicPartition
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SET_CONFIG = 0
DELETE_CONFIG = 1
DEFAULT_CONFIG_SOURCE = 5
DEFAULT_FROM_BROKER = -1
# Kafka's CreateTopics accepts -1 for "broker default" partitions/replication factor from v4 (KIP-464).
MIN_CREATE_TOPICS_VERSION_FOR_DEFAULTS = 4
MIN_LIST_OFFSETS_VERSION = 1  # v0 answers with a list of "old style" offsets


class OffsetSpec:
    """Special ListOffsets timestamps; any other non-negative value looks up by timestamp (ms)."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = DEFAULT_FROM_BROKER
    replication_factor: int = DEFAULT_FROM_BROKER
    #: partition -> replica broker ids; when given, partitions and replication factor must be defaults
    replica_assignment: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicResult:
    """Outcome of one topic of a multi-topic operation."""

    name: str
    error: ResponseError | None = None
    topic_id: uuid.UUID = ZERO_UUID

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    is_default: bool
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int
    timestamp: int = -1
    leader_epoch: int = -1
    error: ResponseError | None = None


@dataclass(frozen=True, slots=True)
class DeletedRecords:
    """A partition's DeleteRecords outcome: its low watermark (first offset kept) or the error."""

    low_watermark: int
    error: ResponseError | None = None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A partition being moved: its current replica set and the replicas coming and going."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


class AdminClient:
    """Kafka's AdminClient operations that the command-line tools need."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        """Sorted topic names, from an all-topics Metadata answer (which lists internal topics)."""
        names = {t.name for t in (await self.client.metadata(None)).topics if t.error_code == 0 and t.name}
        if not include_internal:
            names -= INTERNAL_TOPICS
        return sorted(names)

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISRs per topic; ResponseError for the first unknown topic."""
        if not names:
            return {}
        response = await self.client.metadata(list(names))
        described = {}
        for topic in response.topics:
            check(topic.error_code, f"Topic '{topic.name}' does not exist"
                  if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None)
            partitions = tuple(sorted(
                (PartitionInfo(p.partition_index, p.leader_id if p.leader_id >= 0 else None,
                               tuple(p.replica_nodes), tuple(p.isr_nodes), tuple(p.offline_replicas))
                 for p in topic.partitions), key=lambda p: p.partition))
            described[topic.name or ""] = TopicDescription(topic.name or "", topic.topic_id, topic.is_internal,
                                                           partitions)
        return described

    async def describe_cluster(self) -> list[BrokerNode]:
        await self.client.metadata([])
        return sorted(self.client.brokers.values(), key=lambda b: b.node_id)

    async def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool = False,
                            timeout_ms: int = 30000) -> dict[str, TopicResult]:
        uses_defaults = any(t.replica_assignment is None and DEFAULT_FROM_BROKER in
                            (t.num_partitions, t.replication_factor) for t in topics)
        request = CreateTopicsRequest(topics=[_creatable(t) for t in topics], timeout_ms=timeout_ms,
                                      validate_only=validate_only)
        connection = await self.client.controller()
        response = await connection.send(
            request, CreateTopicsResponse,
            min_version=MIN_CREATE_TOPICS_VERSION_FOR_DEFAULTS if uses_defaults else 0)
        return {r.name: TopicResult(r.name, _error(r.error_code, r.error_message), r.topic_id)
                for r in response.topics}

    async def delete_topics(self, names: Sequence[str], *, timeout_ms: int = 30000) -> dict[str, TopicResult]:
        request = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                                      topic_names=list(names), timeout_ms=timeout_ms)
        connection = await self.client.controller()
        response = await connection.send(request, DeleteTopicsResponse)
        return {r.name or "": TopicResult(r.name or "", _error(r.error_code, r.error_message), r.topic_id)
                for r in response.responses}

    async def create_partitions(self, new_counts: Mapping[str, int], *,
                                assignments: Mapping[str, Sequence[Sequence[int]]] | None = None,
                                validate_only: bool = False, timeout_ms: int = 30000) -> dict[str, TopicResult]:
        """Grow topics to ``new_counts`` partitions; ``assignments`` gives the replicas of the new ones."""
        chosen = assignments or {}
        request = CreatePartitionsRequest(
            topics=[CreatePartitionsRequest.CreatePartitionsTopic(
                name=name, count=count,
                assignments=None if name not in chosen else
                [CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=list(r)) for r in chosen[name]])
                for name, count in new_counts.items()],
            timeout_ms=timeout_ms, validate_only=validate_only)
        connection = await self.client.controller()
        response = await connection.send(request, CreatePartitionsResponse)
        return {r.name: TopicResult(r.name, _error(r.error_code, r.error_message)) for r in response.results}

    async def describe_topic_configs(self, names: Sequence[str]) -> dict[str, list[ConfigEntry]]:
        """Every config of each topic with its source; ResponseError for the first topic that fails."""
        return await self.describe_configs(TOPIC_RESOURCE, names)

    async def describe_configs(self, resource_type: int, names: Sequence[str], *,
                               include_synonyms: bool = False) -> dict[str, list[ConfigEntry]]:
        """Configs of topics or brokers (``names`` are broker ids then) with their sources; ResponseError for
        the first resource that fails. Broker resources are asked of that broker, as Kafka's AdminClient does."""
        targets: dict[int | None, list[str]] = defaultdict(list)  # broker id, or None for any broker
        for name in names:
            targets[int(name) if resource_type == BROKER_RESOURCE and name.isdigit() else None].append(name)
        configs: dict[str, list[ConfigEntry]] = {}
        for target, target_names in targets.items():
            request = DescribeConfigsRequest(
                resources=[DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=resource_type, resource_name=n, configuration_keys=None) for n in target_names],
                include_synonyms=include_synonyms)
            connection = await (self.client.connect() if target is None else self.client.node(target))
            response = await connection.send(request, DescribeConfigsResponse)
            for result in response.results:
                check(result.error_code, result.error_message)
                configs[result.resource_name] = [
                    ConfigEntry(c.name, c.value, c.config_source,
                                c.config_source == DEFAULT_CONFIG_SOURCE,
                                c.read_only, c.is_sensitive,
                                tuple(ConfigSynonym(s.name, s.value, s.source) for s in c.synonyms or ()))
                    for c in result.configs]
        return configs

    async def incremental_alter_configs(self, resource_type: int, name: str, *, set_configs: Mapping[str, str],
                                        delete_configs: Sequence[str]) -> None:
        """Set and delete config overrides of one topic or broker; ResponseError when the broker refuses."""
        operations = [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=SET_CONFIG, value=v)
                      for k, v in set_configs.items()]
        operations += [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=DELETE_CONFIG,
                                                                       value=None) for k in delete_configs]
        request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=resource_type, resource_name=name, configs=operations)])
        connection = await (self.client.node(int(name)) if resource_type == BROKER_RESOURCE and name.isdigit()
                            else self.client.controller())
        response = await connection.send(request, IncrementalAlterConfigsResponse)
        for result in response.responses:
            check(result.error_code, result.error_message)

    async def list_offsets(self, specs: Mapping[TopicPartition, int], *,
                           isolation_level: int = 0) -> dict[TopicPartition, ListedOffset]:
        """Offsets per partition for an :class:`OffsetSpec` value or a timestamp, asked of each leader."""
        described = await self.describe_topics(sorted({tp.topic for tp in specs}))
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        results: dict[TopicPartition, ListedOffset] = {}
        for tp in specs:
            info = {p.partition: p for p in described[tp.topic].partitions}.get(tp.partition)
            if info is None:
                results[tp] = ListedOffset(-1, error=ResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            elif info.leader is None:
                results[tp] = ListedOffset(-1, error=ResponseError(ErrorCode.LEADER_NOT_AVAILABLE))
            else:
                by_leader[info.leader].append(tp)
        for leader, partitions in by_leader.items():
            results.update(await self._list_offsets_at(leader, partitions, specs, isolation_level))
        return results

    async def _list_offsets_at(self, leader: int, partitions: list[TopicPartition], specs: Mapping[TopicPartition, int],
                               isolation_level: int) -> dict[TopicPartition, ListedOffset]:
        by_topic: dict[str, list[ListOffsetsRequest.ListOffsetsPartition]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(ListOffsetsRequest.ListOffsetsPartition(partition_index=tp.partition,
                                                                             timestamp=specs[tp]))
        request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=name, partitions=parts) for name, parts in by_topic.items()])
        connection = await self.client.node(leader)
        response = await connection.send(request, ListOffsetsResponse, min_version=MIN_LIST_OFFSETS_VERSION)
        return {TopicPartition(t.name, p.partition_index):
                ListedOffset(p.offset, p.timestamp, p.leader_epoch, _error(p.error_code))
                for t in response.topics for p in t.partitions}

    async def delete_records(self, before: Mapping[TopicPartition, int], *,
                             timeout_ms: int = 30000) -> dict[TopicPartition, DeletedRecords]:
        """Delete each partition's records before an offset (-1: the high watermark), asked of its leader."""
        response = await self.client.metadata(sorted({tp.topic for tp in before}))
        leaders = {(t.name, p.partition_index): p.leader_id for t in response.topics if t.error_code == 0
                   for p in t.partitions}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        results: dict[TopicPartition, DeletedRecords] = {}
        for tp in before:
            leader = leaders.get((tp.topic, tp.partition))
            if leader is None:
                results[tp] = DeletedRecords(-1, ResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            elif leader < 0:
                results[tp] = DeletedRecords(-1, ResponseError(ErrorCode.LEADER_NOT_AVAILABLE))
            else:
                by_leader[leader].append(tp)
        for leader, partitions in by_leader.items():
            by_topic: dict[str, list[DeleteRecordsRequest.DeleteRecordsPartition]] = defaultdict(list)
            for tp in partitions:
                by_topic[tp.topic].append(DeleteRecordsRequest.DeleteRecordsPartition(
                    partition_index=tp.partition, offset=before[tp]))
            request = DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[
                DeleteRecordsRequest.DeleteRecordsTopic(name=t, partitions=p) for t, p in by_topic.items()])
            answer = await (await self.client.node(leader)).send(request, DeleteRecordsResponse)
            results.update({TopicPartition(t.name, p.partition_index): DeletedRecords(
                p.low_watermark, _error(p.error_code)) for t in answer.topics for p in t.partitions})
        return results

    async def elect_leaders(self, election_type: int, partitions: Sequence[TopicPartition] | None, *,
                            timeout_ms: int = 30000) -> dict[TopicPartition, ResponseError | None]:
        """Preferred (0) or unclean (1) leader election, on every partition when ``partitions`` is None."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions or ():
            by_topic[tp.topic].append(tp.partition)
        request = ElectLeadersRequest(election_type=election_type, timeout_ms=timeout_ms, topic_partitions=None
                                      if partitions is None else [ElectLeadersRequest.TopicPartitions(
                                          topic=t, partitions=p) for t, p in by_topic.items()])
        response = await (await self.client.controller()).send(request, ElectLeadersResponse, min_version=1)
        check(response.error_code)
        return {TopicPartition(r.topic, p.partition_id): _error(p.error_code, p.error_message)
                for r in response.replica_election_results for p in r.partition_result}

    async def alter_partition_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None], *,
                                            timeout_ms: int = 30000) -> dict[TopicPartition, ResponseError | None]:
        """Move partitions to new replicas (None cancels a partition's ongoing move)."""
        by_topic: dict[str, list[AlterPartitionReassignmentsRequest.ReassignablePartition]] = defaultdict(list)
        for tp, replicas in targets.items():
            by_topic[tp.topic].append(AlterPartitionReassignmentsRequest.ReassignablePartition(
                partition_index=tp.partition, replicas=None if replicas is None else list(replicas)))
        request = AlterPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=t, partitions=p) for t, p in by_topic.items()])
        response = await (await self.client.controller()).send(request, AlterPartitionReassignmentsResponse)
        check(response.error_code, response.error_message)
        return {TopicPartition(t.name, p.partition_index): _error(p.error_code, p.error_message)
                for t in response.responses for p in t.partitions}

    async def list_partition_reassignments(self, partitions: Sequence[TopicPartition] | None = None, *,
                                           timeout_ms: int = 30000) -> dict[TopicPartition, OngoingReassignment]:
        """The reassignments in progress (of ``partitions`` only, when given)."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions or ():
            by_topic[tp.topic].append(tp.partition)
        request = ListPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=None if partitions is None else [
            ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(name=t, partition_indexes=p)
            for t, p in by_topic.items()])
        response = await (await self.client.controller()).send(request, ListPartitionReassignmentsResponse)
        check(response.error_code, response.error_message)
        return {TopicPartition(t.name, p.partition_index): OngoingReassignment(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in response.topics for p in t.partitions}

    async def api_versions(self) -> dict[BrokerNode, dict[int, VersionRange]]:
        """What every broker of the cluster advertises, by broker."""
        advertised = {}
        for broker in await self.describe_cluster():
            connection = await self.client.node(broker.node_id)
            advertised[broker] = dict(connection.versions.broker)
        return advertised


def _creatable(topic: NewTopic) -> CreateTopicsRequest.CreatableTopic:
    assignments = [CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=list(replicas))
                   for p, replicas in sorted((topic.replica_assignment or {}).items())]
    return CreateTopicsRequest.CreatableTopic(
        name=topic.name, num_partitions=DEFAULT_FROM_BROKER if assignments else topic.num_partitions,
        replication_factor=DEFAULT_FROM_BROKER if assignments else topic.replication_factor,
        assignments=assignments,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in topic.configs.items()])


def _error(code: int, message: str | None = None) -> ResponseError | None:
    return None if code == ErrorCode.NONE else ResponseError(code, message)
