"""`pybroker reassign-partitions`: kafka-reassign-partitions.sh's --generate, --execute and --verify,
with its JSON file formats and output lines.

--generate proposes a placement of whole topics on a broker list (nothing changes); --execute starts
the moves of a reassignment file and prints the current assignment for a rollback; --verify tells for
each partition of the file whether its move is completed or still in progress.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Mapping, Sequence

from pybroker.admin.progress import Progress
from pybroker.admin.retry import call_with_retries
from pybroker.admin.tool import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_tool,
)
from pybroker.client import AdminClient
from pybroker.common.topic import TopicPartition
from pybroker.controller.election import assign_replicas
from pybroker.controller.errors import MetadataError

ERROR_PREFIX = "Error: "
Assignment = dict[TopicPartition, tuple[int, ...]]


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker reassign-partitions",
                        description="Move partitions between brokers (kafka-reassign-partitions.sh).")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--generate", action="store_true",
                         help="propose a reassignment of the topics of --topics-to-move-json-file to --broker-list")
    actions.add_argument("--execute", action="store_true", help="start the reassignment of --reassignment-json-file")
    actions.add_argument("--verify", action="store_true",
                         help="report whether the reassignment of --reassignment-json-file is complete")
    add_connection_arguments(parser)
    parser.add_argument("--topics-to-move-json-file", metavar="FILE",
                        help='with --generate: {"topics":[{"topic":"foo"}],"version":1}')
    parser.add_argument("--broker-list", metavar="0,1,...", help="with --generate: the brokers to place replicas on")
    parser.add_argument("--reassignment-json-file", metavar="FILE",
                        help='with --execute/--verify: {"version":1,"partitions":[{"topic":"foo","partition":0,'
                             '"replicas":[1,2]}]}')
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "reassign-partitions", ERROR_PREFIX, _run)


def _run(args: argparse.Namespace, settings: ClientSettings) -> int:
    if sum((args.generate, args.execute, args.verify)) != 1:
        raise UsageError("Command must include exactly one action: --generate, --execute or --verify")
    if args.generate:
        if not args.topics_to_move_json_file or not args.broker_list:
            raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
        topics = _topics_to_move(_read_json(args.topics_to_move_json_file))
        brokers = _broker_list(args.broker_list)
        run_admin(settings, lambda admin: _generate(admin, topics, brokers))
        return 0
    if not args.reassignment_json_file:
        raise UsageError(f"--{'execute' if args.execute else 'verify'} needs --reassignment-json-file")
    targets = _reassignment(_read_json(args.reassignment_json_file))
    run_admin(settings, lambda admin: (_execute if args.execute else _verify)(admin, targets))
    return 0


async def _current(admin: AdminClient, topics: Sequence[str]) -> Assignment:
    described = await admin.describe_topics(sorted(set(topics)))
    return {TopicPartition(name, p.partition): p.replicas for name, d in described.items() for p in d.partitions}


async def _generate(admin: AdminClient, topics: list[str], brokers: list[int]) -> None:
    current = await _current(admin, topics)
    racks = {b.node_id: b.rack for b in await admin.describe_cluster()}
    unknown = [b for b in brokers if b not in racks]
    if unknown:
        raise CommandError(f"The given broker list contains unknown brokers: {','.join(map(str, unknown))}")
    proposed: Assignment = {}
    for topic in sorted(set(topics)):
        partitions = sorted(tp.partition for tp in current if tp.topic == topic)
        factor = len(current[TopicPartition(topic, partitions[0])])
        try:
            plan = assign_replicas([(b, racks[b]) for b in brokers], len(partitions), factor)
        except MetadataError as exc:
            raise CommandError(str(exc)) from None
        proposed.update({TopicPartition(topic, p): replicas for p, replicas in plan.items()})
    print(f"Current partition replica assignment\n{_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{_json(proposed)}")


async def _execute(admin: AdminClient, targets: Assignment) -> None:
    ongoing = await call_with_retries(admin.client, "listPartitionReassignments", admin.list_partition_reassignments)
    if ongoing:
        raise CommandError("Cannot execute because there is an existing partition assignment.")
    current = await _current(admin, [tp.topic for tp in targets])
    missing = [str(tp) for tp in targets if tp not in current]
    if missing:
        raise CommandError(f"Topic partition(s) {', '.join(missing)} not found")
    print(f"Current partition replica assignment\n\n{_json({tp: current[tp] for tp in targets})}\n\n"
          f"Save this to use as the --reassignment-json-file option during rollback")
    results = await call_with_retries(admin.client, "alterPartitionReassignments",
                                      lambda: admin.alter_partition_reassignments(targets))
    failed = {tp: error for tp, error in results.items() if error is not None}
    if failed:
        raise CommandError("Error reassigning partition(s):\n" + "\n".join(
            f"{tp}: {error}" for tp, error in sorted(failed.items())))
    plural = "" if len(targets) == 1 else "s"
    print(f"Successfully started partition reassignment{plural} for "
          f"{','.join(str(tp) for tp in sorted(targets))}")


async def _verify(admin: AdminClient, targets: Assignment) -> None:
    ongoing = await call_with_retries(admin.client, "listPartitionReassignments",
                                      lambda: admin.list_partition_reassignments(list(targets)))
    current = await _current(admin, [tp.topic for tp in targets])
    completed = {tp for tp in targets if tp not in ongoing and current.get(tp) == targets[tp]}
    with Progress("Reassignment", len(targets), "partitions completed") as progress:
        progress.advance(len(completed))
    print("Status of partition reassignment:")
    for tp in sorted(targets):
        if tp in ongoing:
            print(f"Reassignment of partition {tp} is still in progress.")
        elif tp in completed:
            print(f"Reassignment of partition {tp} is completed.")
        else:
            print(f"There is no active reassignment of partition {tp}, but replica set is "
                  f"{','.join(map(str, current.get(tp, ())))} rather than {','.join(map(str, targets[tp]))}.")


def _json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's reassignment JSON (compact, log dirs "any")."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
         "log_dirs": ["any"] * len(replicas)} for tp, replicas in sorted(assignment.items())]},
        separators=(",", ":"))


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None


def _topics_to_move(document: Any) -> list[str]:
    try:
        topics = [str(entry["topic"]) for entry in document["topics"]]
    except (KeyError, TypeError) as exc:
        raise UsageError(f"the topics-to-move JSON needs {{\"topics\":[{{\"topic\":...}}]}}: missing {exc}") from None
    if not topics:
        raise UsageError("List of topics to reassign contains no topics")
    return topics


def _broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--broker-list must be comma-separated broker ids, got {text!r}") from None
    if not brokers or len(set(brokers)) != len(brokers):
        raise UsageError(f"Duplicate or missing broker ids in --broker-list {text!r}")
    return brokers


def _reassignment(document: Any) -> Assignment:
    try:
        targets = {TopicPartition(str(e["topic"]), int(e["partition"])): tuple(int(r) for r in e["replicas"])
                   for e in document["partitions"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"the reassignment JSON needs {{\"partitions\":[{{\"topic\",\"partition\",\"replicas\"}}]}}: "
                         f"bad or missing {exc}") from None
    if not targets:
        raise UsageError("Partition reassignment list cannot be empty")
    return targets
