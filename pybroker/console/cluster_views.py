"""What the console's cluster, topic and group pages show, gathered over the wire with pybroker.client."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from pybroker.client.group_offsets import OffsetRow, offset_rows
from pybroker.client import AdminClient, KafkaClient, KafkaClientError, OffsetSpec, UnsupportedVersionError
from pybroker.client.groups import GroupAdmin, GroupDescription, ListedGroup
from pybroker.client.log_dirs_admin import LogDirDescription, describe_log_dirs
from pybroker.client.share_groups import SHARE, ShareGroupAdmin
from pybroker.client.share_offsets import share_group_offsets
from pybroker.client.versions import api_name
from pybroker.common.topic import TopicPartition

# The groups page asks each group's coordinator about this many groups at once (pipelined on the
# connections), instead of one round trip after another.
GROUP_QUERIES_IN_FLIGHT = 32
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' config_source for a topic's own override


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(slots=True)
class BrokerRow:
    node_id: int
    address: str
    rack: str | None
    controller: bool
    partitions: int = 0
    leaders: int = 0
    log_dirs: list[LogDirDescription] = field(default_factory=list)
    log_dirs_note: str | None = None  # why no log dirs are shown
    api_versions: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass(slots=True)
class Overview:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerRow]
    topic_count: int
    partition_count: int
    under_replicated: list[PartitionState]
    offline: list[PartitionState]


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    partitions: int
    replication_factor: int
    internal: bool
    size: int | None  # bytes of one copy of each partition; None when the brokers do not say


async def partition_states(client: KafkaClient) -> tuple[list[PartitionState], set[str]]:
    """Every partition of every topic from one Metadata answer, and the names of internal topics."""
    response = await client.metadata(None)
    states: list[PartitionState] = []
    internal: set[str] = set()
    for topic in response.topics:
        if topic.error_code or not topic.name:
            continue
        if topic.is_internal:
            internal.add(topic.name)
        states.extend(PartitionState(topic.name, p.partition_index, p.leader_id if p.leader_id >= 0 else None,
                                     tuple(p.replica_nodes), tuple(p.isr_nodes)) for p in topic.partitions)
    return states, internal


async def log_dirs_by_broker(client: KafkaClient) -> dict[int, list[LogDirDescription] | str]:
    """Each broker's log dirs, or the reason it could not say (e.g. DescribeLogDirs unsupported)."""
    found: dict[int, list[LogDirDescription] | str] = {}
    for node_id in sorted(client.brokers):
        try:
            found[node_id] = (await describe_log_dirs(client, [node_id]))[node_id]
        except UnsupportedVersionError:
            found[node_id] = "the broker does not support DescribeLogDirs"
        except KafkaClientError as exc:
            if isinstance(exc, (ConnectionError, TimeoutError)):
                raise
            found[node_id] = str(exc)
    return found


async def overview(client: KafkaClient) -> Overview:
    states, _ = await partition_states(client)
    brokers = {node_id: BrokerRow(node_id, f"{b.host}:{b.port}", b.rack, node_id == client.controller_id)
               for node_id, b in sorted(client.brokers.items())}
    for state in states:
        for replica in state.replicas:
            if replica in brokers:
                brokers[replica].partitions += 1
        if state.leader in brokers:
            brokers[state.leader].leaders += 1
    for node_id, dirs in (await log_dirs_by_broker(client)).items():
        if isinstance(dirs, str):
            brokers[node_id].log_dirs_note = dirs
        else:
            brokers[node_id].log_dirs = dirs
    for node_id, row in brokers.items():
        versions = (await client.node(node_id)).versions.broker
        row.api_versions = [(api_name(key), r.min, r.max) for key, r in sorted(versions.items())]
    return Overview(client.cluster_id, client.controller_id, list(brokers.values()), len({s.topic for s in states}),
                    len(states), [s for s in states if s.leader is not None and len(s.isr) < len(s.replicas)],
                    [s for s in states if s.leader is None])


async def topic_rows(client: KafkaClient) -> list[TopicRow]:
    states, internal = await partition_states(client)
    sizes: dict[TopicPartition, int] = {}
    for dirs in (await log_dirs_by_broker(client)).values():
        for log_dir in dirs if not isinstance(dirs, str) else ():
            for tp, replica in log_dir.replicas.items():
                if not replica.is_future:
                    sizes[tp] = max(replica.size, sizes.get(tp, 0))
    by_topic: dict[str, list[PartitionState]] = defaultdict(list)
    for state in states:
        by_topic[state.topic].append(state)
    rows = []
    for name, partitions in sorted(by_topic.items()):
        known = [TopicPartition(name, p.partition) for p in partitions if TopicPartition(name, p.partition) in sizes]
        rows.append(TopicRow(name, len(partitions), max((len(p.replicas) for p in partitions), default=0),
                             name in internal, sum(sizes[tp] for tp in known) if known else None))
    return rows


@dataclass(frozen=True, slots=True)
class PartitionRow:
    state: PartitionState
    log_start: int | None
    log_end: int | None


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str | None
    overridden: bool
    source: int
    read_only: bool
    sensitive: bool


@dataclass(frozen=True, slots=True)
class TopicDetail:
    name: str
    topic_id: str
    internal: bool
    partitions: list[PartitionRow]
    configs: list[ConfigRow]


async def topic_detail(client: KafkaClient, name: str) -> TopicDetail:
    """ResponseError when the topic does not exist."""
    admin = AdminClient(client)
    described = (await admin.describe_topics([name]))[name]
    tps = [TopicPartition(name, p.partition) for p in described.partitions]
    earliest = await admin.list_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
    latest = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps})
    rows = [PartitionRow(PartitionState(name, p.partition, p.leader, p.replicas, p.isr),
                         _offset(earliest, TopicPartition(name, p.partition)),
                         _offset(latest, TopicPartition(name, p.partition))) for p in described.partitions]
    configs = (await admin.describe_topic_configs([name])).get(name, [])
    return TopicDetail(name, str(described.topic_id), described.is_internal, rows, sorted(
        (ConfigRow(c.name, c.value, c.source == DYNAMIC_TOPIC_CONFIG, c.source, c.read_only, c.is_sensitive)
         for c in configs), key=lambda c: (not c.overridden, c.name)))


def _offset(listed: dict, tp: TopicPartition) -> int | None:
    found = listed.get(tp)
    return None if found is None or found.error is not None else found.offset


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    state: str
    group_type: str  # "classic", "consumer" (KIP-848) or "share" (KIP-932); empty before ListGroups v5
    protocol_type: str
    members: int
    total_lag: int | None


async def group_rows(client: KafkaClient) -> list[GroupRow]:
    """Every group with its members and total lag: log end minus committed over committed partitions, or for a
    share group the lag DescribeShareGroupOffsets reports (None where its coordinator does not serve it)."""
    groups = GroupAdmin(client)
    listed = await groups.list_groups()
    limit = asyncio.Semaphore(GROUP_QUERIES_IN_FLIGHT)

    async def describe(group_id: str) -> tuple[GroupDescription, dict[TopicPartition, int]]:
        async with limit:
            return await groups.describe_group(group_id), await groups.committed_offsets(group_id)

    async def describe_share(group: ListedGroup) -> GroupRow:
        async with limit:
            description = await ShareGroupAdmin(groups).describe(group.group_id)
            offsets = await share_group_offsets(groups, group.group_id)
        lags = [found.lag for found in (offsets or {}).values() if found.lag is not None]
        return GroupRow(group.group_id, description.state, SHARE, group.protocol_type or SHARE,
                        len(description.members), sum(lags) if lags else None)

    share = [group for group in listed if group.group_type == SHARE]
    others = [group for group in listed if group.group_type != SHARE]
    share_rows, answers = await asyncio.gather(asyncio.gather(*(describe_share(group) for group in share)),
                                               asyncio.gather(*(describe(group.group_id) for group in others)))
    described = {group.group_id: answer[0] for group, answer in zip(others, answers)}
    committed = {group.group_id: answer[1] for group, answer in zip(others, answers)}
    ends = await log_end_offsets(client, {tp for offsets in committed.values() for tp in offsets})
    rows = {row.group_id: row for row in share_rows}
    for group in others:
        description = described[group.group_id]
        lags = [max(ends[tp] - offset, 0) for tp, offset in committed[group.group_id].items() if tp in ends]
        rows[group.group_id] = GroupRow(group.group_id, description.state, group.group_type,
                                        group.protocol_type or description.protocol_type, len(description.members),
                                        sum(lags) if lags else None)
    return [rows[group.group_id] for group in listed]


async def log_end_offsets(client: KafkaClient, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
    """Log end offsets of the partitions that still exist (deleted topics are left out)."""
    if not partitions:
        return {}
    admin = AdminClient(client)
    existing = set(await admin.list_topics(include_internal=True))
    specs = {tp: OffsetSpec.LATEST for tp in partitions if tp.topic in existing}
    listed = await admin.list_offsets(specs) if specs else {}
    return {tp: found.offset for tp, found in listed.items() if found.error is None}


@dataclass(frozen=True, slots=True)
class GroupDetail:
    description: GroupDescription
    rows: list[OffsetRow]

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.rows)


async def group_detail(client: KafkaClient, group_id: str) -> GroupDetail:
    groups = GroupAdmin(client)
    description = await groups.describe_group(group_id)
    return GroupDetail(description, await offset_rows(client, groups, description))
