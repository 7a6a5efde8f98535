"""`pybroker reassign-partitions`: kafka-reassign-partitions.sh's --generate, --execute and --verify,
with its JSON file formats and output lines.

--generate proposes a placement of whole topics on a broker list (nothing changes); --execute starts
the moves of a reassignment file and prints the current assignment for a rollback; --verify tells for
each partition of the file whether its move is completed or still in progress.

A partition's optional ``log_dirs`` (one per replica, ``"any"`` or an absolute path) moves replicas
between their broker's log dirs too: --execute asks each broker (AlterReplicaLogDirs) until it accepts,
retrying while the replica is not there yet, for at most --timeout ms, and --verify reports each such
replica from DescribeLogDirs, with Kafka's lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any, Mapping, Sequence

from pybroker.common.progress import Progress
from pybroker.admin.retry import call_with_retries
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_tool,
)
from pybroker.client import AdminClient, KafkaClient
from pybroker.client.errors import KafkaClientError
from pybroker.client.log_dirs_admin import alter_replica_log_dirs, describe_log_dirs
from pybroker.common.topic import TopicPartition
from pybroker.common.metadata_errors import MetadataError
from pybroker.common.placement import assign_replicas
from pybroker.protocol.error_codes import ErrorCode

ERROR_PREFIX = "Error: "
ANY_LOG_DIR = "any"
RETRY_S = 0.1
Assignment = dict[TopicPartition, tuple[int, ...]]
Replica = tuple[TopicPartition, int]  # (partition, broker id): Kafka's TopicPartitionReplica


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
                             '"replicas":[1,2],"log_dirs":["any","/data/b"]}]}')
    parser.add_argument("--timeout", type=int, default=10000, metavar="MS",
                        help="with --execute: the longest wait for log directory moves to start (default 10000)")
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
    document = _read_json(args.reassignment_json_file)
    targets, moves = _reassignment(document), _log_dir_moves(document)
    if args.execute:
        run_admin(settings, lambda admin: _execute(admin, targets, moves, args.timeout / 1000))
    else:
        run_admin(settings, lambda admin: _verify(admin, targets, moves))
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


async def _execute(admin: AdminClient, targets: Assignment, moves: dict[Replica, str], timeout_s: float) -> None:
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
    if moves:
        await _execute_moves(admin.client, moves, timeout_s)


def _replica_order(replica: Replica) -> tuple[int, str, int]:
    return replica[1], replica[0].topic, replica[0].partition


def _replica_name(replica: Replica) -> str:
    return f"{replica[0]}-{replica[1]}"


async def _execute_moves(client: KafkaClient, moves: dict[Replica, str], timeout_s: float) -> None:
    """Kafka's executeMoves: ask again while a replica is not on its broker yet (REPLICA_NOT_AVAILABLE)."""
    pending = dict(moves)
    deadline = time.monotonic() + timeout_s
    while True:
        outcomes = await alter_replica_log_dirs(client, pending)
        started = []
        for replica in sorted(pending, key=_replica_order):
            error = outcomes.get(replica)
            if error is None and replica in outcomes:
                started.append(replica)
            elif error is not None and error.code != ErrorCode.REPLICA_NOT_AVAILABLE:
                raise CommandError(f"Failed to alter dir for {_replica_name(replica)}: {error}")
        for replica in started:
            print(f"Successfully started moving log directory to {pending.pop(replica)} for replica "
                  f"{replica[0].topic}-{replica[0].partition} with broker {replica[1]} ")
        if not pending:
            return
        if time.monotonic() >= deadline:
            plural = "" if len(pending) == 1 else "s"
            raise CommandError(f"Timed out before log directory move{plural} could be started for: "
                               + ",".join(_replica_name(r) for r in sorted(pending, key=_replica_order)))
        await asyncio.sleep(RETRY_S)


async def _verify(admin: AdminClient, targets: Assignment, moves: dict[Replica, str]) -> None:
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
    if moves:
        for line in await _move_states(admin.client, moves):
            print(line)


async def _move_states(client: KafkaClient, moves: dict[Replica, str]) -> list[str]:
    """Kafka's findLogDirMoveStates + replicaMoveStatesToString, from each broker's DescribeLogDirs."""
    brokers = sorted({broker for _, broker in moves})
    topics: dict[str, list[int]] = {}
    for tp, _ in moves:
        topics.setdefault(tp.topic, []).append(tp.partition)
    answers: dict[int, list[tuple[str, TopicPartition, bool]]] = {}
    for broker in brokers:
        try:
            described = await describe_log_dirs(client, [broker], topics)
        except KafkaClientError:
            continue
        answers[broker] = [(d.path, tp, info.is_future) for d in described[broker] if d.error is None
                           for tp, info in d.replicas.items()]
    lines = []
    for replica in sorted(moves, key=_replica_order):
        tp, broker = replica
        target, where = moves[replica], f"Partition {tp} on broker {broker}"
        if broker not in answers:
            lines.append(f"Partition {tp} cannot be found in any live log directory on broker {broker}.")
            continue
        current = next((path for path, t, future in answers[broker] if t == tp and not future), None)
        future = next((path for path, t, is_future in answers[broker] if t == tp and is_future), None)
        if current is None:
            lines.append(f"Partition {tp} is not found in any live log dir on broker {broker}. "
                         f"There is likely an offline log directory on the broker.")
        elif future is None and current == target:
            lines.append(f"Reassignment of replica {_replica_name(replica)} completed successfully.")
        elif future is None:
            lines.append(f"{where} is not being moved from log dir {current} to {target}.")
        elif future == target:
            lines.append(f"Reassignment of replica {_replica_name(replica)} is still in progress.")
        else:
            lines.append(f"{where} is being moved to log dir {future} instead of {target}.")
    return lines


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


def _log_dir_moves(document: Any) -> dict[Replica, str]:
    """The replicas whose ``log_dirs`` entry names a dir (not "any"), as Kafka's parsePartitionReassignmentData."""
    moves: dict[Replica, str] = {}
    for entry in document["partitions"]:
        tp = TopicPartition(str(entry["topic"]), int(entry["partition"]))
        replicas = [int(r) for r in entry["replicas"]]
        log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise CommandError(f"Size of replicas list {replicas} is different from size of log dirs list "
                               f"{log_dirs} for partition {tp}")
        moves.update({(tp, broker): str(path) for broker, path in zip(replicas, log_dirs) if path != ANY_LOG_DIR})
    return moves


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
