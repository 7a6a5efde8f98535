"""`pybroker topics`: kafka-topics.sh's verbs, flags and output lines, over the wire.

Output follows Kafka's TopicCommand line for line, so scripts written for kafka-topics.sh can parse
it; failures print `Error while executing topic command : <message>` and exit 1 as it does.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from pybroker.admin.retry import call_with_retries, raise_controller_moved
from pybroker.admin.options import topic_filter
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_tool,
)
from pybroker.admin.zk_topics import ZkTopicAdmin, run_zk_admin
from pybroker.client import AdminClient, ConfigEntry, NewTopic, PartitionInfo, TopicDescription, TopicResult
from pybroker.common.topic import ZERO_UUID, topic_id_to_string
from pybroker.protocol.error_codes import ErrorCode

ERROR_PREFIX = "Error while executing topic command : "
ACTIONS = ("create", "list", "describe", "alter", "delete")
MAX_REPLICATION_FACTOR = 32767
MIN_ISR_CONFIG = "min.insync.replicas"
COLLISION_WARNING = ("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                     "could collide. To avoid issues it is best to use either, but not both.")
REPORT_OPTIONS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
                  "at_min_isr_partitions", "topics_with_overrides")

# Which actions each option may be combined with (Kafka's TopicCommandOptions.checkArgs).
ALLOWED_WITH: dict[str, tuple[str, ...]] = {
    "partitions": ("create", "alter"),
    "replication_factor": ("create",),
    "replica_assignment": ("create", "alter"),
    "config": ("create",),
    "if_not_exists": ("create",),
    "if_exists": ("alter", "delete", "describe"),
    "exclude_internal": ("list", "describe"),
    **{option: ("describe",) for option in REPORT_OPTIONS},
}


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker topics", description="Create, delete, describe, or change a topic.")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--create", action="store_true", help="create a new topic")
    actions.add_argument("--list", action="store_true", help="list all available topics")
    actions.add_argument("--describe", action="store_true", help="list details for the given topics")
    actions.add_argument("--alter", action="store_true", help="alter the number of partitions of a topic")
    actions.add_argument("--delete", action="store_true", help="delete a topic")
    add_connection_arguments(parser)
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                        help="work on a ZooKeeper-mode cluster's znodes directly, as kafka-topics.sh did before "
                             "--bootstrap-server (instead of --bootstrap-server)")
    parser.add_argument("--topic", metavar="TOPIC",
                        help="the topic to create, alter, describe or delete; except with --create it is a regular "
                             "expression (',' separates alternatives)")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="partitions of the topic being created, or its new count with --alter")
    parser.add_argument("--replication-factor", type=int, metavar="R",
                        help="replication factor of each partition of the topic being created")
    parser.add_argument("--replica-assignment", metavar="B0:B1,B0:B1,...",
                        help="manual partition-to-broker assignment: broker ids of each partition's replicas, "
                             "partitions separated by ','")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic config override for the topic being created (repeatable)")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="with --create: do nothing if the topic already exists")
    parser.add_argument("--if-exists", action="store_true",
                        help="with --alter, --delete or --describe: do nothing if the topic does not exist")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="leave internal topics out of --list and --describe")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than their replica set")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="with --describe: only partitions without a live leader")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is below min.insync.replicas")
    parser.add_argument("--at-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR equals min.insync.replicas")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only topics with non-default configs, without partitions")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-topics", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    action = check_arguments(args)
    new_topic = parse_new_topic(args) if action in ("create", "alter") else None
    if settings.zookeeper is not None:
        run_zk_admin(settings, lambda admin: COMMANDS[action](admin, args, new_topic))  # type: ignore[arg-type]
    else:
        run_admin(settings, lambda admin: COMMANDS[action](admin, args, new_topic))


def check_arguments(args: argparse.Namespace) -> str:
    """The chosen action; UsageError for missing or conflicting options."""
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = chosen[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise UsageError(f'Missing required argument "[topic]" for --{action}')
    if action == "alter" and args.partitions is None:
        raise UsageError('Missing required argument "[partitions]" for --alter '
                         "(topic configs are changed with the configs tool)")
    for option, actions in ALLOWED_WITH.items():
        value = getattr(args, option)
        if value and action not in actions:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} can't be used with --{action}")
    reports = [o for o in REPORT_OPTIONS if getattr(args, o)]
    if len(reports) > 1:
        raise UsageError(f"--{reports[0].replace('_', '-')} can't be used with --{reports[1].replace('_', '-')}")
    if args.replica_assignment and (args.partitions is not None and action == "create"
                                    or args.replication_factor is not None):
        raise UsageError("--replica-assignment can't be used with --partitions or --replication-factor")
    return action


def parse_new_topic(args: argparse.Namespace) -> NewTopic:
    """The topic --create (or --alter) describes, checked as kafka-topics.sh checks it before asking the broker."""
    if args.replication_factor is not None and not 1 <= args.replication_factor <= MAX_REPLICATION_FACTOR:
        raise CommandError(f"The replication factor must be between 1 and {MAX_REPLICATION_FACTOR} inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise CommandError("The partitions must be greater than 0")
    return NewTopic(args.topic, -1 if args.partitions is None else args.partitions,
                    -1 if args.replication_factor is None else args.replication_factor,
                    parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None,
                    parse_configs(args.config))


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """`0:1,1:2` -> {0: [0, 1], 1: [1, 2]}: partitions split by ',', their replicas by ':'."""
    assignment: dict[int, list[int]] = {}
    for partition, entry in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in entry.split(":")]
        except ValueError:
            raise CommandError(f"Invalid replica assignment {text!r}: broker ids must be integers") from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise CommandError("Partition replica lists may not contain duplicate entries: "
                               + ",".join(map(str, duplicates)))
        if assignment and len(brokers) != len(assignment[0]):
            raise CommandError(f"Partition {partition} has different replication factor: {brokers}")
        assignment[partition] = brokers
    return assignment


def parse_configs(items: Sequence[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        pair = re.split(r"\s*=\s*", item)
        if len(pair) != 2:
            raise CommandError('Invalid topic config: all configs to be added must be in the format "key=val".')
        configs[pair[0].strip()] = pair[1].strip()
    return configs


async def matching_topics(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    """Topics named by --topic (all without it); CommandError when --topic matches none and --if-exists is off."""
    names = topic_filter(args.topic, args.exclude_internal,
                         await admin.list_topics(include_internal=not args.exclude_internal))
    if args.topic and not names and not args.if_exists:
        raise CommandError(f"Topic '{args.topic}' does not exist as expected")
    return names


async def on_controller(admin: AdminClient, name: str,
                        call: Callable[[], Awaitable[dict[str, TopicResult]]]) -> dict[str, TopicResult]:
    """A topic change sent to the controller, retried while it moves; ZooKeeper writes need no retry."""
    if isinstance(admin, ZkTopicAdmin):
        return await call()

    async def attempt() -> dict[str, TopicResult]:
        results = await call()
        raise_controller_moved(result.error for result in results.values())
        return results

    return await call_with_retries(admin.client, name, attempt)


async def create(admin: AdminClient, args: argparse.Namespace, topic: NewTopic | None) -> None:
    assert topic is not None
    if "." in topic.name or "_" in topic.name:
        print(COLLISION_WARNING)
    result = (await on_controller(admin, "createTopics", lambda: admin.create_topics([topic])))[topic.name]
    if result.error is not None:
        if result.error.code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            return
        raise result.error
    if not isinstance(admin, ZkTopicAdmin):
        await listed_by_bootstrap(admin, topic.name)
    print(f"Created topic {topic.name}.")


async def listed_by_bootstrap(admin: AdminClient, name: str) -> None:
    """Until the broker this tool asks for metadata lists the new topic (bounded by the tool's timeout). The
    controller answers once its own metadata has the topic; the other brokers learn it from the controller's
    UpdateMetadata a moment later, and a --describe run right after asks the bootstrap broker: in Kafka's
    kafka-topics that is a race a script can lose ("does not exist as expected")."""
    deadline = time.monotonic() + admin.client.timeout
    pause = 0.01
    while [t.error_code for t in (await admin.client.metadata([name])).topics] != [ErrorCode.NONE] \
            and time.monotonic() < deadline:
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


async def list_(admin: AdminClient, args: argparse.Namespace, _: NewTopic | None) -> None:
    names = await matching_topics(admin, args)
    marked = await marked_for_deletion(admin)
    print("\n".join(f"{name} - marked for deletion" if name in marked else name for name in names))


async def marked_for_deletion(admin: AdminClient) -> set[str]:
    """With --zookeeper, the topics whose deletion is queued and not complete, which the old ZooKeeper
    TopicCommand marks in --list and --describe; brokers no longer serve them, so --bootstrap-server lists none."""
    return await admin.marked_for_deletion() if isinstance(admin, ZkTopicAdmin) else set()


async def alter(admin: AdminClient, args: argparse.Namespace, topic: NewTopic | None) -> None:
    assert topic is not None
    names = await matching_topics(admin, args)
    if not names:
        return
    described = await admin.describe_topics(names)
    assignments = None
    if topic.replica_assignment is not None:
        replicas = list(topic.replica_assignment.values())
        assignments = {name: replicas[len(described[name].partitions):] for name in names}
    results = await on_controller(admin, "createPartitions", lambda: admin.create_partitions(
        {name: topic.num_partitions for name in names}, assignments=assignments))
    for result in results.values():
        result.raise_error()


async def delete(admin: AdminClient, args: argparse.Namespace, _: NewTopic | None) -> None:
    names = await matching_topics(admin, args)
    if not names:
        return
    marked = await marked_for_deletion(admin)
    for result in (await on_controller(admin, "deleteTopics", lambda: admin.delete_topics(names))).values():
        result.raise_error()
        if result.name in marked:  # the old ZooKeeper TopicCommand's words from here on
            print(f"Topic {result.name} is already marked for deletion.")
        elif isinstance(admin, ZkTopicAdmin):
            print(f"Topic {result.name} is marked for deletion.")
            print("Note: This will have no impact if delete.topic.enable is not set to true.")


async def describe(admin: AdminClient, args: argparse.Namespace, _: NewTopic | None) -> None:
    names = await matching_topics(admin, args)
    described = await admin.describe_topics(names)
    configs = await admin.describe_topic_configs(names)
    live_brokers = {b.node_id for b in await admin.describe_cluster()}
    options = DescribeOptions.from_args(args, live_brokers)
    marked = await marked_for_deletion(admin)
    for name in names:
        for line in options.lines(described[name], configs.get(name, []), marked=name in marked):
            print(line)


@dataclass(frozen=True, slots=True)
class DescribeOptions:
    """What --describe prints: the topic line, and which partition lines (Kafka's DescribeOptions)."""

    live_brokers: frozenset[int]
    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False
    overrides_only: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace, live_brokers: set[int]) -> DescribeOptions:
        return cls(frozenset(live_brokers), args.under_replicated_partitions, args.unavailable_partitions,
                   args.under_min_isr_partitions, args.at_min_isr_partitions, args.topics_with_overrides)

    @property
    def topic_lines(self) -> bool:
        return not (self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr)

    def lines(self, topic: TopicDescription, configs: Sequence[ConfigEntry], *, marked: bool = False) -> list[str]:
        """The lines for `topic`, each ending `MarkedForDeletion: true` when `marked` (its deletion pending)."""
        overrides = [c for c in configs if not c.is_default]
        lines = []
        if self.topic_lines and (not self.overrides_only or overrides):
            lines.append(topic_line(topic, overrides))
        if not self.overrides_only:
            min_isr = next((int(c.value) for c in configs if c.name == MIN_ISR_CONFIG and c.value), 1)
            lines += [partition_line(topic.name, partition) for partition in topic.partitions
                      if self.topic_lines or self._selected(partition, len(topic.partitions[0].replicas), min_isr)]
        return [line + MARKED_FOR_DELETION for line in lines] if marked else lines

    def _selected(self, p: PartitionInfo, replication_factor: int, min_isr: int) -> bool:
        return (self.under_replicated and len(p.isr) < replication_factor
                or self.unavailable and (p.leader is None or p.leader not in self.live_brokers)
                or self.under_min_isr and (p.leader is None or len(p.isr) < min_isr)
                or self.at_min_isr and len(p.isr) == min_isr)


MARKED_FOR_DELETION = "\tMarkedForDeletion: true"


def topic_line(topic: TopicDescription, overrides: Sequence[ConfigEntry]) -> str:
    """`Topic: T\\tTopicId: ...\\tPartitionCount: N\\tReplicationFactor: R\\tConfigs: k=v,...` (no id if zero)."""
    fields = [f"Topic: {topic.name}"]
    if topic.topic_id != ZERO_UUID:
        fields.append(f"TopicId: {topic_id_to_string(topic.topic_id)}")
    replication_factor = len(topic.partitions[0].replicas) if topic.partitions else 0
    configs = ",".join(f"{c.name}={'null' if c.value is None else c.value}" for c in overrides)
    fields += [f"PartitionCount: {len(topic.partitions)}", f"ReplicationFactor: {replication_factor}",
               f"Configs: {configs}"]
    return "\t".join(fields)


def partition_line(topic: str, p: PartitionInfo) -> str:
    """`\\tTopic: T\\tPartition: 0\\tLeader: 0\\tReplicas: 0,1\\tIsr: 0,1` (`Leader: none` without one)."""
    leader = "none" if p.leader is None else str(p.leader)
    return (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}"
            f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")


COMMANDS = {"create": create, "list": list_, "alter": alter, "delete": delete, "describe": describe}
